/*
 * sums.cu
 *	  Sums of distances to the members of clusters: the score step of the
 *	  alternating method, and the silhouette.
 *
 * The score: for each cluster, each member's sum of distances to the other
 * members, added in member order (row order), which is exactly how the CPU
 * engine adds them (kmd_score_worker, src/engine/kmedoids_alternate.c: one
 * running sum per member, tile after tile, column after column).  The work
 * of a cluster is size^2 distances; it is cut into items of up to 64
 * members against the whole cluster (the driver builds them, heaviest
 * first, so that the long ones start first and the short ones fill the
 * gaps): a small cluster is one item, a large one is split over many
 * blocks by members, never by the members it sums over, so each sum stays
 * one thread's chain in the CPU's order and nothing has to be combined.
 * Every cluster to score goes into one launch (or a few, for cancel).
 *
 * The silhouette: for each row, its sum of distances to the members of
 * each cluster, members in row order (the CPU engine adds row j's distance
 * into its cluster's sum, j in row order: the same additions), then a (own
 * cluster) and b (nearest other cluster) and s_i exactly as
 * kmd_silhouette_worker does, with the division and subtraction rounded as
 * the host rounds them.  The members arrive cluster after cluster, so one
 * running sum per row suffices.
 *
 * C references: a loop over kmd_pair() in member order (the definition the
 * CPU engine's tests hold its kernel to) and kmd_cpu_engine.silhouette;
 * bench_medoids.cu checks both bit for bit, and whole fits against the CPU
 * engine's.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "medoids/tile.cuh"

/* The score: block b takes item b. */
template <int KIND>
__global__ void __launch_bounds__(KMG_KMD_NT)
kmg_kmd_score_kernel(kmg_kmd_rows R, const int32_t *members, const kmg_kmd_item *items,
					 double *sums)
{
	__shared__ kmg_kmd_smem sm;
	const kmg_kmd_item it = items[blockIdx.x];
	const int	t = threadIdx.x;
	double		s = 0.0;

	if (t < KMG_KMD_T)
		sm.arow[t] = t < it.na ? members[it.a0 + t] : -1;
	for (int j0 = it.b0; j0 < it.b1; j0 += KMG_KMD_T)
	{
		const int	nb = min(KMG_KMD_T, it.b1 - j0);

		if (t < KMG_KMD_T)
			sm.brow[t] = t < nb ? members[j0 + t] : -1;
		__syncthreads();
		kmg_kmd_tile<KIND>(R, sm);
		if (t < it.na)
		{
			/* the member's running sum, in member order, itself left out */
			const int32_t me = sm.arow[t];

			for (int j = 0; j < nb; j++)
				if (sm.brow[j] != me)
					s = __dadd_rn(s, sm.u.dist[t][j]);
		}
		__syncthreads();
	}
	if (t < it.na)
		sums[it.a0 + t] = s;
}

/* A cluster's sum c of row i folded into a (own cluster) or b (the least mean of the others). */
__device__ __forceinline__ void
kmg_kmd_fold(int c, double s, int own, const int64_t *sizes, double &a, double &b)
{
	if (c < 0)
		return;
	if (c == own)
	{
		if (sizes[own] > 1)
			a = __ddiv_rn(s, (double) (sizes[own] - 1));
	}
	else
	{
		const double v = __ddiv_rn(s, (double) sizes[c]);

		if (v < b)
			b = v;
	}
}

/* The silhouette: block b takes rows row0 + 64 b ... against every member. */
template <int KIND>
__global__ void __launch_bounds__(KMG_KMD_NT)
kmg_kmd_silhouette_kernel(kmg_kmd_rows R, const int32_t *members, const int32_t *labels,
						  const int64_t *sizes, int64_t row0, int64_t nrows, double *sil)
{
	__shared__ kmg_kmd_smem sm;
	const int	t = threadIdx.x;
	const int64_t r0 = row0 + (int64_t) blockIdx.x * KMG_KMD_T;
	const int	na = (int) min((int64_t) KMG_KMD_T, row0 + nrows - r0);
	const int32_t me = t < na ? (int32_t) (r0 + t) : -1;
	const int	own = me >= 0 ? labels[me] : -1;
	int			cur = -1;
	double		s = 0.0;
	double		a = 0.0;
	double		b = INFINITY;

	if (t < KMG_KMD_T)
		sm.arow[t] = me;
	for (int64_t j0 = 0; j0 < R.n; j0 += KMG_KMD_T)
	{
		const int	nb = (int) min((int64_t) KMG_KMD_T, R.n - j0);

		if (t < KMG_KMD_T)
		{
			const int32_t rb = t < nb ? members[j0 + t] : -1;

			sm.brow[t] = rb;
			sm.blab[t] = rb >= 0 ? labels[rb] : -1;
		}
		__syncthreads();
		kmg_kmd_tile<KIND>(R, sm);
		if (t < na)
			for (int j = 0; j < nb; j++)
			{
				const int	c = sm.blab[j];

				if (c != cur)
				{
					/* the members of cluster cur are done */
					kmg_kmd_fold(cur, s, own, sizes, a, b);
					cur = c;
					s = 0.0;
				}
				if (sm.brow[j] != me)
					s = __dadd_rn(s, sm.u.dist[t][j]);
			}
		__syncthreads();
	}
	if (t < na)
	{
		double		si = 0.0;

		kmg_kmd_fold(cur, s, own, sizes, a, b);
		if (sizes[own] > 1)
		{
			const double m = a > b ? a : b;

			if (m > 0.0)
				si = __ddiv_rn(__dadd_rn(b, -a), m);
		}
		sil[me] = si;
	}
}

cudaError_t
kmg_kmd_score(const kmg_kmd_rows *R, const int32_t *members, const kmg_kmd_item *items,
			  int nitems, double *sums, cudaStream_t s)
{
	if (nitems < 1)
		return cudaSuccess;
	switch (kmg_kmd_kind(R->metric))
	{
		case KMG_KMD_DOT:
			kmg_kmd_score_kernel<KMG_KMD_DOT><<<nitems, KMG_KMD_NT, 0, s>>>(*R, members, items, sums);
			break;
		case KMG_KMD_L1:
			kmg_kmd_score_kernel<KMG_KMD_L1><<<nitems, KMG_KMD_NT, 0, s>>>(*R, members, items, sums);
			break;
		default:
			kmg_kmd_score_kernel<KMG_KMD_PAIR><<<nitems, KMG_KMD_NT, 0, s>>>(*R, members, items, sums);
			break;
	}
	return cudaGetLastError();
}

cudaError_t
kmg_kmd_silhouette(const kmg_kmd_rows *R, const int32_t *members, const int32_t *labels,
				   const int64_t *sizes, int64_t row0, int64_t nrows, double *sil,
				   cudaStream_t s)
{
	const unsigned blocks = (unsigned) ((nrows + KMG_KMD_T - 1) / KMG_KMD_T);

	if (nrows < 1)
		return cudaSuccess;
	switch (kmg_kmd_kind(R->metric))
	{
		case KMG_KMD_DOT:
			kmg_kmd_silhouette_kernel<KMG_KMD_DOT><<<blocks, KMG_KMD_NT, 0, s>>>
				(*R, members, labels, sizes, row0, nrows, sil);
			break;
		case KMG_KMD_L1:
			kmg_kmd_silhouette_kernel<KMG_KMD_L1><<<blocks, KMG_KMD_NT, 0, s>>>
				(*R, members, labels, sizes, row0, nrows, sil);
			break;
		default:
			kmg_kmd_silhouette_kernel<KMG_KMD_PAIR><<<blocks, KMG_KMD_NT, 0, s>>>
				(*R, members, labels, sizes, row0, nrows, sil);
			break;
	}
	return cudaGetLastError();
}
