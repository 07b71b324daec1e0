/*
 * sgemm_time.cu
 *	  Median time of a strict-fp32 cuBLAS SGEMM of an (n x d)(d x k) product:
 *	  the arithmetic floor of one exact Lloyd iteration, which the database
 *	  benchmark (test/gpu/db_benchmark.sh) sets kmeans_fit against.
 *
 *	  sgemm_time N D K  ->  prints "sgemm N D K MS"
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	fprintf(stderr, "%s: cuBLAS status %d\n", #x, (int) s_); return 1; } } while (0)

/* Random values in [-1, 1): never time a product of zeros. */
__global__ static void
fill(float *p, size_t n, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
		 i += (size_t) gridDim.x * blockDim.x)
	{
		unsigned	h = (unsigned) i * 2654435761u ^ seed;

		h ^= h >> 16;
		h *= 2246822519u;
		h ^= h >> 13;
		p[i] = (float) (h & 0xffffff) / 8388608.0f - 1.0f;
	}
}

static int
cmp(const void *a, const void *b)
{
	float		x = *(const float *) a,
				y = *(const float *) b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	long long	n,
				d,
				k;
	float	   *A,
			   *B,
			   *C,
				one = 1.0f,
				zero = 0.0f,
				ms[21];
	cublasHandle_t h;
	cudaEvent_t e0,
				e1;

	if (argc != 4)
	{
		fprintf(stderr, "usage: sgemm_time N D K\n");
		return 2;
	}
	n = atoll(argv[1]);
	d = atoll(argv[2]);
	k = atoll(argv[3]);
	CK(cudaMalloc(&A, sizeof(float) * n * d));
	CK(cudaMalloc(&B, sizeof(float) * k * d));
	CK(cudaMalloc(&C, sizeof(float) * n * k));
	fill<<<1024, 256>>>(A, (size_t) n * d, 1u);
	fill<<<1024, 256>>>(B, (size_t) k * d, 2u);
	CK(cudaGetLastError());
	CB(cublasCreate(&h));
	CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));	/* fp32 FMA: TF32 is not allowed */
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = -3; r < 21; r++)
	{
		float		t;

		/* C (k x n, column-major) = B^T A: the n x k distances' products */
		CK(cudaEventRecord(e0));
		CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int) k, (int) n, (int) d, &one,
					   B, (int) d, A, (int) d, &zero, C, (int) k));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&t, e0, e1));
		if (r >= 0)
			ms[r] = t;
	}
	qsort(ms, 21, sizeof(float), cmp);
	printf("sgemm %lld %lld %lld %.4f\n", n, d, k, ms[10]);
	return 0;
}
