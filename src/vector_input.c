/*
 * vector_input.c
 *	  Vectors from real[] and float8[] values, checked, and rows gathered
 *	  into the chunks an engine reads.
 *
 * Every input path (aggregate, kmeans_fit, window function, kmeans_labels)
 * reads vectors through here, so every path rejects the same bad input with
 * the same message.  Rows go into chunks that double in size up to
 * KM_CHUNK_MAX_BYTES: no reallocation copies the data, partial aggregate
 * states combine by linking chunks, and every allocation is checked against
 * kmeans_gpu.max_memory before it is made.
 *
 * Gathering rows is bound by memory traffic, not arithmetic: a table scan
 * hands over about half a kilobyte per row, and each row is written once and
 * read again only after the scan, by the engine or by the GPU's copy engine
 * (gpu.c streams rows to the GPU through KmVectorReadRow and, where the host
 * keeps them too, KmMatrixAppendVectorRow).
 * So rows are written with non-temporal stores (no read of the destination
 * before the write, no eviction of the scan's pages from the cache), and
 * large chunks ask the kernel for huge pages (one page fault per 2 MB rather
 * than per 4 kB: with 4 kB pages the faults cost more than the scan itself).
 *
 * Rows of a fit with storage 'float16' or 'bfloat16' are rounded here, as
 * they are read (KmVectorRound, on km_half.h), so that every engine
 * clusters the same values; such rows are written with ordinary stores,
 * since the rounding reads them back at once.
 */
#include "postgres.h"

#include <math.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KM_STREAM_STORES 1
#endif

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "kmeans_gpu.h"
#include "km_half.h"

#define KM_CHUNK_FIRST_ROWS 16
#define KM_CHUNK_MAX_BYTES ((Size) 64 * 1024 * 1024)
#define KM_HUGE_PAGE ((Size) 2 * 1024 * 1024)
#define KM_ROW_ALIGN 64

/*
 * Length of a vector, after checking its shape.
 */
int
KmVectorDim(ArrayType *vec)
{
	int			ndim = ARR_NDIM(vec);

	if (ndim == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must not be empty")));
	if (ndim != 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("vector must be a one-dimensional array"),
				 errdetail("It has %d dimensions.", ndim)));
	return ARR_DIMS(vec)[0];
}

/*
 * Vectors of one fit must all have the same length.
 */
void
KmCheckDimension(int expected, int got)
{
	if (expected != got)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vectors have different lengths: %d and %d", expected, got)));
}

/*
 * A row's weight: finite as a real, and not negative.
 */
void
KmCheckWeight(double w)
{
	if (!(w >= 0) || !isfinite((float) w))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("weight %g is not allowed", w),
				 errdetail("Weights must be finite, at most the largest real, and not negative.")));
}

/*
 * Copy dim float32 bit patterns from in to out; true when one of them is NaN
 * or infinite (all exponent bits set).  One pass without branches, which the
 * compiler vectorises (see the Makefile).
 */
static inline bool
CopyFloat4(const uint32 *restrict in, uint32 *restrict out, int dim)
{
	uint32		special = 0;

	for (int i = 0; i < dim; i++)
	{
		special |= (uint32) ((in[i] & 0x7f800000) == 0x7f800000);
		out[i] = in[i];
	}
	return special != 0;
}

#ifdef KM_STREAM_STORES
/*
 * For finite floats the magnitude bits are below those of infinity
 * (0x7f800000), NaN's are above: one unsigned maximum of the magnitudes says
 * whether a row holds either.
 */
#define KM_MAGNITUDE 0x7fffffffu
#define KM_FINITE_MAX 0x7f7fffffu

/*
 * CopyFloat4 with non-temporal stores, for rows nobody reads until the scan
 * is over: the destination is not read into the cache before being written
 * (that read would double the memory traffic of the copy), and the scan's
 * own pages stay in the cache.  Every store is non-temporal, also before an
 * aligned start and at the end, so that no cache line is written both ways.
 * The stores are weakly ordered: KmStoreFence must run before another thread
 * or a device reads out.
 */
static bool
StreamFloat4Sse2(const uint32 *restrict in, uint32 *restrict out, int dim)
{
	const __m128i magnitude = _mm_set1_epi32(KM_MAGNITUDE);
	const __m128i finite_max = _mm_set1_epi32(KM_FINITE_MAX);
	__m128i		special = _mm_setzero_si128();
	uint32		max1 = 0;
	int			i = 0;

	for (; i < dim && ((uintptr_t) (out + i) & 15) != 0; i++)
	{
		max1 = Max(max1, in[i] & KM_MAGNITUDE);
		_mm_stream_si32((int *) (out + i), (int) in[i]);
	}
	for (; i + 4 <= dim; i += 4)
	{
		__m128i		a = _mm_loadu_si128((const __m128i *) (in + i));

		/* SSE2 has no unsigned maximum; magnitudes compare right as signed */
		special = _mm_or_si128(special,
							   _mm_cmpgt_epi32(_mm_and_si128(a, magnitude), finite_max));
		_mm_stream_si128((__m128i *) (out + i), a);
	}
	for (; i < dim; i++)
	{
		max1 = Max(max1, in[i] & KM_MAGNITUDE);
		_mm_stream_si32((int *) (out + i), (int) in[i]);
	}
	return max1 > KM_FINITE_MAX || _mm_movemask_epi8(special) != 0;
}

/* StreamFloat4Sse2, 32 bytes a step (rows in the chunks are 64-byte aligned) */
__attribute__((target("avx2")))
static bool
StreamFloat4Avx2(const uint32 *restrict in, uint32 *restrict out, int dim)
{
	const __m256i magnitude = _mm256_set1_epi32(KM_MAGNITUDE);
	__m256i		max = _mm256_setzero_si256();
	uint32		max1 = 0;
	int			i = 0;

	for (; i < dim && ((uintptr_t) (out + i) & 31) != 0; i++)
	{
		max1 = Max(max1, in[i] & KM_MAGNITUDE);
		_mm_stream_si32((int *) (out + i), (int) in[i]);
	}
	for (; i + 8 <= dim; i += 8)
	{
		__m256i		a = _mm256_loadu_si256((const __m256i *) (in + i));

		max = _mm256_max_epu32(max, _mm256_and_si256(a, magnitude));
		_mm256_stream_si256((__m256i *) (out + i), a);
	}
	for (; i < dim; i++)
	{
		max1 = Max(max1, in[i] & KM_MAGNITUDE);
		_mm_stream_si32((int *) (out + i), (int) in[i]);
	}
	/* the magnitudes are below 2^31, so a signed compare is right */
	return max1 > KM_FINITE_MAX ||
		_mm256_movemask_epi8(_mm256_cmpgt_epi32(max, _mm256_set1_epi32(KM_FINITE_MAX))) != 0;
}

static int	stream_avx2 = -1;	/* -1: not asked yet */
#endif

/* StreamFloat4Avx2 where the CPU has AVX2, else StreamFloat4Sse2. */
static inline bool
StreamFloat4(const uint32 *restrict in, uint32 *restrict out, int dim)
{
#ifdef KM_STREAM_STORES
	if (unlikely(stream_avx2 < 0))
		stream_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
	return stream_avx2 ? StreamFloat4Avx2(in, out, dim) : StreamFloat4Sse2(in, out, dim);
#else
	return CopyFloat4(in, out, dim);
#endif
}

/*
 * Make the rows written by StreamFloat4 visible to other threads and to
 * devices: before the engine or the GPU's copy reads them.
 */
void
KmStoreFence(void)
{
#ifdef KM_STREAM_STORES
	_mm_sfence();
#endif
}

/*
 * A vector of integers or numerics as real values, each converted as
 * PostgreSQL's cast to real converts it (rounding to nearest; a numeric out
 * of range for real is an ERROR, NaN and infinity come out as such).  The
 * aggregate, the window function and kmeans_assign take smallint[],
 * integer[], bigint[] and numeric[] this way (kmeans_fit casts in SQL).
 */
static void
OtherVectorRead(ArrayType *vec, int dim, float *out)
{
	Oid			elemtype = ARR_ELEMTYPE(vec);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	int			n;

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(vec, elemtype, typlen, typbyval, typalign, &elems, NULL, &n);
	Assert(n == dim);
	for (int i = 0; i < dim; i++)
	{
		switch (elemtype)
		{
			case INT2OID:
				out[i] = (float) DatumGetInt16(elems[i]);
				break;
			case INT4OID:
				out[i] = (float) DatumGetInt32(elems[i]);
				break;
			case INT8OID:
				out[i] = (float) DatumGetInt64(elems[i]);
				break;
			case NUMERICOID:
				out[i] = DatumGetFloat4(DirectFunctionCall1(numeric_float4, elems[i]));
				break;
			default:
				elog(ERROR, "unexpected vector element type %u", elemtype);
		}
	}
	pfree(elems);
}

/*
 * Copy a vector of dim values into out as float32, rejecting NULL elements,
 * NaN, infinities and float8 values beyond the range of real.  With stream,
 * real[] values are written with non-temporal stores (see StreamFloat4).
 */
static inline void
VectorRead(ArrayType *vec, int dim, float *out, bool stream)
{
	if (unlikely(ARR_HASNULL(vec)) && array_contains_nulls(vec))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("vector must not contain NULL values")));

	if (likely(ARR_ELEMTYPE(vec) == FLOAT4OID))
	{
		const uint32 *in = (const uint32 *) ARR_DATA_PTR(vec);
		bool		special = stream ? StreamFloat4(in, (uint32 *) out, dim) :
			CopyFloat4(in, (uint32 *) out, dim);

		if (unlikely(special))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("vector must not contain NaN or infinite values")));
	}
	else if (ARR_ELEMTYPE(vec) == FLOAT8OID)
	{
		const double *in = (const double *) ARR_DATA_PTR(vec);

		for (int i = 0; i < dim; i++)
		{
			if (unlikely(!isfinite(in[i])))
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("vector must not contain NaN or infinite values")));
			out[i] = (float) in[i];
			/* as PostgreSQL's own cast: no overflow, no underflow to zero */
			if (unlikely(!isfinite(out[i]) || (out[i] == 0.0f && in[i] != 0.0)))
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("vector value %g is out of range for type real", in[i])));
		}
	}
	else
	{
		OtherVectorRead(vec, dim, out);
		for (int i = 0; i < dim; i++)
			if (unlikely(!isfinite(out[i])))
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("vector must not contain NaN or infinite values")));
	}
}

/*
 * Whether a vector that VectorRead accepted is all zeros.  It looks at the
 * array, still in the cache, not at the streamed copy; a float8 value is zero
 * exactly when its real is (VectorRead rejects underflow).
 */
static bool
VectorIsZero(ArrayType *vec, int dim)
{
	if (ARR_ELEMTYPE(vec) == FLOAT4OID)
	{
		const float *in = (const float *) ARR_DATA_PTR(vec);

		for (int i = 0; i < dim; i++)
			if (in[i] != 0.0f)
				return false;
	}
	else if (ARR_ELEMTYPE(vec) == FLOAT8OID)
	{
		const double *in = (const double *) ARR_DATA_PTR(vec);

		for (int i = 0; i < dim; i++)
			if (in[i] != 0.0)
				return false;
	}
	else
	{
		float	   *conv = palloc(sizeof(float) * dim);
		bool		zero = true;

		OtherVectorRead(vec, dim, conv);
		for (int i = 0; i < dim && zero; i++)
			zero = conv[i] == 0.0f;
		pfree(conv);
		return zero;
	}
	return true;
}

/* VectorRead for one vector that the caller reads at once. */
void
KmVectorRead(ArrayType *vec, int dim, float *out)
{
	VectorRead(vec, dim, out, false);
}

/*
 * A row of a fit: vec (dim values, checked by the caller) into out, rejected
 * when it is all zeros under cosine.  With stream, real[] values are written
 * with non-temporal stores (nothing reads them before the scan ends, or
 * before KmStoreFence).
 */
void
KmVectorReadRow(ArrayType *vec, int dim, float *out, bool stream, bool cosine)
{
	VectorRead(vec, dim, out, stream);
	if (cosine && VectorIsZero(vec, dim))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("zero vector cannot be clustered with metric cosine"),
				 errdetail("A vector of zeros has no direction."),
				 errhint("Filter such rows out, or use metric 'l2'.")));
}

/*
 * Round the dim values of x, in place, to storage (nothing for float32),
 * each to the nearest value of the format, ties to even (km_half.h).  A
 * value that rounds to infinity is an ERROR naming it and the row: row is
 * its 1-based ordinal in the input (0: a single vector), id its id when the
 * caller has one.  Under cosine a row that rounds to all zeros is refused,
 * as a zero vector is.
 */
void
KmVectorRound(float *x, int dim, km_storage storage, bool cosine, int64 row, const int64 *id)
{
	int			overflow = 0;
	bool		zero = true;
	int			i;

	if (storage == KM_STORAGE_FLOAT32)
		return;
	for (i = 0; i < dim; i++)
	{
		float		r = storage == KM_STORAGE_FLOAT16 ? km_f16_round(x[i], &overflow) :
			km_bf16_round(x[i], &overflow);

		if (unlikely(overflow))
			break;
		x[i] = r;
		zero = zero && r == 0.0f;
	}
	if (unlikely(overflow))
	{
		char		where[96];

		if (id != NULL)
			snprintf(where, sizeof(where), " of the row with id " INT64_FORMAT, *id);
		else if (row > 0)
			snprintf(where, sizeof(where), " of row " INT64_FORMAT, row);
		else
			where[0] = '\0';
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("vector value %g at position %d%s is out of range for storage %s",
						x[i], i + 1, where, KmStorageName(storage)),
				 storage == KM_STORAGE_FLOAT16 ?
				 errdetail("float16 holds magnitudes up to 65504; from 65520 up a value rounds to infinity.") :
				 errdetail("bfloat16 holds magnitudes up to about 3.39e38; larger values round to infinity."),
				 errhint("Use storage 'float32'%s, or scale the vectors.",
						 storage == KM_STORAGE_FLOAT16 ? " or 'bfloat16'" : "")));
	}
	if (cosine && zero)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("zero vector cannot be clustered with metric cosine"),
				 errdetail("Every value%s rounds to zero in storage %s, and a vector of zeros has no direction.",
						   row > 0 ? psprintf(" of row " INT64_FORMAT, row) : "",
						   KmStorageName(storage)),
				 errhint("Filter such rows out, or use storage 'float32'.")));
}

/*
 * Fail before allocating when a call would need more than
 * kmeans_gpu.max_memory.
 */
void
KmCheckMemory(Size needed, const char *what)
{
	Size		limit = KmMaxMemoryBytes();

	if (needed > limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s needs %s of memory, more than kmeans_gpu.max_memory (%s)",
						what,
						text_to_cstring(DatumGetTextPP(DirectFunctionCall1(pg_size_pretty,
																		   Int64GetDatum((int64) Min(needed, (Size) PG_INT64_MAX))))),
						text_to_cstring(DatumGetTextPP(DirectFunctionCall1(pg_size_pretty,
																		   Int64GetDatum((int64) limit))))),
				 errhint("Raise kmeans_gpu.max_memory, or cluster a sample of the rows.")));
}

/* An empty matrix whose chunks will live in context. */
void
KmMatrixInit(KmMatrix *m, MemoryContext context, bool weighted, bool cosine)
{
	memset(m, 0, sizeof(*m));
	m->context = context;
	m->weighted = weighted;
	m->cosine = cosine;
}

/* Round every row m is given from now on to storage (KmVectorRound). */
void
KmMatrixSetStorage(KmMatrix *m, km_storage storage)
{
	m->storage = storage;
}

/*
 * A row of the input that brings no vector (NULL): counted, so that the
 * rows named in messages are counted as the input has them.
 */
void
KmMatrixSkipRow(KmMatrix *m)
{
	m->input_rows++;
}

/*
 * Ask for transparent huge pages for the whole 2 MB pages inside a chunk of
 * bytes at mem (no more than advice: where the kernel has none to give, or
 * gives them only on request and this is refused, 4 kB pages it is).  A chunk
 * is written once from start to end, so huge pages cost no memory that the
 * rows would not take anyway, but for the unused end of the last chunk.
 */
static void
AdviseHugePages(char *mem, Size bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
	uintptr_t	start = TYPEALIGN(KM_HUGE_PAGE, (uintptr_t) mem);
	uintptr_t	end = TYPEALIGN_DOWN(KM_HUGE_PAGE, (uintptr_t) mem + bytes);

	if (end > start)
		(void) madvise((void *) start, end - start, MADV_HUGEPAGE);
#endif
}

/*
 * Memory for a chunk of rows, 64-byte aligned (a cache line, and the widest
 * store of StreamFloat4), with the allocation's own start just before it
 * for FreeRows.
 */
static char *
AllocRows(MemoryContext context, Size bytes)
{
	char	   *raw = MemoryContextAllocHuge(context, add_size(bytes, KM_ROW_ALIGN + sizeof(void *)));
	char	   *mem = (char *) TYPEALIGN(KM_ROW_ALIGN, raw + sizeof(void *));

	((void **) mem)[-1] = raw;
	if (bytes >= 2 * KM_HUGE_PAGE)
		AdviseHugePages(mem, bytes);
	return mem;
}

/* Give back a chunk that AllocRows made. */
static void
FreeRows(const float *x)
{
	pfree(((void **) x)[-1]);
}

/* Make room in m->chunks for one more chunk. */
static void
GrowChunkArray(KmMatrix *m, int more)
{
	if (m->nchunks + more <= m->maxchunks)
		return;
	m->maxchunks = Max(m->maxchunks * 2, m->nchunks + more + 8);
	if (m->chunks == NULL)
		m->chunks = MemoryContextAlloc(m->context, sizeof(km_chunk) * m->maxchunks);
	else
		m->chunks = repalloc(m->chunks, sizeof(km_chunk) * m->maxchunks);
}

/*
 * Room for up to want more rows of dim values, contiguous: returns where to
 * write them and sets *got (1 <= *got <= want).  The rows count as written.
 */
float *
KmMatrixReserve(KmMatrix *m, int dim, int64 want, int64 *got)
{
	km_chunk   *last;
	int64		take;

	Assert(want >= 1);
	if (m->dim == 0)
		m->dim = dim;
	else
		KmCheckDimension(m->dim, dim);

	last = m->nchunks > 0 ? &m->chunks[m->nchunks - 1] : NULL;
	if (last == NULL || last->n == m->last_capacity)
	{
		Size		row_bytes = sizeof(float) * (Size) dim + (m->weighted ? sizeof(float) : 0);
		int64		rows = last == NULL ? KM_CHUNK_FIRST_ROWS : m->last_capacity * 2;
		Size		bytes;
		char	   *mem;

		/* a bulk request may start large; chunks stay under KM_CHUNK_MAX_BYTES */
		rows = Max(rows, Min(want, (int64) (KM_CHUNK_MAX_BYTES / row_bytes)));
		rows = Max(1, Min(rows, (int64) (KM_CHUNK_MAX_BYTES / row_bytes)));
		bytes = row_bytes * rows;
		KmCheckMemory(m->bytes + bytes, "kmeans input");

		GrowChunkArray(m, 1);
		mem = AllocRows(m->context, bytes);
		last = &m->chunks[m->nchunks++];
		last->x = (const float *) mem;
		last->w = m->weighted ? (const float *) (mem + sizeof(float) * (Size) dim * rows) : NULL;
		last->n = 0;
		m->last_capacity = rows;
		m->bytes += bytes;
	}

	take = Min(want, m->last_capacity - last->n);
	if (m->weighted)
		m->weights_next = (float *) last->w + last->n;
	*got = take;
	m->n += take;
	last->n += take;
	return (float *) last->x + (Size) dim * (last->n - take);
}

/*
 * Append n rows (and weights, when m is weighted) stored contiguously.
 */
void
KmMatrixAppendRows(KmMatrix *m, int dim, const float *x, const float *w, int64 n)
{
	while (n > 0)
	{
		int64		got;
		float	   *dst = KmMatrixReserve(m, dim, n, &got);

		memcpy(dst, x, sizeof(float) * (Size) dim * got);
		if (m->weighted)
			memcpy(m->weights_next, w, sizeof(float) * got);
		x += (Size) dim * got;
		if (w != NULL)
			w += got;
		n -= got;
	}
}

/*
 * Append a vector, with its weight when m is weighted, after checking it,
 * and return the row as stored.  stream: nothing reads the row before the
 * scan ends (see StreamFloat4).
 */
static float *
AppendVector(KmMatrix *m, ArrayType *vec, float weight, bool stream)
{
	int			dim = KmVectorDim(vec);
	int64		got;
	float	   *row;

	row = KmMatrixReserve(m, dim, 1, &got);	/* checks the length */
	if (m->weighted)
		*m->weights_next = weight;
	m->input_rows++;
	if (m->storage == KM_STORAGE_FLOAT32)
		KmVectorReadRow(vec, dim, row, stream, m->cosine);
	else
	{
		/* read with ordinary stores: the rounding reads the row back at once */
		KmVectorReadRow(vec, dim, row, false, m->cosine);
		KmVectorRound(row, dim, m->storage, m->cosine, m->input_rows, NULL);
	}
	return row;
}

/*
 * Append a vector, with its weight when m is weighted, after checking it.
 * The row is streamed: nothing reads it before the scan ends.
 */
void
KmMatrixAppendVector(KmMatrix *m, ArrayType *vec, float weight)
{
	(void) AppendVector(m, vec, weight, true);
}

/*
 * KmMatrixAppendVector for a caller that copies the row on at once (to the
 * GPU): written with ordinary stores, so that the copy finds it in the cache.
 */
const float *
KmMatrixAppendVectorRow(KmMatrix *m, ArrayType *vec, float weight)
{
	return AppendVector(m, vec, weight, false);
}

/*
 * Free every row, keeping the length: the rows went elsewhere (to the GPU
 * only, gpu.c).
 */
void
KmMatrixReleaseRows(KmMatrix *m)
{
	for (int c = 0; c < m->nchunks && !m->borrowed; c++)
		FreeRows(m->chunks[c].x);
	m->nchunks = 0;
	m->n = 0;
	m->bytes = 0;
	m->last_capacity = 0;
	m->weights_next = NULL;
	m->borrowed = false;
}

/*
 * Move src's rows to the end of dst without copying them: both must live in
 * memory that outlasts dst.  src is left empty.
 */
void
KmMatrixAdopt(KmMatrix *dst, KmMatrix *src)
{
	if (src->n == 0)
		return;
	if (dst->dim == 0)
		dst->dim = src->dim;
	else
		KmCheckDimension(dst->dim, src->dim);
	KmCheckMemory(dst->bytes + src->bytes, "kmeans input");

	GrowChunkArray(dst, src->nchunks);
	memcpy(dst->chunks + dst->nchunks, src->chunks, sizeof(km_chunk) * src->nchunks);
	dst->nchunks += src->nchunks;
	dst->n += src->n;
	dst->bytes += src->bytes;
	dst->last_capacity = src->last_capacity;
	dst->weights_next = NULL;

	src->nchunks = 0;
	src->n = 0;
	src->bytes = 0;
}

/*
 * Make the empty m the view of rows already gathered elsewhere, in memory
 * that outlasts m and that m never frees (parallel_read.c's shared memory):
 * nchunks chunks of dim values, skipped rows offered without a vector,
 * bytes of memory held for them.
 */
void
KmMatrixBorrow(KmMatrix *m, int dim, const km_chunk *chunks, int nchunks,
			   int64 skipped, Size bytes)
{
	Assert(m->n == 0 && m->nchunks == 0);
	if (nchunks > 0)
		m->dim = dim;			/* as a read that saw no row leaves it 0 */
	GrowChunkArray(m, nchunks);
	memcpy(m->chunks, chunks, sizeof(km_chunk) * nchunks);
	m->nchunks = nchunks;
	for (int c = 0; c < nchunks; c++)
		m->n += chunks[c].n;
	m->input_rows = m->n + skipped;
	m->bytes = bytes;
	m->last_capacity = nchunks > 0 ? chunks[nchunks - 1].n : 0;	/* full: no appends */
	m->borrowed = true;
}

/* The engine's view of the rows. */
km_data
KmMatrixData(const KmMatrix *m)
{
	km_data		data;

	KmStoreFence();				/* the engine's threads read what we streamed */
	data.d = m->dim;
	data.nchunks = m->nchunks;
	data.chunks = m->chunks;
	data.n = m->n;
	return data;
}
