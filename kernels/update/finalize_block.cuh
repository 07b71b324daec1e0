/*
 * finalize_block.cuh
 *	  The end of a Lloyd iteration (or the set-up of new centroids) done by
 *	  one block for every cluster, for small k; and each cluster's end
 *	  (kmg_fin_cluster), which kmg_finalize_kernel (finalize.cu) runs a warp
 *	  a cluster over k / 4 blocks for larger k, deciding in its last block.
 *	  Included by the kernels that finish an iteration in their own last
 *	  block (assign/narrow.cu, whose parallel end also runs kmg_fin_cluster
 *	  and kmg_fin_decide), by finalize.cu (both finalizes) and by
 *	  assign/reduce.cu (the reduction of the wide and direct passes, which
 *	  ends in one).
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
#include "update/update.cuh"

static_assert(KMG_FIN1_KMAX <= 32 * (256 / 32), "a warp's re-seed flags fit one ballot (kmg_finalize_block)");

/*
 * Column i's new value, (cl_i / w) / scale rounded as the CPU engine rounds
 * it (src/engine/cpu_lloyd.c); m / 1 is m, so l2 divides once (double
 * divisions are slow).  Both finalizes take their means here.
 */
static __device__ __forceinline__ float
kmg_fin_mean(double cl_i, double w, double scale)
{
	const double m = km_ddiv(cl_i, w);

	return (float) (scale == 1.0 ? m : km_ddiv(m, scale));
}

/*
 * The control block's fields the decisions read, in one go (volatile: other
 * blocks' atomics, fenced before the caller's ticket, wrote them).
 */
static __device__ __forceinline__ kmg_ctl
kmg_ctl_snapshot(const kmg_ctl *ctl)
{
	const volatile kmg_ctl *v = ctl;
	kmg_ctl		c;

	c.iter = v->iter;
	c.namb = v->namb;
	c.ncand = v->ncand;
	c.relocated = v->relocated;
	c.max_iter = v->max_iter;
	c.tol = v->tol;
	return c;
}

/*
 * Why a run stops after its iteration t, in which moved rows (the fraction
 * frac of them) changed label: settled, tol, max_iter, or KMG_RUN.  The
 * decisions below take it, and so does every block of the narrow pass's
 * parallel end (assign/narrow.cu).
 */
static __device__ __forceinline__ int
kmg_fin_stop_rule(int moved, double frac, int t, const kmg_ctl &snap)
{
	if (moved == 0)
		return KMG_STOP_SETTLED;
	if (frac <= snap.tol)
		return KMG_STOP_TOL;
	if (t >= snap.max_iter)
		return KMG_STOP_MAXITER;
	return KMG_RUN;
}

/*
 * The decisions that end an iteration (or a set-up), by one thread: the
 * filter's bound and exactness flag where centroids moved, a pause for empty
 * clusters, else the iteration's record and the stop rule (settled, tol,
 * max_iter), with the per-iteration counters reset.  snap: the control
 * block's fields as kmg_ctl_snapshot read them; nlist: the bounds' screened
 * rows (a.bounded).  Shared by kmg_finalize_block and kmg_finalize_kernel
 * (finalize.cu).
 */
static __device__ __forceinline__ void
kmg_fin_decide(const kmg_args &a, int mode, int moved, int nempty, int change,
			   float cmax, int allx, double est, const kmg_ctl &snap, int nlist)
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

	const int	t = snap.iter + 1;
	const double frac = (double) moved / (double) a.n;
	kmg_stat   *st = &a.stats[t - 1];
	const int	stop = kmg_fin_stop_rule(moved, frac, t, snap);

	st->moved_frac = frac;
	st->inertia = est;
	st->moved = moved;
	st->relocated = mode == KMG_FIN_RESEED ? snap.relocated : 0;
	st->ambiguous = snap.namb;
	st->candidates = snap.ncand;
	st->screened = a.bounded ? nlist : -1;
	st->stop = stop;
	ctl->iter = t;
	ctl->moved = 0;
	ctl->nempty = 0;
	ctl->namb = 0;
	ctl->ncand = 0;
	ctl->relocated = 0;
	ctl->stop = stop;
	if (mode == KMG_FIN_RESEED)
	{
		/* the narrow pass's parallel end counts its passes afresh from here */
		ctl->iter0 = t;
		ctl->started = 0;
	}
}

/*
 * What kmg_finalize_block reads from global memory before it computes,
 * asked for in one go by kmg_fin_read.  A caller with reads of its own to
 * wait for (the narrow pass's last block: the accumulators) asks for these
 * first, and waits once for both.
 */
typedef struct kmg_fin_reads
{
	kmg_ctl		snap;			/* thread 0: kmg_ctl_snapshot */
	int			nlist;			/* thread 0: the bounds' screened rows, or -1 */
	int			rel;			/* the re-seed flag of cluster warp + lane nw (bit lane of the ballot) */
	float		mu0;			/* the centring of column lane */
} kmg_fin_reads;

/*
 * The reads, in flight together; nothing here waits for them (the ballot
 * of the flags is kmg_finalize_block_from's).  Like every read of the end,
 * after the pass's last ticket.
 */
static __device__ __forceinline__ void
kmg_fin_read(const kmg_args &a, int mode, kmg_fin_reads &r)
{
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	j = (tid >> 5) + lane * (int) (blockDim.x >> 5);

	r.nlist = -1;
	if (tid == 0)
	{
		r.snap = kmg_ctl_snapshot(a.ctl);
		if (a.bounded)
			r.nlist = *(volatile int *) &a.bs->nlist;
	}
	r.rel = a.reloc != NULL && mode != KMG_FIN_SETUP && j < a.k ? a.reloc[j] : 0;
	r.mu0 = a.mu != NULL && lane < a.d ? a.mu[lane] : 0.0f;
}

/*
 * Where kmg_fin_cluster keeps a cluster's centroid and what follows from it:
 * the run's arrays (kmg_fin_out_of), or copies in a block's shared memory
 * (the narrow pass's parallel end).  Rows of a.dp floats; Cf may be C (l2
 * without centring, whose filter copy is the centroid).
 */
typedef struct kmg_fin_out
{
	float	   *C;				/* k x dp: the centroids, read where kept */
	float	   *Cf;				/* k x dp: filter copies */
	float	   *cn;				/* k: |c'|^2 */
	float	   *cnf;			/* k: |c'| */
	double	   *cnorm;			/* k (cosine; l2 without centring: |c|^2) */
} kmg_fin_out;

static __device__ __forceinline__ kmg_fin_out
kmg_fin_out_of(const kmg_args &a)
{
	const kmg_fin_out o = {a.C, a.Cf, a.cn, a.cnf, a.cnorm};

	return o;
}

/*
 * One cluster's end, by one warp: its centroid moved to the mean of its sums
 * (clus: k x KMG_CW(dp), a.clus or a copy in the caller's shared memory)
 * where fresh (the cluster has weight w > 0 and was not re-seeded) and the
 * mean is usable (cosine: normalised in double, the norm summed in index
 * order by one lane, as the CPU engine does; every value finite), else kept;
 * then its filter copy (cosine: km_normalize_row; centred l2: c - mu), |c'|^2
 * and |c'| stored.  Returns |c'| on every lane; for cosine, lane 0 ORs into
 * allx whether the exact norm is unusable.  mu0: the centring of column
 * lane; out: where the centroid is read and everything stored.  Both
 * finalizes end their clusters here, kmg_finalize_block_from a warp's
 * clusters in turn, kmg_finalize_kernel (finalize.cu) a warp each, and so
 * does every block of the narrow pass's parallel end, into its shared
 * memory.
 */
static __device__ __forceinline__ float
kmg_fin_cluster(const kmg_args &a, int j, int fresh, double w, const double *clus, float mu0,
				int &allx, const kmg_fin_out &out)
{
	const int	lane = threadIdx.x & 31;
	const int	d = a.d,
				dp = a.dp;
	const double *cl = clus + (size_t) j * KMG_CW(dp);
	float	   *c = out.C + (size_t) j * dp;
	float	   *cf = out.Cf + (size_t) j * dp;
	double		scale = 1.0,
				s = 0.0;
	float		nf;

	if (fresh && a.cosine)
	{
		int			ok = 1;

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
		fresh = __shfl_sync(0xffffffffu, ok, 0);
	}
	if (fresh)
	{
		int			bad = 0;

		for (int i = lane; i < d; i += 32)
			if (!isfinite(kmg_fin_mean(cl[i], w, scale)))
				bad = 1;
		fresh = !__any_sync(0xffffffffu, bad);
	}
	if (a.cosine)
	{
		if (fresh)
			for (int i = lane; i < d; i += 32)
				c[i] = kmg_fin_mean(cl[i], w, scale);
		__syncwarp();
		if (lane == 0)
		{
			const double nrm = km_normalize_row(c, cf, d);
			const double cn = km_exact_norm(c, d);

			if (nrm == 0.0)
				for (int i = 0; i < d; i++)
					cf[i] = 0.0f;
			out.cnorm[j] = cn;
			allx |= !(cn > 0.0 && isfinite(cn));
		}
		__syncwarp();
		for (int i = lane; i < d; i += 32)
			s += (double) cf[i] * (double) cf[i];
	}
	else
		for (int i = lane; i < d; i += 32)
		{
			/* the new centroid (or the one kept), its filter copy c - mu, |c'|^2 */
			const float ci = fresh ? kmg_fin_mean(cl[i], w, scale) : c[i];
			float		cfi = ci;

			if (fresh)
				c[i] = ci;
			if (a.mu != NULL)
			{
				cfi = ci - (i == lane ? mu0 : a.mu[i]);
				cf[i] = cfi;
			}
			s += (double) cfi * (double) cfi;
		}
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	nf = (float) sqrt(s);
	if (lane == 0)
	{
		if (!a.cosine && a.mu == NULL)
			out.cnorm[j] = s;	/* |c|^2 in double (assign/bytes.cu) */
		out.cn[j] = (float) s;
		out.cnf[j] = nf;
	}
	return nf;
}

/*
 * The end itself, from kmg_fin_read's values: a cluster's warp carries its
 * centroid in registers from the mean to |c'|, so the end of an iteration
 * is the reads' round trip and the stores.  clus: the cluster sums (k x
 * KMG_CW(dp)), a.clus or a copy in the caller's shared memory.  A warp's
 * re-seed flags fit one ballot while k <= 32 warps: every caller runs 256
 * threads with k <= KMG_FIN1_KMAX.  Inline: the narrow pass reads its
 * arguments from the constant bank here, not through a pointer to them.
 */
static __device__ __forceinline__ void
kmg_finalize_block_from(const kmg_args &a, int mode, int moved, int nempty, const double *clus,
						const kmg_fin_reads &r)
{
	__shared__ double fred[32];
	__shared__ float fmax_[32];
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	const int	nw = blockDim.x >> 5;
	const int	dp = a.dp,
				k = a.k;
	const int	cw = KMG_CW(dp);
	const int	change = mode == KMG_FIN_SETUP || (moved > 0 && nempty == 0);
	double		est = 0.0;
	float		cmax = 0.0f;
	int			allx = 0;
	const uint32_t relmask = __ballot_sync(0xffffffffu, r.rel != 0);
	const float mu0 = r.mu0;

	if (mode != KMG_FIN_SETUP)
		for (int jj = tid; jj < k; jj += blockDim.x)
			est += clus[(size_t) jj * cw + dp + 2];

	if (change)
		for (int j = warp, q = 0; j < k; j += nw, q++)
		{
			const double w = mode != KMG_FIN_SETUP ? clus[(size_t) j * cw + dp] : 0.0;
			const int	fresh = mode != KMG_FIN_SETUP && !((relmask >> q) & 1u) && w > 0.0;

			cmax = fmaxf(cmax, kmg_fin_cluster(a, j, fresh, w, clus, mu0, allx, kmg_fin_out_of(a)));
		}

	/* the decisions */
	if (a.reloc != NULL)
	{
		__syncthreads();		/* every warp has read its flags */
		for (int jj = tid; jj < k; jj += blockDim.x)
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
	allx = __syncthreads_or(allx);	/* a barrier: the warps' slots are visible */
	if (tid != 0)
		return;
	cmax = fmax_[0];
	est = fred[0];
	for (int wv = 1; wv < nw; wv++)
	{
		cmax = fmaxf(cmax, fmax_[wv]);
		est += fred[wv];
	}
	kmg_fin_decide(a, mode, moved, nempty, change, cmax, allx, est, r.snap, r.nlist);
}

/* The same for callers with nothing of their own to read: one copy in each kernel's code. */
static __device__ __noinline__ void
kmg_finalize_block(const kmg_args &a, int mode, int moved, int nempty, const double *clus)
{
	kmg_fin_reads r;

	kmg_fin_read(a, mode, r);
	kmg_finalize_block_from(a, mode, moved, nempty, clus, r);
}

#endif							/* KMG_FINALIZE_BLOCK_CUH */
