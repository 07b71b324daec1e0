/*
 * narrow.cu
 *	  The fused Lloyd pass for narrow rows (dp <= 32) and k <= 32: one read
 *	  of the rows does the float32 filter, the exact settling of close calls,
 *	  the label and moved count and the per-block M-step sums, which every
 *	  block adds into order-free accumulators; then either the pass's last
 *	  block ends the iteration, or, in a fit's passes at dp <= 16, every
 *	  block of the next pass ends it for itself before its rows (the
 *	  parallel end), so an iteration is this kernel alone.
 *
 * Plain C reference: km_ref_assign / the sums of km_ref_lloyd
 * (kernels/bench/ref_kmeans.c); bench_kernels.cu checks labels and sums
 * against it, bench_engine.cu whole fits.
 *
 * Why it is fast.  1M x 8 rows with k = 16 is 32 MB a pass (7.5 us at
 * 4.3 TB/s), so everything is arranged around reading the rows once, and an
 * iteration is one launch:
 *	- every block owns a contiguous range of rows, cut into tiles of
 *	  256 x R rows; a thread holds its R rows in registers (16-byte loads,
 *	  coalesced across the warp), and the next tile's loads are issued before
 *	  the current tile's sums, so HBM never waits for the arithmetic (the
 *	  loads have no branch, kmg_narrow_load_rows says why);
 *	- a fit's passes are launched to overlap the kernel before them
 *	  (kmg_launch_overlapped): a block starts as soon as an SM has room, and
 *	  its first tile's rows are on their way while the pass before ends;
 *	- the centroids (times -2, centred when l2 is centred) sit in shared
 *	  memory and are read as broadcasts; each row keeps a running best and
 *	  second (no k-wide arrays in registers);
 *	- rows within the slack are settled in the thread, among the centroids
 *	  the filter cannot rule out (d <= 32: short chains);
 *	- the sums, where the tiles fit (d <= 16, few clusters: kmg_narrow_mma_on):
 *	  on the float64 tensor cores, each warp its own rows, the clusters'
 *	  indicator matrix times the rows (kmg_narrow_mma_sums), so the tile loop
 *	  has no block barrier; otherwise the tile's rows are listed by (label,
 *	  row) (a bit per row in its label's word, a warp scan per label, a scan
 *	  over the labels), and every (cluster, column) cell of the block
 *	  belongs to one thread, which adds its cluster's rows in row order into
 *	  a double register, four rows' loads in flight.  Either way no
 *	  floating-point atomics and a fixed order;
 *	- each block adds its partial (k (d + 1) doubles, k counts) to 128-bit
 *	  fixed-point accumulators with integer atomics (kmg_fix_atomic: the
 *	  total does not depend on the order), its estimate to a slot of its
 *	  own;
 *	- or, in a fit of unweighted rows on the tensor-core instances, the
 *	  sums are exact instead (kmg_narrow_xs_rows: integer limbs, rounded
 *	  once, the CPU engine's sums bit for bit and the same for any grid),
 *	  and with the parallel end kept from pass to pass, moved only by the
 *	  rows whose label changed;
 *	- the last block (ticket after a fence) turns them into the cluster
 *	  sums, clears them for the next pass, and ends the iteration
 *	  (finalize_block.cuh), so nothing else runs between two passes;
 *	- or, in a fit's passes at dp <= 16 on compute capability 9 and above
 *	  (kmg_narrow_parallel_end), no block waits for a last one: every block
 *	  of the next pass decodes the accumulators as soon as it may read them,
 *	  takes the same means and decisions as every other block, and goes on
 *	  with its rows; block 0 keeps the run's record.  Worth about 0.7 us an
 *	  iteration on 1M x 8 rows, k = 16 (an H200, NOTES round 28).
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"
#include "update/finalize_block.cuh"
#include "prep/prep.cuh"
#include "km_xsum.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KMG_NARROW_NT 256

/* Shared memory of one block (bytes from the start). */
typedef struct kmg_narrow_layout
{
	size_t		c2;				/* KB x DP floats: -2 c' (filter copy) */
	size_t		cr;				/* KB x DP floats: the centroids (exact costs) */
	size_t		cn;				/* KB floats: |c'|^2, +INF past k */
	size_t		cnorm;			/* KB doubles (cosine) */
	size_t		xs;				/* TR x DP floats: the tile's rows */
	size_t		mask;			/* TR / 32 x KB words (from here to w: the listing's room; with
								 * exact sums, the moved rows' list, kmg_narrow_xs_list) */
	size_t		pre;			/* TR / 32 x KB ints: rows of the label in earlier groups */
	size_t		list;			/* TR ints: the tile's rows by (label, row) */
	size_t		w;				/* TR floats */
	size_t		red;			/* 64 doubles */
	size_t		total;
} kmg_narrow_layout;

static __host__ __device__ kmg_narrow_layout
kmg_narrow_layout_of(int DP, int KB, int R)
{
	kmg_narrow_layout L;
	const size_t TR = (size_t) KMG_NARROW_NT * R;
	size_t		o = 0;

	L.c2 = o;
	o += (size_t) KB * DP * sizeof(float);
	L.cr = o;
	o += (size_t) KB * DP * sizeof(float);
	L.cn = o;
	o += (size_t) KB * sizeof(float);
	o = KMG_ROUND_UP(o, 16);
	L.cnorm = o;
	o += (size_t) KB * sizeof(double);
	L.xs = o;
	o += TR * DP * sizeof(float);
	L.mask = o;
	o += TR / 32 * KB * sizeof(uint32_t);
	L.pre = o;
	o += TR / 32 * KB * sizeof(int);
	L.list = o;
	o += TR * sizeof(int);
	L.w = o;
	o += TR * sizeof(float);
	o = KMG_ROUND_UP(o, 16);
	L.red = o;
	o += 64 * sizeof(double);
	L.total = KMG_ROUND_UP(o, 16);
	return L;
}

/*
 * Rows per thread for a padded width: at most 32 floats of rows in
 * registers, two blocks an SM (128 registers a thread; three blocks would
 * leave 80, and every instance then spills 76 to 600 bytes).  Three, not
 * four, at dp = 8: a block's range seldom fills its last tile, and every
 * warp runs every tile, so at 1M rows over 264 blocks (3788 rows a block)
 * tiles of 1024 rows make four trips over 4096 places and tiles of 768
 * five over 3840; on an H200 the iteration took 1.5 us less on uniform
 * rows (NOTES, round 27), where the smaller tile's cost a row (the
 * centroids' reads shared by three rows, not four) is about 1 % more.
 */
static __host__ __device__ constexpr int
kmg_narrow_rows(int DP)
{
	return DP <= 8 ? 3 : DP <= 16 ? 2 : 1;
}

#define KMG_NARROW_BPS 2		/* blocks per SM */

#define KMG_NARROW_XS_LIMBS 4	/* words of an exact sum's cell (kmg_narrow_xs_rows) */

/*
 * Words of one set of the accumulators: k x (d + 1) cells of two words (the
 * double partials' 128-bit fixed point) or, with exact sums (xs), of
 * KMG_NARROW_XS_LIMBS; k counts; then one word of two ints, the pass's
 * moved and exactly settled rows (the parallel end's:
 * kmg_narrow_set_counts), and an even count of them (16-byte copies:
 * kmg_narrow_end_load).  a.nfix holds three sets of the larger size
 * (kmg_narrow_parallel_end says why); a pass that ends its own iteration
 * uses the first.
 */
static __host__ __device__ int
kmg_narrow_counts_word(int k, int d, bool xs)
{
	return (xs ? KMG_NARROW_XS_LIMBS : 2) * k * (d + 1) + k;
}

/* the words a set uses */
static __host__ __device__ int
kmg_narrow_usedwords(int k, int d, bool xs)
{
	return KMG_ROUND_UP(kmg_narrow_counts_word(k, d, xs) + 1, 2);
}

/* a set's room: either layout */
static __host__ __device__ int
kmg_narrow_setwords(int k, int d)
{
	return kmg_narrow_usedwords(k, d, true);
}

/* The moved and exactly settled counts of a set. */
static __device__ __forceinline__ int *
kmg_narrow_set_counts(unsigned long long *set, int k, int d, bool xs)
{
	return reinterpret_cast<int *>(set + kmg_narrow_counts_word(k, d, xs));
}

/* The block's shared memory (kmg_narrow_layout_of), as pointers. */
typedef struct kmg_narrow_smem
{
	float	   *C2;				/* KB x DP: -2 c' (filter copy) */
	float	   *Cr;				/* KB x DP: the centroids (exact costs) */
	float	   *cn;				/* KB: |c'|^2, +INF past k */
	double	   *cnorm;			/* KB (cosine) */
	float	   *xs;				/* TR x DP: the tile's raw rows */
	uint32_t   *mask;			/* TR / 32 x KB: a bit per row in its label's word */
	int		   *pre;			/* TR / 32 x KB: rows of the label in earlier groups */
	int		   *list;			/* TR: the tile's rows by (label, row) */
	float	   *w;				/* TR: the rows' weights */
	double	   *red;			/* 64 doubles: a block's warps' sums (32 ints from red + 32) */
} kmg_narrow_smem;

/*
 * Prologue: the centroids into shared memory; rows past k are zeros with
 * +INF norm, never chosen.  In two halves, so that the loads are in flight
 * with the run's state (kmg_narrow_kernel reads both before it looks at
 * either): a thread's share into registers, then into shared memory.
 */
template <int DP, int KB>
struct kmg_narrow_cload
{
	static constexpr int E = (KB * DP + KMG_NARROW_NT - 1) / KMG_NARROW_NT;	/* elements a thread */
	float		c2[E];			/* -2 c' */
	float		cr[E];			/* c */
	float		cn;				/* |c'|^2 of centroid tid (tid < KB) */
	double		cnorm;
};

template <int DP, int KB>
__device__ __forceinline__ void
kmg_narrow_centroids_load(int tid, const kmg_args &a, int k, int cosine, kmg_narrow_cload<DP, KB> &cl)
{
#pragma unroll
	for (int i = 0; i < cl.E; i++)
	{
		const int	e = tid + i * KMG_NARROW_NT;
		const int	j = e / DP;
		const bool	in = e < KB * DP && j < k;

		cl.c2[i] = in ? -2.0f * a.Cf[(size_t) j * a.dp + e % DP] : 0.0f;
		cl.cr[i] = in ? a.C[(size_t) j * a.dp + e % DP] : 0.0f;
	}
	cl.cn = tid < k ? a.cn[tid] : INFINITY;
	cl.cnorm = (tid < k && cosine) ? a.cnorm[tid] : 1.0;
}

template <int DP, int KB>
__device__ __forceinline__ void
kmg_narrow_centroids_store(int tid, const kmg_narrow_smem &sm, const kmg_narrow_cload<DP, KB> &cl)
{
#pragma unroll
	for (int i = 0; i < cl.E; i++)
	{
		const int	e = tid + i * KMG_NARROW_NT;

		if (e < KB * DP)
		{
			sm.C2[e] = cl.c2[i];
			sm.Cr[e] = cl.cr[i];
		}
	}
	if (tid < KB)
	{
		sm.cn[tid] = cl.cn;
		sm.cnorm[tid] = cl.cnorm;
	}
}

/*
 * This thread's R rows of the tile at base (row = base + r * NT + tid) into
 * registers, 16 bytes a load, with their weights.  A place past r1 loads
 * the block's last row (row 0 for an empty block at the start of the
 * data), so the loads have no branch: with one, the compiler loaded each
 * row into temporaries and copied them into xr at the branch's join, and
 * each copy waited for its row (four round trips in turn where the next
 * tile's loads were meant to be in flight under the sums).  Such a place is
 * never used: the settling gives it label -1 (no estimate, no label stored,
 * no moved count), and the sums take no row of label -1: the listing lists
 * none, and the tensor cores multiply its values and weight (a real row's,
 * finite) by an indicator of 0.
 */
static __device__ __forceinline__ int64_t
kmg_narrow_at(int64_t row, int64_t r1)
{
	return max(row < r1 ? row : r1 - 1, (int64_t) 0);	/* a row of the data (n >= 1) */
}

template <int DP, int R>
__device__ __forceinline__ void
kmg_narrow_load_rows(int tid, const kmg_args &a, int64_t base, int64_t r1, float4 (&xr)[R][DP / 4],
					 float (&wr)[R])
{
#pragma unroll
	for (int r = 0; r < R; r++)
	{
		const int64_t at = kmg_narrow_at(base + (int64_t) r * KMG_NARROW_NT + tid, r1);
		const float4 *src = reinterpret_cast<const float4 *>(a.X + (size_t) at * DP);

#pragma unroll
		for (int q = 0; q < DP / 4; q++)
			xr[r][q] = src[q];
		wr[r] = a.W != NULL ? a.W[at] : 1.0f;
	}
}

/* The same places' labels of the pass before (MODE_ITER; -1 otherwise). */
template <int R>
__device__ __forceinline__ void
kmg_narrow_load_old(int tid, const kmg_args &a, int64_t base, int64_t r1, int iter, int (&old)[R])
{
#pragma unroll
	for (int r = 0; r < R; r++)
		old[r] = iter ? a.labels[kmg_narrow_at(base + (int64_t) r * KMG_NARROW_NT + tid, r1)] : -1;
}

/* Both: the next tile's loads. */
template <int DP, int R>
__device__ __forceinline__ void
kmg_narrow_load(int tid, const kmg_args &a, int64_t base, int64_t r1, int iter, float4 (&xr)[R][DP / 4],
				int (&old)[R], float (&wr)[R])
{
	kmg_narrow_load_rows<DP, R>(tid, a, base, r1, xr, wr);
	kmg_narrow_load_old<R>(tid, a, base, r1, iter, old);
}

/*
 * |x'|^2 of a row in registers, in the order the filter's slack was
 * reckoned for (bench_narrow_floor.cu takes it too).
 */
template <int DP>
__device__ __forceinline__ float
kmg_narrow_norm2(const float4 (&x)[DP / 4])
{
	float		s = 0.0f;

#pragma unroll
	for (int q = 0; q < DP / 4; q++)
	{
		s = fmaf(x[q].x, x[q].x, s);
		s = fmaf(x[q].y, x[q].y, s);
		s = fmaf(x[q].z, x[q].z, s);
		s = fmaf(x[q].w, x[q].w, s);
	}
	return s;
}

/*
 * The tile's raw rows and weights into shared memory (the exact costs and
 * the sums read them there), then the rows in registers centred in place,
 * x' = fl(x - mu), and |x'|^2 of each.
 */
template <int DP, int R>
__device__ __forceinline__ void
kmg_narrow_stage_rows(int tid, const kmg_args &a, const kmg_narrow_smem &sm, float4 (&xr)[R][DP / 4],
					  const float (&wr)[R], float (&xx)[R])
{

#pragma unroll
	for (int r = 0; r < R; r++)
	{
		const int	p = r * KMG_NARROW_NT + tid;

#pragma unroll
		for (int q = 0; q < DP / 4; q++)
			reinterpret_cast<float4 *>(sm.xs + p * DP)[q] = xr[r][q];
		sm.w[p] = wr[r];
	}

	if (a.mu != NULL)
	{
#pragma unroll
		for (int q = 0; q < DP / 4; q++)
		{
			const float4 m = reinterpret_cast<const float4 *>(a.mu)[q];

#pragma unroll
			for (int r = 0; r < R; r++)
			{
				xr[r][q].x -= m.x;
				xr[r][q].y -= m.y;
				xr[r][q].z -= m.z;
				xr[r][q].w -= m.w;
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++)
		xx[r] = kmg_narrow_norm2<DP>(xr[r]);
}

/*
 * The filter values, centroid by centroid (one broadcast read of a centroid
 * serves R rows): each row's best value f1, its centroid b, and the second
 * value f2.
 */
template <int DP, int KB, int R>
__device__ __forceinline__ void
kmg_narrow_filter(const kmg_narrow_smem &sm, const float4 (&xr)[R][DP / 4], float (&f1)[R],
				  float (&f2)[R], int (&b)[R])
{
#pragma unroll
	for (int r = 0; r < R; r++)
	{
		f1[r] = INFINITY;
		f2[r] = INFINITY;
		b[r] = 0;
	}
#pragma unroll
	for (int j = 0; j < KB; j++)
	{
		float4		c[DP / 4];
		const float cnj = sm.cn[j];

#pragma unroll
		for (int q = 0; q < DP / 4; q++)
			c[q] = reinterpret_cast<const float4 *>(sm.C2 + j * DP)[q];
#pragma unroll
		for (int r = 0; r < R; r++)
		{
			float		v = cnj;

#pragma unroll
			for (int q = 0; q < DP / 4; q++)
			{
				v = fmaf(xr[r][q].x, c[q].x, v);
				v = fmaf(xr[r][q].y, c[q].y, v);
				v = fmaf(xr[r][q].z, c[q].z, v);
				v = fmaf(xr[r][q].w, c[q].w, v);
			}
			f2[r] = fminf(f2[r], fmaxf(f1[r], v));
			if (v < f1[r])
			{
				f1[r] = v;
				b[r] = j;
			}
		}
	}
}

/*
 * Each row's label: the filter's best unless the second is within the
 * slack, then the exact winner among the centroids the filter cannot rule
 * out (in the thread: d <= 32, short chains, the row from shared memory).
 * In MODE_ITER also the moved count and the estimate w * cost (the
 * filter's where the row was not settled exactly).  lab: the label, or -1
 * past r1.
 */
template <int DP, int R>
__device__ __forceinline__ void
kmg_narrow_settle(int tid, const kmg_args &a, const kmg_narrow_smem &sm, int d, int k, int cosine,
				  int64_t base, int64_t r1, int iter, float cmax, int all_exact,
				  const float4 (&xr)[R][DP / 4],
				  const int (&old)[R], const float (&wr)[R], const float (&xx)[R],
				  const float (&f1)[R], const float (&f2)[R], const int (&b)[R],
				  int (&lab)[R], double &est, int &moved, int &nexact)
{
#pragma unroll
	for (int r = 0; r < R; r++)
	{
		const int64_t row = base + (int64_t) r * KMG_NARROW_NT + tid;
		const int	p = r * KMG_NARROW_NT + tid;
		const float xn = sqrtf(xx[r]);
		const float slack = km_filter_slack(d, xn, cmax);
		const int	all = all_exact || (cosine && xn == 0.0f) || !isfinite(f1[r] + slack);
		int			label = b[r];
		double		ecost = -1.0;

		if (row < r1 && (all || !(f2[r] - f1[r] > slack)))
		{
			/* too close to call in float: exact, among the candidates */
			const float thr = f1[r] + slack;
			double		bc = INFINITY;
			int			bj = -1;

			for (int j = 0; j < k; j++)
			{
				float		v = sm.cn[j];

				/* the same value as the filter's, bit for bit */
#pragma unroll
				for (int q = 0; q < DP / 4; q++)
				{
					const float4 c = reinterpret_cast<const float4 *>(sm.C2 + j * DP)[q];

					v = fmaf(xr[r][q].x, c.x, v);
					v = fmaf(xr[r][q].y, c.y, v);
					v = fmaf(xr[r][q].z, c.z, v);
					v = fmaf(xr[r][q].w, c.w, v);
				}
				if (all || !(v > thr))
				{
					double		s = 0.0;

					for (int i = 0; i < DP; i++)
						kmg_exact_step(s, sm.xs[p * DP + i], sm.Cr[j * DP + i], cosine);
					s = kmg_exact_finish(s, sm.cnorm[j], cosine);
					if (bj < 0 || s < bc)	/* j ascends: ties keep the lower */
					{
						bc = s;
						bj = j;
					}
				}
			}
			if (bj < 0)
			{
				bj = b[r];		/* cannot happen: the filter's best is a candidate */
				bc = 0.0;
			}
			label = bj;
			ecost = bc;
			nexact++;
		}
		if (row < r1)
		{
			if (iter)
			{
				double		e = ecost;

				if (e < 0.0)
				{
					/* the filter's estimate; cosine filters 2 - 2 cos */
					e = (double) f1[r] + (double) xx[r];
					e = e > 0.0 ? (cosine ? 0.5 * e : e) : 0.0;
				}
				est += (double) wr[r] * e;
				if (old[r] != label)
				{
					moved++;
					a.labels[row] = label;
				}
			}
			else
				a.labels[row] = label;
			lab[r] = label;
		}
		else
			lab[r] = -1;
	}
}

/* Each warp's rows grouped by label: a bit per row in its label's word. */
template <int KB, int R>
__device__ __forceinline__ void
kmg_narrow_mark(int tid, int lane, int warp, const kmg_narrow_smem &sm, int k, const int (&lab)[R])
{
	constexpr int NW = KMG_NARROW_NT / 32;

#pragma unroll
	for (int r = 0; r < R; r++)
		if (lane < k)
			sm.mask[(r * NW + warp) * KB + lane] = 0u;
	__syncwarp();
#pragma unroll
	for (int r = 0; r < R; r++)
		if (lab[r] >= 0)
			atomicOr(&sm.mask[(r * NW + warp) * KB + lab[r]], 1u << lane);
}

/*
 * After the marks (and a barrier): per label the rows in earlier groups (a
 * warp scan over the groups of 32 rows) and the count, the labels' starts
 * (a scan over the labels), then the list of the tile's rows by (label,
 * row).  Ends with a barrier.
 */
template <int KB, int R>
__device__ __forceinline__ void
kmg_narrow_order(int tid, int lane, int warp, const kmg_narrow_smem &sm, int k, const int (&lab)[R], int *s_count,
				 int *s_start)
{
	constexpr int NW = KMG_NARROW_NT / 32;
	constexpr int NG = KMG_NARROW_NT * R / 32;	/* groups of 32 rows; <= 32 */

	static_assert(NG <= 32, "a group count fits a warp scan");
	for (int j = warp; j < k; j += NW)
	{
		const int	v = lane < NG ? __popc(sm.mask[lane * KB + j]) : 0;
		int			incl = v;

		for (int o = 1; o < 32; o <<= 1)
		{
			const int	t = __shfl_up_sync(0xffffffffu, incl, o);

			if (lane >= o)
				incl += t;
		}
		if (lane < NG)
			sm.pre[lane * KB + j] = incl - v;
		if (lane == 31)
			s_count[j] = incl;
	}
	__syncthreads();
	if (warp == 0)
	{
		const int	v = lane < k ? s_count[lane] : 0;
		int			incl = v;

		for (int o = 1; o < 32; o <<= 1)
		{
			const int	t = __shfl_up_sync(0xffffffffu, incl, o);

			if (lane >= o)
				incl += t;
		}
		s_start[lane] = incl - v;
		if (lane == 31)
			s_start[32] = incl;
	}
	__syncthreads();
#pragma unroll
	for (int r = 0; r < R; r++)
		if (lab[r] >= 0)
		{
			const int	g = r * NW + warp;
			const uint32_t m = sm.mask[g * KB + lab[r]];

			sm.list[s_start[lab[r]] + sm.pre[g * KB + lab[r]] + __popc(m & ((1u << lane) - 1u))] =
				r * KMG_NARROW_NT + tid;
		}
	__syncthreads();
}

/*
 * The sums of the tile: every (cluster j, column c) cell of the block
 * belongs to one thread (cell e = tid + u NT), which adds its cluster's rows
 * in row order into a double, four rows' loads in flight; c == d is the
 * weight (and the count).
 */
template <int DP, int CPT>
__device__ __forceinline__ void
kmg_narrow_sums(int tid, const kmg_args &a, const kmg_narrow_smem &sm, int d, int ncol, int ncell,
				const int *s_count, const int *s_start, double (&acc)[CPT], int (&cnt)[CPT])
{
#pragma unroll
	for (int u = 0; u < CPT; u++)
	{
		const int	e = tid + u * KMG_NARROW_NT;

		if (e < ncell)
		{
			const int	j = e / ncol;
			const int	c = e - j * ncol;
			const int	p0 = s_start[j],
						p1 = p0 + s_count[j];
			double		s = acc[u];
			int			p = p0;

			if (c == d)
			{
				if (a.W != NULL)
					for (; p < p1; p++)
						s += (double) sm.w[sm.list[p]];
				else
					s += (double) (p1 - p0);
				cnt[u] += p1 - p0;
			}
			else
			{
				for (; p + 4 <= p1; p += 4)
				{
					int			ix[4];
					float		v[4],
								w[4];

#pragma unroll
					for (int q = 0; q < 4; q++)
						ix[q] = sm.list[p + q];
#pragma unroll
					for (int q = 0; q < 4; q++)
					{
						v[q] = sm.xs[ix[q] * DP + c];
						w[q] = a.W != NULL ? sm.w[ix[q]] : 1.0f;
					}
#pragma unroll
					for (int q = 0; q < 4; q++)
						s += a.W != NULL ? (double) w[q] * (double) v[q] : (double) v[q];
				}
				for (; p < p1; p++)
				{
					const int	ix = sm.list[p];

					s += a.W != NULL ? (double) sm.w[ix] * (double) sm.xs[ix * DP + c]
						: (double) sm.xs[ix * DP + c];
				}
			}
			acc[u] = s;
		}
	}
}

/* Epilogue of the listing's sums: the block's partial into the order-free accumulators fix (kmg_fix_atomic). */
template <int CPT>
__device__ __forceinline__ void
kmg_narrow_block_partial(int tid, const kmg_args &a, unsigned long long *fix, int d, int ncol, int ncell,
						 const double (&acc)[CPT], const int (&cnt)[CPT])
{
#pragma unroll
	for (int u = 0; u < CPT; u++)
	{
		const int	e = tid + u * KMG_NARROW_NT;

		if (e < ncell)
		{
			const int	c = e % ncol;

			kmg_fix_atomic(fix + 2 * e, acc[u], c == d ? a.wshift : a.sshift);
			if (c == d && cnt[u] > 0)
				atomicAdd(fix + 2 * ncell + e / ncol, (unsigned long long) cnt[u]);
		}
	}
}

/*
 * The block's estimate into its slot (a fixed-order sum of the warps), its
 * moved and exact counts into moved_out and exact_out (the control block's
 * moved and namb, or the parallel end's set).
 */
__device__ __forceinline__ void
kmg_narrow_block_counts(int tid, const kmg_narrow_smem &sm, double *slot, int *moved_out, int *exact_out,
						double est, int moved, int nexact)
{
	const double e = kmg_block_counts(est, moved, nexact, moved_out, exact_out, sm.red);

	if (tid == 0)
		*slot = e;
}

/*
 * The sums on the double-precision tensor cores (DP <= 16 and few enough
 * tiles: kmg_narrow_mma_on).  A tile's sums are a product: the clusters'
 * indicator matrix (KB x rows, 0 or 1) times the rows (rows x DP), taken
 * eight rows at a time by mma m16n8k8 in float64.  Each product of the
 * indicator is exact (x or 0), so every cell adds its cluster's values in
 * double, in an order fixed by the rows' places in the warp: the result
 * depends on the rows and the grid only, as the listing's row-order sums
 * did.  A warp sums its own rows (those of its lanes, already in shared
 * memory for the exact costs), so the tile loop has no block barrier left;
 * the warps' partials meet once, at the block's end, in warp order.
 * Clusters sit in m-tiles of 16 (the A fragment's rows), columns in
 * n-tiles of 8 (B's columns); with weights, one more n-tile sums w in its
 * column 0.  Counts are integers (shared-memory atomics: order-free).
 *
 * m16n8k8 float64 fragments (lane = 4 g + t): a = A[g][t], A[g + 8][t],
 * A[g][t + 4], A[g + 8][t + 4]; b = B[t][g], B[t + 4][g]; d = D[g][2 t],
 * D[g][2 t + 1], D[g + 8][2 t], D[g + 8][2 t + 1].  One instruction takes
 * eight rows for sixteen clusters: half the instructions of four m8n8k4
 * (two m-tiles of 8, two steps of 4 rows), and half the indicator and
 * address work around them.
 */
/*
 * The shapes of the tensor-core sums: those the m8n8k4 form's accumulators
 * fitted (at most four tiles of 8 x 8 with the weights').  In m-tiles of 16
 * the (16, 8) instance keeps 12 doubles of them, rows g + 8 never being
 * clusters.  ptxas -v with the exact sums (round 30): on sm_80 no instance
 * has a stack frame; on sm_90a (16, 8) spills 4 bytes and (24, 32) 8, as
 * (24, 32) did before (the sums' one row a value, kmg_narrow_xs_value, out
 * of line: inline it made (16, 8) and (16, 4) spill 44 and 60 bytes).
 */
template <int DP, int KB>
__host__ __device__ constexpr bool
kmg_narrow_mma_on()
{
	return DP <= 16 && ((KB + 7) / 8) * (DP / 8 + 1) <= 4;
}

/* m-tiles of 16 clusters */
template <int KB>
__host__ __device__ constexpr int
kmg_narrow_mma_mt()
{
	return (KB + 15) / 16;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
/* d0, d1 += a b in m8n8k4 float64 fragments (lane 4 g + t: a = A[g][t], b = B[t][g], d = D[g][2 t], D[g][2 t + 1]). */
static __device__ __forceinline__ void
kmg_dmma884(double &d0, double &d1, double a, double b)
{
	asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
		: "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}
#endif

/*
 * d += a b in m16n8k8 float64 fragments.  Before sm_90 (no such shape) as
 * the four m8n8k4 it stands for, on the same registers: rows 0-7 of D from
 * (a[0], b0) and (a[2], b1), rows 8-15 from (a[1], b0) and (a[3], b1).
 */
static __device__ __forceinline__ void
kmg_dmma1688(double (&d)[4], const double (&a)[4], double b0, double b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		: "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
		: "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b0), "d"(b1));
#else
	kmg_dmma884(d[0], d[1], a[0], b0);
	kmg_dmma884(d[0], d[1], a[2], b1);
	kmg_dmma884(d[2], d[3], a[1], b0);
	kmg_dmma884(d[2], d[3], a[3], b1);
#endif
}

/*
 * One tile's rows of this warp into its accumulators: rows q = 32 r + l of
 * the warp (l its lane's place), eight a step (k = t: row 8 s + t, k = t +
 * 4: row 8 s + t + 4); the label of row q is lane l's lab[r], the row
 * itself sm.xs's row r NT + 32 warp + l (raw values).  Each lane also
 * counts its own rows (s_cnt).
 */
template <int DP, int KB, int R, bool weighted>
__device__ __forceinline__ void
kmg_narrow_mma_sums(int lane, int warp, const kmg_narrow_smem &sm, const int (&lab)[R], int *s_cnt,
					double (&acc)[kmg_narrow_mma_mt<KB>()][DP / 8][4], double (&accw)[kmg_narrow_mma_mt<KB>()][4])
{
	constexpr int MT = kmg_narrow_mma_mt<KB>();
	constexpr int NT8 = DP / 8;
	const int	g = lane >> 2;
	const int	t = lane & 3;

#pragma unroll
	for (int r = 0; r < R; r++)
	{
		if (lab[r] >= 0)
			atomicAdd(&s_cnt[lab[r]], 1);
#pragma unroll
		for (int s = 0; s < 4; s++)
		{
			const int	l0 = 8 * s + t;
			const int	lb0 = __shfl_sync(0xffffffffu, lab[r], l0);
			const int	lb1 = __shfl_sync(0xffffffffu, lab[r], l0 + 4);
			const int	p0 = r * KMG_NARROW_NT + warp * 32 + l0;
			double		w0 = 1.0,
						w1 = 1.0;

			if constexpr (weighted)
			{
				w0 = (double) sm.w[p0];
				w1 = (double) sm.w[p0 + 4];
			}
			double		b[NT8][2];

#pragma unroll
			for (int n = 0; n < NT8; n++)
			{
				const double x0 = (double) sm.xs[p0 * DP + 8 * n + g];
				const double x1 = (double) sm.xs[(p0 + 4) * DP + 8 * n + g];

				if constexpr (weighted)
				{
					b[n][0] = w0 * x0;
					b[n][1] = w1 * x1;
				}
				else
				{
					b[n][0] = x0;
					b[n][1] = x1;
				}
			}
#pragma unroll
			for (int m = 0; m < MT; m++)
			{
				const int	j0 = 16 * m + g;
				const bool	hi = j0 + 8 < KB;	/* the fragment's rows g + 8 are clusters */
				const double am[4] = {
					lb0 == j0 ? 1.0 : 0.0, hi && lb0 == j0 + 8 ? 1.0 : 0.0,
					lb1 == j0 ? 1.0 : 0.0, hi && lb1 == j0 + 8 ? 1.0 : 0.0
				};

#pragma unroll
				for (int n = 0; n < NT8; n++)
					kmg_dmma1688(acc[m][n], am, b[n][0], b[n][1]);
				if constexpr (weighted)
					kmg_dmma1688(accw[m], am, g == 0 ? w0 : 0.0, g == 0 ? w1 : 0.0);
			}
		}
	}
}

/*
 * Exact sums (a.nxs, in the instances that sum on the tensor cores).  A
 * float of the rows is m 2^(max(e, 1) - 150), m < 2^24; every nonzero value
 * of the data is a multiple of 2^nxs_e0 (the lowest bit any of them has,
 * km_xstats), so in units of 2^nxs_e0 it is the integer m << pos, pos =
 * max(e, 1) - 150 - nxs_e0 >= 0.  Each (cluster, column) cell is kept as
 * KMG_NARROW_XS_LIMBS signed 64-bit limbs of 32-bit weight, 2^(32 l): a
 * value adds its low 32 bits to limb pos / 32 and the rest (below 2^24)
 * to the next, with integer atomics, so no addition rounds and the order
 * does not matter (a limb stays below 2^33 n: n < 2^30).  The decode
 * joins a cell's limbs into one 128-bit integer and rounds the exact total
 * once (kmg_i128_round), as the CPU engine rounds its exact sums.
 *
 * Only the rows whose label changed are summed: +x into the new cluster,
 * -x out of the old one.  With the parallel end the sets are running sums
 * (each block of pass p adds its share of set p - 1 into set p:
 * kmg_narrow_xs_carry), so after pass p set p holds exactly what a fresh
 * sum of every row under its present label would hold.  The first pass of
 * a run, or after a re-seed (the sets cleared, the pass count restarted),
 * and every pass that ends its own iteration, sum every row (rebuild: the
 * old labels taken as none).  A block gathers its cells in shared memory
 * and adds them to the set once, at its end, limb by limb.  Where a pass
 * moves few rows (the pass before moved at most n / 32), a moved row is
 * only listed in the tile loop and summed at the block's end.
 *
 * What it buys (an H200, NOTES round 30): exactness, not time.  On 1M x 8
 * rows, k = 16 (0.7 % of the rows move an iteration on average, a CPU
 * model says) a fit's iteration takes what it took with the tensor-core
 * double sums: those ran while the next tile's loads were in flight, so
 * dropping them shortened nothing.
 */

/* limbs of a block's cells: KB x DP cells (none in the listing's instances) */
template <int DP, int KB>
__host__ __device__ constexpr int
kmg_narrow_xs_words()
{
	return kmg_narrow_mma_on<DP, KB>() ? KB * DP * KMG_NARROW_XS_LIMBS : 1;
}

/*
 * One value of a row into the block's cells (limb: KB x DP cells of
 * KMG_NARROW_XS_LIMBS): + into cluster j's cell of column c, - out of
 * cluster o's (o < 0: none).
 */
template <int DP>
__device__ __noinline__ void
kmg_narrow_xs_value(unsigned long long *limb, int j, int o, int c, float v, int e0)
{
	const uint32_t bits = __float_as_uint(v);
	const uint32_t mag = bits & 0x7fffffffu;
	const uint32_t e = mag >> 23;

	if (mag == 0)
		return;					/* zero: the padding, or a zero value */

	const int	pos = (int) (e != 0 ? e : 1) - 150 - e0;
	const unsigned long long part = (unsigned long long) ((mag & 0x7fffffu) | (e != 0 ? 0x800000u : 0u)) << (pos & 31);
	const unsigned long long lo = part & 0xffffffffull;
	const unsigned long long hi = part >> 32;
	const bool	neg = (bits >> 31) != 0;
	const int	at = c * KMG_NARROW_XS_LIMBS + (pos >> 5);
	unsigned long long *cj = limb + j * DP * KMG_NARROW_XS_LIMBS + at;

	atomicAdd(cj, neg ? 0ull - lo : lo);
	if (hi != 0)
		atomicAdd(cj + 1, neg ? 0ull - hi : hi);
	if (o >= 0)
	{
		unsigned long long *co = limb + o * DP * KMG_NARROW_XS_LIMBS + at;

		atomicAdd(co, neg ? lo : 0ull - lo);
		if (hi != 0)
			atomicAdd(co + 1, neg ? hi : 0ull - hi);
	}
}

/* The moved rows a block lists for its end (kmg_narrow_xs_rows), in the listing's room. */
typedef struct kmg_narrow_xs_list
{
	int2	   *e;				/* (row - r0, j | (o + 1) << 16) */
	int		   *n;				/* entries asked for (those past cap were summed at once) */
	int			cap;
} kmg_narrow_xs_list;

/*
 * The tile's rows whose label changed (lab: this thread's labels, old:
 * those of the pass before; rebuild: every row, old taken as none): their
 * counts into s_cnt (+1 to the new cluster, -1 to the old), their values
 * into the block's cells (limb).  defer: a pass that moves few rows lists
 * them for the block's end (kmg_narrow_xs_partial) instead: a shared
 * 64-bit add is a compare-and-swap loop, and a warp's one moved row a
 * tile held the warp for its 32 of them in turn (NOTES round 30); a row
 * past the list's room is summed at once.  The rows are read back from the
 * tile in shared memory (raw values: the next tile's loads take the
 * registers).
 */
template <int DP, int KB, int R>
__device__ __forceinline__ void
kmg_narrow_xs_rows(int tid, const kmg_args &a, const kmg_narrow_smem &sm, int64_t r0, int64_t base, bool rebuild,
				   bool defer, const int (&lab)[R], const int (&old)[R], int *s_cnt, unsigned long long *limb,
				   const kmg_narrow_xs_list &list)
{
#pragma unroll
	for (int r = 0; r < R; r++)
	{
		const int	j = lab[r];	/* -1: a place past the block's rows */
		const int	o = rebuild || j < 0 ? -1 : old[r];

		if (j == o)
			continue;
		atomicAdd(&s_cnt[j], 1);
		if (o >= 0)
			atomicAdd(&s_cnt[o], -1);
		if (defer)
		{
			const int	slot = atomicAdd(list.n, 1);

			if (slot < list.cap)
			{
				list.e[slot] = make_int2((int) (base + (int64_t) r * KMG_NARROW_NT + tid - r0), j | ((o + 1) << 16));
				continue;
			}
		}

		const float *x = sm.xs + (size_t) (r * KMG_NARROW_NT + tid) * DP;

#pragma unroll
		for (int c = 0; c < DP; c++)
			kmg_narrow_xs_value<DP>(limb, j, o, c, x[c], a.nxs_e0);
	}
}

/*
 * The block's end of exact sums: the listed rows' values into its cells
 * (a thread a (row, column), the rows read again from the data), then the
 * cells limb by limb into the set fix (reductions: nothing comes back), the
 * weight cell and the count word the block's count (signed: rows that
 * left count -1); zeros add nothing.
 */
template <int DP>
__device__ __forceinline__ void
kmg_narrow_xs_partial(int tid, const kmg_args &a, int64_t r0, unsigned long long *fix, int d, int ncol, int ncell,
					  unsigned long long *limb, const int *s_cnt, const kmg_narrow_xs_list &list)
{
	__syncthreads();			/* every warp's rows are in, and listed */

	const int	nl = min(*list.n, list.cap);

	for (int it = tid; it < nl * DP; it += KMG_NARROW_NT)
	{
		const int2	en = list.e[it / DP];
		const int	c = it % DP;

		kmg_narrow_xs_value<DP>(limb, en.y & 0xffff, (en.y >> 16) - 1, c,
								__ldg(a.X + (size_t) (r0 + en.x) * DP + c), a.nxs_e0);
	}
	__syncthreads();
	for (int e = tid; e < ncell; e += KMG_NARROW_NT)
	{
		const int	j = e / ncol;
		const int	c = e - j * ncol;
		unsigned long long *cell = fix + e * KMG_NARROW_XS_LIMBS;

		if (c < d)
		{
#pragma unroll
			for (int l = 0; l < KMG_NARROW_XS_LIMBS; l++)
			{
				const unsigned long long v = limb[(j * DP + c) * KMG_NARROW_XS_LIMBS + l];

				if (v != 0ull)
					kmg_red_add(cell + l, v);
			}
		}
		else if (s_cnt[j] != 0)
		{
			kmg_red_add(cell, (unsigned long long) (long long) s_cnt[j]);
			kmg_red_add(fix + KMG_NARROW_XS_LIMBS * ncell + j, (unsigned long long) (long long) s_cnt[j]);
		}
	}
}

/* A cell's limbs (exact sums) as the rounded sum. */
__device__ __forceinline__ double
kmg_narrow_xs_round(const unsigned long long (&l)[KMG_NARROW_XS_LIMBS], int e0)
{
	unsigned __int128 v = 0;

#pragma unroll
	for (int i = 0; i < KMG_NARROW_XS_LIMBS; i++)
		v += (unsigned __int128) (__int128) (long long) l[i] << (32 * i);
	return kmg_i128_round((unsigned long long) v, (unsigned long long) (v >> 64), e0);
}

/*
 * The block's partial from the warps' accumulators: each warp's cells into
 * shared memory (the rows' room, free after the last tile), then cell e
 * (cluster j, column c; c == d the weight) the warps' values added in warp
 * order, into the order-free accumulators fix as kmg_narrow_block_partial does.
 */
template <int DP, int KB>
__device__ __forceinline__ void
kmg_narrow_mma_partial(int tid, int lane, int warp, const kmg_args &a, const kmg_narrow_smem &sm,
					   unsigned long long *fix, int d, int ncol, int ncell, bool weighted, const double (&acc)[kmg_narrow_mma_mt<KB>()][DP / 8][4],
					   const double (&accw)[kmg_narrow_mma_mt<KB>()][4], const int *s_cnt)
{
	constexpr int MT = kmg_narrow_mma_mt<KB>();
	constexpr int NT8 = DP / 8;
	constexpr int NW = KMG_NARROW_NT / 32;
	constexpr int BC = DP + 1;	/* a cluster's cells in the buffer: DP columns, the weight */
	double	   *buf = reinterpret_cast<double *>(sm.xs);	/* NW x KB x BC */
	const int	g = lane >> 2;
	const int	t = lane & 3;

	static_assert((size_t) NW * KB * BC * sizeof(double) <=
				  (size_t) KMG_NARROW_NT * kmg_narrow_rows(DP) * DP * sizeof(float), "the buffer fits the rows' room");
	__syncthreads();			/* every warp is done with the rows */
#pragma unroll
	for (int m = 0; m < MT; m++)
#pragma unroll
		for (int h = 0; h < 2; h++)
		{
			const int	j = 16 * m + 8 * h + g;

			/* the fragment's rows past KB are no clusters: writing them would land in the next warp's cells */
			if (j >= KB)
				continue;

			double	   *cl = buf + ((size_t) warp * KB + j) * BC;

#pragma unroll
			for (int n = 0; n < NT8; n++)
			{
				cl[8 * n + 2 * t] = acc[m][n][2 * h];
				cl[8 * n + 2 * t + 1] = acc[m][n][2 * h + 1];
			}
			if (t == 0)
				cl[DP] = accw[m][2 * h];
		}
	__syncthreads();
	for (int e = tid; e < ncell; e += KMG_NARROW_NT)
	{
		const int	j = e / ncol;
		const int	c = e - j * ncol;
		double		v = 0.0;

		if (c < d || weighted)
		{
			const int	col = c < d ? c : DP;

			for (int w = 0; w < NW; w++)
				v += buf[((size_t) w * KB + j) * BC + col];
		}
		else
			v = (double) s_cnt[j];
		kmg_fix_atomic(fix + 2 * e, v, c == d ? a.wshift : a.sshift);
		if (c == d && s_cnt[j] > 0)
			atomicAdd(fix + 2 * ncell + j, (unsigned long long) s_cnt[j]);
	}
}

/*
 * Column c of cluster j's row of the cluster sums (k x KMG_CW(dp): d sums,
 * zeros to dp, the weight, the count, zeros) from a set of the accumulators
 * f: a cell's two words decoded (a sum, or at c == dp the weight), the
 * count's word, or 0 (xs: the exact sums' cells, kmg_narrow_xs_rows).
 * FROM_L2: f is the accumulators themselves, read past
 * L1 (other blocks' atomics wrote them) and cleared for the next pass;
 * else a copy in shared memory.  The last block and the parallel end decode
 * here.
 */
template <bool FROM_L2>
__device__ __forceinline__ double
kmg_narrow_clus_value(const kmg_args &a, unsigned long long *f, int j, int c, int d, int ncol, int ncell, bool xs)
{
	double		v = 0.0;

	const int	cw = xs ? KMG_NARROW_XS_LIMBS : 2;	/* a cell's words */

	if ((c < d || c == a.dp) && !xs)
	{
		unsigned long long *w = f + 2 * (j * ncol + (c < d ? c : d));
		const int	shift = c < d ? a.sshift : a.wshift;

		if (FROM_L2)
		{
			v = kmg_fix_decode(__ldcg(w), __ldcg(w + 1), shift);
			w[0] = 0ull;
			w[1] = 0ull;
		}
		else
			v = kmg_fix_decode(w[0], w[1], shift);
	}
	else if (c < d || c == a.dp)
	{
		/* exact sums: the sum rounded once; the weight is the count */
		unsigned long long *w = f + KMG_NARROW_XS_LIMBS * (j * ncol + (c < d ? c : d));
		unsigned long long l[KMG_NARROW_XS_LIMBS];

#pragma unroll
		for (int i = 0; i < KMG_NARROW_XS_LIMBS; i++)
		{
			l[i] = FROM_L2 ? __ldcg(w + i) : w[i];
			if (FROM_L2)
				w[i] = 0ull;
		}
		v = c < d ? kmg_narrow_xs_round(l, a.nxs_e0) : (double) (long long) l[0];
	}
	else if (c == a.dp + 1)
	{
		unsigned long long *w = f + cw * ncell + j;

		v = (double) (FROM_L2 ? __ldcg(w) : w[0]);
		if (FROM_L2)
			w[0] = 0ull;
	}
	return v;
}

/*
 * The estimate of a pass: its blocks' slots summed in a fixed tree (each
 * thread's share in block order, the warps' xor trees, the warps in order
 * through red, after a barrier: every thread of the block calls it), with
 * the block's total of n (each thread's in, the total out) in the same
 * tree; every thread gets both.
 */
__device__ __forceinline__ double
kmg_narrow_estimate(const double *slots, double *red, int &n)
{
	const int	lane = threadIdx.x & 31;
	int		   *redi = reinterpret_cast<int *>(red + 32);
	double		e = 0.0;

	for (int b = threadIdx.x; b < (int) gridDim.x; b += KMG_NARROW_NT)
		e += __ldcg(&slots[b]);
	for (int o = 16; o > 0; o >>= 1)
	{
		e += __shfl_xor_sync(0xffffffffu, e, o);
		n += __shfl_xor_sync(0xffffffffu, n, o);
	}
	if (lane == 0)
	{
		red[threadIdx.x >> 5] = e;
		redi[threadIdx.x >> 5] = n;
	}
	__syncthreads();
	e = red[0];
	n = redi[0];
	for (int w = 1; w < KMG_NARROW_NT / 32; w++)
	{
		e += red[w];
		n += redi[w];
	}
	return e;
}

/*
 * The pass's last block: every column of the cluster sums decoded from the
 * accumulators (which it clears for the next pass), into a.clus
 * and into shared memory (the rows' room), the estimate from the blocks'
 * slots in a fixed tree, then the end of the iteration
 * (finalize_block.cuh) from the shared copy.
 */
__device__ __forceinline__ void
kmg_narrow_last_block(int tid, int lane, int warp, const kmg_args &a, const kmg_narrow_smem &sm, int d, int k, int ncol,
					  int ncell, bool xs)
{
	const int	cw = KMG_CW(a.dp);
	double	   *sclus = reinterpret_cast<double *>(sm.xs);	/* k x cw, the rows' room is free */
	__shared__ int s_moved;
	int			nempty = 0;
	double		e;
	kmg_fin_reads fr;

	/* the end's own reads first, so that they and the accumulators' are one round trip */
	kmg_fin_read(a, KMG_FIN_ITER, fr);
	if (tid == 0)
		s_moved = *(volatile int *) &a.ctl->moved;
	/* every column of clus: sums, zeros, w, count, estimate (cluster 0, below) */
	for (int x = tid; x < k * cw; x += KMG_NARROW_NT)
	{
		const int	j = x / cw;
		const int	c = x - j * cw;
		const double v = kmg_narrow_clus_value<true>(a, a.nfix, j, c, d, ncol, ncell, xs);

		if (c == a.dp)
			nempty += !(v > 0.0);
		a.clus[x] = v;
		sclus[x] = v;
	}
	e = kmg_narrow_estimate(a.part, sm.red, nempty);	/* and the empty clusters; sclus is whole */
	if (tid == 0)
	{
		a.clus[a.dp + 2] = e;
		sclus[a.dp + 2] = e;
		a.ctl->nempty = nempty;
		a.ctl->ticket2 = 0;
	}
	__syncthreads();
	kmg_finalize_block_from(a, KMG_FIN_ITER, s_moved, nempty, sclus, fr);
}

/*
 * The parallel end's room in the rows' room of shared memory (free until
 * the first tile is staged): the sums' copy (k x CW doubles), the filter
 * copies (KB x DP floats), |c'| (KB floats), and the raw words of the set
 * it decodes.
 */
template <int DP, int KB>
struct kmg_narrow_endroom
{
	static constexpr size_t CLUS = 0;
	static constexpr size_t CF = CLUS + (size_t) KB * KMG_CW(DP) * sizeof(double);
	static constexpr size_t CNF = CF + (size_t) KB * DP * sizeof(float);
	static constexpr size_t RAW = KMG_ROUND_UP(CNF + (size_t) KB * sizeof(float), 16);
	static constexpr size_t END = RAW + (size_t) KMG_ROUND_UP((kmg_narrow_mma_on<DP, KB>() ? KMG_NARROW_XS_LIMBS : 2) *
															  KB * (DP + 1) + KB + 1, 2) * 8;

	static_assert(END <= (size_t) KMG_NARROW_NT * kmg_narrow_rows(DP) * DP * sizeof(float),
				  "the parallel end's copies fit the rows' room");
};

/*
 * The words of set (p - 1) mod 3, copied into the block's shared memory
 * (cp.async: no registers held, nothing waits for them here) with the
 * centroids' loads: one round trip for both.  kmg_narrow_parallel_end
 * waits for them.
 */
template <int DP, int KB>
__device__ __forceinline__ void
kmg_narrow_end_load(int tid, const kmg_args &a, const kmg_narrow_smem &sm, int d, int k, unsigned int p, bool xs)
{
	typedef kmg_narrow_endroom<DP, KB> room;
	const int	sw = kmg_narrow_setwords(k, d);
	const int	used = kmg_narrow_usedwords(k, d, xs);
	const unsigned long long *f = a.nfix + (size_t) ((p + 2) % 3) * sw;	/* (p - 1) mod 3 */
	unsigned long long *raw = reinterpret_cast<unsigned long long *>(reinterpret_cast<char *>(sm.xs) + room::RAW);

	for (int i = tid; 2 * i < used; i += KMG_NARROW_NT)
		kmg_cp16(raw + 2 * i, f + 2 * i);
	kmg_cp16_commit();
}

/*
 * Exact running sums (xs, pass p > 0 with the parallel end): this block's
 * share of set (p - 1) mod 3, from its shared copy (kmg_narrow_end_load,
 * whole once kmg_narrow_parallel_end has waited for it), added into set p
 * mod 3, which pass p - 1 cleared: set p ends as set p - 1 plus pass p's
 * moves.  Limbs and counts word by word (the moved and settled counts are
 * pass p's own).  The shares fall to the grid's last blocks (block 0 keeps
 * the run's record); before the first tile is staged, since the copy lies
 * in the rows' room.
 */
template <int DP, int KB>
__device__ __forceinline__ void
kmg_narrow_xs_carry(int tid, const kmg_narrow_smem &sm, unsigned long long *fix, int ncell, int k)
{
	typedef kmg_narrow_endroom<DP, KB> room;
	const unsigned long long *raw =
		reinterpret_cast<const unsigned long long *>(reinterpret_cast<const char *>(sm.xs) + room::RAW);

	for (int x = (int) (gridDim.x - 1 - blockIdx.x) * KMG_NARROW_NT + tid; x < KMG_NARROW_XS_LIMBS * ncell + k;
		 x += (int) gridDim.x * KMG_NARROW_NT)
		if (raw[x] != 0ull)
			kmg_red_add(fix + x, raw[x]);
}

/*
 * The parallel end (a.parallel_end, a fit's passes): every block of pass p
 * (p >= 1 since the run began or was re-seeded) ends iteration t = iter0 +
 * p, whose sums pass p - 1 left in set (p - 1) mod 3 of a.nfix, by itself,
 * so no block waits for a last one and nothing runs between two passes
 * but the launch.  After its wait (pass p - 1 has ended and its sums are
 * whole) the block decodes the set into its shared memory (the rows' room),
 * takes the same decisions from it as every other block (moved, empty
 * clusters, tol, max_iter: kmg_fin_stop_rule) and, where the centroids
 * move, every cluster's mean, filter copy and norms into its shared copies
 * by kmg_fin_cluster, the arithmetic of every finalize, so every block
 * holds the same bits, and the largest |c'| and the exactness flag the
 * filter takes.  Block 0 alone keeps the run's record: the cluster sums
 * (a.clus, with the estimate from pass p - 1's slots in a fixed tree), the
 * centroids and their copies, and the decisions (kmg_fin_decide: the
 * control block, the iteration's statistics).  Nothing another block of
 * pass p reads changes under it: it reads a.C where a cluster keeps its
 * centroid, and block 0 stores the same bits there; the stop flag block 0
 * may set is the decision every block takes.  Returns nonzero where the
 * run stops (or pauses for empty clusters): the block then ends.
 *
 * The sets turn over in threes: pass p adds into set p mod 3, pass p + 1
 * reads it, and pass p clears set (p + 1) mod 3, which pass p - 2 wrote and
 * pass p - 1 read, both ended (each block a share of its words).  The pass's
 * estimates go to slot half p mod 2 of a.part.  The host sees an
 * iteration's record one pass late, and queues one pass past max_iter
 * (driver/fit.cu); a re-seed starts the count afresh (kmg_fin_decide).
 */
template <int DP, int KB>
__device__ __forceinline__ int
kmg_narrow_parallel_end(int tid, int lane, int warp, const kmg_args &a, const kmg_narrow_smem &sm, int d, int k,
						unsigned int p, int t, const kmg_ctl &limits, float &cmax, int &all_exact, bool xs,
						int &moved_before)
{
	typedef kmg_narrow_endroom<DP, KB> room;
	constexpr int CW = KMG_CW(DP);
	constexpr int NW = KMG_NARROW_NT / 32;
	char	   *rr = reinterpret_cast<char *>(sm.xs);
	double	   *sclus = reinterpret_cast<double *>(rr + room::CLUS);	/* k x CW: the sums */
	float	   *scf = reinterpret_cast<float *>(rr + room::CF);	/* KB x DP: filter copies */
	float	   *scnf = reinterpret_cast<float *>(rr + room::CNF);	/* KB: |c'| */
	unsigned long long *raw = reinterpret_cast<unsigned long long *>(rr + room::RAW);
	const int	ncol = d + 1;
	const int	ncell = k * ncol;
	__shared__ int s_stop;
	__shared__ float s_cmax[NW];

	const float mu0 = a.mu != NULL && lane < d ? a.mu[lane] : 0.0f;
	const int	aliased = !a.cosine && a.mu == NULL;	/* the filter copy is the centroid */
	int			moved,
				namb,
				allx = 0;

	kmg_cp16_wait<0>();
	__syncthreads();			/* the set's words are in */
	{
		const int  *cnt = reinterpret_cast<const int *>(raw + kmg_narrow_counts_word(k, d, xs));

		moved = cnt[0];
		namb = cnt[1];
	}
	moved_before = moved;
	for (int x = tid; x < k * CW; x += KMG_NARROW_NT)
		sclus[x] = kmg_narrow_clus_value<false>(a, raw, x / CW, x % CW, d, ncol, ncell, xs);
	/* the filter copies' padding (kmg_fin_cluster writes the d columns): zeros, as every row's */
	for (int x = tid; x < k * DP; x += KMG_NARROW_NT)
		scf[x] = 0.0f;
	__syncthreads();

	int			nempty = 0;

	for (int j = 0; j < k; j++)
		nempty += !(sclus[j * CW + DP] > 0.0);

	const int	change = moved > 0 && nempty == 0;

	if (tid == 0)
		s_stop = moved > 0 && nempty > 0 ? KMG_PAUSE_EMPTY
			: kmg_fin_stop_rule(moved, (double) moved / (double) a.n, t, limits);
	if (change)
	{
		/* every cluster's new centroid (none is re-seeded here: a re-seed's end clears the flags) */
		const kmg_fin_out out = {sm.Cr, aliased ? sm.Cr : scf, sm.cn, scnf, sm.cnorm};
		float		cm = 0.0f;

		for (int j = warp; j < k; j += NW)
		{
			const double w = sclus[j * CW + DP];

			cm = fmaxf(cm, kmg_fin_cluster(a, j, w > 0.0, w, sclus, mu0, allx, out));
		}
		for (int o = 16; o > 0; o >>= 1)
			cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
		if (lane == 0)
			s_cmax[warp] = cm;
		allx = __syncthreads_or(allx);	/* a barrier: the clusters and the warps' slots are in place */
		cm = s_cmax[0];
		for (int w = 1; w < NW; w++)
			cm = fmaxf(cm, s_cmax[w]);
		cmax = cm;
		all_exact = allx;
		/* the filter's copy, -2 c' (exact: a power of two) */
		for (int x = tid; x < k * DP; x += KMG_NARROW_NT)
			sm.C2[x] = -2.0f * (aliased ? sm.Cr[x] : scf[x]);
	}
	__syncthreads();			/* s_stop */

	const int	stop = s_stop;

	if (blockIdx.x == 0)
	{
		/*
		 * The run's record: the sums with the estimate of pass p - 1's
		 * blocks (cluster 0's estimate column); the block's copies of the
		 * arrays kmg_fin_cluster writes (running it again into them, as
		 * the finalizes do, made four instances spill); the decisions.
		 * Block 0 is usually an SM's first block, which ends its tiles
		 * early (NOTES round 26).
		 */
		int			none = 0;
		const double e = kmg_narrow_estimate(a.part + (size_t) ((p - 1) & 1) * gridDim.x, sm.red, none);

		for (int x = tid; x < k * CW; x += KMG_NARROW_NT)
			a.clus[x] = x == DP + 2 ? e : sclus[x];
		if (change)
		{
			for (int x = tid; x < k * DP; x += KMG_NARROW_NT)
			{
				a.C[x] = sm.Cr[x];
				if (!aliased)
					a.Cf[x] = scf[x];
			}
			if (tid < k)
			{
				a.cn[tid] = sm.cn[tid];
				a.cnf[tid] = scnf[tid];
				if (a.cosine || a.mu == NULL)
					a.cnorm[tid] = sm.cnorm[tid];
			}
		}
		if (tid == 0)
		{
			kmg_ctl		snap = kmg_ctl_snapshot(a.ctl);

			snap.iter = t - 1;
			snap.namb = namb;
			snap.relocated = 0;
			a.ctl->moved = moved;	/* a pause leaves them for the re-seed's end */
			a.ctl->nempty = nempty;
			a.ctl->namb = namb;
			kmg_fin_decide(a, KMG_FIN_ITER, moved, nempty, change, cmax, all_exact, e, snap, -1);
		}
	}
	return stop != KMG_RUN;
}

/*
 * One pass (see the file header).  DP: padded width (8..32), KB: centroids
 * of the unrolled loop (>= k), R: rows per thread.  The kernel is its
 * stages: centroids in; per tile of NT x R rows the rows staged, filtered,
 * settled (labels), and in MODE_ITER grouped by label and summed, the next
 * tile's loads in flight meanwhile; then the block's partial, and in the
 * last block the cluster sums and the end of the iteration.
 */
template <int DP, int KB, int R>
__global__ void __launch_bounds__(KMG_NARROW_NT, KMG_NARROW_BPS)
kmg_narrow_kernel(const __grid_constant__ kmg_args a, int mode, int nstage, int groups)
{
	extern __shared__ __align__(16) unsigned char kmg_nsmem[];
	constexpr int TR = KMG_NARROW_NT * R;
	constexpr int CPT = (KB * (DP + 1) + KMG_NARROW_NT - 1) / KMG_NARROW_NT;	/* cells per thread */
	static_assert((size_t) KB * KMG_CW(DP) * sizeof(double) <= (size_t) TR * DP * sizeof(float),
				  "the last block's copy of the sums fits the rows' room");
	const kmg_narrow_layout L = kmg_narrow_layout_of(DP, KB, R);
	const kmg_narrow_smem sm = {
		(float *) (kmg_nsmem + L.c2), (float *) (kmg_nsmem + L.cr), (float *) (kmg_nsmem + L.cn),
		(double *) (kmg_nsmem + L.cnorm), (float *) (kmg_nsmem + L.xs),
		(uint32_t *) (kmg_nsmem + L.mask), (int *) (kmg_nsmem + L.pre),
		(int *) (kmg_nsmem + L.list), (float *) (kmg_nsmem + L.w), (double *) (kmg_nsmem + L.red)
	};
	__shared__ unsigned int s_pass;
	__shared__ int s_last,
				s_iter0,
				s_run,
				s_count[32],
				s_start[33],
				s_cnt[32];
	__shared__ unsigned long long s_limb[kmg_narrow_xs_words<DP, KB>()];	/* exact sums: the block's cells */
	__shared__ int s_nlist;		/* exact sums: the moved rows listed (kmg_narrow_xs_rows) */
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	d = a.d;
	const int	k = a.k;
	const int	iter = mode == KMG_MODE_ITER;
	const int	pend = kmg_narrow_parallel_end_on(DP) && iter && a.parallel_end;	/* kmg_narrow_parallel_end */
	constexpr bool MMA = kmg_narrow_mma_on<DP, KB>();
	const bool	xs = MMA && iter && a.nxs;	/* exact sums: kmg_narrow_xs_rows */
	const int	cosine = a.cosine;

	const int64_t n = a.n;
	const int64_t r0 = (int64_t) blockIdx.x * n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * n / gridDim.x;

	/*
	 * The rows of a tile, in registers: row = base + r * NT + tid.  The
	 * first tile's rows and weights are on their way before the wait for
	 * the kernel before (a fit's iterations are launched overlapped,
	 * kmg_fused_launch: nothing in a fit writes them after the rows are
	 * prepared); everything else the pass reads comes after it.
	 */
	float4		xr[R][DP / 4];
	int			old[R];
	float		wr[R];

	kmg_narrow_load_rows<DP, R>(tid, a, r0, r1, xr, wr);
	/*
	 * With the parallel end, the pass's number: every block of the pass
	 * before took its own before that pass released this one, and none of
	 * the pass after can take one before this block releases it (after a
	 * barrier: the atomic has returned, and no warp of the block releases
	 * sooner); a fit resets the count only between passes it has waited for.
	 */
	if (pend && tid == 0)
		s_pass = atomicAdd(&a.ctl->started, 1u) / gridDim.x;
	kmg_grid_wait();
	if (pend)
		__syncthreads();		/* s_pass */
	kmg_grid_release();

	/* cells of the sums: (cluster j, column c), c == d is the weight */
	const int	ncol = d + 1;
	const int	ncell = k * ncol;

	/*
	 * The run's state, the centroids and the old labels, asked for together
	 * (one round trip); with the parallel end also the sums it ends the
	 * iteration before with, and the run's state by one thread for the
	 * block (block 0 of the same pass may set the stop flag meanwhile:
	 * kmg_narrow_parallel_end).
	 */
	const int	stop = a.lloyd && !pend ? *(volatile int *) &a.ctl->stop : KMG_RUN;
	float		cmax = a.ctl->cmax;
	int			all_exact = a.ctl->all_exact;
	kmg_narrow_cload<DP, KB> cload;
	__shared__ kmg_ctl s_limits;	/* the run's: tol, max_iter */
	unsigned int p = 0;

	if (pend)
	{
		p = s_pass;
		if (tid == 0)
		{
			const volatile kmg_ctl *v = a.ctl;

			s_iter0 = v->iter0;
			s_run = a.lloyd ? v->stop : KMG_RUN;
			s_limits.tol = v->tol;
			s_limits.max_iter = v->max_iter;
		}
		if (p > 0)
			kmg_narrow_end_load<DP, KB>(tid, a, sm, d, k, p, xs);
	}
	kmg_narrow_centroids_load<DP, KB>(tid, a, k, cosine, cload);
	kmg_narrow_load_old<R>(tid, a, r0, r1, iter, old);
	if (stop != KMG_RUN)
		return;
	kmg_narrow_centroids_store<DP, KB>(tid, sm, cload);

	/*
	 * Where the pass's sums and counts go: with the parallel end, set p mod 3
	 * and slot half p mod 2, after the end of the iteration before (which
	 * may stop the run); else the one set, the control block and a.part.
	 */
	unsigned long long *fix = a.nfix;
	int		   *moved_out = &a.ctl->moved,
			   *exact_out = &a.ctl->namb;
	double	   *slot = a.part + blockIdx.x;
	int			moved_before = 0;	/* the pass before's moved rows (the parallel end's) */

	if (pend)
	{
		__syncthreads();		/* s_run, s_iter0, s_limits; the old centroids are in place */
		if (s_run != KMG_RUN)
			return;

		const int	sw = kmg_narrow_setwords(k, d);
		unsigned long long *clear = a.nfix + (size_t) ((p + 1) % 3) * sw;

		for (int x = (int) ((int64_t) blockIdx.x * sw / gridDim.x) + tid;
			 x < (int) ((int64_t) (blockIdx.x + 1) * sw / gridDim.x); x += KMG_NARROW_NT)
			clear[x] = 0ull;
		if (p > 0 && kmg_narrow_parallel_end<DP, KB>(tid, lane, warp, a, sm, d, k, p, s_iter0 + (int) p,
													 s_limits, cmax, all_exact, xs, moved_before))
			return;
		fix = a.nfix + (size_t) (p % 3) * sw;
		moved_out = kmg_narrow_set_counts(fix, k, d, xs);
		exact_out = moved_out + 1;
		slot = a.part + (size_t) (p & 1) * gridDim.x + blockIdx.x;
		if (xs && p > 0)
			kmg_narrow_xs_carry<DP, KB>(tid, sm, fix, ncell, k);
	}
	/* exact sums: the moved rows listed for the block's end where few move (kmg_narrow_xs_rows) */
	const bool	defer = pend && p > 0 && (int64_t) moved_before * 32 <= n;
	const kmg_narrow_xs_list s_list = {
		reinterpret_cast<int2 *>(kmg_nsmem + L.mask), &s_nlist, (int) ((L.w - L.mask) / sizeof(int2))
	};
	constexpr int CPTL = MMA ? 1 : CPT;	/* the listing's cells (none on the tensor cores) */
	constexpr int MT = kmg_narrow_mma_mt<KB>();
	const bool	weighted = a.W != NULL;
	double		acc[CPTL];
	int			cnt[CPTL];
	double		macc[MT][DP / 8][4];
	double		maccw[MT][4];

#pragma unroll
	for (int u = 0; u < CPTL; u++)
	{
		acc[u] = 0.0;
		cnt[u] = 0;
	}
#pragma unroll
	for (int m = 0; m < MT; m++)
	{
#pragma unroll
		for (int n = 0; n < DP / 8; n++)
			macc[m][n][0] = macc[m][n][1] = macc[m][n][2] = macc[m][n][3] = 0.0;
		maccw[m][0] = maccw[m][1] = maccw[m][2] = maccw[m][3] = 0.0;
	}
	if (MMA && tid < 32)
		s_cnt[tid] = 0;
	if (xs)
		for (int x = tid; x < kmg_narrow_xs_words<DP, KB>(); x += KMG_NARROW_NT)
			s_limb[x] = 0ull;
	if (xs && tid == 0)
		s_nlist = 0;
	if (MMA)
		__syncthreads();		/* the centroids and counts are in place (the tile loop has no block barrier) */

	double		est = 0.0;
	int			moved = 0,
				nexact = 0;

	for (int64_t base = r0; base < r1; base += TR)
	{
		int			lab[R];
		float		f1[R],
					f2[R],
					xx[R];
		int			b[R];

		if (MMA)
			__syncwarp();		/* the warp's last sums are done with its rows */
		else
			__syncthreads();	/* the last tile's sums are done with it */
		kmg_narrow_stage_rows<DP, R>(tid, a, sm, xr, wr, xx);
		kmg_narrow_filter<DP, KB, R>(sm, xr, f1, f2, b);
		kmg_narrow_settle<DP, R>(tid, a, sm, d, k, cosine, base, r1, iter, cmax, all_exact, xr, old,
								 wr, xx, f1, f2, b, lab, est, moved, nexact);
		/*
		 * The next tile's loads, in flight while the sums run; after the
		 * last tile they read the block's last row again (no branch: see
		 * kmg_narrow_load_rows).
		 */
		if (!iter)
		{
			kmg_narrow_load<DP, R>(tid, a, base + TR, r1, iter, xr, old, wr);
			continue;
		}
		if constexpr (MMA)
		{
			if (xs)
			{
				/* the moved rows (few, after a run's first pass) before the loads, which take old */
				kmg_narrow_xs_rows<DP, KB, R>(tid, a, sm, r0, base, !pend || p == 0, defer, lab, old, s_cnt,
											  s_limb, s_list);
				kmg_narrow_load<DP, R>(tid, a, base + TR, r1, iter, xr, old, wr);
				continue;
			}
			kmg_narrow_load<DP, R>(tid, a, base + TR, r1, iter, xr, old, wr);
			__syncwarp();		/* the warp's rows are staged */
			if (weighted)
				kmg_narrow_mma_sums<DP, KB, R, true>(lane, warp, sm, lab, s_cnt, macc, maccw);
			else
				kmg_narrow_mma_sums<DP, KB, R, false>(lane, warp, sm, lab, s_cnt, macc, maccw);
			continue;
		}
		kmg_narrow_mark<KB, R>(tid, lane, warp, sm, k, lab);
		kmg_narrow_load<DP, R>(tid, a, base + TR, r1, iter, xr, old, wr);
		__syncthreads();
		kmg_narrow_order<KB, R>(tid, lane, warp, sm, k, lab, s_count, s_start);
		kmg_narrow_sums<DP, CPTL>(tid, a, sm, d, ncol, ncell, s_count, s_start, acc, cnt);
	}

	if (!iter)
		return;
	if (xs)
		kmg_narrow_xs_partial<DP>(tid, a, r0, fix, d, ncol, ncell, s_limb, s_cnt, s_list);
	else if constexpr (MMA)
		kmg_narrow_mma_partial<DP, KB>(tid, lane, warp, a, sm, fix, d, ncol, ncell, weighted, macc, maccw, s_cnt);
	else
		kmg_narrow_block_partial<CPTL>(tid, a, fix, d, ncol, ncell, acc, cnt);
	kmg_narrow_block_counts(tid, sm, slot, moved_out, exact_out, est, moved, nexact);
	if (pend)
		return;					/* the next pass ends the iteration */

	/* the last block: the cluster sums, then the end of the iteration */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&a.ctl->ticket2, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();
	kmg_narrow_last_block(tid, lane, warp, a, sm, d, k, ncol, ncell, xs);
}

/*
 * The instances: padded width DP = 8, 16, 24, 32 x centroids of the
 * unrolled loop KB = 4, 8, 16, 32 (rows per thread from DP).
 */
#define KMG_NARROW_ROW(DP) \
	{kmg_narrow_kernel<DP, 4, kmg_narrow_rows(DP)>, kmg_narrow_kernel<DP, 8, kmg_narrow_rows(DP)>, \
	 kmg_narrow_kernel<DP, 16, kmg_narrow_rows(DP)>, kmg_narrow_kernel<DP, 32, kmg_narrow_rows(DP)>}

static const kmg_fused_fn kmg_narrow_table[4][4] = {
	KMG_NARROW_ROW(8), KMG_NARROW_ROW(16), KMG_NARROW_ROW(24), KMG_NARROW_ROW(32)
};

/*
 * The instance for rows of dp padded floats and k centroids (the smallest
 * KB >= k), its threads, blocks per SM (its launch bounds), KB and shared
 * memory; NULL when none is compiled for the shape.
 */
kmg_fused_fn
kmg_narrow_instance(int dp, int k, int *threads, int *per_sm, int *kb, size_t *smem)
{
	const int	i = dp / 8 - 1;
	const int	j = k <= 4 ? 0 : k <= 8 ? 1 : k <= 16 ? 2 : 3;

	if (dp % 8 != 0 || i < 0 || i > 3 || k < 1 || k > 32)
		return NULL;
	*threads = KMG_NARROW_NT;
	*per_sm = KMG_NARROW_BPS;
	*kb = 4 << j;
	*smem = kmg_narrow_layout_of(dp, *kb, kmg_narrow_rows(dp)).total;
	return kmg_narrow_table[i][j];
}

/*
 * Bytes of a->nfix for k clusters of d columns: three sets of
 * kmg_narrow_setwords words, zero before a run's first pass and after a
 * re-seed (a pass that ends its own iteration leaves its set zero, the
 * parallel end clears each set the pass after it is read).
 */
size_t
kmg_narrow_fix_bytes(int k, int d)
{
	return (size_t) 3 * kmg_narrow_setwords(k, d) * sizeof(unsigned long long);
}

/*
 * Whether a fit's narrow passes keep exact sums (a->nxs, a->nxs_e0: see
 * kmg_narrow_xs_rows): unweighted, fewer than 2^30 rows (the limbs' room),
 * and every value's bits within a 128-bit total, that is the data's span (km_xstats: values below 2^xmax,
 * multiples of 2^xmin) plus the bits of n at most 126.  The instances that
 * sum by listing (kmg_narrow_mma_on false) ignore it.  KMG_NARROW_EXACT=0
 * in the environment keeps the double partials (for timings).  scratch:
 * four device ints; synchronises the stream.
 */
cudaError_t
kmg_narrow_exact_setup(kmg_args *a, int *scratch, cudaStream_t s)
{
	const char *env = getenv("KMG_NARROW_EXACT");
	km_xstats	xs;
	cudaError_t e;

	a->nxs = 0;
	a->nxs_e0 = 0;
	if (a->nfix == NULL || a->W != NULL || a->n <= 0 || a->n >= ((int64_t) 1 << 30) ||
		(env != NULL && strcmp(env, "0") == 0))
		return cudaSuccess;
	if ((e = kmg_xstats_of(a->X, NULL, a->n, a->d, a->dp, 0, scratch, &xs, s)) != cudaSuccess)
		return e;
	if (xs.xmin > xs.xmax)
	{
		a->nxs = 1;				/* every value is zero: so is every sum */
		return cudaSuccess;
	}
	if (xs.xmax - xs.xmin + km_xlevels_nbits(a->n) > 126)
		return cudaSuccess;
	a->nxs = 1;
	a->nxs_e0 = xs.xmin;
	return cudaSuccess;
}
