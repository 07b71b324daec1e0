/*
 * update.cuh
 *	  The M step for any k: rows grouped by label (sort.cu), per-cluster sums
 *	  in row order (sums.cu), the centroid update with the decisions that end
 *	  an iteration, and the re-seeding of empty clusters (finalize.cu); the
 *	  exact sums of the split fits (xsums.cu), which a fit with bounds keeps
 *	  across its iterations (running.cu).
 */
#ifndef KMG_UPDATE_CUH
#define KMG_UPDATE_CUH

#include "kmg_common.cuh"
#include "km_xsum.h"

/*
 * A row's term of an iteration's inertia estimate (progress only): the
 * filter's best value plus |x|^2, the squared distance it stands for (half
 * of it for cosine), 0 when rounding made it negative.  Weighted by the
 * caller.  Shared by sums.cu, xsums.cu and running.cu.
 */
static __device__ __forceinline__ double
kmg_row_estimate(const kmg_args &a, int64_t r)
{
	const float xn = a.xnorm[r];
	const double e = (double) a.fbest[r] + (double) (xn * xn);

	return e > 0.0 ? (a.cosine ? 0.5 * e : e) : 0.0;
}

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
cudaError_t kmg_pieces_of_counts(const kmg_args *a, const int32_t *count, cudaStream_t stream);
int			kmg_max_pieces(int64_t n, int k);

/* ---- sums.cu ---- */
cudaError_t kmg_segment(const kmg_args *a, int mode, int with_sums, cudaStream_t stream);

/* ---- finalize.cu ---- */

/* Up to this k, one block ends an iteration (finalize_block.cuh). */
#define KMG_FIN1_KMAX 64

cudaError_t kmg_finalize(const kmg_args *a, int mode, cudaStream_t stream);
cudaError_t kmg_reseed(const kmg_args *a, const int32_t *far_rows, cudaStream_t stream);

/* ---- xsums.cu ---- */

/*
 * The accumulators of a split fit on one device: per level, sums of w x
 * (nlx x k x d) and of w (nlw x k), in the levels of xlev and wlev, where
 * no addition rounds; per cluster the count, the final pass's order-free
 * inertia words (lo, hi) at a.ishift and a flag for a term past its bound;
 * the step's moved rows and sum of w * cost (progress only).
 */
typedef struct kmg_xsum_acc
{
	double	   *xs;
	double	   *ws;
	double	   *cost;
	unsigned long long *counts;
	unsigned long long *fix;
	unsigned long long *sat;
	unsigned long long *moved;
	km_xlevels	xlev;
	km_xlevels	wlev;
} kmg_xsum_acc;

size_t		kmg_xsum_acc_bytes(int k, int d, int nlx, int nlw);
void		kmg_xsum_acc_carve(kmg_xsum_acc *acc, void *base, int k, int d, int nlx, int nlw);
/* What kmg_xsums sums besides the rows: an iteration's cost, or the final pass's. */
enum
{
	KMG_XSUMS_COST = 0,			/* exact costs (a.cost) for progress */
	KMG_XSUMS_ESTIMATE = 1,		/* the filter's estimate (a.fbest, a.xnorm) */
	KMG_XSUMS_FINAL = 2,		/* counts and order-free inertia words only */
	KMG_XSUMS_MOVED = 3			/* no cost; keys k.. take rows away (running.cu) */
};

cudaError_t kmg_xsums(const kmg_args *a, const kmg_xsum_acc *acc, int mode,
					  cudaStream_t stream);
cudaError_t kmg_xsums_pieces(const kmg_args *a, const kmg_xsum_acc *acc, int mode, int grid,
							 cudaStream_t stream);
cudaError_t kmg_moved(const int32_t *fresh, int32_t *kept, int64_t n,
					  unsigned long long *moved, cudaStream_t stream);
cudaError_t kmg_xsum_combine(const kmg_xsum_acc *acc, const void *peer, int k, int d,
							 cudaStream_t stream);
cudaError_t kmg_xstep(const kmg_args *a, const kmg_xsum_acc *acc, cudaStream_t stream);

/* ---- running.cu: a bounded fit's exact sums, moved by the moved rows ---- */

/* blocks of the inertia estimate's fixed tree */
#define KMG_RUN_EST_BLOCKS 1024

typedef struct kmg_running
{
	int			on;				/* the iterations keep these sums (kmg_running_levels) */
	void	   *accmem;			/* kmg_xsum_acc_bytes(k, d, 2, 2) */
	kmg_xsum_acc acc;			/* the sums, in the levels of the rows' terms */
	int32_t    *rows;			/* 2n: the moved rows of an iteration, by key */
	int32_t    *count;			/* 2k rows per key, then cursor: 2k */
	int32_t    *cursor;
	int2	   *bounds;			/* 2k: each key's [start, end) in rows */
	int2	   *pclus;			/* 2k */
	int4	   *ptab;			/* 2 kmg_max_pieces(n, k) */
	int		   *npieces;
	double	   *est;			/* KMG_RUN_EST_BLOCKS partial estimates */
	int		   *xst;			/* 4: km_xstats of the rows */
} kmg_running;

cudaError_t kmg_running_levels(kmg_running *rs, const kmg_args *a, cudaStream_t s);
cudaError_t kmg_running_rebuild(const kmg_args *a, const kmg_running *rs, const int32_t *iota,
								void *temp, size_t temp_bytes, cudaStream_t s);
cudaError_t kmg_running_update(const kmg_args *a, const kmg_running *rs, cudaStream_t s);
cudaError_t kmg_running_keep_labels(const kmg_args *a, cudaStream_t s);
int64_t		kmg_running_resum(int64_t n);

#endif							/* KMG_UPDATE_CUH */
