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
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "km_xsum.h"
#include "prep/prep.cuh"

#include <algorithm>
#include <string.h>

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

/*
 * |x|^2 in float exactly as the CPU engine's km_cpu_sqnorm computes it
 * (src/engine/cpu_kernels.c: eight lanes of x * x, their fixed tree, then
 * the tail in order; no FMA), so that the inertia scale, which depends on
 * the largest such value, is the CPU engine's.
 */
__device__ __forceinline__ float
kmg_cpu_sqnorm(const float *x, int d)
{
	float		s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	float		r;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
		for (int l = 0; l < 8; l++)
			s[l] = __fadd_rn(s[l], __fmul_rn(x[i + l], x[i + l]));
	r = __fadd_rn(__fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3])),
				  __fadd_rn(__fadd_rn(s[4], s[5]), __fadd_rn(s[6], s[7])));
	for (; i < d; i++)
		r = __fadd_rn(r, __fmul_rn(x[i], x[i]));
	return r;
}

#define KMG_STATS_BLOCKS 512

/*
 * Per block (fixed grid, grid-stride rows): the sum of |x|^2 in a fixed
 * tree; max |x|^2 and max w through integer atomics on the bits (both
 * non-negative, so the integer order is the float order).
 */
__global__ void __launch_bounds__(256)
kmg_stats_kernel(const float *__restrict__ X, const float *__restrict__ W, int64_t n, int d,
				 int dp, double *__restrict__ sqpart, unsigned int *__restrict__ maxbits)
{
	__shared__ double sred[8];
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	double		sq = 0.0;
	float		xm = 0.0f,
				wm = 0.0f,
				am = 0.0f;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
	{
		const float *x = X + (size_t) i * dp;
		const float x2 = kmg_cpu_sqnorm(x, d);
		const float w = W != NULL ? W[i] : 1.0f;

		sq += (double) x2;
		xm = fmaxf(xm, x2);
		wm = fmaxf(wm, w);
		for (int c = 0; c < d; c++)
			am = fmaxf(am, fabsf(x[c]));
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		sq += __shfl_xor_sync(0xffffffffu, sq, o);
		xm = fmaxf(xm, __shfl_xor_sync(0xffffffffu, xm, o));
		wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, o));
		am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
	}
	if ((threadIdx.x & 31) == 0)
	{
		sred[threadIdx.x >> 5] = sq;
		atomicMax(&maxbits[0], __float_as_uint(xm));
		atomicMax(&maxbits[1], __float_as_uint(wm));
		atomicMax(&maxbits[2], __float_as_uint(am));
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		s = sred[0];

		for (int w = 1; w < (int) (blockDim.x >> 5); w++)
			s += sred[w];
		sqpart[blockIdx.x] = s;
	}
}

/*
 * Column sums of rows [b * rb, (b + 1) * rb) per block b, each column's rows
 * in order (a few row streams per column for narrow rows, added in order).
 */
__global__ void __launch_bounds__(256)
kmg_colsum_kernel(const float *__restrict__ X, int64_t n, int dp, int64_t rb,
				  double *__restrict__ colpart)
{
	__shared__ double sp[256];
	const int64_t r0 = (int64_t) blockIdx.x * rb;
	const int64_t r1 = r0 + rb < n ? r0 + rb : n;
	const int	t = threadIdx.x;

	if (dp <= 256)
	{
		const int	rpp = 256 / dp;
		const int	c = t % dp,
					ro = t / dp;
		double		s = 0.0;

		if (ro < rpp)
			for (int64_t r = r0 + ro; r < r1; r += rpp)
				s += (double) X[(size_t) r * dp + c];
		sp[t] = s;
		__syncthreads();
		if (t < dp)
		{
			double		v = sp[t];

			for (int o = 1; o < rpp; o++)
				v += sp[o * dp + t];
			colpart[(size_t) blockIdx.x * dp + t] = v;
		}
	}
	else
		for (int c = t; c < dp; c += 256)
		{
			double		s = 0.0;

			for (int64_t r = r0; r < r1; r++)
				s += (double) X[(size_t) r * dp + c];
			colpart[(size_t) blockIdx.x * dp + c] = s;
		}
}

__global__ void
kmg_colsum_reduce_kernel(const double *__restrict__ colpart, int nb, int dp,
						 double *__restrict__ colsum)
{
	const int	c = blockIdx.x * blockDim.x + threadIdx.x;

	if (c < dp)
	{
		double		s = 0.0;

		for (int b = 0; b < nb; b++)
			s += colpart[(size_t) b * dp + c];
		colsum[c] = s;
	}
}

static int64_t
kmg_colsum_rows(int64_t n)
{
	int64_t		rb = (n + 1023) / 1024;

	return rb < 256 ? 256 : rb;
}

/* Device scratch for kmg_row_stats_run. */
size_t
kmg_stats_bytes(int64_t n, int dp)
{
	const int64_t nb = (n + kmg_colsum_rows(n) - 1) / kmg_colsum_rows(n);

	return (size_t) (KMG_STATS_BLOCKS + 2 + (nb + 1) * dp) * sizeof(double) + 64;
}

/*
 * Run the statistics (column sums only when colsums) and bring them to the
 * host; synchronises the stream.  colsum: dp doubles (host), or NULL.
 */
cudaError_t
kmg_row_stats_run(const float *X, const float *W, int64_t n, int d, int dp, int colsums,
				  void *work, double *colsum, kmg_row_stats *stats, cudaStream_t stream)
{
	double	   *sqpart = (double *) work;
	unsigned int *maxbits = (unsigned int *) (sqpart + KMG_STATS_BLOCKS);
	double	   *cs = sqpart + KMG_STATS_BLOCKS + 2;
	double	   *colpart = cs + dp;
	double		hsq[KMG_STATS_BLOCKS];
	unsigned int hmax[4];
	int64_t		blocks = (n + 255) / 256;
	cudaError_t e;

	if (blocks > KMG_STATS_BLOCKS)
		blocks = KMG_STATS_BLOCKS;
	if (blocks < 1)
		blocks = 1;
	if ((e = cudaMemsetAsync(sqpart, 0, KMG_STATS_BLOCKS * sizeof(double) + 16, stream)) != cudaSuccess)
		return e;
	kmg_stats_kernel<<<(unsigned) blocks, 256, 0, stream>>>(X, W, n, d, dp, sqpart, maxbits);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	if (colsums && colsum != NULL)
	{
		const int64_t rb = kmg_colsum_rows(n);
		const int64_t nb = (n + rb - 1) / rb;

		kmg_colsum_kernel<<<(unsigned) nb, 256, 0, stream>>>(X, n, dp, rb, colpart);
		kmg_colsum_reduce_kernel<<<(dp + 127) / 128, 128, 0, stream>>>(colpart, (int) nb, dp, cs);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
		if ((e = cudaMemcpyAsync(colsum, cs, (size_t) dp * sizeof(double), cudaMemcpyDeviceToHost,
								 stream)) != cudaSuccess)
			return e;
	}
	if ((e = cudaMemcpyAsync(hsq, sqpart, KMG_STATS_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
							 stream)) != cudaSuccess ||
		(e = cudaMemcpyAsync(hmax, maxbits, sizeof(hmax), cudaMemcpyDeviceToHost, stream)) != cudaSuccess ||
		(e = cudaStreamSynchronize(stream)) != cudaSuccess)
		return e;
	stats->sqsum = 0.0;
	for (int b = 0; b < (int) blocks; b++)
		stats->sqsum += hsq[b];
	memcpy(&stats->xmax2, &hmax[0], sizeof(float));
	memcpy(&stats->wmax, &hmax[1], sizeof(float));
	memcpy(&stats->xabsmax, &hmax[2], sizeof(float));
	return cudaSuccess;
}

/* xnorm[i] = |fl(x_i - mu)|, the centred row norm the filter's slack needs. */
__global__ void
kmg_centred_norms_kernel(const float *__restrict__ X, const float *__restrict__ mu, int64_t n,
						 int d, int dp, float *__restrict__ xnorm)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
	{
		const float *x = X + (size_t) i * dp;
		double		s = 0.0;

		for (int c = 0; c < d; c++)
		{
			const float v = x[c] - mu[c];

			s += (double) v * (double) v;
		}
		xnorm[i] = (float) sqrt(s);
	}
}

cudaError_t
kmg_centred_norms(const float *X, const float *mu, int64_t n, int d, int dp, float *xnorm,
				  cudaStream_t stream)
{
	int64_t		blocks = (n + 127) / 128;

	if (n == 0)
		return cudaSuccess;
	if (blocks > 65535 * 8)
		blocks = 65535 * 8;
	kmg_centred_norms_kernel<<<(unsigned) blocks, 128, 0, stream>>>(X, mu, n, d, dp, xnorm);
	return cudaGetLastError();
}

/*
 * Bounds on the terms of the exact sums (km_xstats, as the CPU engine
 * gathers them: km_xstats_row of the raw row, its weight, and for cosine
 * its exact norm): per thread, then per warp, then one integer atomic each
 * into out (max and min are order-free).
 */
__global__ void __launch_bounds__(256)
kmg_xstats_kernel(const float *__restrict__ X, const float *__restrict__ W, int64_t n, int d,
				  int dp, int cosine, int *out)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	km_xstats	s;

	km_xstats_init(&s);
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
	{
		const float *x = X + (size_t) i * dp;

		km_xstats_row(&s, x, d, W != NULL ? W[i] : 1.0f, W != NULL, cosine,
					  cosine ? km_exact_norm(x, d) : 0.0);
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		s.xmax = max(s.xmax, __shfl_xor_sync(0xffffffffu, s.xmax, o));
		s.xmin = min(s.xmin, __shfl_xor_sync(0xffffffffu, s.xmin, o));
		s.wmax = max(s.wmax, __shfl_xor_sync(0xffffffffu, s.wmax, o));
		s.wmin = min(s.wmin, __shfl_xor_sync(0xffffffffu, s.wmin, o));
	}
	if ((threadIdx.x & 31) == 0)
	{
		atomicMax(&out[0], s.xmax);
		atomicMin(&out[1], s.xmin);
		atomicMax(&out[2], s.wmax);
		atomicMin(&out[3], s.wmin);
	}
}

/*
 * The same for unweighted l2 rows, read as one array of 16-byte chunks
 * (coalesced; the thread a row above reads 32 rows apart at every step).
 * Without weights or norms a row adds the largest and the least nonzero
 * exponent of its values, so any grouping of the values gives the same
 * bounds; the zeros past d change neither.
 */
__global__ void __launch_bounds__(256)
kmg_xstats_flat_kernel(const float4 *__restrict__ X4, int64_t n4, int *out)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	uint32_t	hi = 0,
				lo = 255;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride)
	{
		const float4 v = X4[i];
		const float f[4] = {v.x, v.y, v.z, v.w};

#pragma unroll
		for (int c = 0; c < 4; c++)
		{
			const uint32_t bits = __float_as_uint(f[c]) & 0x7fffffffu;
			const uint32_t e = bits >> 23;

			hi = max(hi, e);
			if (bits != 0)
				lo = min(lo, max(e, 1u));
		}
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
		lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
	}
	if ((threadIdx.x & 31) == 0 && lo != 255)
	{
		/* km_xstats_add of a nonzero row, unweighted, l2 */
		atomicMax(&out[0], (int) hi - 126);
		atomicMin(&out[1], (int) lo - 150);
	}
}

cudaError_t
kmg_xstats_of(const float *X, const float *W, int64_t n, int d, int dp, int cosine, int *scratch,
			  km_xstats *xs, cudaStream_t stream)
{
	int			v[4];
	cudaError_t e;

	km_xstats_init(xs);
	v[0] = xs->xmax;
	v[1] = xs->xmin;
	v[2] = xs->wmax;
	v[3] = xs->wmin;
	if ((e = cudaMemcpyAsync(scratch, v, sizeof(v), cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
		(e = kmg_xstats_rows(X, W, n, d, dp, cosine, scratch, stream)) != cudaSuccess ||
		(e = cudaMemcpyAsync(v, scratch, sizeof(v), cudaMemcpyDeviceToHost, stream)) != cudaSuccess ||
		(e = cudaStreamSynchronize(stream)) != cudaSuccess)
		return e;
	xs->xmax = v[0];
	xs->xmin = v[1];
	xs->wmax = v[2];
	xs->wmin = v[3];
	return cudaSuccess;
}

cudaError_t
kmg_xstats_rows(const float *X, const float *W, int64_t n, int d, int dp, int cosine, int *out,
				cudaStream_t stream)
{
	int64_t		blocks = (n + 255) / 256;

	if (n == 0)
		return cudaSuccess;
	if (W == NULL && !cosine && dp % 4 == 0 && ((uintptr_t) X & 15) == 0)
	{
		const int64_t n4 = n * (dp / 4);

		blocks = kmg_stride_grid((n4 + 255) / 256, 8);
		kmg_xstats_flat_kernel<<<(unsigned) blocks, 256, 0, stream>>>(reinterpret_cast<const float4 *>(X),
																	   n4, out);
		return cudaGetLastError();
	}
	blocks = kmg_stride_grid(blocks, 8);
	kmg_xstats_kernel<<<(unsigned) blocks, 256, 0, stream>>>(X, W, n, d, dp, cosine, out);
	return cudaGetLastError();
}
