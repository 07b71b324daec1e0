/*
 * kmedoids_labels.c
 *	  Assignment to a k-medoids model: kmedoids_assign(model, vec) for one
 *	  row, kmedoids_labels(model, source, column_name, id_column) for a table.
 *
 * Both decide with kmd_pair() (kmd_metric.h), ties to the lowest cluster
 * id, as the engine does, so a row gets the same cluster from either, and
 * from the fit that made the model.
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "kmedoids.h"

/* The parsed model of the last call, kept across calls of one query. */
typedef struct KmdAssignCache
{
	MemoryContext context;
	Size		len;
	char	   *bytes;			/* the model as it arrived, to recognise it */
	KmdModel	model;
	float	   *vec;			/* dense: dim values */
} KmdAssignCache;

static KmdAssignCache *
CachedModel(FunctionCallInfo fcinfo, HeapTupleHeader th)
{
	KmdAssignCache *cache = (KmdAssignCache *) fcinfo->flinfo->fn_extra;
	Size		len = HeapTupleHeaderGetDatumLength(th);
	MemoryContext old;

	if (cache != NULL && cache->len == len && memcmp(cache->bytes, th, len) == 0)
		return cache;
	if (cache == NULL)
	{
		cache = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(KmdAssignCache));
		fcinfo->flinfo->fn_extra = cache;
	}
	else
		MemoryContextDelete(cache->context);
	cache->len = 0;
	cache->context = AllocSetContextCreate(fcinfo->flinfo->fn_mcxt, "kmedoids_assign model",
										   ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cache->context);
	KmdModelRead(th, &cache->model);
	cache->vec = palloc(sizeof(float) * cache->model.dim);
	cache->bytes = palloc_extended(len, MCXT_ALLOC_HUGE);
	memcpy(cache->bytes, th, len);
	cache->len = len;
	MemoryContextSwitchTo(old);
	return cache;
}

/*
 * A row of the model's kind: a vector of dim values (into buf), or an sqfd
 * signature of dim-value features (palloc'd).  Returns the values and sets
 * *m (features; 1 for a vector).
 */
static const float *
ReadRow(const KmdModel *model, ArrayType *arr, float *buf, int *m)
{
	if (model->metric == KMD_METRIC_SQFD)
	{
		float	   *x;

		*m = KmdSignatureRead(arr, model->dim, &x, false, NULL);
		return x;
	}
	else
	{
		int			dim = KmVectorDim(arr);

		if (dim != model->dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg_plural("vector has %d value, but the model's medoids have %d",
								   "vector has %d values, but the model's medoids have %d",
								   dim, dim, model->dim)));
		KmVectorRead(arr, dim, buf);
		if (model->metric == KMD_METRIC_COSINE)
		{
			bool		zero = true;

			for (int i = 0; i < dim && zero; i++)
				zero = buf[i] == 0.0f;
			if (zero)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("zero vector cannot be assigned with metric cosine"),
						 errdetail("A vector of zeros has no direction.")));
		}
		*m = 1;
		return buf;
	}
}

PG_FUNCTION_INFO_V1(kmedoids_assign);

/*
 * kmedoids_assign(model, vec real[] | float8[]) -> nearest cluster id.
 */
Datum
kmedoids_assign(PG_FUNCTION_ARGS)
{
	KmdAssignCache *cache = CachedModel(fcinfo, PG_GETARG_HEAPTUPLEHEADER(0));
	int			m;
	const float *row = ReadRow(&cache->model, PG_GETARG_ARRAYTYPE_P(1), cache->vec, &m);
	double		distance;

	PG_RETURN_INT32(KmdModelNearest(&cache->model, row, m, &distance));
}

/* A batch of kmedoids_labels rows waiting for the engine. */
typedef struct KmdLabelScan
{
	const KmdModel *model;
	ReturnSetInfo *rsinfo;
	MemoryContext batch_context;	/* the batch's signatures */
	int			cap;			/* rows per batch */
	Size		max_values;		/* values per batch */
	Size		nvalues;
	int			nrows;
	int			nvec;
	float	   *x;				/* dense: nvec x dim */
	const float **rows;
	int32	   *nfeat;
	int64	   *ids;
	bool	   *id_null;
	int		   *slot;			/* row -> index among vectors, -1 for NULL */
	int32	   *labels;
	double	   *distances;
} KmdLabelScan;

static void
FlushBatch(KmdLabelScan *s)
{
	if (s->nvec > 0)
	{
		kmd_data	data;

		data.n = s->nvec;
		data.d = s->model->dim;
		data.rows = s->rows;
		data.nfeat = s->model->metric == KMD_METRIC_SQFD ? s->nfeat : NULL;
		KmdRunAssign(&data, s->model, s->labels, s->distances);
	}
	for (int i = 0; i < s->nrows; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {s->id_null[i], false, false};
		int			j = s->slot[i];

		values[0] = Int64GetDatum(s->ids[i]);
		if (j < 0)
		{
			nulls[1] = nulls[2] = true;
			values[1] = values[2] = (Datum) 0;
		}
		else
		{
			values[1] = Int32GetDatum(s->labels[j]);
			values[2] = Float8GetDatum(s->distances[j]);
		}
		tuplestore_putvalues(s->rsinfo->setResult, s->rsinfo->setDesc, values, nulls);
	}
	s->nrows = 0;
	s->nvec = 0;
	s->nvalues = 0;
	MemoryContextReset(s->batch_context);
}

static void
LabelRow(void *arg, Datum *values, bool *nulls)
{
	KmdLabelScan *s = (KmdLabelScan *) arg;
	int			i = s->nrows;

	s->id_null[i] = nulls[1];
	s->ids[i] = nulls[1] ? 0 : DatumGetInt64(values[1]);
	s->slot[i] = -1;
	if (!nulls[0])
	{
		ArrayType  *arr = DatumGetArrayTypeP(values[0]);
		int			m;
		const float *row;

		if (s->model->metric == KMD_METRIC_SQFD)
		{
			MemoryContext old = MemoryContextSwitchTo(s->batch_context);

			row = ReadRow(s->model, arr, NULL, &m);
			MemoryContextSwitchTo(old);
			s->nvalues += (Size) m * s->model->dim;
		}
		else
			row = ReadRow(s->model, arr, s->x + (Size) s->nvec * s->model->dim, &m);
		s->rows[s->nvec] = row;
		s->nfeat[s->nvec] = m;
		s->slot[i] = s->nvec++;
	}
	if (++s->nrows == s->cap || s->nvalues >= s->max_values)
		FlushBatch(s);
}

PG_FUNCTION_INFO_V1(kmedoids_labels);

/*
 * kmedoids_labels(model, source, column_name, id_column) -> (id, cluster_id,
 * distance) for every row of the table, in one pass; NULL cluster_id and
 * distance for rows with a NULL vector.
 */
Datum
kmedoids_labels(PG_FUNCTION_ARGS)
{
	KmdModel	model;
	KmScanSpec	spec;
	KmdLabelScan scan;
	Size		row_bytes;

	KmLabelsArgs(fcinfo, &spec);
	KmdModelRead(PG_GETARG_HEAPTUPLEHEADER(0), &model);

	/* batches of about 16 MB of values */
	memset(&scan, 0, sizeof(scan));
	scan.model = &model;
	row_bytes = sizeof(float) * (Size) model.dim;
	scan.cap = (int) Max(1, Min((Size) 65536, ((Size) 16 * 1024 * 1024) / row_bytes));
	scan.max_values = ((Size) 16 * 1024 * 1024) / sizeof(float);
	KmCheckMemory(add_size(mul_size((Size) scan.cap, row_bytes + 48), (Size) 32 * 1024 * 1024),
				  "kmedoids_labels");
	scan.batch_context = AllocSetContextCreate(CurrentMemoryContext, "kmedoids_labels batch",
											   ALLOCSET_DEFAULT_SIZES);
	scan.x = model.metric == KMD_METRIC_SQFD ? NULL :
		palloc_extended(row_bytes * scan.cap, MCXT_ALLOC_HUGE);
	scan.rows = palloc(sizeof(float *) * scan.cap);
	scan.nfeat = palloc(sizeof(int32) * scan.cap);
	scan.ids = palloc(sizeof(int64) * scan.cap);
	scan.id_null = palloc(sizeof(bool) * scan.cap);
	scan.slot = palloc(sizeof(int) * scan.cap);
	scan.labels = palloc(sizeof(int32) * scan.cap);
	scan.distances = palloc(sizeof(double) * scan.cap);

	scan.rsinfo = KmMaterialize(fcinfo);
	KmScanTable(&spec, LabelRow, &scan);
	FlushBatch(&scan);
	return (Datum) 0;
}
