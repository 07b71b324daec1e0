/*
 * wide.cu
 *	  The fused Lloyd pass for wide rows (128 < dp <= 1016) and k <= 16
 *	  (Fashion-MNIST: 70000 x 784, k = 10): one read of the rows does the
 *	  float32 filter, the label and moved count and the per-block M-step
 *	  sums; rows the filter cannot settle are listed per block, in row
 *	  order, and the block settles them after its last round and adds them
 *	  to its sums.  kmg_reduce_finalize then adds the partials in block
 *	  order (and its last block ends the iteration).
 *
 * Plain C reference: km_ref_assign / the sums of km_ref_lloyd
 * (kernels/bench/ref_kmeans.c); bench_kernels.cu checks labels and sums,
 * bench_engine.cu whole fits (Fashion-MNIST among them).
 *
 * Why it is fast.  70000 x 784 floats are 220 MB a pass (51 us at
 * 4.3 TB/s) against 0.55 G FMA (16 us of the FP32 pipe), so the rows are
 * read once and the FMA pipe and the memory stay busy together:
 *	- a block owns a contiguous range of rows and walks it in rounds of 32;
 *	  eight lanes share a row (each a 16-byte column chunk in eight, so a
 *	  group reads 128 contiguous bytes per step), four rows per warp; the
 *	  loads of the next four steps are in flight while the current four are
 *	  multiplied (registers double-buffered);
 *	- the centroids (times -2, centred when l2 is centred) sit in shared
 *	  memory: the eight distinct addresses of a warp's read fall in one
 *	  wavefront, so a read feeds 4 rows x 4 FMA per lane; the eight lanes'
 *	  partial dot products meet in a three-step butterfly (every lane gets
 *	  the same bits);
 *	- the sums: the round's rows are ordered by (label, row) with one ballot
 *	  per label; thread t owns column chunk t and adds the rows of each label
 *	  run in order (their bytes are in L2: the round was just read) into
 *	  registers, then once per run into the block's double accumulator in
 *	  shared memory, which only thread t ever touches: no atomics, a fixed
 *	  order;
 *	- no 784-step exact chain runs inside a round: a row within the slack
 *	  goes on its block's list with its candidate centroids, and after the
 *	  last round the block spreads the (row, candidate) chains over all its
 *	  threads (kmg_chain4: loads ahead of the dependent adds), then adds the
 *	  settled rows, in list order, to its sums.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <limits.h>
#include <math.h>
#include <string.h>

#define KMG_WIDE_NT 256
#define KMG_WIDE_S 8			/* lanes per row */
#define KMG_WIDE_RR 32			/* rows per round: 8 warps x 4 rows */
#define KMG_WIDE_U 4			/* chunk steps whose loads are in flight together */

/* Shared memory of one block (bytes from the start). */
typedef struct kmg_wide_layout
{
	size_t		acc;			/* k x dp doubles: the block's sums */
	size_t		c2;				/* KB x dp floats: -2 c' */
	size_t		mu;				/* dp floats */
	size_t		misc;			/* per-round arrays */
	size_t		xs;				/* the exact settling's scratch */
	size_t		total;
} kmg_wide_layout;

#define KMG_WX_BATCH 64			/* listed rows settled at a time */

static __host__ __device__ kmg_wide_layout
kmg_wide_layout_of(int KB, int k, int dp)
{
	kmg_wide_layout L;
	size_t		o = 0;

	L.acc = o;
	o += (size_t) k * dp * sizeof(double);
	L.c2 = o;
	o += (size_t) KB * dp * sizeof(float);
	L.mu = o;
	o += (size_t) dp * sizeof(float);
	o = KMG_ROUND_UP(o, 16);
	L.misc = o;
	/* slab, sorder, samb (ints), smask (u32), sw (float): RR each; cw, cnt: 16 each */
	o += 5 * KMG_WIDE_RR * sizeof(int) + 16 * sizeof(double) + 16 * sizeof(int) +
		32 * sizeof(double) + 32 * sizeof(int);
	o = KMG_ROUND_UP(o, 16);
	L.xs = o;
	/* costs, centroids, pair starts, labels */
	o += KMG_WX_BATCH * 16 * (sizeof(double) + sizeof(int)) + (KMG_WX_BATCH + 1) * sizeof(int) +
		KMG_WX_BATCH * sizeof(int);
	L.total = KMG_ROUND_UP(o, 16);
	return L;
}

/* The block's shared memory (kmg_wide_layout_of), as pointers. */
typedef struct kmg_wide_smem
{
	double	   *acc;			/* k x dp: the block's sums */
	float	   *C2;				/* KB x dp: -2 c'; after the rounds the listed rows */
	float	   *mu;				/* dp: the centring, or zeros */
	int		   *lab;			/* RR: label of the round's rows, -1: none */
	int		   *order;			/* RR: the round's rows by (label, row) */
	int		   *amb;			/* RR: 1: listed for the exact settling */
	uint32_t   *mask;			/* RR: candidates of listed rows */
	float	   *w;				/* RR: weights */
	double	   *ws;				/* 16: weight sums per cluster */
	int		   *cnt;			/* 16: counts per cluster */
	double	   *red;			/* 32 */
	int		   *redi;			/* 32 */
	unsigned char *xs;			/* the exact settling's scratch */
} kmg_wide_smem;

/*
 * Prologue: -2 c' (rows past k zero), |c'|^2 (+INF past k) and the
 * centring into shared memory; in MODE_ITER the block's sums cleared.
 */
template <int KB>
__device__ __forceinline__ void
kmg_wide_prologue(int tid, const kmg_args &a, const kmg_wide_smem &sm, float *scn, int *s_namb,
				  int k, int dp, int iter)
{
	for (int e = tid; e < KB * dp; e += KMG_WIDE_NT)
	{
		const int	j = e / dp;

		sm.C2[e] = j < k ? -2.0f * a.Cf[e] : 0.0f;
	}
	for (int j = tid; j < KB; j += KMG_WIDE_NT)
		scn[j] = j < k ? a.cn[j] : INFINITY;
	for (int c = tid; c < dp; c += KMG_WIDE_NT)
		sm.mu[c] = a.mu != NULL ? a.mu[c] : 0.0f;
	if (iter)
	{
		for (int e = tid; e < k * dp; e += KMG_WIDE_NT)
			sm.acc[e] = 0.0;
		if (tid < 16)
		{
			sm.ws[tid] = 0.0;
			sm.cnt[tid] = 0;
		}
	}
	if (tid == 0)
		*s_namb = 0;
}

/*
 * Phase 1 of a round: this lane's partial dot products of its row (its
 * chunks q = sl + S i, centred) with every centroid, the loads of the next
 * U chunks in flight while the current U are multiplied; then the eight
 * lanes' partials in a butterfly, so that every lane ends with the same bits.
 */
template <int KB>
__device__ __forceinline__ void
kmg_wide_dots(const kmg_wide_smem &sm, const float *xrow, bool have, int sl, int q4, int dp,
			  float (&f)[KB])
{
	constexpr int S = KMG_WIDE_S;
	constexpr int U = KMG_WIDE_U;

#pragma unroll
	for (int j = 0; j < KB; j++)
		f[j] = 0.0f;
	{
		const float4 *x4 = reinterpret_cast<const float4 *>(xrow);
		const int	nst = have ? (q4 - sl + S - 1) / S : 0;
		float4		xa[U],
					xb[U];

#pragma unroll
		for (int u = 0; u < U; u++)
			xa[u] = u < nst ? x4[sl + u * S] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		for (int i0 = 0; i0 < nst; i0 += U)
		{
#pragma unroll
			for (int u = 0; u < U; u++)
			{
				const int	i = i0 + U + u;

				xb[u] = i < nst ? x4[sl + i * S] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
#pragma unroll
			for (int u = 0; u < U; u++)
			{
				const int	q = sl + (i0 + u) * S;

				if (i0 + u < nst)
				{
					const float4 m = reinterpret_cast<const float4 *>(sm.mu)[q];
					const float4 xc = make_float4(xa[u].x - m.x, xa[u].y - m.y, xa[u].z - m.z,
												  xa[u].w - m.w);

#pragma unroll
					for (int j = 0; j < KB; j++)
					{
						const float4 c = reinterpret_cast<const float4 *>(sm.C2 + (size_t) j * dp)[q];

						f[j] = fmaf(xc.x, c.x, f[j]);
						f[j] = fmaf(xc.y, c.y, f[j]);
						f[j] = fmaf(xc.z, c.z, f[j]);
						f[j] = fmaf(xc.w, c.w, f[j]);
					}
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++)
				xa[u] = xb[u];
		}
	}
#pragma unroll
	for (int o = S / 2; o > 0; o >>= 1)
#pragma unroll
		for (int j = 0; j < KB; j++)
			f[j] += __shfl_xor_sync(0xffffffffu, f[j], o);
}

/*
 * The row's filter values, best and second, by its first lane: a row
 * beyond the slack gets the filter's label (with, in MODE_ITER, the moved
 * count and the estimate); a row within it is marked for the exact
 * settling with its candidate centroids.  Fills the round's arrays at rl.
 */
template <int KB>
__device__ __forceinline__ void
kmg_wide_filter_row(const kmg_args &a, const kmg_wide_smem &sm, const float *scn, float (&f)[KB],
					bool have, int64_t row, int rl, int d, int k, int iter, int cosine,
					float cmax, int all_exact, double &est, int &moved)
{
	float		f1 = INFINITY,
				f2 = INFINITY;
	int			b = 0;

#pragma unroll
	for (int j = 0; j < KB; j++)
	{
		const float v = scn[j] + f[j];

		f[j] = v;
		f2 = fminf(f2, fmaxf(f1, v));
		if (v < f1)
		{
			f1 = v;
			b = j;
		}
	}

	int			lab = -1,
				amb = 0;
	uint32_t	cand = 0;
	const float wv = (have && a.W != NULL) ? a.W[row] : 1.0f;

	if (have)
	{
		const float xn = a.xnorm[row];
		const float slack = km_filter_slack(d, xn, cmax);
		const int	all = all_exact || (cosine && xn == 0.0f) || !isfinite(f1 + slack);

		if (all || !(f2 - f1 > slack))
		{
			const float thr = f1 + slack;

			amb = 1;
#pragma unroll
			for (int j = 0; j < KB; j++)
				if (j < k && (all || !(f[j] > thr)))
					cand |= 1u << j;
		}
		else
		{
			lab = b;
			if (iter)
			{
				const int	old = a.labels[row];
				double		e = (double) f1 + (double) (xn * xn);

				e = e > 0.0 ? (cosine ? 0.5 * e : e) : 0.0;
				est += (double) wv * e;
				if (old != lab)
				{
					moved++;
					a.labels[row] = lab;
				}
			}
			else
				a.labels[row] = lab;
		}
	}
	sm.lab[rl] = lab;
	sm.amb[rl] = amb;
	sm.mask[rl] = cand;
	sm.w[rl] = wv;
}

/*
 * By warp 0, lane = the round's row: the rows marked for the exact
 * settling appended to the block's list (from its first row's slot, in row
 * order), and in MODE_ITER the round's rows ranked by (label, row), one
 * ballot per label.
 */
__device__ __forceinline__ void
kmg_wide_list(int lane, const kmg_args &a, const kmg_wide_smem &sm, int *s_namb, int *s_nvalid,
			  int64_t r0, int64_t rb, int k, int iter)
{
	const unsigned m = __ballot_sync(0xffffffffu, sm.amb[lane] != 0);

	if (m != 0)
	{
		const int	base = *s_namb;

		if (sm.amb[lane])
		{
			const int	pos = base + __popc(m & ((1u << lane) - 1u));

			a.wrow[r0 + pos] = (int32_t) (rb + lane);
			a.wmask[r0 + pos] = sm.mask[lane];
		}
		__syncwarp();
		if (lane == 0)
			*s_namb = base + __popc(m);
	}
	if (iter)
	{
		const int	lab = sm.lab[lane];
		int			rank = 0,
					total = 0;

		for (int j = 0; j < k; j++)
		{
			const unsigned mj = __ballot_sync(0xffffffffu, lab == j);

			if (j < lab)
				rank += __popc(mj);
			else if (j == lab)
				rank += __popc(mj & ((1u << lane) - 1u));
			total += __popc(mj);
		}
		if (lab >= 0)
			sm.order[rank] = lane;
		if (lane == 0)
			*s_nvalid = total;
	}
}

/*
 * Phase 2 of a round (MODE_ITER): thread t adds column chunk t of each
 * label run of the ranked rows, in row order (their bytes are in L2: the
 * round was just read), into registers, and once per run into the block's
 * sums, which only thread t touches; thread q4 does the weights and counts
 * run by run in the same order.
 */
__device__ __forceinline__ void
kmg_wide_round_sums(int tid, const kmg_args &a, const kmg_wide_smem &sm, int nv, int64_t rb,
					int dp, int q4, double (&run)[4])
{
	int			cur = -1;

	if (tid < q4)
	{
		float4		xa[8],
					xb[8];

		/* batch p0: the next batch's loads in flight while this one is added */
		auto fetch = [&](int p0, float4 *x) {
#pragma unroll
			for (int u = 0; u < 8; u++)
			{
				const int	p = p0 + u;

				x[u] = p < nv ? reinterpret_cast<const float4 *>(a.X + (size_t) (rb + sm.order[p]) * dp)[tid]
					: make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
		};

		fetch(0, xa);
		for (int p0 = 0; p0 < nv; p0 += 8)
		{
			fetch(p0 + 8, xb);
#pragma unroll
			for (int u = 0; u < 8; u++)
			{
				if (p0 + u >= nv)
					break;

				const int	rr = sm.order[p0 + u];
				const int	lu = sm.lab[rr];

				if (lu != cur)
				{
					if (cur >= 0)
					{
						double	   *dst = sm.acc + (size_t) cur * dp + 4 * tid;

						dst[0] += run[0];
						dst[1] += run[1];
						dst[2] += run[2];
						dst[3] += run[3];
					}
					cur = lu;
					run[0] = run[1] = run[2] = run[3] = 0.0;
				}
				if (a.W != NULL)
				{
					const double wd = (double) sm.w[rr];

					run[0] += wd * (double) xa[u].x;
					run[1] += wd * (double) xa[u].y;
					run[2] += wd * (double) xa[u].z;
					run[3] += wd * (double) xa[u].w;
				}
				else
				{
					run[0] += (double) xa[u].x;
					run[1] += (double) xa[u].y;
					run[2] += (double) xa[u].z;
					run[3] += (double) xa[u].w;
				}
			}
#pragma unroll
			for (int u = 0; u < 8; u++)
				xa[u] = xb[u];
		}
		if (cur >= 0)
		{
			double	   *dst = sm.acc + (size_t) cur * dp + 4 * tid;

			dst[0] += run[0];
			dst[1] += run[1];
			dst[2] += run[2];
			dst[3] += run[3];
		}
	}
	else if (tid == q4)
	{
		/* weights and counts, run by run in the same order */
		double		ws = 0.0;

		for (int p = 0; p < nv; p++)
		{
			const int	rr = sm.order[p];
			const int	lb = sm.lab[rr];

			if (lb != cur)
			{
				if (cur >= 0)
					sm.ws[cur] += ws;
				cur = lb;
				ws = 0.0;
			}
			ws += (double) sm.w[rr];
			sm.cnt[lb]++;
		}
		if (cur >= 0)
			sm.ws[cur] += ws;
	}
}

/*
 * After the last round, the listed rows, XB at a time: staged in shared
 * memory (the centroid copy's room, free now), a thread per (row,
 * candidate) chain (the row from shared memory, the centroid through L1,
 * kmg_chain4), the label the cheapest candidate (ties to the lower index),
 * then in MODE_ITER the rows added to the sums in list (row) order.
 */
template <int KB>
__device__ __forceinline__ void
kmg_wide_settle_listed(int tid, const kmg_args &a, const kmg_wide_smem &sm, int cnt, int64_t r0,
					   int dp, int q4, int iter, int cosine, double &est, int &moved)
{
	constexpr int XB = KB < 8 ? KB : 8;
	float	   *xst = sm.C2;	/* XB x dp floats */
	double	   *xcost = (double *) sm.xs;
	int		   *xj = (int *) (xcost + KMG_WX_BATCH * 16);
	int		   *xstart = xj + KMG_WX_BATCH * 16;
	int		   *xlab = xstart + KMG_WX_BATCH + 1;

	for (int e0 = 0; e0 < cnt; e0 += XB)
	{
		const int	ne = cnt - e0 < XB ? cnt - e0 : XB;

		for (int x = tid; x < ne * q4; x += KMG_WIDE_NT)
		{
			const int	e = x / q4;
			const int	q = x - e * q4;

			reinterpret_cast<float4 *>(xst)[x] =
				reinterpret_cast<const float4 *>(a.X + (size_t) a.wrow[r0 + e0 + e] * dp)[q];
		}
		if (tid == 0)
		{
			int			acc = 0;

			for (int e = 0; e < ne; e++)
			{
				xstart[e] = acc;
				acc += __popc(a.wmask[r0 + e0 + e]);
			}
			xstart[ne] = acc;
		}
		__syncthreads();
		for (int p = tid; p < xstart[ne]; p += KMG_WIDE_NT)
		{
			int			e = 0;

			while (xstart[e + 1] <= p)
				e++;

			uint32_t	m = a.wmask[r0 + e0 + e];

			for (int t = p - xstart[e]; t > 0; t--)
				m &= m - 1;

			const int	j = __ffs(m) - 1;

			xcost[p] = kmg_chain4(reinterpret_cast<const float4 *>(xst + (size_t) e * dp),
								  reinterpret_cast<const float4 *>(a.C + (size_t) j * dp), q4,
								  cosine ? a.cnorm[j] : 0.0, cosine);
			xj[p] = j;
		}
		__syncthreads();
		for (int e = tid; e < ne; e += KMG_WIDE_NT)
		{
			const int	row = a.wrow[r0 + e0 + e];
			double		bc = xcost[xstart[e]];
			int			bj = xj[xstart[e]];

			/* candidates in increasing j: ties keep the lower */
			for (int p = xstart[e] + 1; p < xstart[e + 1]; p++)
				if (xcost[p] < bc)
				{
					bc = xcost[p];
					bj = xj[p];
				}
			xlab[e] = bj;
			if (iter)
			{
				est += (double) (a.W != NULL ? a.W[row] : 1.0f) * bc;
				if (a.labels[row] != bj)
				{
					moved++;
					a.labels[row] = bj;
				}
			}
			else
				a.labels[row] = bj;
		}
		__syncthreads();
		if (iter && tid < q4)
		{
			/* column chunk tid of each listed row, in list order */
			for (int e = 0; e < ne; e++)
			{
				const float4 x = reinterpret_cast<const float4 *>(xst + (size_t) e * dp)[tid];
				const double w = a.W != NULL ? (double) a.W[a.wrow[r0 + e0 + e]] : 1.0;
				double	   *dst = sm.acc + (size_t) xlab[e] * dp + 4 * tid;

				dst[0] += a.W != NULL ? w * (double) x.x : (double) x.x;
				dst[1] += a.W != NULL ? w * (double) x.y : (double) x.y;
				dst[2] += a.W != NULL ? w * (double) x.z : (double) x.z;
				dst[3] += a.W != NULL ? w * (double) x.w : (double) x.w;
			}
		}
		else if (iter && tid == q4)
			for (int e = 0; e < ne; e++)
			{
				const int	row = a.wrow[r0 + e0 + e];

				sm.ws[xlab[e]] += a.W != NULL ? (double) a.W[row] : 1.0;
				sm.cnt[xlab[e]]++;
			}
		__syncthreads();
	}
}

/*
 * Epilogue (MODE_ITER): the block's partial, k x KMG_CW(dp) doubles (sums,
 * weights, counts; the estimate on cluster 0), and its moved count, for
 * reduce.cu.
 */
__device__ __forceinline__ void
kmg_wide_block_partial(int tid, int lane, int warp, const kmg_args &a, const kmg_wide_smem &sm,
					   int k, int dp, double est, int moved)
{
	const int	cw = KMG_CW(dp);
	double	   *out = a.part + (size_t) blockIdx.x * k * cw;

	for (int e = tid; e < k * cw; e += KMG_WIDE_NT)
	{
		const int	j = e / cw;
		const int	c = e - j * cw;
		double		v = 0.0;

		if (c < dp)
			v = sm.acc[(size_t) j * dp + c];
		else if (c == dp)
			v = sm.ws[j];
		else if (c == dp + 1)
			v = (double) sm.cnt[j];
		out[e] = v;
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		est += __shfl_xor_sync(0xffffffffu, est, o);
		moved += __shfl_xor_sync(0xffffffffu, moved, o);
	}
	if (lane == 0)
	{
		sm.red[warp] = est;
		sm.redi[warp] = moved;
	}
	__syncthreads();
	if (tid == 0)
	{
		double		e = sm.red[0];
		int			mv = sm.redi[0];

		for (int w = 1; w < KMG_WIDE_NT / 32; w++)
		{
			e += sm.red[w];
			mv += sm.redi[w];
		}
		out[dp + 2] = e;		/* the estimate, on cluster 0 */
		a.part_moved[blockIdx.x] = mv;
	}
}

/*
 * One pass (see the file header); KB: centroids of the unrolled loop
 * (>= k).  The kernel is its stages: the centroids in; per round of RR
 * rows the dot products, the filter and labels (rows within the slack
 * listed), the list and the ranking by label, and in MODE_ITER the round's
 * sums; then the listed rows settled exactly, and the block's partial.
 */
template <int KB>
__global__ void __launch_bounds__(KMG_WIDE_NT, 2)
kmg_wide_kernel(kmg_args a, int mode, int nstage, int groups)
{
	extern __shared__ __align__(16) unsigned char kmg_wsmem[];
	constexpr int S = KMG_WIDE_S;
	constexpr int RR = KMG_WIDE_RR;
	const int	dp = a.dp;
	const int	q4 = dp / 4;
	const int	d = a.d;
	const int	k = a.k;
	const int	iter = mode == KMG_MODE_ITER;
	const int	cosine = a.cosine;
	const kmg_wide_layout L = kmg_wide_layout_of(KB, k, dp);
	const kmg_wide_smem sm = {
		(double *) (kmg_wsmem + L.acc), (float *) (kmg_wsmem + L.c2), (float *) (kmg_wsmem + L.mu),
		(int *) (kmg_wsmem + L.misc), (int *) (kmg_wsmem + L.misc) + RR,
		(int *) (kmg_wsmem + L.misc) + 2 * RR, (uint32_t *) (kmg_wsmem + L.misc) + 3 * RR,
		(float *) (kmg_wsmem + L.misc) + 4 * RR, (double *) ((float *) (kmg_wsmem + L.misc) + 5 * RR),
		(int *) ((double *) ((float *) (kmg_wsmem + L.misc) + 5 * RR) + 16),
		(double *) ((int *) ((double *) ((float *) (kmg_wsmem + L.misc) + 5 * RR) + 16) + 16),
		(int *) ((double *) ((int *) ((double *) ((float *) (kmg_wsmem + L.misc) + 5 * RR) + 16) + 16) + 32),
		kmg_wsmem + L.xs
	};
	__shared__ int s_nvalid,
				s_namb;
	__shared__ float scn[KB];

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	grp = lane / S;		/* row of the warp */
	const int	sl = lane % S;		/* chunk lane */

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int64_t n = a.n;
	const int64_t r0 = (int64_t) blockIdx.x * n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * n / gridDim.x;

	kmg_wide_prologue<KB>(tid, a, sm, scn, &s_namb, k, dp, iter);

	double		est = 0.0;
	int			moved = 0;
	double		run[4] = {0.0, 0.0, 0.0, 0.0};	/* phase 2's running sums */

	for (int64_t rb = r0; rb < r1; rb += RR)
	{
		const int	rl = warp * 4 + grp;	/* row of the round */
		const int64_t row = rb + rl;
		const bool	have = row < r1;
		const float *xrow = a.X + (size_t) (have ? row : r0) * dp;
		float		f[KB];

		__syncthreads();		/* the last round's arrays are free; smem ready */
		kmg_wide_dots<KB>(sm, xrow, have, sl, q4, dp, f);
		if (sl == 0)
			kmg_wide_filter_row<KB>(a, sm, scn, f, have, row, rl, d, k, iter, cosine, cmax,
									all_exact, est, moved);
		__syncthreads();
		if (warp == 0)
			kmg_wide_list(lane, a, sm, &s_namb, &s_nvalid, r0, rb, k, iter);
		if (!iter)
			continue;
		__syncthreads();
		kmg_wide_round_sums(tid, a, sm, s_nvalid, rb, dp, q4, run);
	}

	__syncthreads();
	kmg_wide_settle_listed<KB>(tid, a, sm, s_namb, r0, dp, q4, iter, cosine, est, moved);
	if (tid == 0)
		a.wcount[blockIdx.x] = s_namb;
	if (!iter)
		return;
	__syncthreads();
	kmg_wide_block_partial(tid, lane, warp, a, sm, k, dp, est, moved);
}

/* The instances: centroids of the unrolled loop KB = 4, 8, 10, 12, 16. */
static const int kmg_wide_kbs[] = {4, 8, 10, 12, 16};
static const kmg_fused_fn kmg_wide_table[] = {
	kmg_wide_kernel<4>, kmg_wide_kernel<8>, kmg_wide_kernel<10>, kmg_wide_kernel<12>,
	kmg_wide_kernel<16>
};

/*
 * The instance for rows of dp padded floats and k centroids (the smallest
 * KB >= k), its threads, blocks per SM (its launch bounds), KB and shared
 * memory; NULL when none is compiled for the shape.  Thread t owns column
 * chunk t of a row and one more thread the weights, so dp <= 4 (256 - 1);
 * the per-cluster weight and count arrays hold 16 clusters.
 */
kmg_fused_fn
kmg_wide_instance(int dp, int k, int *threads, int *per_sm, int *kb, size_t *smem)
{
	if (dp % 8 != 0 || dp / 4 >= KMG_WIDE_NT || k < 1)
		return NULL;
	for (int i = 0; i < 5; i++)
		if (k <= kmg_wide_kbs[i])
		{
			*threads = KMG_WIDE_NT;
			*per_sm = 2;
			*kb = kmg_wide_kbs[i];
			*smem = kmg_wide_layout_of(*kb, k, dp).total;
			return kmg_wide_table[i];
		}
	return NULL;
}
