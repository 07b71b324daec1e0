/*
 * prep.cuh
 *	  One pass over the rows before seeding (prep.cu): sampling hashes, the
 *	  cosine copy and the row norms the filter's slack needs; the statistics
 *	  a call learns about its rows once; the small fills and the
 *	  dense-to-padded copy of the upload; the bounds of the exact sums'
 *	  terms; rows in half precision (storage.cu).
 */
#ifndef KMG_PREP_CUH
#define KMG_PREP_CUH

#include "kmg_common.cuh"
#include "km_xsum.h"

cudaError_t kmg_prep_rows(const float *X, const float *W, int64_t n, int d, int dp,
						  int cosine, float *Xout, float *xnorm, uint64_t *hashes,
						  cudaStream_t stream);

/*
 * What a call learns about its rows once: the column sums (for mu), the sum
 * of |x|^2, max w and max |x|^2 as the CPU engine computes it (km_cpu_sqnorm:
 * eight float lanes), for the l2 centring decision and the inertia scale.
 */
typedef struct kmg_row_stats
{
	double		sqsum;			/* sum of |x|^2 (float per row, summed in double) */
	float		xmax2;			/* max |x|^2 (float, CPU order) */
	float		wmax;			/* max weight (1 without weights) */
	float		xabsmax;		/* max |x_i| over every value */
} kmg_row_stats;

size_t		kmg_stats_bytes(int64_t n, int dp);
cudaError_t kmg_row_stats_run(const float *X, const float *W, int64_t n, int d, int dp,
							  int colsums, void *work, double *colsum, kmg_row_stats *stats,
							  cudaStream_t stream);
cudaError_t kmg_centred_norms(const float *X, const float *mu, int64_t n, int d, int dp,
							  float *xnorm, cudaStream_t stream);
cudaError_t kmg_expand_rows(const float *src, int64_t rows, int d, int dp, float *dst,
							cudaStream_t stream);
cudaError_t kmg_fill_int(int32_t *p, int64_t n, int32_t v, int iota, cudaStream_t stream);

/*
 * km_xstats of padded rows (raw values; cosine: with their exact norms),
 * merged into out[4] = (xmax, xmin, wmax, wmin) by integer atomics (the
 * caller starts them as km_xstats_init does).  weighted: W holds weights.
 */
cudaError_t kmg_xstats_rows(const float *X, const float *W, int64_t n, int d, int dp,
							int cosine, int *out, cudaStream_t stream);

/*
 * The same for one call's rows, read back: *xs from scratch (four device
 * ints, started here); synchronises the stream.
 */
cudaError_t kmg_xstats_of(const float *X, const float *W, int64_t n, int d, int dp, int cosine,
						  int *scratch, km_xstats *xs, cudaStream_t stream);

/* ---- storage.cu ---- */
int			kmg_storage_bytes(int storage);
cudaError_t kmg_rows_to_storage(const float *src, int64_t rows, int d, int storage, void *dst,
								unsigned long long *bad, cudaStream_t stream);
cudaError_t kmg_rows_from_storage(const void *src, int storage, int64_t rows, int d, int dp,
								  float *dst, cudaStream_t stream);
cudaError_t kmg_rows_from_storage_norms(const void *src, int storage, int64_t rows, int d, int dp,
										float *dst, float *xnorm, cudaStream_t stream);

#endif							/* KMG_PREP_CUH */
