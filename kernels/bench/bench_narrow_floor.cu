/*
 * bench_narrow_floor.cu
 *	  What the filter alone costs a narrow pass at T3's shape D (1M x 8 rows,
 *	  k = 16), on the CUDA cores as the engine does it and on the tensor
 *	  cores: the floor under assign/narrow.cu's pass once its settling, sums
 *	  and end are taken away, and whether a tensor-core filter lowers it.
 *
 *	  Every variant reads the rows and the old labels, decides each row's
 *	  best and second value, counts the rows whose gap its slack cannot
 *	  certify (those the pass would settle exactly), and stores the labels
 *	  that changed, as the pass does:
 *	    read      the rows and labels alone (the pass's bytes)
 *	    fma       the engine's kmg_narrow_filter (this file #includes
 *	              assign/narrow.cu) on three rows a thread, the centroids
 *	              (-2 c) broadcast from shared memory, the slack
 *	              km_filter_slack; the next tile's loads after the
 *	              decisions, as in the engine (where the sums follow them)
 *	    fma2p, fma3p  two or three rows a thread, the next tile's loads
 *	              issued before the filter (registers for two tiles)
 *	    tf32      mma m16n8k8 on TF32 operands (each input rounded to
 *	              nearest): a warp takes 16 rows x 8 centroids a product, a
 *	              row's 16 values end in the four lanes of a quad, merged by
 *	              shuffles (value, id, second); the slack km_screen_slack,
 *	              the engine's screen's
 *	    tf32x3, tf32x3u4  the same with each operand split into TF32 hi + lo
 *	              and three products (lo.hi, hi.lo, hi.hi), about float32's
 *	              accuracy, two or four groups of 16 rows a warp step; the
 *	              slack is km_screen_slack's form with three products' sums
 *	              and the split's 2^-22 terms (a stand-in written for this
 *	              measurement, not a certified bound of the engine's)
 *	    tf32k, tf32ku4  tf32 with less work around the product: distances
 *	              keyed with the centroid's id in their low bits, so a row's
 *	              best two are unsigned minima (floor_tc's KEYED)
 *	  Each variant's certified labels are checked against the float64 argmin
 *	  (ties to the lowest id) of rows uniform in [-0.5, 0.5)^8 (the
 *	  centroids 16 points whose coordinates are random rows') and of 16
 *	  blobs; times are a launch's, from CUDA graphs of 20 launches
 *	  replayed, the rows (32 MB) resident in L2 as in a fit.
 *	  On an H200 (kernels/bench/NOTES.md, round 29) the CUDA cores' filter
 *	  alone took 13.9-14.2 us a pass and every tensor-core form longer
 *	  (19.7-25.7 us): at d = 8 a product replaces eight FMAs a centroid, and
 *	  a quad's merges cost more than that.
 *
 *	  bin/bench_narrow_floor [n]    (one GPU; n default 1000000)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "km_exact.h"
#include "bench_check.h"
#include "assign/narrow.cu"		/* kmg_narrow_filter: the engine's filter itself */

#define FLOOR_D 8				/* columns (dp) */
#define FLOOR_K 16				/* centroids */
#define FLOOR_NT KMG_NARROW_NT	/* threads a block */
#define FLOOR_R kmg_narrow_rows(FLOOR_D)	/* rows a thread, as the engine's */

typedef struct floor_args
{
	const float *X;				/* n x FLOOR_D, centred */
	int64_t		n;
	const float *C2;			/* FLOOR_K x FLOOR_D: -2 c */
	const float *cn;			/* FLOOR_K: |c|^2 */
	float		cmax;
	int		   *labels;
	unsigned long long *count;	/* [0] rows not certified, [1] labels changed */
	int			mark;			/* store label + 1000 for a row not certified */
} floor_args;

/* The centroids into shared memory: -2 c, then |c|^2 (the engine's layout for them). */
static __device__ __forceinline__ void
floor_centroids(const floor_args &a, float *sc)
{
	if (threadIdx.x < FLOOR_K * FLOOR_D)
		sc[threadIdx.x] = a.C2[threadIdx.x];
	if (threadIdx.x < FLOOR_K)
		sc[FLOOR_K * FLOOR_D + threadIdx.x] = a.cn[threadIdx.x];
	__syncthreads();
}

#define FLOOR_SMEM ((FLOOR_K * FLOOR_D + FLOOR_K) * sizeof(float))

static __device__ __forceinline__ void
floor_count(unsigned long long *count, int unc, int moved)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
	{
		unc += __shfl_xor_sync(0xffffffffu, unc, o);
		moved += __shfl_xor_sync(0xffffffffu, moved, o);
	}
	if ((threadIdx.x & 31) == 0)
	{
		if (unc)
			atomicAdd(&count[0], (unsigned long long) unc);
		if (moved)
			atomicAdd(&count[1], (unsigned long long) moved);
	}
}

/* A row's decision: count it if not certified, store its label if it changed. */
static __device__ __forceinline__ void
floor_decide(const floor_args &a, int *lb, int i, int old, int best, int uncertain, int &unc, int &moved)
{
	const int	lab = best + (a.mark && uncertain ? 1000 : 0);

	unc += uncertain;
	if (old != lab)
	{
		lb[i] = lab;
		moved++;
	}
}

/* The rows and labels, each read once (a block's range, as the pass's). */
__global__ void __launch_bounds__(FLOOR_NT, 2)
floor_read(floor_args a)
{
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * a.n / gridDim.x;
	float		s = 0.0f;
	int			l = 0;

	for (int64_t row = r0 + threadIdx.x; row < r1; row += FLOOR_NT)
	{
		const float4 *src = reinterpret_cast<const float4 *>(a.X + (size_t) row * FLOOR_D);
		const float4 p = src[0],
					q = src[1];

		s += p.x + p.y + p.z + p.w + q.x + q.y + q.z + q.w;
		l += a.labels[row];
	}
	floor_count(a.count, s == 12345.0f, l == 12345);
}

/*
 * The engine's filter (kmg_narrow_filter) on RT rows a thread, the rows at
 * 32-bit offsets in the block's range.  PRE: the next tile's loads leave
 * before the filter (registers for two tiles); else after the decisions,
 * as in the engine's pass, where the sums follow them.
 */
template <int RT, bool PRE>
__global__ void __launch_bounds__(FLOOR_NT, 2)
floor_fma(floor_args a)
{
	extern __shared__ __align__(16) float floor_smem[];
	const int	tid = threadIdx.x;
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int	nb = (int) ((int64_t) (blockIdx.x + 1) * a.n / gridDim.x - r0);
	const float4 *X4 = reinterpret_cast<const float4 *>(a.X) + r0 * (FLOOR_D / 4);
	int		   *lb = a.labels + r0;
	kmg_narrow_smem sm = {};
	int			unc = 0,
				moved = 0;

	floor_centroids(a, floor_smem);
	sm.C2 = floor_smem;
	sm.cn = floor_smem + FLOOR_K * FLOOR_D;

	float4		xr[RT][FLOOR_D / 4];
	int			old[RT];

#define FLOOR_FMA_LOAD(B) \
	_Pragma("unroll") \
	for (int r = 0; r < RT; r++) \
	{ \
		const int	at = min((B) + r * FLOOR_NT + tid, nb - 1); \
		xr[r][0] = X4[at * 2]; \
		xr[r][1] = X4[at * 2 + 1]; \
		old[r] = lb[at]; \
	}

	FLOOR_FMA_LOAD(0);
	for (int base = 0; base < nb; base += FLOOR_NT * RT)
	{
		float4		x[RT][FLOOR_D / 4];
		int			o[RT];
		float		f1[RT],
					f2[RT];
		int			b[RT];

		__syncwarp();			/* as the engine's loop top: keeps the centroids' reads in the loop */
#pragma unroll
		for (int r = 0; r < RT; r++)
		{
			x[r][0] = xr[r][0];
			x[r][1] = xr[r][1];
			o[r] = old[r];
		}
		if (PRE)
			FLOOR_FMA_LOAD(base + FLOOR_NT * RT);
		kmg_narrow_filter<FLOOR_D, FLOOR_K, RT>(sm, x, f1, f2, b);
#pragma unroll
		for (int r = 0; r < RT; r++)
		{
			const int	i = base + r * FLOOR_NT + tid;
			const float slack = km_filter_slack(FLOOR_D, sqrtf(kmg_narrow_norm2<FLOOR_D>(x[r])), a.cmax);

			if (i < nb)
				floor_decide(a, lb, i, o[r], b[r], !(f2[r] - f1[r] > slack), unc, moved);
		}
		if (!PRE)
			FLOOR_FMA_LOAD(base + FLOOR_NT * RT);
	}
#undef FLOOR_FMA_LOAD
	floor_count(a.count, unc, moved);
}

static __device__ __forceinline__ uint32_t
floor_tf32(float v)
{
	uint32_t	r;

	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
	return r;
}

static __device__ __forceinline__ void
floor_mma(float (&c)[4], const uint32_t (&av)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
				 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
				 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
				 : "r"(av[0]), "r"(av[1]), "r"(av[2]), "r"(av[3]), "r"(b0), "r"(b1));
}

/* (f1, b, f2) merged with another lane's: the best, its id (ties to the lower) and the second. */
static __device__ __forceinline__ void
floor_merge(float &f1, int &b, float &f2, float o1, int ob, float o2)
{
	const float n2 = fminf(fmaxf(f1, o1), fminf(f2, o2));

	if (o1 < f1 || (o1 == f1 && ob < b))
	{
		f1 = o1;
		b = ob;
	}
	f2 = n2;
}

/* A distance (+ |x|^2, at least 0) keyed with its centroid's id in its four low bits. */
static __device__ __forceinline__ uint32_t
floor_key(float v, float xx, int j)
{
	return (__float_as_uint(fmaxf(v + xx, 0.0f)) & ~15u) | (uint32_t) j;
}

/*
 * The three-product slack (see the head of the file): km_screen_bound's
 * terms for three products' sums, the split's input errors (each operand
 * within 2^-22 of hi + lo, the dropped lo.lo within 2^-22 |x| |2c|), and the
 * float32 filter's slack on top.
 */
static __device__ __forceinline__ float
floor_slack3(int dp, float xnorm, float cmax)
{
	const float xc = xnorm * cmax,
				cc = cmax * cmax;
	float		e;

	if (!(xnorm + cmax < 0x1p60f))
		return INFINITY;
	e = 0x1p-24f * cc + 2.0f * 3.5f * 0x1p-22f * xc +
		3.0f * (float) dp * 0x1p-22f * (1.0f + 0x1p-10f) * (cc + 2.0f * xc) +
		3.0f * (float) dp * 0x1p-124f * (xnorm + cmax + 1.0f);
	return 2.5f * e + km_filter_slack(FLOOR_D, xnorm, cmax);
}

/*
 * The filter on the tensor cores: a warp takes U groups of 16 rows a step
 * (the next step's loads in flight under this one's products).  Lane
 * (g, t) = (lane / 4, lane % 4) loads columns 2t and 2t + 1 of rows g and
 * g + 8 of a group (one 8-byte load each); the product's k index t stands
 * for column 2t and t + 4 for 2t + 1 (a dot product does not care in which
 * order its columns come), so A's fragment is those four values and B's is
 * -2 c_j at the same columns, j = 8 nt + g.  The accumulators start at
 * |c_j|^2: lane (g, t) ends with rows g and g + 8 against centroids 2t,
 * 2t + 1, 8 + 2t, 9 + 2t, and the quad's four lanes share a row's best two.
 * SPLIT 3: each operand split into TF32 hi + lo, three products.  KEYED:
 * the values made distances keyed with their centroid's id (floor_key), so
 * that the lane's and the quad's best two are unsigned minima and maxima of
 * 32-bit keys, with no ids carried beside them and no tie rule (a tie is
 * inside the slack); a key moves its value by at most 16 ulp and the sum
 * with |x|^2 rounds once, so 2^-18 (|x| + cmax)^2 more slack covers both.
 * Else the merges carry (value, id, second).  Lane t < 2 decides row g + 8 t.
 */
template <int SPLIT, int U, bool KEYED>
__global__ void __launch_bounds__(FLOOR_NT, 2)
floor_tc(floor_args a)
{
	extern __shared__ __align__(16) float floor_smem[];
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	g = lane >> 2;
	const int	t = lane & 3;
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int	nb = (int) ((int64_t) (blockIdx.x + 1) * a.n / gridDim.x - r0);
	const float2 *X2 = reinterpret_cast<const float2 *>(a.X) + r0 * (FLOOR_D / 2) + t;
	int		   *lb = a.labels + r0;
	const float *sc = floor_smem,
			   *scn = floor_smem + FLOOR_K * FLOOR_D;
	int			unc = 0,
				moved = 0;

	floor_centroids(a, floor_smem);

	uint32_t	bh[2][2],
				bl[2][2];
	float		ci[2][2];

#pragma unroll
	for (int nt = 0; nt < 2; nt++)
	{
#pragma unroll
		for (int h = 0; h < 2; h++)
		{
			const float v = sc[(nt * 8 + g) * FLOOR_D + 2 * t + h];

			bh[nt][h] = floor_tf32(v);
			bl[nt][h] = floor_tf32(v - __uint_as_float(bh[nt][h]));
		}
		ci[nt][0] = scn[nt * 8 + 2 * t];
		ci[nt][1] = scn[nt * 8 + 2 * t + 1];
	}

	constexpr int step_rows = 16 * U * (FLOOR_NT / 32);
	float2		xr[U][2];
	int			old[U];

#define FLOOR_TC_LOAD(B) \
	_Pragma("unroll") \
	for (int u = 0; u < U; u++) \
	{ \
		const int	i0 = (B) + 16 * (warp * U + u); \
		xr[u][0] = X2[min(i0 + g, nb - 1) * (FLOOR_D / 2)]; \
		xr[u][1] = X2[min(i0 + g + 8, nb - 1) * (FLOOR_D / 2)]; \
		old[u] = lb[min(i0 + g + 8 * (t & 1), nb - 1)]; \
	}

	FLOOR_TC_LOAD(0);
	for (int base = 0; base < nb; base += step_rows)
	{
		float2		x[U][2];
		int			o[U];

#pragma unroll
		for (int u = 0; u < U; u++)
		{
			x[u][0] = xr[u][0];
			x[u][1] = xr[u][1];
			o[u] = old[u];
		}
		FLOOR_TC_LOAD(base + step_rows);

#pragma unroll
		for (int u = 0; u < U; u++)
		{
			const float av[4] = {x[u][0].x, x[u][1].x, x[u][0].y, x[u][1].y};
			uint32_t	ah[4],
						al[4];
			float		acc[2][4];

#pragma unroll
			for (int q = 0; q < 4; q++)
			{
				ah[q] = floor_tf32(av[q]);
				if (SPLIT == 3)
					al[q] = floor_tf32(av[q] - __uint_as_float(ah[q]));
			}
#pragma unroll
			for (int nt = 0; nt < 2; nt++)
			{
				acc[nt][0] = acc[nt][2] = ci[nt][0];
				acc[nt][1] = acc[nt][3] = ci[nt][1];
				if (SPLIT == 3)
				{
					floor_mma(acc[nt], al, bh[nt][0], bh[nt][1]);
					floor_mma(acc[nt], ah, bl[nt][0], bl[nt][1]);
				}
				floor_mma(acc[nt], ah, bh[nt][0], bh[nt][1]);
			}

			/* row g (h = 0) and row g + 8 (h = 1): each row's best, its id, the second */
			float		f1[2],
						f2[2],
						xx[2];
			int			b[2];

#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				const float2 xv = x[u][h];
				float		s = fmaf(xv.x, xv.x, xv.y * xv.y);

				s += __shfl_xor_sync(0xffffffffu, s, 1);
				s += __shfl_xor_sync(0xffffffffu, s, 2);
				xx[h] = s;

				const float v[4] = {acc[0][2 * h], acc[0][2 * h + 1], acc[1][2 * h], acc[1][2 * h + 1]};
				const int	j[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};

				if (KEYED)
				{
					const uint32_t e0 = floor_key(v[0], s, j[0]),
								e1 = floor_key(v[1], s, j[1]),
								e2 = floor_key(v[2], s, j[2]),
								e3 = floor_key(v[3], s, j[3]);
					const uint32_t m01 = min(e0, e1),
								M01 = max(e0, e1),
								m23 = min(e2, e3),
								M23 = max(e2, e3);
					uint32_t	p1 = min(m01, m23),
								p2 = min(max(m01, m23), min(M01, M23));

#pragma unroll
					for (int off = 1; off <= 2; off <<= 1)
					{
						const uint32_t o1 = __shfl_xor_sync(0xffffffffu, p1, off);
						const uint32_t o2 = __shfl_xor_sync(0xffffffffu, p2, off);

						p2 = min(max(p1, o1), min(p2, o2));
						p1 = min(p1, o1);
					}
					f1[h] = __uint_as_float(p1 & ~15u);
					f2[h] = __uint_as_float(p2 & ~15u);
					b[h] = (int) (p1 & 15u);
				}
				else
				{
					float		p1 = v[0],
								p2 = INFINITY;
					int			pb = j[0];

#pragma unroll
					for (int q = 1; q < 4; q++)
						floor_merge(p1, pb, p2, v[q], j[q], INFINITY);
#pragma unroll
					for (int off = 1; off <= 2; off <<= 1)
					{
						const float o1 = __shfl_xor_sync(0xffffffffu, p1, off);
						const int	ob = __shfl_xor_sync(0xffffffffu, pb, off);
						const float o2 = __shfl_xor_sync(0xffffffffu, p2, off);

						floor_merge(p1, pb, p2, o1, ob, o2);
					}
					f1[h] = p1;
					f2[h] = p2;
					b[h] = pb;
				}
			}

			if (t < 2)
			{
				const int	i = base + 16 * (warp * U + u) + g + 8 * t;
				const float xn = sqrtf(t ? xx[1] : xx[0]);
				const float r = xn + a.cmax;
				const float slack = SPLIT == 3 ? floor_slack3(FLOOR_D, xn, a.cmax)
					: km_screen_slack(FLOOR_D, FLOOR_D, xn, a.cmax) + (KEYED ? 0x1p-18f * r * r : 0.0f);
				const float gap = t ? f2[1] - f1[1] : f2[0] - f1[0];

				if (i < nb)
					floor_decide(a, lb, i, o[u], t ? b[1] : b[0], !(gap > slack), unc, moved);
			}
		}
	}
#undef FLOOR_TC_LOAD
	floor_count(a.count, unc, moved);
}

/* ---- host ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double
urand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double) (rng_state >> 11) * 0x1p-53;
}

static double
nrand(void)
{
	double		u1 = urand(),
				u2 = urand();

	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

typedef void (*floor_kernel) (floor_args);

typedef struct floor_variant
{
	const char *name;
	floor_kernel fn;
	int			certifies;		/* decides labels (read does not) */
} floor_variant;

/* variants[]'s index of the engine's filter, the yardstick of the times */
#define FLOOR_FMA 1

static const floor_variant variants[] = {
	{"read", floor_read, 0},
	{"fma", floor_fma<FLOOR_R, false>, 1},
	{"fma2p", floor_fma<2, true>, 1},
	{"fma3p", floor_fma<3, true>, 1},
	{"tf32", floor_tc<1, 2, false>, 1},
	{"tf32x3", floor_tc<3, 2, false>, 1},
	{"tf32x3u4", floor_tc<3, 4, false>, 1},
	{"tf32k", floor_tc<1, 2, true>, 1},
	{"tf32ku4", floor_tc<1, 4, true>, 1},
};
#define NVAR ((int) (sizeof(variants) / sizeof(variants[0])))

/* The float64 argmin of every row (ties to the lowest id). */
static void
exact_labels(const float *X, int64_t n, const float *C, int *lab)
{
	for (int64_t i = 0; i < n; i++)
	{
		double		best = INFINITY;
		int			bj = 0;

		for (int j = 0; j < FLOOR_K; j++)
		{
			double		s = 0.0;

			for (int c = 0; c < FLOOR_D; c++)
			{
				const double e = (double) X[i * FLOOR_D + c] - (double) C[j * FLOOR_D + c];

				s += e * e;
			}
			if (s < best)
			{
				best = s;
				bj = j;
			}
		}
		lab[i] = bj;
	}
}

int
main(int argc, char **argv)
{
	const int64_t n = argc > 1 ? atoll(argv[1]) : 1000000;
	cudaDeviceProp prop;
	int			dev = 0;

	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	printf("# %s, %d SMs; n = %lld, d = %d, k = %d; grid 2 blocks an SM of %d threads\n",
		   prop.name, prop.multiProcessorCount, (long long) n, FLOOR_D, FLOOR_K, FLOOR_NT);

	const int	grid = 2 * prop.multiProcessorCount;
	float	   *hX = (float *) malloc((size_t) n * FLOOR_D * sizeof(float));
	float		hC[FLOOR_K * FLOOR_D],
				hC2[FLOOR_K * FLOOR_D],
				hcn[FLOOR_K];
	int		   *ref = (int *) malloc((size_t) n * sizeof(int));
	int		   *got = (int *) malloc((size_t) n * sizeof(int));
	float	   *dX,
			   *dC2,
			   *dcn;
	int		   *dlab;
	unsigned long long *dcount;
	cudaStream_t st;

	CK(cudaMalloc(&dX, (size_t) n * FLOOR_D * sizeof(float)));
	CK(cudaMalloc(&dC2, sizeof(hC2)));
	CK(cudaMalloc(&dcn, sizeof(hcn)));
	CK(cudaMalloc(&dlab, (size_t) n * sizeof(int)));
	CK(cudaMalloc(&dcount, 2 * sizeof(unsigned long long)));
	CK(cudaStreamCreate(&st));

	for (int data = 0; data < 2; data++)
	{
		/*
		 * rows uniform in [-0.5, 0.5)^8, the centroids with each coordinate
		 * a random row's; or 16 blobs (sd 0.06), the centroids near their centres
		 */
		float		centre[FLOOR_K * FLOOR_D];

		for (int j = 0; j < FLOOR_K * FLOOR_D; j++)
			centre[j] = (float) (urand() - 0.5);
		for (int64_t i = 0; i < n; i++)
		{
			const int	j = (int) (urand() * FLOOR_K);

			for (int c = 0; c < FLOOR_D; c++)
				hX[i * FLOOR_D + c] = data == 0 ? (float) (urand() - 0.5)
					: (float) (centre[j * FLOOR_D + c] + 0.06 * nrand());
		}
		float		cmax = 0.0f;

		for (int j = 0; j < FLOOR_K; j++)
		{
			double		s = 0.0;

			for (int c = 0; c < FLOOR_D; c++)
			{
				hC[j * FLOOR_D + c] = data == 0 ? hX[(int64_t) (urand() * n) * FLOOR_D + c]
					: (float) (centre[j * FLOOR_D + c] + 0.01 * nrand());
				hC2[j * FLOOR_D + c] = -2.0f * hC[j * FLOOR_D + c];
				s += (double) hC[j * FLOOR_D + c] * hC[j * FLOOR_D + c];
			}
			hcn[j] = (float) s;
			cmax = fmaxf(cmax, (float) sqrt(s) * (1.0f + 0x1p-20f));
		}
		exact_labels(hX, n, hC, ref);
		CK(cudaMemcpy(dX, hX, (size_t) n * FLOOR_D * sizeof(float), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dC2, hC2, sizeof(hC2), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dcn, hcn, sizeof(hcn), cudaMemcpyHostToDevice));

		floor_args	a = {dX, n, dC2, dcn, cmax, dlab, dcount, 0};
		const char *dname = data == 0 ? "uniform" : "blobs";

		/* one checked launch each: certified labels against the float64 argmin */
		for (int v = 0; v < NVAR; v++)
		{
			if (!variants[v].certifies)
				continue;

			unsigned long long hc[2];
			int64_t		wrong = 0,
						unc = 0;

			a.mark = 1;
			CK(cudaMemset(dlab, 0xff, (size_t) n * sizeof(int)));
			CK(cudaMemset(dcount, 0, 2 * sizeof(unsigned long long)));
			variants[v].fn<<<grid, FLOOR_NT, FLOOR_SMEM, st>>>(a);
			CK(cudaStreamSynchronize(st));
			CK(cudaMemcpy(got, dlab, (size_t) n * sizeof(int), cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(hc, dcount, sizeof(hc), cudaMemcpyDeviceToHost));
			for (int64_t i = 0; i < n; i++)
			{
				if (got[i] >= 1000)
					unc++;
				else if (got[i] != ref[i])
					wrong++;
			}
			printf("check %-7s %-8s not certified %lld (%.4f %%, counted %llu), certified and wrong %lld: %s\n",
				   dname, variants[v].name, (long long) unc, 100.0 * unc / n, hc[0], (long long) wrong,
				   wrong == 0 && (unsigned long long) unc == hc[0] ? "ok" : "FAIL");
		}

		/* times: graphs of 20 launches, replayed 20 times, five rounds with the variants in turn */
		const int	per = 20,
					reps = 20,
					rounds = 5;
		cudaGraphExec_t ge[NVAR];
		float		ms[NVAR][rounds];
		cudaEvent_t e0,
					e1;

		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
		a.mark = 0;
		for (int v = 0; v < NVAR; v++)
		{
			cudaGraph_t gr;

			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
			for (int i = 0; i < per; i++)
				variants[v].fn<<<grid, FLOOR_NT, FLOOR_SMEM, st>>>(a);
			CK(cudaStreamEndCapture(st, &gr));
			CK(cudaGraphInstantiate(&ge[v], gr, 0));
			CK(cudaGraphDestroy(gr));
		}
		/* labels as a settled pass finds them: the exact ones (no stores) */
		CK(cudaMemcpy(dlab, ref, (size_t) n * sizeof(int), cudaMemcpyHostToDevice));
		for (int v = 0; v < NVAR; v++)
			CK(cudaGraphLaunch(ge[v], st));
		CK(cudaStreamSynchronize(st));
		for (int r = 0; r < rounds; r++)
			for (int v = 0; v < NVAR; v++)
			{
				CK(cudaEventRecord(e0, st));
				for (int i = 0; i < reps; i++)
					CK(cudaGraphLaunch(ge[v], st));
				CK(cudaEventRecord(e1, st));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms[v][r], e0, e1));
			}
		float		med[NVAR],
					lo[NVAR],
					hi[NVAR];

		for (int v = 0; v < NVAR; v++)
		{
			float		s[rounds];

			for (int r = 0; r < rounds; r++)
				s[r] = ms[v][r] * 1000.0f / (per * reps);
			for (int i = 0; i < rounds; i++)
				for (int j = i + 1; j < rounds; j++)
					if (s[j] < s[i])
					{
						float		x = s[i];

						s[i] = s[j];
						s[j] = x;
					}
			med[v] = s[rounds / 2];
			lo[v] = s[0];
			hi[v] = s[rounds - 1];
			CK(cudaGraphExecDestroy(ge[v]));
		}
		for (int v = 0; v < NVAR; v++)
			printf("time  %-7s %-8s us a pass: median %.2f (min %.2f, max %.2f), %.2f of fma's\n",
				   dname, variants[v].name, med[v], lo[v], hi[v], med[v] / med[FLOOR_FMA]);
		CK(cudaEventDestroy(e0));
		CK(cudaEventDestroy(e1));
	}
	CK(cudaFree(dX));
	CK(cudaFree(dC2));
	CK(cudaFree(dcn));
	CK(cudaFree(dlab));
	CK(cudaFree(dcount));
	free(hX);
	free(ref);
	free(got);
	return 0;
}
