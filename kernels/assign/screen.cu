/*
 * screen.cu
 *	  The tensor-core screen for large k: the float32 filter's distances
 *	  (filter_gemm.cuh) computed on tensor cores, in float16 or TF32, fused
 *	  with a per-row list of the centroids that can still win; then the
 *	  exact settling of each listed row over its few candidates.
 *
 * What it decides, per row i (k centroids; the filter's operands: rows X
 * of dp floats, centroids C' and cn; kmg_screen_prepare_kernel rounds the
 * centroid operand once an iteration, into a->sop):
 *		s_ij = S (cn_j + sum_c r(x_ic) r(-2 c_jc))	(tensor cores, fp32 sums)
 *		b    = min_j s_ij,  T = b + S slack(|x_i|, cmax)
 *		candidates = { j : s_ij <= T }
 * Two formats of the same kernel (kmg_screen_kernel<H>):
 *	- float16 (H, where the call keeps a float16 copy of its rows, a->Xh:
 *	  kmg_screen_rows16 once a call): r rounds to float16 after a power-of-two
 *	  scale that puts every value below 2^14 (km_screen16_slack), the rows'
 *	  once a call and the centroids' once an iteration; mma m16n8k16, 32
 *	  columns a k-slice, half the bytes of TF32 and twice its products an
 *	  instruction; S = 2^km_screen16_sexp;
 *	- TF32 (otherwise: assign and map batches, split fits): r rounds to
 *	  TF32, the rows as they leave shared memory (cvt.rna); mma m16n8k8, 16
 *	  columns a k-slice; S = 1, slack km_screen_slack.
 * Both have unit roundoff 2^-11, so they leave the same rows uncertain.
 * The slack bounds |s_ij / S - f_ij| twice over, so the exact winner
 * (km_exact_nearest: the least exact cost, ties to the lowest index) is
 * always a candidate.  One candidate: it is the label.  Two to
 * KMG_SCREEN_CANDS: the row is listed with them (crow, cids) and
 * kmg_screen_certify_kernel settles it with the exact cost (kmg_chain4_xd) of
 * each.  More, or a row the slack cannot bound (|x| or the centroids near
 * the float range, degenerate centroids, a zero row under cosine): the row
 * goes to the filter path's list (amb) with fbest = b / S, and exact.cu
 * settles it against every centroid, with the screen's slack added to the
 * float32 filter's (kmg_settle_slack).  So labels are km_exact_nearest's,
 * bit for bit, whatever the tensor cores' rounding within the bound.
 *
 * How.  A block owns 128 rows and walks every 128-centroid tile of the
 * prepared operand, so a row's list stays in the block's shared memory:
 *	- 4 warps of 64 x 64 (4 x 8 mma tiles, 128 accumulators a thread);
 *	  k-slices of 64 bytes of the rows and of the operand in a 4-stage
 *	  cp.async ring (zero-filled past n and dp), rows padded to 80 bytes so
 *	  that each ldmatrix.x4 (four fragments of an m-tile, or of two n-tiles)
 *	  is conflict-free; the byte layout, and so every ldmatrix address, is
 *	  the same in both formats;
 *	- the operand is laid out in the order the walk reads it (slices of 128
 *	  centroids x 64 bytes), and so are the float16 rows (blocks of 128 rows
 *	  x 64 bytes), so each thread's copies advance one pointer; a tile's
 *	  S cn_j travel with its first slice;
 *	- a tile's first MMAs take S cn_j (+inf past k) as their addend, so the
 *	  accumulators need no copy of it and end the tile as s_ij; the tile's
 *	  epilogue has no barrier: each warp lowers, in registers, the running
 *	  best of its rows over its half of the columns (the least of the row's
 *	  4 threads) and appends to the row's list for that half every value
 *	  within the slack of it (shared-memory atomics, rare).  Every such
 *	  threshold is at least the final T, so no candidate is missed (a row
 *	  whose list overflows is settled fully);
 *	- after the last tile, the row's thread keeps the entries of both
 *	  halves within the final T: the label or the listing.
 * Lists are filled in an order that varies from run to run; the labels do
 * not depend on it.
 *
 * On Hopper (sm_90a code, compute capability 9.0) with dp <= 128, the
 * float16 screen runs on wgmma instead (kmg_screen_wg_kernel, below): the
 * same values, thresholds and end of a block, with the rows kept in shared
 * memory and one list a row.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * wgmma's 64-byte swizzle (the Hopper screen's layout, in shared memory and,
 * for its rows' copy and operand, in global memory): the 16-byte chunk c of
 * row r of a slice (64 bytes a row) lies at position c ^ kmg_sw64(r).
 */
static __device__ __forceinline__ int
kmg_sw64(int r)
{
	return (r >> 1) & 3;
}

namespace
{

constexpr int SBM = 128;		/* rows a block */
constexpr int SBN = 128;		/* centroids a tile (= KM_FILTER_TILE_128's columns) */
constexpr int SSLICE = 64;		/* bytes of a row a k-slice: 16 TF32 or 32 float16 columns */
constexpr int SSTAGES = 4;		/* cp.async ring */
constexpr int SNT = 128;		/* 4 warps, 2 x 2, each 64 rows x 64 centroids */
constexpr int SAP = SSLICE / 4 + 4;	/* padded row of a slice in floats: ldmatrix rows 80 bytes apart, no conflicts */
constexpr int SMC = 12;			/* candidates a row lists in shared memory, per warp of its columns */
constexpr int SLICE_BYTES = SBN * SSLICE;	/* a k-slice of 128 rows (or centroids) in global memory */
constexpr int SA_FL = SBM * SAP;
constexpr int SB_FL = SBN * SAP;
constexpr size_t SSMEM = (size_t) SSTAGES * (SA_FL + SB_FL + SBN) * sizeof(float) +
	(size_t) 2 * SBM * SMC * (sizeof(float) + sizeof(int)) + (size_t) 8 * SBM * sizeof(int);

/*
 * With bounds the listed rows' last row blocks (the tail) may be split by
 * centroid tiles (kmg_screen_kernel): at most STP parts in all, each
 * keeping its rows' lists, bests and overflow flags in STP_WORDS words of
 * a->stail.
 */
constexpr int STP = 512;
constexpr int STP_TILES = 2;	/* tiles of a block's share of the tail at least */
constexpr int STP_EVEN_TILES = 16;	/* walks this long: the tail shared evenly (stream-K) */
constexpr size_t STP_WORDS = (size_t) 7 * SBM + (size_t) 4 * SBM * SMC;

/*
 * The tail's units (row block, tile), row block by row block, shared by
 * `slots` blocks: block b takes [kmg_tail_start(b), kmg_tail_start(b + 1)),
 * at least STP_TILES units (slots <= tail / STP_TILES), so none is empty.
 */
__device__ __forceinline__ int64_t
kmg_tail_start(int64_t b, int64_t tail, int64_t slots)
{
	return b * tail / slots;
}

/* The block whose units hold unit v: the last b with kmg_tail_start(b) <= v. */
__device__ __forceinline__ int64_t
kmg_tail_slot(int64_t v, int64_t tail, int64_t slots)
{
	return ((v + 1) * slots - 1) / tail;
}

static_assert(SNT == SBM, "one thread a row at the end");
static_assert(KMG_SCREEN_CANDS <= SMC && KMG_SCREEN_CANDS == 8, "the certify kernel's lanes");
static_assert(SMC % 4 == 0, "a list's entries shared by its row's 4 lanes (kmg_list_prune)");

/* The operands' element: float (rounded to TF32 on the way) or float16 bits. */
template <bool H>
struct kmg_sfmt
{
	typedef float T;
	static constexpr int PER16 = 4;	/* elements of a 16-byte copy */
};

template <>
struct kmg_sfmt<true>
{
	typedef unsigned short T;
	static constexpr int PER16 = 8;
};

__device__ __forceinline__ uint32_t
kmg_tf32(float v)
{
	uint32_t	r;

	asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
	return r;
}

/* float16 bits of v (nearest even), results below 2^-14 flushed to zero (km_screen16_slack). */
__device__ __forceinline__ unsigned short
kmg_h16(float v)
{
	const __half h = __float2half_rn(v);

	return fabsf(__half2float(h)) < 0x1p-14f ? (unsigned short) 0 : __half_as_ushort(h);
}

/*
 * c += a b on one m16n8 tile, k = 8 TF32 columns (H false) or 16 float16
 * columns (H true); FIRST: c = a b + (c0, c1, c0, c1) instead, the tile's
 * first step taking cn_j as its addend.
 */
template <bool H, bool FIRST>
__device__ __forceinline__ void
kmg_smma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1, float c0, float c1)
{
	if (FIRST && H)
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
					 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};\n"
					 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
					 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
					 "f"(c0), "f"(c1));
	else if (H)
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
					 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
					 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
					 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	else if (FIRST)
		asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
					 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};\n"
					 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
					 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
					 "f"(c0), "f"(c1));
	else
		asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
					 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
					 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
					 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/*
 * The float16 screen's exponent of the current centroids' operand, ce =
 * km_screen16_exp(cmax); with the rows' xexp it makes S = 2^(27 - xe - ce)
 * (km_screen16_sexp).
 */
__device__ __forceinline__ int
kmg_screen16_ce(const kmg_args &a)
{
	return km_screen16_exp(a.ctl->cmax);
}

/*
 * The slack of a row in the screen's units (kmg_screen_slack_of, times S
 * in float16); +inf when it cannot be bounded (settled exactly).
 */
template <bool H>
__device__ __forceinline__ float
kmg_row_screen_slack(const kmg_args &a, float xn, float cmax, int all_exact, int ce)
{
	if (all_exact || (a.cosine && xn == 0.0f))
		return INFINITY;
	return H ? ldexpf(kmg_screen_slack_of(a, xn, cmax), km_screen16_sexp(a.xexp, ce))
		: kmg_screen_slack_of(a, xn, cmax);
}

/*
 * One k-slice of the block's tile: both k-steps' fragments first, then
 * their 64 MMAs.  ldmatrix: A, matrices (rows 0-7 | 8-15) x (the step's
 * first | second 16 bytes) of an m-tile = a0..a3; B, (first | second 16
 * bytes) x (n-tile nt | nt + 1) = b0, b1 of two n-tiles.  TF32: the rows'
 * values are rounded as they leave shared memory.
 */
template <bool H, bool FIRST>
__device__ __forceinline__ void
kmg_screen_slice(float (&acc)[4][8][4], unsigned cA, unsigned cB, const float (&cinit)[8][2])
{
	uint32_t	af[2][4][4],
				bf[2][8][2];

#pragma unroll
	for (int k2 = 0; k2 < 2; k2++)
	{
#pragma unroll
		for (int mt = 0; mt < 4; mt++)
			kmg_ldsm4(af[k2][mt], cA + (mt * 16 * SAP + 8 * k2) * 4);
#pragma unroll
		for (int np = 0; np < 4; np++)
		{
			uint32_t	r[4];

			kmg_ldsm4(r, cB + (np * 16 * SAP + 8 * k2) * 4);
			bf[k2][2 * np][0] = r[0];
			bf[k2][2 * np][1] = r[1];
			bf[k2][2 * np + 1][0] = r[2];
			bf[k2][2 * np + 1][1] = r[3];
		}
	}
#pragma unroll
	for (int k2 = 0; k2 < 2; k2++)
	{
		if (!H)
		{
#pragma unroll
			for (int mt = 0; mt < 4; mt++)
#pragma unroll
				for (int u = 0; u < 4; u++)
					af[k2][mt][u] = kmg_tf32(__uint_as_float(af[k2][mt][u]));
		}
#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int nt = 0; nt < 8; nt++)
			{
				if (FIRST && k2 == 0)
					kmg_smma<H, true>(acc[mt][nt], af[k2][mt], bf[k2][nt][0], bf[k2][nt][1],
									  cinit[nt][0], cinit[nt][1]);
				else
					kmg_smma<H, false>(acc[mt][nt], af[k2][mt], bf[k2][nt][0], bf[k2][nt][1],
									   0.0f, 0.0f);
			}
	}
}

}								/* namespace */

/*
 * The epilogues' pieces, shared by both screen kernels.  A thread's least
 * two of a row's values so far (m, m2; with repeats: two equal least values
 * make m2 that value), one value at a time.
 */
__device__ __forceinline__ void
kmg_least_two_add(float &m, float &m2, float v)
{
	m2 = fminf(m2, fmaxf(m, v));
	m = fminf(m, v);
}

/*
 * The least two (lo, hi) of the union of two sets, from each set's least
 * two (la, ha) and (lb, hb): the same values as kmg_least_two_add over
 * both sets' values, in any order.
 */
__device__ __forceinline__ void
kmg_least_two_merge(float &lo, float &hi, float la, float ha, float lb, float hb)
{
	lo = fminf(la, lb);
	hi = fminf(fmaxf(la, lb), fminf(ha, hb));
}

/*
 * The row's least over its 4 threads (lanes 4 g to 4 g + 3 hold a row's
 * values), returned, from each thread's least two (m, m2); m2 becomes the
 * row's second least.
 */
__device__ __forceinline__ float
kmg_quad_least_two(float m, float &m2)
{
	float		mw = m;

#pragma unroll
	for (int o = 1; o <= 2; o <<= 1)
	{
		const float om = __shfl_xor_sync(0xffffffffu, mw, o);
		const float om2 = __shfl_xor_sync(0xffffffffu, m2, o);

		kmg_least_two_merge(mw, m2, mw, m2, om, om2);
	}
	return mw;
}

/* The row's least over its 4 threads, from each thread's least m. */
__device__ __forceinline__ float
kmg_quad_least(float m)
{
	const float mw = fminf(m, __shfl_xor_sync(0xffffffffu, m, 1));

	return fminf(mw, __shfl_xor_sync(0xffffffffu, mw, 2));
}

/*
 * Centroid id of value v into list l (cap entries: values sval[l cap ...],
 * ids sid[...], count scnt[l]); a list that overflows sends its row r to the
 * full settling (sover[r]).
 */
__device__ __forceinline__ void
kmg_list_candidate(float v, int id, int l, int cap, float *sval, int *sid, int *scnt, int *sover, int r)
{
	const int	slot = atomicAdd(&scnt[l], 1);

	if (slot < cap)
	{
		sval[l * cap + slot] = v;
		sid[l * cap + slot] = id;
	}
	else
		sover[r] = 1;
}

/*
 * The running best of a row's list l (nl entries) fell to thr - slack:
 * drop the entries now past thr, so that values listed against an older,
 * higher best take no room (a walk that meets the row's own centroid late
 * would otherwise overflow on far centroids listed before it, and settle
 * the row against every centroid).  The row's quad (the 4 lanes of qmask,
 * which agree on thr) shares the cap entries, cap / 4 a lane; the list's
 * order changes, which nothing depends on.  An overflowed list (count past
 * cap) stays overflowed: its lost entries are not known.  thr is never
 * below the row's final threshold, so no entry within it is dropped.  The
 * 4 lanes read the same count: the list's last appends came before the
 * slice loop's block barriers.
 */
__device__ __forceinline__ void
kmg_list_prune(float thr, int l, int nl, int cap, float *sval, int *sid, int *scnt, int t4, unsigned qmask)
{
	constexpr int PER = SMC / 4;
	float		v[PER];
	int			id[PER];
	unsigned	keep = 0;

	if (nl > cap)
		return;
#pragma unroll
	for (int u = 0; u < PER; u++)
	{
		const int	e = t4 + 4 * u;

		if (e < nl)
		{
			v[u] = sval[l * cap + e];
			id[u] = sid[l * cap + e];
			if (v[u] <= thr)
				keep |= 1u << u;
		}
	}

	const int	kc = __popc(keep);
	int			incl = kc,
				t;

	t = __shfl_up_sync(qmask, incl, 1, 4);
	if (t4 >= 1)
		incl += t;
	t = __shfl_up_sync(qmask, incl, 2, 4);
	if (t4 >= 2)
		incl += t;

	const int	kept = __shfl_sync(qmask, incl, 3, 4);
	int			at = incl - kc;

	__syncwarp(qmask);			/* every entry read before any moves */
#pragma unroll
	for (int u = 0; u < PER; u++)
		if ((keep >> u) & 1u)
		{
			sval[l * cap + at] = v[u];
			sid[l * cap + at] = id[u];
			at++;
		}
	if (t4 == 0)
		scnt[l] = kept;
	__syncwarp(qmask);
}

/*
 * A row's bounds from the screen (bounds.cu): an upper bound on its
 * distance to the centroid of value v1 and a lower bound on its distance to
 * every centroid of value at least v2, from the screen's values (times
 * 1 / S: sinv), the slack in the same units and xn = |x| as kept (float,
 * within 2^-22 of |x|).  Each value is within half the slack of |c|^2 -
 * 2 x.c, so cost <= v1 + |x|^2 + slack / 2 and cost >= v2 + |x|^2 -
 * slack / 2; the sums are done in double with 2^-20 of their terms added
 * for |x|^2 and the rounding, then rounded outwards.
 */
__device__ __forceinline__ float
kmg_screen_ub(float v1, float slack, float xn, double sinv)
{
	const double v = (double) v1 * sinv,
				xx = (double) xn * xn;
	const double c = v + xx + 0.5 * (double) slack * sinv + 0x1p-20 * (fabs(v) + xx);

	return kmg_sqrt_ru(fmax(c, 0.0));
}

__device__ __forceinline__ float
kmg_screen_lb(float v2, float slack, float xn, double sinv)
{
	const double v = (double) v2 * sinv,
				xx = (double) xn * xn;
	const double c = v + xx - 0.5 * (double) slack * sinv - 0x1p-20 * (fabs(v) + xx);

	return !(c > 0.0) ? 0.0f : kmg_sqrt_rd(c);
}

/*
 * The end of a block of rows, for row i (one thread): from the row's least
 * value over all centroids (best), its second least (B only), its slack
 * and its lists of the values found within the slack of a running best,
 * the label, the candidates' listing (crow, cids), or the full settling
 * (amb); with bounds, the row's bounds; *prev is its label before (read
 * only where a Lloyd iteration, KMG_MODE_ITER, settles it here).  The
 * lists: l < lists, each of at
 * most cap entries, values vals[l SBM cap + s] and centroids ids[...], of
 * cnt[l SBM] entries (more: over).  Returns whether the label moved.
 */
template <bool H, bool B>
__device__ __forceinline__ int
kmg_screen_decide(const kmg_args &a, int mode, int64_t i, const int *prev, float best, float second, float slack,
				  int over, const float *vals, const int *ids, const int *cnt, int lists, int cap,
				  int ce)
{
	const float thr = best + slack;
	const double sinv = H ? ldexp(1.0, -km_screen16_sexp(a.xexp, ce)) : 1.0;
	int			full = over || !isfinite(thr);
	int			nc = 0,
				label = -1,
				moved = 0;

	if (!full)
	{
		for (int l = 0; l < lists; l++)
			for (int s = 0; s < cnt[l * SBM]; s++)
				if (vals[l * SBM * cap + s] <= thr)
				{
					nc++;
					label = ids[l * SBM * cap + s];
				}
		if (nc < 1 || nc > KMG_SCREEN_CANDS)
			full = 1;
	}
	a.fbest[i] = (float) ((double) best * sinv);	/* a power of two: exact */
	if (!full && nc > 1)
	{
		const int	pos = atomicAdd(&a.ctl->ncand, 1);

		label = -1;
		if (pos < a.ccap)
		{
			int			w = 0;

			a.crow[pos] = (int32_t) i;
			for (int l = 0; l < lists; l++)
				for (int s = 0; s < cnt[l * SBM]; s++)
					if (vals[l * SBM * cap + s] <= thr)
						a.cids[(size_t) pos * KMG_SCREEN_CANDS + w++] = ids[l * SBM * cap + s];
			for (; w < KMG_SCREEN_CANDS; w++)
				a.cids[(size_t) pos * KMG_SCREEN_CANDS + w] = -1;
			/*
			 * the others' values lie past thr: the certify kernel tightens
			 * this with the candidates' exact costs
			 */
			if (B)
				a.lb[i] = kmg_screen_lb(thr, slack, a.xnorm[i], sinv);
		}
		else
			full = 1;
	}
	if (full)
	{
		a.amb[atomicAdd(&a.ctl->namb, 1)] = (int32_t) i;
		if (B)
		{
			/* no bounds: screened again next iteration */
			a.ub[i] = INFINITY;
			a.lb[i] = 0.0f;
		}
	}
	else if (label >= 0)
	{
		if (mode == KMG_MODE_ITER && *prev != label)
			moved = 1;
		a.labels[i] = label;
		if (B)
		{
			/* one candidate, the best: every other value is at least the row's second least */
			a.ub[i] = kmg_screen_ub(best, slack, a.xnorm[i], sinv);
			a.lb[i] = kmg_screen_lb(second, slack, a.xnorm[i], sinv);
		}
	}
	return moved;
}

/*
 * The end of part `part` of split row block c (sp parts, a->stail's parts
 * pfirst on; kmg_screen_kernel with bounds), for the list entry e of
 * thread tid's row (-1: none): the part's lists, bests and overflow flags
 * from shared memory to a->stail, then, in the last part of the row block
 * to finish, the row decided from all of them: best the least of the 2 sp
 * halves' bests, second the least of their second values and of the
 * second least best (with repeats, as one walk's two halves combine
 * them), overflowed if any part did.
 * Called by every thread of the block (barriers); returns whether the
 * row's label moved.
 */
template <bool H>
__device__ __forceinline__ int
kmg_screen_tail_part(const kmg_args &a, int mode, int64_t c, int pfirst, int sp, int part, int64_t e,
					 const float *sval, const int *sid, const int *scnt, const int *sover, const float *swbest,
					 const float *swsecond, const float *sslack, int *s_last, int ce)
{
	const int	tid = threadIdx.x;
	const int	nl = 2 * sp;	/* the row block's lists: (part, half) */
	float	   *reg = a.stail + (size_t) pfirst * STP_WORDS;
	int		   *gcnt = (int *) reg;	/* [list][row] */
	float	   *gbest = reg + (size_t) nl * SBM;
	float	   *gsecond = gbest + (size_t) nl * SBM;
	int		   *gover = (int *) (gsecond + (size_t) nl * SBM);	/* [part][row] */
	float	   *gval = (float *) (gover + (size_t) sp * SBM);	/* [list][row][SMC] */
	int		   *gid = (int *) (gval + (size_t) nl * SBM * SMC);
	int			moved = 0;

#pragma unroll
	for (int h = 0; h < 2; h++)
	{
		const int	l = 2 * part + h;
		const int	cnt = min(scnt[h * SBM + tid], SMC);

		gcnt[l * SBM + tid] = cnt;
		gbest[l * SBM + tid] = swbest[h * SBM + tid];
		gsecond[l * SBM + tid] = swsecond[h * SBM + tid];
		for (int s = 0; s < cnt; s++)
		{
			gval[((size_t) l * SBM + tid) * SMC + s] = sval[(h * SBM + tid) * SMC + s];
			gid[((size_t) l * SBM + tid) * SMC + s] = sid[(h * SBM + tid) * SMC + s];
		}
	}
	gover[part * SBM + tid] = sover[tid];
	__threadfence();
	__syncthreads();
	if (tid == 0)
		*s_last = atomicAdd(&a.stick[c], 1) == sp - 1;
	__syncthreads();
	if (!*s_last)
		return 0;
	__threadfence();
	if (tid == 0)
		a.stick[c] = 0;			/* for the next pass */
	if (e >= 0)
	{
		const int64_t i = (int64_t) a.brow[e];
		float		b1 = INFINITY,
					b2 = INFINITY,
					s2 = INFINITY;
		int			over = 0;

		for (int l = 0; l < nl; l++)
		{
			const float v = __ldcg(gbest + l * SBM + tid);

			s2 = fminf(s2, __ldcg(gsecond + l * SBM + tid));
			b2 = fminf(b2, fmaxf(b1, v));
			b1 = fminf(b1, v);
		}
		for (int p = 0; p < sp; p++)
			over |= __ldcg(gover + p * SBM + tid);
		moved = kmg_screen_decide<H, true>(a, mode, i, a.labels + i, b1, fminf(s2, b2), sslack[tid], over,
										   gval + (size_t) tid * SMC, gid + (size_t) tid * SMC, gcnt + tid, nl,
										   SMC, ce);
	}
	return moved;
}

/*
 * The far centroids' test of row i (kmg_screen_far): best and second are
 * the row's least two values over the far centroids (a->fsop).  Where the
 * row's centroid is not far, every far centroid is at least
 * kmg_screen_lb(best) from it.  Where it is far (its drift past tau, as
 * the drift kernel chose a->farc), its own value is among them, and
 * kmg_screen_lb(second) is the bound: were its value not the least, it
 * would be at least second, so its distance at least that bound, above
 * ub; so ub under it means its value is the least and every other far
 * centroid lies past it.  Below the bound the row's centroid stays (ub is
 * below every other centroid: the far ones by this, the others by lb as
 * kmg_bounds_rows_kernel left it) and lb becomes the least of the two
 * bounds; else the row joins the screen's list.
 */
template <bool H>
__device__ __forceinline__ void
kmg_screen_far_decide(const kmg_args &a, int64_t i, float best, float second, float slack, int ce)
{
	const double sinv = H ? ldexp(1.0, -km_screen16_sexp(a.xexp, ce)) : 1.0;
	const bool	own_far = a.drift[a.labels[i]] > a.bs->tau;
	const float lf = kmg_screen_lb(own_far ? second : best, slack, a.xnorm[i], sinv);

	if (a.ub[i] < lf)
		a.lb[i] = fminf(a.lb[i], lf);
	else
	{
		const int	at = atomicAdd(&a.bs->nlist, 1);

		a.brow[at] = (int32_t) i;
		if (a.bold != NULL)
			a.bold[at] = a.labels[i];
	}
}

/*
 * The screen (file header).  B false: block b screens rows 128 b on, one
 * block per 128 rows.  B true (a Lloyd iteration with bounds, bounds.cu):
 * the blocks walk the rows listed on a->brow, 128 at a time, and each
 * listed row also gets its bounds (a->ub, a->lb), for which the epilogue
 * keeps each row's second least value too.  128 threads; SSMEM bytes of
 * dynamic shared memory.
 *
 * With bounds the list is often a few row blocks past a whole number of
 * the grid's rounds (late in a fit, fewer row blocks than blocks), and
 * each row block is a whole walk over k (B: 40 tiles): the last round
 * would keep many SMs idle for a whole walk.  So that last round (the
 * tail) is cut into parts of consecutive centroid tiles: its units (row
 * block, tile), row block by row block, are shared by `slots` blocks, each
 * taking a run of them (at least STP_TILES) after its whole row blocks.
 * Walks of STP_EVEN_TILES tiles or more (k > 1920): the whole grid shares
 * them evenly where the tail has at most 7/8 of its row blocks
 * (stream-K); a run may cross into the next row block, so a block may walk
 * two parts.  Shorter walks, whose parts cost more against their tiles
 * (A, k = 1024: slower so), only where the tail has at most half the
 * grid's row blocks, each cut into the same number of parts, as many as
 * the grid holds.  A part keeps its rows' bests, second least
 * values, lists and overflow flags in a->stail (the parts of tail row
 * block rb, met by blocks s to s', are rb + s to rb + s'), and the last
 * part of a row block to finish (a ticket on a->stick) reads them all and
 * decides its rows.  A part lists every value within the slack of its
 * own running best, which is never below the row's best, so the union of
 * the parts' lists holds every value within the row's threshold, as one
 * walk's two lists do.
 *
 * F (with B): the far centroids' test (kmg_screen_far): the rows listed on
 * a->frow, walked over the far centroids' tiles (a->fsop) only, each row's
 * least two values to kmg_screen_far_decide; no lists, no split.
 */
template <bool H, bool B, bool F = false>
__global__ void __launch_bounds__(SNT, 2)
kmg_screen_kernel(kmg_args a, int mode)
{
	typedef typename kmg_sfmt<H>::T T;
	constexpr int PER16 = kmg_sfmt<H>::PER16;
	constexpr int SBK = SSLICE / (int) sizeof(T);	/* columns a k-slice */

	extern __shared__ __align__(128) unsigned char kmg_ssmem[];
	float	   *sA = (float *) kmg_ssmem;
	float	   *sB = sA + SSTAGES * SA_FL;
	float	   *scn = sB + SSTAGES * SB_FL;	/* the tile's S cn_j, in its first slice's stage */
	float	   *sval = scn + SSTAGES * SBN;	/* [warp column half][row][SMC] */
	int		   *sid = (int *) (sval + 2 * SBM * SMC);
	int		   *scnt = sid + 2 * SBM * SMC;	/* [half][row]: listed candidates */
	int		   *sover = scnt + 2 * SBM;	/* a candidate found no room: settle fully */
	float	   *swbest = (float *) (sover + SBM);	/* [half][row]: the half's best, at the end */
	float	   *sslack = swbest + 2 * SBM;	/* the row's slack */
	float	   *swsecond = sslack + SBM;	/* B: [half][row]: the half's second least value */

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	wm = warp >> 1,
				wn = warp & 1;
	const int	g = lane >> 2,
				t4 = lane & 3;
	const int64_t n = a.n;
	const int	dp = a.dp;
	const int	ks = (dp + SBK - 1) / SBK;
	const int	tiles = F ? KMG_FAR_C / SBN : (a.kp + SBN - 1) / SBN;
	const int	total = tiles * ks;
	const char *Bt = (const char *) (F ? a.fsop : a.sop);	/* kmg_screen_work_bytes: slices, then cn S */
	const int32_t *lrow = F ? a.frow : a.brow;	/* B: the rows listed */
	const char *Cnt = Bt + (size_t) total * SLICE_BYTES;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int	ce = H ? kmg_screen16_ce(a) : 0;
	const int64_t nrows = F ? (int64_t) *(volatile int *) &a.bs->nfar :
		B ? (int64_t) *(volatile int *) &a.bs->nlist : n;
	const int64_t nblk = (nrows + SBM - 1) / SBM;
	int64_t		nwhole = nblk;	/* row blocks walked whole; then the tail's units */
	int64_t		tail = 0,		/* the tail's units: (row block, centroid tile) pairs */
				slots = 0;		/* blocks 0 .. slots - 1 share them */

	if (B && !F)
	{
		const int64_t grid = gridDim.x;
		const int64_t last = nblk % grid;	/* row blocks of the last round */

		tail = last * tiles;
		if (last == 0)
			slots = 0;
		else if (tiles >= STP_EVEN_TILES)
			slots = 8 * last <= 7 * grid ? min(grid, min(tail / STP_TILES, (int64_t) STP - last)) : 0;
		else
			slots = 2 * last <= grid ?
				last * min((int64_t) tiles / STP_TILES, min(grid / last, ((int64_t) STP - last) / last)) : 0;
		if (slots > last)
			nwhole = nblk - last;
		else
			tail = slots = 0;
	}

	/* this block's units of the tail, [u, uend) (ints: fewer than STP row blocks' walks) */
	int64_t		wk = blockIdx.x;
	int			u = 0,
				uend = 0;

	if (blockIdx.x < slots)
	{
		u = (int) kmg_tail_start(blockIdx.x, tail, slots);
		uend = (int) kmg_tail_start(blockIdx.x + 1, tail, slots);
	}
	__shared__ int s_tail_last;
	const int	lr = tid >> 2,
				lq = tid & 3;
	const unsigned sAs = (unsigned) __cvta_generic_to_shared(sA) + (lr * SAP + lq * 4) * 4;
	const unsigned sBs = (unsigned) __cvta_generic_to_shared(sB) + (lr * SAP + lq * 4) * 4;
	const unsigned sCs = (unsigned) __cvta_generic_to_shared(scn) + tid * 16;
	const char *bsrc = Bt + lr * SSLICE + lq * 16;

	/* ldmatrix rows of this lane (kmg_screen_slice), as shared addresses */
	const int	mi = lane >> 3,
				mr = lane & 7;
	const unsigned fA = (unsigned) __cvta_generic_to_shared(sA) +
		((wm * 64 + mr + (mi & 1) * 8) * SAP + (mi >> 1) * 4) * 4;
	const unsigned fB = (unsigned) __cvta_generic_to_shared(sB) +
		((wn * 64 + mr + (mi >> 1) * 8) * SAP + (mi & 1) * 4) * 4;

	for (;;)
	{
		bool		split = false;
		int64_t		blk;
		int			pfirst = 0,	/* split: the row block's first part (a->stail) */
					t0 = 0,		/* this walk's centroid tiles */
					t1 = tiles,
					np = 1,		/* split: the row block's parts, and this one's */
					part = 0;

		if (wk < nwhole)
		{
			blk = wk;
			wk += gridDim.x;
		}
		else if (u < uend)
		{
			const int	rb = u / tiles;	/* of the tail */
			const int	sfirst = (int) kmg_tail_slot((int64_t) rb * tiles, tail, slots),
						slast = (int) kmg_tail_slot((int64_t) (rb + 1) * tiles - 1, tail, slots);

			split = true;
			blk = nwhole + rb;
			t0 = u % tiles;
			t1 = min(tiles, t0 + (uend - u));
			u += t1 - t0;
			pfirst = rb + sfirst;
			np = slast - sfirst + 1;
			part = (int) blockIdx.x - sfirst;
		}
		else
			break;

		const int64_t e0 = blk * SBM;	/* the block's first row, or list entry */

		scnt[tid] = 0;
		scnt[SBM + tid] = 0;
		sover[tid] = 0;
		{
			const int64_t e = e0 + tid;

			sslack[tid] = e < nrows ?
				kmg_row_screen_slack<H>(a, a.xnorm[B ? (int64_t) lrow[e] : e], cmax, all_exact, ce)
				: 0.0f;
		}

		/*
		 * The copies of this thread: 16 bytes of rows lr + 32 u of each
		 * slice (u < 4), of the rows and of the operand.  Operand slice q
		 * (of the walk over tiles and their slices) is the q-th SLICE_BYTES
		 * of Bt.  Rows: float16, slice s of a row of kmg_screen_rows16's
		 * block b is SLICE_BYTES (b ks + s) on, so the B false walk
		 * advances one pointer; TF32, row-major floats.  Rows past the end
		 * and columns past dp are zeros.
		 */
		const char *xsrc[4];
		unsigned	xok = 0;	/* bit u: row lr + 32 u exists */

#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			const int64_t e = e0 + lr + 32 * u;
			const int	ok = e < nrows;
			/* float16 blocks are whole (zeros past n): the block's own */
			const int64_t i = B ? (ok ? (int64_t) lrow[e] : 0) : (ok || H ? e : 0);

			xok |= (unsigned) ok << u;
			/* chunk lq of the row; in the wgmma kernel's layout at lq ^ kmg_sw64 (the far test on its rows) */
			if (H)
				xsrc[u] = (const char *) a.Xh + (size_t) ((i / SBM) * ks) * SLICE_BYTES +
					(i % SBM) * SSLICE + (a.xhwg ? lq ^ kmg_sw64((int) (i % SBM)) : lq) * 16;
			else
				xsrc[u] = (const char *) (a.X + i * dp + lq * PER16);
			if (H && !B)
				break;			/* the block's rows: one pointer */
		}

		/*
		 * The copies of walk slice q (slice s of tile t) into stage
		 * q % SSTAGES; with a tile's first slice, its 128 values S cn_j
		 * (warp 0).
		 */
		auto load = [&] (int q, int s, int t)
		{
			const unsigned st = (unsigned) (q % SSTAGES);
			const char *bq = bsrc + (size_t) q * SLICE_BYTES;

			if (s == 0 && tid < SBN / 4)
				kmg_cp16_zfill_at(sCs + st * SBN * 4, Cnt + ((size_t) t * SBN + tid * 4) * sizeof(float), 16);
#pragma unroll
			for (int u = 0; u < 4; u++)
				kmg_cp16_zfill_at(sBs + (st * SB_FL + 32 * u * SAP) * 4, bq + u * 32 * SSLICE, 16);
			if (H && !B)
			{
				const char *xq = xsrc[0] + (size_t) s * SLICE_BYTES;

#pragma unroll
				for (int u = 0; u < 4; u++)
					kmg_cp16_zfill_at(sAs + (st * SA_FL + 32 * u * SAP) * 4, xq + u * 32 * SSLICE, 16);
			}
			else
			{
				const int	col = s * SBK + lq * PER16;

#pragma unroll
				for (int u = 0; u < 4; u++)
				{
					const int	ok = (xok >> u & 1) && (H || col < dp);

					kmg_cp16_zfill_at(sAs + (st * SA_FL + 32 * u * SAP) * 4,
							  ok ? xsrc[u] + (size_t) s * (H ? SLICE_BYTES : SSLICE) : xsrc[0],
							  ok ? 16 : 0);
				}
			}
		};

		/* the walk's next copy: slice q is slice ls of tile lt */
		int			lq_next = t0 * ks,
					ls_next = 0,
					lt_next = t0;
		const int	qend = t1 * ks;
		auto load_next = [&] ()
		{
			if (lq_next < qend)
			{
				load(lq_next, ls_next, lt_next);
				lq_next++;
				if (++ls_next == ks)
				{
					ls_next = 0;
					lt_next++;
				}
			}
			kmg_cp16_commit();
		};

#pragma unroll
		for (int p = 0; p < SSTAGES - 1; p++)
			load_next();

		float		acc[4][8][4];
		int			q = t0 * ks;

		/*
		 * The running best of each of this thread's rows over this warp's
		 * columns; B: and the second least value (with repeats: two equal
		 * least values make it that value).
		 */
		float		rbest[4][2],
					rsecond[4][2];

#pragma unroll
		for (int mt = 0; mt < 4; mt++)
			rbest[mt][0] = rbest[mt][1] = rsecond[mt][0] = rsecond[mt][1] = INFINITY;

		for (int t = t0; t < t1; t++)
		{
			for (int s = 0; s < ks; s++, q++)
			{
				kmg_cp16_wait<SSTAGES - 2>();
				__syncthreads();
				load_next();

				const unsigned so = (unsigned) (q % SSTAGES);
				const unsigned cA = fA + so * SA_FL * 4;
				const unsigned cB = fB + so * SB_FL * 4;

				if (s == 0)
				{
					/* the tile's addends cn_j: the columns 2 t4, 2 t4 + 1 of each n-tile */
					float		cinit[8][2];

#pragma unroll
					for (int nt = 0; nt < 8; nt++)
					{
						const float2 c2 = *reinterpret_cast<const float2 *>(scn + so * SBN + wn * 64 +
																			nt * 8 + 2 * t4);

						cinit[nt][0] = c2.x;
						cinit[nt][1] = c2.y;
					}
					kmg_screen_slice<H, true>(acc, cA, cB, cinit);
				}
				else
				{
					const float cz[8][2] = {};

					kmg_screen_slice<H, false>(acc, cA, cB, cz);
				}
			}

			/*
			 * The tile's epilogue, without a barrier: each warp keeps, for
			 * its 64 rows, the running best over its half of the columns
			 * (rbest, the least of the row's 4 threads' values so far) and
			 * lists every value within the slack of it in the row's list
			 * of this half.  rbest only falls and is never below the row's
			 * final best, so the two lists hold every value within the
			 * slack of the final best (and maybe some past it, dropped at
			 * the end); where it falls on a list more than half full, the
			 * entries past its new threshold are dropped first
			 * (kmg_list_prune; on every fall it cost B's whole iteration
			 * 2-3 % where no list overflows).
			 */
#pragma unroll
			for (int mt = 0; mt < 4; mt++)
#pragma unroll
				for (int h = 0; h < 2; h++)
				{
					const int	r = wm * 64 + mt * 16 + h * 8 + g;
					float		m = INFINITY,
								m2 = INFINITY,
								mw;

					if (B)
					{
						/* the thread's least two, then the row's over its 4 threads */
#pragma unroll
						for (int nt = 0; nt < 8; nt++)
#pragma unroll
							for (int e = 0; e < 2; e++)
								kmg_least_two_add(m, m2, acc[mt][nt][2 * h + e]);
						mw = kmg_quad_least_two(m, m2);
						rsecond[mt][h] = fminf(fminf(rsecond[mt][h], m2), fmaxf(rbest[mt][h], mw));
					}
					else
					{
#pragma unroll
						for (int nt = 0; nt < 8; nt++)
							m = fminf(m, fminf(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
						mw = kmg_quad_least(m);
					}
					const bool	fell = mw < rbest[mt][h];	/* the same in the row's 4 lanes */

					rbest[mt][h] = fminf(rbest[mt][h], mw);
					if (F)
						continue;	/* the far test needs the least value only */

					const float thr = rbest[mt][h] + sslack[r];

					if (fell)
					{
						const int	nl = scnt[wn * SBM + r];

						if (nl > SMC / 2)
							kmg_list_prune(thr, wn * SBM + r, nl, SMC, sval, sid, scnt, t4,
										   0xfu << (lane & ~3));
					}
					/*
					 * The thread's values of this row all lie past it:
					 * nothing to list.  Nor where thr is +INF: the half has
					 * met only padding columns so far (a part of the tail
					 * holding only the last tile), or values past the
					 * format, and a row whose threshold stays +INF is
					 * settled fully (kmg_screen_decide).
					 */
					if (!(m <= thr && thr < INFINITY))
						continue;
#pragma unroll
					for (int nt = 0; nt < 8; nt++)
#pragma unroll
						for (int e = 0; e < 2; e++)
							if (acc[mt][nt][2 * h + e] <= thr)
								kmg_list_candidate(acc[mt][nt][2 * h + e], t * SBN + wn * 64 + nt * 8 + 2 * t4 + e,
												   wn * SBM + r, SMC, sval, sid, scnt, sover, r);
				}
		}
		if (t4 == 0)
#pragma unroll
			for (int mt = 0; mt < 4; mt++)
#pragma unroll
				for (int h = 0; h < 2; h++)
				{
					const int	r = wn * SBM + wm * 64 + mt * 16 + h * 8 + g;

					swbest[r] = rbest[mt][h];
					if (B)
						swsecond[r] = rsecond[mt][h];
				}
		kmg_cp16_wait<0>();
		__syncthreads();

		/* one thread a row: the label, the candidates' listing, or the full settling */
		int			moved = 0;

		if (F)
		{
			if (e0 + tid < nrows)
				kmg_screen_far_decide<H>(a, (int64_t) a.frow[e0 + tid], fminf(swbest[tid], swbest[SBM + tid]),
										 fminf(fminf(swsecond[tid], swsecond[SBM + tid]),
											   fmaxf(swbest[tid], swbest[SBM + tid])),
										 sslack[tid], ce);
		}
		else if (split)
		{
			moved = kmg_screen_tail_part<H>(a, mode, blk - nwhole, pfirst, np, part,
											e0 + tid < nrows ? e0 + tid : -1, sval, sid, scnt, sover, swbest,
											swsecond, sslack, &s_tail_last, ce);
		}
		else if (e0 + tid < nrows)
		{
			const int64_t i = B ? (int64_t) a.brow[e0 + tid] : e0 + tid;

			moved = kmg_screen_decide<H, B>(a, mode, i, a.labels + i,
											fminf(swbest[tid], swbest[SBM + tid]),
											B ? fminf(fminf(swsecond[tid], swsecond[SBM + tid]),
													  fmaxf(swbest[tid], swbest[SBM + tid])) : 0.0f,
											sslack[tid], sover[tid], sval + tid * SMC, sid + tid * SMC,
											scnt + tid, 2, SMC, ce);
		}
		if (mode == KMG_MODE_ITER)
			kmg_block_add_int(moved, &a.ctl->moved);
		__syncthreads();		/* the next block of rows reuses the shared memory */
	}
}

/*
 * ---- The Hopper screen (kmg_screen_wg_kernel): the same decision, on
 * wgmma ----
 *
 * Where the float16 rows have at most WKS k-slices (dp <= 128) and the
 * device runs sm_90a code, the screen's GEMM is Hopper's asynchronous
 * warpgroup MMA instead of mma.sync: a block of SBM rows is two warpgroups
 * of 64 rows, its rows' slices stay in shared memory for the whole walk
 * (read from global memory once, not once a centroid tile), and only the
 * operand's slices stream through a ring of WST stages.  Each warpgroup's
 * tile is m64 n128 (64 accumulators a thread, the layout of eight m16n8
 * fragments side by side).  A warp owns 16 whole rows of the tile, so each
 * row has one list (2 SMC entries) and one running best, kept by the row's
 * 4 threads.  The values, thresholds, lists and the end of the block are
 * the mma.sync kernel's (kmg_screen_decide).
 *
 * The copies are what bounded this kernel (an experiment without the MMAs,
 * the lists and the decisions took 96 % of its time), so:
 *	- the tensor cores read both operands from shared memory in wgmma's
 *	  64-byte swizzle (K-major, 8 rows of 64 bytes an atom, SBO 512): chunk
 *	  c (16 bytes) of row r of a slice at position c ^ kmg_sw64(r) of the
 *	  row.  The rows' copy (a->Xh, kmg_screen_rows16 with a->xhwg) and the
 *	  operand (kmg_screen_prepare_kernel) are laid out so in global memory,
 *	  so a slice is one linear copy, and a row's 64 bytes stay together;
 *	- the operand's slices come by bulk copy (the copy engine, one thread
 *	  issuing 8 KB counted on the stage's mbarrier) instead of 16 bytes a
 *	  thread; where the whole operand fits the ring (tiles x slices <= WST,
 *	  e.g. k 256 at dp 96) it is copied once and stays;
 *	- the grid is persistent (at most two blocks an SM): the ring runs on
 *	  from one row block into the next, and each warpgroup copies its next
 *	  rows (bulk copies on its own mbarrier; with bounds a gather of the
 *	  listed rows by cp.async) as soon as its last MMAs of a block are done,
 *	  under that tile's epilogue and its decisions, which need only the
 *	  warpgroup's own barrier (1 + wg).
 */
constexpr int WNT = 256;		/* two warpgroups */
constexpr int WKS = 4;			/* the rows' k-slices kept in shared memory: dp <= 128 */
constexpr int WST = 6;			/* the operand's ring */
constexpr int WMC = 2 * SMC;	/* a row's list */
constexpr size_t WSMEM = (size_t) WKS * SLICE_BYTES + (size_t) WST * (SLICE_BYTES + SBN * sizeof(float)) +
	(size_t) SBM * WMC * (sizeof(float) + sizeof(int)) + (size_t) 5 * SBM * sizeof(int) +
	(size_t) (WST + 2) * sizeof(uint64_t) + (size_t) 2 * SBM * sizeof(int) +
	512;	/* + the buffers' alignment */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KMG_WGMMA 1
#else
#define KMG_WGMMA 0
#endif

/* Whether this build's code for the device has wgmma (read once by kmg_screen_wgmma_built). */
__device__ const int kmg_wgmma_built = KMG_WGMMA;

#if KMG_WGMMA
/* A shared-memory operand's descriptor: no swizzle, LBO 128 bytes (along k), SBO 512 (8 rows). */
__device__ __forceinline__ uint64_t
kmg_wg_desc(unsigned addr)
{
	return (uint64_t) ((addr & 0x3FFFF) >> 4) | ((uint64_t) 1 << 16) | ((uint64_t) (512 >> 4) << 32) |
		((uint64_t) 2 << 62);
}

/* d += a b^T over 16 float16 columns: a 64 rows, b 128 centroids, both in shared memory. */
__device__ __forceinline__ void
kmg_wgmma_m64n128k16(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
				 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
				 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
				 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
				 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
				 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
				 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
				   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
				   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
				   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
				   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
				   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
				   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
				   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
				 : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void
kmg_wg_fence()
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void
kmg_wg_commit()
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void
kmg_wg_wait()
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* the 128 threads of warpgroup wg (named barrier 1 + wg) */
__device__ __forceinline__ void
kmg_wg_bar(int wg)
{
	if (wg == 0)
		asm volatile("bar.sync 1, 128;\n" ::: "memory");
	else
		asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

#endif

/*
 * The Hopper screen (above): B as kmg_screen_kernel's.  WNT threads, WSMEM
 * bytes of dynamic shared memory, dp <= WKS slices; float16 only, the rows
 * and operand laid out for it (a->xhwg).  Block b takes row blocks b, b +
 * gridDim.x, ...; the ring's stage s is filled by thread 0 and waited for
 * on mbarrier s (its phase flips each fill), a warpgroup's rows on mbarrier
 * WST + wg (one phase a row block), or with B by cp.async.
 */
template <bool B>
__global__ void __launch_bounds__(WNT, 2)
kmg_screen_wg_kernel(kmg_args a, int mode)
{
#if KMG_WGMMA
	constexpr int WPF = WST - 2;	/* slices copied ahead */

	extern __shared__ __align__(128) unsigned char kmg_ssmem[];
	/* the swizzle repeats every 512 bytes of the address: the buffers begin at such a boundary */
	unsigned char *sA = kmg_ssmem + ((512u - ((unsigned) __cvta_generic_to_shared(kmg_ssmem) & 511u)) & 511u);
	unsigned char *sB = sA + WKS * SLICE_BYTES;	/* the operand's ring */
	float	   *scn = (float *) (sB + WST * SLICE_BYTES);	/* a tile's S cn_j, in its first slice's stage */
	float	   *sval = scn + WST * SBN;	/* [row][WMC] */
	int		   *sid = (int *) (sval + SBM * WMC);
	int		   *scnt = sid + SBM * WMC;
	int		   *sover = scnt + SBM;
	float	   *swbest = (float *) (sover + SBM);
	float	   *sslack = swbest + SBM;
	float	   *swsecond = sslack + SBM;
	uint64_t   *smbar = (uint64_t *) (swsecond + SBM);	/* WST stages', then each warpgroup's rows' */
	int		   *sprev = (int *) (smbar + WST + 2);	/* [row block & 1][row]: the labels before */

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	wg = warp >> 2;	/* warpgroup: rows 64 wg on */
	const int	wt = tid & 127;	/* thread of the warpgroup */
	const int	g = lane >> 2,
				t4 = lane & 3;
	const int	r0 = wg * 64 + (warp & 3) * 16 + g;	/* this thread's rows: r0, r0 + 8 */
	const int	rd = wg * 64 + wt;	/* the row this thread decides (wt < 64) */
	const int	ks = (a.dp + 31) / 32;
	const int	tiles = (a.kp + SBN - 1) / SBN;
	const int	total = tiles * ks;
	const char *Bt = (const char *) a.sop;
	const char *Cnt = Bt + (size_t) total * SLICE_BYTES;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int64_t nrows = B ? (int64_t) *(volatile int *) &a.bs->nlist : a.n;
	const int64_t nblk = (nrows + SBM - 1) / SBM;

	if ((int64_t) blockIdx.x >= nblk)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int	ce = kmg_screen16_ce(a);
	const int64_t nmine = (nblk - 1 - blockIdx.x) / gridDim.x + 1;	/* row blocks of this block */
	/* the whole operand fits the ring: copied once, slice s in stage s */
	const bool	resident = total <= WST;
	const int	nst = resident ? total : WST;

	/*
	 * With B, this thread gathers position cc of the warpgroup's rows cr
	 * and cr + 32 of each slice (a warp's 16-byte copies fill 512
	 * contiguous bytes of shared memory); the second row's is 2048 bytes on.
	 */
	const int	cc = lane & 3;
	const int	cr = wg * 64 + (warp & 3) * 8 + (lane >> 2);
	const unsigned cso = (unsigned) (cr * SSLICE + cc * 16);
	const unsigned sAa = (unsigned) __cvta_generic_to_shared(sA);
	const unsigned sBa = (unsigned) __cvta_generic_to_shared(sB);
	const unsigned sCa = (unsigned) __cvta_generic_to_shared(scn);
	const unsigned sMa = (unsigned) __cvta_generic_to_shared(smbar);

	if (tid == 0)
		for (int u = 0; u < WST + 2; u++)
			kmg_mbar_init(sMa + 8 * u);
	__syncthreads();

	/*
	 * The stream's next operand slice (slice ld_qs of the operand, laid out
	 * as the stage is: kmg_screen_prepare_kernel) into stage ld_st, one
	 * bulk copy by thread 0 counted on the stage's mbarrier; cn with a
	 * tile's first.  Nothing past the stream's end.
	 */
	int			ld_qs = 0,
				ld_st = 0;
	int64_t		ld_left = resident ? total : nmine * total;

	auto load = [&] ()
	{
		if (ld_left > 0 && tid == 0)
		{
			const unsigned mb = sMa + 8 * (unsigned) ld_st;
			const bool	first = ld_qs % ks == 0;

			kmg_mbar_expect(mb, SLICE_BYTES + (first ? SBN * sizeof(float) : 0));
			kmg_bulk_copy(sBa + (unsigned) ld_st * SLICE_BYTES, Bt + (size_t) ld_qs * SLICE_BYTES,
						  SLICE_BYTES, mb);
			if (first)
				kmg_bulk_copy(sCa + (unsigned) ld_st * SBN * 4, Cnt + (size_t) (ld_qs / ks) * SBN * sizeof(float),
							  SBN * sizeof(float), mb);
		}
		ld_left--;
		ld_qs = ld_qs + 1 == total ? 0 : ld_qs + 1;
		ld_st = ld_st + 1 == WST ? 0 : ld_st + 1;
	};

	/* the stored row of entry e of a row block (B: of the list; 0 past its end) */
	auto row_of = [&] (int64_t e) -> int64_t
	{
		return B ? (e < nrows ? (int64_t) a.brow[e] : 0) : e;
	};

	/*
	 * The warpgroup's rows of the row block at e0, every slice (Xh is in
	 * the stage's order: kmg_screen_rows16_kernel).  B: each thread its
	 * chunks of rows i0 and i1 (cp.async, one group; zeros past the list);
	 * else the warpgroup's 4096 bytes of each slice, one bulk copy a slice
	 * by its first thread, counted on its rows' mbarrier.
	 */
	auto copy_rows = [&] (int64_t e0, int64_t i0, int64_t i1)
	{
		if (B)
		{
#pragma unroll
			for (int u = 0; u < 2; u++)
			{
				const int64_t i = u ? i1 : i0;
				const int	ok = e0 + cr + 32 * u < nrows;
				const int	ri = (int) (i % SBM);
				/* position cc of row cr holds chunk cc ^ kmg_sw64(cr), at cc ^ sw(cr) ^ sw(ri) in row ri */
				const char *src = (const char *) a.Xh + (size_t) ((i / SBM) * ks) * SLICE_BYTES +
					ri * SSLICE + ((cc ^ kmg_sw64(cr) ^ kmg_sw64(ri)) * 16);

				for (int sl = 0; sl < ks; sl++)
					kmg_cp16_zfill_at(sAa + sl * SLICE_BYTES + cso + 2048 * u, src + (size_t) sl * SLICE_BYTES,
									  ok ? 16 : 0);
			}
			kmg_cp16_commit();
		}
		else if (wt == 0)
		{
			const unsigned mb = sMa + 8 * (WST + wg);
			const char *src = (const char *) a.Xh + (size_t) ((e0 / SBM) * ks) * SLICE_BYTES + wg * 4096;

			kmg_mbar_expect(mb, (unsigned) ks * 4096);
			for (int sl = 0; sl < ks; sl++)
				kmg_bulk_copy(sAa + sl * SLICE_BYTES + wg * 4096, src + (size_t) sl * SLICE_BYTES, 4096, mb);
		}
	};

	int64_t		blk = blockIdx.x;
	int64_t		e0 = blk * SBM;

	/*
	 * A Lloyd iteration's decisions compare with the rows' labels before:
	 * the thread deciding row rd of the row block at e (j-th of this
	 * block) has it copied to sprev[(j & 1) SBM + rd] a row block ahead,
	 * one cp.async group, so the decision does not wait for the load.
	 */
	const unsigned sPa = (unsigned) __cvta_generic_to_shared(sprev);
	auto copy_prev = [&] (int64_t e, int64_t j)
	{
		if (mode == KMG_MODE_ITER && wt < 64)
		{
			if (e + rd < nrows)
				kmg_cp4_at(sPa + (unsigned) (((j & 1) * SBM + rd) * 4), a.labels + row_of(e + rd));
			kmg_cp16_commit();
		}
	};

	/* the first row block: its rows, its slack's |x|, the ring's first slices */
	int64_t		ci0 = row_of(e0 + cr),
				ci1 = row_of(e0 + cr + 32);
	float		xn_next = 0.0f;

	if (wt < 64 && e0 + rd < nrows)
		xn_next = a.xnorm[row_of(e0 + rd)];
	if (wt < 64)
	{
		scnt[rd] = 0;
		sover[rd] = 0;
	}
	copy_rows(e0, ci0, ci1);
	copy_prev(e0, 0);
#pragma unroll
	for (int p = 0; p < WPF; p++)
		load();

	int			st = 0;			/* the stage of the slice walked */
	unsigned	parity = 0;		/* bit s: the phase of stage s's mbarrier to wait for */
	int			moved = 0;

	for (int64_t j = 0; j < nmine; j++, blk += gridDim.x, e0 = blk * SBM)
	{
		const int64_t e1 = e0 + (int64_t) gridDim.x * SBM;	/* the next row block */
		const bool	next = j + 1 < nmine;

		/* this block's slack (its epilogues read it past the first slice's barrier) */
		if (wt < 64)
			sslack[rd] = e0 + rd < nrows ? kmg_row_screen_slack<true>(a, xn_next, cmax, all_exact, ce) : 0.0f;
		/* the next block's row ids, a block ahead (B: read from the list) */
		if (next)
		{
			ci0 = row_of(e1 + cr);
			ci1 = row_of(e1 + cr + 32);
		}

		float		acc[64];
		float		rbest[2] = {INFINITY, INFINITY},
					rsecond[2] = {INFINITY, INFINITY};

		for (int t = 0; t < tiles; t++)
		{
			for (int sl = 0; sl < ks; sl++, st = st + 1 == nst ? 0 : st + 1)
			{
				/*
				 * this slice is in (and at the block's first, its rows);
				 * the MMAs of the slice two before are done: its stage is
				 * free for the slice WPF on
				 */
				if (t == 0 && sl == 0)
				{
					if (B)
					{
						kmg_cp16_wait<0>();
						kmg_fence_proxy_async();
					}
					else
						kmg_mbar_wait(sMa + 8 * (WST + wg), (unsigned) (j & 1));
				}
				kmg_mbar_wait(sMa + 8 * (unsigned) st, (parity >> st) & 1);
				if (!resident)
					parity ^= 1u << st;
				kmg_wg_wait<1>();
				if (!resident)
					__syncthreads();
				else if (t == 0 && sl == 0)
					kmg_wg_bar(wg);
				load();
				if (sl == 0)
				{
					/* the tile's addends S cn_j: columns 8 j + 2 t4 + (0, 1) */
#pragma unroll
					for (int jj = 0; jj < 16; jj++)
					{
						const float2 c2 = *reinterpret_cast<const float2 *>(scn + st * SBN + jj * 8 + 2 * t4);

						acc[4 * jj] = acc[4 * jj + 2] = c2.x;
						acc[4 * jj + 1] = acc[4 * jj + 3] = c2.y;
					}
				}
				kmg_wg_fence();
#pragma unroll
				for (int kk = 0; kk < 2; kk++)
					kmg_wgmma_m64n128k16(acc, kmg_wg_desc(sAa + sl * SLICE_BYTES + wg * 4096 + kk * 32),
										 kmg_wg_desc(sBa + st * SLICE_BYTES + kk * 32));
				kmg_wg_commit();
			}
			kmg_wg_wait<0>();

			if (t == tiles - 1 && next)
			{
				/*
				 * the warpgroup's MMAs have read its rows: the next block's
				 * rows into their place, under this epilogue and the
				 * decisions
				 */
				kmg_wg_bar(wg);	/* every warp's MMAs */
				copy_rows(e1, ci0, ci1);
				copy_prev(e1, j + 1);
				if (wt < 64 && e1 + rd < nrows)
					xn_next = a.xnorm[row_of(e1 + rd)];
			}

			/*
			 * The tile's epilogue: the running best of each of this
			 * thread's two rows (the least of its 4 threads' values so
			 * far) and the values within the slack of it, listed.  A
			 * thread's 32 values of a row are taken in groups of four
			 * (columns 8 jj + 2 t4 + e, jj = 2 q and 2 q + 1): the least
			 * (and with B the second least) as a tree, not a chain, and
			 * a group is searched for candidates only where its least
			 * is within the threshold.  A warp's search is as long as
			 * the union of its threads' such groups, so where no thread
			 * has more than one (nearly always: a row's best alone) each
			 * selects its one group's values and the warp walks one.
			 */
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				const int	r = r0 + 8 * h;
				float		glo[8],
							ghi[8];

#pragma unroll
				for (int gq = 0; gq < 8; gq++)
				{
					const float v0 = acc[8 * gq + 2 * h],
								v1 = acc[8 * gq + 2 * h + 1],
								v2 = acc[8 * gq + 4 + 2 * h],
								v3 = acc[8 * gq + 4 + 2 * h + 1];

					if (B)
						kmg_least_two_merge(glo[gq], ghi[gq], fminf(v0, v1), fmaxf(v0, v1),
											fminf(v2, v3), fmaxf(v2, v3));
					else
						glo[gq] = fminf(fminf(v0, v1), fminf(v2, v3));
				}

				float		m,
							m2 = INFINITY,
							mw;

				if (B)
				{
					float		l4[4],
								h4[4],
								l2[2],
								h2[2];

#pragma unroll
					for (int u = 0; u < 4; u++)
						kmg_least_two_merge(l4[u], h4[u], glo[2 * u], ghi[2 * u], glo[2 * u + 1], ghi[2 * u + 1]);
#pragma unroll
					for (int u = 0; u < 2; u++)
						kmg_least_two_merge(l2[u], h2[u], l4[2 * u], h4[2 * u], l4[2 * u + 1], h4[2 * u + 1]);
					kmg_least_two_merge(m, m2, l2[0], h2[0], l2[1], h2[1]);
					mw = kmg_quad_least_two(m, m2);
					rsecond[h] = fminf(fminf(rsecond[h], m2), fmaxf(rbest[h], mw));
				}
				else
				{
					m = fminf(fminf(fminf(glo[0], glo[1]), fminf(glo[2], glo[3])),
							  fminf(fminf(glo[4], glo[5]), fminf(glo[6], glo[7])));
					mw = kmg_quad_least(m);
				}
				rbest[h] = fminf(rbest[h], mw);

				const float thr = rbest[h] + sslack[r];
				unsigned	hot = 0;	/* bit gq: the group's least is within the threshold */

#pragma unroll
				for (int gq = 0; gq < 8; gq++)
					hot |= glo[gq] <= thr ? 1u << gq : 0u;
				if (__all_sync(0xffffffffu, (hot & (hot - 1)) == 0))
				{
					/*
					 * No thread of the warp has more than one such group
					 * (the usual case: a row's best, alone): each takes
					 * its group's four values by selection, and the warp
					 * walks one group, not the union of its threads'.
					 */
					if (hot == 0)
						continue;

					const int	gs = __ffs(hot) - 1;
					float		gv[4];

#pragma unroll
					for (int u = 0; u < 4; u++)
					{
						gv[u] = acc[4 * (u >> 1) + 2 * h + (u & 1)];
#pragma unroll
						for (int gq = 1; gq < 8; gq++)
							gv[u] = gs == gq ? acc[4 * (2 * gq + (u >> 1)) + 2 * h + (u & 1)] : gv[u];
					}
#pragma unroll
					for (int u = 0; u < 4; u++)
						if (gv[u] <= thr)
							kmg_list_candidate(gv[u], t * SBN + (2 * gs + (u >> 1)) * 8 + 2 * t4 + (u & 1), r, WMC,
											   sval, sid, scnt, sover, r);
					continue;
				}
#pragma unroll
				for (int gq = 0; gq < 8; gq++)
					if (hot & (1u << gq))
					{
#pragma unroll
						for (int u = 0; u < 4; u++)
						{
							const int	jj = 2 * gq + (u >> 1),
										e = u & 1;
							const float v = acc[4 * jj + 2 * h + e];

							if (v <= thr)
								kmg_list_candidate(v, t * SBN + jj * 8 + 2 * t4 + e, r, WMC,
												   sval, sid, scnt, sover, r);
						}
					}
			}
		}
		if (t4 == 0)
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				swbest[r0 + 8 * h] = rbest[h];
				if (B)
					swsecond[r0 + 8 * h] = rsecond[h];
			}
		/* the warpgroup's lists and bests are complete */
		kmg_wg_bar(wg);

		if (wt < 64)
		{
			/*
			 * this block's labels before are in: past them only the next
			 * block's (its rows' group first with B, then its labels')
			 */
			if (mode == KMG_MODE_ITER)
			{
				if (!next)
					kmg_cp16_wait<0>();
				else if (B)
					kmg_cp16_wait<2>();
				else
					kmg_cp16_wait<1>();
			}
			if (e0 + rd < nrows)
				moved += kmg_screen_decide<true, B>(a, mode, row_of(e0 + rd), sprev + (j & 1) * SBM + rd, swbest[rd],
													B ? swsecond[rd] : 0.0f, sslack[rd], sover[rd],
													sval + rd * WMC, sid + rd * WMC, scnt + rd, 1, WMC, ce);
			/* the next block's lists (its first epilogue is past a barrier of the warpgroup) */
			scnt[rd] = 0;
			sover[rd] = 0;
		}
	}
	if (mode == KMG_MODE_ITER)
		kmg_block_add_int(moved, &a.ctl->moved);
#endif
}

/*
 * The listed rows, four a warp: lane l of a row's eight computes the exact
 * cost of candidate l, and the eight take the least, ties to the lowest
 * index (kmg_warp_argmin over groups of 8 lanes).  With bounds, the row's
 * upper bound is its least exact cost's distance, and its lower bound (the
 * screen's, for the centroids not listed) falls to the second least's.
 */
constexpr int CXC = 128;		/* a listed row's columns converted to double at a time */
constexpr int CXS = CXC + 2;	/* their stride: the 4 rows of a warp 16 bytes apart in the banks */

__global__ void __launch_bounds__(256, 4)
kmg_screen_certify_kernel(kmg_args a, int mode)
{
	/*
	 * Conversions to double issue at 16 a clock an SM against 64 double
	 * adds or multiplies, so the eight lanes of a row convert its values
	 * once, CXC at a time into sxd, and each converts only its centroid's
	 * (kmg_chain4_xd).
	 */
	__shared__ __align__(16) double sxd[8][4][CXS];

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	nlisted = min(*(volatile int *) &a.ctl->ncand, a.ccap);
	const int	gw = (int) ((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	const int	nw = (int) ((gridDim.x * blockDim.x) >> 5);
	const int	sub = (threadIdx.x & 31) >> 3;
	const int	l8 = threadIdx.x & 7;
	const int	q4 = a.dp / 4;
	const int	bounds = kmg_screen_bounds(a, mode);
	int			moved = 0;

	for (int base = gw * 4; base < nlisted; base += nw * 4)
	{
		const int	e = base + sub;
		double		c = INFINITY,
					c0,
					s = 0.0;
		int			j = INT_MAX,
					j0,
					cj = -1;
		int64_t		i = -1;
		double	   *xd = sxd[threadIdx.x >> 5][sub];

		if (e < nlisted)
		{
			cj = a.cids[(size_t) e * KMG_SCREEN_CANDS + l8];
			i = a.crow[e];
		}
		for (int c0q = 0; c0q < q4; c0q += CXC / 4)
		{
			const int	nq = min(CXC / 4, q4 - c0q);

			__syncwarp();		/* the last part's values are read */
			if (i >= 0)
				for (int q = l8; q < nq; q += 8)
				{
					const float4 x4 = reinterpret_cast<const float4 *>(a.X + (size_t) i * a.dp)[c0q + q];

					*reinterpret_cast<double2 *>(xd + 4 * q) = make_double2((double) x4.x, (double) x4.y);
					*reinterpret_cast<double2 *>(xd + 4 * q + 2) = make_double2((double) x4.z, (double) x4.w);
				}
			__syncwarp();
			if (cj >= 0)
				kmg_chain4_xd(s, xd, reinterpret_cast<const float4 *>(a.C + (size_t) cj * a.dp) + c0q, nq,
							  a.cosine);
		}
		if (cj >= 0)
		{
			c = kmg_exact_finish(s, a.cosine ? a.cnorm[cj] : 0.0, a.cosine);
			j = cj;
		}
		c0 = c;
		j0 = j;
		kmg_warp_argmin<8>(c, j);
		if (bounds)
		{
			/* the second least exact cost: the others' least */
			double		c2 = j0 == j ? INFINITY : c0;

#pragma unroll
			for (int o = 4; o > 0; o >>= 1)
				c2 = fmin(c2, __shfl_xor_sync(0xffffffffu, c2, o, 8));
			if (i >= 0 && l8 == 0 && j != INT_MAX)
			{
				/* exact costs, within (d + 2) 2^-53 of the true ones */
				a.ub[i] = kmg_sqrt_ru(c);
				a.lb[i] = fminf(a.lb[i], kmg_sqrt_rd(c2));
			}
		}
		if (i >= 0 && l8 == 0 && j != INT_MAX)
		{
			if (mode == KMG_MODE_ITER && a.labels[i] != j)
				moved++;
			a.labels[i] = j;
		}
	}
	if (mode == KMG_MODE_ITER)
		kmg_block_add_int(moved, &a.ctl->moved);
}

/*
 * The screen's centroid operand, once an iteration, in the order the
 * screen walks it: for each tile t of SBN centroids and each k-slice s of
 * its columns, SBN rows of SSLICE bytes (slice t ks + s), each the
 * operand r(-2 c'_jc) of centroid j = t SBN + row at columns s SBK on
 * (zeros past k and dp); then S cn_j for the tiles' centroids (+inf past
 * k).  Rounded here once, so the screen converts at most the rows' values.
 * TF32 (H false): floats tf32(-2 c'), S = 1; -2 is exact, so this is
 * -2 tf32(c').  float16: h(-2 2^(13 - ce) c') and S = 2^(27 - xe - ce)
 * (km_screen16_slack; ce from the cmax of the previous finalize, as the
 * screen reads it).
 */
template <bool H, bool FAR = false>
__global__ void
kmg_screen_prepare_kernel(kmg_args a, int tiles, int cm)
{
	typedef typename kmg_sfmt<H>::T T;
	constexpr int SBK = SSLICE / (int) sizeof(T);

	/* FAR: nothing to prepare in an iteration without the test (kmg_bounds_far_now) */
	if (FAR && !a.bs->faron)
		return;

	const int	ks = (a.dp + SBK - 1) / SBK;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t nv = (int64_t) tiles * ks * SBN * SBK;
	const int	rows = tiles * SBN;
	const int	nfc = FAR ? a.bs->nfc : 0;	/* FAR: column c of the tiles is centroid a->farc[c] */
	const float *__restrict__ Cf = a.Cf;
	T		   *op = (T *) (FAR ? a.fsop : a.sop);
	float	   *cns = (float *) (op + nv);
	const int	ce = H ? kmg_screen16_ce(a) : 0;
	const int	ok = H && km_screen16_ok(a.xexp, ce);
	const float tau = ok ? ldexpf(-2.0f, 13 - ce) : -2.0f;
	const float S = ok ? ldexpf(1.0f, km_screen16_sexp(a.xexp, ce)) : 1.0f;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < nv + rows; e += stride)
	{
		if (e < nv)
		{
			const int	c = (int) (e % SBK);
			const int64_t rs = e / SBK;		/* (tile, slice, row) */
			const int	r = (int) (rs % SBN);
			const int64_t ts = rs / SBN;
			const int	sl = (int) (ts % ks);
			const int64_t fi = (ts / ks) * SBN + r;
			const int64_t j = FAR ? (fi < nfc ? (int64_t) a.farc[fi] : (int64_t) a.k) : fi;
			const int	col = sl * SBK + c;
			const int	in = j < a.k && col < a.dp;
			const float v = in ? Cf[j * a.dp + col] : 0.0f;
			/* cm: chunks in the Hopper screen's swizzle (kmg_screen_wg_kernel copies a slice whole) */
			const int64_t o = cm ? ts * SBN * SBK + r * SBK + (((c >> 3) ^ kmg_sw64(r)) * 8) + (c & 7) : e;

			if (H)
				op[o] = (T) (in ? kmg_h16(tau * v) : 0);
			else
				op[e] = in ? __uint_as_float(kmg_tf32(-2.0f * v)) : 0.0f;
		}
		else
		{
			const int64_t j = e - nv;

			if (FAR)
				cns[j] = j < nfc ? S * a.cn[a.farc[j]] : INFINITY;
			else
				cns[j] = j < a.k ? S * a.cn[j] : INFINITY;
		}
	}
}

/*
 * The float16 copy of the rows the screen reads (a->Xh), once a call, in
 * the order the screen reads them: for each block of SBM rows and each
 * k-slice s of 32 columns, SBM rows of SSLICE bytes: h(2^(14 - xe) x) of
 * the row's columns 32 s on (zeros past n and dp); cm (for the wgmma
 * kernel): chunk c (8 columns) of row r of a block at position c ^
 * kmg_sw64(r) of its 64 bytes.  Thread: 16 bytes.
 */
__global__ void
kmg_screen_rows16_kernel(const float *__restrict__ X, int64_t n, int dp, int xe, int cm,
						 unsigned short *__restrict__ Xh)
{
	const int	ks = (dp + 31) / 32;
	const int64_t chunks = (n + SBM - 1) / SBM * ks * SBM * (SSLICE / 16);
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const float sigma = ldexpf(1.0f, 14 - xe);

	for (int64_t v = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; v < chunks; v += stride)
	{
		const int	c8 = (int) (v & 3);
		const int	r = (int) ((v >> 2) % SBM);
		const int64_t bs = (v >> 2) / SBM;
		const int64_t i = (bs / ks) * SBM + r;
		const int	col = (int) (bs % ks) * 32 + c8 * 8;
		uint4		o = make_uint4(0, 0, 0, 0);

		if (i < n && col < dp)
		{
			const float4 p = *reinterpret_cast<const float4 *>(X + i * dp + col);
			const float4 q = *reinterpret_cast<const float4 *>(X + i * dp + col + 4);

			o.x = kmg_h16(sigma * p.x) | ((uint32_t) kmg_h16(sigma * p.y) << 16);
			o.y = kmg_h16(sigma * p.z) | ((uint32_t) kmg_h16(sigma * p.w) << 16);
			o.z = kmg_h16(sigma * q.x) | ((uint32_t) kmg_h16(sigma * q.y) << 16);
			o.w = kmg_h16(sigma * q.z) | ((uint32_t) kmg_h16(sigma * q.w) << 16);
		}
		reinterpret_cast<uint4 *>(Xh)[cm ? bs * SBM * 4 + r * 4 + (c8 ^ kmg_sw64(r)) : v] = o;
	}
}

/*
 * The float16 copy of n rows of dp floats into Xh (kmg_screen_rows16_bytes),
 * scaled by 2^(14 - xe) for xe = km_screen16_exp(max |x_c|), laid out for
 * the wgmma kernel where wgmma is set; the caller then sets a->Xh, a->xexp
 * and a->xhwg.
 */
cudaError_t
kmg_screen_rows16(const float *X, int64_t n, int dp, float xabsmax, int wgmma, unsigned short *Xh,
				  int *xexp, int sms, cudaStream_t stream)
{
	int64_t		blocks = (int64_t) (kmg_screen_rows16_bytes(n, dp) / 16 + 255) / 256;

	*xexp = km_screen16_exp(xabsmax);
	if (n == 0)
		return cudaSuccess;
	if (blocks > (int64_t) sms * 8)
		blocks = (int64_t) sms * 8;
	kmg_screen_rows16_kernel<<<(unsigned) blocks, 256, 0, stream>>>(X, n, dp, *xexp, wgmma, Xh);
	return cudaGetLastError();
}

/* Bytes of the row copy a float16 screen keeps for n rows of dp values (whole blocks and slices). */
size_t
kmg_screen_rows16_bytes(int64_t n, int dp)
{
	return (size_t) ((n + SBM - 1) / SBM) * ((dp + 31) / 32) * SLICE_BYTES;
}

/*
 * Bytes of the screen's centroid operand (a->sop) for k centroids of dp
 * values, either format (TF32's slices hold half the columns: its size).
 */
size_t
kmg_screen_work_bytes(int k, int dp)
{
	const size_t tiles = (size_t) (k + SBN - 1) / SBN;

	return tiles * ((dp + 15) / 16) * SLICE_BYTES + tiles * SBN * sizeof(float);
}

/* Bytes of a->stail and tickets of a->stick (kmg_screen_kernel's split row blocks, with bounds). */
size_t
kmg_screen_tail_bytes(void)
{
	return (size_t) STP * STP_WORDS * sizeof(float);
}

int
kmg_screen_tail_tickets(void)
{
	return STP;
}

static cudaError_t kmg_screen_attributes(const void *fn, size_t smem);

/*
 * The screen's operand (kmg_screen_prepare_kernel) of `tiles` tiles: the
 * centroids (FAR: a->farc's, into a->fsop), float16 where the call keeps
 * the rows' copy, cm its wgmma layout.
 */
template <bool FAR>
static cudaError_t
kmg_screen_prepare(const kmg_args *a, int tiles, int cm, int sms, cudaStream_t stream)
{
	int64_t		pb = ((int64_t) tiles * SBN * (a->dp + 16) + 255) / 256;

	if (pb > (int64_t) sms * 4)
		pb = (int64_t) sms * 4;
	if (a->Xh != NULL)
		kmg_screen_prepare_kernel<true, FAR><<<(unsigned) pb, 256, 0, stream>>>(*a, tiles, cm);
	else
		kmg_screen_prepare_kernel<false, FAR><<<(unsigned) pb, 256, 0, stream>>>(*a, tiles, cm);
	return cudaGetLastError();
}

/*
 * Whether a fit with bounds tests far centroids: k >= KMG_FAR_MIN_K on the
 * mma.sync screen, k >= KMG_FAR_MIN_K_WG on the wgmma one (whose rows the
 * far test reads in that kernel's layout, and only in the iterations where
 * it pays: bounds.cu's kmg_bounds_far_now).
 */
int
kmg_screen_far_on(int k, int wgmma)
{
	return k >= (wgmma ? KMG_FAR_MIN_K_WG : KMG_FAR_MIN_K);
}

/*
 * The far centroids' test (after kmg_bounds_rows_kernel, a->frow set): the
 * far centroids' operand (one tile: a->farc's columns, zeros and +INF
 * norms past a->bs->nfc), then the rows of a->frow screened against it
 * alone, each kept or added to the screen's list (kmg_screen_far_decide).
 */
cudaError_t
kmg_screen_far(const kmg_args *a, int sms, cudaStream_t stream)
{
	typedef void (*screen_fn) (kmg_args, int);
	const bool	h = a->Xh != NULL;
	const screen_fn fn = h ? kmg_screen_kernel<true, true, true> : kmg_screen_kernel<false, true, true>;
	cudaError_t e;

	if ((e = kmg_screen_prepare<true>(a, KMG_FAR_C / SBN, 0, sms, stream)) != cudaSuccess ||
		(e = kmg_screen_attributes((const void *) fn, SSMEM)) != cudaSuccess)
		return e;
	fn<<<(unsigned) (2 * sms), SNT, SSMEM, stream>>>(*a, KMG_MODE_ITER);
	return cudaGetLastError();
}

/* Raise a screen kernel's shared memory to smem, with the largest carveout (per device). */
static cudaError_t
kmg_screen_attributes(const void *fn, size_t smem)
{
	cudaError_t e;

	e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
	/* two blocks an SM, whatever the driver would pick */
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
								 cudaSharedmemCarveoutMaxShared);
	return e;
}

/*
 * The screen (its operand, then the pass) and the settling of its listed
 * rows; the rows it sends to the full settling are on a->amb for
 * kmg_exact_refine, which reads km_filter_prepare's operand.  float16 where
 * the call keeps the rows' copy (a->Xh), else TF32.
 */
cudaError_t
kmg_screen(const kmg_args *a, int mode, const kmg_assign_plan *plan, cudaStream_t stream)
{
	cudaError_t e;
	const int	sms = plan->sms;
	const int64_t blocks = (a->n + SBM - 1) / SBM;
	const bool	h = a->Xh != NULL;

	if (a->n == 0)
		return cudaSuccess;
	if ((e = kmg_screen_prepare<false>(a, (a->k + SBN - 1) / SBN, h ? a->xhwg : 0, sms, stream)) != cudaSuccess)
		return e;
	/*
	 * The kernel by the rows' copy and the plan (wgmma where prepared for
	 * it); with bounds the rows listed are known on the device only, so
	 * blocks walk them, two an SM, as the wgmma kernel's always do (its
	 * ring runs on from one row block into the next).  The attributes per
	 * device (split fits run this on several).
	 */
	{
		typedef void (*screen_fn) (kmg_args, int);
		const bool	b = kmg_screen_bounds(*a, mode);
		const bool	wg = h && a->xhwg;	/* rows laid out for it: plan->wgmma when they were copied */
		const screen_fn fn = wg ? (b ? kmg_screen_wg_kernel<true> : kmg_screen_wg_kernel<false>)
			: h ? (b ? kmg_screen_kernel<true, true> : kmg_screen_kernel<true, false>)
			: (b ? kmg_screen_kernel<false, true> : kmg_screen_kernel<false, false>);
		const unsigned grid = (unsigned) ((b || wg) && blocks > 2 * sms ? 2 * sms : blocks);
		const size_t smem = wg ? WSMEM : SSMEM;

		if ((e = kmg_screen_attributes((const void *) fn, smem)) != cudaSuccess)
			return e;
		fn<<<grid, wg ? WNT : SNT, smem, stream>>>(*a, mode);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
	}
	kmg_screen_certify_kernel<<<(unsigned) sms * 4, 256, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/*
 * Whether the Hopper screen can run on the current device for rows of dp
 * values: compute capability 9.0, this build's code for it made for sm_90a
 * (kmg_wgmma_built), dp within WKS slices, and KMG_WGMMA=0 not in the
 * environment.  Called where a plan is prepared, outside any capture.
 */
int
kmg_screen_wgmma_usable(int dp, const kmg_device *dev)
{
	int			built = 0;

	if (kmg_env_off("KMG_WGMMA"))
		return 0;
	if (dev == NULL || dev->cc_major != 9 || dev->cc_minor != 0 || (dp + 31) / 32 > WKS)
		return 0;
	if (cudaMemcpyFromSymbol(&built, kmg_wgmma_built, sizeof(int)) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return 0;
	}
	return built;
}

/* Rows the screen can list with their candidates (the rest take the full settling). */
int
kmg_screen_cap(int64_t n)
{
	return kmg_scratch_rows(n, 4);
}
