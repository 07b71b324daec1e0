/*
 * random.cu
 *	  The random init on the device: k rows chosen by the order-free sampling
 *	  keys of km_hash.h, and the copy of chosen rows into the centroids (also
 *	  for k-means++'s winners).
 *
 * Plain C reference: ref_seed in kernels/bench/ref_kmeans.c (the rules of
 * src/engine/cpu_seed.c), compared bit for bit by bench_engine.cu.
 *
 * key_i = km_sample_key(h_i, stream(seed, run, 0), w_i); a stable radix
 * sort of (key, row) (update/sort.cu) gives the k smallest keys, ties to the
 * lower row: the same rows whatever their order or split.
 */
#include "kmg_common.cuh"
#include "seed/seed.cuh"

/* Random init: every row's key under w. */
__global__ void
kmg_random_keys_kernel(const uint64_t *__restrict__ hashes, const float *__restrict__ W,
					   int64_t n, uint64_t stream_key, double *__restrict__ keys)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		keys[i] = km_sample_key(hashes[i], stream_key, W != NULL ? (double) W[i] : 1.0);
}

cudaError_t
kmg_seed_random_keys(const kmg_args *a, const uint64_t *hashes, uint64_t stream_key,
					 double *keys, cudaStream_t stream)
{
	int64_t		blocks = (a->n + 255) / 256;

	if (blocks > 65535 * 8)
		blocks = 65535 * 8;
	kmg_random_keys_kernel<<<(unsigned) blocks, 256, 0, stream>>>(hashes, a->W, a->n,
																   stream_key, keys);
	return cudaGetLastError();
}

/* Centroids c0 .. c0 + count - 1 become the given rows (filter rows of X). */
__global__ void
kmg_take_rows_kernel(kmg_args a, const int32_t *rows, int c0)
{
	const int	t = blockIdx.x;
	const int	r = rows[t];
	const float *x = a.X + (size_t) r * a.dp;
	float	   *c = a.C + (size_t) (c0 + t) * a.dp;

	for (int i = threadIdx.x; i < a.dp; i += blockDim.x)
		c[i] = x[i];
}

cudaError_t
kmg_take_rows(const kmg_args *a, const int32_t *rows, int count, int c0, cudaStream_t stream)
{
	if (count <= 0)
		return cudaSuccess;
	kmg_take_rows_kernel<<<count, 128, 0, stream>>>(*a, rows, c0);
	return cudaGetLastError();
}
