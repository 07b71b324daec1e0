/*
 * direct.cu
 *	  The fused Lloyd pass for small k * d: one read of the rows does the
 *	  float32 filter, the exact settling of close calls, the label and moved
 *	  count, and the per-block M-step sums.
 *
 * Plain C reference (kernels/bench/ref_kmeans.c, km_ref_assign/km_ref_sums):
 * labels = km_exact_nearest for every row; sums of w * x, w, count per
 * cluster in double.  bench_engine.cu compares a whole fit with it.
 *
 * Why it is fast.  The shapes it serves are memory bound (1M x 8, k = 16:
 * 32 MB per pass; 70000 x 784, k = 10: 220 MB), so the rows are read exactly
 * once and everything else is done on the copy in shared memory:
 *	- a persistent grid walks tiles of T rows; each tile is one contiguous
 *	  block of T * dp floats, fetched with cp.async two to four tiles ahead
 *	  of its use, so HBM stays busy while the tile before it is computed;
 *	- the centroids (filter copy) and |c|^2 sit in shared memory, padded to a
 *	  compile-time KB with +INF norms, so the k dot products of a row are an
 *	  unrolled register tile with no bounds test; S lanes share a row when d
 *	  is large (butterfly sum: every lane ends with the same bits);
 *	- rows the filter cannot settle (gap within km_filter_slack) are decided
 *	  with km_exact_cost among the centroids the filter cannot rule out, the
 *	  row read from shared memory, the candidates spread over the row's lanes;
 *	- the sums go into per-block double accumulators in shared memory, one
 *	  copy per group of threads so that no two threads ever add into the same
 *	  cell (no atomics, fixed order), then one fixed-order reduction writes the
 *	  block's partial.  kmg_reduce_finalize adds the partials in block order.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <limits.h>
#include <math.h>

/* Shared memory layout of one block (bytes from the start). */
typedef struct kmg_direct_layout
{
	size_t		acc;			/* groups x gstride doubles */
	size_t		est;			/* T doubles */
	size_t		cf;				/* KB x dp floats */
	size_t		cn;				/* KB floats */
	size_t		tiles;			/* nstage x T x (dp + 4) floats */
	size_t		lab;			/* T ints */
	size_t		w;				/* T floats */
	size_t		red;			/* 32 ints */
	size_t		total;
	size_t		gstride;		/* doubles per accumulator copy */
} kmg_direct_layout;

static __host__ __device__ kmg_direct_layout
kmg_direct_layout_of(int kb, int s, int nstage, int groups, int dp, int k)
{
	kmg_direct_layout L;
	const size_t T = KMG_NT / s;
	size_t		o = 0;

	/* odd stride in doubles: the copies start in different banks */
	L.gstride = (size_t) k * KMG_CW(dp) | 1;
	L.acc = o;
	o += (size_t) groups * L.gstride * sizeof(double);
	L.est = o;
	o += T * sizeof(double);
	o = KMG_ROUND_UP(o, 16);
	L.cf = o;
	o += (size_t) kb * dp * sizeof(float);
	L.cn = o;
	o += (size_t) kb * sizeof(float);
	o = KMG_ROUND_UP(o, 16);
	L.tiles = o;
	o += (size_t) nstage * T * (dp + 4) * sizeof(float);
	L.lab = o;
	o += T * sizeof(int);
	L.w = o;
	o += T * sizeof(float);
	L.red = o;
	o += 32 * sizeof(int);
	L.total = KMG_ROUND_UP(o, 16);
	return L;
}

/* Prologue: the filter copy of the centroids (rows past k zero, +INF norm) and the cleared accumulators. */
template <int KB>
__device__ __forceinline__ void
kmg_direct_prologue(int tid, const kmg_args &a, float *sC, float *scn, double *acc, int k, int dp,
					int iter, int groups, size_t gstride)
{
	for (int e = tid; e < KB * dp; e += KMG_NT)
		sC[e] = e < k * dp ? a.Cf[e] : 0.0f;
	for (int j = tid; j < KB; j += KMG_NT)
		scn[j] = j < k ? a.cn[j] : INFINITY;
	if (iter)
		for (size_t e = tid; e < (size_t) groups * gstride; e += KMG_NT)
			acc[e] = 0.0;
}

/*
 * This lane's dot products of its row (in shared memory) with every
 * centroid over the lane's 16-byte chunks, and |x|^2; then the S lanes'
 * partials in a butterfly (a + b == b + a, so every lane gets the same
 * bits).
 */
template <int KB, int S>
__device__ __forceinline__ void
kmg_direct_dots(const float *xs, const float *sC, int lane, int q4, int dp, float (&f)[KB],
				float &xx)
{
#pragma unroll
	for (int j = 0; j < KB; j++)
		f[j] = 0.0f;
	for (int q = lane; q < q4; q += S)
	{
		const float4 x = *reinterpret_cast<const float4 *>(xs + 4 * q);

		xx = fmaf(x.x, x.x, xx);
		xx = fmaf(x.y, x.y, xx);
		xx = fmaf(x.z, x.z, xx);
		xx = fmaf(x.w, x.w, xx);
#pragma unroll
		for (int j = 0; j < KB; j++)
		{
			const float4 c = *reinterpret_cast<const float4 *>(sC + j * dp + 4 * q);

			f[j] = fmaf(x.x, c.x, f[j]);
			f[j] = fmaf(x.y, c.y, f[j]);
			f[j] = fmaf(x.z, c.z, f[j]);
			f[j] = fmaf(x.w, c.w, f[j]);
		}
	}
#pragma unroll
	for (int o = S / 2; o > 0; o >>= 1)
	{
		xx += __shfl_xor_sync(0xffffffffu, xx, o);
#pragma unroll
		for (int j = 0; j < KB; j++)
			f[j] += __shfl_xor_sync(0xffffffffu, f[j], o);
	}
}

/*
 * The filter values (into f), the best with its centroid and the second
 * (ties to the lower index).  Computed in locals and copied out at the end:
 * updated through the references, the compare chain cost
 * kmg_direct_kernel<16,1> 56 more registers (ptxas -v, sm_90).
 */
template <int KB>
__device__ __forceinline__ void
kmg_direct_best(const float *scn, float (&f)[KB], float &f1_out, float &f2_out, int &b_out)
{
	float		f1 = INFINITY,
				f2 = INFINITY;
	int			b = 0;

#pragma unroll
	for (int j = 0; j < KB; j++)
	{
		float		v = scn[j] - 2.0f * f[j];

		f[j] = v;
		if (v < f1)
		{
			f2 = f1;
			f1 = v;
			b = j;
		}
		else if (v < f2)
			f2 = v;
	}
	f1_out = f1;
	f2_out = f2;
	b_out = b;
}

/*
 * A row too close to call in float: km_exact_cost among the centroids the
 * filter cannot rule out (all of them when all), the candidates spread over
 * the row's S lanes, then the lanes' least cost (ties to the lower index)
 * into label and ecost.
 */
template <int KB, int S>
__device__ __forceinline__ void
kmg_direct_settle(const kmg_args &a, const float *xs, const float *sC, const float (&f)[KB],
				  int lane, unsigned gmask, int all, float thr, int k, int d, int dp, int &label,
				  double &ecost)
{
	double		bc = INFINITY;
	int			bj = INT_MAX;

#pragma unroll
	for (int j = 0; j < KB; j++)
		if (j % S == lane && j < k && (all || !(f[j] > thr)))
		{
			/* l2: the filter copy in shared memory is the centroid itself */
			double		c = km_exact_cost(xs, a.cosine ? a.C + (size_t) j * dp : sC + j * dp,
										  a.cosine ? a.cnorm[j] : 0.0, d, a.cosine);

			if (KMG_BEFORE(c, j, bc, bj))
			{
				bc = c;
				bj = j;
			}
		}
	kmg_warp_argmin<S>(bc, bj, gmask);
	label = bj;
	ecost = bc;
}

/*
 * Epilogue (MODE_ITER): the block's partial, its accumulator copies added
 * in group order, and its moved count, for reduce.cu.
 */
__device__ __forceinline__ void
kmg_direct_block_partial(int tid, const kmg_args &a, const double *acc, size_t gstride,
						 int groups, int k, int dp, int *sred, int moved)
{
	{
		const size_t cells = (size_t) k * KMG_CW(dp);
		double	   *out = a.part + (size_t) blockIdx.x * cells;

		for (size_t e = tid; e < cells; e += KMG_NT)
		{
			double		s = acc[e];

			for (int gi = 1; gi < groups; gi++)
				s += acc[(size_t) gi * gstride + e];
			out[e] = s;
		}
	}
	for (int o = 16; o > 0; o >>= 1)
		moved += __shfl_xor_sync(0xffffffffu, moved, o);
	if ((tid & 31) == 0)
		sred[tid >> 5] = moved;
	__syncthreads();
	if (tid == 0)
	{
		int			s = 0;

		for (int wv = 0; wv < KMG_NT / 32; wv++)
			s += sred[wv];
		a.part_moved[blockIdx.x] = s;
	}
}

/*
 * One pass over the rows (see the file header).  KB: centroids of the
 * register tile (>= k); S: lanes per row.  The grid is persistent: block b
 * takes tiles b, b + gridDim.x, ... so each block's partial is a fixed
 * function of the input.  Per tile: its copies waited for (the next
 * nstage - 1 tiles' in flight), the dot products, the filter, the settling
 * of close calls, the labels, and in MODE_ITER the tile's sums; then the
 * block's partial.
 */
template <int KB, int S>
__global__ void __launch_bounds__(KMG_NT)
kmg_direct_kernel(kmg_args a, int mode, int nstage, int groups)
{
	extern __shared__ __align__(16) unsigned char kmg_smem[];
	constexpr int T = KMG_NT / S;
	const int	dp = a.dp;
	const int	d = a.d;
	const int	k = a.k;
	const int	dps = dp + 4;	/* odd number of 16-byte units: no conflicts */
	const int	q4 = dp / 4;
	const int	tid = threadIdx.x;
	const int	iter = mode == KMG_MODE_ITER;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const kmg_direct_layout L = kmg_direct_layout_of(KB, S, nstage, iter ? groups : 0, dp, k);
	double	   *acc = (double *) (kmg_smem + L.acc);
	double	   *sest = (double *) (kmg_smem + L.est);
	float	   *sC = (float *) (kmg_smem + L.cf);
	float	   *scn = (float *) (kmg_smem + L.cn);
	float	   *stiles = (float *) (kmg_smem + L.tiles);
	int		   *slab = (int *) (kmg_smem + L.lab);
	float	   *sw = (float *) (kmg_smem + L.w);
	int		   *sred = (int *) (kmg_smem + L.red);

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int64_t n = a.n;
	const int64_t ntiles = (n + T - 1) / T;

	kmg_direct_prologue<KB>(tid, a, sC, scn, acc, k, dp, iter, groups, L.gstride);

	/* tile into stage buf: T rows of dp floats (zeros past n), one cp.async group */
	auto issue = [&](int64_t tile, int buf) {
		if (tile < ntiles)
		{
			float	   *dst = stiles + (size_t) buf * T * dps;
			const float *src = a.X + tile * T * dp;
			const int64_t left = n - tile * T;
			const int	rows = left < T ? (int) left : T;

			for (int c = tid; c < T * q4; c += KMG_NT)
			{
				int			r = c / q4;
				int			q = c - r * q4;

				kmg_cp16_zfill(dst + r * dps + 4 * q,
							   r < rows ? (const void *) (src + (size_t) r * dp + 4 * q)
							   : (const void *) a.X, r < rows ? 16 : 0);
			}
		}
		kmg_cp16_commit();
	};

	/* Start the first nstage - 1 tiles. */
	for (int st = 0; st < nstage - 1; st++)
		issue(blockIdx.x + (int64_t) st * gridDim.x, st);

	const int	g = tid / S;	/* row of the tile */
	const int	lane = tid % S;
	const unsigned gmask = S == 32 ? 0xffffffffu :
		(((1u << S) - 1u) << ((tid & 31) & ~(S - 1)));
	int			moved = 0;

	for (int64_t m = 0;; m++)
	{
		const int64_t tile = blockIdx.x + m * gridDim.x;

		if (tile >= ntiles)
			break;
		issue(blockIdx.x + (m + nstage - 1) * gridDim.x, (int) ((m + nstage - 1) % nstage));
		kmg_cp16_wait_n(nstage - 1);
		__syncthreads();

		const float *xs = stiles + (size_t) (m % nstage) * T * dps + (size_t) g * dps;
		const int64_t row = tile * T + g;
		float		f[KB];
		float		xx = 0.0f;
		/* the row's old label and weight, loaded now so the latency hides */
		const int	old = (lane == 0 && iter && row < n) ? a.labels[row] : -1;
		const float wrow = (lane == 0 && row < n && a.W != NULL) ? a.W[row] : 1.0f;

		kmg_direct_dots<KB, S>(xs, sC, lane, q4, dp, f, xx);

		float		f1,
					f2;
		int			b;

		kmg_direct_best<KB>(scn, f, f1, f2, b);

		const float xn = sqrtf(xx);
		const float slack = km_filter_slack(d, xn, cmax);
		const int	all = all_exact || (a.cosine && xn == 0.0f) || !isfinite(f1 + slack);
		int			label = b;
		double		ecost = -1.0;

		if (row < n && (all || !(f2 - f1 > slack)))
			kmg_direct_settle<KB, S>(a, xs, sC, f, lane, gmask, all, f1 + slack, k, d, dp, label,
									 ecost);
		/* the row's label; in MODE_ITER moved, and w * cost for the sums */
		if (lane == 0)
		{
			if (row < n)
			{
				const float w = wrow;

				if (iter)
				{
					double		e = ecost;

					if (old != label)
					{
						moved++;
						a.labels[row] = label;
					}
					/* the filter's estimate; cosine filters 2 - 2 cos */
					if (e < 0.0)
					{
						e = (double) f1 + (double) (xx);
						e = e > 0.0 ? (a.cosine ? 0.5 * e : e) : 0.0;
					}
					sest[g] = (double) w * e;
				}
				else
					a.labels[row] = label;
				slab[g] = label;
				sw[g] = w;
			}
			else
				slab[g] = -1;
		}
		__syncthreads();

		/*
		 * The tile's sums (MODE_ITER): group gi of the block's threads adds
		 * rows gi, gi + groups, ... of the tile, in order, into its own
		 * accumulator copy, so no two threads ever add into the same cell.
		 * (Here, not in a function of its own: as one, ptxas spilled in
		 * other instances.)
		 */
		if (iter)
		{
			const int	tpg = KMG_NT / groups;
			const int	gi = tid / tpg;
			const int	ti = tid - gi * tpg;

			if (gi < groups)
			{
				double	   *accg = acc + (size_t) gi * L.gstride;
				const float *tbase = stiles + (size_t) (m % nstage) * T * dps;

				/* columns dp .. dp + 2 (w, count, estimate) spread like the others */
				for (int r = gi; r < T; r += groups)
				{
					const int	lab = slab[r];

					if (lab < 0)
						break;

					const double w = (double) sw[r];
					const float *xr = tbase + (size_t) r * dps;
					double	   *dst = accg + (size_t) lab * KMG_CW(dp);

					for (int c = ti; c < dp + 3; c += tpg)
						dst[c] += c < dp ? w * (double) xr[c] : c == dp ? w : c == dp + 1 ? 1.0 : sest[r];
				}
			}
		}
		__syncthreads();
	}
	kmg_cp16_wait<0>();

	if (!iter)
		return;

	__syncthreads();
	kmg_direct_block_partial(tid, a, acc, L.gstride, groups, k, dp, sred, moved);
}

/* The instances: register tile KB = 4, 8, 12, 16, 24, 32 x lanes per row S = 1, 4, 32. */
static const int kmg_kb_list[] = {4, 8, 12, 16, 24, 32};
static const int kmg_s_list[] = {1, 4, 32};

#define KMG_DIRECT_ROW(KB) \
	{kmg_direct_kernel<KB, 1>, kmg_direct_kernel<KB, 4>, kmg_direct_kernel<KB, 32>}

static const kmg_fused_fn kmg_direct_table[6][3] = {
	KMG_DIRECT_ROW(4), KMG_DIRECT_ROW(8), KMG_DIRECT_ROW(12),
	KMG_DIRECT_ROW(16), KMG_DIRECT_ROW(24), KMG_DIRECT_ROW(32)
};

/*
 * The instance for k centroids (the smallest KB >= k) and s lanes per row,
 * its threads and KB; NULL when none is compiled.  Its shared memory depends
 * on the stages and accumulator copies the plan gives it: kmg_direct_smem.
 */
kmg_fused_fn
kmg_direct_instance(int k, int s, int *threads, int *kb)
{
	int			j;

	for (j = 0; j < 3 && kmg_s_list[j] != s; j++)
		;
	if (j == 3 || k < 1)
		return NULL;
	for (int i = 0; i < 6; i++)
		if (k <= kmg_kb_list[i])
		{
			*threads = KMG_NT;
			*kb = kmg_kb_list[i];
			return kmg_direct_table[i][j];
		}
	return NULL;
}

/* Dynamic shared memory of a block (kmg_direct_layout_of). */
size_t
kmg_direct_smem(int kb, int s, int nstage, int groups, int dp, int k)
{
	return kmg_direct_layout_of(kb, s, nstage, groups, dp, k).total;
}

/* Bytes of one accumulator copy of a block: k rows of KMG_CW(dp) doubles, odd. */
size_t
kmg_direct_acc_bytes(int dp, int k)
{
	return ((size_t) k * KMG_CW(dp) | 1) * sizeof(double);
}
