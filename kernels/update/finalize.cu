/*
 * finalize.cu
 *	  The end of a Lloyd iteration for any k: the centroids moved to their
 *	  means, their filter copies and norms refreshed, and the decisions
 *	  (settled, tolerance, max_iter, empty clusters) taken on the device; and
 *	  the re-seeding of empty clusters with the farthest rows.
 *
 * Plain C reference: km_ref_lloyd in kernels/bench/ref_kmeans.c (the CPU
 * engine's rules: src/engine/cpu_lloyd.c), compared end to end by
 * bench_engine.cu.
 *
 * Why it is cheap.  Up to KMG_FIN1_KMAX clusters one block does everything
 * (finalize_block.cuh); above, a warp moves a centroid (the same
 * kmg_fin_cluster) and the last block (ticket counter, after a fence) takes
 * the decisions for the whole iteration, so the host only reads a few bytes
 * per batch.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "update/update.cuh"
#include "update/finalize_block.cuh"

#include <math.h>

#include <cub/cub.cuh>

#define KMG_FIN_NT 128
#define KMG_FIN_WARPS (KMG_FIN_NT / 32)	/* clusters a block */
#define KMG_FIN_BATCH 8			/* the last block's loads in flight a thread */
#define KMG_FIN_MINB 10			/* blocks an SM: B's k = 5000 in one wave of 132 SMs */

/* Sum of a double over the block, in a fixed tree order (all threads get it). */
__device__ double
kmg_block_sum(double v, double *red)
{
	const int	tid = threadIdx.x;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if ((tid & 31) == 0)
		red[tid >> 5] = v;
	__syncthreads();
	v = red[0];
	for (int wv = 1; wv < (int) (blockDim.x >> 5); wv++)
		v += red[wv];
	return v;
}

/*
 * The end of an iteration (mode KMG_FIN_ITER or KMG_FIN_RESEED) or the
 * set-up of new centroids (KMG_FIN_SETUP).  Warp w of block b ends cluster
 * KMG_FIN_WARPS b + w (kmg_fin_cluster: moved to its mean as
 * src/engine/cpu_lloyd.c does, its filter copy and norms refreshed), its
 * sums' reads asked for with the control block's, so a cluster's end is a
 * round trip and its stores.  The last block to finish records the
 * iteration and decides what the queued iterations do next, reading every
 * cluster's |c'| and inertia term KMG_FIN_BATCH at a time (the sum in the
 * same order whatever the batch: thread t adds clusters t, t + KMG_FIN_NT,
 * ... in turn).
 */
__global__ void __launch_bounds__(KMG_FIN_NT, KMG_FIN_MINB)
kmg_finalize_kernel(const __grid_constant__ kmg_args a, int mode)
{
	__shared__ double red[KMG_FIN_NT / 32];
	__shared__ int s_last,
				s_ctl[3];
	kmg_ctl    *ctl = a.ctl;
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	j = blockIdx.x * KMG_FIN_WARPS + (tid >> 5);
	const int	k = a.k,
				dp = a.dp;
	const int	cw = KMG_CW(dp);
	const int	own = j < k && mode != KMG_FIN_SETUP;
	/* in flight with the control block's fields */
	const double w = own ? a.clus[(size_t) j * cw + dp] : 0.0;
	const int	rel = own && a.reloc != NULL ? a.reloc[j] : 0;
	const float mu0 = a.mu != NULL && lane < a.d ? a.mu[lane] : 0.0f;
	int			moved = 0,
				nempty = 0,
				change,
				allx = 0;

	/*
	 * The control block's fields by one thread a block: every warp asking
	 * for the same line queued 5000 requests at one L2 slice (4 us at k =
	 * 5000)
	 */
	if (tid == 0)
	{
		const volatile kmg_ctl *v = ctl;

		s_ctl[0] = v->stop;
		s_ctl[1] = v->moved;
		s_ctl[2] = v->nempty;
	}
	__syncthreads();
	if (mode == KMG_FIN_ITER && s_ctl[0] != KMG_RUN)
		return;
	if (mode != KMG_FIN_SETUP)
	{
		moved = s_ctl[1];
		nempty = mode == KMG_FIN_ITER ? s_ctl[2] : 0;
	}
	/* whether centroids move this time */
	change = mode == KMG_FIN_SETUP || (moved > 0 && nempty == 0);
	if (change && j < k)
		kmg_fin_cluster(a, j, own && !rel && w > 0.0, w, a.clus, mu0, allx, kmg_fin_out_of(a));

	/* the last block decides */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&ctl->ticket, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();

	{
		float		cmax = 0.0f;
		double		est = 0.0;

		allx = 0;			/* from every cluster's exact norm below, not the warps' flags */
		for (int j0 = 0; j0 < k; j0 += KMG_FIN_NT * KMG_FIN_BATCH)
		{
			float		nf[KMG_FIN_BATCH];
			double		e[KMG_FIN_BATCH];

#pragma unroll
			for (int u = 0; u < KMG_FIN_BATCH; u++)
			{
				const int	jj = j0 + tid + u * KMG_FIN_NT;

				nf[u] = 0.0f;
				e[u] = 0.0;
				if (jj < k)
				{
					/* other blocks' stores: from L2 */
					nf[u] = __ldcg(&a.cnf[jj]);
					if (mode != KMG_FIN_SETUP)
						e[u] = __ldcg(&a.clus[(size_t) jj * cw + dp + 2]);
				}
			}
#pragma unroll
			for (int u = 0; u < KMG_FIN_BATCH; u++)
				if (j0 + tid + u * KMG_FIN_NT < k)
				{
					cmax = fmaxf(cmax, nf[u]);
					if (mode != KMG_FIN_SETUP)
						est += e[u];
					if (a.reloc != NULL)
						a.reloc[j0 + tid + u * KMG_FIN_NT] = 0;
				}
		}
		if (a.cosine)
			for (int jj = tid; jj < k; jj += KMG_FIN_NT)
			{
				const double cn = __ldcg(&a.cnorm[jj]);

				allx |= !(cn > 0.0 && isfinite(cn));
			}
		for (int o = 16; o > 0; o >>= 1)
			cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
		allx = __syncthreads_or(allx);
		est = kmg_block_sum(est, red);
		__syncthreads();
		if ((tid & 31) == 0)
			red[tid >> 5] = (double) cmax;
		__syncthreads();
		if (tid != 0)
			return;
		for (int wv = 0; wv < KMG_FIN_NT / 32; wv++)
			cmax = fmaxf(cmax, (float) red[wv]);

		ctl->ticket = 0;
		kmg_fin_decide(a, mode, moved, nempty, change, cmax, allx, est, kmg_ctl_snapshot(ctl),
					   a.bounded ? *(volatile int *) &a.bs->nlist : -1);
	}
}

/* The same for small k in one block (finalize_block.cuh): no ticket, one launch. */
__global__ void __launch_bounds__(256)
kmg_finalize1_kernel(const __grid_constant__ kmg_args a, int mode)
{
	int			moved = 0,
				nempty = 0;

	if (mode == KMG_FIN_ITER && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if (mode != KMG_FIN_SETUP)
	{
		moved = *(volatile int *) &a.ctl->moved;
		nempty = mode == KMG_FIN_ITER ? *(volatile int *) &a.ctl->nempty : 0;
	}
	kmg_finalize_block(a, mode, moved, nempty, a.clus);
}

cudaError_t
kmg_finalize(const kmg_args *a, int mode, cudaStream_t stream)
{
	if (a->k <= KMG_FIN1_KMAX)
		kmg_finalize1_kernel<<<1, 256, 0, stream>>>(*a, mode);
	else
		kmg_finalize_kernel<<<(a->k + KMG_FIN_WARPS - 1) / KMG_FIN_WARPS, KMG_FIN_NT, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/*
 * Re-seed the clusters without weight, as src/engine/cpu_lloyd.c does: the
 * e-th empty cluster (by id) takes far_rows[e] (rows by decreasing exact
 * cost); the row's w x, w and count move from its old cluster, which is
 * cleared when its count drops to zero; the centroid is the row itself.
 * One block; the empties are listed in order with a block scan.
 */
__global__ void __launch_bounds__(256)
kmg_reseed_kernel(kmg_args a, const int32_t *far_rows)
{
	__shared__ int s_base;
	__shared__ int s_clear;
	const int	tid = threadIdx.x;
	const int	dp = a.dp;
	const int	cw = KMG_CW(dp);
	int			nempty;

	if (tid == 0)
		s_base = 0;
	__syncthreads();
	for (int j0 = 0; j0 < a.k; j0 += 256)
	{
		const int	j = j0 + tid;
		const int	e = j < a.k && !(a.clus[(size_t) j * cw + dp] > 0.0);
		typedef cub::BlockScan<int, 256> Scan;
		__shared__ typename Scan::TempStorage tmp;
		int			pos,
					tot;

		Scan(tmp).ExclusiveSum(e, pos, tot);
		if (e)
			a.empties[s_base + pos] = j;
		__syncthreads();
		if (tid == 0)
			s_base += tot;
		__syncthreads();
	}
	nempty = s_base;
	if (nempty > a.n)
		nempty = (int) a.n;

	for (int e = 0; e < nempty; e++)
	{
		const int	j = a.empties[e];
		const int	r = far_rows[e];
		const int	old = a.labels[r];
		const double w = a.W != NULL ? (double) a.W[r] : 1.0;
		const float *x = a.X + (size_t) r * dp;
		float	   *c = a.C + (size_t) j * dp;
		double	   *sold = a.clus + (size_t) old * cw;
		double	   *sj = a.clus + (size_t) j * cw;

		for (int i = tid; i < a.d; i += 256)
		{
			const double v = w * (double) x[i];

			c[i] = x[i];
			sold[i] -= v;
			sj[i] = v;
		}
		__syncthreads();
		if (tid == 0)
		{
			sold[dp] -= w;
			sj[dp] = w;
			sj[dp + 1] = 1.0;
			sold[dp + 1] -= 1.0;
			s_clear = sold[dp + 1] == 0.0;
			if (s_clear)
				sold[dp] = 0.0;
			a.reloc[j] = 1;
		}
		__syncthreads();
		if (s_clear)
			for (int i = tid; i < a.d; i += 256)
				sold[i] = 0.0;
		__syncthreads();
	}
	if (tid == 0)
		a.ctl->relocated = nempty;
}

cudaError_t
kmg_reseed(const kmg_args *a, const int32_t *far_rows, cudaStream_t stream)
{
	kmg_reseed_kernel<<<1, 256, 0, stream>>>(*a, far_rows);
	return cudaGetLastError();
}
