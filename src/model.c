/*
 * model.c
 *	  The kmeans_model composite: building it from a fit, reading and
 *	  checking one (possibly built by hand), and kmeans_centroids().
 *
 * A model is a plain value, so anything can arrive here: a model read back
 * from a table, or ROW(...)::kmeans_model typed by a user.  KmModelRead
 * checks every field that assignment depends on, so no inconsistent model
 * reaches an engine.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "kmeans_gpu.h"
#include "km_exact.h"

/* Attribute numbers (0-based) of kmeans_model, as sql/kmeans_gpu--*.sql declares it. */
enum
{
	MODEL_K,
	MODEL_DIM,
	MODEL_METRIC,
	MODEL_CENTROIDS,
	MODEL_SIZES,
	MODEL_INERTIA,
	MODEL_ITERATIONS,
	MODEL_CONVERGED,
	MODEL_ENGINE,
	MODEL_N_ROWS,
	MODEL_N_SKIPPED,
	MODEL_CLUSTER_INERTIA,
	MODEL_INIT,
	MODEL_SEED,
	MODEL_N_INIT,
	MODEL_MAX_ITER,
	MODEL_TOL,
	MODEL_STORAGE,				/* 0.2 */
	MODEL_NATTS
};

/*
 * Attributes of kmeans_model as 0.1 declared it: the type of a database not
 * yet updated (ALTER EXTENSION kmeans_gpu UPDATE), which this library
 * serves too.
 */
#define MODEL_NATTS_0_1 MODEL_STORAGE

/* The layout a model of tupdesc has: one of the two above, or an ERROR. */
static int
ModelAtts(TupleDesc tupdesc)
{
	if (tupdesc->natts != MODEL_NATTS && tupdesc->natts != MODEL_NATTS_0_1)
		elog(ERROR, "kmeans_model has %d attributes, expected %d; is the extension up to date?",
			 tupdesc->natts, MODEL_NATTS);
	return tupdesc->natts;
}

/*
 * The model Datum for a finished fit, for a function returning kmeans_model.
 */
Datum
KmModelMake(FunctionCallInfo fcinfo, const KmOptions *opts, const KmFitOutput *fit,
			int dim, int64 n_rows, int64 n_skipped)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be kmeans_model");
	return KmModelMakeTuple(tupdesc, opts, fit, dim, n_rows, n_skipped);
}

/*
 * The same, for kmeans_model's tuple descriptor tupdesc (a function that
 * returns models inside its rows: kmeans_sweep).
 */
Datum
KmModelMakeTuple(TupleDesc tupdesc, const KmOptions *opts, const KmFitOutput *fit,
				 int dim, int64 n_rows, int64 n_skipped)
{
	Datum		values[MODEL_NATTS];
	bool		nulls[MODEL_NATTS];
	int			k = opts->k;
	int			dims[2];
	int			lbs[2] = {1, 1};
	Datum	   *elems;
	int			nelems;

	tupdesc = BlessTupleDesc(tupdesc);
	if (ModelAtts(tupdesc) == MODEL_NATTS_0_1 && opts->storage != KM_STORAGE_FLOAT32)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("storage '%s' needs kmeans_gpu 0.2", KmStorageName(opts->storage)),
				 errdetail("kmeans_model has no storage attribute before 0.2, so the model could not say how its rows were rounded."),
				 errhint("Run ALTER EXTENSION kmeans_gpu UPDATE.")));

	memset(nulls, 0, sizeof(nulls));
	values[MODEL_K] = Int32GetDatum(k);
	values[MODEL_DIM] = Int32GetDatum(dim);
	values[MODEL_METRIC] = CStringGetTextDatum(KmMetricName(opts->metric));

	nelems = k * dim;
	elems = palloc_extended(sizeof(Datum) * (Size) nelems, MCXT_ALLOC_HUGE);
	for (int i = 0; i < nelems; i++)
		elems[i] = Float4GetDatum(fit->centroids[i]);
	dims[0] = k;
	dims[1] = dim;
	values[MODEL_CENTROIDS] = PointerGetDatum(construct_md_array(elems, NULL, 2, dims, lbs,
																 FLOAT4OID, sizeof(float4), true, TYPALIGN_INT));
	pfree(elems);

	elems = palloc(sizeof(Datum) * k);
	for (int j = 0; j < k; j++)
		elems[j] = Int64GetDatum(fit->sizes[j]);
	values[MODEL_SIZES] = PointerGetDatum(construct_array(elems, k, INT8OID, sizeof(int64),
														  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	for (int j = 0; j < k; j++)
		elems[j] = Float8GetDatum(fit->cluster_inertia[j]);
	values[MODEL_CLUSTER_INERTIA] = PointerGetDatum(construct_array(elems, k, FLOAT8OID, sizeof(float8),
																	FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	pfree(elems);

	values[MODEL_INERTIA] = Float8GetDatum(fit->inertia);
	values[MODEL_ITERATIONS] = Int32GetDatum(fit->iterations);
	values[MODEL_CONVERGED] = BoolGetDatum(fit->converged);
	values[MODEL_ENGINE] = CStringGetTextDatum(fit->engine);
	values[MODEL_N_ROWS] = Int64GetDatum(n_rows);
	values[MODEL_N_SKIPPED] = Int64GetDatum(n_skipped);
	values[MODEL_INIT] = CStringGetTextDatum(KmInitName(opts->init));
	values[MODEL_SEED] = Int64GetDatum(fit->seed);
	values[MODEL_N_INIT] = Int32GetDatum(opts->n_init);
	values[MODEL_MAX_ITER] = Int32GetDatum(opts->max_iter);
	values[MODEL_TOL] = Float8GetDatum(opts->tol);
	values[MODEL_STORAGE] = CStringGetTextDatum(KmStorageName(opts->storage));

	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

static void
BadModel(const char *fmt, int a, int b) pg_attribute_noreturn();

static void
BadModel(const char *fmt, int a, int b)
{
	char		detail[256];

	snprintf(detail, sizeof(detail), fmt, a, b);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid kmeans_model: %s", detail)));
}

/* A per-cluster array of the model: NULL, or k non-NULL values. */
static ArrayType *
ClusterArray(Datum value, bool isnull, int k, const char *name)
{
	ArrayType  *arr;

	if (isnull)
		return NULL;
	arr = DatumGetArrayTypeP(value);
	if (ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != k || array_contains_nulls(arr))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid kmeans_model: %s must hold one value per cluster (%d), without NULLs",
						name, k)));
	return arr;
}

/*
 * Read and check a model; out's arrays are palloc'd.
 */
void
KmModelRead(HeapTupleHeader model, KmModel *out)
{
	TupleDesc	tupdesc;
	HeapTupleData tuple;
	Datum		values[MODEL_NATTS];
	bool		nulls[MODEL_NATTS];
	ArrayType  *centroids;
	ArrayType  *arr;
	char	   *metric;
	int			k;
	int			dim;
	Size		kd;

	tupdesc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(model),
									 HeapTupleHeaderGetTypMod(model));
	nulls[MODEL_STORAGE] = true;	/* a 0.1 type has no such attribute */
	(void) ModelAtts(tupdesc);
	tuple.t_len = HeapTupleHeaderGetDatumLength(model);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = model;
	heap_deform_tuple(&tuple, tupdesc, values, nulls);
	ReleaseTupleDesc(tupdesc);

	if (nulls[MODEL_K])
		BadModel("k is NULL", 0, 0);
	if (DatumGetInt32(values[MODEL_K]) < 1)
		BadModel("k must be at least 1, not %d", DatumGetInt32(values[MODEL_K]), 0);
	if (nulls[MODEL_DIM])
		BadModel("dim is NULL", 0, 0);
	if (DatumGetInt32(values[MODEL_DIM]) < 1)
		BadModel("dim must be at least 1, not %d", DatumGetInt32(values[MODEL_DIM]), 0);
	k = DatumGetInt32(values[MODEL_K]);
	dim = DatumGetInt32(values[MODEL_DIM]);

	if (nulls[MODEL_METRIC])
		BadModel("metric is NULL", 0, 0);
	metric = TextDatumGetCString(values[MODEL_METRIC]);
	if (KmMetricByName(metric) >= 0)
		out->metric = (km_metric) KmMetricByName(metric);
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid kmeans_model: unknown metric \"%s\"", metric)));

	/* NULL: a model stored before 0.2, whose rows were float32 */
	out->storage = KM_STORAGE_FLOAT32;
	if (!nulls[MODEL_STORAGE])
	{
		char	   *storage = TextDatumGetCString(values[MODEL_STORAGE]);

		if (KmStorageByName(storage) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid kmeans_model: unknown storage \"%s\"", storage)));
		out->storage = (km_storage) KmStorageByName(storage);
	}

	if (nulls[MODEL_CENTROIDS])
		BadModel("centroids is NULL", 0, 0);
	centroids = DatumGetArrayTypeP(values[MODEL_CENTROIDS]);
	if (ARR_NDIM(centroids) != 2)
		BadModel("centroids must be a two-dimensional array (k rows of dim values), not %d-dimensional",
				 ARR_NDIM(centroids), 0);
	if (ARR_DIMS(centroids)[0] != k)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg_plural("invalid kmeans_model: centroids has %d row, but k is %d",
							   "invalid kmeans_model: centroids has %d rows, but k is %d",
							   ARR_DIMS(centroids)[0], ARR_DIMS(centroids)[0], k)));
	if (ARR_DIMS(centroids)[1] != dim)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg_plural("invalid kmeans_model: centroids has %d value per row, but dim is %d",
							   "invalid kmeans_model: centroids has %d values per row, but dim is %d",
							   ARR_DIMS(centroids)[1], ARR_DIMS(centroids)[1], dim)));
	if (array_contains_nulls(centroids))
		BadModel("centroids contains NULL values", 0, 0);

	kd = (Size) k * dim;
	out->k = k;
	out->dim = dim;
	out->centroids = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);
	memcpy(out->centroids, ARR_DATA_PTR(centroids), sizeof(float) * kd);
	for (Size i = 0; i < kd; i++)
		if (!isfinite(out->centroids[i]))
			BadModel("centroids contains NaN or infinite values", 0, 0);

	out->cnorms = NULL;
	if (out->metric == KM_METRIC_COSINE)
	{
		out->cnorms = palloc(sizeof(double) * k);
		for (int j = 0; j < k; j++)
		{
			out->cnorms[j] = km_exact_norm(out->centroids + (Size) j * dim, dim);
			if (!(out->cnorms[j] > 0))
				BadModel("centroid %d is a zero vector, which metric cosine cannot use", j, 0);
		}
	}

	out->sizes = NULL;
	arr = ClusterArray(values[MODEL_SIZES], nulls[MODEL_SIZES], k, "sizes");
	if (arr != NULL)
	{
		out->sizes = palloc(sizeof(int64) * k);
		memcpy(out->sizes, ARR_DATA_PTR(arr), sizeof(int64) * k);
	}
	out->cluster_inertia = NULL;
	arr = ClusterArray(values[MODEL_CLUSTER_INERTIA], nulls[MODEL_CLUSTER_INERTIA], k,
					   "cluster_inertia");
	if (arr != NULL)
	{
		out->cluster_inertia = palloc(sizeof(double) * k);
		memcpy(out->cluster_inertia, ARR_DATA_PTR(arr), sizeof(double) * k);
	}
}

PG_FUNCTION_INFO_V1(kmeans_centroids);

/*
 * kmeans_centroids(model) -> (cluster_id, centroid, size, inertia), one row
 * per cluster, cluster ids from 0.
 */
Datum
kmeans_centroids(PG_FUNCTION_ARGS)
{
	KmModel		model;
	ReturnSetInfo *rsinfo;
	Datum	   *elems;

	KmModelRead(PG_GETARG_HEAPTUPLEHEADER(0), &model);
	rsinfo = KmMaterialize(fcinfo);

	elems = palloc(sizeof(Datum) * model.dim);
	for (int j = 0; j < model.k; j++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < model.dim; i++)
			elems[i] = Float4GetDatum(model.centroids[(Size) j * model.dim + i]);
		values[0] = Int32GetDatum(j);
		values[1] = PointerGetDatum(construct_array(elems, model.dim, FLOAT4OID, sizeof(float4),
													true, TYPALIGN_INT));
		if (model.sizes != NULL)
			values[2] = Int64GetDatum(model.sizes[j]);
		else
			nulls[2] = true;
		if (model.cluster_inertia != NULL)
			values[3] = Float8GetDatum(model.cluster_inertia[j]);
		else
			nulls[3] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
