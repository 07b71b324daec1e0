/*
 * bench_upload.cu
 *	  Ways to bring 512 MB of rows that other processes wrote into shared
 *	  memory (as kmeans_fit's parallel workers do, src/parallel_read.c) onto
 *	  the GPU, each timed on its own: why the parallel read for a GPU fit
 *	  drains a small ring registered with CUDA rather than one segment for
 *	  every row.
 *
 *	  A segment is made as PostgreSQL makes a POSIX one (shm_open, ftruncate,
 *	  posix_fallocate, mmap), and 8 forked writers fill it, as 8 workers
 *	  would; then this process, which has not touched its pages yet, copies
 *	  it to the device:
 *	    pageable    cudaMemcpy straight from the segment
 *	    register    cudaHostRegister of the segment (after, or before the
 *	                writers), then a copy from it
 *	    staged      memcpy into 32 MB pinned buffers, each copied on
 *	                (what the one-backend read of rows already in host
 *	                memory does)
 *	  and, for scale, the copy from pinned memory and cudaHostAlloc itself.
 *
 *	  bin/bench_upload    (no arguments; one GPU)
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bench_check.h"

#define SEGMENT_BYTES ((size_t) 576 << 20)	/* the read's segment for 1M rows of 128 floats */
#define DATA_BYTES ((size_t) 512 << 20)
#define STAGE_BYTES ((size_t) 32 << 20)
#define WRITERS 8

static double
now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* A fresh shared segment, mapped here; *ms the time to make it. */
static char *
segment_create(const char *name, double *ms)
{
	double		t = now_ms();
	int			fd;
	char	   *p;

	shm_unlink(name);
	fd = shm_open(name, O_CREAT | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, SEGMENT_BYTES) != 0 || posix_fallocate(fd, 0, SEGMENT_BYTES) != 0)
	{
		perror("segment");
		exit(1);
	}
	p = (char *) mmap(NULL, SEGMENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
	{
		perror("mmap");
		exit(1);
	}
	*ms = now_ms() - t;
	return p;
}

static void
segment_drop(const char *name, char *p)
{
	munmap(p, SEGMENT_BYTES);
	shm_unlink(name);
}

/* WRITERS forked processes fill DATA_BYTES of p, a share each; the time. */
static double
writers_fill(char *p)
{
	double		t = now_ms();

	for (int w = 0; w < WRITERS; w++)
		if (fork() == 0)
		{
			size_t		share = DATA_BYTES / WRITERS;
			float	   *f = (float *) (p + w * share);

			for (size_t i = 0; i < share / sizeof(float); i++)
				f[i] = (float) (i & 1023);
			_exit(0);
		}
	for (int w = 0; w < WRITERS; w++)
		wait(NULL);
	return now_ms() - t;
}

static double
copy_ms(float *d, const char *p)
{
	double		t = now_ms();

	CK(cudaMemcpy(d, p, DATA_BYTES, cudaMemcpyHostToDevice));
	return now_ms() - t;
}

int
main(void)
{
	float	   *d;
	float	   *pin[3];
	char	   *p;
	double		t,
				made;
	cudaStream_t s;
	cudaEvent_t ev[3];
	cudaDeviceProp prop;

	CK(cudaFree(0));
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("%s; %zu MB written by %d processes into a %zu MB segment\n", prop.name,
		   DATA_BYTES >> 20, WRITERS, SEGMENT_BYTES >> 20);
	CK(cudaMalloc((void **) &d, SEGMENT_BYTES));
	CK(cudaStreamCreate(&s));
	t = now_ms();
	for (int i = 0; i < 3; i++)
		CK(cudaHostAlloc((void **) &pin[i], STAGE_BYTES, cudaHostAllocDefault));
	printf("cudaHostAlloc of 3 x 32 MB:                         %7.1f ms\n", now_ms() - t);
	for (int i = 0; i < 3; i++)
		CK(cudaEventCreate(&ev[i]));

	p = segment_create("/kmg_bench_upload", &made);
	printf("segment made (posix_fallocate zeroes its pages):    %7.1f ms\n", made);
	printf("filled by the writers:                              %7.1f ms\n", writers_fill(p));
	printf("pageable copy, this process's first touch:          %7.1f ms\n", copy_ms(d, p));
	printf("pageable copy again:                                %7.1f ms\n", copy_ms(d, p));
	segment_drop("/kmg_bench_upload", p);

	p = segment_create("/kmg_bench_upload", &made);
	writers_fill(p);
	t = now_ms();
	CK(cudaHostRegister(p, SEGMENT_BYTES, cudaHostRegisterDefault));
	printf("cudaHostRegister after the writers:                 %7.1f ms\n", now_ms() - t);
	printf("copy from the registered segment:                   %7.1f ms\n", copy_ms(d, p));
	t = now_ms();
	CK(cudaHostUnregister(p));
	printf("cudaHostUnregister:                                 %7.1f ms\n", now_ms() - t);
	segment_drop("/kmg_bench_upload", p);

	p = segment_create("/kmg_bench_upload", &made);
	t = now_ms();
	CK(cudaHostRegister(p, SEGMENT_BYTES, cudaHostRegisterDefault));
	printf("cudaHostRegister of a fresh segment, before:        %7.1f ms\n", now_ms() - t);
	printf("filled by the writers, registered:                  %7.1f ms\n", writers_fill(p));
	CK(cudaHostUnregister(p));
	segment_drop("/kmg_bench_upload", p);

	p = segment_create("/kmg_bench_upload", &made);
	writers_fill(p);
	for (int pass = 0; pass < 2; pass++)
	{
		size_t		off = 0;
		int			b = 0;

		t = now_ms();
		while (off < DATA_BYTES)
		{
			size_t		n = DATA_BYTES - off < STAGE_BYTES ? DATA_BYTES - off : STAGE_BYTES;

			CK(cudaEventSynchronize(ev[b]));
			memcpy(pin[b], p + off, n);
			CK(cudaMemcpyAsync((char *) d + off, pin[b], n, cudaMemcpyHostToDevice, s));
			CK(cudaEventRecord(ev[b], s));
			off += n;
			b = (b + 1) % 3;
		}
		CK(cudaStreamSynchronize(s));
		printf("staged through pinned buffers%s %7.1f ms\n",
			   pass == 0 ? ", first touch:          " : " again:                ", now_ms() - t);
	}
	segment_drop("/kmg_bench_upload", p);

	t = now_ms();
	for (size_t off = 0; off < DATA_BYTES; off += STAGE_BYTES)
		CK(cudaMemcpyAsync((char *) d + off, pin[(off / STAGE_BYTES) % 3], STAGE_BYTES,
						   cudaMemcpyHostToDevice, s));
	CK(cudaStreamSynchronize(s));
	printf("copy from pinned memory:                            %7.1f ms\n", now_ms() - t);
	return 0;
}
