/*
 * dispatch.cu
 *	  Which kernels assign the rows of a shape, and why: the one place that
 *	  decides, for (n, dp, k) and the device, the plan the drivers run.
 *
 * The table (dp = d rounded up to 8; the first row that fits wins):
 *
 *	shape				kernels							why
 *	-----------------	-----------------------------	-----------------------------
 *	dp <= 32,			narrow.cu (KB 4/8/16/32,		rows this short make a pass
 *	k <= 32				rows per thread 4/2/1 by dp),	memory-bound and latency-
 *						2 blocks an SM; the			bound: R rows per thread in
 *						iteration in one launch		registers, sums and the end of
 *													the iteration in the same
 *													launch.  32: a row's floats in
 *													one thread; labels as lanes.
 *	128 < dp <= 1016,	wide.cu (KB 4/8/10/12/16),		memory-bound (Fashion-MNIST:
 *	k <= 16				2 blocks an SM, then			220 MB a pass): 8 lanes a row,
 *						reduce.cu						loads in flight; 1016: thread t
 *													owns column chunk t, one more
 *													the weights (256 threads); 16:
 *													its per-cluster arrays.
 *	  the same, a fit's	bytes.cu in the iterations,		every value an integer in 0..255
 *	  iterations, l2,	when kmg_rows_setup finds		(images): a quarter of the
 *	  unweighted, k <=	every value a byte; the			bytes, dots on the integer
 *	  15, d <= 800		labels-only passes stay on		tensor cores (compute capability
 *						wide.cu							9.0 on), integer sums; 800: two
 *													128-row tiles in shared memory;
 *													15: the 16th slot holds ones.
 *	k <= 32 (other dp)	direct.cu (KB 4/8/12/16/24/32;	the centroids fit a register
 *						S = 1, 4, 32 lanes a row for	tile and shared memory; S so
 *						dp <= 32, <= 128, larger),		that each lane owns several
 *						then reduce.cu					16-byte chunks of a row.
 *	otherwise			filter_gemm.cu (128-column		k > 32 is a GEMM: the FP32 pipe
 *						tile for k <= 128, else 256),	is the bound; the 256-wide
 *						exact.cu (classify, then the	tile leaves most warps idle
 *						settling kernel below),			below 128 centroids (NOTES.md,
 *						update/ (sort, sums, finalize)	"Filter GEMM").
 *						On compute capability 8.0 on,	tensor cores: the iteration is
 *						screen.cu in place of			1.5 to 2.4 times faster in TF32
 *						filter_gemm.cu and classify		(README, "Tensor-core screen"),
 *						(kmg_plan_screen): float16		labels unchanged (km_screen_slack,
 *						with a float16 copy of the		km_screen16_slack); float16 has
 *						rows, else TF32					TF32's precision, twice its rate
 *														and half its bytes.
 *
 * Limits each fused row checks against the device (queried at start,
 * kmg_device; estimates for an H100/H200 when there is none):
 *	- a block's dynamic shared memory <= smem_optin (227 KB on sm_90, 163 KB
 *	  on sm_80), else the next row of the table;
 *	- direct.cu: accumulator copies (one per dp threads, so that no two
 *	  threads add into the same cell) only while they take at most 96 KB,
 *	  then the most cp.async stages (4 down to 2) that still fit; the grid is
 *	  the blocks an SM holds by shared memory (smem_per_sm / (smem + the
 *	  1 KB the hardware reserves per block), at most 4), times the SMs;
 *	- narrow.cu and wide.cu: 2 blocks an SM, their launch bounds;
 *	- every fused grid is capped by the occupancy calculator once the
 *	  kernel's shared memory limit is raised (kmg_assign_prepare), and is
 *	  never more blocks than rows (tiles of rows for direct.cu).
 *
 * The settling of the filter path's close calls (exact.cu): rows past
 * kmg_exact_cap(n) (degenerate inputs) go to kmg_exact_kernel, 8 rows a
 * block when dp <= 2048 (their floats in shared memory), else 1; the others
 * by items of (rows, one tile of the filter's operand):
 *	dp <= 1024 and at most 8 tiles (k <= 2048)	the tile kernel (KMG_XG x 256
 *												threads): one chain's latency
 *												an item; with more items per SM
 *												it lost to the chunk kernel (999
 *												against 656 us at 300000 x 408
 *												x 5000, NOTES.md round 4)
 *	dp <= 1024, 4096, larger					the chunk kernel, 16, 4, 1 rows
 *												an item (their floats in shared
 *												memory)
 *
 * Decided elsewhere, for every plan: the iteration's end runs in one block
 * for k <= KMG_FIN1_KMAX (update/finalize.cu), which every fused plan meets
 * (its reduction ends the iteration itself); the sort by label is a
 * counting sort for k <= 8192 (update/sort.cu).
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"
#include "update/update.cuh"

#include <stdlib.h>
#include <string.h>

/* The fused rows of the table. */
#define KMG_NARROW_DPMAX 32
#define KMG_NARROW_KMAX 32
#define KMG_WIDE_DPMIN 128		/* exclusive */
#define KMG_WIDE_DPMAX 1016
#define KMG_WIDE_KMAX 16
#define KMG_DIRECT_KMAX 32
#define KMG_DIRECT_ACC_MAX ((size_t) 96 * 1024)	/* accumulator copies of a block */
#define KMG_DIRECT_STAGES 4		/* most cp.async stages, down to 2 */
#define KMG_DIRECT_BPS_MAX 4	/* blocks an SM */

/* The filter path. */
#define KMG_FILTER_SMALL_K 128	/* the 128-column tile up to here */
#define KMG_SCREEN_DEFAULT KMG_SCREEN_FP16
#define KMG_SETTLE_TILE_MAXCHUNKS 8
#define KMG_SETTLE_TILE_DPMAX 1024
#define KMG_SETTLE_CHUNK4_DPMAX 4096
#define KMG_SETTLE_X8_DPMAX 2048

static_assert(KMG_NARROW_KMAX <= KMG_FIN1_KMAX && KMG_WIDE_KMAX <= KMG_FIN1_KMAX &&
			  KMG_DIRECT_KMAX <= KMG_FIN1_KMAX, "a fused iteration ends in one block");

/* The device's limits, or an H100's / H200's when there is no device yet. */
static kmg_device
kmg_limits(const kmg_device *dev)
{
	kmg_device	d;

	if (dev != NULL)
		return *dev;
	memset(&d, 0, sizeof(d));
	d.sms = 132;
	d.smem_optin = 227 * 1024;
	d.smem_per_sm = 228 * 1024;
	d.smem_reserved = 1024;
	return d;
}

static kmg_assign_plan
kmg_plan_empty(int path, int dp, const kmg_device *lim)
{
	kmg_assign_plan p;

	memset(&p, 0, sizeof(p));
	p.path = path;
	p.dp = dp;
	p.sms = lim->sms;
	p.s = 1;
	return p;
}

/* The narrow row: dp <= 32, k <= 32. */
static int
kmg_plan_narrow(kmg_assign_plan *p, int64_t n, int dp, int k, const kmg_device *lim)
{
	int			per_sm = 0;

	if (dp > KMG_NARROW_DPMAX || dp % 8 != 0 || k < 1 || k > KMG_NARROW_KMAX || n < 1)
		return 0;
	p->fn = kmg_narrow_instance(dp, k, &p->threads, &per_sm, &p->kb, &p->smem);
	if (p->fn == NULL || p->smem > lim->smem_optin)
		return 0;
	p->nblocks = (int) (n < (int64_t) lim->sms * per_sm ? n : (int64_t) lim->sms * per_sm);
	return p->nblocks > 0;
}

/* The wide row: 128 < dp <= 1016, k <= 16. */
static int
kmg_plan_wide(kmg_assign_plan *p, int64_t n, int dp, int k, const kmg_device *lim)
{
	int			per_sm = 0;

	p->s = 8;
	if (dp <= KMG_WIDE_DPMIN || dp > KMG_WIDE_DPMAX || dp % 8 != 0 || k < 1 ||
		k > KMG_WIDE_KMAX || n < 1)
		return 0;
	p->fn = kmg_wide_instance(dp, k, &p->threads, &per_sm, &p->kb, &p->smem);
	if (p->fn == NULL || p->smem > lim->smem_optin)
		return 0;
	p->nblocks = (int) (n < (int64_t) lim->sms * per_sm ? n : (int64_t) lim->sms * per_sm);
	return p->nblocks > 0;
}

/*
 * Compute capability 9 and above, or no device yet (a plan made before one
 * is chosen): what the overlapped launches, the byte pass and the narrow
 * pass's parallel end need of the device.
 */
static int
kmg_cc9_on(const kmg_device *lim)
{
	return lim->cc_major == 0 || lim->cc_major >= 9;
}

/* Programmatic dependent launch (kmg_launch_overlapped), unless KMG_OVERLAP=0. */
static int
kmg_overlap_on(const kmg_device *lim)
{
	return kmg_cc9_on(lim) && !kmg_env_off("KMG_OVERLAP");
}

/*
 * The wide row's byte pass (bytes.cu) for a fit's iterations; whether the
 * rows are all bytes is known only once they are on the device.  Compute
 * capability 9 and above (its tiles arrive by bulk copies).  KMG_BYTES=0
 * in the environment keeps the iterations on the floats (the benchmarks
 * time both).
 */
static int
kmg_plan_bytes(int64_t n, int d, int k, int mode, const kmg_device *lim)
{
	return mode == KMG_MODE_ITER && k >= 1 && k <= KMG_BYTES_KMAX && n <= kmg_bytes_nmax(lim->sms) &&
		kmg_bytes_stride(d) <= KMG_BYTES_DPMAX && kmg_bytes_smem(d) <= lim->smem_optin &&
		kmg_cc9_on(lim) && !kmg_env_off("KMG_BYTES");
}

/* The direct row: k <= 32, any dp. */
static int
kmg_plan_direct(kmg_assign_plan *p, int64_t n, int dp, int k, int mode, const kmg_device *lim)
{
	int64_t		ntiles;
	int			per_sm;

	if (k > KMG_DIRECT_KMAX || k < 1 || n < 1)
		return 0;
	/* lanes per row: each lane should own several 16-byte chunks */
	p->s = dp <= 32 ? 1 : dp <= 128 ? 4 : 32;
	p->fn = kmg_direct_instance(k, p->s, &p->threads, &p->kb);
	if (p->fn == NULL)
		return 0;
	/* accumulator copies: one per dp threads, within KMG_DIRECT_ACC_MAX */
	if (mode == KMG_MODE_ITER)
	{
		const size_t one = kmg_direct_acc_bytes(dp, k);

		p->groups = p->threads / dp > 0 ? p->threads / dp : 1;
		while (p->groups > 1 && (size_t) p->groups * one > KMG_DIRECT_ACC_MAX)
			p->groups--;
	}
	for (p->nstage = KMG_DIRECT_STAGES; p->nstage >= 2; p->nstage--)
	{
		p->smem = kmg_direct_smem(p->kb, p->s, p->nstage, p->groups, dp, k);
		if (p->smem <= lim->smem_optin)
			break;
	}
	if (p->nstage < 2)
		return 0;
	/* blocks an SM by shared memory, then tiles of rows per block at least one */
	ntiles = (n + p->threads / p->s - 1) / (p->threads / p->s);
	per_sm = (int) (lim->smem_per_sm / (p->smem + lim->smem_reserved));
	if (per_sm < 1)
		per_sm = 1;
	if (per_sm > KMG_DIRECT_BPS_MAX)
		per_sm = KMG_DIRECT_BPS_MAX;
	p->nblocks = (int) (ntiles < (int64_t) lim->sms * per_sm ? ntiles : (int64_t) lim->sms * per_sm);
	return p->nblocks > 0;
}

/*
 * The filter row's screen: the tensor-core screen on devices that have
 * TF32 and float16 tensor cores (compute capability 8.0 on), else the
 * float32 filter.  In float16 the call keeps a float16 copy of its rows (2
 * bytes a value on top of the 4 of the rows; driver/workspace.cu); the
 * drivers that do not make it (split fits) run the same plan in TF32.
 * KMG_SCREEN=fp32, tf32 or fp16 in the environment chooses (the benchmarks
 * run each).
 */
static int
kmg_plan_screen(const kmg_device *lim)
{
	const char *env = getenv("KMG_SCREEN");

	if (lim->cc_major != 0 && lim->cc_major < 8)
		return KMG_SCREEN_FP32;
	if (env != NULL && strcmp(env, "fp32") == 0)
		return KMG_SCREEN_FP32;
	if (env != NULL && strcmp(env, "tf32") == 0)
		return KMG_SCREEN_TF32;
	if (env != NULL && strcmp(env, "fp16") == 0)
		return KMG_SCREEN_FP16;
	return KMG_SCREEN_DEFAULT;
}

/* The filter row: the screen, the GEMM's tile and the settling kernels. */
static void
kmg_plan_filter(kmg_assign_plan *p, int dp, int k, const kmg_device *lim)
{
	int			xchunks;

	p->screen = kmg_plan_screen(lim);
	p->ftile = k <= KMG_FILTER_SMALL_K ? KM_FILTER_TILE_128 : KM_FILTER_TILE_256;
	xchunks = (k + km_filter_tile_cols(p->ftile) - 1) / km_filter_tile_cols(p->ftile);
	if (dp <= KMG_SETTLE_TILE_DPMAX && KMG_XG * km_filter_tile_cols(p->ftile) <= 1024 &&
		xchunks <= KMG_SETTLE_TILE_MAXCHUNKS)
		p->settle = KMG_SETTLE_TILE;
	else if (dp <= KMG_SETTLE_TILE_DPMAX)
		p->settle = KMG_SETTLE_CHUNK16;
	else if (dp <= KMG_SETTLE_CHUNK4_DPMAX)
		p->settle = KMG_SETTLE_CHUNK4;
	else
		p->settle = KMG_SETTLE_CHUNK1;
	p->xrows = dp <= KMG_SETTLE_X8_DPMAX ? 8 : 1;
}

/*
 * The plan of a given path for a shape (path KMG_PATH_FILTER always
 * succeeds); for a fused path whose row does not fit, the filter plan.
 * dev: the device's limits, or NULL to estimate without a device (memory
 * needs).  mode: KMG_MODE_ITER (fits) or KMG_MODE_LABELS (assign, map).
 * The harnesses use it to run a fused pass outside its row of the table.
 */
kmg_assign_plan
kmg_assign_plan_path(int path, int64_t n, int d, int dp, int k, int mode, const kmg_device *dev)
{
	const kmg_device lim = kmg_limits(dev);
	kmg_assign_plan p = kmg_plan_empty(path, dp, &lim);
	int			ok = 0;

	if (path == KMG_PATH_NARROW)
	{
		ok = kmg_plan_narrow(&p, n, dp, k, &lim);
		p.overlap = ok && kmg_overlap_on(&lim);
		p.parallel_end = ok && mode == KMG_MODE_ITER && kmg_narrow_parallel_end_on(dp) &&
			kmg_cc9_on(&lim) && !kmg_env_off("KMG_PARALLEL_END");
	}
	else if (path == KMG_PATH_WIDE)
	{
		ok = kmg_plan_wide(&p, n, dp, k, &lim);
		p.bytes = ok && kmg_plan_bytes(n, d, k, mode, &lim);
		p.overlap = p.bytes && kmg_overlap_on(&lim);
	}
	else if (path == KMG_PATH_DIRECT)
		ok = kmg_plan_direct(&p, n, dp, k, mode, &lim);
	if (!ok)
	{
		p = kmg_plan_empty(KMG_PATH_FILTER, dp, &lim);
		kmg_plan_filter(&p, dp, k, &lim);
	}
	return p;
}

/*
 * The plan for a shape: the first row of the table that fits.
 * KMG_FUSED=0 in the environment skips the fused rows (the benchmarks time
 * small-k shapes on the filter row's screen that way).
 */
kmg_assign_plan
kmg_assign_make_plan(int64_t n, int d, int dp, int k, int mode, const kmg_device *dev)
{
	static const int order[] = {KMG_PATH_NARROW, KMG_PATH_WIDE, KMG_PATH_DIRECT};
	kmg_assign_plan p;

	if (kmg_env_off("KMG_FUSED"))
		return kmg_assign_plan_path(KMG_PATH_FILTER, n, d, dp, k, mode, dev);
	for (int i = 0; i < 3; i++)
	{
		p = kmg_assign_plan_path(order[i], n, d, dp, k, mode, dev);
		if (kmg_plan_fused(&p))
			return p;
	}
	return p;
}

/*
 * Once per call, before any launch or capture: raise the fused kernel's
 * shared memory limit to what the plan gives it, and cap the grid at the
 * blocks the occupancy calculator lets each SM hold.
 */
cudaError_t
kmg_assign_prepare(kmg_assign_plan *plan, const kmg_device *dev)
{
	cudaError_t e;
	int			per_sm = 0;

	if (!kmg_plan_fused(plan))
	{
		plan->wgmma = plan->screen == KMG_SCREEN_FP16 && kmg_screen_wgmma_usable(plan->dp, dev);
		return cudaSuccess;
	}
	if (plan->fn == NULL)
		return cudaErrorInvalidValue;
	if (plan->bytes && kmg_bytes_prepare(plan->dp) != cudaSuccess)
	{
		(void) cudaGetLastError();
		plan->bytes = 0;		/* the iterations stay on the floats */
	}
	e = cudaFuncSetAttribute((const void *) plan->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
							 (int) plan->smem);
	if (e != cudaSuccess)
		return e;
	e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, plan->fn, plan->threads,
													  plan->smem);
	if (e != cudaSuccess)
		return e;
	if (per_sm < 1)
		return cudaErrorInvalidConfiguration;
	if (plan->nblocks > per_sm * dev->sms)
		plan->nblocks = per_sm * dev->sms;
	return cudaSuccess;
}

/*
 * The fused kernel of the plan alone (in MODE_ITER the wide and direct
 * passes leave per-block partials for kmg_reduce_finalize).  a->nfix (the
 * narrow pass's accumulators) must be zero before the first pass, a->part
 * hold the plan's blocks, a->wrow the wide pass's lists.
 */
cudaError_t
kmg_fused_launch(const kmg_args *a, const kmg_assign_plan *plan, int mode, cudaStream_t stream)
{
	if (!kmg_plan_fused(plan) || plan->fn == NULL || a->dp != plan->dp ||
		(plan->path == KMG_PATH_WIDE && a->wrow == NULL))
		return cudaErrorInvalidValue;
	/*
	 * A fit's narrow passes overlap the kernel before them (the pass reads
	 * only the rows and weights before its wait, and a fit writes those
	 * before it seeds); a labels pass may follow the kernel that wrote its
	 * rows, so it waits for it whole, as the wide and direct passes do.
	 */
	return kmg_launch_overlapped(plan->overlap && plan->path == KMG_PATH_NARROW && mode == KMG_MODE_ITER, plan->fn,
								 dim3(plan->nblocks), dim3(plan->threads), plan->smem, stream, *a, mode,
								 plan->nstage, mode == KMG_MODE_ITER ? plan->groups : 0);
}

/*
 * One assignment pass with the plan's kernels: labels for every row, and in
 * MODE_ITER the moved count.  A fused plan in MODE_ITER is a whole Lloyd
 * iteration (the cluster sums in a->clus and the iteration's end, by the
 * narrow pass's own last block or reduce.cu's; with a->parallel_end, by
 * the next narrow pass's blocks); the filter path leaves the sums to
 * update/.  filter_work: the filter's prepared operand
 * (km_filter_work_bytes); a->lloyd: the kernels honour the run's stop flag.
 */
cudaError_t
kmg_assign_pass(const kmg_args *a, const kmg_assign_plan *plan, int mode, void *filter_work,
				cudaStream_t stream)
{
	cudaError_t e;

	if (kmg_plan_fused(plan))
	{
		/* rows that are all bytes: the pass and its end kernel (bytes.cu) */
		if (plan->bytes && mode == KMG_MODE_ITER && a->Xb != NULL)
			return kmg_bytes_launch(a, plan->sms < a->nblocks ? plan->sms : a->nblocks, plan->overlap, stream);
		if ((e = kmg_fused_launch(a, plan, mode, stream)) != cudaSuccess ||
			mode != KMG_MODE_ITER || plan->path == KMG_PATH_NARROW)
			return e;
		return kmg_reduce_finalize(a, stream);
	}
	/* an iteration's finalize resets the list count; a labels pass starts it here */
	if (mode == KMG_MODE_LABELS &&
		(e = cudaMemsetAsync(&a->ctl->namb, 0, sizeof(int), stream)) != cudaSuccess)
		return e;
	if (plan->screen != KMG_SCREEN_FP32)
	{
		if ((mode == KMG_MODE_LABELS &&
			 (e = cudaMemsetAsync(&a->ctl->ncand, 0, sizeof(int), stream)) != cudaSuccess) ||
			(e = km_filter_prepare(plan->ftile, a->Cf, a->cn, a->k, a->kp, a->dp, filter_work,
								   stream)) != cudaSuccess ||
			(kmg_screen_bounds(*a, mode) &&
			 (e = kmg_bounds_list(a, plan->sms, stream)) != cudaSuccess) ||
			(e = kmg_screen(a, mode, plan, stream)) != cudaSuccess)
			return e;
		return kmg_exact_refine(a, plan, mode, stream);
	}
	if ((e = km_filter_prepare(plan->ftile, a->Cf, a->cn, a->k, a->kp, a->dp, filter_work,
							   stream)) != cudaSuccess ||
		(e = km_filter_top2(plan->ftile, a->X, a->n, a->dp, filter_work, a->k, a->kp, a->best,
							a->fbest, a->fsecond, stream,
							a->lloyd ? &a->ctl->stop : nullptr)) != cudaSuccess ||
		(e = kmg_classify(a, mode, stream)) != cudaSuccess)
		return e;
	return kmg_exact_refine(a, plan, mode, stream);
}
