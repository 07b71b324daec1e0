/*
 * bench_assign_gemm.cu
 *	  Development harness of the fused GEMM + top-2 filter (assign/filter_gemm.cu).
 *
 * llm.c style: a float64 CPU reference, numbered versions (k1 naive, k2
 * shared memory, k3 and k3s the production launchers with their two tiles,
 * k4..k7 other tile shapes of the production template, k8..k16 a
 * multistage family that lost), a launcher per version, and a main that validates every version against the reference and
 * then times them against cuBLAS SGEMM in strict fp32 writing the n x k
 * product, printing ms, TFLOP/s against the FFMA peak and the ratio.
 *
 *	  make -C kernels/bench			(here: nvcc, no GPU needed)
 *	  bin/bench_assign_gemm [--validate-only] [--bench-only] [--reps N]
 *							[--max-shapes N] [--shape I] [--versions k3,k5,...]
 *
 * on the GPU machine (carry kernels/bench/bin).  Measurements: NOTES.md.
 *
 * Validation: fresh random inputs per check (uniform, a large common offset,
 * small integers with duplicated rows and centroids so that exact ties occur,
 * rows clustered around centroids), outputs poisoned before each run; every
 * row must be written; for the checked rows (all, or 4096 of them) the
 * km_filter_slack bounds of the task hold, NaN never passes; duplicated rows
 * must give bit-identical outputs, a duplicated centroid never wins over its
 * lower-numbered twin, and on integer data (every value exact in float32)
 * best, fbest and fsecond must equal the reference exactly.
 */
#include "../assign/filter_gemm.cu"
#include "km_exact.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include "bench_check.h"

#define CKB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, (int) s_); exit(1); } } while (0)

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

enum DataKind
{
	D_UNIFORM, D_OFFSET, D_INTS, D_CLUSTER
};
static const char *kind_name[] = {"uniform", "offset100", "ints+dups", "clustered"};

__device__ __forceinline__ uint64_t
mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * rows x dp, zero past d.  With dupmod > 1, row r with r % dupmod ==
 * dupmod - 1 copies row r - 1.  D_CLUSTER: a random centroid of C plus noise.
 */
__global__ void
gen_rows(float *out, int64_t rows, int d, int dp, uint64_t seed, int kind, int dupmod,
		 const float *C, int k)
{
	const int64_t total = rows * dp;

	for (int64_t e = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; e < total;
		 e += (int64_t) gridDim.x * blockDim.x)
	{
		const int64_t r = e / dp;
		const int	c = (int) (e % dp);
		float		v = 0.0f;

		if (c < d)
		{
			const int64_t src = (dupmod > 1 && r % dupmod == dupmod - 1) ? r - 1 : r;
			const uint64_t h = mix64(seed ^ mix64((uint64_t) src * 1315423911ull + c));
			const float u = (float) (h >> 40) * (1.0f / 16777216.0f);

			switch (kind)
			{
				case D_UNIFORM:
					v = 2.0f * u - 1.0f;
					break;
				case D_OFFSET:
					v = 100.0f + (2.0f * u - 1.0f);
					break;
				case D_INTS:
					v = floorf(u * 5.0f) - 2.0f;
					break;
				default:
					{
						const int	j = (int) (mix64(seed + 77 + src) % (uint64_t) k);

						v = C[(int64_t) j * dp + c] + 0.05f * (2.0f * u - 1.0f);
					}
			}
		}
		out[e] = v;
	}
}

__global__ void
gather_rows(const float *X, int dp, const int64_t *idx, int m, float *out)
{
	for (int64_t e = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; e < (int64_t) m * dp;
		 e += (int64_t) gridDim.x * blockDim.x)
		out[e] = X[idx[e / dp] * dp + e % dp];
}

/* ------------------------------------------------------------------------ */
/* Kernel family 2 (development only)                                        */
/* ------------------------------------------------------------------------ */

namespace
{

/*
 * Kernel family 2 (versions k8..k16), tried in run 2 of NOTES.md and 10 to
 * 45% slower than km_filter_kernel (ncu: more dispatch and MIO stalls);
 * kept for the record.  Multistage: X slices land by cp.async in a [BM][12]
 * layout (8 values and 4 of padding per row: rows 48 bytes apart, so the LR
 * rows a warp reads at once fall in distinct bank groups) and are read along
 * k, one LDS.128 per row and half-slice: no transposition, no staging, and a
 * STAGES-deep ring of slices in flight.  Lane rows are interleaved: lane lr
 * owns rows arow + i * LR, i < TM.
 */
template <int BM_, int BN_, int WM_, int WN_, int LR_, int TM_, int TN_, bool REG_, int MINB_, int STAGES_>
struct KmTile2
{
	static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_;
	static constexpr int LR = LR_, LC = 32 / LR_, TM = TM_, TN = TN_;
	static constexpr bool REG = REG_;
	static constexpr int MINB = MINB_, STAGES = STAGES_;
	static constexpr int NT = 32 * WM * WN;
	static constexpr int ASTR = 12;	/* floats per staged row */
	static constexpr int A_F4 = BM * KM_BK / 4 / NT;
	static constexpr int B_F4 = BN * KM_BK / 4 / NT;
	static constexpr int SM_A = BM * ASTR;	/* per stage */
	static constexpr int SM_B = KM_BK * BN;
	static constexpr int SM_CN = BN;
	static constexpr int SM_ST = 3 * TM * NT;
	static constexpr size_t SMEM = (size_t) (STAGES * (SM_A + SM_B + SM_CN) + SM_ST) * sizeof(float);

	static_assert(LR * LC == 32 && LR <= 8 && LC <= 8, "lanes");
	static_assert(BM == WM * LR * TM && BN == WN * LC * TN, "tile = warps x lanes x micro-tile");
	static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tile");
	static_assert(A_F4 >= 1 && A_F4 * NT * 4 == BM * KM_BK, "A slice split evenly");
	static_assert(B_F4 >= 1 && B_F4 * NT * 4 == BN * KM_BK, "B slice split evenly");
	static_assert(BN / 4 <= NT, "cn row loaded in one go");
	static_assert(STAGES >= 2, "a ring");
};

__device__ __forceinline__ float
km_f4(const float4 &v, int c)
{
	return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

template <class T>
__global__ void __launch_bounds__(T::NT, T::MINB)
km_filter_kernel2(const float *__restrict__ X, int64_t n, int dp,
				  const float *__restrict__ Bt, const float *__restrict__ Cn,
				  int k, int ntiles,
				  int32_t *__restrict__ best, float *__restrict__ fbest,
				  float *__restrict__ fsecond)
{
	constexpr int BM = T::BM, BN = T::BN, TM = T::TM, TN = T::TN, NT = T::NT;
	constexpr int LR = T::LR, LC = T::LC, ST = T::STAGES, AS = T::ASTR;

	extern __shared__ float4 km_smem4[];
	float	   *As = reinterpret_cast<float *>(km_smem4);	/* [ST][BM][12] */
	float	   *Bs = As + ST * T::SM_A;	/* [ST][BK][BN] */
	float	   *Cs = Bs + ST * T::SM_B;	/* [ST][BN] */
	float4	   *St1 = reinterpret_cast<float4 *>(Cs + ST * T::SM_CN);	/* [TM/4][NT] */
	float4	   *St2 = St1 + (TM / 4) * NT;
	int4	   *StI = reinterpret_cast<int4 *>(St2 + (TM / 4) * NT);

	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	wr = warp / T::WN;
	const int	wc = warp % T::WN;
	const int	arow = wr * (LR * TM) + lane / LC;
	const int	bcol = wc * (LC * TN) + (lane % LC) * 4;
	const int	wcol0 = wc * (LC * TN);
	const int64_t m0 = (int64_t) blockIdx.x * BM;
	const int	S = dp / KM_BK;
	const int	total = ntiles * S;

	/* This thread's 16-byte pieces of each X slice (rows clamped to n - 1). */
	const float *xsrc[T::A_F4];
	int			adst[T::A_F4];

#pragma unroll
	for (int u = 0; u < T::A_F4; u++)
	{
		const int	idx = tid + u * NT;
		int64_t		row = m0 + (idx >> 1);

		if (row > n - 1)
			row = n - 1;
		xsrc[u] = X + row * dp + (idx & 1) * 4;
		adst[u] = (idx >> 1) * AS + (idx & 1) * 4;
	}

	/* Slice j = tile tj, step sj, into ring slot; always one commit group. */
	auto		issue = [&](int j, int sj, int tj, int slot) {
		if (j < total)
		{
#pragma unroll
			for (int u = 0; u < T::A_F4; u++)
				kmg_cp16(As + slot * T::SM_A + adst[u], xsrc[u] + sj * KM_BK);
#pragma unroll
			for (int u = 0; u < T::B_F4; u++)
				kmg_cp16(Bs + slot * T::SM_B + (tid + u * NT) * 4,
							  Bt + (size_t) j * (KM_BK * BN) + (tid + u * NT) * 4);
			if (sj == 0 && tid < BN / 4)
				kmg_cp16(Cs + slot * BN + tid * 4, Cn + (size_t) tj * BN + tid * 4);
		}
		kmg_cp16_commit();
	};

	/* Running top-2 per row of the micro-tile, over this lane's columns. */
	float		r1[TM],
				r2[TM];
	int			ri[TM];

#pragma unroll
	for (int i = 0; i < TM; i++)
	{
		r1[i] = INFINITY;
		r2[i] = INFINITY;
		ri[i] = INT_MAX;
	}
	if (!T::REG)
	{
#pragma unroll
		for (int g = 0; g < TM / 4; g++)
		{
			St1[g * NT + tid] = make_float4(INFINITY, INFINITY, INFINITY, INFINITY);
			St2[g * NT + tid] = make_float4(INFINITY, INFINITY, INFINITY, INFINITY);
			StI[g * NT + tid] = make_int4(INT_MAX, INT_MAX, INT_MAX, INT_MAX);
		}
	}

	/* Prologue: the first ST - 1 slices. */
	int			si = 0,
				ti = 0;

#pragma unroll
	for (int p = 0; p < ST - 1; p++)
	{
		issue(p, si, ti, p);
		if (++si == S)
		{
			si = 0;
			ti++;
		}
	}

	float		acc[TM][TN];
	int			t = 0,
				s = 0,
				slot = 0,
				islot = ST - 1;

	for (int it = 0; it < total; it++)
	{
		/* Slice it has landed for everyone; slot it - 1 is free again. */
		kmg_cp16_wait<ST - 2>();
		__syncthreads();
		issue(it + ST - 1, si, ti, islot);
		if (++si == S)
		{
			si = 0;
			ti++;
		}
		if (++islot == ST)
			islot = 0;

		/* Warps whose columns all lie past k (last tile only) sit it out. */
		if (wcol0 < k - t * BN)
		{
			const float *as = As + slot * T::SM_A + arow * AS;
			const float *bs = Bs + slot * T::SM_B + bcol;
			float		b[2][TN];

#pragma unroll
			for (int g = 0; g < TN / 4; g++)
				*reinterpret_cast<float4 *>(&b[0][g * 4]) =
					*reinterpret_cast<const float4 *>(bs + g * (LC * 4));
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				float4		av[TM];

#pragma unroll
				for (int i = 0; i < TM; i++)
					av[i] = *reinterpret_cast<const float4 *>(as + i * (LR * AS) + h * 4);
#pragma unroll
				for (int kq = 0; kq < 4; kq++)
				{
					const int	kk = h * 4 + kq;
					const int	c = kk & 1;

					if (kk + 1 < KM_BK)
					{
#pragma unroll
						for (int g = 0; g < TN / 4; g++)
							*reinterpret_cast<float4 *>(&b[c ^ 1][g * 4]) =
								*reinterpret_cast<const float4 *>(bs + (kk + 1) * BN + g * (LC * 4));
					}
					if (kk == 0 && s == 0)
					{
						/* First FMA of a tile starts from cn_j. */
						float		cn[TN];

#pragma unroll
						for (int g = 0; g < TN / 4; g++)
							*reinterpret_cast<float4 *>(&cn[g * 4]) =
								*reinterpret_cast<const float4 *>(Cs + slot * BN + bcol + g * (LC * 4));
#pragma unroll
						for (int i = 0; i < TM; i++)
#pragma unroll
							for (int j = 0; j < TN; j++)
								acc[i][j] = fmaf(km_f4(av[i], kq), b[c][j], cn[j]);
					}
					else
					{
#pragma unroll
						for (int i = 0; i < TM; i++)
#pragma unroll
							for (int j = 0; j < TN; j++)
								acc[i][j] = fmaf(km_f4(av[i], kq), b[c][j], acc[i][j]);
					}
				}
			}

			/* Tile done: fold it into the running top-2, columns ascending. */
			if (s == S - 1)
			{
				int			col[TN];

#pragma unroll
				for (int g = 0; g < TN / 4; g++)
#pragma unroll
					for (int q = 0; q < 4; q++)
						col[g * 4 + q] = t * BN + bcol + g * (LC * 4) + q;

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
		}

		if (++slot == ST)
			slot = 0;
		if (++s == S)
		{
			s = 0;
			t++;
		}
	}
	kmg_cp16_wait<0>();		/* only empty groups are left */

	if (T::REG)
	{
#pragma unroll
		for (int g = 0; g < TM / 4; g++)
		{
			St1[g * NT + tid] = make_float4(r1[g * 4], r1[g * 4 + 1], r1[g * 4 + 2], r1[g * 4 + 3]);
			St2[g * NT + tid] = make_float4(r2[g * 4], r2[g * 4 + 1], r2[g * 4 + 2], r2[g * 4 + 3]);
			StI[g * NT + tid] = make_int4(ri[g * 4], ri[g * 4 + 1], ri[g * 4 + 2], ri[g * 4 + 3]);
		}
	}
	__syncthreads();

	/* Merge the WN * LC partial top-2s of each row; one thread per row. */
	const float *s1f = reinterpret_cast<const float *>(St1);
	const float *s2f = reinterpret_cast<const float *>(St2);
	const int  *sif = reinterpret_cast<const int *>(StI);

	for (int r = tid; r < BM; r += NT)
	{
		const int	wr_ = r / (LR * TM);
		const int	rem = r % (LR * TM);
		const int	lr_ = rem % LR;
		const int	i = rem / LR;
		float		b1 = INFINITY,
					b2 = INFINITY;
		int			bi = INT_MAX;

		for (int wc_ = 0; wc_ < T::WN; wc_++)
			for (int lc_ = 0; lc_ < LC; lc_++)
			{
				const int	src = (wr_ * T::WN + wc_) * 32 + lr_ * LC + lc_;
				const int	e = ((i / 4) * NT + src) * 4 + i % 4;

				km_top2_merge(b1, bi, b2, s1f[e], sif[e], s2f[e]);
			}

		const int64_t row = m0 + r;

		if (row < n)
		{
			best[row] = bi < k ? bi : 0;
			fbest[row] = b1;
			fsecond[row] = b2;
		}
	}
}

}								/* namespace */

template <class T>
static cudaError_t
km_filter_top2_v2(const float *X, int64_t n, int dp, const void *work, int k, int kp,
				  int32_t *best, float *fbest, float *fsecond, cudaStream_t stream)
{
	const int	ntiles = (k + T::BN - 1) / T::BN;
	const int	ptiles = (kp + T::BN - 1) / T::BN;
	const float *Bt = static_cast<const float *>(work);
	const float *Cnt = Bt + (size_t) ptiles * T::BN * dp;
	cudaError_t err = cudaFuncSetAttribute(km_filter_kernel2<T>,
										   cudaFuncAttributeMaxDynamicSharedMemorySize,
										   (int) T::SMEM);

	if (err != cudaSuccess)
		return err;
	km_filter_kernel2<T><<<(unsigned) ((n + T::BM - 1) / T::BM), T::NT, T::SMEM, stream>>>(
		X, n, dp, Bt, Cnt, k, ntiles, best, fbest, fsecond);
	return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */

/* kernel1: one thread per row, every centroid, straight from C'. */
__global__ void
filter_naive(const float *__restrict__ X, int64_t n, int dp, const float *__restrict__ C,
			 const float *__restrict__ cn, int k,
			 int32_t *best, float *fbest, float *fsecond)
{
	const int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	const float *x = X + i * dp;
	float		b1 = INFINITY,
				b2 = INFINITY;
	int			bi = 0;

	for (int j = 0; j < k; j++)
	{
		float		dot = 0.0f;

		for (int c = 0; c < dp; c++)
			dot = fmaf(x[c], C[(int64_t) j * dp + c], dot);

		const float f = fmaf(-2.0f, dot, cn[j]);

		if (f < b1)
		{
			b2 = b1;
			b1 = f;
			bi = j;
		}
		else if (f < b2)
			b2 = f;
	}
	best[i] = bi;
	fbest[i] = b1;
	fsecond[i] = b2;
}

/*
 * kernel2: shared memory.  128 rows per block, one per thread; 32 x 32
 * chunks of the rows and of 32 centroids go through shared memory, each
 * thread keeps 32 dot products in registers.
 */
__global__ void
filter_smem(const float *__restrict__ X, int64_t n, int dp, const float *__restrict__ C,
			const float *__restrict__ cn, int k,
			int32_t *best, float *fbest, float *fsecond)
{
	__shared__ float xs[128][33];
	__shared__ float cs[32][33];
	__shared__ float cns[32];
	const int	tid = threadIdx.x;
	const int64_t m0 = (int64_t) blockIdx.x * 128;
	float		b1 = INFINITY,
				b2 = INFINITY;
	int			bi = 0;

	for (int j0 = 0; j0 < k; j0 += 32)
	{
		float		acc[32];

		for (int jj = 0; jj < 32; jj++)
			acc[jj] = 0.0f;
		for (int c0 = 0; c0 < dp; c0 += 32)
		{
			__syncthreads();
			for (int e = tid; e < 128 * 32; e += 128)
			{
				const int	r = e / 32,
							c = e % 32;
				const int64_t row = min(m0 + r, n - 1);

				xs[r][c] = c0 + c < dp ? X[row * dp + c0 + c] : 0.0f;
			}
			for (int e = tid; e < 32 * 32; e += 128)
			{
				const int	jj = e / 32,
							c = e % 32;

				cs[jj][c] = (j0 + jj < k && c0 + c < dp) ? C[(int64_t) (j0 + jj) * dp + c0 + c] : 0.0f;
			}
			if (tid < 32)
				cns[tid] = j0 + tid < k ? cn[j0 + tid] : INFINITY;
			__syncthreads();
#pragma unroll 4
			for (int c = 0; c < 32; c++)
			{
				const float xv = xs[tid][c];

#pragma unroll
				for (int jj = 0; jj < 32; jj++)
					acc[jj] = fmaf(xv, cs[jj][c], acc[jj]);
			}
		}
#pragma unroll
		for (int jj = 0; jj < 32; jj++)
		{
			const float f = fmaf(-2.0f, acc[jj], cns[jj]);

			if (f < b1)
			{
				b2 = b1;
				b1 = f;
				bi = j0 + jj;
			}
			else if (f < b2)
				b2 = f;
		}
	}
	if (m0 + tid < n)
	{
		best[m0 + tid] = bi;
		fbest[m0 + tid] = b1;
		fsecond[m0 + tid] = b2;
	}
}

struct Problem
{
	int64_t		n;
	int			d,
				dp,
				k,
				kp;
	float	   *X,
			   *C,
			   *cn;				/* C': kp x dp, cn: kp */
	void	   *work;
	int32_t    *best;
	float	   *fbest,
			   *fsecond;
	cudaStream_t stream;
};

struct Version
{
	const char *name;
	const char *what;
	bool		slow;			/* too slow for the big shapes */
	std::function<size_t(int, int)> work_bytes;
	std::function<cudaError_t(const Problem &)> prepare;
	std::function<cudaError_t(const Problem &)> run;
};

template <class T>
static Version
tiled2(const char *name, const char *what)
{
	return Version{name, what, false,
		[](int kp, int dp) { return km_filter_work_bytes_t<T::BN>(kp, dp); },
		[](const Problem &p) { return km_filter_prepare_t<T::BN>(p.C, p.cn, p.k, p.kp, p.dp, p.work, p.stream); },
		[](const Problem &p) { return km_filter_top2_v2<T>(p.X, p.n, p.dp, p.work, p.k, p.kp, p.best, p.fbest, p.fsecond, p.stream); }};
}

template <class T>
static Version
tiled(const char *name, const char *what)
{
	return Version{name, what, false,
		[](int kp, int dp) { return km_filter_work_bytes_t<T::BN>(kp, dp); },
		[](const Problem &p) { return km_filter_prepare_t<T::BN>(p.C, p.cn, p.k, p.kp, p.dp, p.work, p.stream); },
		[](const Problem &p) { return km_filter_top2_t<T>(p.X, p.n, p.dp, p.work, p.k, p.kp, p.best, p.fbest, p.fsecond, p.stream); }};
}

static std::vector<Version>
all_versions()
{
	std::vector<Version> v;

	v.push_back(Version{"k1", "naive, thread per row", true,
		[](int, int) { return (size_t) 0; },
		[](const Problem &) { return cudaSuccess; },
		[](const Problem &p) {
			filter_naive<<<(unsigned) ((p.n + 127) / 128), 128, 0, p.stream>>>(
				p.X, p.n, p.dp, p.C, p.cn, p.k, p.best, p.fbest, p.fsecond);
			return cudaGetLastError(); }});
	v.push_back(Version{"k2", "smem 32x32 chunks, thread per row", true,
		[](int, int) { return (size_t) 0; },
		[](const Problem &) { return cudaSuccess; },
		[](const Problem &p) {
			filter_smem<<<(unsigned) ((p.n + 127) / 128), 128, 0, p.stream>>>(
				p.X, p.n, p.dp, p.C, p.cn, p.k, p.best, p.fbest, p.fsecond);
			return cudaGetLastError(); }});
	/* the production launchers, each tile (assign/dispatch.cu: k <= 128 takes k3s) */
	v.push_back(Version{"k3", "PRODUCTION km_filter_top2, KM_FILTER_TILE_256 (= k3 of run 2)", false,
		[](int kp, int dp) { return km_filter_work_bytes(kp, dp); },
		[](const Problem &p) { return km_filter_prepare(KM_FILTER_TILE_256, p.C, p.cn, p.k, p.kp, p.dp, p.work, p.stream); },
		[](const Problem &p) { return km_filter_top2(KM_FILTER_TILE_256, p.X, p.n, p.dp, p.work, p.k, p.kp, p.best, p.fbest, p.fsecond, p.stream); }});
	v.push_back(Version{"k3s", "PRODUCTION km_filter_top2, KM_FILTER_TILE_128 (= k7)", false,
		[](int kp, int dp) { return km_filter_work_bytes(kp, dp); },
		[](const Problem &p) { return km_filter_prepare(KM_FILTER_TILE_128, p.C, p.cn, p.k, p.kp, p.dp, p.work, p.stream); },
		[](const Problem &p) { return km_filter_top2(KM_FILTER_TILE_128, p.X, p.n, p.dp, p.work, p.k, p.kp, p.best, p.fbest, p.fsecond, p.stream); }});
	/*
	 * The sweep.  KmTile (km_filter_kernel of assign/filter_gemm.cu: X slice
	 * transposed by each thread, 2 stages): BM, BN, warps WM x WN, lanes
	 * LR x 32/LR, micro-tile TM x TN, top-2 in registers, blocks per SM.
	 * Run 1 had more shapes (NOTES.md); the production ones are KmProdLarge
	 * (k3) and KmProdSmall (k3s, k7).
	 */
	v.push_back(tiled<KmTile<128, 128, 2, 4, 8, 8, 8, false, 2>>("k4", "v1 128x128 256t l8x4 8x8 smem-state 2/SM"));
	v.push_back(tiled<KmTile<128, 256, 4, 2, 4, 8, 16, true, 1>>("k5", "v1 128x256 256t l4x8 8x16 reg-state 1/SM"));
	v.push_back(tiled<KmTile<128, 256, 2, 4, 8, 8, 16, false, 1>>("k6", "v1 128x256 256t l8x4 8x16 smem-state 1/SM"));
	v.push_back(tiled<KmTile<128, 128, 2, 2, 8, 8, 16, true, 2>>("k7", "v1 128x128 128t l8x4 8x16 reg-state 2/SM"));
	/* KmTile2 (kernel 2: cp.async ring of STAGES slices, X read along k), last argument STAGES. */
	v.push_back(tiled2<KmTile2<128, 128, 2, 2, 8, 8, 16, false, 2, 3>>("k8", "v2 128x128 128t l8x4 8x16 smem-state 2/SM 3st"));
	v.push_back(tiled2<KmTile2<128, 128, 2, 2, 8, 8, 16, false, 2, 4>>("k9", "v2 128x128 128t l8x4 8x16 smem-state 2/SM 4st"));
	v.push_back(tiled2<KmTile2<128, 128, 2, 2, 8, 8, 16, true, 2, 3>>("k10", "v2 128x128 128t l8x4 8x16 reg-state 2/SM 3st"));
	v.push_back(tiled2<KmTile2<128, 256, 2, 4, 8, 8, 16, true, 1, 3>>("k11", "v2 128x256 256t l8x4 8x16 reg-state 1/SM 3st"));
	v.push_back(tiled2<KmTile2<128, 256, 2, 4, 8, 8, 16, false, 1, 4>>("k12", "v2 128x256 256t l8x4 8x16 smem-state 1/SM 4st"));
	v.push_back(tiled2<KmTile2<128, 256, 4, 2, 4, 8, 16, true, 1, 3>>("k13", "v2 128x256 256t l4x8 8x16 reg-state 1/SM 3st"));
	v.push_back(tiled2<KmTile2<256, 128, 4, 2, 8, 8, 16, false, 1, 3>>("k14", "v2 256x128 256t l8x4 8x16 smem-state 1/SM 3st"));
	v.push_back(tiled2<KmTile2<128, 128, 2, 4, 8, 8, 8, false, 2, 3>>("k15", "v2 128x128 256t l8x4 8x8 smem-state 2/SM 3st"));
	v.push_back(tiled2<KmTile2<128, 128, 2, 2, 8, 8, 16, false, 2, 5>>("k16", "v2 128x128 128t l8x4 8x16 smem-state 2/SM 5st"));
	return v;
}

/* ------------------------------------------------------------------------ */
/* Reference and checks                                                      */
/* ------------------------------------------------------------------------ */

struct RowRef
{
	int			arg;
	double		m1,
				m2;
	float		xnorm;
};

static double
ref_f(const float *x, const float *c, float cnj, int dp)
{
	double		s = 0.0;

	for (int t = 0; t < dp; t++)
		s += (double) x[t] * (double) c[t];
	return (double) cnj - 2.0 * s;
}

static void
parallel_for(int m, const std::function<void(int)> &fn)
{
	int			nt = (int) std::max(1u, std::thread::hardware_concurrency());
	std::vector<std::thread> th;

	for (int w = 0; w < nt; w++)
		th.emplace_back([&, w]() { for (int i = w; i < m; i += nt) fn(i); });
	for (auto &t : th)
		t.join();
}

struct Dataset
{
	Problem		p;
	DataKind	kind;
	int			dupx,
				dupc;
	std::vector<float> hC,
				hcn,
				hxs;			/* hxs: sampled rows */
	std::vector<int64_t> sample;
	std::vector<RowRef> ref;
	float		cmax;
};

static uint64_t g_seed = 0x5eed1234abcdull;

static void
make_dataset(Dataset &ds, int64_t n, int d, int k, DataKind kind, size_t work_bytes, cudaStream_t st,
			 int max_sample)
{
	Problem    &p = ds.p;

	p.n = n;
	p.d = d;
	p.dp = (d + 7) / 8 * 8;
	p.k = k;
	p.kp = km_filter_kpad(k);
	p.stream = st;
	ds.kind = kind;
	ds.dupx = kind == D_INTS ? 3 : 0;
	ds.dupc = kind == D_INTS ? 2 : 0;
	g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
	uint64_t	seed = g_seed;

	CK(cudaMalloc(&p.X, (size_t) n * p.dp * sizeof(float)));
	CK(cudaMalloc(&p.C, (size_t) p.kp * p.dp * sizeof(float)));
	CK(cudaMalloc(&p.cn, (size_t) p.kp * sizeof(float)));
	CK(cudaMalloc(&p.work, std::max<size_t>(work_bytes, 16)));
	CK(cudaMalloc(&p.best, (size_t) n * sizeof(int32_t)));
	CK(cudaMalloc(&p.fbest, (size_t) n * sizeof(float)));
	CK(cudaMalloc(&p.fsecond, (size_t) n * sizeof(float)));
	CK(cudaMemsetAsync(p.C, 0, (size_t) p.kp * p.dp * sizeof(float), st));

	/* centroids: the offset data's centroids carry the offset too */
	gen_rows<<<1024, 256, 0, st>>>(p.C, k, d, p.dp, seed ^ 0xc0ffee, kind == D_CLUSTER ? D_UNIFORM : kind,
								   ds.dupc, nullptr, k);
	CK(cudaGetLastError());
	gen_rows<<<8192, 256, 0, st>>>(p.X, n, d, p.dp, seed, kind, ds.dupx, p.C, k);
	CK(cudaGetLastError());
	ds.hC.resize((size_t) p.kp * p.dp);
	CK(cudaMemcpyAsync(ds.hC.data(), p.C, ds.hC.size() * sizeof(float), cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	ds.hcn.assign(p.kp, INFINITY);
	ds.cmax = 0.0f;
	for (int j = 0; j < k; j++)
	{
		float		s = 0.0f;
		double		s2 = 0.0;

		for (int t = 0; t < p.dp; t++)
		{
			float		c = ds.hC[(size_t) j * p.dp + t];

			s += c * c;
			s2 += (double) c * c;
		}
		ds.hcn[j] = s;
		ds.cmax = std::max(ds.cmax, (float) sqrt(s2));
	}
	CK(cudaMemcpyAsync(p.cn, ds.hcn.data(), p.kp * sizeof(float), cudaMemcpyHostToDevice, st));
	CK(cudaStreamSynchronize(st));

	/* rows checked against the reference */
	ds.sample.clear();
	if (n <= max_sample)
		for (int64_t i = 0; i < n; i++)
			ds.sample.push_back(i);
	else
	{
		for (int64_t i = 0; i < max_sample / 64; i++)
		{
			ds.sample.push_back(i);
			ds.sample.push_back(n - 1 - i);
		}
		uint64_t	h = seed;

		while (ds.sample.size() < (size_t) max_sample)
		{
			h = h * 6364136223846793005ull + 1442695040888963407ull;
			ds.sample.push_back((int64_t) ((h >> 17) % (uint64_t) n));
		}
	}
	const int	m = (int) ds.sample.size();
	int64_t    *didx;
	float	   *dxs;

	CK(cudaMalloc(&didx, m * sizeof(int64_t)));
	CK(cudaMalloc(&dxs, (size_t) m * p.dp * sizeof(float)));
	CK(cudaMemcpyAsync(didx, ds.sample.data(), m * sizeof(int64_t), cudaMemcpyHostToDevice, st));
	gather_rows<<<256, 256, 0, st>>>(p.X, p.dp, didx, m, dxs);
	CK(cudaGetLastError());
	ds.hxs.resize((size_t) m * p.dp);
	CK(cudaMemcpyAsync(ds.hxs.data(), dxs, ds.hxs.size() * sizeof(float), cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaFree(didx));
	CK(cudaFree(dxs));

	ds.ref.resize(m);
	parallel_for(m, [&](int s) {
		const float *x = &ds.hxs[(size_t) s * p.dp];
		RowRef		r = {0, INFINITY, INFINITY, 0.0f};
		double		xx = 0.0;

		for (int t = 0; t < p.dp; t++)
			xx += (double) x[t] * x[t];
		r.xnorm = (float) sqrt(xx);
		for (int j = 0; j < k; j++)
		{
			double		f = ref_f(x, &ds.hC[(size_t) j * p.dp], ds.hcn[j], p.dp);

			if (f < r.m1)
			{
				r.m2 = r.m1;
				r.m1 = f;
				r.arg = j;
			}
			else if (f < r.m2)
				r.m2 = f;
		}
		ds.ref[s] = r;
	});
}

static void
free_dataset(Dataset &ds)
{
	Problem    &p = ds.p;

	CK(cudaFree(p.X));
	CK(cudaFree(p.C));
	CK(cudaFree(p.cn));
	CK(cudaFree(p.work));
	CK(cudaFree(p.best));
	CK(cudaFree(p.fbest));
	CK(cudaFree(p.fsecond));
}

static bool
same_bits(float a, float b)
{
	uint32_t	x,
				y;

	memcpy(&x, &a, 4);
	memcpy(&y, &b, 4);
	return x == y;
}

/* Returns the number of failures; prints the first few. */
static long
check_version(Dataset &ds, const Version &v, double *worst_ratio)
{
	const Problem &p = ds.p;
	const int64_t n = p.n;

	CK(cudaMemsetAsync(p.best, 0xff, n * sizeof(int32_t), p.stream));
	CK(cudaMemsetAsync(p.fbest, 0xff, n * sizeof(float), p.stream));	/* NaN */
	CK(cudaMemsetAsync(p.fsecond, 0xff, n * sizeof(float), p.stream));
	CK(cudaMemsetAsync(p.work, 0xff, v.work_bytes(p.kp, p.dp), p.stream));	/* stale work: NaN */

	cudaError_t e = v.prepare(p);

	if (e == cudaSuccess)
		e = v.run(p);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(p.stream);
	if (e != cudaSuccess)
	{
		printf("    %-4s FAIL: CUDA error %s\n", v.name, cudaGetErrorString(e));
		if (cudaDeviceSynchronize() != cudaSuccess)
			exit(1);			/* sticky: the context is gone */
		*worst_ratio = 0;
		return 1;
	}

	std::vector<int32_t> best(n);
	std::vector<float> fb(n),
				fs(n);

	CK(cudaMemcpy(best.data(), p.best, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(fb.data(), p.fbest, n * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(fs.data(), p.fsecond, n * sizeof(float), cudaMemcpyDeviceToHost));

	long		fails = 0;
	auto		fail = [&](int64_t i, const char *why, double a, double b, double tol) {
		if (fails++ < 5)
			printf("    %-4s FAIL row %lld: %s (%.9g vs %.9g, tol %.3g) best=%d fbest=%.9g fsecond=%.9g\n",
				   v.name, (long long) i, why, a, b, tol, best[i], fb[i], fs[i]);
	};

	/* every row written, sane */
	for (int64_t i = 0; i < n; i++)
	{
		if (best[i] < 0 || best[i] >= p.k)
			fail(i, "best out of range", best[i], p.k, 0);
		else if (std::isnan(fb[i]) || std::isinf(fb[i]))
			fail(i, "fbest not finite", fb[i], 0, 0);
		else if (p.k == 1 ? !(std::isinf(fs[i]) && fs[i] > 0) : !std::isfinite(fs[i]))
			fail(i, "fsecond wrong kind", fs[i], 0, 0);
		else if (!(fs[i] >= fb[i]))
			fail(i, "fsecond < fbest", fs[i], fb[i], 0);
		if (ds.dupx > 1 && i % ds.dupx == ds.dupx - 1 &&
			(best[i] != best[i - 1] || !same_bits(fb[i], fb[i - 1]) || !same_bits(fs[i], fs[i - 1])))
			fail(i, "duplicated row differs", fb[i], fb[i - 1], 0);
		if (ds.dupc > 1 && p.k > 1)
		{
			if (best[i] % ds.dupc != 0)
				fail(i, "twin centroid beat its lower twin", best[i], 0, 0);
			if (best[i] + 1 < p.k && !same_bits(fs[i], fb[i]))
				fail(i, "fsecond != fbest with a twin", fs[i], fb[i], 0);
		}
	}

	/* reference rows */
	double		worst = 0.0;

	for (size_t s = 0; s < ds.sample.size(); s++)
	{
		const int64_t i = ds.sample[s];
		const RowRef &r = ds.ref[s];
		const double slack = km_filter_slack(p.d, r.xnorm, ds.cmax);
		const float *x = &ds.hxs[s * p.dp];

		if (best[i] < 0 || best[i] >= p.k)
			continue;			/* reported above */

		const double fref = ref_f(x, &ds.hC[(size_t) best[i] * p.dp], ds.hcn[best[i]], p.dp);
		const double e1 = fabs(fb[i] - fref);

		worst = std::max(worst, e1 / slack);
		if (!(e1 <= slack))
			fail(i, "|fbest - F[best]| > slack", fb[i], fref, slack);
		if (!(fref <= r.m1 + 2 * slack))
			fail(i, "F[best] > min F + 2 slack", fref, r.m1, 2 * slack);
		if (p.k == 1)
		{
			if (!(std::isinf(fs[i]) && fs[i] > 0))
				fail(i, "fsecond not +INF for k = 1", fs[i], INFINITY, 0);
		}
		else
		{
			const double e2 = fabs(fs[i] - r.m2);

			worst = std::max(worst, e2 / (2 * slack));
			if (!(e2 <= 2 * slack))
				fail(i, "|fsecond - second min| > 2 slack", fs[i], r.m2, 2 * slack);
		}
		if (r.m2 - r.m1 > 2 * slack && best[i] != r.arg)
			fail(i, "wrong argmin with a clear gap", best[i], r.arg, 0);
		if (ds.kind == D_INTS)
		{
			/* every product and sum is an exact small integer in float32 */
			if (best[i] != r.arg)
				fail(i, "ints: best != lowest argmin", best[i], r.arg, 0);
			if ((double) fb[i] != r.m1)
				fail(i, "ints: fbest inexact", fb[i], r.m1, 0);
			if (p.k > 1 && (double) fs[i] != r.m2)
				fail(i, "ints: fsecond inexact", fs[i], r.m2, 0);
		}
	}
	*worst_ratio = worst;
	return fails;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

/* Median ms of each function, interleaved rounds so that clocks drift alike. */
static std::vector<double>
time_interleaved(const std::vector<std::function<void()>> &fns, int reps, cudaStream_t st)
{
	const int	m = (int) fns.size();
	std::vector<std::vector<float>> ms(m);
	cudaEvent_t e0,
				e1;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int w = 0; w < 2; w++)
		for (int f = 0; f < m; f++)
			fns[f]();
	CK(cudaStreamSynchronize(st));
	for (int r = 0; r < reps; r++)
		for (int f = 0; f < m; f++)
		{
			float		t;

			CK(cudaEventRecord(e0, st));
			fns[f]();
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&t, e0, e1));
			ms[f].push_back(t);
		}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));

	std::vector<double> med(m);

	for (int f = 0; f < m; f++)
	{
		std::sort(ms[f].begin(), ms[f].end());
		med[f] = ms[f][ms[f].size() / 2];
	}
	return med;
}

struct Row
{
	std::string shape,
				ver,
				what;
	double		ms,
				tflops,
				ratio;
};

/* ------------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
	bool		validate = true,
				bench = true;
	int			reps = 20,
				max_shapes = 100,
				only_shape = -1;
	std::string only;

	for (int a = 1; a < argc; a++)
	{
		if (!strcmp(argv[a], "--validate-only"))
			bench = false;
		else if (!strcmp(argv[a], "--bench-only"))
			validate = false;
		else if (!strcmp(argv[a], "--shape") && a + 1 < argc)
			only_shape = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--max-shapes") && a + 1 < argc)
			max_shapes = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--reps") && a + 1 < argc)
			reps = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--versions") && a + 1 < argc)
			only = std::string(",") + argv[++a] + ",";
		else
		{
			fprintf(stderr, "usage: %s [--validate-only] [--bench-only] [--reps N] [--max-shapes N] [--shape I] [--versions k3,k5]\n", argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, nullptr, _IOLBF, 0);
	setenv("NVIDIA_TF32_OVERRIDE", "0", 1);	/* before the first CUDA call */

	cudaDeviceProp prop;
	int			dev = 0,
				clk_khz = 0;

	CK(cudaSetDevice(dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, dev));
	const double peak = prop.multiProcessorCount * 128.0 * 2.0 * clk_khz * 1e3 / 1e12;

	printf("device %s, %d SMs, %d MHz max clock, L2 %d MB, smem/SM %zu KB: FP32 FFMA peak %.1f TFLOP/s\n",
		   prop.name, prop.multiProcessorCount, clk_khz / 1000, prop.l2CacheSize >> 20,
		   prop.sharedMemPerMultiprocessor >> 10, peak);

	std::vector<Version> vers_all = all_versions(),
				vers;

	for (auto &v : vers_all)
		if (only.empty() || only.find(std::string(",") + v.name + ",") != std::string::npos)
			vers.push_back(v);
	for (auto &v : vers)
		printf("  %-4s %s\n", v.name, v.what);

	cudaStream_t st;

	/*
	 * A blocking stream: it orders itself with the legacy default stream,
	 * which synchronous copies use (run 1 used a non-blocking stream, and
	 * poison memsets raced the kernels on the 20M-row set).
	 */
	CK(cudaStreamCreate(&st));

	/* contract corner cases of the production launcher */
	{
		int			bad = 0;

		if (km_filter_top2(KM_FILTER_TILE_256, nullptr, 0, 8, nullptr, 1, 8, nullptr, nullptr, nullptr, st) != cudaSuccess)
			bad++;				/* n = 0: nothing to do */
		if (km_filter_top2(KM_FILTER_TILE_256, (float *) 16, 5, 12, (void *) 16, 1, 8, (int32_t *) 16, (float *) 16, (float *) 16, st) != cudaErrorInvalidValue)
			bad++;				/* dp not a multiple of 8 */
		if (km_filter_prepare(KM_FILTER_TILE_256, (float *) 16, (float *) 16, 9, 8, 8, (void *) 16, st) != cudaErrorInvalidValue)
			bad++;				/* kp < k */
		printf("launcher argument checks: %s\n", bad ? "FAIL" : "ok");
		if (bad)
			return 1;
	}

	long		total_fails = 0;

	if (validate)
	{
		struct VS
		{
			int64_t		n;
			int			d,
						k;
			DataKind	kind;
		};
		const VS	vs[] = {
			{1, 3, 5000, D_UNIFORM}, {1, 3, 1, D_UNIFORM}, {1, 3, 2, D_INTS},
			{37, 3, 5000, D_INTS}, {1000, 5, 1, D_UNIFORM}, {1000, 3, 2, D_OFFSET},
			{5003, 17, 130, D_INTS}, {3000, 64, 256, D_CLUSTER}, {4099, 100, 129, D_OFFSET},
			{100000, 64, 256, D_UNIFORM}, {1000000, 32, 64, D_CLUSTER},
			{50000, 784, 100, D_OFFSET}, {50000, 784, 100, D_INTS},
			{2000, 8, 65536, D_UNIFORM}, {3001, 130, 1023, D_INTS},
			{100000, 256, 1024, D_CLUSTER}, {300000, 408, 5000, D_UNIFORM},
			{2000000, 128, 1024, D_INTS},
			{20000000, 128, 8, D_CLUSTER},	/* n * dp > 2^31: 64-bit indexing */
		};
		size_t		wmax = 0;

		printf("\n== validation (slack = km_filter_slack; worst = max error / allowed) ==\n");
		for (const VS &c : vs)
		{
			Dataset		ds;

			wmax = 0;
			for (auto &v : vers)
				wmax = std::max(wmax, v.work_bytes(km_filter_kpad(c.k), (c.d + 7) / 8 * 8));
			make_dataset(ds, c.n, c.d, c.k, c.kind, wmax, st, 4096);
			printf("n=%lld d=%d k=%d %s (%zu rows checked)\n", (long long) c.n, c.d, c.k,
				   kind_name[c.kind], ds.sample.size());
			for (auto &v : vers)
			{
				if (v.slow && (double) c.n * ds.p.kp * ds.p.dp > 3e10)
					continue;

				double		worst;
				long		f = check_version(ds, v, &worst);

				total_fails += f;
				printf("    %-4s %s (worst %.3f)\n", v.name, f ? "FAIL" : "ok", worst);
			}
			free_dataset(ds);
		}
		printf("validation: %s (%ld failures)\n", total_fails ? "FAILED" : "all passed", total_fails);
	}

	std::vector<Row> table;

	if (bench)
	{
		struct BS
		{
			int64_t		n;
			int			d,
						k;
		};
		const BS	bs[] = {
			{100000, 256, 1024}, {300000, 408, 5000}, {2000000, 128, 1024},
			{100000, 64, 256}, {1000000, 32, 64}, {50000, 784, 100},
		};
		cublasHandle_t h;

		CKB(cublasCreate(&h));
		CKB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
		CKB(cublasSetStream(h, st));

		printf("\n== benchmark (median of %d interleaved reps after warm-up; X is larger than L2 in every shape) ==\n", reps);
		for (int bi = 0; bi < (int) (sizeof(bs) / sizeof(bs[0])); bi++)
		{
			const BS   &b = bs[bi];

			if (only_shape >= 0 && bi != only_shape)
				continue;
			if (max_shapes-- <= 0)
				break;
			Dataset		ds;
			size_t		wmax = 0;

			for (auto &v : vers)
				wmax = std::max(wmax, v.work_bytes(km_filter_kpad(b.k), (b.d + 7) / 8 * 8));
			make_dataset(ds, b.n, b.d, b.k, D_CLUSTER, wmax, st, 16);

			Problem    &p = ds.p;
			float	   *out;

			CK(cudaMalloc(&out, (size_t) p.n * p.k * sizeof(float)));

			const float one = 1.0f,
						zero = 0.0f;
			auto		sgemm = [&]() {
				/* column-major: out^T (k x n) = C'^T... i.e. out = X C'^T, row-major n x k */
				CKB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, p.k, (int) p.n, p.d, &one,
								p.C, p.dp, p.X, p.dp, &zero, out, p.k));
			};

			/* cuBLAS must be strict fp32: check a few rows against float64 */
			sgemm();
			CK(cudaStreamSynchronize(st));
			double		relmax = 0.0;

			for (int s = 0; s < 16; s++)
			{
				std::vector<float> o(p.k);

				CK(cudaMemcpy(o.data(), out + ds.sample[s] * p.k, p.k * sizeof(float), cudaMemcpyDeviceToHost));
				for (int j = 0; j < p.k; j++)
				{
					double		dot = 0.0,
								mag = 0.0;

					for (int t = 0; t < p.dp; t++)
					{
						dot += (double) ds.hxs[s * p.dp + t] * ds.hC[(size_t) j * p.dp + t];
						mag += fabs((double) ds.hxs[s * p.dp + t] * ds.hC[(size_t) j * p.dp + t]);
					}
					relmax = std::max(relmax, fabs(o[j] - dot) / mag);
				}
			}

			std::vector<std::function<void()>> fns;
			std::vector<std::string> names,
						whats;

			fns.push_back(sgemm);
			names.push_back("cuBLAS");
			whats.push_back("cublasSgemm fp32, writes n x k");
			std::vector<void *> works;	/* each version its own prepared copy */

			for (auto &v : vers)
			{
				if (v.slow && (double) p.n * p.kp * p.dp > 3e10)
					continue;

				Problem		pv = p;

				CK(cudaMalloc(&pv.work, std::max<size_t>(v.work_bytes(p.kp, p.dp), 16)));
				works.push_back(pv.work);
				CK(v.prepare(pv));
				const Version *vp = &v;

				fns.push_back([vp, pv]() { CK(vp->run(pv)); });
				names.push_back(v.name);
				whats.push_back(v.what);
			}

			std::vector<double> med = time_interleaved(fns, reps, st);
			const double flop = 2.0 * p.n * p.k * p.d;
			char		shape[64];

			snprintf(shape, sizeof shape, "%lldx%dx%d", (long long) p.n, p.d, p.k);
			printf("%s (cuBLAS max rel err %.2e: %s)\n", shape, relmax, relmax < 1e-5 ? "fp32" : "NOT STRICT FP32?");
			for (size_t f = 0; f < fns.size(); f++)
			{
				Row			r = {shape, names[f], whats[f], med[f], flop / med[f] / 1e9, med[f] / med[0]};

				printf("    %-6s %9.3f ms %7.2f TFLOP/s (%4.1f%% of peak) x%.3f  %s\n", r.ver.c_str(), r.ms,
					   r.tflops, 100 * r.tflops / peak, r.ratio, r.what.c_str());
				table.push_back(r);
			}
			/* the per-iteration preparation of the production layout */
			{
				std::vector<std::function<void()>> pf = {[&]() { CK(km_filter_prepare(KM_FILTER_TILE_256, p.C, p.cn, p.k, p.kp, p.dp, p.work, st)); }};
				double		pm = time_interleaved(pf, reps, st)[0];

				double		k3ms = 0.0;

				for (size_t f = 0; f < fns.size(); f++)
					if (names[f] == "k3")
						k3ms = med[f];
				printf("    prepare %.4f ms (%.2f%% of k3)\n", pm, k3ms > 0 ? 100 * pm / k3ms : 0.0);
				Row			r = {shape, "prep", "km_filter_prepare", pm, 0, pm / med[0]};

				table.push_back(r);
			}
			for (void *w : works)
				CK(cudaFree(w));
			CK(cudaFree(out));
			free_dataset(ds);
		}
		CKB(cublasDestroy(h));

		printf("\n== table (ratio = time / cuBLAS time; peak %.1f TFLOP/s) ==\n", peak);
		printf("%-20s %-6s %10s %8s %7s\n", "shape", "ver", "ms", "TFLOP/s", "ratio");
		for (auto &r : table)
			printf("%-20s %-6s %10.3f %8.2f %7.3f\n", r.shape.c_str(), r.ver.c_str(), r.ms, r.tflops, r.ratio);
	}
	if (validate)
		printf("validation: %s (%ld failures)\n", total_fails ? "FAILED" : "all passed", total_fails);
	return total_fails ? 1 : 0;
}
