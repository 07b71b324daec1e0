/*
 * screen_tf32.cu
 *	  The tensor-core screen for large k: the float32 filter's distances
 *	  (filter_gemm.cuh) computed on tensor cores in TF32, fused with a
 *	  per-row list of the centroids that can still win; then the exact
 *	  settling of each listed row over its few candidates.
 *
 * What it decides, per row i (k centroids; the filter's operands: rows X
 * of dp floats, centroids C' and cn; kmg_screen_prepare_kernel rounds
 * -2 C' to TF32 once an iteration, into a->sop):
 *		s_ij = cn_j + sum_c tf32(x_ic) tf32(-2 c_jc)	(tensor cores, fp32 sums)
 *		b    = min_j s_ij,  T = b + km_screen_slack(d, dp, |x_i|, cmax)
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
 *	  accumulators a thread); k-slices of 16 columns of the rows and of the
 *	  operand in a 4-stage cp.async ring (zero-filled past n and dp), rows
 *	  padded to 20 floats so that each ldmatrix.x4 (four fragments of an
 *	  m-tile, or of two n-tiles) is conflict-free; the rows' values are
 *	  rounded to TF32 (cvt.rna) as they leave shared memory;
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
constexpr int SAP = SBK + 4;	/* padded row of a slice: ldmatrix rows 80 bytes apart, no conflicts */
constexpr int SMC = 16;			/* candidates a row lists in shared memory */
constexpr int SA_FL = SBM * SAP;
constexpr int SB_FL = SBN * SAP;
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

/* Four 8 x 4 float matrices of shared memory (ldmatrix: lane l gives row l % 8 of matrix l / 8). */
__device__ __forceinline__ void
kmg_ldsm4(uint32_t *r, const float *p)
{
	const unsigned a = (unsigned) __cvta_generic_to_shared(p);

	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
				 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void
kmg_mma_tf32(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
				 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
				 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The slack of a row (km_screen_slack); +inf when it cannot be bounded (settled exactly). */
__device__ __forceinline__ float
kmg_row_screen_slack(const kmg_args &a, float xn, float cmax, int all_exact)
{
	if (all_exact || (a.cosine && xn == 0.0f))
		return INFINITY;
	return km_screen_slack(a.d, a.dp, xn, cmax);
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
	const float *Bt = a.sop;		/* tiles * SBN rows of dp: tf32(-2 c'), zeros past k */
	const float *Cnt = a.sop + (size_t) tiles * SBN * dp;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float cmax = a.ctl->cmax;
	const int	all_exact = a.ctl->all_exact;

	scnt[tid] = 0;
	sover[tid] = 0;
	sbest[tid] = INFINITY;
	sslack[tid] = row0 + tid < n ? kmg_row_screen_slack(a, a.xnorm[row0 + tid], cmax, all_exact)
		: 0.0f;

	/*
	 * The copies of this thread: 16 bytes of rows lr + 32 u of each slice
	 * (u < 4), of the rows and of the operand's tile; the walk's next slice
	 * is (lt, lc0), advanced one slice per load.
	 */
	const int	lr = tid >> 2,
				lcc = (tid & 3) * 4;
	const float *xsrc[4];
	int			xok[4];
	int			lt = 0,
				lc0 = 0;

#pragma unroll
	for (int u = 0; u < 4; u++)
	{
		const int64_t i = row0 + lr + 32 * u;

		xok[u] = i < n;
		xsrc[u] = a.X + (xok[u] ? i : 0) * dp + lcc;
	}

	auto load = [&] (int stage)
	{
		float	   *dA = sA + stage * SA_FL + lr * SAP + lcc;
		float	   *dB = sB + stage * SB_FL + lr * SAP + lcc;
		const int	cok = lc0 + lcc < dp;
		const float *bsrc = Bt + ((size_t) lt * SBN + lr) * dp + lc0 + lcc;

#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			const int	ok = cok && xok[u];

			kmg_cp16_zfill(dA + 32 * u * SAP, ok ? (const void *) (xsrc[u] + lc0) : (const void *) a.X,
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

	/* ldmatrix rows of this lane (see the k-step below) */
	const int	mi = lane >> 3,
				mr = lane & 7;
	const int	offA = (wm * 64 + mr + (mi & 1) * 8) * SAP + (mi >> 1) * 4;
	const int	offB = (wn * 64 + mr + (mi >> 1) * 8) * SAP + (mi & 1) * 4;

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
				load((q + SSTAGES - 1) % SSTAGES);
			kmg_cp16_commit();

			/*
			 * Both k-steps' fragments first, then their 64 MMAs.  ldmatrix:
			 * A, matrices (rows 0-7 | 8-15) x (columns 0-3 | 4-7) of an
			 * m-tile = a0..a3; B, (columns 0-3 | 4-7) x (n-tile nt | nt + 1)
			 * = b0, b1 of two n-tiles.
			 */
			const float *cA = sA + (q % SSTAGES) * SA_FL + offA;
			const float *cB = sB + (q % SSTAGES) * SB_FL + offB;
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
#pragma unroll
				for (int mt = 0; mt < 4; mt++)
#pragma unroll
					for (int u = 0; u < 4; u++)
						af[k2][mt][u] = kmg_tf32(__uint_as_float(af[k2][mt][u]));
#pragma unroll
				for (int mt = 0; mt < 4; mt++)
#pragma unroll
					for (int nt = 0; nt < 8; nt++)
						kmg_mma_tf32(acc[mt][nt], af[k2][mt], bf[k2][nt][0], bf[k2][nt][1]);
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
 * The screen's centroid operand, once an iteration: for tiles * SBN rows j,
 * sop[j * dp + c] = tf32(-2 c'_jc) (zeros for j >= k: rows past the end of
 * the last tile), then cn_j (+inf for j >= k).  Rounded here once, so the
 * screen converts only the rows' values; -2 is exact, so this is -2 tf32(c').
 */
__global__ void
kmg_screen_prepare_kernel(const float *__restrict__ Cf, const float *__restrict__ cn, int k,
						  int dp, int rows, float *__restrict__ sop)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t nv = (int64_t) rows * dp;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < nv + rows; e += stride)
	{
		if (e < nv)
		{
			const int64_t j = e / dp;

			sop[e] = j < k ? __uint_as_float(kmg_tf32(-2.0f * Cf[e])) : 0.0f;
		}
		else
		{
			const int64_t j = e - nv;

			sop[e] = j < k ? cn[j] : INFINITY;
		}
	}
}

/* Bytes of the screen's centroid operand (a->sop) for k centroids of dp floats. */
size_t
kmg_screen_work_bytes(int k, int dp)
{
	const size_t rows = (size_t) KMG_ROUND_UP(k, SBN);

	return (rows * dp + rows) * sizeof(float);
}

/*
 * The screen (its operand, then the pass) and the settling of its listed
 * rows; the rows it sends to the full settling are on a->amb for
 * kmg_exact_refine, which reads km_filter_prepare's operand.
 */
cudaError_t
kmg_screen(const kmg_args *a, int mode, int sms, cudaStream_t stream)
{
	cudaError_t e;
	const int64_t blocks = (a->n + SBM - 1) / SBM;

	if (a->n == 0)
		return cudaSuccess;
	{
		const int	rows = KMG_ROUND_UP(a->k, SBN);
		int64_t		pb = ((int64_t) rows * (a->dp + 1) + 255) / 256;

		if (pb > (int64_t) sms * 4)
			pb = (int64_t) sms * 4;
		kmg_screen_prepare_kernel<<<(unsigned) pb, 256, 0, stream>>>(a->Cf, a->cn, a->k, a->dp,
																	  rows, a->sop);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
	}
	/* per device: split fits run this on several */
	e = cudaFuncSetAttribute((const void *) kmg_screen_kernel,
							 cudaFuncAttributeMaxDynamicSharedMemorySize, (int) SSMEM);
	/* and the largest shared-memory carveout: two blocks an SM, whatever the driver would pick */
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute((const void *) kmg_screen_kernel,
								 cudaFuncAttributePreferredSharedMemoryCarveout,
								 cudaSharedmemCarveoutMaxShared);
	if (e != cudaSuccess)
		return e;
	kmg_screen_kernel<<<(unsigned) blocks, SNT, SSMEM, stream>>>(*a, mode);
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
