/*
 * sharded.c
 *	  kmeans_fit_sharded: one model over a table sharded across PostgreSQL
 *	  servers, computed where each part lives, surviving the loss of a
 *	  server mid-fit.
 *
 * The coordinator runs the CPU engine's fit loop with the rows elsewhere:
 * every step that needs the rows is one parallel call on all shards
 * through PL/Proxy (RUN ON ALL, the functions of the kmeans_gpu_sharded
 * extension, which reach shard.c on each shard), whose answers are merged
 * here exactly (kmeans_partial, km_kmpar.h).  Since every answer is a
 * function of the set of rows alone, the model is the one kmeans_fit
 * computes on all rows in one place, bit for bit, and a call repeated on
 * another server holding the same rows gives the same answer.
 *
 * A failed call (connection lost, a shard's server gone) is tried again,
 * kmeans_gpu.shard_retries times with a short back-off, each time on fresh
 * connections: PL/Proxy reconnects, and a multi-host conninfo lands on the
 * standby, which loads its copy of the rows (checked against the
 * fingerprint the fit started with) and goes on.  Errors a retry cannot
 * mend (permissions, missing tables, different rows) end the fit at once,
 * naming the shard; so does a shard still failing when the retries are
 * spent, with the last message its connection gave.  Cancel and
 * statement_timeout stop the shard calls (PL/Proxy cancels the remote
 * queries); every way out frees the shards' rows.
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "kmeans_gpu.h"
#include "km_hash.h"
#include "km_kmpar.h"
#include "km_step.h"
#include "km_xsum.h"

int			kmeans_shard_retries = 3;

/*
 * Back-off before the second try of a call; the first retry is immediate (a
 * lost connection is seen at once, and the standby is already there), and
 * each later one waits twice as long as the one before.
 */
#define KM_SHARD_BACKOFF_MS 250

static int
BackoffMs(int attempt)
{
	return attempt == 0 ? 0 : KM_SHARD_BACKOFF_MS << (attempt - 1);
}

/* A fit across the shards of one cluster. */
typedef struct KmSharded
{
	const char *cluster;
	const char *ns;				/* schema of the proxy functions, quoted */
	int			nparts;
	char	  **where;			/* per shard: its host and port, for messages */
	Datum		parts;			/* int4[] 0 .. nparts - 1 */
	int64		fit_id;
	Datum		source;
	Datum		column;
	Datum		weight;			/* or 0 */
	Datum		metric;
	Datum		storage;
	Datum		fingerprints;	/* int8[] once loaded, else 0 */
	int			dim;
	MemoryContext context;		/* the answers of the current call */
	double	   *ms;				/* per shard, the last call */
	int			retries;		/* tries again in the last call */
	int			total_retries;
} KmSharded;

/* The answers of one call: one row per shard, by shard. */
typedef struct KmAnswers
{
	TupleDesc	desc;
	HeapTuple  *row;			/* nparts */
} KmAnswers;

/* ---- messages ---- */

/*
 * s without anything that looks like a password (a conninfo pasted into a
 * message by a library): "password=..." becomes "password=********".
 */
static char *
Scrub(const char *s)
{
	StringInfoData out;
	const char *p = s;

	initStringInfo(&out);
	while (*p)
	{
		if (pg_strncasecmp(p, "password", 8) == 0)
		{
			const char *q = p + 8;

			while (*q == ' ')
				q++;
			if (*q == '=')
			{
				q++;
				while (*q == ' ')
					q++;
				appendStringInfoString(&out, "password=********");
				if (*q == '\'')
				{
					for (q++; *q && *q != '\''; q++)
						if (*q == '\\' && q[1])
							q++;
					if (*q)
						q++;
				}
				else
					while (*q && *q != ' ' && *q != '\n' && *q != '\t')
						q++;
				p = q;
				continue;
			}
		}
		appendStringInfoChar(&out, *p++);
	}
	return out.data;
}

/*
 * A conninfo's host and port, for naming a shard in messages (never the
 * rest: it may hold a password).
 */
static char *
ConninfoWhere(const char *conninfo)
{
	StringInfoData out;
	const char *p = conninfo;

	initStringInfo(&out);
	while (*p)
	{
		const char *kstart;
		int			klen;
		StringInfoData val;

		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		if (!*p)
			break;
		kstart = p;
		while (*p && *p != '=' && *p != ' ')
			p++;
		klen = p - kstart;
		while (*p == ' ')
			p++;
		if (*p != '=')
			break;
		p++;
		while (*p == ' ')
			p++;
		initStringInfo(&val);
		if (*p == '\'')
		{
			for (p++; *p && *p != '\''; p++)
			{
				if (*p == '\\' && p[1])
					p++;
				appendStringInfoChar(&val, *p);
			}
			if (*p)
				p++;
		}
		else
			while (*p && *p != ' ' && *p != '\t' && *p != '\n')
			{
				if (*p == '\\' && p[1])
					p++;
				appendStringInfoChar(&val, *p++);
			}
		if ((klen == 4 && strncmp(kstart, "host", 4) == 0) ||
			(klen == 4 && strncmp(kstart, "port", 4) == 0) ||
			(klen == 6 && strncmp(kstart, "dbname", 6) == 0))
			appendStringInfo(&out, "%s%.*s=%s", out.len > 0 ? " " : "", klen, kstart, val.data);
	}
	return out.len > 0 ? out.data : pstrdup("default connection");
}

/*
 * The message of a failed call: PL/Proxy's prefix dropped ("PL/Proxy
 * function f(n): " and, for an error a shard raised, "[db] REMOTE ERROR:
 * "), passwords scrubbed.
 */
static char *
CallMessage(const char *msg)
{
	const char *p = strstr(msg, "REMOTE ERROR: ");

	if (p != NULL)
		return Scrub(p + strlen("REMOTE ERROR: "));
	if (strncmp(msg, "PL/Proxy function ", 18) == 0 && (p = strstr(msg, "): ")) != NULL)
		return Scrub(p + 3);
	return Scrub(msg);
}

/*
 * Whether a failed call may succeed on a fresh connection: the connection
 * failed (PL/Proxy reports libpq's failures as internal errors, without a
 * remote error), or the shard's server is going down or starting up.
 * What a shard itself refused (permissions, tables, data, a fingerprint
 * that differs) fails the same way every time.
 */
static bool
Retryable(const ErrorData *e)
{
	const char *sqlstate = unpack_sql_state(e->sqlerrcode);

	if (e->sqlerrcode == ERRCODE_QUERY_CANCELED)
		return false;
	if (e->sqlerrcode == ERRCODE_INTERNAL_ERROR && e->message != NULL &&
		strncmp(e->message, "PL/Proxy function ", 18) == 0 &&
		strstr(e->message, "REMOTE ERROR") == NULL)
		return true;
	return strncmp(sqlstate, "08", 2) == 0 || e->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
		e->sqlerrcode == ERRCODE_CRASH_SHUTDOWN || e->sqlerrcode == ERRCODE_CANNOT_CONNECT_NOW;
}

/*
 * Raise what a shard refused, naming the shard and the cluster (the shard
 * put "shard N: " in front of its message), with its SQLSTATE, detail and
 * hint.
 */
static void
RaiseShardError(KmSharded *ks, ErrorData *e) pg_attribute_noreturn();

static void
RaiseShardError(KmSharded *ks, ErrorData *e)
{
	char	   *msg = CallMessage(e->message);
	int			part;
	int			used = 0;

	if (sscanf(msg, "shard %d: %n", &part, &used) == 1 && used > 0 &&
		part >= 0 && part < ks->nparts)
		msg = psprintf("shard %d of cluster \"%s\" (%s): %s", part, ks->cluster,
					   ks->where[part], msg + used);
	else
		msg = psprintf("a shard of cluster \"%s\": %s", ks->cluster, msg);
	e->message = msg;
	if (e->detail != NULL)
		e->detail = Scrub(strncmp(e->detail, "Remote detail: ", 15) == 0 ?
						  e->detail + 15 : e->detail);
	if (e->hint != NULL)
		e->hint = Scrub(strncmp(e->hint, "Remote hint: ", 13) == 0 ? e->hint + 13 : e->hint);
	e->context = NULL;
	e->internalquery = NULL;
	e->cursorpos = 0;
	e->internalpos = 0;
	ReThrowError(e);
}

/* ---- calls on the shards ---- */

/*
 * Run query (a proxy function of kmeans_gpu_sharded) in a subtransaction;
 * returns NULL with the answers copied to ks->context, or the error.
 */
static ErrorData *
TryCall(KmSharded *ks, const char *sql, int nargs, Oid *types, Datum *values,
		const char *nulls, KmAnswers *out)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	ErrorData  *edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		int			ret = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);

		if (ret != SPI_OK_SELECT)
			elog(ERROR, "kmeans shard call failed: %s", SPI_result_code_string(ret));
		if (out != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(ks->context);

			out->desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
			out->row = palloc0(sizeof(HeapTuple) * ks->nparts);
			for (uint64 i = 0; i < SPI_processed; i++)
			{
				HeapTuple	t = SPI_tuptable->vals[i];
				bool		isnull;
				int			part = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull));

				if (isnull || part < 0 || part >= ks->nparts || out->row[part] != NULL)
					elog(ERROR, "kmeans shard call: an answer from shard %d is unexpected", part);
				out->row[part] = heap_copytuple(t);
			}
			MemoryContextSwitchTo(old);
			for (int p = 0; p < ks->nparts; p++)
				if (out->row[p] == NULL)
					elog(ERROR, "kmeans shard call: shard %d did not answer", p);
		}
		SPI_freetuptable(SPI_tuptable);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_END_TRY();
	return edata;
}

/* Wait ms milliseconds, or less if interrupted (a cancel raises). */
static void
Backoff(int ms)
{
	if (ms <= 0)
	{
		CHECK_FOR_INTERRUPTS();
		return;
	}
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* "SELECT * FROM ns.func($1, ..., $nargs)" */
static char *
CallSql(KmSharded *ks, const char *func, int nargs)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT * FROM %s.%s(", ks->ns, func);
	for (int i = 1; i <= nargs; i++)
		appendStringInfo(&sql, "%s$%d", i > 1 ? ", " : "", i);
	appendStringInfoChar(&sql, ')');
	return sql.data;
}

/*
 * The shard that fails: each one asked alone for its status, the first to
 * fail named with its message.
 */
static void
RaiseLostShard(KmSharded *ks, ErrorData *last) pg_attribute_noreturn();

static void
RaiseLostShard(KmSharded *ks, ErrorData *last)
{
	char	   *sql = CallSql(ks, "kmeans_sharded_status", 2);
	Oid			types[2] = {TEXTOID, INT4ARRAYOID};

	for (int p = 0; p < ks->nparts; p++)
	{
		Datum		one = Int32GetDatum(p);
		Datum		values[2];
		ErrorData  *e;

		values[0] = CStringGetTextDatum(ks->cluster);
		values[1] = PointerGetDatum(construct_array(&one, 1, INT4OID, 4, true, TYPALIGN_INT));
		e = TryCall(ks, sql, 2, types, values, NULL, NULL);
		if (e != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("shard %d of cluster \"%s\" (%s) failed, also after %d retries",
							p, ks->cluster, ks->where[p], kmeans_shard_retries),
					 errdetail("The last error: %s", CallMessage(e->message))));
	}
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("a call on the shards of cluster \"%s\" failed, also after %d retries",
					ks->cluster, kmeans_shard_retries),
			 errdetail("The last error: %s", CallMessage(last->message))));
}

/*
 * One call of func on every shard, (cluster, parts, args...), tried again
 * on fresh connections as kmeans_gpu.shard_retries says; the answers by
 * shard in *out.  Column 1 of every answer is the shard's number; the
 * column ms_col holds its milliseconds.
 */
static void
ShardCall(KmSharded *ks, const char *func, int nargs, Oid *types, Datum *values,
		  const char *nulls, int ms_col, KmAnswers *out)
{
	char	   *sql = CallSql(ks, func, nargs);

	ks->retries = 0;
	MemoryContextReset(ks->context);
	for (int attempt = 0;; attempt++)
	{
		ErrorData  *e = TryCall(ks, sql, nargs, types, values, nulls, out);

		if (e == NULL)
			break;
		if (e->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(e);
		if (!Retryable(e))
			RaiseShardError(ks, e);
		if (attempt >= kmeans_shard_retries)
			RaiseLostShard(ks, e);
		ks->retries++;
		ks->total_retries++;
		if (kmeans_verbose)
			ereport(INFO,
					(errmsg("kmeans_fit_sharded: a call on the shards failed (try %d of %d), trying again %s: %s",
							attempt + 1, kmeans_shard_retries + 1,
							BackoffMs(attempt) == 0 ? "at once" :
							psprintf("in %.2f s", (double) BackoffMs(attempt) / 1000.0),
							CallMessage(e->message))));
		FreeErrorData(e);
		Backoff(BackoffMs(attempt));
		MemoryContextReset(ks->context);
	}
	for (int p = 0; p < ks->nparts; p++)
	{
		bool		isnull;
		Datum		v = heap_getattr(out->row[p], ms_col, out->desc, &isnull);

		ks->ms[p] = isnull ? 0.0 : DatumGetFloat8(v);
	}
}

/* Column col of shard p's answer (NULL not allowed). */
static Datum
Answer(const KmAnswers *a, int p, int col)
{
	bool		isnull;
	Datum		v = heap_getattr(a->row[p], col, a->desc, &isnull);

	if (isnull)
		elog(ERROR, "kmeans shard call: shard %d answered NULL in column %d", p, col);
	return v;
}

/* The leading arguments of every call after the first: the fit and its rows. */
static int
FitArgs(KmSharded *ks, Oid *types, Datum *values, char *nulls)
{
	types[0] = TEXTOID;
	values[0] = CStringGetTextDatum(ks->cluster);
	types[1] = INT4ARRAYOID;
	values[1] = ks->parts;
	types[2] = INT8OID;
	values[2] = Int64GetDatum(ks->fit_id);
	types[3] = TEXTOID;
	values[3] = ks->source;
	types[4] = TEXTOID;
	values[4] = ks->column;
	types[5] = TEXTOID;
	values[5] = ks->weight;
	nulls[5] = ks->weight == (Datum) 0 ? 'n' : ' ';
	types[6] = TEXTOID;
	values[6] = ks->metric;
	types[7] = TEXTOID;
	values[7] = ks->storage;
	types[8] = INT8ARRAYOID;
	values[8] = ks->fingerprints;
	nulls[8] = ks->fingerprints == (Datum) 0 ? 'n' : ' ';
	for (int i = 0; i < 9; i++)
		if (i != 5 && i != 8)
			nulls[i] = ' ';
	return 9;
}

/* k x dim floats as a real[][] argument. */
static Datum
CentroidsArg(const float *c, int k, int dim)
{
	Datum	   *elems = palloc_extended(sizeof(Datum) * (Size) k * dim, MCXT_ALLOC_HUGE);
	int			dims[2] = {k, dim};
	int			lbs[2] = {1, 1};
	ArrayType  *arr;

	for (Size i = 0; i < (Size) k * dim; i++)
		elems[i] = Float4GetDatum(c[i]);
	arr = construct_md_array(elems, NULL, 2, dims, lbs, FLOAT4OID, 4, true, TYPALIGN_INT);
	pfree(elems);
	return PointerGetDatum(arr);
}

/* The shards' times of the last call, for kmeans_gpu.verbose. */
static char *
ShardTimes(KmSharded *ks)
{
	StringInfoData s;

	initStringInfo(&s);
	for (int p = 0; p < ks->nparts; p++)
		appendStringInfo(&s, "%sshard %d %.1f ms", p > 0 ? ", " : "", p, ks->ms[p]);
	appendStringInfo(&s, "; %d %s", ks->retries, ks->retries == 1 ? "retry" : "retries");
	return s.data;
}

/* ---- the cluster ---- */

/*
 * The PL/Proxy cluster named cluster: a server of the plproxy foreign-data
 * wrapper the caller may use, with partitions p0 .. pN-1.
 */
static void
OpenCluster(KmSharded *ks, const char *cluster)
{
	ForeignServer *server = GetForeignServerByName(cluster, true);
	ForeignDataWrapper *fdw;
	AclResult	acl;
	ListCell   *lc;
	int			nparts = 0;

	if (server == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cluster \"%s\" does not exist", cluster),
				 errhint("A cluster is a PL/Proxy server: CREATE SERVER %s FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '...', p1 '...').",
						 quote_identifier(cluster))));
	fdw = GetForeignDataWrapper(server->fdwid);
	if (strcmp(fdw->fdwname, "plproxy") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("server \"%s\" is not a PL/Proxy cluster", cluster),
				 errdetail("Its foreign-data wrapper is \"%s\".", fdw->fdwname)));
#if PG_VERSION_NUM >= 160000
	acl = object_aclcheck(ForeignServerRelationId, server->serverid, GetUserId(), ACL_USAGE);
#else
	acl = pg_foreign_server_aclcheck(server->serverid, GetUserId(), ACL_USAGE);
#endif
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_FOREIGN_SERVER, server->servername);

	foreach(lc, server->options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		const char *n = def->defname;

		if (n[0] == 'p' && n[1] >= '0' && n[1] <= '9' && strspn(n + 1, "0123456789") == strlen(n + 1))
			nparts++;
	}
	if (nparts == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cluster \"%s\" has no partitions", cluster),
				 errhint("Give them as options p0, p1, ...")));
	ks->cluster = cluster;
	ks->nparts = nparts;
	ks->where = palloc0(sizeof(char *) * nparts);
	foreach(lc, server->options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		const char *n = def->defname;
		int			p;

		if (n[0] == 'p' && n[1] >= '0' && n[1] <= '9' && strspn(n + 1, "0123456789") == strlen(n + 1) &&
			(p = atoi(n + 1)) < nparts)
			ks->where[p] = ConninfoWhere(defGetString(def));
	}
	for (int p = 0; p < nparts; p++)
		if (ks->where[p] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cluster \"%s\" has %d partitions but no option p%d", cluster, nparts, p)));
	{
		Datum	   *elems = palloc(sizeof(Datum) * nparts);

		for (int p = 0; p < nparts; p++)
			elems[p] = Int32GetDatum(p);
		ks->parts = PointerGetDatum(construct_array(elems, nparts, INT4OID, 4, true, TYPALIGN_INT));
	}
	ks->ms = palloc0(sizeof(double) * nparts);
}

/* ---- loading ---- */

typedef struct KmShardedRows
{
	int64		n;
	int64		n_skipped;
	bool		weight_positive;
} KmShardedRows;

/*
 * Load every shard's rows for the fit: their counts, one vector length for
 * all, and the fingerprints later calls check replacements against.
 */
static void
LoadShards(KmSharded *ks, KmShardedRows *rows)
{
	Oid			types[9];
	Datum		values[9];
	char		nulls[9];
	KmAnswers	a;
	Datum	   *fps = palloc(sizeof(Datum) * ks->nparts);
	TimestampTz start = GetCurrentTimestamp();
	int			nargs = FitArgs(ks, types, values, nulls);

	ShardCall(ks, "kmeans_sharded_load", nargs, types, values, nulls, 7, &a);
	memset(rows, 0, sizeof(*rows));
	ks->dim = 0;
	for (int p = 0; p < ks->nparts; p++)
	{
		int64		n = DatumGetInt64(Answer(&a, p, 2));
		int			dim = DatumGetInt32(Answer(&a, p, 4));

		rows->n += n;
		rows->n_skipped += DatumGetInt64(Answer(&a, p, 3));
		rows->weight_positive |= DatumGetBool(Answer(&a, p, 6));
		fps[p] = Answer(&a, p, 5);
		if (n > 0)
		{
			if (ks->dim == 0)
				ks->dim = dim;
			else if (dim != ks->dim)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("vectors have different lengths on the shards of cluster \"%s\": %d and %d",
								ks->cluster, ks->dim, dim),
						 errdetail("Shard %d (%s) has vectors of %d values.", p, ks->where[p], dim)));
		}
	}
	ks->fingerprints = PointerGetDatum(construct_array(fps, ks->nparts, INT8OID, 8,
													   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (kmeans_verbose)
		ereport(INFO,
				(errmsg("kmeans_fit_sharded: %d shards loaded " INT64_FORMAT " rows (" INT64_FORMAT " skipped) of %d values in %.3f s; %s",
						ks->nparts, rows->n, rows->n_skipped, ks->dim,
						(double) (GetCurrentTimestamp() - start) / 1e6, ShardTimes(ks))));
}

/* Free the shards' rows; quietly, since this also runs on the way out of an error. */
static void
EndShards(KmSharded *ks)
{
	Oid			types[3] = {TEXTOID, INT4ARRAYOID, INT8OID};
	Datum		values[3];
	ErrorData  *e;

	values[0] = CStringGetTextDatum(ks->cluster);
	values[1] = ks->parts;
	values[2] = Int64GetDatum(ks->fit_id);
	e = TryCall(ks, CallSql(ks, "kmeans_sharded_end", 3), 3, types, values, NULL, NULL);
	if (e != NULL)
		FreeErrorData(e);
}

/* ---- k-means|| across the shards ---- */

typedef struct KmShardedSeed
{
	KmSharded  *ks;
	uint64		seed;
	int			run;
	const float *cands;			/* km_kmpar_run's candidates, nknown of them folded */
	int			nknown;
	ErrorData  *error;			/* raised inside an operation */
} KmShardedSeed;

/* The candidates the shards fold before answering, or NULL. */
static Datum
SeedCandidates(KmShardedSeed *ss, int ncand, bool *isnull)
{
	*isnull = ncand == 0;
	return ncand == 0 ? (Datum) 0 : CentroidsArg(ss->cands, ncand, ss->ks->dim);
}

typedef struct KmDrawn
{
	double		key;
	uint64		hash;
	float		w;
	const float *x;
} KmDrawn;

static int
DrawnCompare(const void *a, const void *b)
{
	const KmDrawn *x = (const KmDrawn *) a;
	const KmDrawn *y = (const KmDrawn *) b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return 0;
}

/*
 * The m smallest keys over all shards: each shard's m smallest, merged by
 * (key, hash).  Also what random init draws (use_cost 0, stream (seed,
 * run, 0), m = k).
 */
static int
DrawShards(KmShardedSeed *ss, uint64 stream, bool use_cost, int m, double *key,
		   uint64 *hash, float *w, float *x)
{
	KmSharded  *ks = ss->ks;
	Oid			types[15];
	Datum		values[15];
	char		nulls[15];
	KmAnswers	a;
	KmDrawn    *all;
	int			nall = 0;
	int			total = 0;
	bool		isnull;
	int			f = FitArgs(ks, types, values, nulls);

	/* then seed, run, candidates, stream, use_cost, m */
	types[f] = INT8OID;
	values[f] = Int64GetDatum((int64) ss->seed);
	types[f + 1] = INT4OID;
	values[f + 1] = Int32GetDatum(ss->run);
	types[f + 2] = FLOAT4ARRAYOID;
	values[f + 2] = SeedCandidates(ss, ss->nknown, &isnull);
	types[f + 3] = INT8OID;
	values[f + 3] = Int64GetDatum((int64) stream);
	types[f + 4] = BOOLOID;
	values[f + 4] = BoolGetDatum(use_cost);
	types[f + 5] = INT4OID;
	values[f + 5] = Int32GetDatum(m);
	for (int i = f; i < f + 6; i++)
		nulls[i] = ' ';
	nulls[f + 2] = isnull ? 'n' : ' ';
	ShardCall(ks, "kmeans_sharded_draw", f + 6, types, values, nulls, 6, &a);
	for (int p = 0; p < ks->nparts; p++)
		total += ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(Answer(&a, p, 2))),
								ARR_DIMS(DatumGetArrayTypeP(Answer(&a, p, 2))));
	all = palloc(sizeof(KmDrawn) * Max(total, 1));
	for (int p = 0; p < ks->nparts; p++)
	{
		ArrayType  *ak = DatumGetArrayTypeP(Answer(&a, p, 2));
		ArrayType  *ah = DatumGetArrayTypeP(Answer(&a, p, 3));
		ArrayType  *aw = DatumGetArrayTypeP(Answer(&a, p, 4));
		ArrayType  *ax = DatumGetArrayTypeP(Answer(&a, p, 5));
		int			n = ArrayGetNItems(ARR_NDIM(ak), ARR_DIMS(ak));

		if (ArrayGetNItems(ARR_NDIM(ah), ARR_DIMS(ah)) != n ||
			ArrayGetNItems(ARR_NDIM(aw), ARR_DIMS(aw)) != n ||
			ArrayGetNItems(ARR_NDIM(ax), ARR_DIMS(ax)) != n * ks->dim ||
			ARR_HASNULL(ak) || ARR_HASNULL(ah) || ARR_HASNULL(aw) || ARR_HASNULL(ax))
			elog(ERROR, "kmeans shard call: shard %d drew rows of the wrong shape", p);
		for (int i = 0; i < n; i++, nall++)
		{
			all[nall].key = ((double *) ARR_DATA_PTR(ak))[i];
			all[nall].hash = (uint64) ((int64 *) ARR_DATA_PTR(ah))[i];
			all[nall].w = ((float *) ARR_DATA_PTR(aw))[i];
			all[nall].x = (float *) ARR_DATA_PTR(ax) + (Size) i * ks->dim;
		}
	}
	qsort(all, nall, sizeof(KmDrawn), DrawnCompare);
	if (nall > m)
		nall = m;
	for (int i = 0; i < nall; i++)
	{
		if (key != NULL)
			key[i] = all[i].key;
		if (hash != NULL)
			hash[i] = all[i].hash;
		if (w != NULL)
			w[i] = all[i].w;
		memcpy(x + (Size) i * ks->dim, all[i].x, sizeof(float) * ks->dim);
	}
	return nall;
}

/*
 * km_kmpar_ops on the shards.  An operation that raises keeps the error
 * for the caller to raise once km_kmpar_run has returned (engine code
 * must not be left by a longjmp).
 */
static km_status
SeedKeys(void *arg, uint64_t stream, int use_cost, int m, double *key, uint64_t *hash,
		 float *w, float *x, int *nout, km_error *error)
{
	KmShardedSeed *ss = (KmShardedSeed *) arg;
	MemoryContext old = CurrentMemoryContext;
	km_status	status = KM_OK;

	PG_TRY();
	{
		*nout = DrawShards(ss, stream, use_cost != 0, m, key, hash, w, x);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		ss->error = CopyErrorData();
		FlushErrorState();
		status = KM_ERR_INVALID;
	}
	PG_END_TRY();
	return status;
}

static km_status
SeedFold(void *arg, const float *cands, int first, int count, km_error *error)
{
	KmShardedSeed *ss = (KmShardedSeed *) arg;

	/* the shards fold them before they next draw or weigh */
	ss->cands = cands;
	ss->nknown = first + count;
	return KM_OK;
}

static km_status
SeedWeights(void *arg, int ncand, double *out, km_error *error)
{
	KmShardedSeed *ss = (KmShardedSeed *) arg;
	KmSharded  *ks = ss->ks;
	MemoryContext old = CurrentMemoryContext;
	km_status	status = KM_OK;

	PG_TRY();
	{
		Oid			types[12];
		Datum		values[12];
		char		nulls[12];
		KmAnswers	a;
		km_xacc    *acc = palloc(sizeof(km_xacc) * ncand);
		bool		isnull;
		int			f = FitArgs(ks, types, values, nulls);

		/* then seed, run, candidates */
		types[f] = INT8OID;
		values[f] = Int64GetDatum((int64) ss->seed);
		types[f + 1] = INT4OID;
		values[f + 1] = Int32GetDatum(ss->run);
		types[f + 2] = FLOAT4ARRAYOID;
		values[f + 2] = SeedCandidates(ss, ncand, &isnull);
		nulls[f] = nulls[f + 1] = ' ';
		nulls[f + 2] = isnull ? 'n' : ' ';
		ShardCall(ks, "kmeans_sharded_weigh", f + 3, types, values, nulls, 4, &a);
		for (int c = 0; c < ncand; c++)
			km_xacc_init(&acc[c]);
		for (int p = 0; p < ks->nparts; p++)
		{
			ArrayType  *at = DatumGetArrayTypeP(Answer(&a, p, 2));
			ArrayType  *an = DatumGetArrayTypeP(Answer(&a, p, 3));
			int			nt = ArrayGetNItems(ARR_NDIM(at), ARR_DIMS(at));
			const double *terms = (const double *) ARR_DATA_PTR(at);
			const int32 *counts = (const int32 *) ARR_DATA_PTR(an);
			int			used = 0;

			if (ArrayGetNItems(ARR_NDIM(an), ARR_DIMS(an)) != ncand || ARR_HASNULL(at) ||
				ARR_HASNULL(an))
				elog(ERROR, "kmeans shard call: shard %d weighed the wrong candidates", p);
			for (int c = 0; c < ncand; c++)
			{
				if (counts[c] < 0 || used + counts[c] > nt)
					elog(ERROR, "kmeans shard call: shard %d sent malformed weights", p);
				for (int t = 0; t < counts[c]; t++)
					km_xacc_add(&acc[c], terms[used++]);
			}
		}
		for (int c = 0; c < ncand; c++)
			out[c] = km_xacc_round(&acc[c]);
		pfree(acc);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		ss->error = CopyErrorData();
		FlushErrorState();
		status = KM_ERR_INVALID;
	}
	PG_END_TRY();
	return status;
}

static void *
SeedAlloc(void *ctx, size_t size)
{
	return MemoryContextAllocExtended((MemoryContext) ctx, Max(size, 1),
									  MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

static void
SeedFree(void *ctx, void *ptr)
{
	pfree(ptr);
}

static int
SeedPoll(void *ctx)
{
	return QueryCancelPending || ProcDiePending;
}

/* k-means|| over the shards: run number run's start centroids. */
static void
SeedKmeansParallel(KmSharded *ks, int k, km_metric metric, uint64 seed, int run, float *cent)
{
	KmShardedSeed ss;
	km_kmpar_ops ops;
	km_hooks	hooks;
	km_error	err;
	km_status	status;
	MemoryContext cx = AllocSetContextCreate(CurrentMemoryContext, "kmeans_fit_sharded seeding",
											 ALLOCSET_DEFAULT_SIZES);

	memset(&ss, 0, sizeof(ss));
	ss.ks = ks;
	ss.seed = seed;
	ss.run = run;
	ops.ctx = &ss;
	ops.keys = SeedKeys;
	ops.fold = SeedFold;
	ops.weights = SeedWeights;
	memset(&hooks, 0, sizeof(hooks));
	hooks.ctx = cx;
	hooks.alloc = SeedAlloc;
	hooks.free = SeedFree;
	hooks.poll = SeedPoll;
	memset(&err, 0, sizeof(err));
	status = km_kmpar_run(&ops, ks->dim, k, metric, seed, run, &hooks, cent, &err);
	MemoryContextDelete(cx);
	if (ss.error != NULL)
		ReThrowError(ss.error);
	CHECK_FOR_INTERRUPTS();
	if (status != KM_OK)
		ereport(ERROR,
				(errcode(status == KM_ERR_NOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
				 errmsg("k-means|| seeding failed: %s", err.message)));
}

/* ---- the Lloyd loop ---- */

/*
 * One Lloyd step on the shards: the merged partial for cent, and the rows
 * that moved since the assignment to prev (NULL: the first iteration).
 */
static KmPartialData *
StepShards(KmSharded *ks, const float *prev, const float *cent, int k, int64 *moved)
{
	Oid			types[11];
	Datum		values[11];
	char		nulls[11];
	KmAnswers	a;
	KmPartialData *merged = NULL;
	int			f = FitArgs(ks, types, values, nulls);

	/* then previous, centroids */
	types[f] = FLOAT4ARRAYOID;
	values[f] = prev != NULL ? CentroidsArg(prev, k, ks->dim) : (Datum) 0;
	nulls[f] = prev != NULL ? ' ' : 'n';
	types[f + 1] = FLOAT4ARRAYOID;
	values[f + 1] = CentroidsArg(cent, k, ks->dim);
	nulls[f + 1] = ' ';
	ShardCall(ks, "kmeans_sharded_step", f + 2, types, values, nulls, 4, &a);
	*moved = 0;
	for (int p = 0; p < ks->nparts; p++)
	{
		/* checked field by field by kmeans_partial's input function */
		KmPartialData *part = (KmPartialData *) PG_DETOAST_DATUM(Answer(&a, p, 2));

		*moved += DatumGetInt64(Answer(&a, p, 3));
		if (merged == NULL)
		{
			merged = palloc(VARSIZE(part));
			memcpy(merged, part, VARSIZE(part));
		}
		else
		{
			KmPartialData *m = KmPartialMerge(merged, part);

			pfree(merged);
			merged = m;
		}
	}
	return merged;
}

typedef struct KmShardedRun
{
	float	   *centroids;
	int64	   *sizes;
	double	   *cluster_inertia;
	double		inertia;
	int			iterations;
	bool		converged;
	int			relocated;
} KmShardedRun;

/*
 * Lloyd iterations from cent, then the final assignment: what km_cpu_lloyd
 * does on one server, with the rows on the shards.
 */
static void
LloydShards(KmSharded *ks, const KmOptions *opts, int run, int64 n, float *cent,
			KmShardedRun *out)
{
	const int	k = opts->k;
	const int	dim = ks->dim;
	const Size	kd = (Size) k * dim;
	float	   *prev = NULL;
	float	   *next = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);
	KmModel		model;
	KmPartialData *p = NULL;
	bool		settled = false;
	int			t;
	TimestampTz start = GetCurrentTimestamp();

	memset(out, 0, sizeof(*out));
	memset(&model, 0, sizeof(model));
	model.k = k;
	model.dim = dim;
	model.metric = opts->metric;
	for (t = 1;; t++)
	{
		int64		moved;
		int			relocated = 0;

		CHECK_FOR_INTERRUPTS();
		if (p != NULL)
			pfree(p);
		p = StepShards(ks, prev, cent, k, &moved);
		if (KmPartialRows(p) != n)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("the shards of cluster \"%s\" now hold " INT64_FORMAT " rows; the fit started with " INT64_FORMAT,
							ks->cluster, KmPartialRows(p), n)));
		if (moved > 0)
		{
			model.centroids = cent;
			memcpy(next, cent, sizeof(float) * kd);
			relocated = KmPartialStep(p, &model, next);
			out->relocated += relocated;
		}
		if (kmeans_verbose)
		{
			int64	   *sz = palloc(sizeof(int64) * k);
			double	   *ci = palloc(sizeof(double) * k);

			ereport(INFO,
					(errmsg("kmeans_fit_sharded: run %d/%d, iteration %d: inertia %.6g, moved %.6f%s, %.3f s; %s",
							run + 1, opts->n_init, t, KmPartialStats(p, sz, ci),
							(double) moved / (double) n,
							relocated > 0 ? ", re-seeded empty clusters" : "",
							(double) (GetCurrentTimestamp() - start) / 1e6, ShardTimes(ks))));
			pfree(sz);
			pfree(ci);
		}
		if (moved == 0)
		{
			settled = true;
			out->converged = true;
			break;
		}
		/* the next iteration assigns to next and counts moves against cent */
		if (prev == NULL)
			prev = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);
		memcpy(prev, cent, sizeof(float) * kd);
		memcpy(cent, next, sizeof(float) * kd);
		if ((double) moved / (double) n <= opts->tol)
		{
			out->converged = true;
			break;
		}
		if (t >= opts->max_iter)
			break;
	}
	out->iterations = t;

	/* the final assignment: the last step's when nothing moved, else one more */
	if (!settled)
	{
		int64		moved;

		pfree(p);
		p = StepShards(ks, prev, cent, k, &moved);
	}
	out->centroids = cent;
	out->sizes = palloc(sizeof(int64) * k);
	out->cluster_inertia = palloc(sizeof(double) * k);
	out->inertia = KmPartialStats(p, out->sizes, out->cluster_inertia);
	if (kmeans_verbose)
		ereport(INFO,
				(errmsg("kmeans_fit_sharded: run %d/%d: final assignment done, inertia %.6g, %.3f s; %s",
						run + 1, opts->n_init, out->inertia,
						(double) (GetCurrentTimestamp() - start) / 1e6, ShardTimes(ks))));
	pfree(p);
}

/* ---- seeding ---- */

/* Run number run's start centroids into cent (k x dim). */
static void
SeedShards(KmSharded *ks, const KmOptions *opts, int run, float *cent)
{
	const int	k = opts->k;
	const int	dim = ks->dim;
	const int	cosine = opts->metric == KM_METRIC_COSINE;
	TimestampTz start = GetCurrentTimestamp();

	switch (opts->init)
	{
		case KM_INIT_EXPLICIT:
			for (int j = 0; j < k; j++)
				km_centroid_row(opts->init_centroids + (Size) j * dim, dim, cosine,
								cent + (Size) j * dim);
			return;
		case KM_INIT_RANDOM:
			{
				KmShardedSeed ss;
				float	   *x = palloc(sizeof(float) * (Size) k * dim);

				memset(&ss, 0, sizeof(ss));
				ss.ks = ks;
				ss.seed = (uint64) opts->seed;
				ss.run = run;
				if (DrawShards(&ss, km_stream((uint64) opts->seed, run, 0), false, k,
							   NULL, NULL, NULL, x) < k)
					ereport(ERROR,
							(errcode(ERRCODE_DATA_EXCEPTION),
							 errmsg("the shards of cluster \"%s\" have fewer than k rows of positive weight",
									ks->cluster)));
				for (int j = 0; j < k; j++)
					km_centroid_row(x + (Size) j * dim, dim, cosine, cent + (Size) j * dim);
				pfree(x);
				break;
			}
		case KM_INIT_KMEANS_PARALLEL:
			SeedKmeansParallel(ks, k, opts->metric, (uint64) opts->seed, run, cent);
			break;
		default:
			elog(ERROR, "init %s cannot run sharded", KmInitName(opts->init));
	}
	if (kmeans_verbose)
		ereport(INFO,
				(errmsg("kmeans_fit_sharded: run %d/%d: seeded %d centroids (%s) in %.3f s",
						run + 1, opts->n_init, k, KmInitName(opts->init),
						(double) (GetCurrentTimestamp() - start) / 1e6)));
}

/* ---- the function ---- */

PG_FUNCTION_INFO_V1(kmeans_fit_sharded);

/*
 * kmeans_fit_sharded(cluster_name text, source text, column_name text, k
 * int, max_iter int, tol float8, init text, init_centroids real[], metric
 * text, seed bigint, n_init int, weight_column text, engine text,
 * chain_length int, storage text) -> kmeans_model
 */
Datum
kmeans_fit_sharded(PG_FUNCTION_ARGS)
{
	KmOptions	opts;
	KmSharded	ks;
	KmShardedRows rows;
	KmFitOutput fit;
	KmShardedRun best;
	char	   *init;
	Datum		model;
	MemoryContext caller = CurrentMemoryContext;

	KmArgNotNull(fcinfo, 0, "cluster_name");
	KmArgNotNull(fcinfo, 1, "source");
	KmArgNotNull(fcinfo, 2, "column_name");
	KmArgNotNull(fcinfo, 3, "k");
	KmArgNotNull(fcinfo, 4, "max_iter");
	KmArgNotNull(fcinfo, 5, "tol");
	KmArgNotNull(fcinfo, 6, "init");
	KmArgNotNull(fcinfo, 8, "metric");
	KmArgNotNull(fcinfo, 10, "n_init");

	/* the options, as kmeans_fit reads them; k-means|| by default */
	KmOptionsDefaults(&opts);
	opts.k = PG_GETARG_INT32(3);
	opts.max_iter = PG_GETARG_INT32(4);
	opts.tol = PG_GETARG_FLOAT8(5);
	init = text_to_cstring(PG_GETARG_TEXT_PP(6));
	if (PG_ARGISNULL(7) || strcmp(init, "k-means||") != 0)
		KmOptionsSetInit(&opts, init);
	if (!PG_ARGISNULL(7))
		KmOptionsSetInitCentroids(&opts, PG_GETARG_ARRAYTYPE_P(7));
	else if (!opts.init_given)
		opts.init = KM_INIT_KMEANS_PARALLEL;
	KmOptionsSetMetric(&opts, text_to_cstring(PG_GETARG_TEXT_PP(8)));
	if (!PG_ARGISNULL(9))
	{
		opts.seed = PG_GETARG_INT64(9);
		opts.seed_given = true;
	}
	opts.n_init = PG_GETARG_INT32(10);
	if (!PG_ARGISNULL(12))
	{
		KmOptionsSetEngine(&opts, text_to_cstring(PG_GETARG_TEXT_PP(12)));
		if (opts.engine == KM_ENGINE_GPU)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("kmeans_fit_sharded runs the CPU engine's map step on every shard"),
					 errhint("Leave engine out, or use 'auto' or 'cpu'.")));
	}
	/* chain_length: kmeans_fit's option, read (and checked) for afk-mc2 only */
	if (!PG_ARGISNULL(13))
		opts.chain_length = PG_GETARG_INT32(13);
	/* storage: the shards round the rows as they load them, as kmeans_fit does */
	if (PG_NARGS() > 14)
	{
		KmArgNotNull(fcinfo, 14, "storage");
		KmOptionsSetStorage(&opts, text_to_cstring(PG_GETARG_TEXT_PP(14)));
	}
	KmOptionsCheck(&opts);
	if (opts.init == KM_INIT_KMEANSPP || opts.init == KM_INIT_AFKMC2)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("init '%s' cannot run sharded", KmInitName(opts.init)),
				 opts.init == KM_INIT_KMEANSPP ?
				 errdetail("Each of its k steps would be a call on every shard.") :
				 errdetail("Its k Markov chains draw rows from every shard in turn."),
				 errhint("Use 'k-means||' (the default), 'random', or init_centroids.")));
	KmOptionsFixSeed(&opts);

	memset(&ks, 0, sizeof(ks));
	OpenCluster(&ks, text_to_cstring(PG_GETARG_TEXT_PP(0)));
	ks.ns = quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid)));
	ks.source = PointerGetDatum(PG_GETARG_TEXT_PP(1));
	ks.column = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	ks.weight = PG_ARGISNULL(11) ? (Datum) 0 : PointerGetDatum(PG_GETARG_TEXT_PP(11));
	ks.metric = CStringGetTextDatum(KmMetricName(opts.metric));
	ks.storage = CStringGetTextDatum(KmStorageName(opts.storage));
	ks.context = AllocSetContextCreate(CurrentMemoryContext, "kmeans_fit_sharded answers",
									   ALLOCSET_DEFAULT_SIZES);
	do
	{
		uint64		id;

		if (!pg_strong_random(&id, sizeof(id)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random fit id")));
		ks.fit_id = (int64) (id >> 1);
	} while (ks.fit_id == 0);

	memset(&fit, 0, sizeof(fit));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PG_TRY();
	{
		LoadShards(&ks, &rows);
		if (rows.n == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("kmeans has no vectors to cluster"),
					 errdetail("The shards of cluster \"%s\" hold no rows with a vector, or none the caller may see.",
							   ks.cluster)));
		KmOptionsCheckData(&opts, rows.n, ks.dim);
		if (!rows.weight_positive)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("the weights of the rows sum to zero")));

		memset(&best, 0, sizeof(best));
		for (int run = 0; run < opts.n_init; run++)
		{
			float	   *cent = palloc_extended(sizeof(float) * (Size) opts.k * ks.dim,
											   MCXT_ALLOC_HUGE);
			KmShardedRun rr;

			SeedShards(&ks, &opts, run, cent);
			LloydShards(&ks, &opts, run, rows.n, cent, &rr);
			/* the lowest inertia wins, ties to the first run, as in the engine */
			if (run == 0 || rr.inertia < best.inertia)
				best = rr;
		}
		EndShards(&ks);

		/* the model outlives SPI's memory */
		{
			MemoryContext old = MemoryContextSwitchTo(caller);
			Size		kd = (Size) opts.k * ks.dim;

			fit.centroids = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);
			memcpy(fit.centroids, best.centroids, sizeof(float) * kd);
			fit.sizes = palloc(sizeof(int64) * opts.k);
			memcpy(fit.sizes, best.sizes, sizeof(int64) * opts.k);
			fit.cluster_inertia = palloc(sizeof(double) * opts.k);
			memcpy(fit.cluster_inertia, best.cluster_inertia, sizeof(double) * opts.k);
			MemoryContextSwitchTo(old);
		}
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(caller);
		e = CopyErrorData();
		FlushErrorState();
		/* free the shards' rows; a cancel has already stopped their queries */
		EndShards(&ks);
		SPI_finish();
		ReThrowError(e);
	}
	PG_END_TRY();
	SPI_finish();

	fit.inertia = best.inertia;
	fit.iterations = best.iterations;
	fit.converged = best.converged;
	fit.relocated = best.relocated;
	fit.seed = opts.seed;
	fit.engine = "cpu";
	if (kmeans_verbose)
		ereport(INFO,
				(errmsg("kmeans_fit_sharded: done, %d %s on the shards in all",
						ks.total_retries, ks.total_retries == 1 ? "retry" : "retries")));
	model = KmModelMake(fcinfo, &opts, &fit, ks.dim, rows.n, rows.n_skipped);
	return model;
}
