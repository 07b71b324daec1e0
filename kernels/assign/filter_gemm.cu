/*
 * filter_gemm.cu
 *	  The float32 filter for large k (contract: filter_gemm.cuh): distances
 *	  as a tiled FFMA GEMM fused with a per-row top-2, so the n x k matrix
 *	  never leaves the registers.
 *
 * Use, once per Lloyd iteration: km_filter_prepare(tile, C', cn) into a
 * work buffer of km_filter_work_bytes(kp, dp) bytes (about 4 (dp + 1) k
 * bytes, a few microseconds), then km_filter_top2(tile, ...) over the rows,
 * on the same stream.  kp = km_filter_kpad(k) = k rounded up to 8; rows of C' past k are
 * never read (the prepared copy pads itself).
 *
 * Why it is fast.  The work is 2 n k dp flops against 4 n dp + 12 n bytes
 * of traffic, so it is bound by the FP32 pipe (one warp FFMA per clock per
 * SM sub-partition); everything here keeps that pipe fed:
 *	- Each block owns BM rows and walks every centroid tile of BN columns, so
 *	  the top-2 stays block-local: no atomics, no second pass, no n x k store
 *	  (cuBLAS writes 4 n k bytes for the same product).
 *	- Each thread holds an 8 x 16 accumulator tile: a k step is 6 LDS.128
 *	  per 128 FFMA, and the warp layout makes every LDS.128 one conflict-free
 *	  (broadcast) wavefront.  89% of the slice loop's instructions are FFMA.
 *	- The centroid operand is prepared as -2 C'^T cut into BN-column tiles,
 *	  so each 8-deep k-slice of a tile is one contiguous 8 x BN block, copied
 *	  with cp.async; the X slice is copied with cp.async too and transposed
 *	  by each thread (its own 16 bytes) into padded, conflict-free shared
 *	  memory.  Double buffering costs one barrier per k-slice, and the
 *	  pipeline runs straight across tile boundaries (the next tile's first
 *	  slice loads while this tile's epilogue runs).
 *	- The -2 is folded into the prepared operand and cn_j into the first FMA
 *	  of each tile, so the accumulator IS f_ij = cn_j + sum_k x_ik (-2 c_jk):
 *	  float32 FMAs only, in some order, which is what km_filter_slack
 *	  bounds.  The epilogue is about five instructions per element (two
 *	  FMNMX, FSETP, FSEL, SEL), 4% of the work at dp = 128, 1% at dp = 408.
 *	- Warps whose columns lie wholly past k in the last, partial tile skip
 *	  it, so k = 5000 costs 5056 columns, not 5120.
 * Measured on an H200 (NOTES.md): 0.95 to 1.14 times the time of strict-fp32
 * cublasSgemm computing the same product.  What limits it is the issue
 * rate, 75% of cycles against cuBLAS's 90% (ncu: short-scoreboard, dispatch
 * and fixed-latency stalls with 2 warps per scheduler), not the instruction
 * count, which is lower than cuBLAS's.
 */
#include "filter_gemm.cuh"
#include "kmg_device.cuh"

#include <limits.h>
#include <math.h>

namespace
{

constexpr int KM_BK = 8;		/* k-slice depth = KM_FILTER_DPAD */
static_assert(KM_BK == KM_FILTER_DPAD, "a k-slice is one padding unit");

/*
 * Tile shape.  BM x BN block tile, WM x WN warps, each warp LR x LC lanes
 * (LR * LC = 32), each lane a TM x TN micro-tile made of 4 x 4 pieces spaced
 * a warp-span apart (so LDS.128 addresses across a warp are contiguous).
 * REG: the running top-2 lives in registers (else in shared memory); MINB:
 * blocks per SM the registers are capped for.  A template so that the
 * harness (bench/bench_assign_gemm.cu) sweeps this very code; production
 * instantiates the two shapes below and nothing else.
 */
template <int BM_, int BN_, int WM_, int WN_, int LR_, int TM_, int TN_, bool REG_, int MINB_>
struct KmTile
{
	static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_;
	static constexpr int LR = LR_, LC = 32 / LR_, TM = TM_, TN = TN_;
	static constexpr bool REG = REG_;
	static constexpr int MINB = MINB_;
	static constexpr int NT = 32 * WM * WN;
	static constexpr int AP = BM + 4;	/* padded row of the A slice */
	static constexpr int A_F4 = BM * KM_BK / 4 / NT;
	static constexpr int B_F4 = BN * KM_BK / 4 / NT;
	static constexpr int SM_A = 2 * KM_BK * AP;
	static constexpr int SM_X = BM * KM_BK;	/* staging of the next X slice */
	static constexpr int SM_B = 2 * KM_BK * BN;
	static constexpr int SM_CN = 2 * BN;
	static constexpr int SM_ST = 3 * TM * NT;
	static constexpr size_t SMEM = (size_t) (SM_A + SM_X + SM_B + SM_CN + SM_ST) * sizeof(float);

	static_assert(LR * LC == 32, "a warp is 32 lanes");
	static_assert(LR <= 8 && LC <= 8, "one wavefront per LDS.128");
	static_assert(BM == WM * LR * TM && BN == WN * LC * TN, "tile = warps x lanes x micro-tile");
	static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tile made of 4 x 4 pieces");
	static_assert(A_F4 >= 1 && A_F4 * NT * 4 == BM * KM_BK, "A slice split evenly");
	static_assert(B_F4 >= 1 && B_F4 * NT * 4 == BN * KM_BK, "B slice split evenly");
	static_assert(BN / 4 <= NT, "cn row loaded in one go");
};

/*
 * The production configurations (NOTES.md, "Filter GEMM": fastest of the
 * sweep on the H200, each validated there); assign/dispatch.cu says which k
 * takes which:
 *	- KM_FILTER_TILE_256: 128 x 256 block, 256 threads (2 x 4 warps of 8 x 4
 *	  lanes), 8 x 16 accumulators per thread, top-2 in registers; 231
 *	  registers (ptxas, sm_90), 55.6 KB of shared memory, one block (8 warps)
 *	  per SM.
 *	- KM_FILTER_TILE_128: 128 x 128 block, 128 threads (2 x 2 warps of 8 x 4
 *	  lanes), 8 x 16 per thread, top-2 in registers; 231 registers, 34.0 KB,
 *	  two blocks per SM.
 * km_filter_prepare and km_filter_top2 must be given the same tile.
 */
using KmProdLarge = KmTile<128, 256, 2, 4, 8, 8, 16, true, 1>;
using KmProdSmall = KmTile<128, 128, 2, 2, 8, 8, 16, true, 2>;

/*
 * Transpose this thread's own staged float4s of the X slice ([BM][BK], as
 * cp.async left them; its own copies, so no barrier) into the A buffer
 * ([BK][AP]).  Keeps the staging out of registers during the FFMA loop.
 */
template <class T>
__device__ __forceinline__ void
km_stage_a(float *ad, const float *Xs, int tid, const int *a_r, const int *a_k)
{
#pragma unroll
	for (int u = 0; u < T::A_F4; u++)
	{
		const float4 v = *reinterpret_cast<const float4 *>(Xs + (tid + u * T::NT) * 4);

		ad[(a_k[u] + 0) * T::AP + a_r[u]] = v.x;
		ad[(a_k[u] + 1) * T::AP + a_r[u]] = v.y;
		ad[(a_k[u] + 2) * T::AP + a_r[u]] = v.z;
		ad[(a_k[u] + 3) * T::AP + a_r[u]] = v.w;
	}
}

/* Top-2 merge of (c1, ci, c2) into (b1, bi, b2); ties go to the lower index. */
__device__ __forceinline__ void
km_top2_merge(float &b1, int &bi, float &b2, float c1, int ci, float c2)
{
	if (c1 < b1 || (c1 == b1 && ci < bi))
	{
		b2 = fminf(b1, c2);
		b1 = c1;
		bi = ci;
	}
	else
		b2 = fminf(b2, c1);
}

/*
 * The stages of km_filter_body, one block's rows [m0, m0 + BM) against
 * every centroid tile.  Shared memory: As [2][BK][AP] (the X slice,
 * transposed), Xs [BM][BK] (the next X slice as cp.async leaves it), Bs
 * [2][BK][BN] (the operand's slice), Cs [2][BN] (its cn row), then St1,
 * St2, StI [TM/4][NT] (the running top-2 when not in registers, and the
 * per-thread top-2s merged at the end).
 */

/* The global rows this thread stages (clamped to the last row: results discarded). */
template <class T>
__device__ __forceinline__ void
km_filter_sources(const float *__restrict__ X, int64_t n, int dp, int64_t m0, int tid,
				  const float *(&xsrc)[T::A_F4], int (&a_r)[T::A_F4], int (&a_k)[T::A_F4])
{
#pragma unroll
	for (int u = 0; u < T::A_F4; u++)
	{
		int			idx = tid + u * T::NT;
		int64_t		row = m0 + (idx >> 1);

		a_r[u] = idx >> 1;
		a_k[u] = (idx & 1) * 4;
		if (row > n - 1)
			row = n - 1;
		xsrc[u] = X + row * dp + a_k[u];
	}
}

/* The running top-2 of each row of the micro-tile, empty. */
template <class T>
__device__ __forceinline__ void
km_filter_top2_init(int tid, float (&r1)[T::TM], float (&r2)[T::TM], int (&ri)[T::TM],
					float4 *St1, float4 *St2, int4 *StI)
{
#pragma unroll
	for (int i = 0; i < T::TM; i++)
	{
		r1[i] = INFINITY;
		r2[i] = INFINITY;
		ri[i] = INT_MAX;
	}
	if (!T::REG)
	{
#pragma unroll
		for (int g = 0; g < T::TM / 4; g++)
		{
			St1[g * T::NT + tid] = make_float4(INFINITY, INFINITY, INFINITY, INFINITY);
			St2[g * T::NT + tid] = make_float4(INFINITY, INFINITY, INFINITY, INFINITY);
			StI[g * T::NT + tid] = make_int4(INT_MAX, INT_MAX, INT_MAX, INT_MAX);
		}
	}
}

/*
 * Copies of the slice after the current one (possibly the next tile's
 * first, then with its cn row) into the other buffers, as one cp.async
 * group.
 */
template <class T>
__device__ __forceinline__ void
km_filter_prefetch(int tid, int it, int cur, int s1, int t1, const float *const (&xsrc)[T::A_F4],
				   const float *__restrict__ Bt, const float *__restrict__ Cn, float *Xs,
				   float *Bs, float *Cs)
{
	constexpr int BN = T::BN, NT = T::NT;
	const float *bsrc = Bt + (size_t) (it + 1) * (KM_BK * BN);
	float	   *bdst = Bs + (cur ^ 1) * (KM_BK * BN);

#pragma unroll
	for (int u = 0; u < T::A_F4; u++)
		kmg_cp16(Xs + (tid + u * NT) * 4, xsrc[u] + s1 * KM_BK);
#pragma unroll
	for (int u = 0; u < T::B_F4; u++)
		kmg_cp16(bdst + (tid + u * NT) * 4, bsrc + (tid + u * NT) * 4);
	if (s1 == 0 && tid < BN / 4)
		kmg_cp16(Cs + (cur ^ 1) * BN + tid * 4, Cn + (size_t) t1 * BN + tid * 4);
	kmg_cp16_commit();
}

/*
 * The main loop's work: one 8-deep slice (in buffer cur) of the
 * accumulators, the operands of step kk + 1 read (LDS.128) while step kk's
 * FMAs run; a tile's first slice starts from cn_j.
 */
template <class T>
__device__ __forceinline__ void
km_filter_slice(float (&acc)[T::TM][T::TN], const float *As, const float *Bs, const float *Cs,
				int cur, int arow, int bcol, bool first)
{
	constexpr int TM = T::TM, TN = T::TN, AP = T::AP, BN = T::BN;
	const float *as = As + cur * (KM_BK * AP) + arow;
	const float *bs = Bs + cur * (KM_BK * BN) + bcol;
	float		a[2][TM],
				b[2][TN];

#pragma unroll
	for (int g = 0; g < TM / 4; g++)
		*reinterpret_cast<float4 *>(&a[0][g * 4]) =
			*reinterpret_cast<const float4 *>(as + g * (T::LR * 4));
#pragma unroll
	for (int g = 0; g < TN / 4; g++)
		*reinterpret_cast<float4 *>(&b[0][g * 4]) =
			*reinterpret_cast<const float4 *>(bs + g * (T::LC * 4));

#pragma unroll
	for (int kk = 0; kk < KM_BK; kk++)
	{
		const int	c = kk & 1;

		if (kk + 1 < KM_BK)
		{
#pragma unroll
			for (int g = 0; g < TM / 4; g++)
				*reinterpret_cast<float4 *>(&a[c ^ 1][g * 4]) =
					*reinterpret_cast<const float4 *>(as + (kk + 1) * AP + g * (T::LR * 4));
#pragma unroll
			for (int g = 0; g < TN / 4; g++)
				*reinterpret_cast<float4 *>(&b[c ^ 1][g * 4]) =
					*reinterpret_cast<const float4 *>(bs + (kk + 1) * BN + g * (T::LC * 4));
		}
		if (kk == 0 && first)
		{
			/* First FMA of a tile starts from cn_j. */
			float		cn[TN];

#pragma unroll
			for (int g = 0; g < TN / 4; g++)
				*reinterpret_cast<float4 *>(&cn[g * 4]) =
					*reinterpret_cast<const float4 *>(Cs + cur * BN + bcol + g * (T::LC * 4));
#pragma unroll
			for (int i = 0; i < TM; i++)
#pragma unroll
				for (int j = 0; j < TN; j++)
					acc[i][j] = fmaf(a[c][i], b[c][j], cn[j]);
		}
		else
		{
#pragma unroll
			for (int i = 0; i < TM; i++)
#pragma unroll
				for (int j = 0; j < TN; j++)
					acc[i][j] = fmaf(a[c][i], b[c][j], acc[i][j]);
		}
	}
}

/*
 * A tile done: its accumulators folded into the running top-2 of each
 * row, columns ascending (col0: this lane's first column), so ties keep
 * the earlier index.
 */
template <class T>
__device__ __forceinline__ void
km_filter_fold(int tid, int col0, const float (&acc)[T::TM][T::TN], float (&r1)[T::TM],
			   float (&r2)[T::TM], int (&ri)[T::TM], float4 *St1, float4 *St2, int4 *StI)
{
	constexpr int TM = T::TM, TN = T::TN, NT = T::NT;
	int			col[TN];

#pragma unroll
	for (int g = 0; g < TN / 4; g++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			col[g * 4 + q] = col0 + g * (T::LC * 4) + q;

#pragma unroll
	for (int g = 0; g < TM / 4; g++)
	{
		float4		v1,
					v2;
		int4		vi;

		if (T::REG)
		{
			v1 = make_float4(r1[g * 4], r1[g * 4 + 1], r1[g * 4 + 2], r1[g * 4 + 3]);
			v2 = make_float4(r2[g * 4], r2[g * 4 + 1], r2[g * 4 + 2], r2[g * 4 + 3]);
			vi = make_int4(ri[g * 4], ri[g * 4 + 1], ri[g * 4 + 2], ri[g * 4 + 3]);
		}
		else
		{
			v1 = St1[g * NT + tid];
			v2 = St2[g * NT + tid];
			vi = StI[g * NT + tid];
		}
		float		b1[4] = {v1.x, v1.y, v1.z, v1.w};
		float		b2[4] = {v2.x, v2.y, v2.z, v2.w};
		int			bi[4] = {vi.x, vi.y, vi.z, vi.w};

#pragma unroll
		for (int q = 0; q < 4; q++)
#pragma unroll
			for (int j = 0; j < TN; j++)
			{
				const float f = acc[g * 4 + q][j];

				b2[q] = fminf(b2[q], fmaxf(b1[q], f));
				if (f < b1[q])
				{
					b1[q] = f;
					bi[q] = col[j];
				}
			}
		if (T::REG)
		{
#pragma unroll
			for (int q = 0; q < 4; q++)
			{
				r1[g * 4 + q] = b1[q];
				r2[g * 4 + q] = b2[q];
				ri[g * 4 + q] = bi[q];
			}
		}
		else
		{
			St1[g * NT + tid] = make_float4(b1[0], b1[1], b1[2], b1[3]);
			St2[g * NT + tid] = make_float4(b2[0], b2[1], b2[2], b2[3]);
			StI[g * NT + tid] = make_int4(bi[0], bi[1], bi[2], bi[3]);
		}
	}
}

/*
 * Epilogue: the WN x LC partial top-2s of each row (in shared memory,
 * stored there first when they were in registers) merged by one thread per
 * row, and the row's outputs written.
 */
template <class T>
__device__ __forceinline__ void
km_filter_epilogue(int tid, int64_t m0, int64_t n, int k, const float (&r1)[T::TM],
				   const float (&r2)[T::TM], const int (&ri)[T::TM], float4 *St1, float4 *St2,
				   int4 *StI, int32_t *__restrict__ best, float *__restrict__ fbest,
				   float *__restrict__ fsecond)
{
	constexpr int BM = T::BM, TM = T::TM, NT = T::NT;

	if (T::REG)
	{
#pragma unroll
		for (int g = 0; g < TM / 4; g++)
		{
			St1[g * NT + tid] = make_float4(r1[g * 4], r1[g * 4 + 1], r1[g * 4 + 2], r1[g * 4 + 3]);
			St2[g * NT + tid] = make_float4(r2[g * 4], r2[g * 4 + 1], r2[g * 4 + 2], r2[g * 4 + 3]);
			StI[g * NT + tid] = make_int4(ri[g * 4], ri[g * 4 + 1], ri[g * 4 + 2], ri[g * 4 + 3]);
		}
		__syncthreads();
	}

	/* Merge the WN * LC partial top-2s of each row; one thread per row. */
	const float *s1f = reinterpret_cast<const float *>(St1);
	const float *s2f = reinterpret_cast<const float *>(St2);
	const int  *sif = reinterpret_cast<const int *>(StI);

	for (int r = tid; r < BM; r += NT)
	{
		const int	wr_ = r / (T::LR * TM);
		const int	rem = r % (T::LR * TM);
		const int	g = rem / (T::LR * 4);
		const int	lr_ = (rem % (T::LR * 4)) / 4;
		const int	q = rem % 4;
		float		b1 = INFINITY,
					b2 = INFINITY;
		int			bi = INT_MAX;

		for (int wc_ = 0; wc_ < T::WN; wc_++)
			for (int lc_ = 0; lc_ < T::LC; lc_++)
			{
				const int	src = (wr_ * T::WN + wc_) * 32 + lr_ * T::LC + lc_;
				const int	e = (g * NT + src) * 4 + q;

				km_top2_merge(b1, bi, b2, s1f[e], sif[e], s2f[e]);
			}

		const int64_t row = m0 + r;

		if (row < n)
		{
			const int	b = bi < k ? bi : 0;

			best[row] = b;
			fbest[row] = b1;
			fsecond[row] = b2;
		}
	}
}

/*
 * One block: rows [m0, m0 + BM) against every centroid tile.  Bt is the
 * prepared operand (tile t, slice s at Bt + (t * S + s) * 8 * BN, laid out
 * [8][BN]); Cn the padded cn (+INF past k).  The prologue copies slice 0
 * and checks the run's stop flag meanwhile; the main loop walks the slices
 * of every tile straight across tile boundaries, the next slice's copies in
 * flight, folding each finished tile into the running top-2; the epilogue
 * merges the lanes' top-2s of each row.
 */
template <class T>
__device__ __forceinline__ void
km_filter_body(const float *__restrict__ X, int64_t n, int dp,
			   const float *__restrict__ Bt, const float *__restrict__ Cn,
			   int k, int ntiles,
			   int32_t *__restrict__ best, float *__restrict__ fbest,
			   float *__restrict__ fsecond, const int *stop)
{
	constexpr int BM = T::BM, BN = T::BN, TM = T::TM, TN = T::TN, NT = T::NT;
	constexpr int AP = T::AP;

	extern __shared__ float4 km_smem4[];
	float	   *As = reinterpret_cast<float *>(km_smem4);	/* [2][BK][AP] */
	float	   *Xs = As + T::SM_A;	/* [BM][BK], as in X */
	float	   *Bs = Xs + T::SM_X;	/* [2][BK][BN] */
	float	   *Cs = Bs + T::SM_B;	/* [2][BN] */
	float4	   *St1 = reinterpret_cast<float4 *>(Cs + T::SM_CN);	/* [TM/4][NT] */
	float4	   *St2 = St1 + (TM / 4) * NT;
	int4	   *StI = reinterpret_cast<int4 *>(St2 + (TM / 4) * NT);

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	wr = warp / T::WN;
	const int	wc = warp % T::WN;
	const int	arow = wr * (T::LR * TM) + (lane / T::LC) * 4;
	const int	bcol = wc * (T::LC * TN) + (lane % T::LC) * 4;
	const int	wcol0 = wc * (T::LC * TN);
	const int64_t m0 = (int64_t) blockIdx.x * BM;
	const int	S = dp / KM_BK;
	const int	total = ntiles * S;
	const float *xsrc[T::A_F4];
	int			a_r[T::A_F4],
				a_k[T::A_F4];

	km_filter_sources<T>(X, n, dp, m0, tid, xsrc, a_r, a_k);

	/* Prologue: slice 0 of tile 0 into buffer 0. */
#pragma unroll
	for (int u = 0; u < T::A_F4; u++)
		kmg_cp16(Xs + (tid + u * NT) * 4, xsrc[u]);
#pragma unroll
	for (int u = 0; u < T::B_F4; u++)
		kmg_cp16(Bs + (tid + u * NT) * 4, Bt + (tid + u * NT) * 4);
	if (tid < BN / 4)
		kmg_cp16(Cs + tid * 4, Cn + tid * 4);
	kmg_cp16_commit();
	/*
	 * The run's stop flag, read while the prologue's copies are in flight
	 * (read before them, its latency delayed every block's start).
	 */
	if (stop != nullptr && *(volatile const int *) stop != 0)
	{
		kmg_cp16_wait<0>();
		return;
	}
	kmg_cp16_wait<0>();
	km_stage_a<T>(As, Xs, tid, a_r, a_k);

	/* Running top-2 per row of the micro-tile, over this lane's columns. */
	float		r1[TM],
				r2[TM];
	int			ri[TM];

	km_filter_top2_init<T>(tid, r1, r2, ri, St1, St2, StI);
	kmg_cp16_wait<0>();
	__syncthreads();

	/* Main loop: slice s of tile t in buffer cur, the next one's copies in flight. */
	float		acc[TM][TN];
	int			t = 0,
				s = 0;

	for (int it = 0; it < total; it++)
	{
		const int	cur = it & 1;
		int			s1 = s + 1,
					t1 = t;

		if (s1 == S)
		{
			s1 = 0;
			t1++;
		}
		const bool	has_next = it + 1 < total;

		if (has_next)
			km_filter_prefetch<T>(tid, it, cur, s1, t1, xsrc, Bt, Cn, Xs, Bs, Cs);

		/* Warps whose columns all lie past k (last tile only) sit it out. */
		const bool	active = wcol0 < k - t * BN;

		if (active)
		{
			km_filter_slice<T>(acc, As, Bs, Cs, cur, arow, bcol, s == 0);
			if (s == S - 1)
				km_filter_fold<T>(tid, t * BN + bcol, acc, r1, r2, ri, St1, St2, StI);
		}

		if (has_next)
		{
			kmg_cp16_wait<0>();
			km_stage_a<T>(As + (cur ^ 1) * (KM_BK * AP), Xs, tid, a_r, a_k);
		}
		__syncthreads();
		t = t1;
		s = s1;
	}

	km_filter_epilogue<T>(tid, m0, n, k, r1, r2, ri, St1, St2, StI, best, fbest, fsecond);
}

template <class T>
__global__ void __launch_bounds__(T::NT, T::MINB)
km_filter_kernel(const float *__restrict__ X, int64_t n, int dp,
				 const float *__restrict__ Bt, const float *__restrict__ Cn,
				 int k, int ntiles,
				 int32_t *__restrict__ best, float *__restrict__ fbest,
				 float *__restrict__ fsecond, const int *stop)
{
	km_filter_body<T>(X, n, dp, Bt, Cn, k, ntiles, best, fbest, fsecond, stop);
}

/*
 * -2 C'^T cut into BN-column tiles ([tile][dp][BN]) plus cn padded with +INF
 * to whole tiles; rows j >= k of C' are never read.  A 32 x 32 transpose
 * through shared memory keeps both sides coalesced.
 */
template <int BN>
__global__ void
km_filter_prepare_kernel(const float *__restrict__ C, const float *__restrict__ cn,
						 int k, int dp, float *__restrict__ Bt, float *__restrict__ Cnt)
{
	__shared__ float tile[32][33];
	const int	c0 = blockIdx.x * 32;
	const int	j0 = blockIdx.y * 32;
	const int	tx = threadIdx.x;

	for (int r = threadIdx.y; r < 32; r += blockDim.y)
	{
		const int	j = j0 + r,
					c = c0 + tx;

		tile[r][tx] = (j < k && c < dp) ? -2.0f * C[(size_t) j * dp + c] : 0.0f;
	}
	__syncthreads();
	for (int r = threadIdx.y; r < 32; r += blockDim.y)
	{
		const int	c = c0 + r,
					j = j0 + tx;

		if (c < dp)
			Bt[((size_t) (j / BN) * dp + c) * BN + j % BN] = tile[tx][r];
	}
	if (blockIdx.x == 0 && threadIdx.y == 0)
	{
		const int	j = j0 + tx;

		Cnt[j] = j < k ? cn[j] : INFINITY;
	}
}

template <int BN>
size_t
km_filter_work_bytes_t(int kp, int dp)
{
	const size_t tiles = ((size_t) kp + BN - 1) / BN;

	return tiles * BN * ((size_t) dp + 1) * sizeof(float);
}

template <int BN>
cudaError_t
km_filter_prepare_t(const float *C, const float *cn, int k, int kp, int dp,
					void *work, cudaStream_t stream)
{
	if (k < 1 || kp < k || dp < KM_BK || dp % KM_BK != 0 || !C || !cn || !work)
		return cudaErrorInvalidValue;

	const int	tiles = (kp + BN - 1) / BN;
	float	   *Bt = static_cast<float *>(work);
	float	   *Cnt = Bt + (size_t) tiles * BN * dp;
	dim3		grid((dp + 31) / 32, tiles * (BN / 32));

	if (grid.y > 65535)
		return cudaErrorInvalidValue;
	km_filter_prepare_kernel<BN><<<grid, dim3(32, 8), 0, stream>>>(C, cn, k, dp, Bt, Cnt);
	return cudaGetLastError();
}

template <class T>
cudaError_t
km_filter_top2_t(const float *X, int64_t n, int dp, const void *work, int k, int kp,
				 int32_t *best, float *fbest, float *fsecond, cudaStream_t stream,
				 const int *stop = nullptr)
{
	if (n < 0 || k < 1 || kp < k || dp < KM_BK || dp % KM_BK != 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return cudaSuccess;
	if (!X || !work || !best || !fbest || !fsecond)
		return cudaErrorInvalidValue;

	const int	ntiles = (k + T::BN - 1) / T::BN;
	const int	ptiles = (kp + T::BN - 1) / T::BN;
	const int64_t blocks = (n + T::BM - 1) / T::BM;

	if ((int64_t) ntiles * (dp / KM_BK) > INT_MAX || blocks > INT_MAX)
		return cudaErrorInvalidValue;

	const float *Bt = static_cast<const float *>(work);
	const float *Cnt = Bt + (size_t) ptiles * T::BN * dp;
	cudaError_t err = cudaFuncSetAttribute(km_filter_kernel<T>,
										   cudaFuncAttributeMaxDynamicSharedMemorySize,
										   (int) T::SMEM);

	if (err != cudaSuccess)
		return err;
	km_filter_kernel<T><<<(unsigned) blocks, T::NT, T::SMEM, stream>>>(
		X, n, dp, Bt, Cnt, k, ntiles, best, fbest, fsecond, stop);
	return cudaGetLastError();
}


}								/* namespace */

/* kp: k rounded up to 8; the prepared copy pads to whole tiles itself. */
int
km_filter_kpad(int k)
{
	return (k + 7) / 8 * 8;
}

/* Centroids per prepared tile (the layout of filter_gemm.cuh). */
int
km_filter_tile_cols(int tile)
{
	return tile == KM_FILTER_TILE_128 ? KmProdSmall::BN : KmProdLarge::BN;
}

/* Room for either layout: whole 256-column tiles are never fewer bytes. */
size_t
km_filter_work_bytes(int kp, int dp)
{
	static_assert(KmProdSmall::BN <= KmProdLarge::BN &&
				  KmProdLarge::BN % KmProdSmall::BN == 0, "small layout fits in the large");
	return km_filter_work_bytes_t<KmProdLarge::BN>(kp, dp);
}

/* The centroid operand of one iteration, in the given tile's layout. */
cudaError_t
km_filter_prepare(int tile, const float *C, const float *cn, int k, int kp, int dp,
				  void *work, cudaStream_t stream)
{
	if (tile == KM_FILTER_TILE_128)
		return km_filter_prepare_t<KmProdSmall::BN>(C, cn, k, kp, dp, work, stream);
	return km_filter_prepare_t<KmProdLarge::BN>(C, cn, k, kp, dp, work, stream);
}

/* The filter over every row with the given tile. */
cudaError_t
km_filter_top2(int tile, const float *X, int64_t n, int dp, const void *work, int k, int kp,
			   int32_t *best, float *fbest, float *fsecond, cudaStream_t stream,
			   const int *stop)
{
	if (tile == KM_FILTER_TILE_128)
		return km_filter_top2_t<KmProdSmall>(X, n, dp, work, k, kp, best, fbest, fsecond, stream,
											 stop);
	return km_filter_top2_t<KmProdLarge>(X, n, dp, work, k, kp, best, fbest, fsecond, stream,
										 stop);
}
