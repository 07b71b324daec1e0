/*
 * spill.c
 *	  Partial aggregate states that travel between parallel processes as
 *	  files.
 *
 * A parallel worker hands its partial kmeans state to the leader as a
 * bytea, and a bytea holds at most 1 GB; a worker that read more rows than
 * that writes them to a file instead and sends the file's name.  The files
 * live in base/pgsql_tmp/pgsql_tmp_kmeans.<leader pid>/, so that
 *	- the leader deletes each file as soon as it has read it,
 *	- the leader removes the whole directory at the end of its transaction,
 *	  which covers statements that failed before reading every file, and
 *	- a server restart removes anything left by a crash, as it does for
 *	  every file whose name starts with pgsql_tmp.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/proc.h"

#include "kmeans_gpu.h"

#define KM_SPILL_ROOT "base/" PG_TEMP_FILES_DIR
#define KM_SPILL_DIR_FORMAT KM_SPILL_ROOT "/" PG_TEMP_FILE_PREFIX "_kmeans.%d"

static int	spill_counter = 0;

/* The process whose transaction owns this process's spill files. */
static int
LeaderPid(void)
{
	if (MyProc != NULL && MyProc->lockGroupLeader != NULL)
		return MyProc->lockGroupLeader->pid;
	return MyProcPid;
}

/*
 * Remove the directory of this backend's spill files, if there is one.
 * Runs at transaction end, also on abort, so it never raises an ERROR.
 */
static void
RemoveSpillDirectory(void)
{
	char		dir[MAXPGPATH];
	struct stat st;
	DIR		   *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), KM_SPILL_DIR_FORMAT, MyProcPid);
	if (stat(dir, &st) != 0)
		return;

	d = opendir(dir);
	if (d != NULL)
	{
		while ((de = readdir(d)) != NULL)
		{
			char		path[MAXPGPATH];

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (unlink(path) != 0 && errno != ENOENT)
				elog(LOG, "could not remove kmeans spill file \"%s\": %m", path);
		}
		closedir(d);
	}
	if (rmdir(dir) != 0 && errno != ENOENT)
		elog(LOG, "could not remove kmeans spill directory \"%s\": %m", dir);
}

static void
KmSpillXactCallback(XactEvent event, void *arg)
{
	/* workers' files belong to the leader, which cleans up after them */
	if (IsParallelWorker())
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		RemoveSpillDirectory();
}

void
KmSpillInit(void)
{
	RegisterXactCallback(KmSpillXactCallback, NULL);
}

/*
 * Create a new spill file for the leader; returns its path and sets *fd.
 */
char *
KmSpillCreate(int *fd)
{
	char		dir[MAXPGPATH];
	char		path[MAXPGPATH];

	snprintf(dir, sizeof(dir), KM_SPILL_DIR_FORMAT, LeaderPid());
	if (MakePGDirectory(KM_SPILL_ROOT) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", KM_SPILL_ROOT)));
	if (MakePGDirectory(dir) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", dir)));

	snprintf(path, sizeof(path), "%s/%d.%d", dir, MyProcPid, spill_counter++);
	*fd = OpenTransientFile(path, O_CREAT | O_EXCL | O_WRONLY | PG_BINARY);
	if (*fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", path)));
	return pstrdup(path);
}

void
KmSpillWrite(int fd, const char *path, const void *data, Size len)
{
	const char *p = data;

	while (len > 0)
	{
		ssize_t		written = write(fd, p, Min(len, (Size) 1 << 30));

		if (written < 0)
		{
			if (errno == EINTR)
				continue;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write file \"%s\": %m", path)));
		}
		p += written;
		len -= written;
	}
}

void
KmSpillClose(int fd, const char *path)
{
	if (CloseTransientFile(fd) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", path)));
}

int
KmSpillOpen(const char *path)
{
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);

	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open kmeans spill file \"%s\": %m", path)));
	return fd;
}

void
KmSpillRead(int fd, const char *path, void *data, Size len)
{
	char	   *p = data;

	while (len > 0)
	{
		ssize_t		got = read(fd, p, Min(len, (Size) 1 << 30));

		if (got < 0)
		{
			if (errno == EINTR)
				continue;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path)));
		}
		if (got == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("kmeans spill file \"%s\" is shorter than expected", path)));
		p += got;
		len -= got;
	}
}

/* Close and delete a spill file once read. */
void
KmSpillRemove(int fd, const char *path)
{
	CloseTransientFile(fd);
	if (unlink(path) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
}
