/*
 * workspace.cu
 *	  The memory of a call on the device: its shape, the layout of its one
 *	  allocation, and what it learns about its rows once.
 *
 * kmg_make_shape fixes everything the size of a call depends on: the
 * assignment plan (assign/dispatch.cu), the seeding's buffers, the sort's
 * scratch.  kmg_layout then lays the buffers out in one allocation; the
 * same code counts the bytes (base NULL), so what kmg_fit_bytes reports,
 * what is checked against the free memory and what is carved cannot
 * disagree.  kmg_rows_setup runs once the rows are prepared: the l2
 * centring of the fused passes that take it, and the scales of the
 * order-free sums.
 */
#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "seed/seed.cuh"
#include "seed/seed_pp.h"
#include "update/update.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Carving one allocation into buffers (base NULL: only count). */
typedef struct kmg_carver
{
	char	   *base;
	size_t		off;
} kmg_carver;

/* The next bytes of the allocation, 256-byte aligned (NULL when counting). */
static void *
kmg_carve(kmg_carver *c, size_t bytes)
{
	size_t		o = KMG_ROUND_UP(c->off, 256);

	c->off = o + (bytes > 0 ? bytes : 1);
	return c->base != NULL ? (void *) (c->base + o) : NULL;
}

/*
 * The buffers of a call carved from base (NULL: only counted); fills w
 * (NULL: a scratch copy) and returns the bytes the allocation needs.
 * Buffers a shape does not use are not carved: the filter path's per-row
 * and per-tile scratch only without a fused plan, the fused passes'
 * partials only with one, the seeding's buffers only for the seeding asked.
 */
size_t
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
		if (sh->plan.screen != KMG_SCREEN_FP32)
		{
			w->a.screen = 1;
			if (sh->plan.screen == KMG_SCREEN_FP16)
				w->xh = (unsigned short *) kmg_carve(&c, kmg_screen_rows16_bytes(n, dp));
			w->a.sop = (float *) kmg_carve(&c, kmg_screen_work_bytes(k, dp));
			w->a.ccap = kmg_screen_cap(n);
			w->a.crow = (int32_t *) kmg_carve(&c, (size_t) w->a.ccap * sizeof(int32_t));
			w->a.cids = (int32_t *) kmg_carve(&c, (size_t) w->a.ccap * KMG_SCREEN_CANDS *
											  sizeof(int32_t));
			if (sh->bounds)
			{
				w->a.bounded = 1;
				w->a.ub = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
				w->a.lb = (float *) kmg_carve(&c, (size_t) n * sizeof(float));
				w->a.brow = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
				w->a.Cprev = (float *) kmg_carve(&c, (size_t) kp * dp * sizeof(float));
				w->a.drift = (float *) kmg_carve(&c, (size_t) k * sizeof(float));
				w->a.bs = (kmg_bstate *) kmg_carve(&c, sizeof(kmg_bstate));
				w->a.stail = (float *) kmg_carve(&c, kmg_screen_tail_bytes());
				w->a.stick = (int *) kmg_carve(&c, (size_t) kmg_screen_tail_tickets() * sizeof(int));
				if (kmg_screen_far_on(k, sh->plan.wgmma) && !kmg_env_off("KMG_FAR"))
				{
					w->a.frow = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
					w->a.farc = (int32_t *) kmg_carve(&c, (size_t) KMG_FAR_C * sizeof(int32_t));
					w->a.fsop = (float *) kmg_carve(&c, kmg_screen_work_bytes(KMG_FAR_C, dp));
				}
			}
			if (sh->running)
			{
				/* the running sums (update/running.cu) */
				w->a.bold = (int32_t *) kmg_carve(&c, (size_t) n * sizeof(int32_t));
				w->rs.accmem = kmg_carve(&c, kmg_xsum_acc_bytes(k, sh->d, 2, 2));
				w->rs.rows = (int32_t *) kmg_carve(&c, (size_t) 2 * n * sizeof(int32_t));
				w->rs.count = (int32_t *) kmg_carve(&c, (size_t) 4 * k * sizeof(int32_t));
				w->rs.cursor = w->rs.count + 2 * k;
				w->rs.bounds = (int2 *) kmg_carve(&c, (size_t) 2 * k * sizeof(int2));
				w->rs.pclus = (int2 *) kmg_carve(&c, (size_t) 2 * k * sizeof(int2));
				w->rs.ptab = (int4 *) kmg_carve(&c, (size_t) 2 * w->a.maxpieces * sizeof(int4));
				w->rs.npieces = (int *) kmg_carve(&c, sizeof(int));
				w->rs.est = (double *) kmg_carve(&c, KMG_RUN_EST_BLOCKS * sizeof(double));
				w->rs.xst = (int *) kmg_carve(&c, 4 * sizeof(int));
			}
		}
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
		if (sh->plan.bytes && sh->fit && !sh->cosine)
		{
			/* the byte copy of the rows and its pass's close calls (assign/bytes.cu) */
			const int	xbs = kmg_bytes_stride(sh->d);

			w->xb = (uint8_t *) kmg_carve(&c, (size_t) n * xbs);
			w->a.xblist = (int32_t *) kmg_carve(&c, kmg_bytes_list_len(n, sh->plan.nblocks) *
												 sizeof(int32_t));
			w->a.xbend = (uint8_t *) kmg_carve(&c, kmg_bytes_end_bytes(sh->d, k));
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
 * The shape of a call: n rows of d values into k clusters, a fit (else
 * assign or map, with per-cluster sums when sums), cosine rows copied
 * (copy_rows) or normalised in place.  dev == NULL estimates without the
 * device (H100/H200 limits) for fit_device_bytes.
 */
void
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
	/*
	 * a fit's iterations on the tensor-core screen (l2) skip rows by bounds
	 * and keep running sums, each on unless its variable is "0"
	 * (KMG_BOUNDS=0, KMG_RUNNING=0: for timings; without running sums every
	 * iteration sorts and sums every row)
	 */
	{
		const int	screened = fit && !cosine && !kmg_plan_fused(&sh->plan) &&
			sh->plan.screen != KMG_SCREEN_FP32;

		sh->bounds = screened && !kmg_env_off("KMG_BOUNDS");
		sh->running = screened && !kmg_env_off("KMG_RUNNING");
	}
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
 * For a call that does not run kmg_rows_setup over rows that stay (split
 * fits stream theirs in steps): no float16 copy of the rows is laid out, and
 * its tensor-core screen runs in TF32.
 */
void
kmg_shape_without_rows16(kmg_shape *sh)
{
	if (sh->plan.screen == KMG_SCREEN_FP16)
		sh->plan.screen = KMG_SCREEN_TF32;
}

/*
 * After the rows are prepared (kmg_prep_rows), once per call: the l2
 * centring of the fused passes that take it (mu = the rows' mean, rounded
 * to float, used when |mu|^2 > mean |x|^2 / 16, as the CPU engine decides),
 * the float16 copy of the rows when the plan screens in float16, the byte
 * copy when the plan may iterate on bytes and they all are, and, for a fit, the scale of the order-free inertia of the final pass
 * (the CPU engine's: km_fix_scale(max w * (cosine ? 2 : 4 max |x|^2) * 1.01,
 * n)) and the levels of the running sums (update/running.cu).
 * Synchronises the stream.
 */
cudaError_t
kmg_rows_setup(const kmg_shape *sh, kmg_work *w, int fit, cudaStream_t s)
{
	kmg_row_stats st;
	double	   *colsum = NULL;
	cudaError_t e = cudaSuccess;
	int			centre;

	w->a.mu = NULL;
	w->a.ishift = KM_FIX_UNSET;
	/*
	 * the byte copy of the rows (assign/bytes.cu), kept when every value is
	 * an integer in 0..255 and the fit is unweighted; otherwise the
	 * iterations stay on the floats.  Such a fit is not centred: its
	 * iterations decide on the bytes, and the end of each iteration then
	 * has no centred copy of the centroids to make (finalize_block.cuh).
	 */
	w->a.Xb = NULL;
	if (fit && w->xb != NULL && w->a.W == NULL)
	{
		unsigned long long nbad = 0;
		double		sumsq = 0.0;

		/* a.part (the fused pass's partials, unused until the iterations): the copy's two counts */
		e = kmg_bytes_rows(w->a.X, sh->n, sh->d, sh->dp, w->xb, (unsigned long long *) w->a.part,
						   sh->plan.sms, &nbad, &sumsq, s);
		if (e == cudaSuccess && nbad == 0)
		{
			w->a.Xb = w->xb;
			w->a.xbs = kmg_bytes_stride(sh->d);
			w->a.xbsq = sumsq;
		}
	}
	if (e != cudaSuccess)
		return e;
	centre = sh->centrable && w->a.Xb == NULL;
	if (centre)
	{
		colsum = (double *) malloc(sizeof(double) * sh->dp);
		if (colsum == NULL)
			return cudaErrorMemoryAllocation;
	}
	e = kmg_row_stats_run(w->a.X, w->a.W, sh->n, sh->d, sh->dp, centre,
						  w->stats_work, colsum, &st, s);
	if (e == cudaSuccess && centre)
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
	/* the float16 screen's copy of the rows (rows fixed for the call: cosine already normalised) */
	w->a.Xh = NULL;
	if (e == cudaSuccess && w->xh != NULL)
	{
		int			xe = 0;

		e = kmg_screen_rows16(w->a.X, sh->n, sh->dp, st.xabsmax, sh->plan.wgmma, w->xh, &xe,
							  sh->plan.sms, s);
		if (e == cudaSuccess)
		{
			w->a.Xh = w->xh;
			w->a.xexp = xe;
			w->a.xhwg = sh->plan.wgmma;
		}
	}
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
	/* a fit's narrow passes: exact running sums where the data allow (a.part is free until the passes) */
	w->a.nxs = 0;
	if (e == cudaSuccess && fit)
		e = kmg_narrow_exact_setup(&w->a, (int *) w->a.part, s);
	/* k-means++ potentials: terms w D2 <= wmax 4 xmax2 (seed_pp.h) */
	w->pp_shift = kmg_pp_shift(st.wmax, st.xmax2, sh->n);
	/* a fit's running sums: their levels, or none (a->bold NULL) */
	if (e == cudaSuccess && fit && w->a.bold != NULL)
	{
		e = kmg_running_levels(&w->rs, &w->a, s);
		if (!w->rs.on)
			w->a.bold = NULL;
		w->a.rs_resum = kmg_running_resum(sh->n);
	}
	return e;
}

/*
 * Device bytes of a fit of n rows (the rows themselves not included: the
 * dataset holds them), with k-means++ and a generous max_iter, plus 16 MB
 * for what CUDA and CUB take besides.
 */
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

/* Device bytes of assign or map over a batch of rows (the rows not included). */
uint64_t
kmg_assign_bytes(int64_t batch_rows, int d, int k)
{
	kmg_shape	sh;

	kmg_make_shape(&sh, batch_rows, d, k, 1, 0, 0, NULL, 1, NULL);
	return kmg_layout(&sh, NULL, NULL) + ((uint64_t) 16 << 20);
}

/*
 * One cudaMalloc for the whole call, after checking what is free: too
 * little is KM_ERR_DEVICE_NOMEM with both figures in the message (the SQL
 * layer may wait and retry), and the failed allocation leaves no error
 * behind.
 */
km_status
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
