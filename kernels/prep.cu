/*
 * prep.cu
 *	  One pass over the rows before seeding: sampling hashes, the cosine
 *	  normalisation and the row norms the filter's slack needs; plus the
 *	  small fills and the dense-to-padded copy the upload uses.
 *
 * Plain C reference: km_row_hash, km_normalize_row and km_exact_norm of
 * km_hash.h / km_exact.h, which these kernels call as they are (host and
 * device give the same bits: integer hashing, correctly rounded double
 * steps).  kernels/bench/bench_engine.cu checks the result end to end.
 *
 * Why it is fast enough: it runs once per call, reads every row once and
 * writes at most one copy; one thread per row keeps the hash (a sequential
 * chain) and the normalisation (one double norm, then d divisions) simple,
 * and the rows a warp reads sit next to each other, so L1 serves most loads.
 */
#include "gpu_internal.cuh"

/*
 * Per row: hash of the raw row and weight (when hashes != NULL), the
 * normalised copy into Xout (cosine; Xout may equal X), and |x| of the row
 * the filter reads (raw for l2, normalised for cosine) into xnorm.
 */
__global__ void
kmg_prep_rows_kernel(const float *__restrict__ X, const float *__restrict__ W,
					 int64_t n, int d, int dp, int cosine, float *Xout,
					 float *__restrict__ xnorm, uint64_t *__restrict__ hashes)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
	{
		const float *x = X + i * dp;
		const float *f = x;
		double		s = 0.0;

		if (hashes != NULL)
			hashes[i] = km_row_hash(x, d, W != NULL ? W[i] : 1.0f);
		if (cosine)
		{
			float	   *o = Xout + i * dp;

			/* a zero row cannot be normalised and stays zero */
			if (km_normalize_row(x, o, d) == 0.0 && o != x)
				for (int c = 0; c < d; c++)
					o[c] = x[c];
			if (o != x)
				for (int c = d; c < dp; c++)
					o[c] = 0.0f;
			f = o;
		}
		for (int c = 0; c < d; c++)
			s += (double) f[c] * (double) f[c];
		xnorm[i] = (float) sqrt(s);
	}
}

cudaError_t
kmg_prep_rows(const float *X, const float *W, int64_t n, int d, int dp, int cosine,
			  float *Xout, float *xnorm, uint64_t *hashes, cudaStream_t stream)
{
	int64_t		blocks = (n + 127) / 128;

	if (n == 0)
		return cudaSuccess;
	if (blocks > 65535 * 8)
		blocks = 65535 * 8;
	kmg_prep_rows_kernel<<<(unsigned) blocks, 128, 0, stream>>>(X, W, n, d, dp, cosine,
																 Xout, xnorm, hashes);
	return cudaGetLastError();
}

/*
 * Dense rows (d floats each, as staged) into the padded layout (dp floats,
 * zeros past d).  One thread per output float: coalesced writes, and the
 * reads of a warp fall in one or two rows.
 */
__global__ void
kmg_expand_rows_kernel(const float *__restrict__ src, int64_t rows, int d, int dp,
					   float *__restrict__ dst)
{
	const int64_t total = rows * dp;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
	{
		int64_t		r = e / dp;
		int			c = (int) (e - r * dp);

		dst[e] = c < d ? src[r * d + c] : 0.0f;
	}
}

cudaError_t
kmg_expand_rows(const float *src, int64_t rows, int d, int dp, float *dst,
				cudaStream_t stream)
{
	int64_t		blocks = (rows * dp + 255) / 256;

	if (rows == 0)
		return cudaSuccess;
	if (blocks > 65535 * 16)
		blocks = 65535 * 16;
	kmg_expand_rows_kernel<<<(unsigned) blocks, 256, 0, stream>>>(src, rows, d, dp, dst);
	return cudaGetLastError();
}

/* p[i] = v, or p[i] = i when iota. */
__global__ void
kmg_fill_int_kernel(int32_t *__restrict__ p, int64_t n, int32_t v, int iota)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		p[i] = iota ? (int32_t) i : v;
}

cudaError_t
kmg_fill_int(int32_t *p, int64_t n, int32_t v, int iota, cudaStream_t stream)
{
	int64_t		blocks = (n + 255) / 256;

	if (n == 0)
		return cudaSuccess;
	if (blocks > 65535 * 16)
		blocks = 65535 * 16;
	kmg_fill_int_kernel<<<(unsigned) blocks, 256, 0, stream>>>(p, n, v, iota);
	return cudaGetLastError();
}
