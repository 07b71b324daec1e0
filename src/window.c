/*
 * window.c
 *	  The window function kmeans_cluster(vec, k [, options]) OVER (...):
 *	  each row's cluster id, one clustering per partition.
 *
 * The first call in a partition reads the whole partition, fits it and
 * keeps every row's label in partition-local memory; each call then
 * returns its row's label.  Rows with a NULL vector get NULL.
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "windowapi.h"

#include "kmeans_gpu.h"

typedef struct KmWindowState
{
	bool		done;
	int32	   *labels;			/* per row of the partition; -1: NULL vector */
} KmWindowState;

static int
WindowK(WindowObject winobj, int64 pos)
{
	bool		isnull;
	bool		isout;
	Datum		k = WinGetFuncArgInPartition(winobj, 1, pos, WINDOW_SEEK_HEAD, false,
											 &isnull, &isout);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("k must not be NULL")));
	return DatumGetInt32(k);
}

/* The options jsonb of a row, or NULL. */
static Jsonb *
WindowOptions(WindowObject winobj, int nargs, int64 pos)
{
	bool		isnull;
	bool		isout;
	Datum		options;

	if (nargs < 3)
		return NULL;
	options = WinGetFuncArgInPartition(winobj, 2, pos, WINDOW_SEEK_HEAD, false,
									   &isnull, &isout);
	return isnull ? NULL : DatumGetJsonbP(options);
}

static bool
SameJsonb(Jsonb *a, Jsonb *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE(a) == VARSIZE(b) && memcmp(a, b, VARSIZE(a)) == 0;
}

/*
 * Fit the current partition and store every row's label in ws.
 */
static void
FitPartition(WindowObject winobj, int nargs, KmWindowState *ws)
{
	MemoryContext partcontext = GetMemoryChunkContext(ws);
	MemoryContext work = AllocSetContextCreate(partcontext, "kmeans_cluster partition",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext rowcontext = AllocSetContextCreate(work, "kmeans_cluster row",
													 ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(work);
	int64		nrows = WinGetPartitionRowCount(winobj);
	KmOptions	opts;
	KmMatrix	m;
	KmFitOutput fit;
	Jsonb	   *options;
	int64		next = 0;

	/* k and options of the first row; every row must repeat them */
	KmOptionsDefaults(&opts);
	opts.k = WindowK(winobj, 0);
	options = WindowOptions(winobj, nargs, 0);
	if (options != NULL)
	{
		options = (Jsonb *) pg_detoast_datum_copy((struct varlena *) options);
		KmOptionsFromJsonb(&opts, options);
	}
	KmOptionsCheck(&opts);
	KmOptionsFixSeed(&opts);

	ws->labels = MemoryContextAllocHuge(partcontext, sizeof(int32) * Max(nrows, 1));
	KmMatrixInit(&m, work, false, opts.metric == KM_METRIC_COSINE);
	KmMatrixSetStorage(&m, opts.storage);
	for (int64 pos = 0; pos < nrows; pos++)
	{
		bool		isnull;
		bool		isout;
		Datum		vec;

		MemoryContextSwitchTo(rowcontext);
		if (WindowK(winobj, pos) != opts.k)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("k must be the same for every row of a kmeans_cluster partition")));
		if (!SameJsonb(WindowOptions(winobj, nargs, pos), options))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("options must be the same for every row of a kmeans_cluster partition")));
		vec = WinGetFuncArgInPartition(winobj, 0, pos, WINDOW_SEEK_HEAD, false,
									   &isnull, &isout);
		if (isnull)
		{
			ws->labels[pos] = -1;
			KmMatrixSkipRow(&m);
		}
		else
		{
			KmMatrixAppendVector(&m, DatumGetArrayTypeP(vec), 1.0f);
			ws->labels[pos] = 0;
		}
		MemoryContextReset(rowcontext);
	}
	MemoryContextSwitchTo(work);

	(void) KmRunFit(&m, NULL, &opts, true, &fit);	/* host rows: always runs */
	for (int64 pos = 0; pos < nrows; pos++)
		if (ws->labels[pos] >= 0)
			ws->labels[pos] = fit.labels[next++];

	MemoryContextSwitchTo(old);
	MemoryContextDelete(work);
	ws->done = true;
}

PG_FUNCTION_INFO_V1(kmeans_cluster);

/*
 * kmeans_cluster(vec, k [, options]) OVER (...) -> cluster id of the row
 */
Datum
kmeans_cluster(PG_FUNCTION_ARGS)
{
	WindowObject winobj = PG_WINDOW_OBJECT();
	KmWindowState *ws;
	int32		label;

	ws = (KmWindowState *) WinGetPartitionLocalMemory(winobj, sizeof(KmWindowState));
	if (!ws->done)
		FitPartition(winobj, PG_NARGS(), ws);

	label = ws->labels[WinGetCurrentPosition(winobj)];
	if (label < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(label);
}
