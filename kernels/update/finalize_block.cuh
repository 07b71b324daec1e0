/*
 * finalize_block.cuh
 *	  The end of a Lloyd iteration (or the set-up of new centroids) done by
 *	  one block for every cluster, for small k: the same rules as
 *	  kmg_finalize_kernel (finalize.cu), which spreads the clusters over k
 *	  blocks and decides in its last block.  Included by the kernels that
 *	  finish an iteration in their own last block (assign/narrow.cu), by
 *	  finalize.cu (the one-block finalize) and by assign/reduce.cu (the
 *	  reduction of the wide and direct passes, which ends in one).
 *
 * A warp per cluster: the mean (cosine: normalised in double, the norm
 * summed in index order by one lane, as finalize.cu does), the filter copy
 * (cosine: km_normalize_row; centred l2: c - mu), |c'|^2 and |c'|; then the
 * decisions (settled, tol, max_iter, empty clusters) by thread 0.  moved
 * and nempty come from the caller; in KMG_FIN_ITER the caller has also
 * stored them in the control block (a pause for empty clusters leaves them
 * there for the KMG_FIN_RESEED pass).
 */
#ifndef KMG_FINALIZE_BLOCK_CUH
#define KMG_FINALIZE_BLOCK_CUH

#include "kmg_common.cuh"
#include "kmg_device.cuh"

/*
 * The decisions that end an iteration (or a set-up), by one thread: the
 * filter's bound and exactness flag where centroids moved, a pause for empty
 * clusters, else the iteration's record and the stop rule (settled, tol,
 * max_iter), with the per-iteration counters reset.  Shared by
 * kmg_finalize_block and kmg_finalize_kernel (finalize.cu).
 */
static __device__ __forceinline__ void
kmg_fin_decide(const kmg_args &a, int mode, int moved, int nempty, int change,
			   float cmax, int allx, double est)
{
	kmg_ctl    *ctl = a.ctl;

	if (change)
	{
		ctl->cmax = cmax;
		ctl->all_exact = allx;
	}
	if (mode == KMG_FIN_SETUP)
		return;
	if (mode == KMG_FIN_ITER && moved > 0 && nempty > 0)
	{
		ctl->stop = KMG_PAUSE_EMPTY;	/* the host re-seeds, then RESEED */
		return;
	}

	const int	t = ctl->iter + 1;
	const double frac = (double) moved / (double) a.n;
	kmg_stat   *st = &a.stats[t - 1];
	int			stop = KMG_RUN;

	if (moved == 0)
		stop = KMG_STOP_SETTLED;
	else if (frac <= ctl->tol)
		stop = KMG_STOP_TOL;
	else if (t >= ctl->max_iter)
		stop = KMG_STOP_MAXITER;
	st->moved_frac = frac;
	st->inertia = est;
	st->moved = moved;
	st->relocated = mode == KMG_FIN_RESEED ? ctl->relocated : 0;
	st->ambiguous = ctl->namb;
	st->candidates = ctl->ncand;
	st->screened = a.bounded ? a.bs->nlist : -1;
	st->stop = stop;
	ctl->iter = t;
	ctl->moved = 0;
	ctl->nempty = 0;
	ctl->namb = 0;
	ctl->ncand = 0;
	ctl->relocated = 0;
	ctl->stop = stop;
}

static __device__ __noinline__ void
kmg_finalize_block(const kmg_args &a, int mode, int moved, int nempty)
{
	__shared__ double fred[32];
	__shared__ float fmax_[32];
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	nw = blockDim.x >> 5;
	const int	d = a.d,
				dp = a.dp,
				k = a.k;
	const int	cw = KMG_CW(dp);
	const int	change = mode == KMG_FIN_SETUP || (moved > 0 && nempty == 0);

	if (change && mode != KMG_FIN_SETUP)
		for (int j = warp; j < k; j += nw)
		{
			const double *cl = a.clus + (size_t) j * cw;
			const double w = cl[dp];
			float	   *c = a.C + (size_t) j * dp;

			if ((a.reloc != NULL && a.reloc[j]) || !(w > 0.0))
				continue;

			double		scale = 1.0;
			int			ok = 1;

			if (a.cosine)
			{
				if (lane == 0)
				{
					double		nrm = 0.0;

					for (int i = 0; i < d; i++)
					{
						const double m = km_ddiv(cl[i], w);

						nrm = km_dadd(nrm, km_dmul(m, m));
					}
					scale = km_dsqrt(nrm);
					ok = scale > 0.0 && isfinite(scale);
				}
				scale = __shfl_sync(0xffffffffu, scale, 0);
				ok = __shfl_sync(0xffffffffu, ok, 0);
			}
			if (ok)
			{
				int			bad = 0;

				for (int i = lane; i < d; i += 32)
					if (!isfinite((float) km_ddiv(km_ddiv(cl[i], w), scale)))
						bad = 1;
				if (!__any_sync(0xffffffffu, bad))
					for (int i = lane; i < d; i += 32)
						c[i] = (float) km_ddiv(km_ddiv(cl[i], w), scale);
			}
		}
	__syncthreads();
	if (change)
		for (int j = warp; j < k; j += nw)
		{
			const float *c = a.C + (size_t) j * dp;
			float	   *cf = a.Cf + (size_t) j * dp;
			double		s = 0.0;

			if (a.cosine)
			{
				if (lane == 0)
				{
					const double nrm = km_normalize_row(c, cf, d);

					if (nrm == 0.0)
						for (int i = 0; i < d; i++)
							cf[i] = 0.0f;
					a.cnorm[j] = km_exact_norm(c, d);
				}
				__syncwarp();
			}
			else if (a.mu != NULL)
			{
				for (int i = lane; i < d; i += 32)
					cf[i] = c[i] - a.mu[i];
				__syncwarp();
			}
			for (int i = lane; i < d; i += 32)
				s += (double) cf[i] * (double) cf[i];
			for (int o = 16; o > 0; o >>= 1)
				s += __shfl_xor_sync(0xffffffffu, s, o);
			if (lane == 0)
			{
				a.cn[j] = (float) s;
				a.cnf[j] = (float) sqrt(s);
			}
		}
	__threadfence_block();
	__syncthreads();

	/* the decisions */
	{
		float		cmax = 0.0f;
		int			allx = 0;
		double		est = 0.0;

		for (int jj = tid; jj < k; jj += blockDim.x)
		{
			cmax = fmaxf(cmax, *(volatile float *) &a.cnf[jj]);
			if (a.cosine)
			{
				const double cn = *(volatile double *) &a.cnorm[jj];

				allx |= !(cn > 0.0 && isfinite(cn));
			}
			if (mode != KMG_FIN_SETUP)
				est += *(volatile double *) &a.clus[(size_t) jj * cw + dp + 2];
			if (a.reloc != NULL)
				a.reloc[jj] = 0;
		}
		for (int o = 16; o > 0; o >>= 1)
		{
			cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
			est += __shfl_xor_sync(0xffffffffu, est, o);
		}
		if (lane == 0)
		{
			fmax_[warp] = cmax;
			fred[warp] = est;
		}
		allx = __syncthreads_or(allx);
		if (tid != 0)
			return;
		cmax = fmax_[0];
		est = fred[0];
		for (int wv = 1; wv < nw; wv++)
		{
			cmax = fmaxf(cmax, fmax_[wv]);
			est += fred[wv];
		}
		kmg_fin_decide(a, mode, moved, nempty, change, cmax, allx, est);
	}
}

#endif							/* KMG_FINALIZE_BLOCK_CUH */
