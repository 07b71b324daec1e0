/*
 * gpu_fit.cu
 *	  The drivers: a fit (prepare, seed, Lloyd, final pass, best of n_init)
 *	  and assign/map on rows already on the device.
 *
 * All the work of a run stays on the device.  The host queues Lloyd
 * iterations in batches; every kernel of an iteration first looks at the
 * run's control block and returns at once once the run has stopped, so a
 * batch that runs past convergence costs only launch overhead.  Between
 * batches the host reads the control block and the per-iteration
 * statistics (a few hundred bytes), reports each finished iteration, polls
 * for cancellation, and re-seeds empty clusters when an iteration paused
 * for that (rare).  Two batches are in flight so the device never waits for
 * the host; batches are sized to last well under 0.2 s.  The small-k path
 * (one fused kernel, a reduction and a finalize) is captured once into a
 * CUDA graph of several iterations, which cuts the launch gaps.
 *
 * Per iteration (the kernels of kmg_assign_pass are those of the plan
 * assign/dispatch.cu made for the shape):
 *	small k:      kmg_assign_pass: the narrow kernel alone (its last block
 *	              ends the iteration), or the wide or direct kernel ->
 *	              kmg_reduce_finalize (whose last block ends the iteration)
 *	otherwise:    kmg_assign_pass: km_filter_prepare -> km_filter_top2
 *	              (skipped when the run has stopped) -> kmg_classify ->
 *	              kmg_exact_refine; then kmg_sort_labels -> kmg_segment ->
 *	              kmg_finalize
 * Once per call, kmg_rows_setup decides the l2 centring of the narrow and
 * wide passes and the scales of the order-free sums.  KMG_VERBOSE=1 in the
 * environment traces every batch and iteration on stderr.
 *
 * Device memory is computed first (kmg_fit_bytes, the same layout the
 * allocation uses), checked against cudaMemGetInfo, and taken in one
 * cudaMalloc that every exit path frees.
 */
#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "seed/seed.cuh"
#include "seed/seed_pp.h"
#include "update/update.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
kmg_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* Carving one allocation into buffers (base NULL: only count). */
typedef struct kmg_carver
{
	char	   *base;
	size_t		off;
} kmg_carver;

static void *
kmg_carve(kmg_carver *c, size_t bytes)
{
	size_t		o = KMG_ROUND_UP(c->off, 256);

	c->off = o + (bytes > 0 ? bytes : 1);
	return c->base != NULL ? (void *) (c->base + o) : NULL;
}

/* The shape of a call and the buffers it needs. */
typedef struct kmg_shape
{
	int64_t		n;
	int			d;
	int			dp;
	int			k;
	int			kp;
	int			cosine;
	int			fit;			/* fit (else assign/map) */
	int			copy_rows;		/* cosine into a separate copy */
	int			hashes;			/* random or k-means++ seeding */
	int			pp;				/* k-means++ */
	int			L;				/* k-means++ candidates per step */
	int			sums;			/* map: per-cluster sums */
	int			max_iter;
	kmg_assign_plan plan;		/* the assignment kernels (assign/dispatch.cu) */
	int			centrable;		/* l2 on a fused pass that centres (narrow, wide) */
	size_t		sort_bytes;
	int			seed_blocks;
	int			dq;				/* k-means++ int8 shadow row bytes; 0: none */
} kmg_shape;

typedef struct kmg_work
{
	kmg_args	a;
	float	   *Xn;				/* cosine copy, or NULL */
	int32_t    *iota;
	double	   *keys_out;
	int32_t    *rows_out;
	void	   *sort_temp;
	void	   *filter_work;
	float	   *xscratch;		/* k floats */
	float	   *mu;				/* dp floats: the centring, when centrable */
	void	   *stats_work;
	kmg_seed_bufs sb;
	int			pp_shift;		/* scale of the k-means++ potentials (seed_pp.h) */
} kmg_work;

static size_t
kmg_layout(const kmg_shape *sh, char *base, kmg_work *w)
{
	kmg_carver	c = {base, 0};
	const int64_t n = sh->n;
	const int	k = sh->k,
				kp = sh->kp,
				dp = sh->dp;
	const int	cw = KMG_CW(dp);
	kmg_work	dummy;

	if (w == NULL)
		w = &dummy;
	memset(w, 0, sizeof(*w));
	w->Xn = sh->copy_rows ? (float *) kmg_carve(&c, (size_t) n * dp * sizeof(float)) : NULL;
	w->a.xnorm = (const float *) kmg_carve(&c, (size_t) n * sizeof(float));
	w->a.labels = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
	w->a.cost = (double *) kmg_carve(&c, (size_t) n * sizeof(double));
	if (!kmg_plan_fused(&sh->plan))
	{
		w->a.best = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
		w->a.fbest = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
		w->a.fsecond = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
		w->a.amb = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
		w->filter_work = kmg_carve(&c, km_filter_work_bytes(kp, dp));
	}
	w->a.skeys = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
	w->a.svals = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
	w->iota = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
	if (sh->fit)
	{
		w->keys_out = (double *) kmg_carve(&c, (size_t) n * sizeof(double));
		w->rows_out = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
	}
	w->sort_temp = kmg_carve(&c, sh->sort_bytes);

	w->a.C = (float *) kmg_carve(&c, (size_t) kp * dp * sizeof(float));
	w->a.Cf = sh->cosine || sh->centrable ? (float *) kmg_carve(&c, (size_t) kp * dp * sizeof(float))
		: w->a.C;
	w->mu = sh->centrable ? (float *) kmg_carve(&c, (size_t) dp * sizeof(float)) : NULL;
	w->stats_work = kmg_carve(&c, kmg_stats_bytes(n, dp));
	w->a.cn = (float *) kmg_carve(&c, (size_t) kp * sizeof(float));
	w->a.cnf = (float *) kmg_carve(&c, (size_t) k * sizeof(float));
	w->a.cnorm = (double *) kmg_carve(&c, (size_t) k * sizeof(double));
	w->xscratch = (float *) kmg_carve(&c, (size_t) k * sizeof(float));
	w->a.clus = (double *) kmg_carve(&c, (size_t) k * cw * sizeof(double));
	w->a.maxpieces = kmg_max_pieces(n, k);
	w->a.bounds = (int2 *) kmg_carve(&c, (size_t) k * sizeof(int2));
	w->a.pclus = (int2 *) kmg_carve(&c, (size_t) k * sizeof(int2));
	w->a.ptab = (int4 *) kmg_carve(&c, (size_t) w->a.maxpieces * sizeof(int4));
	w->a.npieces = (int *) kmg_carve(&c, sizeof(int));
	w->a.pdone = (int *) kmg_carve(&c, (size_t) k * sizeof(int));
	w->a.ppart = (double *) kmg_carve(&c, (size_t) w->a.maxpieces * cw * sizeof(double));
	if (!kmg_plan_fused(&sh->plan))
	{
		w->a.xcap = kmg_exact_cap(n);
		w->a.fbn = km_filter_tile_cols(sh->plan.ftile);
		w->a.fwork = (const float *) w->filter_work;
		w->a.xchunks = (k + w->a.fbn - 1) / w->a.fbn;
		w->a.xcost = (double *) kmg_carve(&c, (size_t) w->a.xcap * w->a.xchunks * sizeof(double));
		w->a.xidx = (int32_t *) kmg_carve(&c, (size_t) w->a.xcap * w->a.xchunks * sizeof(int32_t));
	}
	w->a.reloc = (int *) kmg_carve(&c, (size_t) k * sizeof(int));
	w->a.empties = (int32_t *) kmg_carve(&c, (size_t) k * sizeof(int32_t));
	if (kmg_plan_fused(&sh->plan))
	{
		w->a.part = (double *) kmg_carve(&c, (size_t) sh->plan.nblocks * k * cw * sizeof(double));
		w->a.part_moved = (int *) kmg_carve(&c, (size_t) sh->plan.nblocks * sizeof(int));
		w->a.nblocks = sh->plan.nblocks;
		if (sh->plan.path == KMG_PATH_NARROW)
			w->a.nfix = (unsigned long long *) kmg_carve(&c, kmg_narrow_fix_bytes(k, sh->d));
		if (sh->plan.path == KMG_PATH_WIDE)
		{
			w->a.wrow = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
			w->a.wmask = (uint32_t *) kmg_carve(&c, (size_t) n * sizeof(uint32_t));
			w->a.wcount = (int *) kmg_carve(&c, (size_t) sh->plan.nblocks * sizeof(int));
		}
	}
	w->a.ctl = (kmg_ctl *) kmg_carve(&c, sizeof(kmg_ctl));
	w->a.stats = (kmg_stat *) kmg_carve(&c, (size_t) (sh->max_iter + 1) * sizeof(kmg_stat));
	if (sh->hashes)
		w->sb.hashes = (uint64_t *) kmg_carve(&c, (size_t) n * sizeof(uint64_t));
	if (sh->pp)
	{
		w->sb.d2 = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
		if (sh->dq > 0)
		{
			w->sb.q8 = (signed char *) kmg_carve(&c, (size_t) n * sh->dq);
			w->sb.qn = (int *) kmg_carve(&c, (size_t) n * sizeof(int));
			w->sb.qr = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
		}
		w->sb.dq = sh->dq;
		kmg_pp_carve(&w->sb, (char *) kmg_carve(&c, kmg_pp_fixed_bytes(sh->seed_blocks, sh->L)),
					 sh->seed_blocks, sh->L);
	}
	return c.off + 256;
}

/*
 * The shape of a call; dev == NULL estimates without the device (H100/H200
 * limits) for fit_device_bytes.
 */
static void
kmg_make_shape(kmg_shape *sh, int64_t n, int d, int k, int cosine, int fit, int copy_rows,
			   const km_params *params, int sums, const kmg_device *dev)
{
	const int	sms = dev != NULL ? dev->sms : 132;

	memset(sh, 0, sizeof(*sh));
	sh->n = n;
	sh->d = d;
	sh->dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	sh->k = k;
	sh->kp = km_filter_kpad(k);
	sh->cosine = cosine;
	sh->fit = fit;
	sh->copy_rows = cosine && copy_rows;
	sh->hashes = fit && (params == NULL || params->init != KM_INIT_EXPLICIT);
	sh->pp = fit && (params == NULL || params->init == KM_INIT_KMEANSPP);
	sh->L = 2 + (int) log((double) k);
	if (sh->L > KMG_PP_LMAX)
		sh->L = KMG_PP_LMAX;
	sh->sums = sums;
	sh->max_iter = params != NULL ? params->max_iter : 1;
	sh->plan = kmg_assign_make_plan(n, d, sh->dp, k, fit ? KMG_MODE_ITER : KMG_MODE_LABELS, dev);
	sh->centrable = !cosine &&
		(sh->plan.path == KMG_PATH_NARROW || sh->plan.path == KMG_PATH_WIDE);
	{
		/* k-means++ units: tiles of 128 rows, at most 8 blocks an SM, 1024 in all */
		int64_t		b = (n + 127) / 128;

		if (b > (int64_t) sms * 8)
			b = (int64_t) sms * 8;
		if (b > 1024)
			b = 1024;
		sh->seed_blocks = (int) (b < 1 ? 1 : b);
		sh->dq = sh->pp && getenv("KMG_PP_NOSHADOW") == NULL ? kmg_pp_dq(sh->dp) : 0;
	}
	/* CUB's scratch: asked for when the device is up, else a safe guess */
	if (dev != NULL)
		sh->sort_bytes = kmg_sort_temp_bytes(n, k);
	else
		sh->sort_bytes = (size_t) n * 8 + ((size_t) 64 << 20);
}

/*
 * After the rows are prepared (kmg_prep_rows), once per call: the l2
 * centring of the fused passes that take it (mu = the rows' mean, rounded
 * to float, used when |mu|^2 > mean |x|^2 / 16, as the CPU engine decides)
 * and, for a fit, the scale of the order-free inertia of the final pass
 * (the CPU engine's: km_fix_scale(max w * (cosine ? 2 : 4 max |x|^2) * 1.01,
 * n)).  Synchronises the stream.
 */
static cudaError_t
kmg_rows_setup(const kmg_shape *sh, kmg_work *w, int fit, cudaStream_t s)
{
	kmg_row_stats st;
	double	   *colsum = NULL;
	cudaError_t e;

	w->a.mu = NULL;
	w->a.ishift = KM_FIX_UNSET;
	if (sh->centrable)
	{
		colsum = (double *) malloc(sizeof(double) * sh->dp);
		if (colsum == NULL)
			return cudaErrorMemoryAllocation;
	}
	e = kmg_row_stats_run(w->a.X, w->a.W, sh->n, sh->d, sh->dp, sh->centrable,
						  w->stats_work, colsum, &st, s);
	if (e == cudaSuccess && sh->centrable)
	{
		float	   *mu = (float *) calloc(sh->dp, sizeof(float));
		double		m2 = 0.0;

		if (mu == NULL)
			e = cudaErrorMemoryAllocation;
		else
		{
			for (int i = 0; i < sh->d; i++)
			{
				mu[i] = (float) (colsum[i] / (double) sh->n);
				m2 += (double) mu[i] * mu[i];
			}
			if (m2 * 16.0 > st.sqsum / (double) sh->n)
			{
				e = cudaMemcpyAsync(w->mu, mu, sizeof(float) * sh->dp, cudaMemcpyHostToDevice, s);
				if (e == cudaSuccess)
					e = cudaStreamSynchronize(s);
				if (e == cudaSuccess)
				{
					w->a.mu = w->mu;
					if (sh->plan.path == KMG_PATH_WIDE)
						e = kmg_centred_norms(w->a.X, w->mu, sh->n, sh->d, sh->dp,
											  (float *) w->a.xnorm, s);
				}
			}
			free(mu);
		}
	}
	free(colsum);
	/* not centred (or cosine): l2 filters the centroids themselves */
	if (!sh->cosine && w->a.mu == NULL)
		w->a.Cf = w->a.C;
	if (e == cudaSuccess && fit)
		w->a.ishift = km_fix_scale((double) st.wmax *
								   (sh->cosine ? 2.0 : 4.0 * (double) st.xmax2) * 1.01 + 1e-300,
								   sh->n).shift;
	/* the narrow pass's order-free sums: |sum w x| <= n max w max |x| */
	w->a.sshift = km_fix_scale((double) st.wmax * (double) st.xabsmax * 1.01 + 1e-300, sh->n).shift;
	w->a.wshift = km_fix_scale((double) st.wmax * 1.01 + 1e-300, sh->n).shift;
	/* k-means++ potentials: terms w D2 <= wmax 4 xmax2 (seed_pp.h) */
	w->pp_shift = kmg_pp_shift(st.wmax, st.xmax2, sh->n);
	return e;
}

uint64_t
kmg_fit_bytes(int64_t n, int d, int k, km_metric metric, int copy_rows)
{
	kmg_shape	sh;
	km_params	p;

	memset(&p, 0, sizeof(p));
	p.init = KM_INIT_KMEANSPP;
	p.max_iter = 10000;
	kmg_make_shape(&sh, n, d, k, metric == KM_METRIC_COSINE, 1, copy_rows, &p, 0, NULL);
	return kmg_layout(&sh, NULL, NULL) + ((uint64_t) 16 << 20);
}

uint64_t
kmg_assign_bytes(int64_t batch_rows, int d, int k)
{
	kmg_shape	sh;

	kmg_make_shape(&sh, batch_rows, d, k, 1, 0, 0, NULL, 1, NULL);
	return kmg_layout(&sh, NULL, NULL) + ((uint64_t) 16 << 20);
}

/* Everything a fit keeps between its steps. */
typedef struct kmg_fit
{
	kmg_shape	sh;
	kmg_work	w;
	cudaStream_t s;
	cudaEvent_t ev[2];
	cudaGraphExec_t graph;		/* graph_iters iterations, or NULL */
	int			graph_iters;
	cudaGraphExec_t ppgraph;	/* KMG_PP_GRAPH k-means++ units, or NULL */
	void	   *arena;
	char	   *pin;			/* pinned snapshots: 2 x (ctl + stats) */
	size_t		snap_bytes;
	const km_hooks *hooks;
	const km_params *params;
	double		t0;
} kmg_fit;

#define KMG_GRAPH_ITERS 4

/* k-means++ units per captured graph */
#define KMG_PP_GRAPH 16

/* The kernels of one Lloyd iteration. */
static cudaError_t
kmg_enqueue_iteration(kmg_fit *f)
{
	const kmg_args *a = &f->w.a;
	cudaError_t e;

	if ((e = kmg_assign_pass(a, &f->sh.plan, KMG_MODE_ITER, f->w.filter_work, f->s)) != cudaSuccess ||
		kmg_plan_fused(&f->sh.plan))
		return e;				/* a fused pass ends the iteration itself */
	if ((e = kmg_sort_labels(a, f->w.iota, f->w.sort_temp, f->sh.sort_bytes, f->s)) != cudaSuccess ||
		(e = kmg_segment(a, KMG_MODE_ITER, 1, f->s)) != cudaSuccess)
		return e;
	return kmg_finalize(a, KMG_FIN_ITER, f->s);
}

/* Exact labels for the current centroids (no Lloyd bookkeeping). */
static cudaError_t
kmg_enqueue_labels(const kmg_shape *sh, const kmg_work *w, cudaStream_t s)
{
	kmg_args	a = w->a;

	a.lloyd = 0;
	return kmg_assign_pass(&a, &sh->plan, KMG_MODE_LABELS, w->filter_work, s);
}

/* Re-seed the empty clusters of the paused iteration, then finish it. */
static cudaError_t
kmg_enqueue_reseed(kmg_fit *f)
{
	kmg_args	a = f->w.a;
	cudaError_t e;

	a.lloyd = 0;
	if ((e = kmg_row_costs(&a, f->s)) != cudaSuccess ||
		(e = kmg_sort_costs_desc(a.cost, f->w.keys_out, f->w.iota, f->w.rows_out, a.n,
								 f->w.sort_temp, f->sh.sort_bytes, f->s)) != cudaSuccess ||
		(e = kmg_reseed(&a, f->w.rows_out, f->s)) != cudaSuccess)
		return e;
	return kmg_finalize(&a, KMG_FIN_RESEED, f->s);
}

static int
kmg_report(const kmg_fit *f, km_progress *p)
{
	if (f->hooks == NULL || f->hooks->report == NULL)
		return 0;
	p->elapsed = kmg_now() - f->t0;
	return f->hooks->report(f->hooks->ctx, p);
}

static int
kmg_poll(const km_hooks *hooks)
{
	return hooks != NULL && hooks->poll != NULL && hooks->poll(hooks->ctx) != 0;
}

/* Initial centroids of a run into C (filter rows: cosine normalised). */
static km_status
kmg_seed(kmg_fit *f, int run, km_error *err)
{
	const km_params *p = f->params;
	const kmg_args *a = &f->w.a;
	km_status	st = KM_OK;
	const int	k = a->k;

	KMG_CK(cudaMemsetAsync(a->C, 0, (size_t) a->kp * a->dp * sizeof(float), f->s));
	if (a->Cf != a->C)
		KMG_CK(cudaMemsetAsync(a->Cf, 0, (size_t) a->kp * a->dp * sizeof(float), f->s));
	if (p->init == KM_INIT_EXPLICIT)
	{
		KMG_CK(cudaMemcpy2DAsync(a->C, (size_t) a->dp * sizeof(float), p->init_centroids,
								 (size_t) a->d * sizeof(float), (size_t) a->d * sizeof(float),
								 k, cudaMemcpyHostToDevice, f->s));
		if (a->cosine)
			KMG_CK(kmg_prep_rows(a->C, NULL, k, a->d, a->dp, 1, a->C, f->w.xscratch, NULL, f->s));
	}
	else if (p->init == KM_INIT_RANDOM)
	{
		KMG_CK(kmg_seed_random_keys(a, f->w.sb.hashes, km_stream(p->seed, run, 0), a->cost, f->s));
		KMG_CK(kmg_sort_keys_asc(a->cost, f->w.keys_out, f->w.iota, f->w.rows_out, a->n,
								 f->w.sort_temp, f->sh.sort_bytes, f->s));
		KMG_CK(kmg_take_rows(a, f->w.rows_out, k, 0, f->s));
	}
	else
	{
		/*
		 * k-means++ (seed.cu): units are queued in batches, two in flight;
		 * after each batch the head of the device state (a few bytes) says
		 * how far the seeding got, so the host reports, polls, sizes the
		 * next batch to about 50 ms, and queues exactly the units still
		 * needed (one a step, plus a SELECT where a threshold missed).
		 */
		const kmg_seed_bufs *sb = &f->w.sb;
		const char *venv = getenv("KMG_VERBOSE");
		const int	verbose = venv != NULL && venv[0] == '1';
		const double t0 = kmg_now();
		double		last = t0,
					last_done = 0.0;
		int64_t		queued = 0,		/* units queued after kmg_pp_begin */
					known = 0,		/* of which the last snapshot has seen */
					need = k - 1;	/* units still needed after those */
		int64_t		bq[2] = {0, 0};
		int			bm[2] = {0, 0};
		double		bt[2] = {0, 0};
		int			inflight = 0,
					head = 0,
					batch = 32;
		kmg_pp_head h;

		memset(&h, 0, sizeof(h));
		KMG_CK(kmg_pp_begin(a, sb, p->seed, run, f->w.pp_shift, f->s));
		for (;;)
		{
			while (inflight < 2)
			{
				const int64_t want = known + need - queued;
				const int	slot = (head + inflight) % 2;
				int			m,
							i = 0;

				if (want <= 0)
					break;
				m = (int) (want < batch ? want : batch);
				while (i < m)
				{
					if (f->ppgraph != NULL && m - i >= KMG_PP_GRAPH)
					{
						KMG_CK(cudaGraphLaunch(f->ppgraph, f->s));
						i += KMG_PP_GRAPH;
					}
					else
					{
						KMG_CK(kmg_pp_units(a, sb, 1, f->s));
						i++;
					}
				}
				queued += m;
				KMG_CK(cudaMemcpyAsync(f->pin + slot * f->snap_bytes, sb->state, sizeof(kmg_pp_head),
									   cudaMemcpyDeviceToHost, f->s));
				KMG_CK(cudaEventRecord(f->ev[slot], f->s));
				bq[slot] = queued;
				bm[slot] = m;
				bt[slot] = kmg_now();
				inflight++;
			}
			if (inflight == 0)
				break;
			KMG_CK(cudaEventSynchronize(f->ev[head]));
			memcpy(&h, f->pin + head * f->snap_bytes, sizeof(h));
			known = bq[head];
			need = h.s >= k ? 0 : (int64_t) (k - h.s) + (h.phase == KMG_PP_SELECT ? 1 : 0);
			{
				/* the queue was kept full: a batch took the time since the last one */
				const double now = kmg_now();
				const double dt = now - (last_done > 0.0 ? last_done : bt[head]);

				if (bm[head] >= 16 && dt > 0.0)
				{
					int			want = (int) (0.05 * bm[head] / dt);

					want = want / KMG_PP_GRAPH * KMG_PP_GRAPH;
					batch = want < 32 ? 32 : want > 8192 ? 8192 : want;
				}
				last_done = now;
			}
			head = (head + 1) % 2;
			inflight--;
			if (h.s < k && kmg_now() - last >= 0.5)
			{
				km_progress pr;

				memset(&pr, 0, sizeof(pr));
				pr.phase = KM_PHASE_SEED;
				pr.run = run;
				pr.done = h.s;
				pr.total = k;
				last = kmg_now();
				if (kmg_report(f, &pr))
					return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			}
			if (kmg_poll(f->hooks))
				return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
		}
		if (verbose)
			fprintf(stderr, "kmg: k-means++ run %d: %d centroids in %.3f ms, %d units (%d SELECT after a missed threshold, "
					"%d filtered, %d dense, %u exact pairs in the filtered ones), grid %d x %d, L %d, dq %d\n",
					run, k, 1e3 * (kmg_now() - t0), h.units, h.selects, h.filtered, h.dense,
					h.pairs_lo, sb->grid, 128, sb->L, sb->q8 != NULL ? sb->dq : 0);
		{
			km_progress pr;

			memset(&pr, 0, sizeof(pr));
			pr.phase = KM_PHASE_SEED;
			pr.run = run;
			pr.done = k;
			pr.total = k;
			if (kmg_report(f, &pr))
				return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
		}
	}
done:
	return st;
}

/*
 * Capture iterations into a graph (KMG_GRAPH_ITERS for the small-k path, one
 * for the filter path, whose kernels are long); f->graph stays NULL if the
 * capture fails, and the iterations are then launched one by one.  Relaxed
 * mode: the filter's launcher sets a function attribute as it goes.
 */
static void
kmg_make_graph(kmg_fit *f)
{
	cudaGraph_t g = NULL;
	cudaError_t e;

	f->graph = NULL;
	f->graph_iters = kmg_plan_fused(&f->sh.plan) ? KMG_GRAPH_ITERS : 1;
	if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return;
	}
	e = cudaSuccess;
	for (int i = 0; i < f->graph_iters && e == cudaSuccess; i++)
		e = kmg_enqueue_iteration(f);
	if (cudaStreamEndCapture(f->s, &g) != cudaSuccess || e != cudaSuccess || g == NULL ||
		cudaGraphInstantiate(&f->graph, g, 0) != cudaSuccess)
	{
		f->graph = NULL;
		(void) cudaGetLastError();
	}
	if (g != NULL)
		(void) cudaGraphDestroy(g);
}

/* Capture KMG_PP_GRAPH k-means++ units (NULL on failure: units go one by one). */
static void
kmg_make_pp_graph(kmg_fit *f)
{
	cudaGraph_t g = NULL;
	cudaError_t e;

	f->ppgraph = NULL;
	if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return;
	}
	e = kmg_pp_units(&f->w.a, &f->w.sb, KMG_PP_GRAPH, f->s);
	if (cudaStreamEndCapture(f->s, &g) != cudaSuccess || e != cudaSuccess || g == NULL ||
		cudaGraphInstantiate(&f->ppgraph, g, 0) != cudaSuccess)
	{
		f->ppgraph = NULL;
		(void) cudaGetLastError();
	}
	if (g != NULL)
		(void) cudaGraphDestroy(g);
}

/*
 * Lloyd iterations of one run (see the file header).  On return *stop says
 * why it ended and *iters how many iterations ran.
 */
static km_status
kmg_lloyd(kmg_fit *f, int run, int *stop_out, int *iters_out, int *relocated, km_error *err)
{
	const km_params *p = f->params;
	const int	max_iter = p->max_iter;
	km_status	st = KM_OK;
	int			enq = 0;		/* iteration slots queued since the last sync */
	int			done_iters = 0; /* as of the last snapshot */
	int			reported = 0;
	int			inflight = 0;
	int			head = 0;		/* oldest snapshot slot in flight */
	int			batch = kmg_plan_fused(&f->sh.plan) ? KMG_GRAPH_ITERS : 1;
	int			finished = 0;
	int			batch_sz[2] = {0, 0};
	double		batch_t[2] = {0, 0};
	double		last_done = 0.0;
	/* KMG_VERBOSE=1: each batch and iteration on stderr (development) */
	const char *venv = getenv("KMG_VERBOSE");
	const int	verbose = venv != NULL && venv[0] == '1';
	double		vlast = kmg_now();

	*stop_out = KMG_RUN;
	*iters_out = 0;
	while (!finished)
	{
		/* keep two batches in flight */
		while (inflight < 2 && done_iters + enq < max_iter)
		{
			const int	slot = (head + inflight) % 2;
			int			m = batch;
			kmg_ctl    *snap = (kmg_ctl *) (f->pin + slot * f->snap_bytes);

			if (m > max_iter - done_iters - enq)
				m = max_iter - done_iters - enq;
			for (int i = 0; i < m;)
			{
				if (f->graph != NULL && m - i >= f->graph_iters)
				{
					KMG_CK(cudaGraphLaunch(f->graph, f->s));
					i += f->graph_iters;
				}
				else
				{
					KMG_CK(kmg_enqueue_iteration(f));
					i++;
				}
			}
			KMG_CK(cudaMemcpyAsync(snap, f->w.a.ctl, sizeof(kmg_ctl), cudaMemcpyDeviceToHost, f->s));
			KMG_CK(cudaMemcpyAsync((char *) snap + sizeof(kmg_ctl), f->w.a.stats,
								   (size_t) max_iter * sizeof(kmg_stat), cudaMemcpyDeviceToHost,
								   f->s));
			KMG_CK(cudaEventRecord(f->ev[slot], f->s));
			batch_sz[slot] = m;
			batch_t[slot] = kmg_now();
			enq += m;
			inflight++;
		}
		if (inflight == 0)
			break;

		/* the oldest batch */
		{
			const int	slot = head;
			const kmg_ctl *snap = (const kmg_ctl *) (f->pin + slot * f->snap_bytes);
			const kmg_stat *stats = (const kmg_stat *) ((const char *) snap + sizeof(kmg_ctl));
			int			stop;

			KMG_CK(cudaEventSynchronize(f->ev[slot]));
			head = (head + 1) % 2;
			inflight--;
			stop = snap->stop;
			if (verbose)
			{
				const double now = kmg_now();

				fprintf(stderr, "kmg: batch of %d done, %.3f ms since the last, ctl iter %d stop %d\n",
						batch_sz[slot], 1e3 * (now - vlast), snap->iter, stop);
				for (int t = reported; t < snap->iter; t++)
					fprintf(stderr, "kmg:   iter %d moved %d exact %d relocated %d stop %d\n", t + 1,
							stats[t].moved, stats[t].ambiguous, stats[t].relocated, stats[t].stop);
				vlast = now;
			}

			/*
			 * Size later batches to about 50 ms of work: the queue is kept
			 * full, so the time between two completions is one batch.
			 */
			{
				const double now = kmg_now();
				const double since = last_done > 0.0 ? last_done : batch_t[slot];

				if (kmg_plan_fused(&f->sh.plan) && batch_sz[slot] > 0)
				{
					double		per = (now - since) / batch_sz[slot];
					int			want = per > 0.0 ? (int) (0.05 / per) : 64;

					want = want / KMG_GRAPH_ITERS * KMG_GRAPH_ITERS;
					if (want > 64)
						want = 64;
					if (want > batch)
						batch = want;
				}
				last_done = now;
			}

			for (; reported < snap->iter; reported++)
			{
				km_progress pr;

				memset(&pr, 0, sizeof(pr));
				pr.phase = KM_PHASE_ITERATE;
				pr.run = run;
				pr.iteration = reported + 1;
				pr.done = reported + 1;
				pr.total = max_iter;
				pr.inertia = stats[reported].inertia;
				pr.moved = stats[reported].moved_frac;
				pr.relocated = stats[reported].relocated;
				*relocated += stats[reported].relocated;
				if (kmg_report(f, &pr))
				{
					st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
					goto done;
				}
			}
			if (kmg_poll(f->hooks))
			{
				st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
				goto done;
			}

			if (stop == KMG_PAUSE_EMPTY)
			{
				kmg_ctl		c;

				/* drain (queued iterations are no-ops now), re-seed, go on */
				double		vt0 = kmg_now();

				KMG_CK(cudaStreamSynchronize(f->s));
				inflight = 0;
				head = 0;
				KMG_CK(kmg_enqueue_reseed(f));
				KMG_CK(cudaMemcpyAsync(f->pin, f->w.a.ctl, sizeof(kmg_ctl), cudaMemcpyDeviceToHost,
									   f->s));
				KMG_CK(cudaMemcpyAsync(f->pin + sizeof(kmg_ctl), f->w.a.stats,
									   (size_t) max_iter * sizeof(kmg_stat),
									   cudaMemcpyDeviceToHost, f->s));
				KMG_CK(cudaStreamSynchronize(f->s));
				memcpy(&c, f->pin, sizeof(c));
				stats = (const kmg_stat *) (f->pin + sizeof(kmg_ctl));
				if (verbose)
				{
					fprintf(stderr, "kmg: re-seed of %d empty clusters after iteration %d: %.3f ms\n",
							stats[c.iter > 0 ? c.iter - 1 : 0].relocated, c.iter, 1e3 * (kmg_now() - vt0));
					vlast = kmg_now();
				}
				for (; reported < c.iter; reported++)
				{
					km_progress pr;

					memset(&pr, 0, sizeof(pr));
					pr.phase = KM_PHASE_ITERATE;
					pr.run = run;
					pr.iteration = reported + 1;
					pr.done = reported + 1;
					pr.total = max_iter;
					pr.inertia = stats[reported].inertia;
					pr.moved = stats[reported].moved_frac;
					pr.relocated = stats[reported].relocated;
					*relocated += stats[reported].relocated;
					if (kmg_report(f, &pr))
					{
						st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
						goto done;
					}
				}
				done_iters = c.iter;
				enq = 0;
				if (c.stop != KMG_RUN)
				{
					*stop_out = c.stop;
					finished = 1;
				}
				continue;
			}
			if (stop != KMG_RUN)
			{
				*stop_out = stop;
				finished = 1;
				KMG_CK(cudaStreamSynchronize(f->s));
				inflight = 0;
				done_iters = snap->iter;
				enq = 0;
				break;
			}
			/* the batch ran all its iterations */
			done_iters += batch_sz[slot];
			enq -= batch_sz[slot];
		}
	}
	if (*stop_out == KMG_RUN)
		*stop_out = KMG_STOP_MAXITER;
	*iters_out = reported;
done:
	return st;
}

/*
 * Validate the parameters of a fit.
 */
static km_status
kmg_check_params(const kmg_rows *rows, const km_params *p, km_error *err)
{
	if (p == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no parameters");
	if (p->k < 1 || p->k > rows->n)
		return kmg_set_error(err, KM_ERR_INVALID, "k = %d must be between 1 and the %lld rows",
							 p->k, (long long) rows->n);
	if (p->max_iter < 1 || p->n_init < 1)
		return kmg_set_error(err, KM_ERR_INVALID, "max_iter and n_init must be at least 1");
	if (!(p->tol >= 0.0))
		return kmg_set_error(err, KM_ERR_INVALID, "tol must be >= 0");
	if (p->metric != KM_METRIC_L2 && p->metric != KM_METRIC_COSINE)
		return kmg_set_error(err, KM_ERR_INVALID, "unknown metric");
	if (p->init != KM_INIT_KMEANSPP && p->init != KM_INIT_RANDOM && p->init != KM_INIT_EXPLICIT)
		return kmg_set_error(err, KM_ERR_INVALID, "unknown init");
	if (p->init == KM_INIT_EXPLICIT && p->init_centroids == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "explicit init without centroids");
	return KM_OK;
}

/* One cudaMalloc for the whole call, after checking what is free. */
static km_status
kmg_alloc_arena(void **arena, size_t bytes, const char *what, km_error *err)
{
	size_t		freeb = 0,
				total = 0;
	cudaError_t e;

	*arena = NULL;
	e = cudaMemGetInfo(&freeb, &total);
	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaMemGetInfo");
	if (bytes > freeb)
		return kmg_set_error(err, KM_ERR_DEVICE_NOMEM,
							 "out of GPU memory: %s needs %zu bytes, %zu free", what, bytes, freeb);
	e = cudaMalloc(arena, bytes);
	if (e == cudaErrorMemoryAllocation)
	{
		(void) cudaGetLastError();
		*arena = NULL;
		return kmg_set_error(err, KM_ERR_DEVICE_NOMEM,
							 "out of GPU memory: %s needs %zu bytes", what, bytes);
	}
	if (e != cudaSuccess)
	{
		*arena = NULL;
		return kmg_cuda_error(err, e, "cudaMalloc");
	}
	return KM_OK;
}

km_status
kmg_fit_rows(const kmg_rows *rows, const km_params *params, const km_hooks *hooks,
			 km_result *result, km_error *err)
{
	kmg_fit		f;
	km_status	st;
	const kmg_device *dev = kmg_dev();
	float	   *hC = NULL;
	double	   *hcl = NULL;
	double		best_inertia = 0.0;
	size_t		bytes;
	const char *seed_env = getenv("KMG_SEED_ONLY");
	const int	seed_only = seed_env != NULL && seed_env[0] == '1';

	memset(&f, 0, sizeof(f));
	f.t0 = kmg_now();
	f.hooks = hooks;
	f.params = params;
	if ((st = kmg_check_params(rows, params, err)) != KM_OK)
		return st;
	if (result == NULL || result->centroids == NULL || result->sizes == NULL ||
		result->cluster_inertia == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no result arrays");

	kmg_make_shape(&f.sh, rows->n, rows->d, params->k, params->metric == KM_METRIC_COSINE, 1,
				   !rows->in_place, params, 0, dev);
	KMG_CK(kmg_assign_prepare(&f.sh.plan, dev));
	bytes = kmg_layout(&f.sh, NULL, NULL);
	if ((st = kmg_alloc_arena(&f.arena, bytes, "the fit", err)) != KM_OK)
		goto done;
	kmg_layout(&f.sh, (char *) f.arena, &f.w);

	/* the rows as the kernels see them */
	f.w.a.X = f.sh.cosine ? (f.sh.copy_rows ? f.w.Xn : rows->X) : rows->X;
	f.w.a.W = rows->W;
	f.w.a.n = rows->n;
	f.w.a.d = rows->d;
	f.w.a.dp = rows->dp;
	f.w.a.cosine = f.sh.cosine;
	f.w.a.lloyd = 1;
	f.w.a.k = params->k;
	f.w.a.kp = f.sh.kp;

	KMG_CK(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking));
	KMG_CK(cudaEventCreateWithFlags(&f.ev[0], cudaEventDisableTiming));
	KMG_CK(cudaEventCreateWithFlags(&f.ev[1], cudaEventDisableTiming));
	f.snap_bytes = KMG_ROUND_UP(sizeof(kmg_ctl) + (size_t) params->max_iter * sizeof(kmg_stat), 64);
	KMG_CK(cudaHostAlloc((void **) &f.pin, 2 * f.snap_bytes, cudaHostAllocDefault));
	hC = (float *) kmg_host_alloc(hooks, (size_t) params->k * f.sh.dp * sizeof(float));
	hcl = (double *) kmg_host_alloc(hooks, (size_t) params->k * 3 * sizeof(double));
	if (hC == NULL || hcl == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
		goto done;
	}

	/* prepare: hashes of the raw rows, the cosine copy, row norms */
	KMG_CK(kmg_prep_rows(rows->X, rows->W, rows->n, rows->d, rows->dp, f.sh.cosine,
						 f.sh.cosine ? (float *) f.w.a.X : NULL, (float *) f.w.a.xnorm,
						 f.w.sb.hashes, f.s));
	KMG_CK(kmg_fill_int(f.w.iota, rows->n, 0, 1, f.s));
	KMG_CK(kmg_rows_setup(&f.sh, &f.w, 1, f.s));
	KMG_CK(cudaStreamSynchronize(f.s));
	{
		km_progress pr;

		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_PREPARE;
		pr.done = rows->n;
		pr.total = rows->n;
		if (kmg_report(&f, &pr))
		{
			st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			goto done;
		}
	}
	kmg_make_graph(&f);
	if (f.sh.pp)
	{
		KMG_CK(kmg_pp_prepare(&f.w.sb, f.sh.dp, dev->sms));
		kmg_make_pp_graph(&f);
	}

	for (int run = 0; run < params->n_init; run++)
	{
		kmg_ctl		c;
		int			stop = KMG_RUN,
					iters = 0,
					relocated = 0;
		double		inertia = 0.0;
		const int	k = params->k;
		const int	cw = KMG_CW(f.sh.dp);

		/* control block: nothing queued runs until it says so */
		memset(&c, 0, sizeof(c));
		c.stop = KMG_RUN;
		c.max_iter = params->max_iter;
		c.tol = params->tol;
		KMG_CK(cudaMemcpyAsync(f.w.a.ctl, &c, sizeof(c), cudaMemcpyHostToDevice, f.s));
		KMG_CK(cudaMemsetAsync(f.w.a.reloc, 0, (size_t) k * sizeof(int), f.s));
		if (f.w.a.nfix != NULL)
			KMG_CK(cudaMemsetAsync(f.w.a.nfix, 0, kmg_narrow_fix_bytes(k, rows->d), f.s));
		KMG_CK(cudaMemsetAsync(f.w.a.stats, 0, (size_t) (params->max_iter + 1) * sizeof(kmg_stat), f.s));
		if ((st = kmg_seed(&f, run, err)) != KM_OK)
			goto done;
		KMG_CK(kmg_finalize(&f.w.a, KMG_FIN_SETUP, f.s));
		KMG_CK(kmg_fill_int(f.w.a.labels, rows->n, -1, 0, f.s));
		KMG_CK(cudaStreamSynchronize(f.s));

		/* KMG_SEED_ONLY=1 (tests): the seeds themselves, with their labels */
		if (seed_only)
			stop = KMG_STOP_MAXITER;
		else if ((st = kmg_lloyd(&f, run, &stop, &iters, &relocated, err)) != KM_OK)
			goto done;

		/* the final pass: labels for the final centroids, exact costs */
		{
			kmg_args	a = f.w.a;

			a.lloyd = 0;
			if (stop != KMG_STOP_SETTLED)
				KMG_CK(kmg_enqueue_labels(&f.sh, &f.w, f.s));
			KMG_CK(kmg_row_costs(&a, f.s));
			KMG_CK(kmg_sort_labels(&a, f.w.iota, f.w.sort_temp, f.sh.sort_bytes, f.s));
			KMG_CK(kmg_segment(&a, KMG_MODE_LABELS, 0, f.s));
			KMG_CK(cudaMemcpyAsync(hC, a.C, (size_t) k * f.sh.dp * sizeof(float),
								   cudaMemcpyDeviceToHost, f.s));
			KMG_CK(cudaMemcpy2DAsync(hcl, 3 * sizeof(double), a.clus + f.sh.dp,
									 (size_t) cw * sizeof(double), 3 * sizeof(double), k,
									 cudaMemcpyDeviceToHost, f.s));
			KMG_CK(cudaStreamSynchronize(f.s));
		}
		for (int j = 0; j < k; j++)
			inertia += hcl[j * 3 + 2];
		{
			km_progress pr;

			memset(&pr, 0, sizeof(pr));
			pr.phase = KM_PHASE_FINISH;
			pr.run = run;
			pr.iteration = iters;
			pr.done = rows->n;
			pr.total = rows->n;
			pr.inertia = inertia;
			if (kmg_report(&f, &pr))
			{
				st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
				goto done;
			}
		}

		/* keep the best run (ties: the earlier) */
		if (run == 0 || inertia < best_inertia)
		{
			best_inertia = inertia;
			for (int j = 0; j < k; j++)
			{
				memcpy(result->centroids + (size_t) j * rows->d, hC + (size_t) j * f.sh.dp,
					   (size_t) rows->d * sizeof(float));
				result->sizes[j] = (int64_t) hcl[j * 3 + 1];
				result->cluster_inertia[j] = hcl[j * 3 + 2];
			}
			result->inertia = inertia;
			result->iterations = iters;
			result->converged = stop == KMG_STOP_SETTLED || stop == KMG_STOP_TOL;
			result->best_run = run;
			result->relocated = relocated;
			if (result->labels != NULL)
				KMG_CK(cudaMemcpy(result->labels, f.w.a.labels, (size_t) rows->n * sizeof(int32_t),
								  cudaMemcpyDeviceToHost));
		}
		if (kmg_poll(hooks))
		{
			st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			goto done;
		}
	}

done:
	/* nothing may still run on what we free */
	if (f.s != NULL)
		(void) cudaStreamSynchronize(f.s);
	if (f.graph != NULL)
		(void) cudaGraphExecDestroy(f.graph);
	if (f.ppgraph != NULL)
		(void) cudaGraphExecDestroy(f.ppgraph);
	if (f.ev[0] != NULL)
		(void) cudaEventDestroy(f.ev[0]);
	if (f.ev[1] != NULL)
		(void) cudaEventDestroy(f.ev[1]);
	if (f.s != NULL)
		(void) cudaStreamDestroy(f.s);
	if (f.pin != NULL)
		(void) cudaFreeHost(f.pin);
	if (f.arena != NULL)
		(void) cudaFree(f.arena);
	kmg_host_free(hooks, hC);
	kmg_host_free(hooks, hcl);
	return st;
}

/*
 * Labels, distances and/or the map step's partial sums for rows on the
 * device and given centroids.
 */
km_status
kmg_assign_rows(const kmg_rows *rows, const float *centroids, int k, km_metric metric,
				int32_t *labels, double *distances, km_partial *partial,
				const km_hooks *hooks, km_error *err)
{
	const kmg_device *dev = kmg_dev();
	kmg_shape	sh;
	kmg_work	w;
	km_status	st = KM_OK;
	void	   *arena = NULL;
	cudaStream_t s = NULL;
	double	   *hcl = NULL;
	const int	cosine = metric == KM_METRIC_COSINE;
	size_t		bytes;

	memset(&w, 0, sizeof(w));
	kmg_make_shape(&sh, rows->n, rows->d, k, cosine, 0, !rows->in_place, NULL,
				   partial != NULL, dev);
	KMG_CK(kmg_assign_prepare(&sh.plan, dev));
	bytes = kmg_layout(&sh, NULL, NULL);
	if ((st = kmg_alloc_arena(&arena, bytes, "the assignment", err)) != KM_OK)
		goto done;
	kmg_layout(&sh, (char *) arena, &w);
	w.a.X = cosine && sh.copy_rows ? w.Xn : rows->X;
	w.a.W = rows->W;
	w.a.n = rows->n;
	w.a.d = rows->d;
	w.a.dp = rows->dp;
	w.a.cosine = cosine;
	w.a.lloyd = 0;
	w.a.k = k;
	w.a.kp = sh.kp;
	KMG_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	/* centroids as given (exact costs use them as they are) */
	KMG_CK(cudaMemsetAsync(w.a.C, 0, (size_t) sh.kp * sh.dp * sizeof(float), s));
	if (w.a.Cf != w.a.C)
		KMG_CK(cudaMemsetAsync(w.a.Cf, 0, (size_t) sh.kp * sh.dp * sizeof(float), s));
	KMG_CK(cudaMemcpy2DAsync(w.a.C, (size_t) sh.dp * sizeof(float), centroids,
							 (size_t) rows->d * sizeof(float), (size_t) rows->d * sizeof(float),
							 k, cudaMemcpyHostToDevice, s));
	KMG_CK(cudaMemsetAsync(w.a.ctl, 0, sizeof(kmg_ctl), s));
	KMG_CK(cudaMemsetAsync(w.a.reloc, 0, (size_t) k * sizeof(int), s));
	KMG_CK(kmg_prep_rows(rows->X, rows->W, rows->n, rows->d, rows->dp, cosine,
						 cosine ? (float *) w.a.X : NULL, (float *) w.a.xnorm, NULL, s));
	KMG_CK(kmg_rows_setup(&sh, &w, 0, s));
	KMG_CK(kmg_finalize(&w.a, KMG_FIN_SETUP, s));
	KMG_CK(kmg_enqueue_labels(&sh, &w, s));
	KMG_CK(kmg_row_costs(&w.a, s));
	if (labels != NULL)
		KMG_CK(cudaMemcpyAsync(labels, w.a.labels, (size_t) rows->n * sizeof(int32_t),
							   cudaMemcpyDeviceToHost, s));
	if (distances != NULL)
		KMG_CK(cudaMemcpyAsync(distances, w.a.cost, (size_t) rows->n * sizeof(double),
							   cudaMemcpyDeviceToHost, s));
	if (partial != NULL)
	{
		const int	cw = KMG_CW(sh.dp);

		hcl = (double *) kmg_host_alloc(hooks, (size_t) k * cw * sizeof(double));
		if (hcl == NULL)
		{
			st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
			goto done;
		}
		KMG_CK(kmg_fill_int(w.iota, rows->n, 0, 1, s));
		KMG_CK(kmg_sort_labels(&w.a, w.iota, w.sort_temp, sh.sort_bytes, s));
		KMG_CK(kmg_segment(&w.a, KMG_MODE_LABELS, 1, s));
		KMG_CK(cudaMemcpyAsync(hcl, w.a.clus, (size_t) k * cw * sizeof(double),
							   cudaMemcpyDeviceToHost, s));
	}
	KMG_CK(cudaStreamSynchronize(s));
	if (distances != NULL)
		for (int64_t i = 0; i < rows->n; i++)
			distances[i] = km_cost_to_distance(distances[i], cosine);
	if (partial != NULL)
	{
		const int	cw = KMG_CW(sh.dp);

		for (int j = 0; j < k; j++)
		{
			const double *cl = hcl + (size_t) j * cw;

			if (partial->sums != NULL)
				for (int i = 0; i < rows->d; i++)
					partial->sums[(size_t) j * rows->d + i] += cl[i];
			if (partial->weights != NULL)
				partial->weights[j] += cl[sh.dp];
			if (partial->counts != NULL)
				partial->counts[j] += (int64_t) cl[sh.dp + 1];
			if (partial->inertia != NULL)
				partial->inertia[j] += cl[sh.dp + 2];
		}
	}
done:
	if (s != NULL)
	{
		(void) cudaStreamSynchronize(s);
		(void) cudaStreamDestroy(s);
	}
	if (arena != NULL)
		(void) cudaFree(arena);
	kmg_host_free(hooks, hcl);
	return st;
}
