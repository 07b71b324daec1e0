/*
 * fit.c
 *	  kmeans_fit(source, column_name, k, ...): one pass over a table's
 *	  column into the engine, with named arguments and defaults.
 */
#include "postgres.h"

#include <math.h>

#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "kmeans_gpu.h"

typedef struct KmFitScan
{
	KmMatrix	matrix;
	KmGpuSink  *gpu;			/* the rows go to the GPU instead, or NULL */
	int64		n_skipped;		/* NULL vector or NULL weight */
	bool		weighted;
	bool		weight_positive;	/* a row weighs more than 0 */
	double		estimated_rows; /* from statistics, for the early memory check */
	const KmOptions *opts;
	bool		first_row_seen;
	bool		gpu_declined;	/* the GPU would not take the stream (under 'auto') */
	int64		gpu_setup_us;	/* starting the stream to the GPU (verbose) */
	char	   *read_report;	/* a parallel read: what it took (verbose) */
} KmFitScan;

/* An estimate of rows as a count (clamped, for the sizes computed from it). */
static int64
EstimatedRows(double estimate)
{
	return (int64) Min(estimate, (double) PG_INT64_MAX / 2);
}

/*
 * Before the rows are gathered: check the memory the whole table will need,
 * from its statistics.
 */
static void
CheckTableMemory(const KmFitScan *scan, int dim)
{
	int64		rows = EstimatedRows(scan->estimated_rows);

	if (rows > 0)
		KmCheckMemory(KmFitMemory(rows, dim, Min(scan->opts->k, rows),
								  mul_size((Size) rows, sizeof(float) * (Size) (dim + scan->weighted)),
								  false),
					  "kmeans_fit (estimated from the table's statistics)");
}

/*
 * Start streaming the rows to the GPU if it is to run the fit, those
 * already in scan->matrix first: should it give up, ReadRows runs again for
 * the CPU.  An init the GPU does not seed keeps the rows on the host too.
 */
static void
StartGpu(KmFitScan *scan, int64 rows)
{
	KmEngineChoice choice = KmOptionsEngine(scan->opts);
	TimestampTz start;

	if (choice == KM_ENGINE_CPU)
		return;
	start = GetCurrentTimestamp();
	scan->gpu = KmGpuSinkStart(&scan->matrix, choice, scan->opts->k, scan->opts->metric,
							   rows, !KmInitOnGpu(scan->opts->init));
	scan->gpu_setup_us = GetCurrentTimestamp() - start;
}

/*
 * When the first vector tells the length: check the memory, and start the
 * stream to the GPU so that the upload overlaps the scan.
 */
static void
FirstRow(KmFitScan *scan, int dim)
{
	scan->first_row_seen = true;
	CheckTableMemory(scan, dim);
	scan->matrix.dim = dim;
	StartGpu(scan, EstimatedRows(scan->estimated_rows));
}

/*
 * One row of the scan: skipped (and counted) when its vector or weight is
 * NULL.
 */
static void
FitRow(void *arg, Datum *values, bool *nulls)
{
	KmFitScan  *scan = (KmFitScan *) arg;
	ArrayType  *vec;
	double		w = 1.0;

	if (nulls[0] || (scan->weighted && nulls[1]))
	{
		scan->n_skipped++;
		KmMatrixSkipRow(&scan->matrix);
		return;
	}
	vec = DatumGetArrayTypeP(values[0]);
	if (scan->weighted)
	{
		w = DatumGetFloat8(values[1]);
		KmCheckWeight(w);
		scan->weight_positive = scan->weight_positive || w > 0;
	}
	if (!scan->first_row_seen)
		FirstRow(scan, KmVectorDim(vec));
	if (scan->gpu != NULL)
		KmGpuSinkAppendVector(scan->gpu, vec, (float) w);
	else
		KmMatrixAppendVector(&scan->matrix, vec, (float) w);
}

/* Rows read so far (not skipped). */
static int64
ScanRows(const KmFitScan *scan)
{
	return scan->gpu != NULL ? KmGpuSinkRows(scan->gpu) : scan->matrix.n;
}

/*
 * A large table read by parallel workers into shared memory: true when it
 * was (scan->matrix has the rows, or the GPU has them), false when the
 * caller must read it in this backend (into the GPU's sink when one was
 * started).
 */
static bool
ReadRowsInParallel(const KmScanSpec *spec, Oid func_namespace, KmFitScan *scan)
{
	KmParallelRead *read = KmParallelReadPlan(spec, func_namespace, &scan->matrix);
	KmEngineChoice choice = KmOptionsEngine(scan->opts);
	int64		estimate;

	if (read == NULL)
		return false;
	estimate = EstimatedRows(KmParallelReadEstimate(read));
	if (choice != KM_ENGINE_CPU &&
		KmRouteStream(choice, estimate, KmParallelReadDim(read), Min(scan->opts->k, Max(estimate, 1)),
					  scan->opts->metric, scan->opts->storage, scan->weighted) != NULL)
	{
		/*
		 * Rows that stream to the GPU go there through a ring of shared
		 * memory, drained while the workers fill it (parallel_read.c).  A fit
		 * that keeps its rows on the host too (seeded there) reads them in
		 * this backend, straight into pinned memory: through shared memory
		 * they would be copied once more, by this backend alone (README,
		 * kmeans_fit, "Reading with parallel workers").
		 */
		if (!KmInitOnGpu(scan->opts->init))
			return false;
		FirstRow(scan, KmParallelReadDim(read));
		if (scan->gpu != NULL)
		{
			if (KmParallelReadStream(read, scan->gpu, scan->matrix.context,
									 &scan->n_skipped, &scan->weight_positive))
			{
				scan->read_report = KmParallelReadReport(read);
				return true;
			}
			/* the GPU gave up (under 'auto'): the rows are read again, for the CPU */
			if (!KmGpuSinkLive(scan->gpu))
				scan->gpu = NULL;
			return false;
		}
		/* the GPU declined (under 'auto'): the rows stay on the host, for the CPU */
		scan->gpu_declined = true;
	}
	if (!KmParallelReadHasRoom(read))
		return false;
	CheckTableMemory(scan, KmParallelReadDim(read));
	if (!KmParallelReadRun(read, &scan->matrix, &scan->n_skipped, &scan->weight_positive))
	{
		if (kmeans_verbose)
			ereport(INFO,
					(errmsg("kmeans_fit: the shared memory sized from the table's statistics was too small for its rows; reading them again in one process")));
		return false;
	}
	scan->read_report = KmParallelReadReport(read);
	scan->first_row_seen = scan->matrix.n > 0;
	if (scan->matrix.n > 0 && !scan->gpu_declined)
	{
		StartGpu(scan, scan->matrix.n);
		/* the rows went to the GPU only: give their memory back now */
		if (scan->gpu != NULL && !KmGpuSinkHostRows(scan->gpu))
			KmParallelReadRelease(read);
	}
	return true;
}

/*
 * The scan: every row of the column into scan->matrix (in context), or
 * streamed to the GPU when it is to run the fit.
 */
static void
ReadRows(const KmScanSpec *spec, Oid func_namespace, const KmOptions *opts, KmFitScan *scan,
		 MemoryContext context)
{
	TimestampTz start = GetCurrentTimestamp();

	memset(scan, 0, sizeof(*scan));
	scan->weighted = spec->weight_column != NULL;
	scan->opts = opts;
	scan->estimated_rows = KmEstimateRows(spec->relid);
	KmMatrixInit(&scan->matrix, context, scan->weighted, opts->metric == KM_METRIC_COSINE);
	KmMatrixSetStorage(&scan->matrix, opts->storage);
	if (!ReadRowsInParallel(spec, func_namespace, scan))
		KmScanTable(spec, FitRow, scan);
	if (kmeans_verbose)
	{
		char		gpu[96] = "";

		if (scan->gpu != NULL && KmGpuSinkLive(scan->gpu))
			snprintf(gpu, sizeof(gpu), ", streaming them to the GPU (of which %.3f s to set it up)",
					 (double) scan->gpu_setup_us / 1e6);
		ereport(INFO,
				(errmsg("kmeans_fit: read " INT64_FORMAT " rows (" INT64_FORMAT " skipped)%s in %.3f s%s",
						ScanRows(scan), scan->n_skipped,
						scan->read_report != NULL ? " in parallel" : "",
						(double) (GetCurrentTimestamp() - start) / 1e6, gpu),
				 scan->read_report != NULL ? errdetail("The parallel read: %s.", scan->read_report) : 0));
	}

	if (scan->weighted && ScanRows(scan) > 0 && !scan->weight_positive)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the weights of the rows sum to zero")));
}

PG_FUNCTION_INFO_V1(kmeans_fit);

/*
 * kmeans_fit(source regclass, column_name text, k int, max_iter int, tol
 * float8, init text, init_centroids real[], metric text, seed bigint, n_init
 * int, weight_column text, engine text [, chain_length int [, storage
 * text]]) -> kmeans_model
 */
Datum
kmeans_fit(PG_FUNCTION_ARGS)
{
	KmOptions	opts;
	KmScanSpec	spec;
	KmFitScan	scan;
	KmFitOutput fit;
	MemoryContext rows_context;
	Oid			func_namespace = get_func_namespace(fcinfo->flinfo->fn_oid);
	Datum		model;
	char	   *init;

	KmArgNotNull(fcinfo, 0, "source");
	KmArgNotNull(fcinfo, 1, "column_name");
	KmArgNotNull(fcinfo, 2, "k");
	KmArgNotNull(fcinfo, 3, "max_iter");
	KmArgNotNull(fcinfo, 4, "tol");
	KmArgNotNull(fcinfo, 5, "init");
	KmArgNotNull(fcinfo, 7, "metric");
	KmArgNotNull(fcinfo, 9, "n_init");

	KmOptionsDefaults(&opts);
	opts.k = PG_GETARG_INT32(2);
	opts.max_iter = PG_GETARG_INT32(3);
	opts.tol = PG_GETARG_FLOAT8(4);
	init = text_to_cstring(PG_GETARG_TEXT_PP(5));
	/* the default init gives way to explicit centroids */
	if (PG_ARGISNULL(6) || strcmp(init, "k-means++") != 0)
		KmOptionsSetInit(&opts, init);
	if (!PG_ARGISNULL(6))
		KmOptionsSetInitCentroids(&opts, PG_GETARG_ARRAYTYPE_P(6));
	KmOptionsSetMetric(&opts, text_to_cstring(PG_GETARG_TEXT_PP(7)));
	if (!PG_ARGISNULL(8))
	{
		opts.seed = PG_GETARG_INT64(8);
		opts.seed_given = true;
	}
	opts.n_init = PG_GETARG_INT32(9);
	if (PG_NARGS() > 11 && !PG_ARGISNULL(11))
		KmOptionsSetEngine(&opts, text_to_cstring(PG_GETARG_TEXT_PP(11)));
	if (PG_NARGS() > 12)
	{
		KmArgNotNull(fcinfo, 12, "chain_length");
		opts.chain_length = PG_GETARG_INT32(12);
	}
	if (PG_NARGS() > 13)
	{
		KmArgNotNull(fcinfo, 13, "storage");
		KmOptionsSetStorage(&opts, text_to_cstring(PG_GETARG_TEXT_PP(13)));
	}
	KmOptionsCheck(&opts);
	KmOptionsFixSeed(&opts);

	memset(&spec, 0, sizeof(spec));
	spec.relid = PG_GETARG_OID(0);
	spec.vector_column = text_to_cstring(PG_GETARG_TEXT_PP(1));
	spec.weight_column = PG_ARGISNULL(10) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(10));

	/* the rows get their own context, freed as soon as the model is built */
	rows_context = AllocSetContextCreate(CurrentMemoryContext, "kmeans_fit rows",
										 ALLOCSET_DEFAULT_SIZES);
	ReadRows(&spec, func_namespace, &opts, &scan, rows_context);
	if (!KmRunFit(&scan.matrix, scan.gpu, &opts, false, &fit))
	{
		/*
		 * The GPU gave up (under 'auto') on rows that went to it only: read
		 * them again, this time for the CPU.
		 */
		MemoryContextReset(rows_context);
		opts.engine = KM_ENGINE_CPU;
		ReadRows(&spec, func_namespace, &opts, &scan, rows_context);
		if (!KmRunFit(&scan.matrix, scan.gpu, &opts, false, &fit))
			elog(ERROR, "the CPU engine did not run; please report a bug");
	}
	model = KmModelMake(fcinfo, &opts, &fit, scan.matrix.dim, fit.n_rows, scan.n_skipped);
	MemoryContextDelete(rows_context);
	return model;
}
