/*
 * gpu_internal.cuh
 *	  What the files of the CUDA engine share (private to kernels/).
 *
 * Layers, from the bottom:
 *	- kernel families, one per file (prep.cu, assign_direct.cu,
 *	  assign_narrow.cu, assign_wide.cu, assign_exact.cu, update.cu, seed.cu;
 *	  finalize_block.cuh for the iteration's end in one block): kernels and
 *	  launchers that return a cudaError_t and know nothing of km_error or
 *	  hooks;
 *	- gpu_dataset.cu: rows on the device (streaming upload);
 *	- gpu_fit.cu: the drivers (Lloyd with n_init, assign, map);
 *	- gpu_api.cu: the km_gpu_api table, lazy CUDA start, error mapping and
 *	  the sticky "device is broken" state.
 *
 * Rows live on the device as n x dp floats (dp = d rounded up to
 * KM_FILTER_DPAD, zero padding), so that the GEMM filter, the fused small-k
 * kernel and the exact distance all read the same copy.  For l2 that copy is
 * the raw rows; for cosine a normalised copy (km_normalize_row).  Everything
 * that decides a result is computed in a fixed order or in exact integer
 * arithmetic (128-bit fixed-point sums added with integer atomics): no
 * floating-point atomics anywhere, so a fit is bit-identical from run to run.
 */
#ifndef KM_GPU_INTERNAL_CUH
#define KM_GPU_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kmeans_engine.h"
#include "kmeans_gpu_cuda.h"
#include "km_exact.h"
#include "km_fixsum.h"
#include "km_hash.h"
#include "assign/filter_gemm.cuh"

/* Threads of the row kernels. */
#define KMG_NT 256

/* Rows per piece of a cluster's sum (update.cu), centroids per exact chunk. */
#define KMG_PIECE 256
#define KMG_XCHUNK 256

/* Largest k the fused small-k kernel handles (its register tile). */
#define KMG_DIRECT_KMAX 32

/* k-means++ candidates per step: 2 + ln k < 24 for any int k. */
#define KMG_PP_LMAX 24

/*
 * Columns of a per-cluster accumulator row: dp sums, then w, count, est (or
 * cost), and one spare: the pieces of update.cu keep the order-free cost sum
 * (km_fixsum.h) as two words in the last two.
 */
#define KMG_CW(dp) ((dp) + 4)

/* Round x up to a multiple of m. */
#define KMG_ROUND_UP(x, m) ((((x) + (m) - 1) / (m)) * (m))

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
	int			relocated;		/* clusters re-seeded, this iteration */
	int			all_exact;		/* degenerate centroids: settle every row exactly */
	int			max_iter;
	unsigned int ticket;		/* last-block detection of finalize */
	float		cmax;			/* max_j |c'_j| of the current centroids */
	unsigned int ticket2;		/* last-block detection of the fused passes */
	double		tol;
} kmg_ctl;

/* Statistics of one finished iteration, read back between batches. */
typedef struct kmg_stat
{
	double		moved_frac;
	double		inertia;		/* estimate: sum w (fbest + |x|^2) */
	int			moved;
	int			relocated;
	int			ambiguous;		/* rows settled exactly */
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
	double	   *cnorm;			/* k: km_exact_norm(C_j) (cosine) */

	/* per row */
	int32_t    *labels;
	int32_t    *best;			/* filter output (km_filter_top2) */
	float	   *fbest;
	float	   *fsecond;
	double	   *cost;			/* exact cost to the label */
	int32_t    *amb;			/* ambiguous rows (filter path) */
	int32_t    *skeys;			/* labels, sorted */
	int32_t    *svals;			/* the rows, in label order */

	/* sums by label: fixed pieces of the sorted rows (update.cu) */
	int2	   *bounds;			/* k: [start, end) of each label in skeys */
	int4	   *ptab;			/* maxpieces: cluster, start, end */
	int2	   *pclus;			/* k: first piece, pieces */
	int		   *npieces;		/* pieces in use */
	int		   *pdone;			/* k: pieces of the cluster summed (zeroed by the
								 * pieces kernel), or NULL: kmg_combine_kernel */
	double	   *ppart;			/* maxpieces x KMG_CW(dp) */
	int			maxpieces;

	/* exact settling of ambiguous rows in centroid chunks (assign_exact.cu) */
	const float *fwork;			/* the filter's prepared operand (assign_gemm.cuh) */
	int			fbn;			/* its centroids per tile = the chunk */
	double	   *xcost;			/* xcap x xchunks */
	int32_t    *xidx;
	int			xcap;			/* ambiguous rows the chunked path takes */
	int			xchunks;		/* ceil(k / fbn) */

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

	/* the order-free inertia of the final pass (km_fixsum.h); UNSET: double sums */
	int			ishift;

	/*
	 * The narrow pass adds its blocks' double partials as 128-bit fixed-point
	 * integers (order-free): nfix holds (lo, hi) words for k x (d sums, w)
	 * cells, then k counts (lo only); sshift / wshift scale the sums and the
	 * weights (km_fix_scale of a bound on |sum w x| and on sum w).
	 */
	unsigned long long *nfix;
	int			sshift;
	int			wshift;

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

/* ---- prep.cu ---- */
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

/* ---- assign_direct.cu ---- */
/* Which fused pass a plan runs. */
enum
{
	KMG_PLAN_DIRECT = 0,		/* kmg_direct_kernel (assign_direct.cu) */
	KMG_PLAN_NARROW = 1,		/* kmg_narrow_kernel: dp <= 32 (assign_narrow.cu) */
	KMG_PLAN_WIDE = 2			/* kmg_wide_kernel: 128 < dp, small k (assign_wide.cu) */
};

typedef struct kmg_direct_plan
{
	int			ok;				/* the fused kernel can run this shape */
	int			kind;			/* KMG_PLAN_* */
	int			dp;
	int			kb;				/* register tile: 4, 8, 16 or 32 centroids */
	int			s;				/* lanes per row */
	int			nstage;			/* cp.async stages */
	int			groups;			/* accumulator copies per block */
	size_t		smem;			/* dynamic shared memory */
	int			nblocks;		/* persistent grid */
} kmg_direct_plan;

kmg_direct_plan kmg_direct_make_plan(int64_t n, int d, int dp, int k, int mode,
									 int sms, size_t smem_optin);
cudaError_t kmg_direct_prepare(kmg_direct_plan *plan, int sms);
cudaError_t kmg_direct_assign(const kmg_args *a, const kmg_direct_plan *plan, int mode,
							  cudaStream_t stream);
cudaError_t kmg_reduce_finalize(const kmg_args *a, cudaStream_t stream);

/* ---- assign_narrow.cu: the fused pass for dp <= 32 ---- */
kmg_direct_plan kmg_narrow_make_plan(int64_t n, int dp, int k, int sms, size_t smem_optin);
size_t		kmg_narrow_fix_bytes(int k, int d);
cudaError_t kmg_narrow_prepare(kmg_direct_plan *plan, int sms);
cudaError_t kmg_narrow_assign(const kmg_args *a, const kmg_direct_plan *plan, int mode,
							  cudaStream_t stream);

/* ---- assign_wide.cu: the fused pass for large dp and small k ---- */
kmg_direct_plan kmg_wide_make_plan(int64_t n, int dp, int k, int sms, size_t smem_optin);
cudaError_t kmg_wide_prepare(kmg_direct_plan *plan, int sms);
cudaError_t kmg_wide_assign(const kmg_args *a, const kmg_direct_plan *plan, int mode,
							cudaStream_t stream);

/* Any fused plan: the kind for a shape, its set-up and one pass. */
kmg_direct_plan kmg_fused_make_plan(int64_t n, int d, int dp, int k, int mode, int sms,
									size_t smem_optin);
cudaError_t kmg_fused_prepare(kmg_direct_plan *plan, int sms);
cudaError_t kmg_fused_pass(const kmg_args *a, const kmg_direct_plan *plan, int mode,
						   cudaStream_t stream);

/* Up to this k, one block finalizes an iteration (finalize_block.cuh). */
#define KMG_FIN1_KMAX 64

/* ---- assign_exact.cu ---- */
cudaError_t kmg_classify(const kmg_args *a, int mode, cudaStream_t stream);
cudaError_t kmg_exact_refine(const kmg_args *a, int mode, int sms, cudaStream_t stream);
int			kmg_exact_cap(int64_t n);
cudaError_t kmg_row_costs(const kmg_args *a, cudaStream_t stream);

/* ---- update.cu ---- */
size_t		kmg_sort_temp_bytes(int64_t n, int k);
cudaError_t kmg_sort_labels(const kmg_args *a, const int32_t *iota, void *temp,
							size_t temp_bytes, cudaStream_t stream);
cudaError_t kmg_sort_costs_desc(const double *cost, double *keys_out, const int32_t *iota,
								int32_t *rows_out, int64_t n, void *temp,
								size_t temp_bytes, cudaStream_t stream);
cudaError_t kmg_sort_keys_asc(const double *keys, double *keys_out, const int32_t *iota,
							  int32_t *rows_out, int64_t n, void *temp, size_t temp_bytes,
							  cudaStream_t stream);
cudaError_t kmg_segment(const kmg_args *a, int mode, int with_sums, cudaStream_t stream);
int			kmg_max_pieces(int64_t n, int k);
cudaError_t kmg_finalize(const kmg_args *a, int mode, cudaStream_t stream);
cudaError_t kmg_reseed(const kmg_args *a, const int32_t *far_rows, cudaStream_t stream);

/* ---- seed.cu ---- */

/*
 * k-means++ on the device (seed.cu): a step is one launch of the "unit"
 * kernel, which reads the state the previous unit left, does one pass over
 * the rows and, in its last block, decides the next state.  The host only
 * queues units (captured in graphs) and reads this header between batches.
 */
typedef struct kmg_pp_head
{
	int			s;				/* centroid being chosen; >= k: done */
	int			phase;			/* KMG_PP_SELECT or KMG_PP_EVAL */
	int			units;			/* units that did work */
	int			selects;		/* SELECT units past the first (threshold misses) */
	int			filtered;		/* units that ran the int8 filter */
	int			dense;			/* units that ran every distance */
	unsigned int pairs_lo;		/* exact distances of the filtered units (low word) */
	int			pad;
} kmg_pp_head;

enum
{
	KMG_PP_SELECT = 0,			/* draw the candidates of step s from scratch */
	KMG_PP_EVAL = 1				/* evaluate the candidates of step s */
};

/* Widest int8 shadow row (bytes) the filter takes; wider rows run dense. */
#define KMG_PP_QMAX 256

typedef struct kmg_seed_bufs
{
	uint64_t   *hashes;			/* n */
	float	   *d2;				/* n: D2 of each row */
	signed char *q8;			/* n x dq: the int8 shadow (filter), or NULL */
	int		   *qn;				/* n: |q|^2 */
	float	   *qr;				/* n: bound on the quantisation error of the row */
	double	   *lkey;			/* L x KMG_PP_CAP keys of the next step, per candidate */
	int		   *lrow;
	void	   *part;			/* per-block selections (SELECT units) */
	void	   *state;			/* kmg_pp_state (its head first) */
	void	   *acc;			/* kmg_pp_acc: what the blocks of a unit add up */
	int			nblocks;		/* capacity of part */
	int			grid;			/* blocks of a unit (kmg_pp_prepare) */
	int			lb;				/* candidate tile of the unit kernel */
	size_t		smem;
	int			dq;				/* shadow row bytes; 0: no filter */
	int			L;
} kmg_seed_bufs;

size_t		kmg_pp_fixed_bytes(int nblocks, int L);
int			kmg_pp_dq(int dp);
void		kmg_pp_carve(kmg_seed_bufs *sb, char *base, int nblocks, int L);
cudaError_t kmg_pp_prepare(kmg_seed_bufs *sb, int dp, int sms);
cudaError_t kmg_pp_begin(const kmg_args *a, const kmg_seed_bufs *sb, uint64_t seed, int run,
						 int shift, cudaStream_t stream);
cudaError_t kmg_pp_units(const kmg_args *a, const kmg_seed_bufs *sb, int count,
						 cudaStream_t stream);
cudaError_t kmg_seed_random_keys(const kmg_args *a, const uint64_t *hashes, uint64_t stream_key,
								 double *keys, cudaStream_t stream);
cudaError_t kmg_take_rows(const kmg_args *a, const int32_t *rows, int count, int c0,
						  cudaStream_t stream);

/* ---- gpu_api.cu: state, errors, host memory ---- */
typedef struct kmg_device
{
	int			ordinal;
	int			sms;
	size_t		smem_optin;		/* dynamic shared memory a block may ask for */
	int			cc_major;
	int			cc_minor;
} kmg_device;

/* Every API entry: refuse after a sticky error, start CUDA lazily. */
km_status	kmg_begin(km_error *err);
const kmg_device *kmg_dev(void);

/* Fill err from a failed CUDA call (sticky errors mark the device broken). */
km_status	kmg_cuda_error(km_error *err, cudaError_t e, const char *what);
km_status	kmg_set_error(km_error *err, km_status status, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* Host memory through the caller's hooks when given. */
void	   *kmg_host_alloc(const km_hooks *hooks, size_t size);
void		kmg_host_free(const km_hooks *hooks, void *p);

/* Checks a CUDA call inside a driver with a km_status st and a done: label. */
#define KMG_CK(call) \
	do { \
		cudaError_t kmg_e_ = (call); \
		if (kmg_e_ != cudaSuccess) \
		{ \
			st = kmg_cuda_error(err, kmg_e_, #call); \
			goto done; \
		} \
	} while (0)

/* ---- gpu_dataset.cu ---- */
km_gpu_dataset *kmg_ds_create(int d, int weighted, int64_t expected_rows, int internal,
							  km_error *err);
float	   *kmg_ds_stage(km_gpu_dataset *ds, int64_t *room, float **weights, km_error *err);
km_status	kmg_ds_commit(km_gpu_dataset *ds, int64_t rows, km_error *err);
km_status	kmg_ds_sync(km_gpu_dataset *ds, km_error *err);
km_status	kmg_ds_load(km_gpu_dataset *ds, const km_data *data, int64_t row0, int64_t rows,
						km_error *err);
void		kmg_ds_reset(km_gpu_dataset *ds);
void		kmg_ds_free(km_gpu_dataset *ds);
void		kmg_ds_free_all(void);
int64_t		kmg_ds_rows(const km_gpu_dataset *ds);
uint64_t	kmg_ds_bytes(int64_t rows, int d, int weighted);

/* Rows on the device as the drivers see them. */
typedef struct kmg_rows
{
	float	   *X;				/* n x dp raw rows */
	const float *W;
	int64_t		n;
	int			d;
	int			dp;
	int			in_place;		/* cosine may normalise X itself */
} kmg_rows;
void		kmg_ds_rows_view(km_gpu_dataset *ds, kmg_rows *rows);

/* ---- gpu_fit.cu ---- */
uint64_t	kmg_fit_bytes(int64_t n, int d, int k, km_metric metric, int copy_rows);
uint64_t	kmg_assign_bytes(int64_t batch_rows, int d, int k);
km_status	kmg_fit_rows(const kmg_rows *rows, const km_params *params, const km_hooks *hooks,
						 km_result *result, km_error *err);
km_status	kmg_assign_rows(const kmg_rows *rows, const float *centroids, int k,
							km_metric metric, int32_t *labels, double *distances,
							km_partial *partial, const km_hooks *hooks, km_error *err);

#endif							/* KM_GPU_INTERNAL_CUH */
