/*
 * update.cuh
 *	  The M step for any k: rows grouped by label (sort.cu), per-cluster sums
 *	  in row order (sums.cu), the centroid update with the decisions that end
 *	  an iteration, and the re-seeding of empty clusters (finalize.cu).
 */
#ifndef KMG_UPDATE_CUH
#define KMG_UPDATE_CUH

#include "kmg_common.cuh"

/* ---- sort.cu ---- */
size_t		kmg_sort_temp_bytes(int64_t n, int k);
cudaError_t kmg_sort_labels(const kmg_args *a, const int32_t *iota, void *temp,
							size_t temp_bytes, cudaStream_t stream);
cudaError_t kmg_sort_costs_desc(const double *cost, double *keys_out, const int32_t *iota,
								int32_t *rows_out, int64_t n, void *temp,
								size_t temp_bytes, cudaStream_t stream);
cudaError_t kmg_sort_keys_asc(const double *keys, double *keys_out, const int32_t *iota,
							  int32_t *rows_out, int64_t n, void *temp, size_t temp_bytes,
							  cudaStream_t stream);
cudaError_t kmg_label_pieces(const kmg_args *a, cudaStream_t stream);
int			kmg_max_pieces(int64_t n, int k);

/* ---- sums.cu ---- */
cudaError_t kmg_segment(const kmg_args *a, int mode, int with_sums, cudaStream_t stream);

/* ---- finalize.cu ---- */

/* Up to this k, one block ends an iteration (finalize_block.cuh). */
#define KMG_FIN1_KMAX 64

cudaError_t kmg_finalize(const kmg_args *a, int mode, cudaStream_t stream);
cudaError_t kmg_reseed(const kmg_args *a, const int32_t *far_rows, cudaStream_t stream);

#endif							/* KMG_UPDATE_CUH */
