/*
 * exact.cu
 *	  Labels from the GEMM filter's top-2 (large k): the slack test, the
 *	  exact settling of the rows it cannot decide, the moved count; and the
 *	  exact cost of every row to its label (final pass, assign, map).
 *
 * Plain C reference: km_exact_nearest / km_exact_cost (km_exact.h) on every
 * row; kernels/bench/ref_kmeans.c does that, and bench_engine.cu compares.
 *
 * Why it is fast.  kmg_classify reads 20 bytes a row and settles almost
 * every row with the filter's winner; the few ambiguous ones are appended to
 * a list (integer atomics: the order of the list varies, the label of each
 * row does not).  kmg_exact_refine takes them R at a time per work item
 * (R rows x one tile of the filter's prepared operand): every thread owns a
 * centroid of the tile, recomputes its float filter value for the R rows
 * from the prepared -2 C'^T (coalesced; one read serves R rows) and runs the
 * exact double chain (kmg_chain4) only where that value is within the slack
 * of the GEMM's best, i.e. for the two or three centroids that can still
 * win.  That is exact: a centroid farther than the slack cannot be the exact
 * winner (the argument of km_filter_slack), so the minimum over the
 * candidates, ties to the lowest index, is km_exact_nearest's answer.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#define KMG_XFEW 32				/* rows to settle at most for the chunk kernel's items of one row */

/*
 * The slack of a listed row's settling: the float32 filter's, plus the
 * tensor-core screen's when the screen listed it (fbest is then the
 * screen's best, within kmg_screen_slack_of of the exact winner's value).
 */
__device__ __forceinline__ float
kmg_settle_slack(const kmg_args &a, float xn, float cmax)
{
	float		s = km_filter_slack(a.d, xn, cmax);

	if (a.screen)
		s += kmg_screen_slack_of(a, xn, cmax);
	return s;
}

/*
 * Per row: the filter's winner when the gap beats the slack, else the row
 * goes on the ambiguous list.
 */
__global__ void
kmg_classify_kernel(kmg_args a, int mode)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t start = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	const int	iter = mode == KMG_MODE_ITER;
	int			moved = 0;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;

	for (int64_t i = start; i - threadIdx.x < a.n; i += stride)
	{
		int			amb = 0;

		if (i < a.n)
		{
			const float f1 = a.fbest[i];
			const float f2 = a.fsecond[i];
			const float xn = a.xnorm[i];
			const float slack = km_filter_slack(a.d, xn, cmax);

			amb = all_exact || (a.cosine && xn == 0.0f) || !isfinite(f1 + slack) ||
				!(f2 - f1 > slack);
			if (!amb)
			{
				const int	b = a.best[i];

				if (iter)
				{
					if (a.labels[i] != b)
					{
						moved++;
						a.labels[i] = b;
					}
				}
				else
					a.labels[i] = b;
			}
		}
		/* one atomic per warp for the list */
		{
			const unsigned m = __ballot_sync(0xffffffffu, amb);

			if (m != 0)
			{
				const int	lane = threadIdx.x & 31;
				int			base = 0;

				if (lane == __ffs(m) - 1)
					base = atomicAdd(&a.ctl->namb, __popc(m));
				base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
				if (amb)
					a.amb[base + __popc(m & ((1u << lane) - 1u))] = (int32_t) i;
			}
		}
	}
	if (iter)
		kmg_block_add_int(moved, &a.ctl->moved);
}

cudaError_t
kmg_classify(const kmg_args *a, int mode, cudaStream_t stream)
{
	int64_t		blocks = (a->n + 255) / 256;

	if (a->n == 0)
		return cudaSuccess;
	blocks = kmg_stride_grid(blocks, 16);
	kmg_classify_kernel<<<(unsigned) blocks, 256, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/*
 * The ambiguous rows, R per block at a time (see the file header).
 */
template <int R>
__global__ void __launch_bounds__(256)
kmg_exact_kernel(kmg_args a, int mode, int start)
{
	extern __shared__ __align__(16) unsigned char kmg_xsmem[];
	float	   *xs = (float *) kmg_xsmem;	/* R x dp */
	__shared__ float sthr[R];
	__shared__ double scost[8][R];
	__shared__ int sidx[8][R];
	__shared__ int srow[R];
	const int	tid = threadIdx.x;
	const int	dp = a.dp;
	const int	q4 = dp / 4;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	namb = a.ctl->namb;
	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	int			moved = 0;

	for (int base = start + blockIdx.x * R; base < namb; base += gridDim.x * R)
	{
		const int	nr = namb - base < R ? namb - base : R;

		if (tid < R)
		{
			float		thr = INFINITY;

			if (tid < nr)
			{
				const int	i = a.amb[base + tid];
				const float xn = a.xnorm[i];
				const float slack = kmg_settle_slack(a, xn, cmax);

				srow[tid] = i;
				if (!(all_exact || (a.cosine && xn == 0.0f)))
					thr = a.fbest[i] + slack;
				if (isnan(thr))
					thr = INFINITY;
			}
			sthr[tid] = thr;
		}
		__syncthreads();
		for (int e = tid; e < nr * q4; e += blockDim.x)
		{
			const int	r = e / q4;
			const int	q = e - r * q4;

			reinterpret_cast<float4 *>(xs)[e] =
				reinterpret_cast<const float4 *>(a.X + (size_t) srow[r] * dp)[q];
		}
		__syncthreads();

		double		bc[R];
		int			bj[R];

#pragma unroll
		for (int r = 0; r < R; r++)
		{
			bc[r] = INFINITY;
			bj[r] = INT_MAX;
		}
		for (int j = tid; j < a.k; j += blockDim.x)
		{
			const float4 *c4 = reinterpret_cast<const float4 *>(a.Cf + (size_t) j * dp);
			float		acc[R];

#pragma unroll
			for (int r = 0; r < R; r++)
				acc[r] = 0.0f;
			for (int q = 0; q < q4; q++)
			{
				const float4 c = c4[q];

#pragma unroll
				for (int r = 0; r < R; r++)
				{
					const float4 x = reinterpret_cast<const float4 *>(xs + r * dp)[q];

					acc[r] = fmaf(x.x, c.x, acc[r]);
					acc[r] = fmaf(x.y, c.y, acc[r]);
					acc[r] = fmaf(x.z, c.z, acc[r]);
					acc[r] = fmaf(x.w, c.w, acc[r]);
				}
			}
			const float cnj = a.cn[j];

#pragma unroll
			for (int r = 0; r < R; r++)
				if (r < nr && !(cnj - 2.0f * acc[r] > sthr[r]))
				{
					double		c = kmg_chain4(reinterpret_cast<const float4 *>(xs + r * dp),
											   reinterpret_cast<const float4 *>(a.C + (size_t) j * dp),
											   dp / 4, a.cosine ? a.cnorm[j] : 0.0, a.cosine);

					if (c < bc[r])	/* j ascends: ties keep the lower */
					{
						bc[r] = c;
						bj[r] = j;
					}
				}
		}

		/* argmin over the block, ties to the lower centroid */
#pragma unroll
		for (int r = 0; r < R; r++)
		{
			double		c = bc[r];
			int			j = bj[r];

			kmg_warp_argmin(c, j);
			if ((tid & 31) == 0)
			{
				scost[tid >> 5][r] = c;
				sidx[tid >> 5][r] = j;
			}
		}
		__syncthreads();
		if (tid < nr)
		{
			double		c;
			int			j;

			kmg_argmin_strided(&scost[0][tid], &sidx[0][tid], (int) (blockDim.x >> 5), R, c, j);

			const int	i = srow[tid];

			if (j == INT_MAX)
				j = 0;			/* cannot happen: the filter's best is a candidate */
			if (mode == KMG_MODE_ITER)
			{
				if (a.labels[i] != j)
				{
					moved++;
					a.labels[i] = j;
				}
			}
			else
				a.labels[i] = j;
		}
		__syncthreads();
	}
	if (mode == KMG_MODE_ITER)
		kmg_block_add_int(moved, &a.ctl->moved);
}

/*
 * The chunked path: work item (batch of R ambiguous rows, chunk = one tile
 * of the filter's prepared operand, a->fbn centroids), one centroid per
 * thread; each item leaves, per row, the best (cost, centroid) of its
 * chunk in xcost/xidx, and kmg_exact_merge takes the best over the chunks.
 * More blocks than rows/R alone would give, so a few hundred ambiguous rows
 * still fill the GPU.  The float values are recomputed from the prepared
 * operand (-2 c'^T, one column chunk per tile: thread j's four values of a
 * step are four coalesced loads, the next step's in flight), the same
 * quantity the GEMM computed, within the same bound; the exact chains
 * (kmg_chain4) read the row from shared memory and the centroid with its
 * loads ahead of the dependent adds.  Run 2 read each centroid row from
 * global memory one float at a time, in the chain and in the recompute:
 * latency-bound (75 us for 340 rows of 100000 x 256 x 1024).  BN is the
 * tile's width (a->fbn, 128 or 256): with it known, the column's loads walk
 * one pointer with constant offsets, and only the last group of 16 values
 * checks dp; with a run-time width every load was a 64-bit multiply, a
 * check and two parameter reads, as many instructions as the fmaf they fed.
 */
template <int R, int BN>
__global__ void __launch_bounds__(KMG_XCHUNK)
kmg_exact_chunk_kernel(kmg_args a, int few)
{
	extern __shared__ __align__(16) unsigned char kmg_xsmem2[];
	float	   *xs = (float *) kmg_xsmem2;	/* R x dp */
	__shared__ float sthr[R];
	__shared__ double scost[KMG_XCHUNK / 32][R];
	__shared__ int sidx[KMG_XCHUNK / 32][R];
	__shared__ int srow[R];
	const int	tid = threadIdx.x;
	const int	dp = a.dp;
	const int	q4 = dp / 4;
	const int	tiles = (a.kp + BN - 1) / BN;
	const float *Bt = a.fwork;
	const float *Cnt = a.fwork + (size_t) tiles * BN * dp;

	static_assert(BN <= KMG_XCHUNK, "a thread a centroid of the tile");
	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	namb = min(*(volatile int *) &a.ctl->namb, a.xcap);

	/* few > 0: this launch settles at most `few` rows; few < 0: more than -few; 0: any */
	if ((few > 0 && namb > few) || (few < 0 && namb <= -few))
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int	nb = (namb + R - 1) / R;
	const int	nitems = nb * a.xchunks;

	for (int item = blockIdx.x; item < nitems; item += gridDim.x)
	{
		const int	b = item / a.xchunks;
		const int	c = item - b * a.xchunks;
		const int	base = b * R;
		const int	nr = namb - base < R ? namb - base : R;
		const int	j = c * BN + tid;

		__syncthreads();
		if (tid < R)
		{
			float		thr = INFINITY;

			if (tid < nr)
			{
				const int	i = a.amb[base + tid];
				const float xn = a.xnorm[i];

				srow[tid] = i;
				if (!(all_exact || (a.cosine && xn == 0.0f)))
					thr = a.fbest[i] + kmg_settle_slack(a, xn, cmax);
				if (isnan(thr))
					thr = INFINITY;
			}
			sthr[tid] = thr;
		}
		__syncthreads();
		for (int e = tid; e < nr * q4; e += KMG_XCHUNK)
		{
			const int	r = e / q4;
			const int	q = e - r * q4;

			reinterpret_cast<float4 *>(xs)[e] =
				reinterpret_cast<const float4 *>(a.X + (size_t) srow[r] * dp)[q];
		}
		__syncthreads();

		double		bc[R];
		int			bj[R];

#pragma unroll
		for (int r = 0; r < R; r++)
		{
			bc[r] = INFINITY;
			bj[r] = INT_MAX;
		}
		if (tid < BN && j < a.k)
		{
			/*
			 * thread j's column of the tile: 4 steps (16 values) in flight
			 * ahead; bp points at the group being summed
			 */
			const float *bp = Bt + (size_t) c * dp * BN + tid;
			float		acc[R];
			float		bA[16],
						bB[16];

#pragma unroll
			for (int r = 0; r < R; r++)
				acc[r] = Cnt[j];
#pragma unroll
			for (int u = 0; u < 16; u++)
				bA[u] = u < dp ? bp[u * BN] : 0.0f;
			for (int q0 = 0; q0 < q4; q0 += 4)
			{
				const float *np = bp + 16 * BN;
				const int	left = dp - 4 * q0 - 16;	/* values past this group */

				if (left >= 16)
				{
#pragma unroll
					for (int u = 0; u < 16; u++)
						bB[u] = np[u * BN];
				}
				else
				{
#pragma unroll
					for (int u = 0; u < 16; u++)
						bB[u] = u < left ? np[u * BN] : 0.0f;
				}
#pragma unroll
				for (int v = 0; v < 4; v++)
				{
					if (q0 + v >= q4)
						break;
#pragma unroll
					for (int r = 0; r < R; r++)
					{
						const float4 x = reinterpret_cast<const float4 *>(xs + r * dp)[q0 + v];

						acc[r] = fmaf(x.x, bA[4 * v], acc[r]);
						acc[r] = fmaf(x.y, bA[4 * v + 1], acc[r]);
						acc[r] = fmaf(x.z, bA[4 * v + 2], acc[r]);
						acc[r] = fmaf(x.w, bA[4 * v + 3], acc[r]);
					}
				}
#pragma unroll
				for (int u = 0; u < 16; u++)
					bA[u] = bB[u];
				bp = np;
			}
#pragma unroll
			for (int r = 0; r < R; r++)
				if (r < nr && !(acc[r] > sthr[r]))
				{
					bc[r] = kmg_chain4(reinterpret_cast<const float4 *>(xs + r * dp),
									   reinterpret_cast<const float4 *>(a.C + (size_t) j * dp), q4,
									   a.cosine ? a.cnorm[j] : 0.0, a.cosine);
					bj[r] = j;
				}
		}

		/* argmin over the chunk, ties to the lower centroid */
#pragma unroll
		for (int r = 0; r < R; r++)
		{
			double		cst = bc[r];
			int			jj = bj[r];

			kmg_warp_argmin(cst, jj);
			if ((tid & 31) == 0)
			{
				scost[tid >> 5][r] = cst;
				sidx[tid >> 5][r] = jj;
			}
		}
		__syncthreads();
		if (tid < nr)
		{
			double		cst;
			int			jj;

			kmg_argmin_strided(&scost[0][tid], &sidx[0][tid], KMG_XCHUNK / 32, R, cst, jj);
			a.xcost[(size_t) (base + tid) * a.xchunks + c] = cst;
			a.xidx[(size_t) (base + tid) * a.xchunks + c] = jj;
		}
	}
}

/*
 * One exact chain continued over nq float4 steps of x and c, both in shared
 * memory (kmg_chain4's order and bits; the loads are independent of s, so the
 * unrolled body has them ahead of the dependent adds).
 */
__device__ __forceinline__ double
kmg_chain_seg(double s, const float4 *x4, const float4 *c4, int nq, int cosine)
{
#pragma unroll 4
	for (int q = 0; q < nq; q++)
	{
		const float4 xv = x4[q],
					cv = c4[q];

		kmg_exact_step(s, xv.x, cv.x, cosine);
		kmg_exact_step(s, xv.y, cv.y, cosine);
		kmg_exact_step(s, xv.z, cv.z, cosine);
		kmg_exact_step(s, xv.w, cv.w, cosine);
	}
	return s;
}

#define KMG_XSEG 64				/* float4 of a centroid staged per warp at a time */
#define KMG_XS 32				/* operand rows a stage (filter values, staged) */

/*
 * The chunked path (round 4): the same work items and outputs as
 * kmg_exact_chunk_kernel (16 rows x one tile of bn centroids; per row the
 * best (cost, centroid) of the tile in xcost/xidx), in three phases so that
 * no warp runs chains one after another:
 *  1. filter values: KMG_XG x bn threads, thread (g, col) owns centroid col of
 *	   the tile for rows 4g..4g+3 (the same fmaf order as the GEMM's recompute
 *	   of kmg_exact_chunk_kernel, so the same candidates); the KMG_XG groups
 *	   read the same column of the operand, three of them from L1.  Where
 *	   the value is within the slack of the row's best, (row, centroid) goes
 *	   on a list in shared memory.
 *  2. chains: one listed pair per warp; the warp stages the centroid row in
 *	   shared memory 64 float4 at a time (coalesced, the next segment's loads
 *	   in flight) and lane 0 runs the double chain from shared memory.  So an
 *	   item costs one chain's latency, not (rows with a candidate in the warp)
 *	   chains, each waiting on L2 every 16 floats as before.
 *  3. per row the least cost (non-negative doubles order as their bits:
 *	   atomicMin in shared memory), then the least centroid among those with
 *	   that cost: ties to the lower index, as before.
 * Old (round 3) timing: 72.7 us for 340 rows of 100000 x 256 x 1024 with 88
 * items of 8 warps, a warp running up to 16 chains serially.
 */
__global__ void __launch_bounds__(1024, 1)
kmg_exact_tile_kernel(kmg_args a)
{
	extern __shared__ __align__(16) unsigned char kmg_xsmem3[];
	const int	R = KMG_XG * KMG_XRPT;
	const int	tid = threadIdx.x;
	const int	lane = tid & 31,
				warp = tid >> 5,
				nwarps = blockDim.x >> 5;
	const int	dp = a.dp;
	const int	q4 = dp / 4;
	const int	bn = a.fbn;
	const int	g = tid / bn,
				col = tid - g * bn;
	const int	tiles = (a.kp + bn - 1) / bn;
	const float *Bt = a.fwork;
	const float *Cnt = a.fwork + (size_t) tiles * bn * dp;
	float4	   *xs4 = (float4 *) kmg_xsmem3;	/* R x q4: the rows */
	float4	   *cbuf = xs4 + (size_t) R * q4;	/* nwarps x KMG_XSEG: staged centroids */
	double	   *ccost = (double *) (cbuf + (size_t) nwarps * KMG_XSEG);	/* R x bn */
	int		   *cand = (int *) (ccost + (size_t) R * bn);	/* R x bn: row << 16 | col */
	__shared__ unsigned long long smin[KMG_XG * KMG_XRPT];
	__shared__ int sj[KMG_XG * KMG_XRPT];
	__shared__ int srow[KMG_XG * KMG_XRPT];
	__shared__ float sthr[KMG_XG * KMG_XRPT];
	__shared__ int ncand;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	namb = min(*(volatile int *) &a.ctl->namb, a.xcap);
	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int	nb = (namb + R - 1) / R;
	const int	nitems = nb * a.xchunks;

	for (int item = blockIdx.x; item < nitems; item += gridDim.x)
	{
		const int	b = item / a.xchunks;
		const int	c = item - b * a.xchunks;
		const int	base = b * R;
		const int	nr = namb - base < R ? namb - base : R;
		const int	j = c * bn + col;

		__syncthreads();
		if (tid < R)
		{
			float		thr = INFINITY;

			if (tid < nr)
			{
				const int	i = a.amb[base + tid];
				const float xn = a.xnorm[i];

				srow[tid] = i;
				if (!(all_exact || (a.cosine && xn == 0.0f)))
					thr = a.fbest[i] + kmg_settle_slack(a, xn, cmax);
				if (isnan(thr))
					thr = INFINITY;
			}
			sthr[tid] = thr;
			smin[tid] = 0x7ff0000000000000ULL;	/* +inf: no candidate in this tile */
			sj[tid] = INT_MAX;
		}
		if (tid == 0)
			ncand = 0;
		__syncthreads();
		for (int e = tid; e < nr * q4; e += blockDim.x)
		{
			const int	r = e / q4;
			const int	q = e - r * q4;

			xs4[e] = reinterpret_cast<const float4 *>(a.X + (size_t) srow[r] * dp)[q];
		}
		__syncthreads();

		/* 1. filter values of rows 4g..4g+3 for centroid j, and the list */
		{
			/*
			 * The tile's operand (dp x bn floats, contiguous) in chunks of
			 * KMG_XS rows, two stages of cp.async into the space of phase 2
			 * (cbuf onwards: 2 x KMG_XS x bn floats <= its 320 bn bytes), the
			 * next chunk in flight while this one is summed.  Round 4's loop
			 * read the column from L2 eight floats ahead; this one gained
			 * only 4 us of 51 (NOTES.md round 6): ncu shows the loop bound
			 * by shared memory (L1 94% busy, 8 loads per 16 fmaf), not L2.
			 * Same fmaf order, so the same candidates.
			 */
			const float *tile = Bt + (size_t) c * dp * bn;
			float	   *stage = (float *) cbuf;
			const int	nch = (dp + KMG_XS - 1) / KMG_XS;
			const float4 *xr = xs4 + (size_t) g * KMG_XRPT * q4;
			const float cnj = j < a.k ? Cnt[j] : 0.0f;
			float		acc[KMG_XRPT];

#pragma unroll
			for (int r = 0; r < KMG_XRPT; r++)
				acc[r] = cnj;
			for (int ch = -1; ch < nch; ch++)
			{
				/* chunk ch + 1 on its way, then chunk ch summed */
				if (ch + 1 < nch)
				{
					const int	e0 = (ch + 1) * KMG_XS;
					const int	nf4 = min(KMG_XS, dp - e0) * bn / 4;
					float	   *dst = stage + (size_t) ((ch + 1) & 1) * KMG_XS * bn;

					for (int f = tid; f < nf4; f += blockDim.x)
						kmg_cp16(dst + 4 * f, tile + (size_t) e0 * bn + 4 * f);
				}
				kmg_cp16_commit();
				if (ch < 0)
					continue;
				kmg_cp16_wait<1>();
				__syncthreads();
				{
					const float *bs = stage + (size_t) (ch & 1) * KMG_XS * bn + col;
					const int	q0 = ch * (KMG_XS / 4);
					const int	nq = min(KMG_XS, dp - ch * KMG_XS) / 4;

#pragma unroll 2
					for (int v = 0; v < nq; v++)
					{
						const float b0 = bs[(4 * v) * bn],
									b1 = bs[(4 * v + 1) * bn],
									b2 = bs[(4 * v + 2) * bn],
									b3 = bs[(4 * v + 3) * bn];

#pragma unroll
						for (int r = 0; r < KMG_XRPT; r++)
						{
							const float4 x = xr[r * q4 + q0 + v];

							acc[r] = fmaf(x.x, b0, acc[r]);
							acc[r] = fmaf(x.y, b1, acc[r]);
							acc[r] = fmaf(x.z, b2, acc[r]);
							acc[r] = fmaf(x.w, b3, acc[r]);
						}
					}
				}
				__syncthreads();	/* the buffer is refilled next round */
			}
			if (j < a.k)
#pragma unroll
				for (int r = 0; r < KMG_XRPT; r++)
				{
					const int	rr = g * KMG_XRPT + r;

					if (rr < nr && !(acc[r] > sthr[rr]))
						cand[atomicAdd(&ncand, 1)] = (rr << 16) | col;
				}
		}
		__syncthreads();

		/*
		 * 2. the chains: few pairs (nc <= warps), one per warp with the
		 * centroid staged in shared memory; many, one per thread, the
		 * centroid read from global memory with its loads ahead (kmg_chain4).
		 */
		const int	nc = ncand;
		float4	   *wb = cbuf + (size_t) warp * KMG_XSEG;

		if (nc > nwarps)
		{
			for (int t = tid; t < nc; t += blockDim.x)
			{
				const int	r = cand[t] >> 16;
				const int	jj = c * bn + (cand[t] & 0xffff);
				const double cost = kmg_chain4(xs4 + (size_t) r * q4,
											   reinterpret_cast<const float4 *>(a.C + (size_t) jj * dp),
											   q4, a.cosine ? a.cnorm[jj] : 0.0, a.cosine);

				ccost[t] = cost;
				atomicMin(&smin[r], (unsigned long long) __double_as_longlong(cost));
			}
		}
		else
		for (int t = warp; t < nc; t += nwarps)
		{
			const int	r = cand[t] >> 16;
			const int	jj = c * bn + (cand[t] & 0xffff);
			const float4 *c4 = reinterpret_cast<const float4 *>(a.C + (size_t) jj * dp);
			const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			const int	nseg = (q4 + KMG_XSEG - 1) / KMG_XSEG;
			float4		v0 = lane < q4 ? c4[lane] : z,
						v1 = lane + 32 < q4 ? c4[lane + 32] : z;
			double		s = 0.0;

			for (int sg = 0; sg < nseg; sg++)
			{
				const int	q0 = sg * KMG_XSEG;
				const int	qn = (sg + 1) * KMG_XSEG;

				__syncwarp();
				wb[lane] = v0;
				wb[lane + 32] = v1;
				__syncwarp();
				if (sg + 1 < nseg)
				{
					v0 = qn + lane < q4 ? c4[qn + lane] : z;
					v1 = qn + lane + 32 < q4 ? c4[qn + lane + 32] : z;
				}
				if (lane == 0)
					s = kmg_chain_seg(s, xs4 + (size_t) r * q4 + q0, wb,
									  min(KMG_XSEG, q4 - q0), a.cosine);
			}
			if (lane == 0)
			{
				const double cost = kmg_exact_finish(s, a.cosine ? a.cnorm[jj] : 0.0, a.cosine);

				ccost[t] = cost;
				atomicMin(&smin[r], (unsigned long long) __double_as_longlong(cost));
			}
		}
		__syncthreads();

		/* 3. the least centroid among those at the least cost */
		for (int t = tid; t < nc; t += blockDim.x)
		{
			const int	r = cand[t] >> 16;

			if ((unsigned long long) __double_as_longlong(ccost[t]) == smin[r])
				atomicMin(&sj[r], c * bn + (cand[t] & 0xffff));
		}
		__syncthreads();
		if (tid < nr)
		{
			a.xcost[(size_t) (base + tid) * a.xchunks + c] = __longlong_as_double((long long) smin[tid]);
			a.xidx[(size_t) (base + tid) * a.xchunks + c] = sj[tid];
		}
	}
}

/* The best over the chunks of each ambiguous row: its label. */
__global__ void
kmg_exact_merge_kernel(kmg_args a, int mode)
{
	int			moved = 0;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	namb = min(*(volatile int *) &a.ctl->namb, a.xcap);

	for (int s = blockIdx.x * blockDim.x + threadIdx.x; s - (int) threadIdx.x < namb;
		 s += gridDim.x * blockDim.x)
	{
		if (s < namb)
		{
			const double *pc = a.xcost + (size_t) s * a.xchunks;
			const int32_t *pj = a.xidx + (size_t) s * a.xchunks;
			double		cst;
			int			j;
			const int	i = a.amb[s];

			kmg_argmin_strided(pc, pj, a.xchunks, 1, cst, j);
			if (j == INT_MAX)
				j = 0;			/* cannot happen: the filter's best is a candidate */
			if (mode == KMG_MODE_ITER)
			{
				if (a.labels[i] != j)
				{
					moved++;
					a.labels[i] = j;
				}
			}
			else
				a.labels[i] = j;
		}
	}
	if (mode == KMG_MODE_ITER)
		kmg_block_add_int(moved, &a.ctl->moved);
}

/*
 * Rows of n a list keeps scratch for: n / share, at least 65536, at most
 * n (the rows past it take a slower path).
 */
int
kmg_scratch_rows(int64_t n, int share)
{
	int64_t		cap = n / share;

	if (cap < 65536)
		cap = 65536;
	if (cap > n)
		cap = n;
	return (int) cap;
}

/* Ambiguous rows a call keeps scratch for (the rest take the slower path). */
int
kmg_exact_cap(int64_t n)
{
	return kmg_scratch_rows(n, 8);
}

/* Raise kernel's dynamic shared memory limit to smem and launch it. */
template <typename... P, typename... A>
static cudaError_t
kmg_launch_smem(void (*kernel) (P...), unsigned grid, unsigned block, size_t smem,
				cudaStream_t stream, A... args)
{
	cudaError_t e = cudaFuncSetAttribute((const void *) kernel,
										 cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);

	if (e != cudaSuccess)
		return e;
	kernel<<<grid, block, smem, stream>>>(args...);
	return cudaGetLastError();
}

/*
 * Settle the rows kmg_classify listed, with the kernels the plan chose
 * (dispatch.cu): the first xcap of them by work items of a tile of
 * centroids (the tile kernel, or the chunk kernel with 16, 4 or 1 rows an
 * item), merged over the tiles; rows past xcap (degenerate inputs) by
 * kmg_exact_kernel, plan->xrows rows per block against all centroids.
 */
cudaError_t
kmg_exact_refine(const kmg_args *a, const kmg_assign_plan *plan, int mode, cudaStream_t stream)
{
	const int	sms = plan->sms;
	cudaError_t e;

	if (a->n == 0)
		return cudaSuccess;
	if (plan->settle == KMG_SETTLE_TILE)
	{
		const int	nt = KMG_XG * a->fbn;
		const size_t sm = (size_t) KMG_XG * KMG_XRPT * a->dp * sizeof(float) +
			(size_t) (nt / 32) * KMG_XSEG * sizeof(float4) +
			(size_t) KMG_XG * KMG_XRPT * a->fbn * (sizeof(double) + sizeof(int));

		e = kmg_launch_smem(kmg_exact_tile_kernel, sms, nt, sm, stream, *a);
	}
	else
	{
		const int	rc = plan->settle == KMG_SETTLE_CHUNK16 ? 16 :
			plan->settle == KMG_SETTLE_CHUNK4 ? 4 : 1;
		const int	wide = a->fbn == 256;

		if (!wide && a->fbn != 128)
			return cudaErrorInvalidValue;	/* the filter's two tiles (km_filter_tile_cols) */
		void		(*chunk) (kmg_args, int) = rc == 16 ?
			(wide ? kmg_exact_chunk_kernel<16, 256> : kmg_exact_chunk_kernel<16, 128>) :
			rc == 4 ? (wide ? kmg_exact_chunk_kernel<4, 256> : kmg_exact_chunk_kernel<4, 128>) :
			(wide ? kmg_exact_chunk_kernel<1, 256> : kmg_exact_chunk_kernel<1, 128>);
		void		(*one) (kmg_args, int) = wide ? kmg_exact_chunk_kernel<1, 256> : kmg_exact_chunk_kernel<1, 128>;
		/*
		 * The rows to settle are counted on the device.  Where they are
		 * few (a bounded iteration: 10 to 40 rows of B), items of 16 rows
		 * are a few latency-bound walks of dp that leave most SMs idle
		 * (B: 79 us for 12 rows, Nsight Compute); items of one row, 16
		 * times as many, settle the same rows in 32 us with the same
		 * chains and argmin, so the same bits.  Two launches, each
		 * returning at once where the count is the other's.
		 */
		const int	few = rc > 1 ? KMG_XFEW : 0;

		e = kmg_launch_smem(chunk, sms * 8, KMG_XCHUNK, (size_t) rc * a->dp * sizeof(float),
							stream, *a, -few);
		if (e == cudaSuccess && few > 0)
			e = kmg_launch_smem(one, sms * 8, KMG_XCHUNK, (size_t) a->dp * sizeof(float), stream, *a, few);
	}
	if (e != cudaSuccess)
		return e;
	{
		int64_t		mb = ((int64_t) a->xcap + 255) / 256;

		if (mb > (int64_t) sms * 4)
			mb = (int64_t) sms * 4;
		kmg_exact_merge_kernel<<<(unsigned) mb, 256, 0, stream>>>(*a, mode);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
	}

	/* rows past the scratch (degenerate inputs): xrows rows per block, all centroids */
	if (a->xcap < a->n)
	{
		const size_t smem = (size_t) plan->xrows * a->dp * sizeof(float);

		e = kmg_launch_smem(plan->xrows == 8 ? kmg_exact_kernel<8> : kmg_exact_kernel<1>,
							sms * 4, 256, smem, stream, *a, mode, a->xcap);
	}
	return e;
}

/*
 * Exact cost of every row to its labelled centroid: one thread per row,
 * the d-long double chain in index order (km_exact_cost's bits, with the
 * loads ahead of the adds: kmg_chain4).
 */
__global__ void
kmg_row_costs_kernel(kmg_args a)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride)
	{
		const int	j = a.labels[i];

		a.cost[i] = kmg_chain4(reinterpret_cast<const float4 *>(a.X + i * a.dp),
							   reinterpret_cast<const float4 *>(a.C + (size_t) j * a.dp),
							   a.dp / 4, a.cosine ? a.cnorm[j] : 0.0, a.cosine);
	}
}

cudaError_t
kmg_row_costs(const kmg_args *a, cudaStream_t stream)
{
	int64_t		blocks = (a->n + 127) / 128;

	if (a->n == 0)
		return cudaSuccess;
	if (blocks > 65535 * 8)
		blocks = 65535 * 8;
	kmg_row_costs_kernel<<<(unsigned) blocks, 128, 0, stream>>>(*a);
	return cudaGetLastError();
}
