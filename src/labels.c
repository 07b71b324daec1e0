/*
 * labels.c
 *	  Assignment to a fitted model: kmeans_assign(model, vec) for one row,
 *	  kmeans_labels(model, source, column_name, id_column) for a table.
 *
 * Both decide with the engines' exact rule (include/km_exact.h), so a
 * row gets the same cluster from kmeans_assign, from kmeans_labels, and
 * from the fit that produced the model.
 */
#include "postgres.h"

#include "funcapi.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "kmeans_gpu.h"

/* The parsed model of the last call, kept across calls of one query. */
typedef struct KmAssignCache
{
	MemoryContext context;
	Size		len;
	char	   *bytes;			/* the model as it arrived, to recognise it */
	KmModel		model;
	float	   *vec;			/* dim values */
} KmAssignCache;

static void
CheckVectorDim(const KmModel *model, int dim)
{
	if (dim != model->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg_plural("vector has %d value, but the model's centroids have %d",
							   "vector has %d values, but the model's centroids have %d",
							   dim, dim, model->dim)));
}

/*
 * The model of this call, parsed once per distinct model value.
 */
static KmAssignCache *
CachedModel(FunctionCallInfo fcinfo, HeapTupleHeader th)
{
	KmAssignCache *cache = (KmAssignCache *) fcinfo->flinfo->fn_extra;
	Size		len = HeapTupleHeaderGetDatumLength(th);
	MemoryContext old;

	if (cache != NULL && cache->len == len && memcmp(cache->bytes, th, len) == 0)
		return cache;

	if (cache == NULL)
	{
		cache = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(KmAssignCache));
		fcinfo->flinfo->fn_extra = cache;
	}
	else
		MemoryContextDelete(cache->context);
	cache->len = 0;
	cache->context = AllocSetContextCreate(fcinfo->flinfo->fn_mcxt, "kmeans_assign model",
										   ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cache->context);
	KmModelRead(th, &cache->model);
	cache->vec = palloc(sizeof(float) * cache->model.dim);
	cache->bytes = palloc_extended(len, MCXT_ALLOC_HUGE);
	memcpy(cache->bytes, th, len);
	cache->len = len;
	MemoryContextSwitchTo(old);
	return cache;
}

PG_FUNCTION_INFO_V1(kmeans_assign);

/*
 * kmeans_assign(model, vec real[] | float8[]) -> nearest cluster id.
 */
Datum
kmeans_assign(PG_FUNCTION_ARGS)
{
	KmAssignCache *cache = CachedModel(fcinfo, PG_GETARG_HEAPTUPLEHEADER(0));
	ArrayType  *vec = PG_GETARG_ARRAYTYPE_P(1);
	double		distance;

	CheckVectorDim(&cache->model, KmVectorDim(vec));
	KmVectorRead(vec, cache->model.dim, cache->vec);
	PG_RETURN_INT32(KmModelNearest(&cache->model, cache->vec, &distance));
}

/* A batch of kmeans_labels rows waiting for the engine. */
typedef struct KmLabelScan
{
	const KmModel *model;
	ReturnSetInfo *rsinfo;
	int			cap;			/* rows per batch */
	int			nrows;			/* rows in the batch */
	int			nvec;			/* of which with a vector */
	float	   *x;				/* nvec x dim */
	int64	   *ids;
	bool	   *id_null;
	int		   *slot;			/* row -> index in x, or -1 for a NULL vector */
	int32	   *labels;
	double	   *distances;
} KmLabelScan;

/* Assign the batch and emit its rows in scan order. */
static void
FlushBatch(KmLabelScan *s)
{
	if (s->nvec > 0)
	{
		km_chunk	chunk;
		km_data		data;

		chunk.x = s->x;
		chunk.w = NULL;
		chunk.n = s->nvec;
		data.d = s->model->dim;
		data.nchunks = 1;
		data.chunks = &chunk;
		data.n = s->nvec;
		KmRunAssign(&data, s->model->centroids, s->model->k, s->model->metric,
					s->labels, s->distances);
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
}

static void
LabelRow(void *arg, Datum *values, bool *nulls)
{
	KmLabelScan *s = (KmLabelScan *) arg;
	int			i = s->nrows;

	s->id_null[i] = nulls[1];
	s->ids[i] = nulls[1] ? 0 : DatumGetInt64(values[1]);
	s->slot[i] = -1;
	if (!nulls[0])
	{
		ArrayType  *vec = DatumGetArrayTypeP(values[0]);
		float	   *row = s->x + (Size) s->nvec * s->model->dim;

		CheckVectorDim(s->model, KmVectorDim(vec));
		KmVectorRead(vec, s->model->dim, row);
		if (s->model->metric == KM_METRIC_COSINE)
		{
			bool		zero = true;

			for (int d = 0; d < s->model->dim && zero; d++)
				zero = row[d] == 0.0f;
			if (zero)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("zero vector cannot be assigned with metric cosine"),
						 errdetail("A vector of zeros has no direction.")));
		}
		s->slot[i] = s->nvec++;
	}
	if (++s->nrows == s->cap)
		FlushBatch(s);
}

PG_FUNCTION_INFO_V1(kmeans_labels);

/*
 * kmeans_labels(model, source, column_name, id_column) -> (id, cluster_id,
 * distance) for every row of the table, in one pass.  Rows with a NULL
 * vector come back with NULL cluster_id and distance.
 */
Datum
kmeans_labels(PG_FUNCTION_ARGS)
{
	KmModel		model;
	KmScanSpec	spec;
	KmLabelScan scan;
	Size		row_bytes;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("model must not be NULL")));
	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("source must not be NULL")));
	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("column_name must not be NULL")));
	if (PG_ARGISNULL(3))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("id_column must not be NULL")));

	KmModelRead(PG_GETARG_HEAPTUPLEHEADER(0), &model);

	memset(&spec, 0, sizeof(spec));
	spec.relid = PG_GETARG_OID(1);
	spec.vector_column = text_to_cstring(PG_GETARG_TEXT_PP(2));
	spec.id_column = text_to_cstring(PG_GETARG_TEXT_PP(3));

	/* batches of about 16 MB of vectors */
	memset(&scan, 0, sizeof(scan));
	scan.model = &model;
	row_bytes = sizeof(float) * (Size) model.dim;
	scan.cap = (int) Max(1, Min((Size) 65536, ((Size) 16 * 1024 * 1024) / row_bytes));
	KmCheckMemory(add_size(mul_size((Size) scan.cap, row_bytes + 32),
						   mul_size(mul_size((Size) model.k, (Size) model.dim), sizeof(float))),
				  "kmeans_labels");
	scan.x = palloc_extended(row_bytes * scan.cap, MCXT_ALLOC_HUGE);
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
