/*
 * assign.cuh
 *	  The assignment family: labels for the rows, the moved count, and in a
 *	  fused pass the whole Lloyd iteration.  dispatch.cu decides which
 *	  kernels run a shape (its table says which and why) and runs passes with
 *	  that plan; the other files of this folder are the kernels.
 *
 *	- narrow.cu, wide.cu, direct.cu: fused passes for small k (filter,
 *	  exact settling, labels and per-block sums in one read of the rows);
 *	  reduce.cu: the wide and direct passes' partials added in block order,
 *	  and the end of the iteration;
 *	- bytes.cu: a fit's iteration on the wide plan's shapes when every value
 *	  is a byte (kept a second time as bytes: integer tensor cores, integer
 *	  sums), then its end kernel (the sums, the means, the decisions);
 *	- filter_gemm.cu (contract: filter_gemm.cuh): the float32 filter for
 *	  larger k, a GEMM fused with a per-row top-2;
 *	- screen.cu: the same filter on tensor cores (float16 or TF32), listing
 *	  per row the few centroids its rounding leaves in the running, and the
 *	  exact settling of those; bounds.cu: in a fit's iterations, the rows
 *	  whose label may change, the only ones the screen then decides;
 *	- exact.cu: the slack test on the filter's top-2, the exact settling of
 *	  the rows it cannot decide, and the exact cost of every row.
 */
#ifndef KMG_ASSIGN_CUH
#define KMG_ASSIGN_CUH

#include "kmg_common.cuh"
#include "assign/filter_gemm.cuh"

/* The kernels a plan runs (dispatch.cu). */
enum
{
	KMG_PATH_FILTER = 0,		/* filter_gemm.cu + exact.cu (sums: update/) */
	KMG_PATH_NARROW = 1,		/* narrow.cu: the iteration in one launch */
	KMG_PATH_WIDE = 2,			/* wide.cu, then reduce.cu */
	KMG_PATH_DIRECT = 3			/* direct.cu, then reduce.cu */
};

/* How the filter path settles the rows its slack test leaves (exact.cu). */
enum
{
	KMG_SETTLE_TILE = 0,		/* kmg_exact_tile_kernel */
	KMG_SETTLE_CHUNK16 = 1,		/* kmg_exact_chunk_kernel<16> */
	KMG_SETTLE_CHUNK4 = 2,		/* kmg_exact_chunk_kernel<4> */
	KMG_SETTLE_CHUNK1 = 3		/* kmg_exact_chunk_kernel<1> */
};

/* The shape of kmg_exact_tile_kernel's block: KMG_XG x (centroids of a tile) threads. */
#define KMG_XG 4				/* row groups */
#define KMG_XRPT 4				/* rows per thread: items of KMG_XG x KMG_XRPT rows */

/* Which screen the filter path runs (plan->screen). */
enum
{
	KMG_SCREEN_FP32 = 0,		/* filter_gemm.cu, then exact.cu's classify */
	KMG_SCREEN_TF32 = 1,		/* screen.cu in TF32 */
	KMG_SCREEN_FP16 = 2			/* screen.cu in float16 where the call keeps the rows' copy */
};

/* Candidates a listed row of the tensor-core screen keeps (a->cids). */
#define KMG_SCREEN_CANDS 8

/* A fused pass's kernel; the narrow and wide passes ignore nstage and groups. */
typedef void (*kmg_fused_fn) (kmg_args a, int mode, int nstage, int groups);

/* What dispatch.cu decided for a shape. */
typedef struct kmg_assign_plan
{
	int			path;			/* KMG_PATH_* */
	int			dp;
	int			sms;			/* the device's multiprocessors */
	/* the fused passes */
	kmg_fused_fn fn;
	int			threads;
	int			kb;				/* centroids of the register tile or loop */
	int			s;				/* lanes per row */
	int			nstage;			/* cp.async stages (direct) */
	int			groups;			/* accumulator copies per block (direct, MODE_ITER) */
	size_t		smem;			/* dynamic shared memory */
	int			nblocks;		/* persistent grid */
	int			bytes;			/* wide: a fit's iterations may run bytes.cu, when its
								 * rows are all bytes (kmg_assign_prepare sets it up) */
	int			overlap;		/* a fit's narrow passes, or bytes.cu's launches,
								 * overlap the kernel before them (compute
								 * capability 9 and above; KMG_OVERLAP=0: not) */
	int			parallel_end;	/* a fit's narrow passes end the iteration before
								 * them in every block (a->parallel_end, narrow.cu;
								 * KMG_PARALLEL_END=0: the last block ends its own) */
	/* the filter path */
	int			ftile;			/* KM_FILTER_TILE_* */
	int			screen;			/* KMG_SCREEN_* */
	int			wgmma;			/* the float16 screen on wgmma (kmg_assign_prepare) */
	int			settle;			/* KMG_SETTLE_* */
	int			xrows;			/* rows per block of kmg_exact_kernel (past xcap) */
} kmg_assign_plan;

/* The plan runs one of the fused passes (else the filter path). */
static inline int
kmg_plan_fused(const kmg_assign_plan *plan)
{
	return plan->path != KMG_PATH_FILTER;
}

/* ---- dispatch.cu ---- */
kmg_assign_plan kmg_assign_make_plan(int64_t n, int d, int dp, int k, int mode,
									 const kmg_device *dev);
kmg_assign_plan kmg_assign_plan_path(int path, int64_t n, int d, int dp, int k, int mode,
									 const kmg_device *dev);
cudaError_t kmg_assign_prepare(kmg_assign_plan *plan, const kmg_device *dev);
cudaError_t kmg_assign_pass(const kmg_args *a, const kmg_assign_plan *plan, int mode,
							void *filter_work, cudaStream_t stream);
cudaError_t kmg_fused_launch(const kmg_args *a, const kmg_assign_plan *plan, int mode,
							 cudaStream_t stream);

/* ---- the fused passes' instances (narrow.cu, wide.cu, direct.cu) ---- */
/*
 * Whether a fit's passes at padded width DP end the iteration before them
 * in every block (kmg_narrow_parallel_end, narrow.cu): at DP <= 16, built
 * for compute capability 9 and above (dispatch.cu also asks it of the
 * device).  The
 * wider instances (one row a thread, 24 or 32 floats of it in registers
 * through the end) spilled up to 228 bytes with the end inline; out of
 * line, its call saved the rows to local memory each pass, which on 1M x 8
 * cost more than the end spares (NOTES, round 28).  Built for sm_80, four
 * of the others spilled (180 bytes at <16, 8, 2>), and it was not measured
 * there.  Those keep the last block's end, and no code of the other.
 */
static __host__ __device__ constexpr bool
kmg_narrow_parallel_end_on(int DP)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
	return false;
#else
	return DP <= 16;
#endif
}

kmg_fused_fn kmg_narrow_instance(int dp, int k, int *threads, int *per_sm, int *kb,
								 size_t *smem);
size_t		kmg_narrow_fix_bytes(int k, int d);
cudaError_t kmg_narrow_exact_setup(kmg_args *a, int *scratch, cudaStream_t s);
kmg_fused_fn kmg_wide_instance(int dp, int k, int *threads, int *per_sm, int *kb,
							   size_t *smem);
kmg_fused_fn kmg_direct_instance(int k, int s, int *threads, int *kb);
size_t		kmg_direct_smem(int kb, int s, int nstage, int groups, int dp, int k);
size_t		kmg_direct_acc_bytes(int dp, int k);

/* ---- bytes.cu: the wide plan's iterations on rows that are all bytes ---- */
#define KMG_BYTES_KMAX 15		/* centroid slot 15 holds ones */
#define KMG_BYTES_DPMAX 800		/* bytes a row (d rounded up to 16): two 128-row tiles fit */
int			kmg_bytes_stride(int d);
size_t		kmg_bytes_smem(int d);
size_t		kmg_bytes_list_len(int64_t n, int nblocks);
size_t		kmg_bytes_end_bytes(int d, int k);
cudaError_t kmg_bytes_rows(const float *X, int64_t n, int d, int dp, uint8_t *Xb,
						   unsigned long long *scratch, int sms, unsigned long long *nbad,
						   double *sumsq, cudaStream_t stream);
cudaError_t kmg_bytes_prepare(int d);
int64_t		kmg_bytes_nmax(int sms);
cudaError_t kmg_bytes_launch(const kmg_args *a, int nblocks, int overlap, cudaStream_t stream);

/* A pass of the screen that decides only the rows a->brow lists, and keeps their bounds. */
static inline __host__ __device__ int
kmg_screen_bounds(const kmg_args &a, int mode)
{
	return a.bounded && mode == KMG_MODE_ITER;
}

/*
 * The tensor-core screen's slack for a row (its own units, S = 1): float16's
 * (km_screen16_slack) where the call keeps the rows' float16 copy, else
 * TF32's (km_screen_slack).  The screen and exact.cu's settling of the
 * rows it lists both take it from here.
 */
static __device__ __forceinline__ float
kmg_screen_slack_of(const kmg_args &a, float xn, float cmax)
{
	return a.Xh != NULL ? km_screen16_slack(a.d, a.dp, xn, cmax, a.xexp, km_screen16_exp(cmax))
		: km_screen_slack(a.d, a.dp, xn, cmax);
}

/* ---- bounds.cu ---- */
cudaError_t kmg_bounds_list(const kmg_args *a, int sms, cudaStream_t stream);

/* ---- screen.cu ---- */
cudaError_t kmg_screen(const kmg_args *a, int mode, const kmg_assign_plan *plan, cudaStream_t stream);
int			kmg_screen_wgmma_usable(int dp, const kmg_device *dev);
size_t		kmg_screen_work_bytes(int k, int dp);
size_t		kmg_screen_tail_bytes(void);
/*
 * The far centroids' test: at most KMG_FAR_C of them (a tile), for k >=
 * KMG_FAR_MIN_K on the mma.sync screen, k >= KMG_FAR_MIN_K_WG on the wgmma one.
 */
#define KMG_FAR_C 128
#define KMG_FAR_MIN_K 2048
#define KMG_FAR_MIN_K_WG 1024	/* on the wgmma screen (its far test only where it pays: kmg_bounds_far_now) */
int			kmg_screen_far_on(int k, int wgmma);
cudaError_t kmg_screen_far(const kmg_args *a, int sms, cudaStream_t stream);
int			kmg_screen_tail_tickets(void);
size_t		kmg_screen_rows16_bytes(int64_t n, int dp);
cudaError_t kmg_screen_rows16(const float *X, int64_t n, int dp, float xabsmax, int wgmma,
							  unsigned short *Xh, int *xexp, int sms, cudaStream_t stream);
int			kmg_screen_cap(int64_t n);

/* ---- reduce.cu ---- */
cudaError_t kmg_reduce_finalize(const kmg_args *a, cudaStream_t stream);

/* ---- exact.cu ---- */
cudaError_t kmg_classify(const kmg_args *a, int mode, cudaStream_t stream);
cudaError_t kmg_exact_refine(const kmg_args *a, const kmg_assign_plan *plan, int mode,
							 cudaStream_t stream);
int			kmg_exact_cap(int64_t n);
int			kmg_scratch_rows(int64_t n, int share);
cudaError_t kmg_row_costs(const kmg_args *a, cudaStream_t stream);

#endif							/* KMG_ASSIGN_CUH */
