/*
 * labels.c
 *	  Assignment to a fitted model: kmeans_assign(model, vec) for one row,
 *	  kmeans_labels(model, source, column_name, id_column) for a table.
 *
 * Both decide with the engines' exact rule (src/include/km_exact.h), so a
 * row gets the same cluster from kmeans_assign, from kmeans_labels, and
 * from the fit that produced the model; both round the row first as the
 * model's storage says, as the fit rounded its rows.
 */
#include "postgres.h"

#include "access/detoast.h"
#include "funcapi.h"
#include "nodes/primnodes.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "kmeans_gpu.h"

/*
 * The model of the last kmeans_assign call, parsed and prepared for the
 * engine's one-row labelling (km_nearest), kept across the calls of one
 * query in fn_extra.
 *
 * A row must cost its distance work, not the model's size, so the next
 * call's model is recognised without reading it where PostgreSQL allows:
 *	- a constant argument never changes while the expression lives;
 *	- a model stored out of line (any model over about 2 kB read from a
 *	  table, also through (SELECT model FROM ...)) arrives as a TOAST
 *	  pointer, and the pointer names one immutable stored value, so the same
 *	  pointer is the same model: 18 bytes compared instead of a fetch of the
 *	  whole value;
 *	- any other value (inline, compressed inline, or built by the query)
 *	  is compared byte for byte as it arrived, compressed or not: small
 *	  models cost little, and a model built by the query itself is the only
 *	  one that pays for its size on every row.
 * Parameters are never trusted by pointer alone: PL/pgSQL reuses one
 * expression with other variable values, at addresses that can repeat.
 */
typedef enum KmModelKey
{
	KM_KEY_CONST,				/* the argument is a Const */
	KM_KEY_TOAST,				/* an on-disk TOAST pointer */
	KM_KEY_BYTES				/* the value's bytes as it arrived */
} KmModelKey;

typedef struct KmAssignCache
{
	MemoryContext context;
	KmModelKey	key;
	varatt_external toast;		/* KM_KEY_TOAST */
	Size		len;			/* KM_KEY_BYTES */
	char	   *bytes;
	KmModel		model;
	km_nearest *nearest;
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

/* Whether raw, the model argument of this call, is the cached model. */
static bool
SameModel(const KmAssignCache *cache, struct varlena *raw)
{
	switch (cache->key)
	{
		case KM_KEY_CONST:
			return true;
		case KM_KEY_TOAST:
			if (VARATT_IS_EXTERNAL_ONDISK(raw))
			{
				varatt_external toast;

				VARATT_EXTERNAL_GET_POINTER(toast, raw);
				return memcmp(&toast, &cache->toast, sizeof(toast)) == 0;
			}
			return false;
		case KM_KEY_BYTES:
			return !VARATT_IS_EXTERNAL(raw) && VARSIZE_ANY(raw) == cache->len &&
				memcmp(raw, cache->bytes, cache->len) == 0;
	}
	return false;
}

/*
 * The model of this call, parsed and prepared once per distinct model.
 */
static KmAssignCache *
CachedModel(FunctionCallInfo fcinfo)
{
	KmAssignCache *cache = (KmAssignCache *) fcinfo->flinfo->fn_extra;
	struct varlena *raw = (struct varlena *) DatumGetPointer(PG_GETARG_DATUM(0));
	Node	   *arg;
	MemoryContext old;
	HeapTupleHeader th;

	if (cache != NULL && SameModel(cache, raw))
		return cache;

	if (cache == NULL)
	{
		cache = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(KmAssignCache));
		fcinfo->flinfo->fn_extra = cache;
	}
	else
		MemoryContextDelete(cache->context);
	cache->context = AllocSetContextCreate(fcinfo->flinfo->fn_mcxt, "kmeans_assign model",
										   ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cache->context);

	arg = fcinfo->flinfo->fn_expr != NULL && IsA(fcinfo->flinfo->fn_expr, FuncExpr) ?
		(Node *) linitial(((FuncExpr *) fcinfo->flinfo->fn_expr)->args) : NULL;
	if (arg != NULL && IsA(arg, Const))
		cache->key = KM_KEY_CONST;
	else if (VARATT_IS_EXTERNAL_ONDISK(raw))
	{
		cache->key = KM_KEY_TOAST;
		VARATT_EXTERNAL_GET_POINTER(cache->toast, raw);
	}
	else
		cache->key = KM_KEY_BYTES;

	th = DatumGetHeapTupleHeader(PointerGetDatum(raw));
	KmModelRead(th, &cache->model);
	cache->vec = palloc(sizeof(float) * cache->model.dim);
	cache->nearest = km_nearest_prepare(palloc_extended(km_nearest_size(cache->model.k,
																		 cache->model.dim),
														MCXT_ALLOC_HUGE),
										cache->model.centroids, cache->model.k,
										cache->model.dim, cache->model.metric);
	if (cache->key == KM_KEY_BYTES)
	{
		/* the bytes as they arrived: an expanded value, flattened by now, is re-read every call */
		struct varlena *flat = VARATT_IS_EXTERNAL(raw) ? (struct varlena *) th : raw;

		cache->len = VARSIZE_ANY(flat);
		cache->bytes = palloc_extended(cache->len, MCXT_ALLOC_HUGE);
		memcpy(cache->bytes, flat, cache->len);
	}
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
	KmAssignCache *cache = CachedModel(fcinfo);
	ArrayType  *vec = PG_GETARG_ARRAYTYPE_P(1);
	double		cost;
	int			label;

	CheckVectorDim(&cache->model, KmVectorDim(vec));
	KmVectorRead(vec, cache->model.dim, cache->vec);
	KmVectorRound(cache->vec, cache->model.dim, cache->model.storage, false, 0, NULL);
	label = km_nearest_row(cache->nearest, cache->vec, &cost);
	if (label < 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("zero vector cannot be assigned with metric cosine"),
				 errdetail("A vector of zeros has no direction.")));
	PG_RETURN_INT32(label);
}

/* A batch of kmeans_labels rows waiting for the engine. */
typedef struct KmLabelScan
{
	const KmModel *model;
	ReturnSetInfo *rsinfo;
	int			cap;			/* rows per batch */
	int			nrows;			/* rows in the batch */
	int			nvec;			/* of which with a vector */
	int64		rows;			/* rows read so far, for messages */
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

	s->rows++;
	s->id_null[i] = nulls[1];
	s->ids[i] = nulls[1] ? 0 : DatumGetInt64(values[1]);
	s->slot[i] = -1;
	if (!nulls[0])
	{
		ArrayType  *vec = DatumGetArrayTypeP(values[0]);
		float	   *row = s->x + (Size) s->nvec * s->model->dim;

		CheckVectorDim(s->model, KmVectorDim(vec));
		KmVectorRead(vec, s->model->dim, row);
		KmVectorRound(row, s->model->dim, s->model->storage, false, s->rows,
					  nulls[1] ? NULL : &s->ids[i]);
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

/*
 * The arguments (model, source, column_name, id_column) of kmeans_labels
 * and kmedoids_labels: none may be NULL; the scan of the table from the
 * last three.
 */
void
KmLabelsArgs(FunctionCallInfo fcinfo, KmScanSpec *spec)
{
	KmArgNotNull(fcinfo, 0, "model");
	KmArgNotNull(fcinfo, 1, "source");
	KmArgNotNull(fcinfo, 2, "column_name");
	KmArgNotNull(fcinfo, 3, "id_column");
	memset(spec, 0, sizeof(*spec));
	spec->relid = PG_GETARG_OID(1);
	spec->vector_column = text_to_cstring(PG_GETARG_TEXT_PP(2));
	spec->id_column = text_to_cstring(PG_GETARG_TEXT_PP(3));
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

	KmLabelsArgs(fcinfo, &spec);
	KmModelRead(PG_GETARG_HEAPTUPLEHEADER(0), &model);

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
