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
 * kmg_screen_certify_kernel settles it with the exact cost (kmg_chain4) of
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
 *	- a tile's first MMAs take cn_j (+inf past k) as their addend, so the
 *	  accumulators need no copy of it and end the tile as s_ij; the tile's
 *	  epilogue lowers each row's running best (shared memory, the least
 *	  over the row's 8 threads), appends to the row's list every value
 *	  within the slack of it (shared-memory atomics, rare), and has the
 *	  row's thread drop the entries the lower best has put out of the
 *	  running: every threshold is at least the final T, so no candidate is
 *	  missed, and the list stays short (a row whose list overflows is
 *	  settled fully);
 *	- after the last tile, the list is the candidates: the label or the
 *	  listing.
 * Lists are filled in an order that varies from run to run; the labels do
 * not depend on it.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>

namespace
{

constexpr int SBM = 128;		/* rows a block */
constexpr int SBN = 128;		/* centroids a tile (= KM_FILTER_TILE_128's columns) */
constexpr int SSLICE = 64;		/* bytes of a row a k-slice: 16 TF32 or 32 float16 columns */
constexpr int SSTAGES = 4;		/* cp.async ring */
constexpr int SNT = 128;		/* 4 warps, 2 x 2, each 64 rows x 64 centroids */
constexpr int SAP = SSLICE / 4 + 4;	/* padded row of a slice in floats: ldmatrix rows 80 bytes apart, no conflicts */
constexpr int SMC = 16;			/* candidates a row lists in shared memory */
constexpr int SA_FL = SBM * SAP;
constexpr int SB_FL = SBN * SAP;
constexpr size_t SSMEM = (size_t) SSTAGES * (SA_FL + SB_FL) * sizeof(float) +
	(size_t) SBM * SMC * (sizeof(float) + sizeof(int)) + (size_t) 4 * SBM * sizeof(int);

static_assert(SNT == SBM, "one thread a row at the end");
static_assert(KMG_SCREEN_CANDS <= SMC && KMG_SCREEN_CANDS == 8, "the certify kernel's lanes");

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

/* *p = min(*p, v) for floats in shared memory (their bits ordered as integers; v not NaN). */
__device__ __forceinline__ void
kmg_atomic_min_float(float *p, float v)
{
	if (v >= 0.0f)
		atomicMin((int *) p, __float_as_int(v));
	else
		atomicMax((unsigned int *) p, __float_as_uint(v));
}

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

/* Four 8 x 8 matrices of 16-bit values in shared memory (lane l gives row l % 8 of matrix l / 8). */
__device__ __forceinline__ void
kmg_ldsm4(uint32_t *r, const float *p)
{
	const unsigned a = (unsigned) __cvta_generic_to_shared(p);

	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
				 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
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
 * The scales of the float16 screen for the current centroids: the centroid
 * operand's exponent ce (km_screen16_exp of cmax) and S = 2^(27 - xe - ce)
 * (1 when they are out of range: every row is then settled exactly).
 */
__device__ __forceinline__ int
kmg_screen16_ce(const kmg_args &a)
{
	return km_screen16_exp(a.ctl->cmax);
}

/*
 * The slack of a row in the screen's units (km_screen_slack, or
 * km_screen16_slack times S); +inf when it cannot be bounded (settled
 * exactly).
 */
template <bool H>
__device__ __forceinline__ float
kmg_row_screen_slack(const kmg_args &a, float xn, float cmax, int all_exact, int ce)
{
	if (all_exact || (a.cosine && xn == 0.0f))
		return INFINITY;
	if (H)
		return ldexpf(km_screen16_slack(a.d, a.dp, xn, cmax, a.xexp, ce),
					  km_screen16_sexp(a.xexp, ce));
	return km_screen_slack(a.d, a.dp, xn, cmax);
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
kmg_screen_slice(float (&acc)[4][8][4], const float *cA, const float *cB,
				 const float (&cinit)[8][2])
{
	uint32_t	af[2][4][4],
				bf[2][8][2];

#pragma unroll
	for (int k2 = 0; k2 < 2; k2++)
	{
#pragma unroll
		for (int mt = 0; mt < 4; mt++)
			kmg_ldsm4(af[k2][mt], cA + mt * 16 * SAP + 8 * k2);
#pragma unroll
		for (int np = 0; np < 4; np++)
		{
			uint32_t	r[4];

			kmg_ldsm4(r, cB + np * 16 * SAP + 8 * k2);
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
 * The screen (file header).  Grid: one block per 128 rows; 128 threads;
 * SSMEM bytes of dynamic shared memory.
 */
template <bool H>
__global__ void __launch_bounds__(SNT, 2)
kmg_screen_kernel(kmg_args a, int mode)
{
	typedef typename kmg_sfmt<H>::T T;
	constexpr int PER16 = kmg_sfmt<H>::PER16;
	constexpr int SBK = SSLICE / (int) sizeof(T);	/* columns a k-slice */

	extern __shared__ __align__(16) unsigned char kmg_ssmem[];
	float	   *sA = (float *) kmg_ssmem;
	float	   *sB = sA + SSTAGES * SA_FL;
	float	   *sval = sB + SSTAGES * SB_FL;
	int		   *sid = (int *) (sval + SBM * SMC);
	int		   *scnt = sid + SBM * SMC;	/* a row's listed candidates */
	int		   *sover = scnt + SBM;	/* a candidate found no room: settle fully */
	float	   *sbest = (float *) (sover + SBM);	/* the row's running best */
	float	   *sslack = sbest + SBM;	/* the row's slack */

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	wm = warp >> 1,
				wn = warp & 1;
	const int	g = lane >> 2,
				t4 = lane & 3;
	const int64_t row0 = (int64_t) blockIdx.x * SBM;
	const int64_t n = a.n;
	const int	dp = a.dp;
	const int	ks = (dp + SBK - 1) / SBK;
	const int	tiles = (a.kp + SBN - 1) / SBN;
	const int	total = tiles * ks;
	const T    *X = H ? (const T *) a.Xh : (const T *) a.X;
	const T    *Bt = (const T *) a.sop;	/* tiles * SBN rows of dp: r(-2 c'), zeros past k */
	const float *Cnt = (const float *) (Bt + (size_t) tiles * SBN * dp);

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;
	const int	ce = H ? kmg_screen16_ce(a) : 0;

	scnt[tid] = 0;
	sover[tid] = 0;
	sbest[tid] = INFINITY;
	sslack[tid] = row0 + tid < n ?
		kmg_row_screen_slack<H>(a, a.xnorm[row0 + tid], cmax, all_exact, ce) : 0.0f;

	/*
	 * The copies of this thread: 16 bytes of rows lr + 32 u of each slice
	 * (u < 4), of the rows and of the operand's tile; the walk's next slice
	 * is (lt, lc0), advanced one slice per load.
	 */
	const int	lr = tid >> 2,
				lcc = (tid & 3) * PER16;
	const T    *xsrc[4];
	int			xok[4];
	int			lt = 0,
				lc0 = 0;

#pragma unroll
	for (int u = 0; u < 4; u++)
	{
		const int64_t i = row0 + lr + 32 * u;

		xok[u] = i < n;
		xsrc[u] = X + (xok[u] ? i : 0) * dp + lcc;
	}

	auto load = [&] (int stage)
	{
		float	   *dA = sA + stage * SA_FL + lr * SAP + (tid & 3) * 4;
		float	   *dB = sB + stage * SB_FL + lr * SAP + (tid & 3) * 4;
		const int	cok = lc0 + lcc < dp;
		const T    *bsrc = Bt + ((size_t) lt * SBN + lr) * dp + lc0 + lcc;

#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			const int	ok = cok && xok[u];

			kmg_cp16_zfill(dA + 32 * u * SAP, ok ? (const void *) (xsrc[u] + lc0) : (const void *) X,
						   ok ? 16 : 0);
			kmg_cp16_zfill(dB + 32 * u * SAP, cok ? (const void *) (bsrc + (size_t) 32 * u * dp)
						   : (const void *) Bt, cok ? 16 : 0);
		}
		lc0 += SBK;
		if (lc0 >= dp)
		{
			lc0 = 0;
			lt++;
		}
	};

#pragma unroll
	for (int p = 0; p < SSTAGES - 1; p++)
	{
		if (p < total)
			load(p);
		kmg_cp16_commit();
	}

	float		acc[4][8][4];
	int			q = 0;

	/* ldmatrix rows of this lane (kmg_screen_slice) */
	const int	mi = lane >> 3,
				mr = lane & 7;
	const int	offA = (wm * 64 + mr + (mi & 1) * 8) * SAP + (mi >> 1) * 4;
	const int	offB = (wn * 64 + mr + (mi >> 1) * 8) * SAP + (mi & 1) * 4;

	for (int t = 0; t < tiles; t++)
	{
		/* the tile's addends cn_j: the columns 2 t4, 2 t4 + 1 of each n-tile */
		float		cinit[8][2];

#pragma unroll
		for (int nt = 0; nt < 8; nt++)
		{
			const int	j = t * SBN + wn * 64 + nt * 8 + 2 * t4;

			cinit[nt][0] = Cnt[j];
			cinit[nt][1] = Cnt[j + 1];
		}
		for (int s = 0; s < ks; s++, q++)
		{
			kmg_cp16_wait<SSTAGES - 2>();
			__syncthreads();
			if (q + SSTAGES - 1 < total)
				load((q + SSTAGES - 1) % SSTAGES);
			kmg_cp16_commit();

			const float *cA = sA + (q % SSTAGES) * SA_FL + offA;
			const float *cB = sB + (q % SSTAGES) * SB_FL + offB;

			if (s == 0)
				kmg_screen_slice<H, true>(acc, cA, cB, cinit);
			else
				kmg_screen_slice<H, false>(acc, cA, cB, cinit);
		}

		/*
		 * The tile's epilogue.  First the row's running best (the least
		 * of its 8 threads' values so far); then every value within the
		 * slack of it joins the row's list; then the row's thread drops
		 * the entries that the better best has put out of the running.
		 * The best only falls, so the final list holds every value within
		 * the slack of the final best.
		 */
		float		mrow[4][2];

#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				float		m = INFINITY;

#pragma unroll
				for (int nt = 0; nt < 8; nt++)
					m = fminf(m, fminf(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
				mrow[mt][h] = m;
				m = fminf(m, __shfl_xor_sync(0xffffffffu, m, 1));
				m = fminf(m, __shfl_xor_sync(0xffffffffu, m, 2));
				if (t4 == 0 && !isnan(m))
					kmg_atomic_min_float(&sbest[wm * 64 + mt * 16 + h * 8 + g], m);
			}
		__syncthreads();
#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				const int	r = wm * 64 + mt * 16 + h * 8 + g;
				const float thr = sbest[r] + sslack[r];

				/* the thread's values of this row all lie past it: nothing to list */
				if (!(mrow[mt][h] <= thr))
					continue;
#pragma unroll
				for (int nt = 0; nt < 8; nt++)
#pragma unroll
					for (int e = 0; e < 2; e++)
						if (acc[mt][nt][2 * h + e] <= thr)
						{
							const int	slot = atomicAdd(&scnt[r], 1);

							if (slot < SMC)
							{
								sval[r * SMC + slot] = acc[mt][nt][2 * h + e];
								sid[r * SMC + slot] = t * SBN + wn * 64 + nt * 8 + 2 * t4 + e;
							}
							else
								sover[r] = 1;
						}
			}
		__syncthreads();
		{
			const float thr = sbest[tid] + sslack[tid];
			const int	c = min(scnt[tid], SMC);
			int			w = 0;

			for (int s = 0; s < c; s++)
			{
				const float v = sval[tid * SMC + s];

				if (v <= thr)
				{
					sid[tid * SMC + w] = sid[tid * SMC + s];
					sval[tid * SMC + w++] = v;
				}
			}
			scnt[tid] = w;
		}
	}
	kmg_cp16_wait<0>();
	__syncthreads();

	/* one thread a row: the label, the candidates' listing, or the full settling */
	int			moved = 0;
	const int64_t i = row0 + tid;

	if (i < n)
	{
		const float best = sbest[tid];
		const float thr = best + sslack[tid];
		const int	cnt = scnt[tid];
		int			full = sover[tid] || !(cnt >= 1 && cnt <= SMC) || !isfinite(thr);
		int			nc = 0,
					label = -1;

		if (!full)
		{
			for (int s = 0; s < cnt; s++)
				if (sval[tid * SMC + s] <= thr)
				{
					nc++;
					label = sid[tid * SMC + s];
				}
			if (nc < 1 || nc > KMG_SCREEN_CANDS)
				full = 1;
		}
		a.fbest[i] = H ? ldexpf(best, -km_screen16_sexp(a.xexp, ce)) : best;
		if (!full && nc > 1)
		{
			const int	pos = atomicAdd(&a.ctl->ncand, 1);

			label = -1;
			if (pos < a.ccap)
			{
				int			w = 0;

				a.crow[pos] = (int32_t) i;
				for (int s = 0; s < cnt; s++)
					if (sval[tid * SMC + s] <= thr)
						a.cids[(size_t) pos * KMG_SCREEN_CANDS + w++] = sid[tid * SMC + s];
				for (; w < KMG_SCREEN_CANDS; w++)
					a.cids[(size_t) pos * KMG_SCREEN_CANDS + w] = -1;
			}
			else
				full = 1;
		}
		if (full)
			a.amb[atomicAdd(&a.ctl->namb, 1)] = (int32_t) i;
		else if (label >= 0)
		{
			if (mode == KMG_MODE_ITER && a.labels[i] != label)
				moved++;
			a.labels[i] = label;
		}
	}
	if (mode == KMG_MODE_ITER)
		kmg_block_add_int(moved, &a.ctl->moved);
}

/*
 * The listed rows, four a warp: lane l of a row's eight computes the exact
 * cost of candidate l, and the eight take the least, ties to the lowest
 * index (kmg_warp_argmin over groups of 8 lanes).
 */
__global__ void __launch_bounds__(256)
kmg_screen_certify_kernel(kmg_args a, int mode)
{
	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	nlisted = min(*(volatile int *) &a.ctl->ncand, a.ccap);
	const int	gw = (int) ((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	const int	nw = (int) ((gridDim.x * blockDim.x) >> 5);
	const int	sub = (threadIdx.x & 31) >> 3;
	const int	l8 = threadIdx.x & 7;
	const int	q4 = a.dp / 4;
	int			moved = 0;

	for (int base = gw * 4; base < nlisted; base += nw * 4)
	{
		const int	e = base + sub;
		double		c = INFINITY;
		int			j = INT_MAX;
		int64_t		i = -1;

		if (e < nlisted)
		{
			const int	cj = a.cids[(size_t) e * KMG_SCREEN_CANDS + l8];

			i = a.crow[e];
			if (cj >= 0)
			{
				c = kmg_chain4(reinterpret_cast<const float4 *>(a.X + (size_t) i * a.dp),
							   reinterpret_cast<const float4 *>(a.C + (size_t) cj * a.dp), q4,
							   a.cosine ? a.cnorm[cj] : 0.0, a.cosine);
				j = cj;
			}
		}
		kmg_warp_argmin<8>(c, j);
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
 * The screen's centroid operand, once an iteration: for tiles * SBN rows j,
 * the operand r(-2 c'_jc) (zeros for j >= k: rows past the end of the last
 * tile), then S cn_j (+inf for j >= k).  Rounded here once, so the screen
 * converts at most the rows' values.  TF32 (H false): floats tf32(-2 c'),
 * S = 1; -2 is exact, so this is -2 tf32(c').  float16: h(-2 2^(13 - ce) c')
 * and S = 2^(27 - xe - ce) (km_screen16_slack; ce from the cmax of the
 * previous finalize, as the screen reads it).
 */
template <bool H>
__global__ void
kmg_screen_prepare_kernel(kmg_args a, int rows)
{
	typedef typename kmg_sfmt<H>::T T;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t nv = (int64_t) rows * a.dp;
	const float *__restrict__ Cf = a.Cf;
	T		   *op = (T *) a.sop;
	float	   *cns = (float *) (op + nv);
	const int	ce = H ? kmg_screen16_ce(a) : 0;
	const int	ok = H && km_screen16_ok(a.xexp, ce);
	const float tau = ok ? ldexpf(-2.0f, 13 - ce) : -2.0f;
	const float S = ok ? ldexpf(1.0f, km_screen16_sexp(a.xexp, ce)) : 1.0f;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < nv + rows; e += stride)
	{
		if (e < nv)
		{
			const int64_t j = e / a.dp;

			if (H)
				op[e] = (T) (j < a.k ? kmg_h16(tau * Cf[e]) : 0);
			else
				op[e] = j < a.k ? __uint_as_float(kmg_tf32(-2.0f * Cf[e])) : 0.0f;
		}
		else
		{
			const int64_t j = e - nv;

			cns[j] = j < a.k ? S * a.cn[j] : INFINITY;
		}
	}
}

/*
 * The float16 copy of the rows the screen reads (a->Xh), once a call:
 * h(2^(14 - xe) x), eight values a thread and step (dp is a multiple of 8).
 */
__global__ void
kmg_screen_rows16_kernel(const float *__restrict__ X, int64_t nvals, int xe,
						 unsigned short *__restrict__ Xh)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const float sigma = ldexpf(1.0f, 14 - xe);

	for (int64_t v = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; v < nvals / 8; v += stride)
	{
		const float4 p = reinterpret_cast<const float4 *>(X)[2 * v];
		const float4 q = reinterpret_cast<const float4 *>(X)[2 * v + 1];
		uint4		o;

		o.x = kmg_h16(sigma * p.x) | ((uint32_t) kmg_h16(sigma * p.y) << 16);
		o.y = kmg_h16(sigma * p.z) | ((uint32_t) kmg_h16(sigma * p.w) << 16);
		o.z = kmg_h16(sigma * q.x) | ((uint32_t) kmg_h16(sigma * q.y) << 16);
		o.w = kmg_h16(sigma * q.z) | ((uint32_t) kmg_h16(sigma * q.w) << 16);
		reinterpret_cast<uint4 *>(Xh)[v] = o;
	}
}

/*
 * The float16 copy of n rows of dp floats into Xh (n x dp values of 2
 * bytes), scaled by 2^(14 - xe) for xe = km_screen16_exp(max |x_c|); the
 * caller then sets a->Xh and a->xexp.
 */
cudaError_t
kmg_screen_rows16(const float *X, int64_t n, int dp, float xabsmax, unsigned short *Xh, int *xexp,
				  int sms, cudaStream_t stream)
{
	const int64_t nv = n * dp;
	int64_t		blocks = (nv / 8 + 255) / 256;

	*xexp = km_screen16_exp(xabsmax);
	if (nv == 0)
		return cudaSuccess;
	if (blocks > (int64_t) sms * 8)
		blocks = (int64_t) sms * 8;
	kmg_screen_rows16_kernel<<<(unsigned) blocks, 256, 0, stream>>>(X, nv, *xexp, Xh);
	return cudaGetLastError();
}

/* Bytes of the row copy a float16 screen keeps for n rows of dp values. */
size_t
kmg_screen_rows16_bytes(int64_t n, int dp)
{
	return (size_t) n * dp * sizeof(unsigned short);
}

/* Bytes of the screen's centroid operand (a->sop) for k centroids of dp floats (either format). */
size_t
kmg_screen_work_bytes(int k, int dp)
{
	const size_t rows = (size_t) KMG_ROUND_UP(k, SBN);

	return (rows * dp + rows) * sizeof(float);
}

/* Raise the screen kernel's shared memory to SSMEM, with the largest carveout (per device). */
template <bool H>
static cudaError_t
kmg_screen_attributes(void)
{
	cudaError_t e;

	e = cudaFuncSetAttribute((const void *) kmg_screen_kernel<H>,
							 cudaFuncAttributeMaxDynamicSharedMemorySize, (int) SSMEM);
	/* two blocks an SM, whatever the driver would pick */
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute((const void *) kmg_screen_kernel<H>,
								 cudaFuncAttributePreferredSharedMemoryCarveout,
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
kmg_screen(const kmg_args *a, int mode, int sms, cudaStream_t stream)
{
	cudaError_t e;
	const int64_t blocks = (a->n + SBM - 1) / SBM;
	const bool	h = a->Xh != NULL;

	if (a->n == 0)
		return cudaSuccess;
	{
		const int	rows = KMG_ROUND_UP(a->k, SBN);
		int64_t		pb = ((int64_t) rows * (a->dp + 1) + 255) / 256;

		if (pb > (int64_t) sms * 4)
			pb = (int64_t) sms * 4;
		if (h)
			kmg_screen_prepare_kernel<true><<<(unsigned) pb, 256, 0, stream>>>(*a, rows);
		else
			kmg_screen_prepare_kernel<false><<<(unsigned) pb, 256, 0, stream>>>(*a, rows);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
	}
	/* per device: split fits run this on several */
	if ((e = h ? kmg_screen_attributes<true>() : kmg_screen_attributes<false>()) != cudaSuccess)
		return e;
	if (h)
		kmg_screen_kernel<true><<<(unsigned) blocks, SNT, SSMEM, stream>>>(*a, mode);
	else
		kmg_screen_kernel<false><<<(unsigned) blocks, SNT, SSMEM, stream>>>(*a, mode);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	kmg_screen_certify_kernel<<<(unsigned) sms * 4, 256, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/* Rows the screen can list with their candidates (the rest take the full settling). */
int
kmg_screen_cap(int64_t n)
{
	return kmg_scratch_rows(n, 4);
}
