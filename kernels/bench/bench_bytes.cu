/*
 * bench_bytes.cu
 *	  A measurement for the engine's next step, not engine code: what a
 *	  Lloyd iteration on Fashion-MNIST (70000 x 784, k = 10) costs when its
 *	  rows are kept as the bytes they are (every value an integer in 0..255), the dots run on the
 *	  integer tensor cores against the centroids cut into two byte pieces
 *	  (c ~ (256 hi + lo) / 256), a row's label is taken only where the best
 *	  two are further apart than the pieces' error can reach, the other rows
 *	  are settled in float64, and the sums are the rows' bytes added on the
 *	  integer tensor cores (the clusters' 0/1 indicator times the rows):
 *	  exact int32, so any order and any split give the same bits.
 *
 *	  bin/bench_bytes [iterations]   (from the project root, like bench_engine:
 *	  kernels/bench/bin/{train,t10k}-images-idx3-ubyte.gz, read with gzip -dc)
 *
 * An iteration is three launches: bytes_pass (a block an SM, tiles of 128
 * rows double-buffered by cp.async; a warp's 16 rows against 16 centroid
 * slots and two pieces on m16n8k32 u8 mma, fragments by ldmatrix; slot 15
 * holds ones, so its dot is the row's L1 norm, which bounds the pieces'
 * error; then every warp's column chunks of the tile's indicator-times-rows
 * sums; at the end the block's int32 sums go out as coalesced integer
 * atomics), bytes_settle (the listed rows) and bytes_finalize (k blocks).
 *
 * Checks the first four iterations against a float64 reference on the host
 * (labels = argmin of sum (x - c)^2 in index order, ties to the lowest id;
 * sums exact; centroids (float) (sum / count)), then times iterations as
 * bench_engine bench does for this shape (start: rows 977 j; iterations 4
 * on), also in CUDA graphs of four (as the engine runs small-k fits), and
 * the pass, the settle and the finalize alone.  What it leaves out of an
 * engine pass: weights, cosine, rows that are not all bytes, k > 15, the
 * engine's control block (stop rules, empty clusters re-seeded), and the
 * inertia estimate (none is computed).
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kmg_common.cuh"
#include "kmg_device.cuh"		/* kmg_exact_step_xd: km_exact_cost's chain, step by step */
#include "ref_kmeans.h"			/* ref_assign: the labels every harness checks against */

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

#define D 784					/* columns (bytes a row) */
#define KS 25					/* k-steps of 32 columns (the last one half) */
#define NT 256
#define TR 128					/* rows a tile: 8 warps x 16 */
#define KMAX 15					/* centroid slot 15 is all ones: the row's L1 norm */
#define NCH 25					/* sums: column chunks of 32 (the last one half) */

typedef struct
{
	const uint8_t *X;			/* n x D */
	const uint8_t *CP;			/* 2 pieces x 16 centroids x D (+ 32 bytes): hi, lo */
	const double *cn;			/* 16: |c|^2 (INF past k) */
	const float *cerr;			/* 16: max |c - (256 hi + lo) / 256| */
	const double *xx;			/* n: |x|^2 */
	int		   *labels;
	int		   *sum;			/* 16 x D: the sums (integer atomics: order-free) */
	int		   *cnt;			/* 16 */
	int		   *pmoved;			/* blocks */
	int		   *list;			/* rows to settle */
	int		   *nlist;
	int64_t		n;
	int			k;
} pargs;

static __device__ __forceinline__ void
mma_u8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
				 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void
ldsm4(uint32_t (&r)[4], const void *p)
{
	const unsigned s = (unsigned) __cvta_generic_to_shared(p);

	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
				 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

static __device__ __forceinline__ uint32_t
prmt(uint32_t a, uint32_t b, uint32_t s)
{
	uint32_t	r;

	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
	return r;
}

static __device__ __forceinline__ void
cp16(void *smem, const void *g)
{
	const unsigned s = (unsigned) __cvta_generic_to_shared(smem);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g));
}

/*
 * (c1, ci, c2) merged into (b1, i1, b2): best and second by value, the
 * best's id on ties the lowest (km_top2_merge's rule, in double); one
 * (value, id) pair is (v, j, INFINITY).
 */
static __device__ __forceinline__ void
top2_merge(double &b1, int &i1, double &b2, double c1, int ci, double c2)
{
	if (c1 < b1 || (c1 == b1 && ci < i1))
	{
		b2 = fmin(b1, c2);
		b1 = c1;
		i1 = ci;
	}
	else
		b2 = fmin(b2, c1);
}

/* tile i's rows into shared memory (rows past n: not loaded, their labels -1) */
static __device__ __forceinline__ void
tile_load(const pargs &a, uint8_t *buf, int64_t tile)
{
	const int64_t r0 = tile * TR;
	const int	rows = (int) (a.n - r0 < TR ? a.n - r0 : TR);
	const int	nchunk = rows * D / 16;
	const uint8_t *src = a.X + r0 * D;

	for (int c = threadIdx.x; c < nchunk; c += NT)
		cp16(buf + 16 * c, src + 16 * c);
	asm volatile("cp.async.commit_group;\n");
}

__global__ void __launch_bounds__(NT, 1)
bytes_pass(pargs a)
{
	extern __shared__ __align__(16) uint8_t sm[];
	uint8_t    *buf[2] = {sm, sm + TR * D + 32};
	uint8_t    *cp = sm + 2 * (TR * D + 32);	/* 2 x 16 x D + 32 */
	int		   *slab = (int *) (cp + 2 * 16 * D + 32);	/* TR */
	int		   *scnt = slab + TR;	/* 16 */
	double	   *scn = (double *) (scnt + 16);	/* 16 */
	__shared__ float s_emax;
	const int	tid = threadIdx.x,
				lane = tid & 31,
				warp = tid >> 5,
				g = lane >> 2,
				t = lane & 3;
	const int	k = a.k;
	const int64_t ntiles = (a.n + TR - 1) / TR;

	for (int i = tid; i < (2 * 16 * D + 32) / 16; i += NT)
		reinterpret_cast<uint4 *>(cp)[i] = reinterpret_cast<const uint4 *>(a.CP)[i];
	if (tid < 16)
	{
		scnt[tid] = 0;
		scn[tid] = a.cn[tid];
	}
	if (tid == 0)
	{
		float		e = 0.0f;

		for (int j = 0; j < k; j++)
			e = fmaxf(e, a.cerr[j]);
		s_emax = e;
	}

	int			acc2[4][4][4] = {};	/* sums: chunk slot, n-tile, fragment */
	int			moved = 0;

	if (blockIdx.x < ntiles)
		tile_load(a, buf[0], blockIdx.x);
	for (int64_t tile = blockIdx.x, it = 0; tile < ntiles; tile += gridDim.x, it++)
	{
		uint8_t    *cur = buf[it & 1];
		const int64_t r0 = tile * TR;
		const int	rows = (int) (a.n - r0 < TR ? a.n - r0 : TR);

		__syncthreads();		/* the other buffer's tile is done with */
		if (tile + gridDim.x < ntiles)
		{
			tile_load(a, buf[(it + 1) & 1], tile + gridDim.x);
			asm volatile("cp.async.wait_group 1;\n");
		}
		else
			asm volatile("cp.async.wait_group 0;\n");
		__syncthreads();		/* this tile is in place for every thread */

		/* the dots: warp w, rows 16 w .. 16 w + 15; 2 n-tiles of centroids x 2 pieces */
		{
			int			acc[2][2][4] = {};	/* n-tile, piece, fragment */
			/* ldmatrix: lane i gives row i % 8 of matrix i / 8 */
			const int	q = lane >> 3,
						rr = lane & 7;
			const uint8_t *xa = cur + (size_t) (16 * warp + rr + 8 * (q & 1)) * D + 16 * (q >> 1);
			const uint8_t *cb0 = cp + (size_t) (8 * (q >> 1) + rr) * D + 16 * (q & 1);
			const uint8_t *cb1 = cb0 + (size_t) 16 * D;
			/* the epilogue's reads, in flight during the k-steps */
			double		pxx[2] = {0.0, 0.0};
			int			pold[2] = {-1, -1};

			if (t == 0)
#pragma unroll
				for (int h = 0; h < 2; h++)
				{
					const int	rl = 16 * warp + g + 8 * h;

					if (rl < rows)
					{
						pxx[h] = a.xx[r0 + rl];
						pold[h] = a.labels[r0 + rl];
					}
				}

#pragma unroll 5
			for (int ks = 0; ks < KS; ks++)
			{
				uint32_t	af[4],
							b0[4],
							b1[4];

				ldsm4(af, xa + 32 * ks);
				ldsm4(b0, cb0 + 32 * ks);
				ldsm4(b1, cb1 + 32 * ks);
				if (ks == KS - 1)
					af[2] = af[3] = 0u;		/* columns 784..799: none */
				mma_u8(acc[0][0], af, b0[0], b0[1]);
				mma_u8(acc[1][0], af, b0[2], b0[3]);
				mma_u8(acc[0][1], af, b1[0], b1[1]);
				mma_u8(acc[1][1], af, b1[2], b1[3]);
			}

			/* the epilogue: rows g (h 0) and g + 8 (h 1), centroids 8 n + 2 t + e */
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				double		b1 = INFINITY,
							b2 = INFINITY;
				int			i1 = 1 << 30;
				/* slot 15 (n 1, t 3, e 1): the hi piece is all ones, so its dot is |x|_1 */
				const int	l1 = __shfl_sync(0xffffffffu, acc[1][0][2 * h + 1], (lane & ~3) | 3);

#pragma unroll
				for (int n = 0; n < 2; n++)
#pragma unroll
					for (int e = 0; e < 2; e++)
					{
						const int	j = 8 * n + 2 * t + e;
						const double dot = 256.0 * (double) acc[n][0][2 * h + e] + (double) acc[n][1][2 * h + e];

						if (j < k)
							top2_merge(b1, i1, b2, scn[j] - dot * (1.0 / 128.0), j, INFINITY);
					}
#pragma unroll
				for (int o = 1; o <= 2; o <<= 1)
				{
					const double ob1 = __shfl_xor_sync(0xffffffffu, b1, o),
								ob2 = __shfl_xor_sync(0xffffffffu, b2, o);
					const int	oi1 = __shfl_xor_sync(0xffffffffu, i1, o);

					top2_merge(b1, i1, b2, ob1, oi1, ob2);
				}

				const int	rl = 16 * warp + g + 8 * h;
				const int64_t row = r0 + rl;

				if (t == 0)
				{
					int			lab = -1;

					if (rl < rows)
					{
						/*
						 * |x.c - x.c^| <= |x|_1 emax for each centroid, so the pair's
						 * values are off by at most 4 |x|_1 emax together; the float64
						 * evaluations (here and the reference's) add a relative 1e-12
						 */
						const double xx = pxx[h];
						const double slack = 4.0 * (double) l1 * (double) s_emax * (1.0 + 1e-6) +
							1e-12 * (fabs(b1) + fabs(b2) + 2.0 * xx) + 1e-9;

						if (b2 - b1 > slack)
						{
							lab = i1;
							if (pold[h] != lab)
							{
								moved++;
								a.labels[row] = lab;
							}
							atomicAdd(&scnt[lab], 1);
						}
						else
							a.list[atomicAdd(a.nlist, 1)] = (int) row;
					}
					slab[rl] = lab;
				}
			}
		}
		__syncthreads();		/* the tile's labels are in place */

		/*
		 * The sums: clusters (M 16) x rows (K 32) indicator times rows x columns
		 * (N 8): warp w takes the column chunks w, w + 8, w + 16, w + 24 (32
		 * columns each: lane g's four columns 4 g .. 4 g + 3 are n-tiles 0..3);
		 * lane t's K elements 4 t + r are the rows 2 t + 8 r, its K elements
		 * 16 + 4 t + r the rows 2 t + 8 r + 1 (no bank conflicts).
		 */
#pragma unroll
		for (int kk = 0; kk < TR / 32; kk++)
		{
			uint32_t	af[4];
			int			lb0[4],
						lb1[4];

#pragma unroll
			for (int r = 0; r < 4; r++)
			{
				lb0[r] = slab[32 * kk + 2 * t + 8 * r];
				lb1[r] = slab[32 * kk + 2 * t + 8 * r + 1];
			}
			af[0] = af[1] = af[2] = af[3] = 0u;
#pragma unroll
			for (int r = 0; r < 4; r++)
			{
				af[0] |= (uint32_t) (lb0[r] == g) << (8 * r);
				af[1] |= (uint32_t) (lb0[r] == g + 8) << (8 * r);
				af[2] |= (uint32_t) (lb1[r] == g) << (8 * r);
				af[3] |= (uint32_t) (lb1[r] == g + 8) << (8 * r);
			}
#pragma unroll
			for (int s = 0; s < 4; s++)
			{
				const int	ch = warp + 8 * s;

				if (ch >= NCH)
					continue;

				const uint8_t *xb = cur + (size_t) (32 * kk + 2 * t) * D + 32 * ch + 4 * g;
				uint32_t	w0[4],
							w1[4];

#pragma unroll
				for (int r = 0; r < 4; r++)
				{
					w0[r] = *(const uint32_t *) (xb + (size_t) (8 * r) * D);
					w1[r] = *(const uint32_t *) (xb + (size_t) (8 * r + 1) * D);
				}

				/* 4 x 4 byte transposes: column 4 g + j of the four rows */
				const uint32_t lo01 = prmt(w0[0], w0[1], 0x5140),
							lo23 = prmt(w0[2], w0[3], 0x5140),
							hi01 = prmt(w0[0], w0[1], 0x7362),
							hi23 = prmt(w0[2], w0[3], 0x7362);
				const uint32_t mlo01 = prmt(w1[0], w1[1], 0x5140),
							mlo23 = prmt(w1[2], w1[3], 0x5140),
							mhi01 = prmt(w1[0], w1[1], 0x7362),
							mhi23 = prmt(w1[2], w1[3], 0x7362);

				mma_u8(acc2[s][0], af, prmt(lo01, lo23, 0x5410), prmt(mlo01, mlo23, 0x5410));
				mma_u8(acc2[s][1], af, prmt(lo01, lo23, 0x7632), prmt(mlo01, mlo23, 0x7632));
				mma_u8(acc2[s][2], af, prmt(hi01, hi23, 0x5410), prmt(mhi01, mhi23, 0x5410));
				mma_u8(acc2[s][3], af, prmt(hi01, hi23, 0x7632), prmt(mhi01, mhi23, 0x7632));
			}
		}
	}

	/*
	 * Into the sums: the warps' accumulators to shared memory (the first tile
	 * buffer: every copy has landed and been used), C[m][nn] of chunk ch,
	 * n-tile j being cluster m, column 32 ch + 4 nn + j; then one coalesced
	 * integer atomic per nonzero cell.
	 */
	asm volatile("cp.async.wait_group 0;\n");
	__syncthreads();
	{
		int		   *ssum = (int *) buf[0];	/* 16 x D */

#pragma unroll
		for (int s = 0; s < 4; s++)
		{
			const int	ch = warp + 8 * s;

			if (ch >= NCH)
				continue;
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int e = 0; e < 4; e++)
				{
					const int	m = g + 8 * (e >> 1);
					const int	col = 32 * ch + 4 * (2 * t + (e & 1)) + j;

					if (col < D)
						ssum[m * D + col] = acc2[s][j][e];
				}
		}
		__syncthreads();
		for (int c = tid; c < k * D; c += NT)
		{
			const int	v = ssum[c];

			if (v != 0)
				atomicAdd(a.sum + c, v);
		}
	}
	/* the block's moved rows, for the iteration's record */
	__shared__ int s_mov[8];

	for (int o = 16; o > 0; o >>= 1)
		moved += __shfl_xor_sync(0xffffffffu, moved, o);
	if (lane == 0)
		s_mov[warp] = moved;
	__syncthreads();
	if (tid == 0)
	{
		int			m = 0;

		for (int w = 0; w < 8; w++)
			m += s_mov[w];
		a.pmoved[blockIdx.x] = m;
	}
	if (tid < 16)
		if (tid < k && scnt[tid] != 0)
			atomicAdd(a.cnt + tid, scnt[tid]);
}

/*
 * The listed rows, a warp each, lane j the centroid j: km_exact_cost's
 * chain (kmg_exact_step_xd, index order, one rounding a step), the least
 * with ties to the lowest id, as every engine settles a close call; their bytes into the sums with integer
 * atomics (order-free).  The centroids (stride DS: no bank conflicts between
 * the lanes) and the warp's row are in shared memory, so a chain waits only
 * on its own adds.
 */
#define DS (D + 4)			/* 16-byte rows; lanes j and j + 8 share banks */
#define SETTLE_W 4

__global__ void __launch_bounds__(32 * SETTLE_W)
bytes_settle(const uint8_t *X, const float *C, int k, int *labels, const int *list, const int *nlist,
			 int *xsum, int *xcnt, int *xmoved)
{
	extern __shared__ __align__(16) float ssc[];	/* k x DS, then SETTLE_W x D bytes */
	uint8_t    *sx = (uint8_t *) (ssc + k * DS) + (threadIdx.x >> 5) * D;	/* 16-byte aligned: D % 16 == 0 */
	const int	lane = threadIdx.x & 31;
	const int	nl = *nlist;

	if (blockIdx.x * SETTLE_W >= nl)
		return;
	for (int j = 0; j < k; j++)
	{
		const float4 *c4 = (const float4 *) (C + (size_t) j * D);
		float	   *dst = ssc + j * DS;

		for (int q = threadIdx.x; q < D / 4; q += blockDim.x)
		{
			const float4 v = c4[q];

			dst[4 * q] = v.x;
			dst[4 * q + 1] = v.y;
			dst[4 * q + 2] = v.z;
			dst[4 * q + 3] = v.w;
		}
	}
	__syncthreads();
	for (int i = blockIdx.x * SETTLE_W + (threadIdx.x >> 5); i < nl; i += gridDim.x * SETTLE_W)
	{
		const int	row = list[i];
		const uint32_t *x4 = (const uint32_t *) (X + (size_t) row * D);

		for (int w = lane; w < D / 4; w += 32)
			((uint32_t *) sx)[w] = x4[w];
		__syncwarp();

		double		s = INFINITY;
		int			bj = lane;

		if (lane < k)
		{
			const float *c = ssc + lane * DS;

			/* sixteen columns' operands loaded ahead of the chain's dependent steps */
			s = 0.0;
			for (int q0 = 0; q0 < D; q0 += 16)
			{
				const uint4 xb = *(const uint4 *) (sx + q0);
				const float4 c4[4] = {*(const float4 *) (c + q0), *(const float4 *) (c + q0 + 4),
				*(const float4 *) (c + q0 + 8), *(const float4 *) (c + q0 + 12)};
				const uint32_t xw[4] = {xb.x, xb.y, xb.z, xb.w};

#pragma unroll
				for (int i = 0; i < 16; i++)
				{
					const float cv = i % 4 == 0 ? c4[i / 4].x : i % 4 == 1 ? c4[i / 4].y
						: i % 4 == 2 ? c4[i / 4].z : c4[i / 4].w;

					kmg_exact_step_xd(s, (double) ((xw[i / 4] >> (8 * (i % 4))) & 255u), cv, 0);
				}
			}
		}
		for (int o = 16; o > 0; o >>= 1)
		{
			const double os = __shfl_xor_sync(0xffffffffu, s, o);
			const int	oj = __shfl_xor_sync(0xffffffffu, bj, o);

			if (os < s || (os == s && oj < bj))
			{
				s = os;
				bj = oj;
			}
		}
		if (lane == 0)
		{
			if (labels[row] != bj)
				atomicAdd(xmoved, 1);
			labels[row] = bj;
			atomicAdd(&xcnt[bj], 1);
		}
		for (int q = lane; q < D; q += 32)
			atomicAdd(&xsum[bj * D + q], (int) sx[q]);
		__syncwarp();
	}
}

/*
 * The new centroids, a block a cluster (nlist and xmoved read for the
 * iteration's record, then cleared by block 0): the blocks' partials and the settled
 * rows' sums (integers, any order), mean = (float) (sum / count) (an empty
 * cluster keeps its centroid), |c|^2, the byte pieces and their error.
 */
__global__ void
bytes_finalize(int nblocks, int k, int *xsum, int *xcnt, float *C,
			   uint8_t *CP, double *cn, float *cerr, int *nlist, int *xmoved, const int *pmoved,
			   int *stat, int iter)
{
	const int	j = blockIdx.x;
	__shared__ long long s_cnt;
	__shared__ double s_red[256];
	__shared__ float s_err[256];

	if (threadIdx.x == 0)
	{
		s_cnt = xcnt[j];
	}
	__syncthreads();

	double		nrm = 0.0;
	float		err = 0.0f;

	for (int col = threadIdx.x; col < D; col += blockDim.x)
	{
		const long long s = xsum[j * D + col];

		if (s_cnt > 0)
			C[j * D + col] = (float) km_ddiv((double) s, (double) s_cnt);

		const float c = C[j * D + col];
		const int	q = (int) rintf(c * 256.0f);

		CP[j * D + col] = (uint8_t) (q >> 8);
		CP[16 * D + j * D + col] = (uint8_t) (q & 255);
		err = fmaxf(err, fabsf(c - (float) q * (1.0f / 256.0f)));
		nrm += (double) c * (double) c;
		xsum[j * D + col] = 0;
	}
	s_red[threadIdx.x] = nrm;
	s_err[threadIdx.x] = err;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		s = 0.0;
		float		e = 0.0f;

		for (int i = 0; i < (int) blockDim.x; i++)
		{
			s += s_red[i];
			e = fmaxf(e, s_err[i]);
		}
		cn[j] = s;
		cerr[j] = e;
		xcnt[j] = 0;
		if (j == 0)
		{
			int			m = *xmoved;

			for (int b = 0; b < nblocks; b++)
				m += pmoved[b];
			stat[2 * iter] = *nlist;
			stat[2 * iter + 1] = m;
			*nlist = 0;
			*xmoved = 0;
		}
	}
}

/* ---- host ---- */

static std::vector<uint8_t>
read_idx(const char *path, int64_t *n)
{
	char		cmd[300];
	unsigned char h[16];
	FILE	   *f;

	snprintf(cmd, sizeof(cmd), "gzip -dc %s 2>/dev/null", path);
	f = popen(cmd, "r");
	if (f == NULL || fread(h, 1, 16, f) != 16)
	{
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	*n = ((int64_t) h[4] << 24) | (h[5] << 16) | (h[6] << 8) | h[7];

	std::vector<uint8_t> v((size_t) *n * D);

	if (fread(v.data(), 1, v.size(), f) != v.size())
	{
		fprintf(stderr, "short read of %s\n", path);
		exit(1);
	}
	pclose(f);
	return v;
}

/*
 * The reference: labels by ref_assign (the float64 argmin every harness
 * checks against), then sums and counts in int64, then the centroids.
 */
static void
ref_iteration(const std::vector<float> &Xf, const std::vector<uint8_t> &X, int64_t n, int k,
			  std::vector<float> &C, std::vector<int> &lab)
{
	std::vector<long long> sum((size_t) k * D, 0),
				cnt(k, 0);

	lab.assign(n, 0);
	ref_assign(Xf.data(), n, D, C.data(), k, 0, lab.data(), NULL);
	for (int64_t r = 0; r < n; r++)
	{
		cnt[lab[r]]++;
		for (int c = 0; c < D; c++)
			sum[(size_t) lab[r] * D + c] += X[r * D + c];
	}
	for (int j = 0; j < k; j++)
		if (cnt[j] > 0)
			for (int c = 0; c < D; c++)
				C[j * D + c] = (float) km_ddiv((double) sum[(size_t) j * D + c], (double) cnt[j]);
}

int
main(int argc, char **argv)
{
	int64_t		n1,
				n2;
	std::vector<uint8_t> X = read_idx("kernels/bench/bin/train-images-idx3-ubyte.gz", &n1);
	std::vector<uint8_t> X2 = read_idx("kernels/bench/bin/t10k-images-idx3-ubyte.gz", &n2);
	const int	iters = argc > 1 ? atoi(argv[1]) : 20;

	if (iters < 4 || iters % 4 != 0)
	{
		fprintf(stderr, "usage: bench_bytes [iterations, a multiple of 4]\n");
		return 2;
	}
	const int	k = 10;
	const int	nchecks = 4;

	X.insert(X.end(), X2.begin(), X2.end());

	const int64_t n = n1 + n2;
	int			nsm;

	CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));

	const int	nblocks = nsm;
	std::vector<float> C0((size_t) 16 * D, 0.0f);

	for (int j = 0; j < k; j++)
		for (int c = 0; c < D; c++)
			C0[(size_t) j * D + c] = X[(size_t) (((int64_t) j * 977) % n) * D + c];

	/* device buffers */
	uint8_t    *dX,
			   *dCP;
	float	   *dC,
			   *dcerr;
	double	   *dcn,
			   *dxx;
	int		   *dlab,
			   *dpmoved,
			   *dlist,
			   *dnlist,
			   *dxsum,
			   *dxcnt,
			   *dxmoved,
			   *dstat;

	CK(cudaMalloc(&dX, X.size() + 64));
	CK(cudaMalloc(&dCP, 2 * 16 * D + 32));
	CK(cudaMalloc(&dC, 16 * D * sizeof(float)));
	CK(cudaMalloc(&dcerr, 16 * sizeof(float)));
	CK(cudaMalloc(&dcn, 16 * sizeof(double)));
	CK(cudaMalloc(&dxx, n * sizeof(double)));
	CK(cudaMalloc(&dlab, n * sizeof(int)));
	CK(cudaMalloc(&dpmoved, nblocks * sizeof(int)));
	CK(cudaMalloc(&dlist, n * sizeof(int)));
	CK(cudaMalloc(&dnlist, sizeof(int)));
	CK(cudaMalloc(&dxsum, 16 * D * sizeof(int)));
	CK(cudaMalloc(&dxcnt, 16 * sizeof(int)));
	CK(cudaMalloc(&dxmoved, sizeof(int)));
	CK(cudaMalloc(&dstat, 2 * 4096 * sizeof(int)));
	CK(cudaMemcpy(dX, X.data(), X.size(), cudaMemcpyHostToDevice));

	std::vector<double> xx(n);

	for (int64_t r = 0; r < n; r++)
	{
		double		s = 0.0;

		for (int c = 0; c < D; c++)
			s += (double) X[r * D + c] * X[r * D + c];
		xx[r] = s;
	}
	CK(cudaMemcpy(dxx, xx.data(), n * sizeof(double), cudaMemcpyHostToDevice));

	const size_t smem = 2 * (TR * D + 32) + 2 * 16 * D + 32 + TR * 4 + 16 * 4 + 16 * 8;

	CK(cudaFuncSetAttribute(bytes_pass, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem));
	const size_t ssmem = (size_t) k * DS * sizeof(float) + SETTLE_W * D;

	CK(cudaFuncSetAttribute(bytes_settle, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) ssmem));

	pargs		pa;

	pa.X = dX;
	pa.CP = dCP;
	pa.cn = dcn;
	pa.cerr = dcerr;
	pa.xx = dxx;
	pa.labels = dlab;
	pa.sum = dxsum;
	pa.cnt = dxcnt;
	pa.pmoved = dpmoved;
	pa.list = dlist;
	pa.nlist = dnlist;
	pa.n = n;
	pa.k = k;

	/* the start: the centroids, their pieces (slot 15: hi all ones, lo zero), |c|^2 */
	auto start = [&]() {
		std::vector<uint8_t> cp(2 * 16 * D + 32, 0);
		std::vector<double> cn(16, INFINITY);
		std::vector<float> ce(16, 0.0f);

		for (int j = 0; j < k; j++)
		{
			double		s = 0.0;

			for (int c = 0; c < D; c++)
			{
				const float v = C0[(size_t) j * D + c];
				const int	q = (int) rintf(v * 256.0f);

				cp[j * D + c] = (uint8_t) (q >> 8);
				cp[16 * D + j * D + c] = (uint8_t) (q & 255);
				ce[j] = fmaxf(ce[j], fabsf(v - q / 256.0f));
				s += (double) v * v;
			}
			cn[j] = s;
		}
		for (int c = 0; c < D; c++)
			cp[15 * D + c] = 1;
		CK(cudaMemcpy(dCP, cp.data(), cp.size(), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dcn, cn.data(), 16 * sizeof(double), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dcerr, ce.data(), 16 * sizeof(float), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dC, C0.data(), 16 * D * sizeof(float), cudaMemcpyHostToDevice));
		CK(cudaMemset(dlab, 0xff, n * sizeof(int)));
		CK(cudaMemset(dxsum, 0, 16 * D * sizeof(int)));
		CK(cudaMemset(dxcnt, 0, 16 * sizeof(int)));
		CK(cudaMemset(dnlist, 0, sizeof(int)));
		CK(cudaMemset(dxmoved, 0, sizeof(int)));
	};
	auto iteration = [&](int it) {
		bytes_pass<<<nblocks, NT, smem>>>(pa);
		bytes_settle<<<nsm, 32 * SETTLE_W, ssmem>>>(dX, dC, k, dlab, dlist, dnlist, dxsum, dxcnt, dxmoved);
		bytes_finalize<<<k, 256>>>(nblocks, k, dxsum, dxcnt, dC, dCP, dcn, dcerr, dnlist,
								   dxmoved, dpmoved, dstat, it);
	};

	int			fails = 0;

	/* checks: nchecks iterations against the reference */
	{
		std::vector<float> C = C0;
		std::vector<int> rlab,
					glab(n);
		const std::vector<float> Xf(X.begin(), X.end());	/* the same rows as float32, for ref_assign */
		std::vector<float> gC(16 * D);
		std::vector<int> st(2 * nchecks);

		start();
		for (int it = 0; it < nchecks; it++)
		{
			iteration(it);
			CK(cudaDeviceSynchronize());
			ref_iteration(Xf, X, n, k, C, rlab);
			CK(cudaMemcpy(glab.data(), dlab, n * sizeof(int), cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(gC.data(), dC, 16 * D * sizeof(float), cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(st.data(), dstat, 2 * nchecks * sizeof(int), cudaMemcpyDeviceToHost));

			int64_t		bad = 0,
						badc = 0;

			for (int64_t r = 0; r < n; r++)
				bad += glab[r] != rlab[r];
			for (int j = 0; j < k; j++)
				for (int c = 0; c < D; c++)
					badc += memcmp(&gC[j * D + c], &C[j * D + c], 4) != 0;
			printf("%s iteration %d: labels %lld differ, centroid values %lld differ; %d rows settled in float64, %d moved\n",
				   bad || badc ? "FAIL" : "ok", it + 1, (long long) bad, (long long) badc, st[2 * it],
				   st[2 * it + 1]);
			fails += bad != 0 || badc != 0;
		}
	}

	/* timing: as bench_engine bench for this shape, iterations 3 .. 3 + iters */
	{
		cudaEvent_t e0,
					e1;
		float		ms,
					best = 1e30f;

		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
		for (int rep = 0; rep < 5; rep++)
		{
			start();
			for (int it = 0; it < 3; it++)
				iteration(it);
			CK(cudaEventRecord(e0));
			for (int it = 3; it < 3 + iters; it++)
				iteration(it);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			best = std::min(best, ms);
		}

		std::vector<int> st(2 * (3 + iters));

		CK(cudaMemcpy(st.data(), dstat, st.size() * sizeof(int), cudaMemcpyDeviceToHost));
		printf("per iteration (best of 5, iterations 4..%d): %.1f us;", 3 + iters, best * 1e3 / iters);
		printf(" settled rows by iteration:");
		for (int it = 0; it < 3 + iters; it++)
			printf(" %d", st[2 * it]);
		printf("\n");

		/* the pass alone */
		start();
		for (int it = 0; it < 3; it++)
			iteration(it);
		CK(cudaEventRecord(e0));
		for (int it = 0; it < iters; it++)
			bytes_pass<<<nblocks, NT, smem>>>(pa);
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		printf("the pass alone: %.1f us (rows as bytes: %.1f MB, %.2f TB/s)\n", ms * 1e3 / iters,
			   n * D / 1e6, n * D / (ms * 1e-3 / iters) / 1e12);

		/* the settle alone, of the rows the passes above listed */
		{
			int			nl;

			CK(cudaMemcpy(&nl, dnlist, sizeof(int), cudaMemcpyDeviceToHost));
			CK(cudaEventRecord(e0));
			bytes_settle<<<nsm, 32 * SETTLE_W, ssmem>>>(dX, dC, k, dlab, dlist, dnlist, dxsum, dxcnt, dxmoved);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			printf("the settle alone, %d listed rows: %.1f us\n", nl, ms * 1e3);
			start();
		}

		/* the iteration's end alone: the finalize, and a settle with nothing listed (start() cleared the list) */
		CK(cudaEventRecord(e0));
		for (int it = 0; it < iters; it++)
		{
			bytes_settle<<<nsm, 32 * SETTLE_W, ssmem>>>(dX, dC, k, dlab, dlist, dnlist, dxsum, dxcnt, dxmoved);
			bytes_finalize<<<k, 256>>>(nblocks, k, dxsum, dxcnt, dC, dCP, dcn, dcerr, dnlist,
									   dxmoved, dpmoved, dstat, 3 + it);
		}
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		printf("the finalize alone (and a settle with no listed rows): %.1f us\n", ms * 1e3 / iters);

		/* whole iterations in CUDA graphs of 4 (as the engine runs small-k fits) */
		{
			cudaStream_t st;
			cudaGraph_t gr;
			cudaGraphExec_t ge;

			CK(cudaStreamCreate(&st));
			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
			for (int it = 0; it < 4; it++)
			{
				bytes_pass<<<nblocks, NT, smem, st>>>(pa);
				bytes_settle<<<nsm, 32 * SETTLE_W, ssmem, st>>>(dX, dC, k, dlab, dlist, dnlist, dxsum, dxcnt, dxmoved);
				bytes_finalize<<<k, 256, 0, st>>>(nblocks, k, dxsum, dxcnt, dC, dCP, dcn, dcerr, dnlist,
												  dxmoved, dpmoved, dstat, 3 + iters + it);	/* records past the timed run's */
			}
			CK(cudaStreamEndCapture(st, &gr));
			CK(cudaGraphInstantiate(&ge, gr, 0));
			best = 1e30f;
			for (int rep = 0; rep < 5; rep++)
			{
				start();
				for (int it = 0; it < 3; it++)
					iteration(it);
				CK(cudaDeviceSynchronize());
				CK(cudaEventRecord(e0, st));
				for (int it = 0; it < iters / 4; it++)
					CK(cudaGraphLaunch(ge, st));
				CK(cudaEventRecord(e1, st));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms, e0, e1));
				best = std::min(best, ms);
			}
			printf("per iteration in graphs of 4 (best of 5): %.1f us\n", best * 1e3 / (iters / 4 * 4));
		}
	}
	CK(cudaGetLastError());
	printf("%s\n", fails ? "FAIL" : "all checks ok");
	return fails != 0;
}
