/*
 * tile.cuh
 *	  The distance tile every k-medoids kernel is built on: the distances of
 *	  64 rows (the A side) to 64 rows (the B side), each exactly kmd_pair()
 *	  of src/include/kmd_metric.h, into shared memory.  Private to
 *	  kernels/medoids/.
 *
 * A kernel sets sm.arow and sm.brow (row indices, -1 past the end), waits
 * for the block, calls kmg_kmd_tile<KIND>, then walks sm.u.dist one row per
 * thread in column order (the order every sum and argmin of the CPU engine
 * takes), and waits for the block again before the next tile.
 *
 * Dense metrics, in three stages:
 *	- stage: KMG_KMD_KC coordinates of the 64 + 64 rows into shared memory,
 *	  converted to double once (zeros past a row's end or the last row);
 *	- accumulate: each of the 256 threads owns 4 x 4 pairs (rows ty + 16 r,
 *	  columns tx + 16 c), so a warp reads 2 distinct A values (a broadcast)
 *	  and 16 consecutive B values (one wavefront) per coordinate, and does
 *	  16 multiply-adds;
 *	- finish: the pair's value from the chain and the rows' aux values.
 * Each pair's chain runs over the coordinates in index order, as kmd_pair's
 * does: for the dot products of l2, sqeuclidean and cosine one __fma_rn per
 * coordinate (the product of two floats is exact in double, so the fused
 * multiply-add rounds once, where the CPU's multiply then add also rounds
 * once: the same bits; the CPU engine's AVX2 kernel fuses too), for l1
 * __dadd_rn of the |difference|.  The zeros past the end add +0 to a sum
 * that is never -0 (it starts at +0, and exact cancellation gives +0), which
 * leaves it as it is.  No step is left for the compiler to contract: every
 * operation that matters is an intrinsic with its rounding spelled out.
 *
 * sqfd: signatures have their own lengths and an exp per pair of features;
 * each thread computes its 16 pairs with kmd_pair() itself (compiled for
 * the device, with the km_exact.h intrinsics), reading the features from
 * global memory (L1 and L2 keep the 128 signatures of a tile).
 *
 * Shared memory: the staged chunks and the distances share one union (the
 * chunks are dead once the distances are written), 34 KB in all, so that
 * several blocks fit an SM.
 */
#ifndef KMG_MEDOIDS_TILE_CUH
#define KMG_MEDOIDS_TILE_CUH

#include <math.h>

#include "kmd_metric.h"
#include "kmg_device.cuh"
#include "medoids/medoids.cuh"

/* Coordinates per stage, and the padded row of shared arrays (no bank conflicts). */
#define KMG_KMD_KC	16
#define KMG_KMD_TP	(KMG_KMD_T + 1)

/* What a tile computes: a dot product chain, an l1 chain, or whole pairs (sqfd). */
enum
{
	KMG_KMD_DOT = 0,
	KMG_KMD_L1 = 1,
	KMG_KMD_PAIR = 2
};

/* The kind of tile of a metric. */
static inline int
kmg_kmd_kind(int metric)
{
	if (metric == KMD_SQFD)
		return KMG_KMD_PAIR;
	return metric == KMD_L1 ? KMG_KMD_L1 : KMG_KMD_DOT;
}

typedef struct kmg_kmd_smem
{
	union
	{
		struct
		{
			double		x[KMG_KMD_KC][KMG_KMD_TP];	/* A side, coordinate-major */
			double		y[KMG_KMD_KC][KMG_KMD_TP];	/* B side */
		}			st;
		double		dist[KMG_KMD_T][KMG_KMD_TP];	/* dist[i][j]: A row i to B row j */
	}			u;
	int32_t		arow[KMG_KMD_T];
	int32_t		brow[KMG_KMD_T];
	int32_t		blab[KMG_KMD_T];	/* the silhouette: the B rows' labels */
} kmg_kmd_smem;

/* Stage: coordinates [k0, k0 + KMG_KMD_KC) of both sides, as doubles. */
__device__ __forceinline__ void
kmg_kmd_stage(const kmg_kmd_rows &R, kmg_kmd_smem &sm, int k0)
{
	const int	side_cells = KMG_KMD_T * KMG_KMD_KC;

	/* 16 threads read 64 consecutive bytes of a row */
#pragma unroll
	for (int it = 0; it < 2 * side_cells / KMG_KMD_NT; it++)
	{
		const int	e = threadIdx.x + it * KMG_KMD_NT;
		const int	side = e >= side_cells;
		const int	rem = side ? e - side_cells : e;
		const int	r = rem / KMG_KMD_KC;
		const int	q = rem % KMG_KMD_KC;
		const int32_t row = side ? sm.brow[r] : sm.arow[r];
		const int	col = k0 + q;
		double		v = 0.0;

		if (row >= 0 && col < R.d)
			v = (double) __ldg(R.X + (int64_t) row * R.d + col);
		if (side)
			sm.u.st.y[q][r] = v;
		else
			sm.u.st.x[q][r] = v;
	}
}

/* Accumulate: one chunk of coordinates into the thread's 4 x 4 chains. */
template <int KIND>
__device__ __forceinline__ void
kmg_kmd_accumulate(const kmg_kmd_smem &sm, double acc[4][4], int ty, int tx)
{
#pragma unroll
	for (int q = 0; q < KMG_KMD_KC; q++)
	{
		double		a[4],
					b[4];

#pragma unroll
		for (int r = 0; r < 4; r++)
			a[r] = sm.u.st.x[q][ty + 16 * r];
#pragma unroll
		for (int c = 0; c < 4; c++)
			b[c] = sm.u.st.y[q][tx + 16 * c];
#pragma unroll
		for (int r = 0; r < 4; r++)
#pragma unroll
			for (int c = 0; c < 4; c++)
			{
				if (KIND == KMG_KMD_DOT)
					acc[r][c] = __fma_rn(a[r], b[c], acc[r][c]);
				else
					acc[r][c] = __dadd_rn(acc[r][c], fabs(__dadd_rn(a[r], -b[c])));
			}
	}
}

/* A dense pair's distance from its chain, as kmd_pair() ends it. */
__device__ __forceinline__ double
kmg_kmd_from_chain(int metric, double s, double ax, double ay)
{
	switch (metric)
	{
		case KMD_L2:
			return km_dsqrt(kmd_sqdist_from_dot(s, ax, ay));
		case KMD_SQEUCLIDEAN:
			return kmd_sqdist_from_dot(s, ax, ay);
		case KMD_COSINE:
			return kmd_cosine_from_dot(s, ax, ay);
		default:
			return s;			/* l1 */
	}
}

/* Finish: the thread's 16 distances into sm.u.dist (the chunks are dead). */
__device__ __forceinline__ void
kmg_kmd_finish(const kmg_kmd_rows &R, kmg_kmd_smem &sm, double acc[4][4], int ty, int tx)
{
#pragma unroll
	for (int r = 0; r < 4; r++)
	{
		const int	i = ty + 16 * r;
		const int32_t ra = sm.arow[i];
		const double ax = ra >= 0 ? R.aux[ra] : 0.0;

#pragma unroll
		for (int c = 0; c < 4; c++)
		{
			const int	j = tx + 16 * c;
			const int32_t rb = sm.brow[j];
			const double ay = rb >= 0 ? R.aux[rb] : 0.0;

			sm.u.dist[i][j] = ra >= 0 && rb >= 0 ?
				kmg_kmd_from_chain(R.metric, acc[r][c], ax, ay) : 0.0;
		}
	}
}

/* sqfd: the thread's 16 pairs, each kmd_pair() itself. */
__device__ __forceinline__ void
kmg_kmd_pairs(const kmg_kmd_rows &R, kmg_kmd_smem &sm, int ty, int tx)
{
	for (int r = 0; r < 4; r++)
	{
		const int	i = ty + 16 * r;
		const int32_t ra = sm.arow[i];

		for (int c = 0; c < 4; c++)
		{
			const int	j = tx + 16 * c;
			const int32_t rb = sm.brow[j];
			double		v = 0.0;

			if (ra >= 0 && rb >= 0)
				v = kmd_pair(KMD_SQFD, R.X + R.off[ra], R.m[ra], R.aux[ra],
							 R.X + R.off[rb], R.m[rb], R.aux[rb], R.d, R.alpha);
			sm.u.dist[i][j] = v;
		}
	}
}

/*
 * The tile: sm.u.dist[i][j] = kmd_pair(A row i, B row j) for every i and j
 * with a row (0 elsewhere).  sm.arow and sm.brow must be set, and the block
 * past a barrier since; returns past a barrier, the distances readable.
 */
template <int KIND>
__device__ __forceinline__ void
kmg_kmd_tile(const kmg_kmd_rows &R, kmg_kmd_smem &sm)
{
	const int	ty = threadIdx.x / 16;
	const int	tx = threadIdx.x % 16;

	if constexpr (KIND == KMG_KMD_PAIR)
		kmg_kmd_pairs(R, sm, ty, tx);
	else
	{
		double		acc[4][4];

#pragma unroll
		for (int r = 0; r < 4; r++)
#pragma unroll
			for (int c = 0; c < 4; c++)
				acc[r][c] = 0.0;
		for (int k0 = 0; k0 < R.d; k0 += KMG_KMD_KC)
		{
			kmg_kmd_stage(R, sm, k0);
			__syncthreads();
			kmg_kmd_accumulate<KIND>(sm, acc, ty, tx);
			__syncthreads();
		}
		kmg_kmd_finish(R, sm, acc, ty, tx);
	}
	__syncthreads();
}

#endif							/* KMG_MEDOIDS_TILE_CUH */
