/*
 * rows.cu
 *	  What each k-medoids row contributes on its own: its aux value
 *	  (kmd_aux of src/include/kmd_metric.h: |x|^2 for l2, sqeuclidean and
 *	  cosine, Q(X, X) for sqfd, 0 for l1), computed once per fit.
 *
 * C reference: kmd_aux itself, which the CPU engine calls for every row;
 * the device runs the same function (KM_HD, with km_exact.h's
 * intrinsics), so the bits are the same.  One thread a row: a single pass,
 * small beside any step of the method.
 */
#include "kmg_common.cuh"
#include "kmd_metric.h"
#include "medoids/medoids.cuh"

__global__ void __launch_bounds__(KMG_KMD_NT)
kmg_kmd_aux_kernel(kmg_kmd_rows R, double *aux)
{
	const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= R.n)
		return;
	if (R.metric == KMD_SQFD)
		aux[i] = kmd_aux(KMD_SQFD, R.X + R.off[i], R.m[i], R.d, R.alpha);
	else
		aux[i] = kmd_aux(R.metric, R.X + i * R.d, 1, R.d, R.alpha);
}

cudaError_t
kmg_kmd_aux(const kmg_kmd_rows *R, double *aux, cudaStream_t s)
{
	const int64_t blocks = (R->n + KMG_KMD_NT - 1) / KMG_KMD_NT;

	if (R->n < 1)
		return cudaSuccess;
	kmg_kmd_aux_kernel<<<(unsigned) blocks, KMG_KMD_NT, 0, s>>>(*R, aux);
	return cudaGetLastError();
}
