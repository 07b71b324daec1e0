/*
 * sweep.c
 *	  kmeans_sweep(source, column_name, ks, <kmeans_fit's options>, sample,
 *	  chain_length): a k-means model for every k of ks, from one read of the
 *	  table, each with the figures that help choose k.
 *
 * The rows are read once into memory (vector_input.c), then fitted once per
 * k, in the order of ks, with the same options and the same seed (drawn
 * once when none is given, and kept in every model).  Each row of the
 * result has the model's inertia (the elbow), and the silhouette and
 * Davies-Bouldin index of its labels (score.c: the silhouette on the same
 * sample of rows for every k), so that kmeans_score need not read the table
 * again.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"

#include "kmedoids.h"

typedef struct KmSweepScan
{
	KmMatrix	matrix;
	bool		weighted;
	double		weight_sum;
	int64		n_skipped;		/* NULL vector or NULL weight */
} KmSweepScan;

static void
SweepRow(void *arg, Datum *values, bool *nulls)
{
	KmSweepScan *scan = (KmSweepScan *) arg;
	double		w = 1.0;

	if (nulls[0] || (scan->weighted && nulls[1]))
	{
		scan->n_skipped++;
		return;
	}
	if (scan->weighted)
	{
		w = DatumGetFloat8(values[1]);
		KmCheckWeight(w);
		scan->weight_sum += w;
	}
	KmMatrixAppendVector(&scan->matrix, DatumGetArrayTypeP(values[0]), (float) w);
}

/* ks: a one-dimensional int[] of distinct k >= 1, not empty. */
static int32 *
SweepKs(ArrayType *arr, int *nks)
{
	int32	   *ks;
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("ks must be a one-dimensional array")));
	n = ARR_NDIM(arr) == 0 ? 0 : ARR_DIMS(arr)[0];
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ks must not be empty"),
				 errhint("Give the numbers of clusters to try, as in ARRAY[2, 3, 4, 5].")));
	if (array_contains_nulls(arr))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ks must not contain NULL values")));
	ks = (int32 *) ARR_DATA_PTR(arr);
	for (int i = 0; i < n; i++)
	{
		if (ks[i] < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("every k of ks must be at least 1, not %d", ks[i])));
		for (int j = 0; j < i; j++)
			if (ks[j] == ks[i])
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("ks has %d more than once", ks[i]),
						 errdetail("Each k is fitted once; give distinct values.")));
	}
	*nks = n;
	return ks;
}

PG_FUNCTION_INFO_V1(kmeans_sweep);

/*
 * kmeans_sweep(source regclass, column_name text, ks int[], max_iter int,
 * tol float8, init text, metric text, seed bigint, n_init int,
 * weight_column text, engine text, sample int, chain_length int) ->
 * SETOF (k, inertia, silhouette, davies_bouldin, model)
 */
Datum
kmeans_sweep(PG_FUNCTION_ARGS)
{
	KmOptions	opts;
	KmScanSpec	spec;
	KmSweepScan scan;
	ReturnSetInfo *rsinfo;
	TupleDesc	model_desc;
	MemoryContext rows_context;
	MemoryContext fit_context;
	KmdRows		wrap;
	KmdOrdered	ordered;
	int32	   *ks;
	int			nks;
	int			sample;
	int64		maxk = 0;

	KmArgNotNull(fcinfo, 0, "source");
	KmArgNotNull(fcinfo, 1, "column_name");
	KmArgNotNull(fcinfo, 2, "ks");
	KmArgNotNull(fcinfo, 3, "max_iter");
	KmArgNotNull(fcinfo, 4, "tol");
	KmArgNotNull(fcinfo, 5, "init");
	KmArgNotNull(fcinfo, 6, "metric");
	KmArgNotNull(fcinfo, 8, "n_init");
	KmArgNotNull(fcinfo, 12, "chain_length");
	KmCheckSample(fcinfo, 11);

	ks = SweepKs(PG_GETARG_ARRAYTYPE_P(2), &nks);
	KmOptionsDefaults(&opts);
	opts.max_iter = PG_GETARG_INT32(3);
	opts.tol = PG_GETARG_FLOAT8(4);
	KmOptionsSetInit(&opts, text_to_cstring(PG_GETARG_TEXT_PP(5)));
	if (opts.init == KM_INIT_EXPLICIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kmeans_sweep cannot start from explicit centroids"),
				 errdetail("Every k needs its own start; use 'k-means++', 'random' or 'afk-mc2'.")));
	KmOptionsSetMetric(&opts, text_to_cstring(PG_GETARG_TEXT_PP(6)));
	if (!PG_ARGISNULL(7))
	{
		opts.seed = PG_GETARG_INT64(7);
		opts.seed_given = true;
	}
	opts.n_init = PG_GETARG_INT32(8);
	if (!PG_ARGISNULL(10))
		KmOptionsSetEngine(&opts, text_to_cstring(PG_GETARG_TEXT_PP(10)));
	sample = PG_GETARG_INT32(11);
	opts.chain_length = PG_GETARG_INT32(12);
	for (int i = 0; i < nks; i++)
	{
		opts.k = ks[i];
		KmOptionsCheck(&opts);
		maxk = Max(maxk, ks[i]);
	}
	(void) KmOptionsEngine(&opts);	/* refuses what the engine cannot do, before reading */
	KmOptionsFixSeed(&opts);

	memset(&spec, 0, sizeof(spec));
	spec.relid = PG_GETARG_OID(0);
	spec.vector_column = text_to_cstring(PG_GETARG_TEXT_PP(1));
	spec.weight_column = PG_ARGISNULL(9) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(9));

	rsinfo = KmMaterialize(fcinfo);
	model_desc = lookup_rowtype_tupdesc_copy(TupleDescAttr(rsinfo->setDesc, 4)->atttypid, -1);

	/* the one read */
	rows_context = AllocSetContextCreate(CurrentMemoryContext, "kmeans_sweep rows",
										 ALLOCSET_DEFAULT_SIZES);
	memset(&scan, 0, sizeof(scan));
	scan.weighted = spec.weight_column != NULL;
	KmMatrixInit(&scan.matrix, rows_context, scan.weighted, opts.metric == KM_METRIC_COSINE);
	KmScanTable(&spec, SweepRow, &scan);
	if (scan.weighted && scan.matrix.n > 0 && !(scan.weight_sum > 0))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the weights of the rows sum to zero")));
	opts.k = (int) Min(maxk, Max(scan.matrix.n, 1));
	KmOptionsCheckData(&opts, scan.matrix.n, scan.matrix.dim);
	if (maxk > scan.matrix.n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k (" INT64_FORMAT ") is larger than the number of vectors (" INT64_FORMAT ")",
						maxk, scan.matrix.n)));

	/* the canonical order of the scores, the same for every k */
	memset(&wrap, 0, sizeof(wrap));
	wrap.dense = scan.matrix;
	wrap.n = scan.matrix.n;
	KmCheckMemory(add_size(scan.matrix.bytes, KmdOrderBytes(scan.matrix.n)), "kmeans_sweep");
	KmdOrder(&wrap, false, true, (uint64) opts.seed, &ordered);

	fit_context = AllocSetContextCreate(CurrentMemoryContext, "kmeans_sweep fit",
										ALLOCSET_DEFAULT_SIZES);
	for (int i = 0; i < nks; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(fit_context);
		KmFitOutput fit;
		KmScoreFigures fig;
		int32	   *olabels;
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		CHECK_FOR_INTERRUPTS();
		opts.k = ks[i];
		if (!KmRunFit(&scan.matrix, NULL, &opts, true, &fit))
			elog(ERROR, "kmeans_sweep lost its rows to a GPU failure; please report a bug");
		olabels = palloc_extended(sizeof(int32) * (Size) scan.matrix.n, MCXT_ALLOC_HUGE);
		for (int64 r = 0; r < scan.matrix.n; r++)
			olabels[r] = fit.labels[ordered.perm[r]];
		memset(&fig, 0, sizeof(fig));
		KmScoreRows(&ordered.data, olabels, opts.k,
					opts.metric == KM_METRIC_COSINE ? KMD_METRIC_COSINE : KMD_METRIC_L2,
					0.0, opts.metric == KM_METRIC_COSINE, sample, &fig);

		values[0] = Int32GetDatum(opts.k);
		values[1] = Float8GetDatum(fit.inertia);
		values[2] = Float8GetDatum(fig.silhouette);
		nulls[2] = fig.silhouette_null;
		values[3] = Float8GetDatum(fig.davies_bouldin);
		nulls[3] = fig.davies_bouldin_null;
		values[4] = KmModelMakeTuple(model_desc, &opts, &fit, scan.matrix.dim, scan.matrix.n,
									 scan.n_skipped);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(fit_context);
	}
	MemoryContextDelete(fit_context);
	MemoryContextDelete(rows_context);
	return (Datum) 0;
}
