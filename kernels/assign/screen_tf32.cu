/*
 * screen_tf32.cu
 *	  The tensor-core screen for large k: the float32 filter's distances
 *	  (filter_gemm.cuh) computed on tensor cores in TF32, fused with a
 *	  per-row list of the centroids that can still win; then the exact
 *	  settling of each listed row over its few candidates.
 *
 * What it decides, per row i (k centroids, the filter's operands: rows X
 * of dp floats, the prepared -2 C'^T of km_filter_prepare with the 128-
 * column tile, cn):
 *		s_ij = cn_j + sum_c tf32(x_ic) tf32(-2 c_jc)	(tensor cores, fp32 sums)
 *		b    = min_j s_ij,  T = b + km_screen_slack(dp, |x_i|, cmax)
 *		candidates = { j : s_ij <= T }
 * km_screen_slack bounds |s_ij - f_ij| twice over, so the exact winner
 * (km_exact_nearest: the least exact cost, ties to the lowest index) is
 * always a candidate.  One candidate: it is the label.  Two to
 * KMG_SCREEN_CANDS: the row is listed with them (crow, cids) and
 * kmg_screen_certify_kernel settles it with the exact cost (kmg_chain4) of
 * each.  More, or a row the slack cannot bound (|x| or the centroids near
 * the float range, degenerate centroids, a zero row under cosine): the row
 * goes to the filter path's list (amb) with fbest = b, and exact.cu settles
 * it against every centroid, with the screen's slack added to the float32
 * filter's (kmg_settle_slack).  So labels are km_exact_nearest's, bit for
 * bit, whatever the tensor cores' rounding within the bound.
 *
 * How.  A block owns 128 rows and walks every 128-centroid tile of the
 * prepared operand, so a row's list stays in the block's shared memory:
 *	- 4 warps of 64 x 64 (mma.sync m16n8k8 TF32: 4 x 8 tiles, 128
 *	  accumulators a thread); k-slices of 16 columns in a 4-stage cp.async
 *	  ring (rows and operand zero-filled past n and dp), padded so that
 *	  every fragment load is one conflict-free wavefront;
 *	- the accumulators start at cn_j (+inf past k), so a tile's results are
 *	  s_ij; its epilogue lowers each row's running best (shared memory, the
 *	  least over the row's 8 threads), appends to the row's list every value
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

#include <limits.h>
#include <math.h>

namespace
{

constexpr int SBM = 128;		/* rows a block */
constexpr int SBN = 128;		/* centroids a tile (= KM_FILTER_TILE_128's columns) */
constexpr int SBK = 16;			/* columns a k-slice */
constexpr int SSTAGES = 4;		/* cp.async ring */
constexpr int SNT = 128;		/* 4 warps, 2 x 2, each 64 rows x 64 centroids */
constexpr int SAP = SBK + 4;	/* padded row of the rows' slice: banks 20 g + t distinct */
constexpr int SBP = SBN + 8;	/* padded row of the operand's slice: banks 8 t + g distinct */
constexpr int SMC = 16;			/* candidates a row lists in shared memory */
constexpr int SA_FL = SBM * SAP;
constexpr int SB_FL = SBK * SBP;
constexpr size_t SSMEM = (size_t) SSTAGES * (SA_FL + SB_FL) * sizeof(float) +
	(size_t) SBM * SMC * (sizeof(float) + sizeof(int)) + (size_t) 4 * SBM * sizeof(int);

static_assert(SNT == SBM, "one thread a row at the end");
static_assert(KMG_SCREEN_CANDS <= SMC && KMG_SCREEN_CANDS == 8, "the certify kernel's lanes");

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

__device__ __forceinline__ void
kmg_mma_tf32(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
				 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
				 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/*
 * The slack of a row: the screen's rounding (km_screen_slack) plus the
 * float32 filter's (km_filter_slack, which covers what rounding the rows
 * and centroids to the filter's operands does to the exact costs); +inf
 * when it cannot be bounded (the row is then settled exactly).
 */
__device__ __forceinline__ float
kmg_row_screen_slack(const kmg_args &a, float xn, float cmax, int all_exact)
{
	if (all_exact || (a.cosine && xn == 0.0f))
		return INFINITY;
	return km_screen_slack(a.dp, xn, cmax) + km_filter_slack(a.d, xn, cmax);
}

}								/* namespace */

/*
 * The screen (file header).  Grid: one block per 128 rows; 128 threads;
 * SSMEM bytes of dynamic shared memory.
 */
__global__ void __launch_bounds__(SNT, 2)
kmg_screen_kernel(kmg_args a, int mode)
{
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
	const float *Bt = a.fwork;
	const float *Cnt = a.fwork + (size_t) tiles * SBN * dp;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;

	scnt[tid] = 0;
	sover[tid] = 0;
	sbest[tid] = INFINITY;
	sslack[tid] = row0 + tid < n ? kmg_row_screen_slack(a, a.xnorm[row0 + tid], cmax, all_exact)
		: 0.0f;

	/* slice q of the walk: tile q / ks, columns (q % ks) * SBK on */
	auto load = [&] (int q, int stage)
	{
		const int	t = q / ks;
		const int	c0 = (q - t * ks) * SBK;
		float	   *dA = sA + stage * SA_FL;
		float	   *dB = sB + stage * SB_FL;

#pragma unroll
		for (int u = 0; u < SBM * SBK / 4 / SNT; u++)
		{
			const int	ch = tid + u * SNT;
			const int	rr = ch >> 2;
			const int	cc = (ch & 3) * 4;
			const int64_t i = row0 + rr;
			const int	ok = i < n && c0 + cc < dp;

			kmg_cp16_zfill(dA + rr * SAP + cc, ok ? (const void *) (a.X + i * dp + c0 + cc)
						   : (const void *) a.X, ok ? 16 : 0);
		}
#pragma unroll
		for (int u = 0; u < SBK * SBN / 4 / SNT; u++)
		{
			const int	ch = tid + u * SNT;
			const int	kk = ch / (SBN / 4);
			const int	cc = (ch - kk * (SBN / 4)) * 4;
			const int	ok = c0 + kk < dp;

			kmg_cp16_zfill(dB + kk * SBP + cc,
						   ok ? (const void *) (Bt + ((size_t) t * dp + c0 + kk) * SBN + cc)
						   : (const void *) Bt, ok ? 16 : 0);
		}
	};

#pragma unroll
	for (int p = 0; p < SSTAGES - 1; p++)
	{
		if (p < total)
			load(p, p);
		kmg_cp16_commit();
	}

	float		acc[4][8][4];
	int			q = 0;

	for (int t = 0; t < tiles; t++)
	{
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
		{
			const int	j = t * SBN + wn * 64 + nt * 8 + 2 * t4;
			const float c0 = Cnt[j],
						c1 = Cnt[j + 1];

#pragma unroll
			for (int mt = 0; mt < 4; mt++)
			{
				acc[mt][nt][0] = c0;
				acc[mt][nt][1] = c1;
				acc[mt][nt][2] = c0;
				acc[mt][nt][3] = c1;
			}
		}
		for (int s = 0; s < ks; s++, q++)
		{
			kmg_cp16_wait<SSTAGES - 2>();
			__syncthreads();
			if (q + SSTAGES - 1 < total)
				load(q + SSTAGES - 1, (q + SSTAGES - 1) % SSTAGES);
			kmg_cp16_commit();

			const float *cA = sA + (q % SSTAGES) * SA_FL + (wm * 64 + g) * SAP + t4;
			const float *cB = sB + (q % SSTAGES) * SB_FL + t4 * SBP + wn * 64 + g;

#pragma unroll
			for (int k8 = 0; k8 < SBK; k8 += 8)
			{
				uint32_t	af[4][4],
							bf[8][2];

#pragma unroll
				for (int mt = 0; mt < 4; mt++)
				{
					const float *p = cA + mt * 16 * SAP + k8;

					af[mt][0] = kmg_tf32(p[0]);
					af[mt][1] = kmg_tf32(p[8 * SAP]);
					af[mt][2] = kmg_tf32(p[4]);
					af[mt][3] = kmg_tf32(p[8 * SAP + 4]);
				}
#pragma unroll
				for (int nt = 0; nt < 8; nt++)
				{
					const float *p = cB + k8 * SBP + nt * 8;

					bf[nt][0] = kmg_tf32(p[0]);
					bf[nt][1] = kmg_tf32(p[4 * SBP]);
				}
#pragma unroll
				for (int mt = 0; mt < 4; mt++)
#pragma unroll
					for (int nt = 0; nt < 8; nt++)
						kmg_mma_tf32(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
			}
		}

		/*
		 * The tile's epilogue.  First the row's running best (the least
		 * of its 8 threads' values so far); then every value within the
		 * slack of it joins the row's list; then the row's thread drops
		 * the entries that the better best has put out of the running.
		 * The best only falls, so the final list holds every value within
		 * the slack of the final best.
		 */
#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				float		m = INFINITY;

#pragma unroll
				for (int nt = 0; nt < 8; nt++)
					m = fminf(m, fminf(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
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
		a.fbest[i] = best;
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
 * The screen and the settling of its listed rows, after km_filter_prepare
 * (tile KM_FILTER_TILE_128) filled a->fwork; the rows it sends to the full
 * settling are on a->amb for kmg_exact_refine.
 */
cudaError_t
kmg_screen(const kmg_args *a, int mode, int sms, cudaStream_t stream)
{
	cudaError_t e;
	const int64_t blocks = (a->n + SBM - 1) / SBM;

	if (a->n == 0)
		return cudaSuccess;
	if (a->fbn != SBN)
		return cudaErrorInvalidValue;
	/* per device: split fits run this on several */
	e = cudaFuncSetAttribute((const void *) kmg_screen_kernel,
							 cudaFuncAttributeMaxDynamicSharedMemorySize, (int) SSMEM);
	if (e != cudaSuccess)
		return e;
	kmg_screen_kernel<<<(unsigned) blocks, SNT, SSMEM, stream>>>(*a, mode);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	kmg_screen_certify_kernel<<<(unsigned) sms * 4, 256, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/* Shared memory the screen's block takes (for the harnesses). */
size_t
kmg_screen_smem(void)
{
	return SSMEM;
}

/* Rows the screen can list with their candidates (the rest take the full settling). */
int
kmg_screen_cap(int64_t n)
{
	int64_t		cap = n / 4;

	if (cap < 65536)
		cap = 65536;
	if (cap > n)
		cap = n;
	return (int) cap;
}
