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
 *	    fma       kmg_narrow_filter's loop: three rows a thread, the
 *	              centroids (-2 c) broadcast from shared memory, the slack
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
 *	              best two are unsigned minima (floor_tck)
 *	  Each variant's certified labels are checked against the float64 argmin
 *	  (ties to the lowest id) of rows uniform in [-0.5, 0.5)^8 (the
 *	  centroids 16 points whose coordinates are random rows') and of 16
 *	  blobs; times are a launch's, from CUDA graphs
 *	  of 20 launches replayed, the rows (32 MB) resident in L2 as in a fit.
 *	  On an H200 (kernels/bench/NOTES.md, round 29) the CUDA cores' filter
 *	  alone took 14.3-14.8 us a pass and every tensor-core form longer
 *	  (19.6-29.5 us): at d = 8 a product replaces eight FMAs a centroid, and
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

#define D 8
#define K 16
#define NT 256
#define R 3						/* rows a thread in fma, as kmg_narrow_rows(8) */

#define CK(call) \
	do { \
		cudaError_t e_ = (call); \
		if (e_ != cudaSuccess) \
		{ \
			fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
			exit(1); \
		} \
	} while (0)

typedef struct floor_args
{
	const float *X;				/* n x D, centred */
	int64_t		n;
	const float *C2;			/* K x D: -2 c */
	const float *cn;			/* K: |c|^2 */
	float		cmax;
	int		   *labels;
	unsigned long long *count;	/* [0] rows not certified, [1] labels changed */
	int			mark;			/* store label + 1000 for a row not certified */
} floor_args;

static __device__ __forceinline__ int64_t
floor_at(int64_t row, int64_t r1)
{
	return max(row < r1 ? row : r1 - 1, (int64_t) 0);
}

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

/* The rows and labels, each read once (a block's range, as the pass's). */
__global__ void __launch_bounds__(NT, 2)
floor_read(floor_args a)
{
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * a.n / gridDim.x;
	float		s = 0.0f;
	int			l = 0;

	for (int64_t row = r0 + threadIdx.x; row < r1; row += NT)
	{
		const float4 *src = reinterpret_cast<const float4 *>(a.X + (size_t) row * D);
		const float4 p = src[0],
					q = src[1];

		s += p.x + p.y + p.z + p.w + q.x + q.y + q.z + q.w;
		l += a.labels[row];
	}
	floor_count(a.count, s == 12345.0f, l == 12345);
}

/*
 * The engine's filter (kmg_narrow_filter) on RT rows a thread.  PRE: the
 * next tile's loads leave before the filter (registers for two tiles);
 * else after the decisions, as in the engine's pass, where the sums follow.
 */
template <int RT, bool PRE>
__global__ void __launch_bounds__(NT, 2)
floor_fma(floor_args a)
{
	extern __shared__ __align__(16) float floor_smem[];
	float	   *sc = floor_smem,
			   *scn = floor_smem + K * D;
	const int	tid = threadIdx.x;
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * a.n / gridDim.x;
	int			unc = 0,
				moved = 0;

	if (tid < K * D)
		sc[tid] = a.C2[tid];
	if (tid < K)
		scn[tid] = a.cn[tid];
	__syncthreads();

	float4		xr[RT][2];
	int			old[RT];

#pragma unroll
	for (int r = 0; r < RT; r++)
	{
		const int64_t at = floor_at(r0 + r * NT + tid, r1);

		xr[r][0] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[0];
		xr[r][1] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[1];
		old[r] = a.labels[at];
	}
	for (int64_t base = r0; base < r1; base += NT * RT)
	{
		float4		x[RT][2];
		int			o[RT];

		__syncwarp();			/* as the engine's loop top: keeps the centroids' reads in the loop */

#pragma unroll
		for (int r = 0; r < RT; r++)
		{
			x[r][0] = xr[r][0];
			x[r][1] = xr[r][1];
			o[r] = old[r];
		}
		/* the next tile's loads, in flight under the filter */
		if (PRE)
		{
#pragma unroll
			for (int r = 0; r < RT; r++)
			{
				const int64_t at = floor_at(base + NT * RT + r * NT + tid, r1);
	
				xr[r][0] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[0];
				xr[r][1] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[1];
				old[r] = a.labels[at];
			}
		}

		float		f1[RT],
					f2[RT];
		int			b[RT];

#pragma unroll
		for (int r = 0; r < RT; r++)
		{
			f1[r] = INFINITY;
			f2[r] = INFINITY;
			b[r] = 0;
		}
#pragma unroll
		for (int j = 0; j < K; j++)
		{
			const float4 c0 = reinterpret_cast<const float4 *>(sc + j * D)[0];
			const float4 c1 = reinterpret_cast<const float4 *>(sc + j * D)[1];
			const float cnj = scn[j];

#pragma unroll
			for (int r = 0; r < RT; r++)
			{
				float		v = cnj;

				v = fmaf(x[r][0].x, c0.x, v);
				v = fmaf(x[r][0].y, c0.y, v);
				v = fmaf(x[r][0].z, c0.z, v);
				v = fmaf(x[r][0].w, c0.w, v);
				v = fmaf(x[r][1].x, c1.x, v);
				v = fmaf(x[r][1].y, c1.y, v);
				v = fmaf(x[r][1].z, c1.z, v);
				v = fmaf(x[r][1].w, c1.w, v);
				f2[r] = fminf(f2[r], fmaxf(f1[r], v));
				if (v < f1[r])
				{
					f1[r] = v;
					b[r] = j;
				}
			}
		}
#pragma unroll
		for (int r = 0; r < RT; r++)
		{
			const int64_t row = base + r * NT + tid;
			float		s = 0.0f;

			s = fmaf(x[r][0].x, x[r][0].x, s);
			s = fmaf(x[r][0].y, x[r][0].y, s);
			s = fmaf(x[r][0].z, x[r][0].z, s);
			s = fmaf(x[r][0].w, x[r][0].w, s);
			s = fmaf(x[r][1].x, x[r][1].x, s);
			s = fmaf(x[r][1].y, x[r][1].y, s);
			s = fmaf(x[r][1].z, x[r][1].z, s);
			s = fmaf(x[r][1].w, x[r][1].w, s);

			const float slack = km_filter_slack(D, sqrtf(s), a.cmax);
			const int	u = !(f2[r] - f1[r] > slack);
			const int	lab = b[r] + (a.mark && u ? 1000 : 0);

			if (row < r1)
			{
				unc += u;
				if (o[r] != lab)
				{
					a.labels[row] = lab;
					moved++;
				}
			}
		}
		if (!PRE)
		{
#pragma unroll
			for (int r = 0; r < RT; r++)
			{
				const int64_t at = floor_at(base + NT * RT + r * NT + tid, r1);
	
				xr[r][0] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[0];
				xr[r][1] = reinterpret_cast<const float4 *>(a.X + (size_t) at * D)[1];
				old[r] = a.labels[at];
			}
		}
	}
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
	return 2.5f * e + km_filter_slack(D, xnorm, cmax);
}

/*
 * The filter on the tensor cores: a warp takes U groups of 16 rows a step
 * (the next step's loads in flight under this one's products).
 * Lane (g, t) = (lane / 4, lane % 4) loads columns 2t and 2t + 1 of rows g
 * and g + 8 of a group (one 8-byte load each); the product's k index t
 * stands for column 2t and t + 4 for 2t + 1 (a dot product does not care in
 * which order its columns come), so A's fragment is those four values and
 * B's is -2 c_j at the same columns, j = 8 nt + g.  The accumulators start
 * at |c_j|^2: lane (g, t) ends with rows g and g + 8 against centroids 2t,
 * 2t + 1, 8 + 2t, 9 + 2t, and the quad's four lanes share a row's best two.
 */
template <int SPLIT, int U>
__global__ void __launch_bounds__(NT, 2)
floor_tc(floor_args a)
{
	__shared__ __align__(16) float sc[K * D];
	__shared__ float scn[K];
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	g = lane >> 2;
	const int	t = lane & 3;
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int64_t r1 = (int64_t) (blockIdx.x + 1) * a.n / gridDim.x;
	int			unc = 0,
				moved = 0;

	if (tid < K * D)
		sc[tid] = a.C2[tid];
	if (tid < K)
		scn[tid] = a.cn[tid];
	__syncthreads();

	uint32_t	bh[2][2],
				bl[2][2];
	float		ci[2][2];

#pragma unroll
	for (int nt = 0; nt < 2; nt++)
	{
		const int	j = nt * 8 + g;

#pragma unroll
		for (int h = 0; h < 2; h++)
		{
			const float v = sc[j * D + 2 * t + h];

			bh[nt][h] = floor_tf32(v);
			bl[nt][h] = floor_tf32(v - __uint_as_float(bh[nt][h]));
		}
		ci[nt][0] = scn[nt * 8 + 2 * t];
		ci[nt][1] = scn[nt * 8 + 2 * t + 1];
	}

	/* a warp step: U groups of 16 rows, (warp + 8 s) U + u */
	const int64_t step_rows = (int64_t) 16 * U * (NT / 32);
	float2		xr[U][2];
	int			old[U];

#define FLOOR_TC_LOAD(B) \
	_Pragma("unroll") \
	for (int u = 0; u < U; u++) \
	{ \
		const int64_t gb = (B) + (int64_t) 16 * (warp * U + u); \
		xr[u][0] = *reinterpret_cast<const float2 *>(a.X + (size_t) floor_at(gb + g, r1) * D + 2 * t); \
		xr[u][1] = *reinterpret_cast<const float2 *>(a.X + (size_t) floor_at(gb + g + 8, r1) * D + 2 * t); \
		old[u] = t < 2 ? a.labels[floor_at(gb + g + 8 * t, r1)] : 0; \
	}

	FLOOR_TC_LOAD(r0);
	for (int64_t base = r0; base < r1; base += step_rows)
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
			for (int i = 0; i < 4; i++)
			{
				ah[i] = floor_tf32(av[i]);
				if (SPLIT == 3)
					al[i] = floor_tf32(av[i] - __uint_as_float(ah[i]));
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

			/* row g (h = 0) and row g + 8 (h = 1): the lane's four values, then the quad's */
			float		f1[2],
						f2[2],
						xx[2];
			int			b[2];

#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				const float v0 = acc[0][2 * h],
							v1 = acc[0][2 * h + 1],
							v2 = acc[1][2 * h],
							v3 = acc[1][2 * h + 1];
				float		p1 = v0,
							p2 = INFINITY;
				int			pb = 2 * t;

				floor_merge(p1, pb, p2, v1, 2 * t + 1, INFINITY);
				floor_merge(p1, pb, p2, v2, 8 + 2 * t, INFINITY);
				floor_merge(p1, pb, p2, v3, 9 + 2 * t, INFINITY);
#pragma unroll
				for (int o = 1; o <= 2; o <<= 1)
				{
					const float o1 = __shfl_xor_sync(0xffffffffu, p1, o);
					const int	ob = __shfl_xor_sync(0xffffffffu, pb, o);
					const float o2 = __shfl_xor_sync(0xffffffffu, p2, o);

					floor_merge(p1, pb, p2, o1, ob, o2);
				}
				f1[h] = p1;
				f2[h] = p2;
				b[h] = pb;

				const float2 xv = x[u][h];
				float		s = fmaf(xv.x, xv.x, xv.y * xv.y);

				s += __shfl_xor_sync(0xffffffffu, s, 1);
				s += __shfl_xor_sync(0xffffffffu, s, 2);
				xx[h] = s;
			}

			/* lane t < 2 decides row g + 8 t */
			if (t < 2)
			{
				const int64_t row = base + (int64_t) 16 * (warp * U + u) + g + 8 * t;
				const float xn = sqrtf(t ? xx[1] : xx[0]);
				const float slack = SPLIT == 3 ? floor_slack3(D, xn, a.cmax)
					: km_screen_slack(D, D, xn, a.cmax);
				const float gap = t ? f2[1] - f1[1] : f2[0] - f1[0];
				const int	un = !(gap > slack);
				const int	lab = (t ? b[1] : b[0]) + (a.mark && un ? 1000 : 0);

				if (row < r1)
				{
					unc += un;
					if (o[u] != lab)
					{
						a.labels[row] = lab;
						moved++;
					}
				}
			}
		}
	}
#undef FLOOR_TC_LOAD
	floor_count(a.count, unc, moved);
}

/*
 * The same product with less work around it (tf32k): each value made a
 * distance (+ |x|^2, at least 0) and its centroid's id put in its four low
 * bits, so that a row's best two over its lane's four values and then the
 * quad's are unsigned minima and maxima of 32-bit keys (no ids carried
 * beside the values, no tie rule: a tie is inside the slack); 32-bit row
 * offsets within the block.  The keys move a value by at most 16 ulp, and
 * the sum with |x|^2 rounds once: 2^-18 (|x| + cmax)^2 more slack covers both.
 */
static __device__ __forceinline__ uint32_t
floor_key(float v, float xx, int j)
{
	return (__float_as_uint(fmaxf(v + xx, 0.0f)) & ~15u) | (uint32_t) j;
}

template <int U>
__global__ void __launch_bounds__(NT, 2)
floor_tck(floor_args a)
{
	__shared__ __align__(16) float sc[K * D];
	__shared__ float scn[K];
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	g = lane >> 2;
	const int	t = lane & 3;
	const int64_t r0 = (int64_t) blockIdx.x * a.n / gridDim.x;
	const int	nb = (int) ((int64_t) (blockIdx.x + 1) * a.n / gridDim.x - r0);
	const float2 *X2 = reinterpret_cast<const float2 *>(a.X) + r0 * (D / 2) + t;
	int		   *lb = a.labels + r0;
	int			unc = 0,
				moved = 0;

	if (tid < K * D)
		sc[tid] = a.C2[tid];
	if (tid < K)
		scn[tid] = a.cn[tid];
	__syncthreads();

	uint32_t	bh[2][2];
	float		ci[2][2];

#pragma unroll
	for (int nt = 0; nt < 2; nt++)
	{
		bh[nt][0] = floor_tf32(sc[(nt * 8 + g) * D + 2 * t]);
		bh[nt][1] = floor_tf32(sc[(nt * 8 + g) * D + 2 * t + 1]);
		ci[nt][0] = scn[nt * 8 + 2 * t];
		ci[nt][1] = scn[nt * 8 + 2 * t + 1];
	}

	constexpr int step_rows = 16 * U * (NT / 32);
	float2		xr[U][2];
	int			old[U];

#define FLOOR_TCK_LOAD(B) \
	_Pragma("unroll") \
	for (int u = 0; u < U; u++) \
	{ \
		const int	i0 = (B) + 16 * (warp * U + u); \
		xr[u][0] = X2[min(i0 + g, nb - 1) * (D / 2)]; \
		xr[u][1] = X2[min(i0 + g + 8, nb - 1) * (D / 2)]; \
		old[u] = lb[min(i0 + g + 8 * (t & 1), nb - 1)]; \
	}

	FLOOR_TCK_LOAD(0);
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
		FLOOR_TCK_LOAD(base + step_rows);

#pragma unroll
		for (int u = 0; u < U; u++)
		{
			const uint32_t ah[4] = {floor_tf32(x[u][0].x), floor_tf32(x[u][1].x),
									floor_tf32(x[u][0].y), floor_tf32(x[u][1].y)};
			float		acc[2][4];

#pragma unroll
			for (int nt = 0; nt < 2; nt++)
			{
				acc[nt][0] = acc[nt][2] = ci[nt][0];
				acc[nt][1] = acc[nt][3] = ci[nt][1];
				floor_mma(acc[nt], ah, bh[nt][0], bh[nt][1]);
			}

			uint32_t	k1[2],
						k2[2];
			float		xx[2];

#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				float		s = fmaf(x[u][h].x, x[u][h].x, x[u][h].y * x[u][h].y);

				s += __shfl_xor_sync(0xffffffffu, s, 1);
				s += __shfl_xor_sync(0xffffffffu, s, 2);
				xx[h] = s;

				const uint32_t e0 = floor_key(acc[0][2 * h], s, 2 * t),
							e1 = floor_key(acc[0][2 * h + 1], s, 2 * t + 1),
							e2 = floor_key(acc[1][2 * h], s, 8 + 2 * t),
							e3 = floor_key(acc[1][2 * h + 1], s, 9 + 2 * t);
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
				k1[h] = p1;
				k2[h] = p2;
			}

			/* lane t < 2 decides row g + 8 t */
			if (t < 2)
			{
				const int	i = base + 16 * (warp * U + u) + g + 8 * t;
				const uint32_t q1 = t ? k1[1] : k1[0],
							q2 = t ? k2[1] : k2[0];
				const float xn = sqrtf(t ? xx[1] : xx[0]);
				const float r = xn + a.cmax;
				const float slack = km_screen_slack(D, D, xn, a.cmax) + 0x1p-18f * r * r;
				const int	un = !(__uint_as_float(q2 & ~15u) - __uint_as_float(q1 & ~15u) > slack);
				const int	lab = (int) (q1 & 15u) + (a.mark && un ? 1000 : 0);

				if (i < nb)
				{
					unc += un;
					if (o[u] != lab)
					{
						lb[i] = lab;
						moved++;
					}
				}
			}
		}
	}
#undef FLOOR_TCK_LOAD
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
	int			certifies;
} floor_variant;

static const floor_variant variants[] = {
	{"read", floor_read, 0},
	{"fma", floor_fma<R, false>, 1},
	{"fma2p", floor_fma<2, true>, 1},
	{"fma3p", floor_fma<3, true>, 1},
	{"tf32", floor_tc<1, 2>, 1},
	{"tf32x3", floor_tc<3, 2>, 1},
	{"tf32x3u4", floor_tc<3, 4>, 1},
	{"tf32k", floor_tck<2>, 1},
	{"tf32ku4", floor_tck<4>, 1},
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

		for (int j = 0; j < K; j++)
		{
			double		s = 0.0;

			for (int c = 0; c < D; c++)
			{
				const double e = (double) X[i * D + c] - (double) C[j * D + c];

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
		   prop.name, prop.multiProcessorCount, (long long) n, D, K, NT);

	const int	grid = 2 * prop.multiProcessorCount;
	float	   *hX = (float *) malloc((size_t) n * D * sizeof(float));
	float		hC[K * D],
				hC2[K * D],
				hcn[K];
	int		   *ref = (int *) malloc((size_t) n * sizeof(int));
	int		   *got = (int *) malloc((size_t) n * sizeof(int));
	float	   *dX,
			   *dC2,
			   *dcn;
	int		   *dlab;
	unsigned long long *dcount;
	cudaStream_t st;

	CK(cudaMalloc(&dX, (size_t) n * D * sizeof(float)));
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
		float		centre[K * D];

		for (int j = 0; j < K * D; j++)
			centre[j] = (float) (urand() - 0.5);
		for (int64_t i = 0; i < n; i++)
		{
			const int	j = (int) (urand() * K);

			for (int c = 0; c < D; c++)
				hX[i * D + c] = data == 0 ? (float) (urand() - 0.5)
					: (float) (centre[j * D + c] + 0.06 * nrand());
		}
		float		cmax = 0.0f;

		for (int j = 0; j < K; j++)
		{
			double		s = 0.0;

			for (int c = 0; c < D; c++)
			{
				hC[j * D + c] = data == 0 ? hX[(int64_t) (urand() * n) * D + c]
					: (float) (centre[j * D + c] + 0.01 * nrand());
				hC2[j * D + c] = -2.0f * hC[j * D + c];
				s += (double) hC[j * D + c] * hC[j * D + c];
			}
			hcn[j] = (float) s;
			cmax = fmaxf(cmax, (float) sqrt(s) * (1.0f + 0x1p-20f));
		}
		exact_labels(hX, n, hC, ref);
		CK(cudaMemcpy(dX, hX, (size_t) n * D * sizeof(float), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dC2, hC2, sizeof(hC2), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dcn, hcn, sizeof(hcn), cudaMemcpyHostToDevice));

		floor_args	a = {dX, n, dC2, dcn, cmax, dlab, dcount, 0};
		const char *dname = data == 0 ? "uniform" : "blobs";

		/* one checked launch each: certified labels against the float64 argmin */
		for (int v = 1; v < NVAR; v++)
		{
			unsigned long long hc[2];
			int64_t		wrong = 0,
						unc = 0;

			a.mark = 1;
			CK(cudaMemset(dlab, 0xff, (size_t) n * sizeof(int)));
			CK(cudaMemset(dcount, 0, 2 * sizeof(unsigned long long)));
			variants[v].fn<<<grid, NT, (K * D + K) * sizeof(float), st>>>(a);
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
				variants[v].fn<<<grid, NT, (K * D + K) * sizeof(float), st>>>(a);
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
				   dname, variants[v].name, med[v], lo[v], hi[v], med[v] / med[1]);
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
