/*
 * running.cu
 *	  Running sums: the exact per-cluster sums of a fit's iterations kept
 *	  from one iteration to the next and moved by the rows whose label
 *	  changed, so that an iteration's sums cost in proportion to the rows
 *	  that moved, not to n, and an iteration with bounds
 *	  (assign/bounds.cu) costs in proportion to the rows it screens.
 *	  Every fit on the tensor-core screen keeps them (l2; KMG_RUNNING=0
 *	  turns them off, for timings).
 *
 * The sums are those of the split fits (xsums.cu): w x and w cut into the
 * levels of km_xsum.h, where no addition rounds.  A row that moves from
 * cluster o to j adds its pieces to j and its negated pieces to o (the cut
 * of -t is the negated cut of t: magic-constant rounding is symmetric), so
 * after any sequence of moves each cluster's levels hold exactly what a
 * fresh sum of its present rows would hold, and each sum is rounded once,
 * as the CPU engine rounds it (km_xlevels_round; then finalize.cu takes the
 * mean as before).  No partial sum can leave the levels' room: a cluster's
 * running value is a sum over disjoint rows (those it had, those that
 * joined), at most n terms, which is what the levels were cut for.
 *
 * Per iteration, after the screen:
 *   - kmg_run_moved_block_kernel (kmg_run_moved_kernel where the 2k keys
 *     do not fit a block's shared memory): over the rows the bounds listed
 *     (a->brow, with a->bold their label before the screen), or without
 *     bounds over every row (a->bold: every label, kept before the pass by
 *     kmg_run_keep_labels_kernel), those whose label changed, counted per
 *     key: key j for rows joining cluster j, key k + o for rows leaving
 *     cluster o;
 *   - the pieces of those 2k keys (sort.cu's pieces kernel, from counts);
 *   - the same kernel again: each moved row into its keys' places (the
 *     order within a key is free: the sums are exact);
 *   - the exact sums of those pieces (xsums.cu, KMG_XSUMS_MOVED: the keys
 *     k.. subtract);
 *   - kmg_run_estimate_kernel and kmg_run_clus_kernel: every cluster's
 *     rounded sums into a->clus, as sums.cu leaves them for finalize.cu.
 * The first iteration of a run sums every row instead (kmg_running_rebuild:
 * sort, xsums.cu over all pieces), and so does an update whose iteration
 * moved more than a->rs_resum rows (half of them; kmg_run_resums), by the
 * same kernels with every row under its label's key, into cleared sums.
 * A re-seed of empty clusters (finalize.cu) leaves the labels as they are:
 * the row it gives an empty cluster moves there at the next screen, which
 * the sums follow as any other move.
 *
 * Plain C reference: the CPU engine's exact sums (km_xlevels_add over the
 * rows, src/engine/cpu_assign.c); bench_engine.cu's bounds fits compare
 * the model with the CPU engine's and with the fit without bounds.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "prep/prep.cuh"
#include "update/update.cuh"

#include <algorithm>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KMG_RUN_NT 256
#define KMG_RUN_BLOCK_KEYS 12288	/* 48 KB of shared memory: 2k keys for k <= 6144 */

/* The per-iteration scratch an update zeroes first: count and cursor, 2k each. */
static size_t
kmg_run_scratch_bytes(int k)
{
	return (size_t) 4 * k * sizeof(int32_t);
}

/*
 * Every row's label before a pass without bounds, into a->bold (with
 * bounds, the bounds' test keeps those of the rows it lists).
 */
__global__ void __launch_bounds__(KMG_RUN_NT)
kmg_run_keep_labels_kernel(kmg_args a)
{
	const int64_t n4 = a.n / 4;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t t0 = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int64_t t = t0; t < n4; t += stride)
		reinterpret_cast<int4 *>(a.bold)[t] = __ldcs(reinterpret_cast<const int4 *>(a.labels) + t);
	for (int64_t t = 4 * n4 + t0; t < a.n; t += stride)
		a.bold[t] = a.labels[t];
}

/*
 * Whether this update sums every row afresh: a moved row costs the sums two
 * pieces (its new cluster gains it, its old one loses it), so past about
 * half the rows (a->rs_resum) one piece a row is less.  Then every row is
 * listed with its label as its only key, into sums cleared first
 * (kmg_run_clear_kernel), which is what the first iteration's sums hold
 * (the same levels: exact, whatever the order).  The iteration's moved
 * count is complete when the update runs and stays until its end.
 */
static __device__ __forceinline__ int
kmg_run_resums(const kmg_args &a)
{
	return (int64_t) *(volatile int *) &a.ctl->moved > a.rs_resum;
}

/*
 * The moved rows of the last screen, each with its two keys (-1: none):
 * key_in = its new label, key_out = k + its old label (none for a row that
 * had no label yet); rows not moved have neither.  When the update sums
 * every row (resum): row t, its label as key_in, no key_out.
 */
static __device__ __forceinline__ void
kmg_run_keys(const kmg_args &a, int t, int resum, int *row, int *key_in, int *key_out)
{
	const int	r = a.bounded && !resum ? a.brow[t] : t;
	const int	j = a.labels[r];

	*row = r;
	if (resum)
	{
		*key_in = j >= 0 ? j : -1;
		*key_out = -1;
		return;
	}

	const int	o = a.bold[t];

	*key_in = o != j ? j : -1;
	*key_out = o != j && o >= 0 ? a.k + o : -1;
}

/* The rows the update looks at: the bounds' list, or every row (no bounds, or resum). */
static __device__ __forceinline__ int
kmg_run_listed(const kmg_args &a, int resum)
{
	return a.bounded && !resum ? *(volatile int *) &a.bs->nlist : (int) a.n;
}

/* The running sums zeroed where this update sums every row (kmg_run_resums). */
__global__ void __launch_bounds__(KMG_RUN_NT)
kmg_run_clear_kernel(kmg_args a, unsigned long long *acc, int64_t words)
{
	if ((a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN) || !kmg_run_resums(a))
		return;
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < words;
		 i += (int64_t) gridDim.x * blockDim.x)
		acc[i] = 0ull;
}

/*
 * The moved rows' keys, a warp step at a time, one atomic per key and step
 * (__match_any_sync: the first iteration moves every row into few
 * clusters).  Without bounds: rows of each key into tally.  With bounds
 * (the keys' [start, end) from their counts): each row into its keys'
 * places in rows, at bounds[key].x + the key's cursor in tally (the order
 * within a key is free: the sums are exact).
 */
__global__ void __launch_bounds__(KMG_RUN_NT)
kmg_run_moved_kernel(kmg_args a, const int2 *bounds, int32_t *tally, int32_t *rows)
{
	const int	lane = threadIdx.x & 31;
	const int	resum = kmg_run_resums(a);
	const int	nl = kmg_run_listed(a, resum);
	const int	stride = gridDim.x * blockDim.x;
	const int	nup = (nl + 31) / 32 * 32;
	const unsigned below = (1u << lane) - 1u;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < nup; t += stride)
	{
		int			r = -1,
					kin = -1,
					kout = -1;

		if (t < nl)
			kmg_run_keys(a, t, resum, &r, &kin, &kout);
		for (int side = 0; side < 2; side++)
		{
			const int	key = side == 0 ? kin : kout;
			const unsigned same = __match_any_sync(0xffffffffu, key);
			const int	first = __ffs(same) - 1;
			int			base = 0;

			if (key >= 0 && lane == first)
			{
				base = atomicAdd(&tally[key], __popc(same));
				if (bounds != NULL)
					base += bounds[key].x;
			}
			if (bounds == NULL)
				continue;
			base = __shfl_sync(0xffffffffu, base, first);
			if (key >= 0)
				rows[base + __popc(same & below)] = r;
		}
	}
}

/*
 * The moved rows of the list's slice [t0, t1), each into its keys in
 * shared memory: counted (rows NULL), or placed in rows at its key's
 * cursor.
 */
static __device__ __forceinline__ void
kmg_run_slice(const kmg_args &a, int resum, int t0, int t1, int32_t *sk, int32_t *rows)
{
	for (int t = t0 + threadIdx.x; t < t1; t += KMG_RUN_NT)
	{
		int			r,
					key[2];

		kmg_run_keys(a, t, resum, &r, &key[0], &key[1]);
		for (int side = 0; side < 2; side++)
			if (key[side] >= 0)
			{
				const int	at = atomicAdd(&sk[key[side]], 1);

				if (rows != NULL)
					rows[at] = r;
			}
	}
}

/*
 * The same, each block over a contiguous slice of the list with the keys
 * counted in shared memory first (nkeys = 2k of them, at most
 * KMG_RUN_BLOCK_KEYS), so a key takes one global atomic a block, not one a
 * warp step: an early iteration moves millions of rows into few keys (10M
 * rows, k = 256: 2.3M moved rows took 0.82 ms a pass one warp step at a
 * time, 0.10 ms so).  Without key bounds: the slice's counts into tally;
 * with them: the block reserves its places for each key, then each row
 * takes one of them.
 */
__global__ void __launch_bounds__(KMG_RUN_NT)
kmg_run_moved_block_kernel(kmg_args a, const int2 *bounds, int32_t *tally, int32_t *rows, int nkeys)
{
	extern __shared__ int32_t sk[];
	const int	resum = kmg_run_resums(a);
	const int	nl = kmg_run_listed(a, resum);
	const int	per = (nl + (int) gridDim.x - 1) / (int) gridDim.x;
	const int	t0 = (int) blockIdx.x * per,
				t1 = min(nl, t0 + per);

	if (t0 >= t1 || (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN))
		return;
	for (int key = threadIdx.x; key < nkeys; key += KMG_RUN_NT)
		sk[key] = 0;
	__syncthreads();
	kmg_run_slice(a, resum, t0, t1, sk, NULL);
	__syncthreads();
	for (int key = threadIdx.x; key < nkeys; key += KMG_RUN_NT)
	{
		const int	c = sk[key];

		if (c > 0)
		{
			const int	base = atomicAdd(&tally[key], c);

			if (bounds != NULL)
				sk[key] = bounds[key].x + base;
		}
	}
	if (bounds == NULL)
		return;
	__syncthreads();
	kmg_run_slice(a, resum, t0, t1, sk, rows);
}

/*
 * Progress's inertia estimate, sum w (fbest + |x|^2) over every row (rows
 * the bounds skipped count with their last screened value), as sums.cu
 * takes it: KMG_RUN_EST_BLOCKS fixed blocks, each a fixed tree, so the
 * same rows give the same bits on any device.
 */
__global__ void __launch_bounds__(KMG_RUN_NT)
kmg_run_estimate_kernel(kmg_args a, double *part)
{
	__shared__ double red[KMG_RUN_NT / 32];
	const int64_t stride = (int64_t) KMG_RUN_EST_BLOCKS * KMG_RUN_NT;
	double		e = 0.0;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int64_t i = (int64_t) blockIdx.x * KMG_RUN_NT + threadIdx.x; i < a.n; i += stride)
		e += (a.W != NULL ? (double) a.W[i] : 1.0) * kmg_row_estimate(a, i);
	for (int o = 16; o > 0; o >>= 1)
		e += __shfl_xor_sync(0xffffffffu, e, o);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = e;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		for (int w = 1; w < KMG_RUN_NT / 32; w++)
			e += red[w];
		part[blockIdx.x] = e;
	}
}

/*
 * a->clus as sums.cu leaves it (k x KMG_CW(dp): sum w x, w, count, the
 * estimate), each sum rounded once from its levels (km_xlevels_round; at
 * most two levels here: one IEEE addition); the whole estimate in cluster 0's column (finalize adds
 * the column); clusters without weight counted, as the piece sums count
 * them.
 */
#define KMG_RUN_CLUS_NT 128

__global__ void __launch_bounds__(KMG_RUN_CLUS_NT)
kmg_run_clus_kernel(kmg_args a, kmg_xsum_acc acc, const double *part)
{
	__shared__ double red[KMG_RUN_CLUS_NT / 32];
	const int	j = blockIdx.x;
	const int	d = a.d,
				dp = a.dp;
	const size_t kd = (size_t) a.k * d;
	double	   *cl = a.clus + (size_t) j * KMG_CW(dp);
	double		est = 0.0;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if (j == 0)
	{
		/* the estimate's partials: runs of KMG_RUN_EST_BLOCKS / 128 in order, then a fixed tree */
		const int	per = KMG_RUN_EST_BLOCKS / KMG_RUN_CLUS_NT;

		for (int b = 0; b < per; b++)
			est += part[threadIdx.x * per + b];
		for (int o = 16; o > 0; o >>= 1)
			est += __shfl_xor_sync(0xffffffffu, est, o);
		if ((threadIdx.x & 31) == 0)
			red[threadIdx.x >> 5] = est;
		__syncthreads();
		est = red[0];
		for (int w = 1; w < KMG_RUN_CLUS_NT / 32; w++)
			est += red[w];
	}
	for (int c = threadIdx.x; c < KMG_CW(dp); c += KMG_RUN_CLUS_NT)
	{
		double		v = 0.0;

		if (c < d)
			v = km_xlevels_round(acc.xs + (size_t) j * d + c, acc.xlev.n, kd);
		else if (c == dp)
		{
			v = km_xlevels_round(acc.ws + j, acc.wlev.n, (size_t) a.k);
			if (!(v > 0.0))
				atomicAdd(&a.ctl->nempty, 1);
		}
		else if (c == dp + 1)
			v = (double) (long long) acc.counts[j];
		else if (c == dp + 2 && j == 0)
			v = est;
		cl[c] = v;
	}
}

/*
 * The levels of the rows' sums (km_xstats of every row, as the split fits
 * learn them): the running sums are on when they are exact in at most two
 * levels (most data need one or two; others keep the piece sums of
 * sums.cu).  Once per call, after the rows are prepared; synchronises.
 */
cudaError_t
kmg_running_levels(kmg_running *rs, const kmg_args *a, cudaStream_t s)
{
	km_xstats	xs;
	cudaError_t e;

	rs->on = 0;
	if ((e = kmg_xstats_of(a->X, a->W, a->n, a->d, a->dp, 0, rs->xst, &xs, s)) != cudaSuccess)
		return e;
	kmg_xsum_acc_carve(&rs->acc, rs->accmem, a->k, a->d, 1, 1);
	km_xlevels_for(&xs, a->n, a->W != NULL, a->W == NULL, &rs->acc.xlev, &rs->acc.wlev);
	if (!rs->acc.xlev.exact || !rs->acc.wlev.exact || rs->acc.xlev.n > 2 || rs->acc.wlev.n > 2)
		return cudaSuccess;
	kmg_xsum_acc_carve(&rs->acc, rs->accmem, a->k, a->d, rs->acc.xlev.n, rs->acc.wlev.n);
	rs->on = 1;
	return cudaSuccess;
}

/*
 * The moved rows past which an update sums every row afresh: half the rows
 * (kmg_run_resums).  KMG_RUNNING_RESUM=always / never in the environment
 * forces either way (for tests and timings).
 */
int64_t
kmg_running_resum(int64_t n)
{
	const char *env = getenv("KMG_RUNNING_RESUM");

	if (env != NULL && strcmp(env, "always") == 0)
		return -1;
	if (env != NULL && strcmp(env, "never") == 0)
		return INT64_MAX;
	return n / 2;
}

/* Every cluster's rounded sums and the estimate into a->clus. */
static cudaError_t
kmg_running_clus(const kmg_args *a, const kmg_running *rs, cudaStream_t s)
{
	kmg_run_estimate_kernel<<<KMG_RUN_EST_BLOCKS, KMG_RUN_NT, 0, s>>>(*a, rs->est);
	kmg_run_clus_kernel<<<a->k, KMG_RUN_CLUS_NT, 0, s>>>(*a, rs->acc, rs->est);
	return cudaGetLastError();
}

/*
 * The sums from every row (the first iteration of a run, queued right after
 * its start, so never behind a stop): the accumulators zeroed, the rows
 * sorted by label, the exact sums of every piece, then a->clus.
 */
cudaError_t
kmg_running_rebuild(const kmg_args *a, const kmg_running *rs, const int32_t *iota, void *temp,
					size_t temp_bytes, cudaStream_t s)
{
	cudaError_t e;

	if ((e = cudaMemsetAsync(rs->accmem, 0, kmg_xsum_acc_bytes(a->k, a->d, rs->acc.xlev.n,
															   rs->acc.wlev.n), s)) != cudaSuccess ||
		(e = kmg_sort_labels(a, iota, temp, temp_bytes, s)) != cudaSuccess ||
		(e = kmg_xsums(a, &rs->acc, KMG_XSUMS_MOVED, s)) != cudaSuccess)
		return e;
	return kmg_running_clus(a, rs, s);
}

/* Blocks of KMG_RUN_NT threads for a grid-stride loop over items (kmg_stride_grid, 8 an SM). */
static unsigned
kmg_run_grid(int64_t items)
{
	return kmg_stride_grid((items + KMG_RUN_NT - 1) / KMG_RUN_NT, 8);
}

/* The labels before an iteration without bounds (kmg_run_keep_labels_kernel). */
cudaError_t
kmg_running_keep_labels(const kmg_args *a, cudaStream_t s)
{
	const unsigned grid = kmg_run_grid(a->n / 4);

	kmg_run_keep_labels_kernel<<<grid, KMG_RUN_NT, 0, s>>>(*a);
	return cudaGetLastError();
}

/*
 * The sums moved by the rows the last screen relabelled (the file header),
 * then a->clus.
 */
cudaError_t
kmg_running_update(const kmg_args *a, const kmg_running *rs, cudaStream_t s)
{
	const unsigned grid = kmg_run_grid(a->n);
	kmg_args	m = *a;
	cudaError_t e;
	const int	block = 2 * a->k <= KMG_RUN_BLOCK_KEYS;	/* the keys fit a block's shared memory */
	const size_t keys_smem = block ? (size_t) 2 * a->k * sizeof(int32_t) : 0;

	/* the 2k keys' pieces: key j joins cluster j, key k + o leaves cluster o */
	m.k = 2 * a->k;
	m.bounds = rs->bounds;
	m.pclus = rs->pclus;
	m.ptab = rs->ptab;
	m.npieces = rs->npieces;
	m.pdone = NULL;
	m.svals = rs->rows;
	if ((e = cudaMemsetAsync(rs->count, 0, kmg_run_scratch_bytes(a->k), s)) != cudaSuccess)
		return e;
	/* the moved rows counted per key (no key bounds yet), then placed */
	auto moved = [&] (const int2 *bounds, int32_t *tally, int32_t *rows)
	{
		if (block)
			kmg_run_moved_block_kernel<<<grid, KMG_RUN_NT, keys_smem, s>>>(*a, bounds, tally, rows, 2 * a->k);
		else
			kmg_run_moved_kernel<<<grid, KMG_RUN_NT, 0, s>>>(*a, bounds, tally, rows);
	};

	/* an iteration that moved most rows sums every row afresh (kmg_run_resums) */
	kmg_run_clear_kernel<<<grid, KMG_RUN_NT, 0, s>>>(*a, (unsigned long long *) rs->accmem,
													(int64_t) (kmg_xsum_acc_bytes(a->k, a->d, rs->acc.xlev.n,
																				  rs->acc.wlev.n) /
															   sizeof(unsigned long long)));
	moved(NULL, rs->count, NULL);
	if ((e = cudaGetLastError()) != cudaSuccess ||
		(e = kmg_pieces_of_counts(&m, rs->count, s)) != cudaSuccess)
		return e;
	moved(rs->bounds, rs->cursor, rs->rows);
	m.k = a->k;					/* the sums' clusters */
	if ((e = cudaGetLastError()) != cudaSuccess ||
		(e = kmg_xsums_pieces(&m, &rs->acc, KMG_XSUMS_MOVED, (int) grid, s)) != cudaSuccess)
		return e;
	return kmg_running_clus(a, rs, s);
}
