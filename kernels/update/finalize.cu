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
 * (finalize_block.cuh); above, block j moves centroid j and the last block
 * (ticket counter, after a fence) takes the decisions for the whole
 * iteration, so the host only reads a few bytes per batch.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "update/update.cuh"
#include "update/finalize_block.cuh"

#include <math.h>

#include <cub/cub.cuh>

#define KMG_FIN_NT 128
#define KMG_FIN_KEEP 8			/* means a thread keeps between the check and the write */

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
 * set-up of new centroids (KMG_FIN_SETUP).  Block j moves centroid j to its
 * mean, as src/engine/cpu_lloyd.c does (cosine: normalised in double; no
 * weight, a re-seeded cluster, or a mean that is not finite: it stays), then
 * refreshes its filter copy and norms.  The last block to finish records the
 * iteration and decides what the queued iterations do next.
 */
__global__ void __launch_bounds__(KMG_FIN_NT)
kmg_finalize_kernel(kmg_args a, int mode)
{
	__shared__ double red[KMG_FIN_NT / 32];
	__shared__ int s_ok,
				s_last;
	__shared__ double s_scale;
	kmg_ctl    *ctl = a.ctl;
	const int	j = blockIdx.x;
	const int	tid = threadIdx.x;
	const int	d = a.d,
				dp = a.dp;
	const int	cw = KMG_CW(dp);
	int			moved = 0,
				nempty = 0,
				change;

	if (mode == KMG_FIN_ITER && *(volatile int *) &ctl->stop != KMG_RUN)
		return;
	if (mode != KMG_FIN_SETUP)
	{
		moved = *(volatile int *) &ctl->moved;
		nempty = mode == KMG_FIN_ITER ? *(volatile int *) &ctl->nempty : 0;
	}
	/* whether centroids move this time */
	change = mode == KMG_FIN_SETUP || (moved > 0 && nempty == 0);

	if (change && mode != KMG_FIN_SETUP)
	{
		const double *cl = a.clus + (size_t) j * cw;
		const double w = cl[dp];
		float	   *c = a.C + (size_t) j * dp;

		if (!(a.reloc != NULL && a.reloc[j]) && w > 0.0)
		{
			if (tid == 0)
			{
				double		scale = 1.0;
				int			ok = 1;

				if (a.cosine)
				{
					double		nrm = 0.0;

					for (int i = 0; i < d; i++)
					{
						double		m = km_ddiv(cl[i], w);

						nrm = km_dadd(nrm, km_dmul(m, m));
					}
					scale = km_dsqrt(nrm);
					ok = scale > 0.0 && isfinite(scale);
				}
				s_scale = scale;
				s_ok = ok;
			}
			__syncthreads();
			if (s_ok)
			{
				int			bad = 0;

				/*
				 * Double divisions are slow: the first KMG_FIN_KEEP values a
				 * thread computes are kept for the write.
				 */
				const double scale = s_scale;
				float		keep[KMG_FIN_KEEP];

#pragma unroll
				for (int u = 0; u < KMG_FIN_KEEP; u++)
				{
					const int	i = tid + u * KMG_FIN_NT;

					keep[u] = 0.0f;
					if (i < d)
					{
						keep[u] = kmg_fin_mean(cl[i], w, scale);
						if (!isfinite(keep[u]))
							bad = 1;
					}
				}
				for (int i = tid + KMG_FIN_KEEP * KMG_FIN_NT; i < d; i += KMG_FIN_NT)
					if (!isfinite(kmg_fin_mean(cl[i], w, scale)))
						bad = 1;
				bad = __syncthreads_or(bad);
				if (!bad)
				{
#pragma unroll
					for (int u = 0; u < KMG_FIN_KEEP; u++)
						if (tid + u * KMG_FIN_NT < d)
							c[tid + u * KMG_FIN_NT] = keep[u];
					for (int i = tid + KMG_FIN_KEEP * KMG_FIN_NT; i < d; i += KMG_FIN_NT)
						c[i] = kmg_fin_mean(cl[i], w, scale);
				}
			}
		}
	}
	if (change)
	{
		/* filter copy, |c'|^2, |c'|, and the exact norm for cosine */
		const float *c = a.C + (size_t) j * dp;
		float	   *cf = a.Cf + (size_t) j * dp;
		double		s;

		__syncthreads();
		if (a.cosine)
		{
			if (tid == 0)
			{
				double		nrm = km_normalize_row(c, cf, d);

				if (nrm == 0.0)
					for (int i = 0; i < d; i++)
						cf[i] = 0.0f;
				a.cnorm[j] = km_exact_norm(c, d);
			}
			__syncthreads();
		}
		else if (a.mu != NULL)
		{
			/* centred filter copy: c' = fl(c - mu), zeros past d */
			for (int i = tid; i < d; i += KMG_FIN_NT)
				cf[i] = c[i] - a.mu[i];
			__syncthreads();
		}
		s = 0.0;
		for (int i = tid; i < d; i += KMG_FIN_NT)
			s += (double) cf[i] * (double) cf[i];
		s = kmg_block_sum(s, red);
		if (tid == 0)
		{
			if (!a.cosine && a.mu == NULL)
				a.cnorm[j] = s;	/* |c|^2 in double (assign/bytes.cu) */
			a.cn[j] = (float) s;
			a.cnf[j] = (float) sqrt(s);
		}
	}

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
		int			allx = 0;
		double		est = 0.0;

		for (int jj = tid; jj < a.k; jj += KMG_FIN_NT)
		{
			const float v = *(volatile float *) &a.cnf[jj];

			cmax = fmaxf(cmax, v);
			if (a.cosine)
			{
				const double cn = *(volatile double *) &a.cnorm[jj];

				allx |= !(cn > 0.0 && isfinite(cn));
			}
			if (mode != KMG_FIN_SETUP)
				est += a.clus[(size_t) jj * cw + dp + 2];
			if (a.reloc != NULL)
				a.reloc[jj] = 0;
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
		kmg_finalize_kernel<<<a->k, KMG_FIN_NT, 0, stream>>>(*a, mode);
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
