/*
 * kmg_common.cuh
 *	  What every file of the CUDA engine shares: the arguments every kernel
 *	  of a call takes (kmg_args), the run's control block and per-iteration
 *	  statistics, the modes of a pass, and the device's limits.  Private to
 *	  kernels/.
 *
 * The engine, from the bottom; each folder's header declares what it gives
 * the folders above it:
 *	- include/kmg_device.cuh: the device helpers every kernel shares;
 *	- prep/: one pass over the rows before seeding (hashes, the cosine copy,
 *	  norms, statistics);
 *	- assign/: labels.  dispatch.cu decides, for a shape, between the fused
 *	  small-k passes (narrow.cu, wide.cu, direct.cu, with reduce.cu) and the
 *	  GEMM filter (filter_gemm.cu) with the exact settling of its close calls
 *	  (exact.cu);
 *	- update/: the M step (rows sorted by label, per-cluster sums, the
 *	  centroid update and the decisions that end an iteration, re-seeding of
 *	  empty clusters);
 *	- seed/: random and k-means++ initial centroids;
 *	- driver/: rows on the device (dataset.cu), the memory of a call
 *	  (workspace.cu), the drivers of a fit (fit.cu) and of assign and map
 *	  (labels.cu), and the km_gpu_api table with error handling (api.cu).
 * Kernel families return a cudaError_t and know nothing of km_error or
 * hooks; the drivers turn their errors into a km_error.
 *
 * Rows live on the device as n x dp floats (dp = d rounded up to
 * KM_FILTER_DPAD, zero padding), so that the GEMM filter, the fused small-k
 * passes and the exact distance all read the same copy.  For l2 that copy is
 * the raw rows; for cosine a normalised copy (km_normalize_row).  Everything
 * that decides a result is computed in a fixed order or exactly: 128-bit
 * fixed-point sums added with integer atomics, or doubles added with atomics
 * only where no addition can round (the levels of km_xsum.h: the split fits'
 * sums, update/xsums.cu, and a bounded fit's running sums, update/running.cu),
 * so a fit is bit-identical from run to run.
 */
#ifndef KMG_COMMON_CUH
#define KMG_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_engine.h"
#include "kmeans_gpu_cuda.h"
#include "km_exact.h"
#include "km_fixsum.h"
#include "km_hash.h"
#include "assign/filter_gemm.cuh"

/* Threads of the row kernels. */
#define KMG_NT 256

/* Rows per piece of a cluster's sum (update/), centroids per exact chunk (assign/exact.cu). */
#define KMG_PIECE 256
#define KMG_XCHUNK 256

/*
 * Columns of a per-cluster accumulator row: dp sums, then w, count, est (or
 * cost), and one spare: the pieces of update/ keep the order-free cost sum
 * (km_fixsum.h) as two words in the last two.
 */
#define KMG_CW(dp) ((dp) + 4)

/* Round x up to a multiple of m. */
#define KMG_ROUND_UP(x, m) ((((x) + (m) - 1) / (m)) * (m))

/*
 * Blocks for a grid-stride launch that would like `want`: at most per_sm for
 * each of 132 multiprocessors (an H100's or H200's; more blocks would only
 * queue, and a device with fewer runs the same blocks in turns), at least one.
 */
static inline unsigned
kmg_stride_grid(int64_t want, int per_sm)
{
	const int64_t cap = (int64_t) 132 * per_sm;

	return (unsigned) (want < 1 ? 1 : want > cap ? cap : want);
}

/* Whether the environment variable name is "0" (a development switch turned off). */
static inline int
kmg_env_off(const char *name)
{
	const char *env = getenv(name);

	return env != NULL && strcmp(env, "0") == 0;
}

/* KMG_VERBOSE=1: the drivers' plans, graphs and batches on stderr. */
static inline int
kmg_verbose(void)
{
	const char *env = getenv("KMG_VERBOSE");

	return env != NULL && env[0] == '1';
}

/* ctl->stop: why the queued iterations have stopped doing work. */
enum
{
	KMG_RUN = 0,
	KMG_STOP_SETTLED = 1,		/* no row moved: converged */
	KMG_STOP_TOL = 2,			/* moved / n <= tol: converged */
	KMG_STOP_MAXITER = 3,		/* max_iter reached */
	KMG_PAUSE_EMPTY = 4			/* empty clusters: the host re-seeds */
};

/*
 * The device-side control block of one Lloyd run.  Kernels of queued
 * iterations read stop first and return at once when it is set, so the host
 * can queue iterations ahead without knowing when the run converges.  Only
 * the last block of the finalize kernel writes stop, iter and the counters'
 * resets, so no block ever sees a value written during its own launch.
 */
typedef struct kmg_ctl
{
	int			stop;
	int			iter;			/* Lloyd iterations completed */
	int			moved;			/* rows whose label changed, this iteration */
	int			nempty;			/* clusters without weight, this iteration */
	int			namb;			/* ambiguous rows listed (filter path) */
	int			ncand;			/* rows listed with their candidates (tensor-core screen) */
	int			relocated;		/* clusters re-seeded, this iteration */
	int			all_exact;		/* degenerate centroids: settle every row exactly */
	int			max_iter;
	unsigned int ticket;		/* last-block detection of finalize */
	float		cmax;			/* max_j |c'_j| of the current centroids */
	unsigned int ticket2;		/* last-block detection of the fused passes */
	int			pieces;			/* byte pass: 1 + iter when the end of iteration iter built its
								 * centroids' pieces (assign/bytes.cu), else 0 */
	/*
	 * The narrow pass's parallel end (a.parallel_end, assign/narrow.cu):
	 * blocks of its passes begun since the run began or was re-seeded (a
	 * block's pass is started / blocks), and the iterations ended before
	 * then.  Zero at a run's start; a re-seed's end sets them.
	 */
	unsigned int started;
	int			iter0;
	double		tol;
} kmg_ctl;

/*
 * The bounds' per-iteration state (assign/bounds.cu): the largest drift of
 * a centroid, the centroid that has it, the second largest; the rows
 * listed for the screen; the drift kernel's last-block ticket.
 */
typedef struct kmg_bstate
{
	float		dmax1;
	float		dmax2;
	int			jmax;
	int			nlist;
	unsigned int ticket;
	/*
	 * The far centroids (with a->frow): the nfc centroids whose drift
	 * exceeds tau, every other centroid's drift at most tau; the rows
	 * listed for their test (a->frow, nfar of them).
	 */
	float		tau;
	int			nfc;
	int			nfar;
	int			faron;			/* this iteration runs the far test (bounds.cu, kmg_bounds_far_now) */
} kmg_bstate;

/* Statistics of one finished iteration, read back between batches. */
typedef struct kmg_stat
{
	double		moved_frac;
	double		inertia;		/* estimate: sum w (fbest + |x|^2) */
	int			moved;
	int			relocated;
	int			ambiguous;		/* rows settled exactly against every centroid */
	int			candidates;		/* rows settled exactly against the screen's few candidates */
	int			screened;		/* rows the screen decided (bounds: the rest kept their label); -1: all */
	int			stop;
} kmg_stat;

/*
 * Everything the kernels of a fit, assign or map need, passed by value.
 * Pointers that a mode does not use may be NULL.
 */
typedef struct kmg_args
{
	/* rows */
	const float *X;				/* n x dp: l2 raw rows, cosine normalised rows */
	const float *W;				/* n weights, or NULL for 1 */
	const float *xnorm;			/* n: |x'| of the filter rows, float */
	const float *mu;			/* dp: l2 centring (x' = fl(x - mu)), or NULL */
	int64_t		n;
	int			d;
	int			dp;
	int			cosine;
	int			lloyd;			/* kernels honour ctl->stop */

	/* centroids */
	int			k;
	int			kp;				/* km_filter_kpad(k) */
	float	   *C;				/* kp x dp: the centroids (exact costs use these) */
	float	   *Cf;				/* kp x dp: filter copy (l2: == C, or fl(C - mu) when
								 * centred; cosine: normalised) */
	float	   *cn;				/* kp: |Cf_j|^2, +INF past k */
	float	   *cnf;			/* k: |Cf_j| */
	double	   *cnorm;			/* k: km_exact_norm(C_j) (cosine); l2 without
								 * centring: |C_j|^2 in double (assign/bytes.cu) */

	/* per row */
	int32_t    *labels;
	int32_t    *best;			/* filter output (km_filter_top2) */
	float	   *fbest;
	float	   *fsecond;
	double	   *cost;			/* exact cost to the label */
	int32_t    *amb;			/* ambiguous rows (filter path) */
	int32_t    *skeys;			/* labels, sorted */
	int32_t    *svals;			/* the rows, in label order */

	/* sums by label: fixed pieces of the sorted rows (update/) */
	int2	   *bounds;			/* k: [start, end) of each label in skeys */
	int4	   *ptab;			/* maxpieces: cluster, start, end */
	int2	   *pclus;			/* k: first piece, pieces */
	int		   *npieces;		/* pieces in use */
	int		   *pdone;			/* k: pieces of the cluster summed (zeroed by the
								 * pieces kernel), or NULL: kmg_combine_kernel */
	double	   *ppart;			/* maxpieces x KMG_CW(dp) */
	int			maxpieces;

	/* exact settling of ambiguous rows in centroid chunks (assign/exact.cu) */
	const float *fwork;			/* the filter's prepared operand (assign/filter_gemm.cuh) */
	int			fbn;			/* its centroids per tile = the chunk */
	double	   *xcost;			/* xcap x xchunks */
	int32_t    *xidx;
	int			xcap;			/* ambiguous rows the chunked path takes */
	int			xchunks;		/* ceil(k / fbn) */

	/*
	 * The tensor-core screen (assign/screen.cu), when the plan runs it in
	 * place of the float32 filter: its operand (sop), rows whose few
	 * candidates it lists (crow), their candidates (cids: KMG_SCREEN_CANDS a row, -1 past the
	 * last), room for ccap rows.  screen: the settling's slack is the
	 * screen's (km_screen_slack, or km_screen16_slack with Xh) on top of the
	 * float32 filter's.  Xh: the rows in float16, scaled by 2^(14 - xexp)
	 * (kmg_screen_rows16), when the call keeps that copy: the screen then
	 * runs in float16, else in TF32; xhwg: Xh is laid out for the wgmma
	 * kernel, which then screens.
	 */
	int			screen;
	float	   *sop;			/* its centroid operand (kmg_screen_work_bytes) */
	const unsigned short *Xh;	/* n x dp float16 bits, or NULL */
	int			xexp;
	int			xhwg;

	/*
	 * Bounds that skip the rows whose label cannot change (assign/bounds.cu):
	 * in a fit's iterations with the tensor-core screen (l2), an upper bound
	 * on each row's distance to its centroid (ub) and a lower bound on its
	 * distance to every other (lb), floats rounded outwards; the centroids
	 * of the last assignment (Cprev, kp x dp) and how far each moved since
	 * (drift); the rows the screen must decide (brow, bs->nlist of them)
	 * and, where the iterations keep running sums (update/running.cu), the
	 * label each of them had before (bold, else NULL; every row's without
	 * bounds).  bounded: the iterations use them.  rs_resum: the moved rows
	 * past which the running sums' update sums every row afresh instead.
	 */
	int			bounded;
	float	   *ub;
	float	   *lb;
	float	   *Cprev;
	float	   *drift;
	int32_t    *brow;
	int32_t    *bold;
	int64_t		rs_resum;
	struct kmg_bstate *bs;
	/*
	 * With bounds, the mma.sync screen's last row blocks split by centroid
	 * tiles (screen.cu, kmg_screen_kernel): their parts' lists (stail) and a
	 * ticket per split row block (stick, zero between passes).
	 */
	float	   *stail;
	int		   *stick;
	/*
	 * The far centroids' test (bounds.cu, screen.cu's kmg_screen_far), or
	 * NULL: the rows it takes (frow), the far centroids (farc, KMG_FAR_C
	 * of them at most) and their screen operand (fsop).
	 */
	int32_t    *frow;
	int32_t    *farc;
	float	   *fsop;
	int32_t    *crow;
	int32_t    *cids;
	int			ccap;

	/* per cluster */
	double	   *clus;			/* k x KMG_CW(dp): sum w x, w, count, est/cost */
	int		   *reloc;			/* k: re-seeded this iteration (keeps its row) */
	int32_t    *empties;		/* k: scratch list of empty clusters */
	double	   *part;			/* nblocks x k x KMG_CW(dp): direct-path partials */
	int		   *part_moved;		/* nblocks */
	int			nblocks;

	/* the wide fused pass: ambiguous rows per block, in row order */
	int32_t    *wrow;			/* n: block b lists from its first row's slot */
	uint32_t   *wmask;			/* n: candidate centroids of each listed row */
	int		   *wcount;			/* nblocks */

	/*
	 * The rows as bytes (assign/bytes.cu), set for a fit whose rows are all
	 * integers in 0..255, unweighted l2, on the wide plan with k <= 15:
	 * Xb n x xbs bytes (zeros past d), xbsq = sum |x|^2 over the rows
	 * (exact), xblist its blocks' close calls (kmg_bytes_list_len slots);
	 * its blocks' partial sums go to part; xbend: the end of its
	 * iterations' room (kmg_bytes_end_bytes).  Xb NULL: the iterations run
	 * on the floats.
	 */
	const uint8_t *Xb;
	int			xbs;
	double		xbsq;
	int32_t    *xblist;
	uint8_t    *xbend;

	/* the order-free inertia of the final pass (km_fixsum.h); UNSET: double sums */
	int			ishift;

	/*
	 * The narrow pass adds its blocks' double partials as 128-bit fixed-point
	 * integers (order-free): nfix holds three sets of (lo, hi) words for k x
	 * (d sums, w) cells, then k counts (lo only), then the pass's moved and
	 * exactly settled rows (two ints in one word); sshift / wshift scale the
	 * sums and the weights (km_fix_scale of a bound on |sum w x| and on sum w).
	 */
	unsigned long long *nfix;
	int			sshift;
	int			wshift;
	/*
	 * Exact sums in the narrow pass (narrow.cu, the instances that sum on
	 * the tensor cores; a fit of fewer than 2^30 unweighted rows whose
	 * values fit a 128-bit total, kmg_narrow_exact_setup): nxs 1, and each
	 * (cluster, column) cell of nfix holds the exact sum as integer limbs
	 * in units of 2^nxs_e0 (the weight cell: the count), which the
	 * parallel end keeps from pass to pass, moved only by the rows whose
	 * label changed.  0: the double partials above.
	 */
	int			nxs;
	int			nxs_e0;
	/*
	 * A fit's narrow passes end the iteration before them in parallel: each
	 * block of pass p decodes pass p - 1's accumulators and takes the means
	 * itself, and pass p's sums go to set p mod 3 of nfix (narrow.cu says
	 * how); 0: the pass's last block ends its own iteration.
	 */
	int			parallel_end;

	kmg_ctl    *ctl;
	kmg_stat   *stats;			/* max_iter entries */
} kmg_args;

/* What a finalize launch does. */
enum
{
	KMG_FIN_ITER = 0,			/* end of an iteration: decide, move centroids */
	KMG_FIN_RESEED = 1,			/* the same after the host re-seeded empties */
	KMG_FIN_SETUP = 2			/* only the centroids' norms and filter copy */
};

/* What a pass over rows computes. */
enum
{
	KMG_MODE_ITER = 0,			/* labels, moved, sums (Lloyd iteration) */
	KMG_MODE_LABELS = 1			/* labels only (final pass, assign, map) */
};

/*
 * The device's limits, queried when CUDA starts (driver/api.cu); the
 * dispatch (assign/dispatch.cu) sizes grids and shared memory from them.
 */
typedef struct kmg_device
{
	int			ordinal;
	int			sms;			/* multiprocessors */
	size_t		smem_optin;		/* dynamic shared memory a block may ask for */
	size_t		smem_per_sm;	/* shared memory of a multiprocessor */
	size_t		smem_reserved;	/* of which the hardware keeps per block */
	int			cc_major;
	int			cc_minor;
	size_t		max_window;		/* largest L2 access-policy window, bytes (0: none) */
} kmg_device;

#endif							/* KMG_COMMON_CUH */
