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
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "kmeans_gpu.h"

#define KM_CHUNK_FIRST_ROWS 16
#define KM_CHUNK_MAX_BYTES ((Size) 64 * 1024 * 1024)

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
 * Copy a vector of dim values into out as float32, rejecting NULL elements,
 * NaN, infinities and float8 values beyond the range of real.
 */
void
KmVectorRead(ArrayType *vec, int dim, float *out)
{
	if (array_contains_nulls(vec))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("vector must not contain NULL values")));

	if (ARR_ELEMTYPE(vec) == FLOAT4OID)
	{
		const uint32 *restrict in = (const uint32 *) ARR_DATA_PTR(vec);
		uint32	   *restrict dst = (uint32 *) out;
		uint32		special = 0;

		/*
		 * Copy, and look at the exponent bits for NaN and infinities in the
		 * same pass: a loop without branches, which the compiler vectorises
		 * (this runs for every row of every scan; see the Makefile).
		 */
		for (int i = 0; i < dim; i++)
		{
			special |= (uint32) ((in[i] & 0x7f800000) == 0x7f800000);
			dst[i] = in[i];
		}
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
		elog(ERROR, "unexpected vector element type %u", ARR_ELEMTYPE(vec));
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

void
KmMatrixInit(KmMatrix *m, MemoryContext context, bool weighted, bool cosine)
{
	memset(m, 0, sizeof(*m));
	m->context = context;
	m->weighted = weighted;
	m->cosine = cosine;
	m->host_rows = true;
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
		mem = MemoryContextAllocHuge(m->context, bytes);
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
	Assert(m->gpu == NULL);
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
 * Append a vector, with its weight when m is weighted, after checking it:
 * into the host chunks, and to the GPU when rows are streamed there.
 */
void
KmMatrixAppendVector(KmMatrix *m, ArrayType *vec, float weight)
{
	int			dim = KmVectorDim(vec);
	float	   *row;

	if (m->dim != 0)
		KmCheckDimension(m->dim, dim);
	if (m->host_rows)
	{
		int64		got;

		row = KmMatrixReserve(m, dim, 1, &got);
		if (m->weighted)
			*m->weights_next = weight;
	}
	else
	{
		/* straight into pinned memory; once the GPU gave up, nowhere */
		row = m->gpu != NULL ? KmGpuSinkNext(m->gpu, dim, m->gpu_raise) : NULL;
		if (row == NULL)
		{
			m->gpu = NULL;
			row = m->scratch;
		}
		m->n++;
	}
	KmVectorRead(vec, dim, row);

	if (m->cosine)
	{
		bool		zero = true;

		for (int i = 0; i < dim && zero; i++)
			zero = row[i] == 0.0f;
		if (zero)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("zero vector cannot be clustered with metric cosine"),
					 errdetail("A vector of zeros has no direction."),
					 errhint("Filter such rows out, or use metric 'l2'.")));
	}

	if (m->gpu == NULL)
		return;
	if (!m->host_rows)
		KmGpuSinkTake(m->gpu, weight);
	else if (!KmGpuSinkPush(m->gpu, row, dim, weight, m->gpu_raise))
		m->gpu = NULL;			/* the rows are on the host: the CPU takes over */
}

/*
 * From now on, stream the rows to the GPU, starting with those already
 * gathered.  With keep_host the rows stay in host memory too, so that the
 * CPU can take over if the GPU cannot finish; without it the host chunks
 * are freed and later rows go to the GPU only (under 'auto' the caller must
 * then be able to read the rows again for the CPU: KmRunFit says when).
 * Does nothing when the GPU will not take the fit (under 'gpu' that is an
 * ERROR, as is any later GPU failure).
 */
void
KmMatrixStartGpu(KmMatrix *m, KmEngineChoice choice, int k, km_metric metric,
				 int64 expected_rows, bool keep_host)
{
	const struct km_gpu_api *api;
	KmGpuSink  *sink;

	Assert(m->dim > 0 && m->gpu == NULL && m->host_rows);
	api = KmGpuForFit(choice, Max(expected_rows, m->n), m->dim, Min(k, Max(expected_rows, 1)),
					  metric);
	if (api == NULL)
		return;
	m->gpu_raise = choice == KM_ENGINE_GPU;
	sink = KmGpuSinkCreate(api, m->context, m->dim, m->weighted,
						   Max(expected_rows, m->n), m->gpu_raise);
	if (sink == NULL)
		return;

	for (int c = 0; c < m->nchunks; c++)
		for (int64 i = 0; i < m->chunks[c].n; i++)
			if (!KmGpuSinkPush(sink, m->chunks[c].x + (Size) i * m->dim, m->dim,
							   m->chunks[c].w != NULL ? m->chunks[c].w[i] : 1.0f,
							   m->gpu_raise))
				return;
	m->gpu = sink;

	if (!keep_host)
	{
		for (int c = 0; c < m->nchunks; c++)
			pfree((void *) m->chunks[c].x);
		m->nchunks = 0;
		m->bytes = 0;
		m->last_capacity = 0;
		m->host_rows = false;
		m->scratch = MemoryContextAlloc(m->context, sizeof(float) * m->dim);
	}
}

/*
 * Move src's rows to the end of dst without copying them: both must live in
 * memory that outlasts dst.  src is left empty.
 */
void
KmMatrixAdopt(KmMatrix *dst, KmMatrix *src)
{
	Assert(dst->gpu == NULL && src->gpu == NULL);
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

/* The engine's view of the rows. */
km_data
KmMatrixData(const KmMatrix *m)
{
	km_data		data;

	data.d = m->dim;
	data.nchunks = m->nchunks;
	data.chunks = m->chunks;
	data.n = m->host_rows ? m->n : 0;
	return data;
}
