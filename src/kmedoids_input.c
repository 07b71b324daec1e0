/*
 * kmedoids_input.c
 *	  Rows of a k-medoids fit or of a score: vectors or sqfd signatures,
 *	  checked, gathered, and put in a canonical order.
 *
 * Vectors go into a KmMatrix (vector_input.c), with its checks and memory
 * accounting.  A signature is a two-dimensional array, one inner array per
 * feature: the feature's weight, then its coordinates; signatures may have
 * any number of features, but every feature of every row has the same
 * length.  They are copied into chunks of at most 64 MB, one after another.
 *
 * The canonical order: by id when the rows have ids (so that "ties go to the
 * lowest row" reads "to the lowest id"), else by a key of each row's
 * contents (km_row_hash), then by the contents themselves.  Rows that
 * compare equal there are identical, so which comes first changes nothing.
 * The same rows, scanned in any order, reach the engine in the same order.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "kmedoids.h"
#include "km_hash.h"

#define KMD_CHUNK_BYTES ((Size) 64 * 1024 * 1024)

/* The stream of the score's sample keys: apart from every seeding stream. */
#define KMD_SCORE_STEP ((int64) 1 << 38)

void
KmdRowsInit(KmdRows *r, MemoryContext context, kmd_metric metric, bool with_ids)
{
	memset(r, 0, sizeof(*r));
	r->context = context;
	r->sqfd = metric == KMD_METRIC_SQFD;
	r->with_ids = with_ids;
	KmMatrixInit(&r->dense, context, false, metric == KMD_METRIC_COSINE);
}

/* Values per row (dense) or per feature (sqfd); 0 before the first row. */
int
KmdRowDim(const KmdRows *r)
{
	return r->sqfd ? r->fdim : r->dense.dim;
}

/*
 * Read a signature: a two-dimensional real[] or float8[] of features, each
 * fdim values (the weight, then the coordinates).  fdim < 0: any length
 * (returned in *fdim_out).  Checks the shape, the values and the weights;
 * copies the values into a palloc'd array (*out, unless out is NULL) and
 * returns the number of features.
 */
int
KmdSignatureRead(ArrayType *arr, int fdim, float **out, bool allow_any_fdim,
				 int *fdim_out)
{
	int			m;
	int			fd;
	float	   *x;
	double		wsum = 0.0;

	if (ARR_NDIM(arr) != 2)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("metric sqfd needs each row as a two-dimensional array of features"),
				 errdetail("This row has %d dimension%s; give one inner array per feature: its weight, then its coordinates, as in '{{0.5,1,2},{0.5,3,4}}'.",
						   ARR_NDIM(arr), ARR_NDIM(arr) == 1 ? "" : "s")));
	m = ARR_DIMS(arr)[0];
	fd = ARR_DIMS(arr)[1];
	if (fd < 2)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("a signature feature needs a weight and at least one coordinate"),
				 errdetail("The features of this row have %d value%s.", fd, fd == 1 ? "" : "s")));
	if (!allow_any_fdim && fd != fdim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("signature features have different lengths: %d and %d", fdim, fd),
				 errdetail("Every feature of every row needs the same number of values: a weight and the same number of coordinates.")));
	if ((Size) m * fd > MaxAllocSize / sizeof(float))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a signature of %d features is too large", m)));

	x = palloc(sizeof(float) * (Size) m * fd);
	KmVectorRead(arr, m * fd, x);
	for (int f = 0; f < m; f++)
	{
		float		w = x[(Size) f * fd];

		if (w < 0.0f)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("signature weight %g is negative", w),
					 errdetail("Feature %d of the row has it; weights must be 0 or more.", f + 1)));
		wsum += w;
	}
	if (!(wsum > 0.0))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("signature weights are all zero"),
				 errdetail("A signature needs a feature of positive weight.")));
	if (fdim_out != NULL)
		*fdim_out = fd;
	if (out != NULL)
		*out = x;
	else
		pfree(x);
	return m;
}

/* Room for one more row in the per-row arrays. */
static void
GrowRows(KmdRows *r)
{
	int64		cap;
	Size		per;

	if (r->n < r->cap)
		return;
	cap = Max(r->cap * 2, 1024);
	per = (r->sqfd ? sizeof(float *) + sizeof(int32) : 0) + (r->with_ids ? sizeof(int64) : 0);
	KmCheckMemory(add_size(add_size(r->bytes, r->dense.bytes), mul_size((Size) cap, per)),
				  "kmedoids input");
	if (r->sqfd)
	{
		if (r->sig == NULL)
		{
			r->sig = MemoryContextAllocHuge(r->context, sizeof(float *) * cap);
			r->nfeat = MemoryContextAllocHuge(r->context, sizeof(int32) * cap);
		}
		else
		{
			r->sig = repalloc_huge(r->sig, sizeof(float *) * cap);
			r->nfeat = repalloc_huge(r->nfeat, sizeof(int32) * cap);
		}
	}
	if (r->with_ids)
		r->ids = r->ids == NULL ? MemoryContextAllocHuge(r->context, sizeof(int64) * cap) :
			repalloc_huge(r->ids, sizeof(int64) * cap);
	r->bytes += (Size) (cap - r->cap) * per;
	r->cap = cap;
}

/*
 * Add one row (and its id when ids are kept): a vector, or for sqfd a
 * signature.
 */
void
KmdRowsAdd(KmdRows *r, ArrayType *vec, int64 id)
{
	GrowRows(r);
	if (!r->sqfd)
		KmMatrixAppendVector(&r->dense, vec, 1.0f);
	else
	{
		float	   *x;
		int			fd;
		int			m = KmdSignatureRead(vec, r->fdim, &x, r->fdim == 0, &fd);
		Size		nval = (Size) m * fd;

		r->fdim = fd;
		if (nval > r->chunk_left)
		{
			Size		floats = Max(nval, KMD_CHUNK_BYTES / sizeof(float));

			KmCheckMemory(add_size(r->bytes, sizeof(float) * floats), "kmedoids input");
			r->chunk = MemoryContextAllocHuge(r->context, sizeof(float) * floats);
			r->chunk_left = floats;
			r->bytes += sizeof(float) * floats;
		}
		memcpy(r->chunk, x, sizeof(float) * nval);
		pfree(x);
		r->sig[r->n] = r->chunk;
		r->nfeat[r->n] = m;
		r->chunk += nval;
		r->chunk_left -= nval;
	}
	if (r->with_ids)
		r->ids[r->n] = id;
	r->n++;
}

/* A row being put in order. */
typedef struct KmdEntry
{
	uint64		key;
	int64		id;
	const float *row;
	int32		m;
	int64		pos;			/* before the sort */
} KmdEntry;

/* Bytes KmdOrder allocates for n rows. */
Size
KmdOrderBytes(int64 n)
{
	return mul_size((Size) Max(n, 1), sizeof(KmdEntry) + sizeof(float *) + sizeof(int32) +
					3 * sizeof(int64));
}

/* Values of a row (m features of fd for sqfd, fd values otherwise). */
static int	order_fd;

static int
CompareById(const void *a, const void *b)
{
	const KmdEntry *x = (const KmdEntry *) a;
	const KmdEntry *y = (const KmdEntry *) b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int
CompareByKey(const void *a, const void *b)
{
	const KmdEntry *x = (const KmdEntry *) a;
	const KmdEntry *y = (const KmdEntry *) b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->m != y->m)
		return x->m < y->m ? -1 : 1;
	/* the same key: the contents decide (equal contents: identical rows) */
	return memcmp(x->row, y->row, sizeof(float) * (Size) x->m * order_fd);
}

/* The key stream of a score's sample for a seed. */
uint64
KmdScoreStream(uint64 seed)
{
	return km_stream(seed, 0, KMD_SCORE_STEP);
}

/*
 * The rows of r in canonical order into out (allocated in the current
 * context): by id when by_id (duplicate ids are an ERROR), else by key: the
 * row's hash, or with have_key_seed the sample key of a score, the bitwise
 * complement of km_mix64(hash ^ stream), so that the rows with the largest
 * uniform (km_uniform) come first.
 */
void
KmdOrder(const KmdRows *r, bool by_id, bool have_key_seed, uint64 key_seed, KmdOrdered *out)
{
	int64		n = r->n;
	int			fd = KmdRowDim(r);
	KmdEntry   *e = palloc_extended(sizeof(KmdEntry) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	uint64		stream = have_key_seed ? KmdScoreStream(key_seed) : 0;
	int64		i = 0;

	if (!r->sqfd)
	{
		km_data		d = KmMatrixData(&r->dense);

		for (int c = 0; c < d.nchunks; c++)
			for (int64 j = 0; j < d.chunks[c].n; j++, i++)
			{
				e[i].row = d.chunks[c].x + (Size) j * fd;
				e[i].m = 1;
			}
	}
	else
		for (i = 0; i < n; i++)
		{
			e[i].row = r->sig[i];
			e[i].m = r->nfeat[i];
		}
	for (i = 0; i < n; i++)
	{
		uint64		h = km_row_hash(e[i].row, e[i].m * fd, 1.0f);

		if ((i & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
		e[i].id = r->with_ids ? r->ids[i] : 0;
		e[i].pos = i;
		e[i].key = have_key_seed ? ~km_mix64(h ^ stream) : h;
	}

	order_fd = fd;
	if (n > 1)
		qsort(e, n, sizeof(KmdEntry), by_id ? CompareById : CompareByKey);
	if (by_id)
		for (i = 1; i < n; i++)
			if (e[i].id == e[i - 1].id)
				ereport(ERROR,
						(errcode(ERRCODE_UNIQUE_VIOLATION),
						 errmsg("the id column has the value " INT64_FORMAT " more than once", e[i].id),
						 errdetail("Medoids are named by their ids, which must be unique.")));

	memset(out, 0, sizeof(*out));
	out->rows = palloc_extended(sizeof(float *) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	out->keys = palloc_extended(sizeof(uint64) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	out->perm = palloc_extended(sizeof(int64) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	if (r->sqfd)
		out->nfeat = palloc_extended(sizeof(int32) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	if (r->with_ids)
		out->ids = palloc_extended(sizeof(int64) * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
	for (i = 0; i < n; i++)
	{
		out->rows[i] = e[i].row;
		out->keys[i] = e[i].key;
		out->perm[i] = e[i].pos;
		if (r->sqfd)
			out->nfeat[i] = e[i].m;
		if (r->with_ids)
			out->ids[i] = e[i].id;
	}
	pfree(e);
	out->data.n = n;
	out->data.d = fd;
	out->data.rows = out->rows;
	out->data.nfeat = out->nfeat;
}
