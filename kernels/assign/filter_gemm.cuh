/*
 * filter_gemm.cuh
 *	  The float32 filter for large k: distances as a GEMM, fused with a
 *	  per-row top-2, never materialising the n x k matrix.
 *
 * For rows X' (n x dp) and centroids C' (kp x dp), both row-major on the
 * device, already centred or normalised and padded with zeros to dp columns
 * (a multiple of 8, rows 32-byte aligned) and kp rows, and cn (kp floats:
 * |c'_j|^2, +INFINITY for padding rows j >= k), it computes for every row i
 *
 *		f_ij = cn_j - 2 * dot(x'_i, c'_j)			(float32 arithmetic, FMA allowed,
 *													 any summation order, no TF32)
 *		best[i]    = argmin_j f_ij, lowest j on ties
 *		fbest[i]   = f_i,best
 *		fsecond[i] = min_{j != best} f_ij			(+INFINITY when k == 1)
 *
 * which is what km_filter_slack (src/include/km_exact.h) bounds: the caller
 * settles rows whose fsecond - fbest is within the slack with the exact
 * distance.
 */
#ifndef KM_FILTER_GEMM_CUH
#define KM_FILTER_GEMM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* Column padding and centroid-row padding the kernel expects. */
#define KM_FILTER_DPAD 8
int			km_filter_kpad(int k);	/* kp for k centroids */

/*
 * The two tile shapes compiled: blocks of 128 rows against 128 or 256
 * centroids at a time.  The caller chooses (assign/dispatch.cu: the smaller
 * for k <= 128) and gives the same tile to km_filter_prepare and
 * km_filter_top2.
 */
enum
{
	KM_FILTER_TILE_128 = 0,
	KM_FILTER_TILE_256 = 1
};

/*
 * Per-iteration preparation of the centroid operand (a transposed, tiled
 * copy) into work, which must hold km_filter_work_bytes(kp, dp) bytes.
 */
size_t		km_filter_work_bytes(int kp, int dp);
cudaError_t km_filter_prepare(int tile, const float *C, const float *cn, int k, int kp,
							  int dp, void *work, cudaStream_t stream);

/*
 * The prepared operand, for kernels that reread it (the exact refinement of
 * the rows the filter cannot settle): BN = km_filter_tile_cols(tile) centroids
 * per tile, tiles = ceil(kp / BN); for tile t, column c < dp and i < BN,
 *		((const float *) work)[((size_t) t * dp + c) * BN + i] = -2 c'_{t BN + i, c}
 * (0 past k), then cn padded with +INFINITY to whole tiles:
 *		((const float *) work)[(size_t) tiles * BN * dp + j] = cn_j.
 */
int			km_filter_tile_cols(int tile);

/*
 * The filter itself; returns the launch error, if any.  stop (optional): a
 * device int read when each block starts; nonzero means the caller's run
 * has stopped and the launch returns at once writing nothing (queued
 * iterations of a paused or finished Lloyd run cost almost nothing).
 */
cudaError_t km_filter_top2(int tile, const float *X, int64_t n, int dp,
						   const void *work, int k, int kp,
						   int32_t *best, float *fbest, float *fsecond,
						   cudaStream_t stream, const int *stop = nullptr);

#endif							/* KM_FILTER_GEMM_CUH */
