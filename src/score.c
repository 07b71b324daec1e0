/*
 * score.c
 *	  kmeans_score(model, source, column_name, sample, seed): how good a
 *	  clustering is, for a kmeans_model or a kmedoids_model.
 *
 * The figures are scikit-learn's, computed the same way on the same rows:
 *
 *	inertia				the model's objective over every row: for k-means the
 *						sum of squared distances (l2) or of 1 - cos (cosine)
 *						to the assigned centroid, for k-medoids the sum of
 *						distances to the assigned medoid
 *	silhouette			silhouette_score, exactly, on a sample of at most
 *						`sample` rows, with the model's metric (k-means: l2 or
 *						cosine)
 *	davies_bouldin		davies_bouldin_score over every row (Euclidean, on
 *						normalised rows for the cosine metric; none for sqfd)
 *	calinski_harabasz	calinski_harabasz_score, likewise
 *	n_scored			the rows the silhouette was computed on
 *
 * Labels are the model's assignment of each row (exact, ties to the lowest
 * cluster id).  The rows are put in a canonical order first: by their sample
 * key, a function of each row's contents and the seed (km_hash.h), largest
 * uniform first; the sample is the first rows of that order.  So the sample
 * does not depend on the scan order, and every sum below is taken in the
 * same order whatever the scan was: the same rows give the same figures,
 * bit for bit.  The seed defaults to the model's own.  A figure that needs
 * two clusters with rows, and fewer clusters than rows, is NULL otherwise.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "kmedoids.h"
#include "km_exact.h"

/* sample must be at least 2: a silhouette needs two rows. */
void
KmCheckSample(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("sample must not be NULL")));
	if (PG_GETARG_INT32(argno) < 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sample must be at least 2, not %d", PG_GETARG_INT32(argno)),
				 errdetail("The silhouette compares each sampled row with the others.")));
}

/* Row i, as doubles, normalised when asked to (cosine). */
static void
RowDouble(const float *x, int d, bool normalize, double *out)
{
	double		nrm = 0.0;

	for (int i = 0; i < d; i++)
		out[i] = (double) x[i];
	if (!normalize)
		return;
	for (int i = 0; i < d; i++)
		nrm += out[i] * out[i];
	nrm = sqrt(nrm);
	if (nrm > 0.0)
		for (int i = 0; i < d; i++)
			out[i] /= nrm;
}

/*
 * Davies-Bouldin and Calinski-Harabasz over every row, as scikit-learn
 * computes them: the cluster centres are the means of the rows with each
 * label.
 */
static void
DaviesCalinski(const kmd_data *data, const int32 *labels, int k, bool normalize,
			   KmScoreFigures *out)
{
	const int	d = data->d;
	const int64 n = data->n;
	int64	   *size = palloc0(sizeof(int64) * k);
	double	   *mean = palloc_extended(sizeof(double) * (Size) k * d, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	double	   *all = palloc0(sizeof(double) * d);
	double	   *intra = palloc0(sizeof(double) * k);
	double	   *row = palloc(sizeof(double) * d);
	int			nl = 0;
	double		extra = 0.0;
	double		within = 0.0;
	bool		intra_zero = true;
	bool		centres_zero = true;
	double		db = 0.0;

	out->davies_bouldin_null = out->calinski_harabasz_null = true;
	for (int64 i = 0; i < n; i++)
	{
		double	   *mc = mean + (Size) labels[i] * d;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		RowDouble(data->rows[i], d, normalize, row);
		if (size[labels[i]]++ == 0)
			nl++;
		for (int j = 0; j < d; j++)
		{
			mc[j] += row[j];
			all[j] += row[j];
		}
	}
	if (!(nl > 1 && nl < n))
		return;
	for (int c = 0; c < k; c++)
		for (int j = 0; j < d && size[c] > 0; j++)
			mean[(Size) c * d + j] /= (double) size[c];
	for (int j = 0; j < d; j++)
		all[j] /= (double) n;

	for (int64 i = 0; i < n; i++)
	{
		const double *mc = mean + (Size) labels[i] * d;
		double		s = 0.0;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		RowDouble(data->rows[i], d, normalize, row);
		for (int j = 0; j < d; j++)
			s += (row[j] - mc[j]) * (row[j] - mc[j]);
		within += s;
		intra[labels[i]] += sqrt(s);
	}
	for (int c = 0; c < k; c++)
	{
		double		s = 0.0;

		if (size[c] == 0)
			continue;
		for (int j = 0; j < d; j++)
			s += (mean[(Size) c * d + j] - all[j]) * (mean[(Size) c * d + j] - all[j]);
		extra += (double) size[c] * s;
		intra[c] /= (double) size[c];
		if (fabs(intra[c]) > 1e-8)
			intra_zero = false;
	}

	/* calinski_harabasz_score */
	out->calinski_harabasz = within == 0.0 ? 1.0 :
		extra * (double) (n - nl) / (within * (double) (nl - 1));
	out->calinski_harabasz_null = false;

	/*
	 * davies_bouldin_score: 0 when every intra-cluster distance or every
	 * distance between centres is 0 (np.allclose, atol 1e-8); a pair of
	 * centres at distance 0 counts as infinitely far apart.
	 */
	for (int a = 0; a < k; a++)
	{
		double		worst = 0.0;

		if (size[a] == 0)
			continue;
		for (int b = 0; b < k; b++)
		{
			double		s = 0.0;
			double		dist;
			double		r;

			if (size[b] == 0)
				continue;
			for (int j = 0; j < d; j++)
				s += (mean[(Size) a * d + j] - mean[(Size) b * d + j]) *
					(mean[(Size) a * d + j] - mean[(Size) b * d + j]);
			dist = sqrt(s);
			if (fabs(dist) > 1e-8)
				centres_zero = false;
			r = dist == 0.0 ? 0.0 : (intra[a] + intra[b]) / dist;
			if (r > worst)
				worst = r;
		}
		db += worst;
	}
	out->davies_bouldin = intra_zero || centres_zero ? 0.0 : db / (double) nl;
	out->davies_bouldin_null = false;
}

/*
 * The silhouette (on the first `sample` rows), Davies-Bouldin and
 * Calinski-Harabasz of labelled rows in canonical order; out->inertia is
 * the caller's.
 */
void
KmScoreRows(const kmd_data *data, const int32 *labels, int k, kmd_metric metric,
			double alpha, bool normalize, int sample, KmScoreFigures *out)
{
	kmd_data	head = *data;
	bool		ok;

	head.n = Min(data->n, (int64) sample);
	out->n_scored = head.n;
	out->silhouette = KmdRunSilhouette(&head, labels, k, metric, alpha, &ok);
	out->silhouette_null = !ok;
	out->davies_bouldin_null = out->calinski_harabasz_null = true;
	if (metric != KMD_METRIC_SQFD)
	{
		KmCheckMemory(mul_size(mul_size((Size) k + 4, (Size) data->d), 2 * sizeof(double)),
					  "kmeans_score");
		DaviesCalinski(data, labels, k, normalize, out);
	}
}

/* The figures as the function's result row. */
static Datum
ScoreResult(FunctionCallInfo fcinfo, const KmScoreFigures *f)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, f->silhouette_null, f->davies_bouldin_null,
	f->calinski_harabasz_null, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = Float8GetDatum(f->inertia);
	values[1] = Float8GetDatum(f->silhouette);
	values[2] = Float8GetDatum(f->davies_bouldin);
	values[3] = Float8GetDatum(f->calinski_harabasz);
	values[4] = Int64GetDatum(f->n_scored);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/* Reading the rows of a score. */
typedef struct KmScoreScan
{
	KmdRows		rows;
	int			dim;			/* the model's */
	bool		sqfd;
} KmScoreScan;

static void
ScoreRow(void *arg, Datum *values, bool *nulls)
{
	KmScoreScan *s = (KmScoreScan *) arg;
	ArrayType  *arr;

	if (nulls[0])
		return;
	arr = DatumGetArrayTypeP(values[0]);
	if (!s->sqfd)
	{
		int			dim = KmVectorDim(arr);

		if (dim != s->dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg_plural("vector has %d value, but the model has %d",
								   "vector has %d values, but the model has %d",
								   dim, dim, s->dim)));
	}
	else if (s->rows.fdim == 0)
		s->rows.fdim = s->dim;	/* every feature as long as the model's */
	KmdRowsAdd(&s->rows, arr, 0);
}

/*
 * Every non-NULL row of the column, in canonical order for seed, rounded as
 * a k-means model's storage says (as its fit rounded them).
 */
static void
ScoreRead(FunctionCallInfo fcinfo, int dim, kmd_metric metric, km_storage storage,
		  uint64 seed, KmScoreScan *scan, KmdOrdered *ordered)
{
	KmScanSpec	spec;

	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("source must not be NULL")));
	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("column_name must not be NULL")));
	memset(&spec, 0, sizeof(spec));
	spec.relid = PG_GETARG_OID(1);
	spec.vector_column = text_to_cstring(PG_GETARG_TEXT_PP(2));

	memset(scan, 0, sizeof(*scan));
	scan->dim = dim;
	scan->sqfd = metric == KMD_METRIC_SQFD;
	KmdRowsInit(&scan->rows, CurrentMemoryContext, metric, false);
	KmMatrixSetStorage(&scan->rows.dense, storage);
	KmScanTable(&spec, ScoreRow, scan);
	if (scan->rows.n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmeans_score has no rows to score"),
				 errdetail("Every row was NULL, or there were no rows.")));
	KmCheckMemory(add_size(add_size(scan->rows.bytes, scan->rows.dense.bytes),
						   add_size(KmdOrderBytes(scan->rows.n),
									mul_size((Size) scan->rows.n, sizeof(int32) + sizeof(double)))),
				  "kmeans_score");
	KmdOrder(&scan->rows, false, true, seed, ordered);
}

/* The sample's seed: the argument, else the model's, else 0. */
static uint64
ScoreSeed(FunctionCallInfo fcinfo, bool model_seed_null, int64 model_seed)
{
	if (!PG_ARGISNULL(4))
		return (uint64) PG_GETARG_INT64(4);
	return model_seed_null ? 0 : (uint64) model_seed;
}

PG_FUNCTION_INFO_V1(kmeans_score);

/*
 * kmeans_score(model kmeans_model, source, column_name, sample, seed) ->
 * (inertia, silhouette, davies_bouldin, calinski_harabasz, n_scored)
 */
Datum
kmeans_score(PG_FUNCTION_ARGS)
{
	HeapTupleHeader th;
	KmModel		model;
	KmScoreScan scan;
	KmdOrdered	ordered;
	KmScoreFigures fig;
	km_data		data;
	int32	   *labels;
	int32	   *olabels;
	double	   *dist;
	bool		seed_null;
	Datum		seed;
	int			cosine;
	float	   *unit;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("model must not be NULL")));
	KmCheckSample(fcinfo, 3);
	th = PG_GETARG_HEAPTUPLEHEADER(0);
	KmModelRead(th, &model);
	seed = GetAttributeByName(th, "seed", &seed_null);
	cosine = model.metric == KM_METRIC_COSINE;

	ScoreRead(fcinfo, model.dim, cosine ? KMD_METRIC_COSINE : KMD_METRIC_L2, model.storage,
			  ScoreSeed(fcinfo, seed_null, seed_null ? 0 : DatumGetInt64(seed)), &scan, &ordered);

	/* the model's labels, by the engine, in scan order, then in canonical order */
	data = KmMatrixData(&scan.rows.dense);
	labels = palloc_extended(sizeof(int32) * (Size) data.n, MCXT_ALLOC_HUGE);
	olabels = palloc_extended(sizeof(int32) * (Size) data.n, MCXT_ALLOC_HUGE);
	dist = palloc_extended(sizeof(double) * (Size) data.n, MCXT_ALLOC_HUGE);
	KmRunAssign(&data, model.centroids, model.k, model.metric, labels, dist);
	for (int64 i = 0; i < data.n; i++)
		olabels[i] = labels[ordered.perm[i]];

	/* inertia: the engines' cost, summed in canonical order */
	memset(&fig, 0, sizeof(fig));
	unit = palloc(sizeof(float) * model.dim);
	for (int64 i = 0; i < data.n; i++)
	{
		const float *x = ordered.rows[i];
		const float *c = model.centroids + (Size) olabels[i] * model.dim;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (cosine)
		{
			km_normalize_row(x, unit, model.dim);
			fig.inertia += km_exact_cost(unit, c, model.cnorms[olabels[i]], model.dim, 1);
		}
		else
			fig.inertia += km_exact_sqdist(x, c, model.dim);
	}
	KmScoreRows(&ordered.data, olabels, model.k, cosine ? KMD_METRIC_COSINE : KMD_METRIC_L2,
				0.0, cosine, PG_GETARG_INT32(3), &fig);
	return ScoreResult(fcinfo, &fig);
}

PG_FUNCTION_INFO_V1(kmedoids_score);

/*
 * kmeans_score(model kmedoids_model, source, column_name, sample, seed) ->
 * the same figures for a k-medoids model.
 */
Datum
kmedoids_score(PG_FUNCTION_ARGS)
{
	KmdModel	model;
	KmScoreScan scan;
	KmdOrdered	ordered;
	KmScoreFigures fig;
	int32	   *labels;
	double	   *dist;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("model must not be NULL")));
	KmCheckSample(fcinfo, 3);
	KmdModelRead(PG_GETARG_HEAPTUPLEHEADER(0), &model);
	ScoreRead(fcinfo, model.dim, model.metric, KM_STORAGE_FLOAT32,
			  ScoreSeed(fcinfo, model.seed_null, model.seed), &scan, &ordered);

	labels = palloc_extended(sizeof(int32) * (Size) ordered.data.n, MCXT_ALLOC_HUGE);
	dist = palloc_extended(sizeof(double) * (Size) ordered.data.n, MCXT_ALLOC_HUGE);
	KmdRunAssign(&ordered.data, &model, labels, dist);
	memset(&fig, 0, sizeof(fig));
	for (int64 i = 0; i < ordered.data.n; i++)
		fig.inertia += dist[i];
	KmScoreRows(&ordered.data, labels, model.k, model.metric, model.alpha,
				model.metric == KMD_METRIC_COSINE, PG_GETARG_INT32(3), &fig);
	return ScoreResult(fcinfo, &fig);
}
