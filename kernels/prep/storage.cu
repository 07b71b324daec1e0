/*
 * storage.cu
 *	  Rows kept in half precision (km_storage): float rows converted to
 *	  float16 or bfloat16 when they are uploaded, and rows of any storage
 *	  turned back into the padded float rows the kernels read, one step of
 *	  work at a time (driver/split.cu).
 *
 * Both conversions are exact: the SQL layer rounded every value to the
 * storage's precision when it read it, so float -> half loses nothing (a
 * value that would is flagged, and the fit refuses the rows) and half ->
 * float never rounds.  The fit therefore clusters exactly the values the
 * CPU engine clusters.
 *
 * Why it is fast enough: one thread per value, coalesced on both sides; a
 * step's conversion reads 2 bytes and writes 4 per value, a few percent of
 * an iteration that reads the same rows at least once more.
 */
#include "kmg_common.cuh"
#include "prep/prep.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* Bytes of one stored value. */
int
kmg_storage_bytes(int storage)
{
	return storage == KM_STORAGE_FLOAT32 ? 4 : 2;
}

/*
 * Float rows (d values each) into storage; *bad becomes 1 + the lowest row
 * holding a value the storage cannot hold exactly (atomicMin; the caller
 * sets it to ULLONG_MAX first).
 */
__global__ void
kmg_to_storage_kernel(const float *__restrict__ src, int64_t rows, int d, int storage,
					  void *__restrict__ dst, unsigned long long *bad)
{
	const int64_t total = rows * d;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
	{
		const float x = src[e];
		float		back;

		if (storage == KM_STORAGE_FLOAT16)
		{
			const __half h = __float2half_rn(x);

			((__half *) dst)[e] = h;
			back = __half2float(h);
		}
		else
		{
			const __nv_bfloat16 h = __float2bfloat16_rn(x);

			((__nv_bfloat16 *) dst)[e] = h;
			back = __bfloat162float(h);
		}
		if (__float_as_uint(back) != __float_as_uint(x))
			atomicMin(bad, (unsigned long long) (e / d));
	}
}

cudaError_t
kmg_rows_to_storage(const float *src, int64_t rows, int d, int storage, void *dst,
					unsigned long long *bad, cudaStream_t stream)
{
	int64_t		blocks = (rows * d + 255) / 256;

	if (rows == 0)
		return cudaSuccess;
	if (blocks > 65535 * 16)
		blocks = 65535 * 16;
	kmg_to_storage_kernel<<<(unsigned) blocks, 256, 0, stream>>>(src, rows, d, storage, dst, bad);
	return cudaGetLastError();
}

/*
 * Stored rows (d values each, float or half) into padded float rows (dp
 * values each, zeros past d).  One thread per output float.
 */
__global__ void
kmg_from_storage_kernel(const void *__restrict__ src, int storage, int64_t rows, int d, int dp,
						float *__restrict__ dst)
{
	const int64_t total = rows * dp;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
	{
		const int64_t r = e / dp;
		const int	c = (int) (e - r * dp);
		const int64_t s = r * d + c;
		float		v = 0.0f;

		if (c < d)
		{
			if (storage == KM_STORAGE_FLOAT16)
				v = __half2float(((const __half *) src)[s]);
			else if (storage == KM_STORAGE_BFLOAT16)
				v = __bfloat162float(((const __nv_bfloat16 *) src)[s]);
			else
				v = ((const float *) src)[s];
		}
		dst[e] = v;
	}
}

cudaError_t
kmg_rows_from_storage(const void *src, int storage, int64_t rows, int d, int dp, float *dst,
					  cudaStream_t stream)
{
	int64_t		blocks = (rows * dp + 255) / 256;

	if (rows == 0)
		return cudaSuccess;
	if (blocks > 65535 * 16)
		blocks = 65535 * 16;
	kmg_from_storage_kernel<<<(unsigned) blocks, 256, 0, stream>>>(src, storage, rows, d, dp, dst);
	return cudaGetLastError();
}

/*
 * The same for l2 with the row norms the filter's slack needs, in one read
 * of the step: a warp per row, |x| from a fixed tree of the squares (the
 * slack only needs a norm, not prep.cu's bits; cosine normalises with
 * prep.cu's exact per-row arithmetic instead).
 */
__global__ void __launch_bounds__(256)
kmg_from_storage_norms_kernel(const void *__restrict__ src, int storage, int64_t rows, int d,
							  int dp, float *__restrict__ dst, float *__restrict__ xnorm)
{
	const int	lane = threadIdx.x & 31;
	const int64_t warps = (int64_t) gridDim.x * (blockDim.x >> 5);

	for (int64_t r = (int64_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
		 r += warps)
	{
		double		s = 0.0;

		for (int c = lane; c < dp; c += 32)
		{
			float		v = 0.0f;

			if (c < d)
			{
				const int64_t e = r * d + c;

				if (storage == KM_STORAGE_FLOAT16)
					v = __half2float(((const __half *) src)[e]);
				else if (storage == KM_STORAGE_BFLOAT16)
					v = __bfloat162float(((const __nv_bfloat16 *) src)[e]);
				else
					v = ((const float *) src)[e];
			}
			dst[r * dp + c] = v;
			s += (double) v * (double) v;
		}
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0)
			xnorm[r] = (float) sqrt(s);
	}
}

cudaError_t
kmg_rows_from_storage_norms(const void *src, int storage, int64_t rows, int d, int dp, float *dst,
							float *xnorm, cudaStream_t stream)
{
	int64_t		blocks = (rows + 7) / 8;

	if (rows == 0)
		return cudaSuccess;
	blocks = kmg_stride_grid(blocks, 16);
	kmg_from_storage_norms_kernel<<<(unsigned) blocks, 256, 0, stream>>>(src, storage, rows, d, dp,
																		 dst, xnorm);
	return cudaGetLastError();
}
