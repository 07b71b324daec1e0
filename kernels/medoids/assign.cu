/*
 * assign.cu
 *	  The assignment step of k-medoids: every row's nearest medoid and its
 *	  distance, ties to the lowest cluster id.
 *
 * C reference: the CPU engine's assignment (kmd_nearest_into in
 * src/engine/kmedoids_cpu.c, and kmd_cpu_engine.assign), which keeps, for
 * each row, the first medoid in cluster order that no later one beats
 * strictly (kmd_less); bench_medoids.cu checks labels and distances bit for
 * bit.  The argmin is KMG_BEFORE's order (smaller distance, then lower
 * cluster id), which is a total order on the candidates, so the answer does
 * not depend on which block or thread saw a medoid first.
 *
 * A block takes 64 rows against its range of medoids, 64 at a time
 * (tile.cuh); one thread a row then walks the tile's columns.  Rows are
 * what spreads the work: with few of them (fewer row tiles than four per
 * multiprocessor) the medoids are cut into ranges over gridDim.y and a
 * second kernel merges the ranges' answers.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "medoids/tile.cuh"

#include <limits.h>

template <int KIND>
__global__ void __launch_bounds__(KMG_KMD_NT)
kmg_kmd_assign_kernel(kmg_kmd_rows R, const int32_t *medoids, int k, int64_t row0,
					  int64_t nrows, int kper, double *part_d, int32_t *part_j,
					  int32_t *labels, double *dist)
{
	__shared__ kmg_kmd_smem sm;
	const int	t = threadIdx.x;
	const int64_t r0 = row0 + (int64_t) blockIdx.x * KMG_KMD_T;
	const int	na = (int) min((int64_t) KMG_KMD_T, row0 + nrows - r0);
	const int	c0 = blockIdx.y * kper;
	const int	c1 = min(k, c0 + kper);
	double		best = INFINITY;
	int			bj = INT_MAX;

	if (t < KMG_KMD_T)
		sm.arow[t] = t < na ? (int32_t) (r0 + t) : -1;
	for (int j0 = c0; j0 < c1; j0 += KMG_KMD_T)
	{
		const int	nb = min(KMG_KMD_T, c1 - j0);

		if (t < KMG_KMD_T)
			sm.brow[t] = t < nb ? medoids[j0 + t] : -1;
		__syncthreads();
		kmg_kmd_tile<KIND>(R, sm);
		if (t < na)
			for (int j = 0; j < nb; j++)
			{
				const double v = sm.u.dist[t][j];

				if (KMG_BEFORE(v, j0 + j, best, bj))
				{
					best = v;
					bj = j0 + j;
				}
			}
		__syncthreads();
	}
	if (t < na)
	{
		if (gridDim.y == 1)
		{
			labels[r0 + t] = bj;
			dist[r0 + t] = best;
		}
		else
		{
			const size_t p = (size_t) blockIdx.y * nrows + (size_t) (r0 - row0 + t);

			part_d[p] = best;
			part_j[p] = bj;
		}
	}
}

/* The ranges' answers of each row merged, in KMG_BEFORE's order. */
__global__ void __launch_bounds__(KMG_KMD_NT)
kmg_kmd_merge_kernel(int64_t row0, int64_t nrows, int splits, const double *part_d,
					 const int32_t *part_j, int32_t *labels, double *dist)
{
	const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	double		best;
	int			bj;

	if (i >= nrows)
		return;
	best = part_d[i];
	bj = part_j[i];
	for (int s = 1; s < splits; s++)
	{
		const double v = part_d[(size_t) s * nrows + i];
		const int	j = part_j[(size_t) s * nrows + i];

		if (KMG_BEFORE(v, j, best, bj))
		{
			best = v;
			bj = j;
		}
	}
	labels[row0 + i] = bj;
	dist[row0 + i] = best;
}

/*
 * Medoid ranges for nrows rows: 1 while the row tiles give every
 * multiprocessor four blocks, else enough ranges (of whole 64-medoid tiles)
 * to make up four blocks per multiprocessor, within the part_cap entries of
 * the merge buffers.
 */
int
kmg_kmd_assign_splits(int64_t nrows, int k, int sms, int64_t part_cap)
{
	const int64_t tiles = (nrows + KMG_KMD_T - 1) / KMG_KMD_T;
	const int	ktiles = (k + KMG_KMD_T - 1) / KMG_KMD_T;
	int64_t		splits;

	if (tiles >= 4 * (int64_t) sms || ktiles < 2)
		return 1;
	splits = (4 * (int64_t) sms + tiles - 1) / tiles;
	if (splits > ktiles)
		splits = ktiles;
	while (splits > 1 && splits * nrows > part_cap)
		splits--;
	return (int) splits;
}

template <int KIND>
static cudaError_t
kmg_kmd_assign_launch(const kmg_kmd_rows *R, const int32_t *medoids, int k, int64_t row0,
					  int64_t nrows, int splits, double *part_d, int32_t *part_j,
					  int32_t *labels, double *dist, cudaStream_t s)
{
	const int	ktiles = (k + KMG_KMD_T - 1) / KMG_KMD_T;
	const int	kper = ((ktiles + splits - 1) / splits) * KMG_KMD_T;
	const int	used = (k + kper - 1) / kper;	/* no range without medoids */
	dim3		grid((unsigned) ((nrows + KMG_KMD_T - 1) / KMG_KMD_T), (unsigned) used);
	cudaError_t e;

	kmg_kmd_assign_kernel<KIND><<<grid, KMG_KMD_NT, 0, s>>>(*R, medoids, k, row0, nrows, kper,
															part_d, part_j, labels, dist);
	if ((e = cudaGetLastError()) != cudaSuccess || used == 1)
		return e;
	kmg_kmd_merge_kernel<<<(unsigned) ((nrows + KMG_KMD_NT - 1) / KMG_KMD_NT), KMG_KMD_NT, 0, s>>>
		(row0, nrows, used, part_d, part_j, labels, dist);
	return cudaGetLastError();
}

cudaError_t
kmg_kmd_assign(const kmg_kmd_rows *R, const int32_t *medoids, int k, int64_t row0,
			   int64_t nrows, int splits, double *part_d, int32_t *part_j,
			   int32_t *labels, double *dist, cudaStream_t s)
{
	if (nrows < 1 || k < 1)
		return cudaSuccess;
	if (splits < 1)
		splits = 1;
	switch (kmg_kmd_kind(R->metric))
	{
		case KMG_KMD_DOT:
			return kmg_kmd_assign_launch<KMG_KMD_DOT>(R, medoids, k, row0, nrows, splits,
													  part_d, part_j, labels, dist, s);
		case KMG_KMD_L1:
			return kmg_kmd_assign_launch<KMG_KMD_L1>(R, medoids, k, row0, nrows, splits,
													 part_d, part_j, labels, dist, s);
		default:
			return kmg_kmd_assign_launch<KMG_KMD_PAIR>(R, medoids, k, row0, nrows, splits,
													   part_d, part_j, labels, dist, s);
	}
}
