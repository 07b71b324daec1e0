/*
 * cpu_kmpar.c
 *	  The CPU engine's side of k-means|| (km_kmpar.h): the three operations
 *	  on one part's rows, and the engine's own k-means|| init, which runs
 *	  km_kmpar_run with those operations over all of a fit's rows.
 *
 * The same functions serve a shard of kmeans_fit_sharded, whose rows are a
 * part of the whole: keys are drawn by each row's hash, ties go to the
 * smaller hash, costs are exact (km_exact.h) and weights exact sums
 * (km_xsum.h), so what each part answers, merged, is what one part holding
 * every row would answer.
 */
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "km_hash.h"
#include "km_kmpar.h"

/* Row number row of data (the caller checks 0 <= row < data->n). */
const float *
km_cpu_data_row(const km_data *data, int64_t row)
{
	for (int c = 0; c < data->nchunks; c++)
	{
		if (row < data->chunks[c].n)
			return data->chunks[c].x + (size_t) row * data->d;
		row -= data->chunks[c].n;
	}
	return NULL;
}

/* What a key pass reads (km_cpu_state.pp is not used by it). */
typedef struct km_cpu_keyjob
{
	km_cpu_state *st;
	const uint64_t *hashes;
	const double *cost;
	uint64_t	stream;
} km_cpu_keyjob;

/* One worker's share of a key pass: its m smallest (key, hash, row). */
static void
km_cpu_kmpar_keys_worker(void *arg, int id)
{
	km_cpu_keyjob *job = (km_cpu_keyjob *) arg;
	km_cpu_state *st = job->st;
	km_cpu_worker *wk = &st->workers[id];
	km_cpu_cursor cur;
	km_cpu_tile t;

	wk->nheap = 0;
	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
		for (int i = 0; i < t.n; i++)
		{
			int64_t		g = t.row + i;
			const float *x = t.x + (size_t) i * st->d;
			float		w = t.w != NULL ? t.w[i] : 1.0f;
			uint64_t	h = job->hashes != NULL ? job->hashes[g] : km_row_hash(x, st->d, w);
			double		a = job->cost != NULL ? (double) w * job->cost[g] : (double) w;
			km_cpu_cand c;

			c.key = km_sample_key(h, job->stream, a);
			if (!(c.key < INFINITY))
				continue;
			if (wk->nheap == st->nsel && c.key > wk->heap[0].key)
				continue;
			c.hash = h;
			c.row = g;
			c.x = x;
			c.w = w;
			km_cpu_heap_push(wk->heap, &wk->nheap, st->nsel, &c);
		}
}

/*
 * keys (km_kmpar.h): the m smallest keys of this part, sorted by (key,
 * hash).
 */
km_status
km_cpu_kmpar_keys(const km_data *data, const uint64_t *hashes, const double *cost,
				  uint64_t stream, int m, const km_hooks *hooks_in,
				  km_kmpar_draw *out, int *nout, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_cpu_keyjob job;
	km_cpu_cand *heaps;
	km_status	status = KM_OK;
	int			total;

	*nout = 0;
	if (data->n == 0 || m < 1)
		return KM_OK;
	if (hooks_in != NULL)
		hooks = *hooks_in;
	else
		memset(&hooks, 0, sizeof(hooks));
	memset(&st, 0, sizeof(st));
	st.t0 = km_cpu_now();
	st.data = data;
	st.n = data->n;
	st.d = data->d;
	st.k = 1;
	st.hooks = &hooks;
	st.avx2 = km_cpu_have_avx2();
	km_cpu_plan(&st, st.n, st.d, 1, hooks.n_threads);
	/* drawing keys costs about as much as a hash per row */
	if ((double) st.n * st.d * 4 < KM_CPU_MIN_PARALLEL_WORK)
		st.nthreads = 1;

	km_cpu_arena_init(&arena, &hooks, 0);
	st.workers = km_cpu_alloc(&arena, sizeof(km_cpu_worker) * st.nthreads);
	st.threads = km_cpu_alloc(&arena, sizeof(pthread_t) * st.nthreads);
	heaps = km_cpu_alloc(&arena, sizeof(km_cpu_cand) * (size_t) m * st.nthreads);
	st.merge = km_cpu_alloc(&arena, sizeof(km_cpu_cand) * (size_t) m * st.nthreads);
	if (arena.failed)
	{
		km_cpu_arena_free(&arena);
		if (error != NULL)
		{
			error->status = KM_ERR_NOMEM;
			strcpy(error->message, "out of memory");
		}
		return KM_ERR_NOMEM;
	}
	memset(st.workers, 0, sizeof(km_cpu_worker) * st.nthreads);
	for (int t = 0; t < st.nthreads; t++)
		st.workers[t].heap = heaps + (size_t) m * t;
	st.nsel = m;
	job.st = &st;
	job.hashes = hashes;
	job.cost = cost;
	job.stream = stream;

	st.nthreads = km_pool_start(&st.pool, st.threads, st.nthreads);
	st.pool_on = 1;
	km_pool_run(&st.pool, km_cpu_kmpar_keys_worker, &job);
	km_pool_stop(&st.pool);
	st.pool_on = 0;
	if (km_cpu_stopped(&st))
		status = KM_ERR_CANCELLED;
	else
	{
		total = km_cpu_merge(&st, -1);
		if (total > m)
			total = m;
		for (int i = 0; i < total; i++)
		{
			out[i].key = st.merge[i].key;
			out[i].hash = st.merge[i].hash;
			out[i].row = st.merge[i].row;
			out[i].w = st.merge[i].w;
		}
		*nout = total;
	}
	km_cpu_arena_free(&arena);
	if (status != KM_OK && error != NULL)
	{
		error->status = status;
		strcpy(error->message, "canceled");
	}
	return status;
}

/*
 * weights (km_kmpar.h): each row's weight into its candidate's sum, in
 * levels chosen from the weights' bounds, so that the sums are exact.
 */
void
km_cpu_kmpar_weights(const km_data *data, const int32_t *label, int ncand, double *lev,
					 km_xlevels *lv)
{
	km_xstats	xs;
	int64_t		g = 0;
	int			weighted = 0;
	int			unweighted = 0;

	km_xstats_init(&xs);
	for (int c = 0; c < data->nchunks; c++)
	{
		if (data->chunks[c].n == 0)
			continue;
		if (data->chunks[c].w == NULL)
		{
			unweighted = 1;
			continue;
		}
		weighted = 1;
		for (int64_t i = 0; i < data->chunks[c].n; i++)
			km_xstats_add(&xs, 127, 127, data->chunks[c].w[i], 1, 0, 0.0);	/* as w * 1.0 */
	}
	/* the second levels computed are the weights' */
	km_xlevels_for(&xs, data->n, weighted, unweighted, lv, lv);
	for (int c = 0; c < data->nchunks; c++)
		for (int64_t i = 0; i < data->chunks[c].n; i++, g++)
		{
			float		w = data->chunks[c].w != NULL ? data->chunks[c].w[i] : 1.0f;

			if (label[g] >= 0 && label[g] < ncand)
				km_xlevels_add(lv, lev + label[g], (size_t) ncand, (double) w);
		}
}

/* ---- the engine's own k-means|| ---- */

typedef struct km_cpu_kmpar_ctx
{
	km_cpu_state *st;
	km_metric	metric;
	double	   *cost;			/* per row */
	int32_t    *label;			/* per row */
	km_kmpar_draw *draws;
	double	   *lev;
} km_cpu_kmpar_ctx;

static km_status
km_cpu_kmpar_op_keys(void *arg, uint64_t stream, int use_cost, int m, double *key,
					 uint64_t *hash, float *w, float *x, int *nout, km_error *error)
{
	km_cpu_kmpar_ctx *ctx = (km_cpu_kmpar_ctx *) arg;
	km_cpu_state *st = ctx->st;
	km_status	status;

	status = km_cpu_kmpar_keys(st->data, st->hashes, use_cost ? ctx->cost : NULL, stream,
							   m, st->hooks, ctx->draws, nout, error);
	if (status != KM_OK)
		return status;
	for (int i = 0; i < *nout; i++)
	{
		key[i] = ctx->draws[i].key;
		hash[i] = ctx->draws[i].hash;
		w[i] = ctx->draws[i].w;
		memcpy(x + (size_t) i * st->d, km_cpu_data_row(st->data, ctx->draws[i].row),
			   sizeof(float) * st->d);
	}
	return KM_OK;
}

static km_status
km_cpu_kmpar_op_fold(void *arg, const float *cands, int first, int count, km_error *error)
{
	km_cpu_kmpar_ctx *ctx = (km_cpu_kmpar_ctx *) arg;
	km_cpu_state *st = ctx->st;

	return km_cpu_kmpar_fold(st->data, ctx->metric, cands + (size_t) first * st->d, first,
							 count, ctx->cost, ctx->label, st->hooks, error);
}

static km_status
km_cpu_kmpar_op_weights(void *arg, int ncand, double *out, km_error *error)
{
	km_cpu_kmpar_ctx *ctx = (km_cpu_kmpar_ctx *) arg;
	const km_hooks *hooks = ctx->st->hooks;
	size_t		bytes = sizeof(double) * KM_XLEV_MAX * (size_t) ncand;
	km_xlevels	lv;

	ctx->lev = hooks->alloc != NULL ? hooks->alloc(hooks->ctx, bytes) : malloc(bytes);
	if (ctx->lev == NULL)
	{
		error->status = KM_ERR_NOMEM;
		strcpy(error->message, "out of memory");
		return KM_ERR_NOMEM;
	}
	memset(ctx->lev, 0, bytes);
	km_cpu_kmpar_weights(ctx->st->data, ctx->label, ncand, ctx->lev, &lv);
	for (int c = 0; c < ncand; c++)
		out[c] = km_xlevels_round(ctx->lev + c, lv.n, (size_t) ncand);
	return KM_OK;
}

static void *
km_cpu_kmpar_alloc(const km_hooks *hooks, size_t size)
{
	return hooks->alloc != NULL ? hooks->alloc(hooks->ctx, size) : malloc(size);
}

static void
km_cpu_kmpar_free(const km_hooks *hooks, void *p)
{
	if (p == NULL)
		return;
	if (hooks->alloc != NULL)
	{
		if (hooks->free != NULL)
			hooks->free(hooks->ctx, p);
	}
	else
		free(p);
}

/*
 * k-means|| over all the rows of a fit, into st->cent: km_kmpar_run with
 * the operations above (st->labels holds each row's nearest candidate
 * meanwhile; Lloyd starts its labels afresh).
 */
km_status
km_cpu_kmeans_parallel(km_cpu_state *st, const km_params *params, int run, km_error *error)
{
	km_cpu_kmpar_ctx ctx;
	km_kmpar_ops ops;
	km_status	status;
	const km_hooks *hooks = st->hooks;

	memset(&ctx, 0, sizeof(ctx));
	ctx.st = st;
	ctx.metric = params->metric;
	ctx.label = st->labels;
	ctx.cost = km_cpu_kmpar_alloc(hooks, sizeof(double) * (size_t) st->n);
	ctx.draws = km_cpu_kmpar_alloc(hooks, sizeof(km_kmpar_draw) * (size_t) 2 * st->k);
	if (ctx.cost == NULL || ctx.draws == NULL)
	{
		km_cpu_kmpar_free(hooks, ctx.cost);
		km_cpu_kmpar_free(hooks, ctx.draws);
		error->status = KM_ERR_NOMEM;
		strcpy(error->message, "out of memory");
		return KM_ERR_NOMEM;
	}
	for (int64_t i = 0; i < st->n; i++)
	{
		ctx.cost[i] = INFINITY;
		ctx.label[i] = -1;
	}
	ops.ctx = &ctx;
	ops.keys = km_cpu_kmpar_op_keys;
	ops.fold = km_cpu_kmpar_op_fold;
	ops.weights = km_cpu_kmpar_op_weights;
	status = km_kmpar_run(&ops, st->d, st->k, params->metric, params->seed, run, hooks,
						  st->cent, error);
	km_cpu_kmpar_free(hooks, ctx.lev);
	km_cpu_kmpar_free(hooks, ctx.draws);
	km_cpu_kmpar_free(hooks, ctx.cost);
	if (status == KM_ERR_CANCELLED)
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
	return status;
}
