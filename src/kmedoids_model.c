/*
 * kmedoids_model.c
 *	  The kmedoids_model composite: building it from a fit, reading and
 *	  checking one (possibly typed by hand).
 *
 * Medoids are rows.  For the vector metrics, medoids is a k x dim real[];
 * for sqfd, whose signatures have different numbers of features, it is a
 * k x F x dim real[] (F the most features of any medoid), medoid j being
 * the first medoid_features[j] features of its slice and the rest zeros.  A
 * zero feature has weight 0 and adds nothing to any distance, but the model
 * says exactly which features are the medoid's, and that is what is used.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "kmedoids.h"
#include "kmd_metric.h"

/* Attribute numbers (0-based) of kmedoids_model, as sql/kmeans_gpu--0.1--0.2.sql declares it. */
enum
{
	KMD_K,
	KMD_DIM,
	KMD_METRIC,
	KMD_MEDOIDS,
	KMD_MEDOID_IDS,
	KMD_SIZES,
	KMD_COST,
	KMD_ITERATIONS,
	KMD_CONVERGED,
	KMD_ENGINE,
	KMD_N_ROWS,
	KMD_N_SKIPPED,
	KMD_CLUSTER_COST,
	KMD_METHOD,
	KMD_INIT,
	KMD_SEED,
	KMD_MAX_ITER,
	KMD_ALPHA,
	KMD_CHAIN_LENGTH,
	KMD_MEDOID_FEATURES,
	KMD_NATTS
};

static Datum
Int64Array(const int64 *v, int n)
{
	Datum	   *e = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		e[i] = Int64GetDatum(v[i]);
	return PointerGetDatum(construct_array(e, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
										   TYPALIGN_DOUBLE));
}

/*
 * The model Datum for a finished fit on the ordered rows, for a function
 * returning kmedoids_model.
 */
Datum
KmdModelMake(FunctionCallInfo fcinfo, const KmdOptions *opts, const KmdOrdered *rows,
			 const KmdFitOutput *fit, int dim, int64 n_skipped)
{
	const kmd_result *res = &fit->result;
	const int	k = opts->k;
	TupleDesc	tupdesc;
	Datum		values[KMD_NATTS];
	bool		nulls[KMD_NATTS];
	Datum	   *elems;
	int			lbs[3] = {1, 1, 1};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be kmedoids_model");
	tupdesc = BlessTupleDesc(tupdesc);
	if (tupdesc->natts != KMD_NATTS)
		elog(ERROR, "kmedoids_model has %d attributes, expected %d; is the extension up to date?",
			 tupdesc->natts, KMD_NATTS);

	memset(nulls, 0, sizeof(nulls));
	values[KMD_K] = Int32GetDatum(k);
	values[KMD_DIM] = Int32GetDatum(dim);
	values[KMD_METRIC] = CStringGetTextDatum(KmdMetricName(opts->metric));

	if (opts->metric != KMD_METRIC_SQFD)
	{
		int			dims[2] = {k, dim};

		elems = palloc_extended(sizeof(Datum) * (Size) k * dim, MCXT_ALLOC_HUGE);
		for (int c = 0; c < k; c++)
		{
			const float *x = rows->rows[res->medoids[c]];

			for (int i = 0; i < dim; i++)
				elems[(Size) c * dim + i] = Float4GetDatum(x[i]);
		}
		values[KMD_MEDOIDS] = PointerGetDatum(construct_md_array(elems, NULL, 2, dims, lbs,
																 FLOAT4OID, sizeof(float4), true,
																 TYPALIGN_INT));
		nulls[KMD_MEDOID_FEATURES] = true;
	}
	else
	{
		int			F = 1;
		int			dims[3];
		Datum	   *mf = palloc(sizeof(Datum) * k);

		for (int c = 0; c < k; c++)
			F = Max(F, rows->nfeat[res->medoids[c]]);
		if ((Size) k * F * dim > MaxAllocSize / sizeof(float4))
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("the medoids of this model exceed the 1 GB limit of an array")));
		dims[0] = k;
		dims[1] = F;
		dims[2] = dim;
		elems = palloc_extended(sizeof(Datum) * (Size) k * F * dim, MCXT_ALLOC_HUGE);
		for (int c = 0; c < k; c++)
		{
			const float *x = rows->rows[res->medoids[c]];
			int			m = rows->nfeat[res->medoids[c]];

			for (Size i = 0; i < (Size) F * dim; i++)
				elems[(Size) c * F * dim + i] = Float4GetDatum(i < (Size) m * dim ? x[i] : 0.0f);
			mf[c] = Int32GetDatum(m);
		}
		values[KMD_MEDOIDS] = PointerGetDatum(construct_md_array(elems, NULL, 3, dims, lbs,
																 FLOAT4OID, sizeof(float4), true,
																 TYPALIGN_INT));
		values[KMD_MEDOID_FEATURES] = PointerGetDatum(construct_array(mf, k, INT4OID, sizeof(int32),
																	  true, TYPALIGN_INT));
	}
	pfree(elems);

	if (rows->ids != NULL)
	{
		int64	   *ids = palloc(sizeof(int64) * k);

		for (int c = 0; c < k; c++)
			ids[c] = rows->ids[res->medoids[c]];
		values[KMD_MEDOID_IDS] = Int64Array(ids, k);
	}
	else
		nulls[KMD_MEDOID_IDS] = true;

	values[KMD_SIZES] = Int64Array(res->sizes, k);
	{
		Datum	   *e = palloc(sizeof(Datum) * k);

		for (int c = 0; c < k; c++)
			e[c] = Float8GetDatum(res->cluster_cost[c]);
		values[KMD_CLUSTER_COST] = PointerGetDatum(construct_array(e, k, FLOAT8OID, sizeof(float8),
																   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	}
	values[KMD_COST] = Float8GetDatum(res->cost);
	values[KMD_ITERATIONS] = Int32GetDatum(res->iterations);
	values[KMD_CONVERGED] = BoolGetDatum(res->converged != 0);
	values[KMD_ENGINE] = CStringGetTextDatum(fit->engine);
	values[KMD_N_ROWS] = Int64GetDatum(rows->data.n);
	values[KMD_N_SKIPPED] = Int64GetDatum(n_skipped);
	values[KMD_METHOD] = CStringGetTextDatum(KmdMethodName(opts->method));
	values[KMD_INIT] = CStringGetTextDatum(KmInitName(opts->init));
	values[KMD_SEED] = Int64GetDatum(opts->seed);
	values[KMD_MAX_ITER] = Int32GetDatum(opts->max_iter);
	values[KMD_ALPHA] = Float8GetDatum(opts->alpha);
	nulls[KMD_ALPHA] = opts->metric != KMD_METRIC_SQFD;
	values[KMD_CHAIN_LENGTH] = Int32GetDatum(opts->chain_length);
	nulls[KMD_CHAIN_LENGTH] = opts->init != KM_INIT_AFKMC2;

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
			 errmsg("invalid kmedoids_model: %s", detail)));
}

/*
 * Read and check a model; out's arrays are palloc'd.  Everything assignment
 * depends on is checked, so that no inconsistent model reaches an engine.
 */
void
KmdModelRead(HeapTupleHeader model, KmdModel *out)
{
	TupleDesc	tupdesc;
	HeapTupleData tuple;
	Datum		values[KMD_NATTS];
	bool		nulls[KMD_NATTS];
	ArrayType  *medoids;
	char	   *metric;
	bool		found;
	int			k;
	int			dim;
	int			F = 1;
	Size		nval;
	float	   *x;

	tupdesc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(model),
									 HeapTupleHeaderGetTypMod(model));
	if (tupdesc->natts != KMD_NATTS)
		elog(ERROR, "kmedoids_model has %d attributes, expected %d; is the extension up to date?",
			 tupdesc->natts, KMD_NATTS);
	tuple.t_len = HeapTupleHeaderGetDatumLength(model);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = model;
	heap_deform_tuple(&tuple, tupdesc, values, nulls);
	ReleaseTupleDesc(tupdesc);

	memset(out, 0, sizeof(*out));
	if (nulls[KMD_K] || DatumGetInt32(values[KMD_K]) < 1)
		BadModel("k must be at least 1", 0, 0);
	if (nulls[KMD_DIM] || DatumGetInt32(values[KMD_DIM]) < 1)
		BadModel("dim must be at least 1", 0, 0);
	if (nulls[KMD_METRIC])
		BadModel("metric is NULL", 0, 0);
	k = DatumGetInt32(values[KMD_K]);
	dim = DatumGetInt32(values[KMD_DIM]);
	metric = TextDatumGetCString(values[KMD_METRIC]);
	out->metric = KmdMetricByName(metric, &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid kmedoids_model: unknown metric \"%s\"", metric)));
	out->k = k;
	out->dim = dim;
	out->seed_null = nulls[KMD_SEED];
	out->seed = nulls[KMD_SEED] ? 0 : DatumGetInt64(values[KMD_SEED]);

	if (nulls[KMD_MEDOIDS])
		BadModel("medoids is NULL", 0, 0);
	medoids = DatumGetArrayTypeP(values[KMD_MEDOIDS]);
	if (array_contains_nulls(medoids))
		BadModel("medoids contains NULL values", 0, 0);
	if (ARR_ELEMTYPE(medoids) != FLOAT4OID)
		BadModel("medoids must be real[]", 0, 0);

	if (out->metric != KMD_METRIC_SQFD)
	{
		if (ARR_NDIM(medoids) != 2 || ARR_DIMS(medoids)[0] != k || ARR_DIMS(medoids)[1] != dim)
			BadModel("medoids must be a k x dim array (%d x %d)", k, dim);
	}
	else
	{
		ArrayType  *mf;
		double		alpha;

		if (dim < 2)
			BadModel("dim of an sqfd model counts a weight and at least one coordinate, not %d",
					 dim, 0);
		if (ARR_NDIM(medoids) != 3 || ARR_DIMS(medoids)[0] != k || ARR_DIMS(medoids)[2] != dim)
			BadModel("sqfd medoids must be a k x features x dim array (k = %d, dim = %d)", k, dim);
		F = ARR_DIMS(medoids)[1];
		if (nulls[KMD_MEDOID_FEATURES])
			BadModel("medoid_features is NULL, which metric sqfd needs", 0, 0);
		mf = DatumGetArrayTypeP(values[KMD_MEDOID_FEATURES]);
		if (ARR_NDIM(mf) != 1 || ARR_DIMS(mf)[0] != k || array_contains_nulls(mf))
			BadModel("medoid_features must hold one count per medoid (%d)", k, 0);
		out->nfeat = palloc(sizeof(int32) * k);
		memcpy(out->nfeat, ARR_DATA_PTR(mf), sizeof(int32) * k);
		for (int c = 0; c < k; c++)
			if (out->nfeat[c] < 1 || out->nfeat[c] > F)
				BadModel("medoid_features must be between 1 and %d, not %d", F, out->nfeat[c]);
		if (nulls[KMD_ALPHA])
			BadModel("alpha is NULL, which metric sqfd needs", 0, 0);
		alpha = DatumGetFloat8(values[KMD_ALPHA]);
		if (!(alpha > 0.0) || isinf(alpha))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid kmedoids_model: alpha must be a finite number > 0, not %g", alpha)));
		out->alpha = alpha;
	}

	nval = (Size) k * F * dim;
	x = palloc_extended(sizeof(float) * nval, MCXT_ALLOC_HUGE);
	memcpy(x, ARR_DATA_PTR(medoids), sizeof(float) * nval);
	for (Size i = 0; i < nval; i++)
		if (!isfinite(x[i]))
			BadModel("medoids contains NaN or infinite values", 0, 0);

	out->medoids = palloc(sizeof(float *) * k);
	out->aux = palloc(sizeof(double) * k);
	for (int c = 0; c < k; c++)
	{
		const float *mc = x + (Size) c * F * dim;
		int			m = out->nfeat != NULL ? out->nfeat[c] : 1;

		out->medoids[c] = mc;
		if (out->metric == KMD_METRIC_SQFD)
		{
			double		wsum = 0.0;

			for (int f = 0; f < m; f++)
			{
				if (mc[(Size) f * dim] < 0.0f)
					BadModel("medoid %d has a negative signature weight", c + 1, 0);
				wsum += mc[(Size) f * dim];
			}
			if (!(wsum > 0.0))
				BadModel("medoid %d has signature weights that are all zero", c + 1, 0);
		}
		out->aux[c] = kmd_aux(out->metric, mc, m, dim, out->alpha);
		if (out->metric == KMD_METRIC_COSINE && !(out->aux[c] > 0.0))
			BadModel("medoid %d is a zero vector, which metric cosine cannot use", c + 1, 0);
	}
	out->data.n = k;
	out->data.d = dim;
	out->data.rows = out->medoids;
	out->data.nfeat = out->nfeat;
}

/*
 * The nearest medoid of a row (m features for sqfd), ties to the lowest
 * cluster id, and its distance: exactly what the engines decide.
 */
int
KmdModelNearest(const KmdModel *model, const float *row, int m, double *distance)
{
	double		aux = kmd_aux(model->metric, row, m, model->dim, model->alpha);
	int			best = 0;
	double		bestd = 0.0;

	for (int c = 0; c < model->k; c++)
	{
		double		v = kmd_pair(model->metric, row, m, aux, model->medoids[c],
								 model->nfeat != NULL ? model->nfeat[c] : 0, model->aux[c],
								 model->dim, model->alpha);

		if (c == 0 || v < bestd)
		{
			best = c;
			bestd = v;
		}
	}
	*distance = bestd;
	return best;
}
