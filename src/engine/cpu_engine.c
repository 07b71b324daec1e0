/*
 * cpu_engine.c
 *	  The CPU engine: the km_engine table and its entry points.
 *
 * Each entry point checks its arguments, allocates everything it will need
 * through the caller's hooks, starts its thread team, runs its passes and
 * then stops the team and frees everything, on every path.  Nothing here
 * prints, aborts or keeps state between calls.
 */
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "km_exact.h"
#include "km_kmpar.h"

/*
 * Seconds on a monotonic clock.
 */
double
km_cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/*
 * Hand progress to the caller's hook (no worker is busy when this runs);
 * returns nonzero, and raises the stop flag, when it says stop.
 */
int
km_cpu_report(km_cpu_state *st, km_progress *progress)
{
	if (st->hooks->report == NULL)
		return 0;
	progress->elapsed = km_cpu_now() - st->t0;
	if (st->hooks->report(st->hooks->ctx, progress) != 0)
	{
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

/*
 * Fill in error and return its status.
 */
static km_status
km_cpu_fail(km_error *error, km_status status, const char *message)
{
	if (error != NULL)
	{
		error->status = status;
		snprintf(error->message, sizeof(error->message), "%s", message);
	}
	return status;
}

/*
 * The message that goes with a status the passes returned.
 */
static km_status
km_cpu_finish(km_error *error, km_status status)
{
	switch (status)
	{
		case KM_OK:
			if (error != NULL)
			{
				error->status = KM_OK;
				error->message[0] = '\0';
			}
			return KM_OK;
		case KM_ERR_NOMEM:
			return km_cpu_fail(error, status, "out of memory");
		case KM_ERR_CANCELLED:
			return km_cpu_fail(error, status, "canceled");
		default:
			return km_cpu_fail(error, status, "invalid parameters");
	}
}

/*
 * Whether data is well formed: chunks that add up to n rows of d values.
 * Returns a message, or NULL when it is.
 */
static const char *
km_cpu_check_data(const km_data *data)
{
	int64_t		n = 0;

	if (data == NULL)
		return "no data";
	if (data->d < 1)
		return "dimension must be at least 1";
	if (data->nchunks < 0 || (data->nchunks > 0 && data->chunks == NULL))
		return "invalid chunk list";
	for (int c = 0; c < data->nchunks; c++)
	{
		if (data->chunks[c].n < 0 ||
			(data->chunks[c].n > 0 && data->chunks[c].x == NULL))
			return "invalid chunk";
		n += data->chunks[c].n;
	}
	if (n != data->n)
		return "chunk sizes do not add up to the row count";
	return NULL;
}

/*
 * Whether k centroids are usable: finite, and not zero for cosine.
 */
static const char *
km_cpu_check_centroids(const float *c, int k, int d, km_metric metric)
{
	if (c == NULL)
		return "no centroids";
	for (int j = 0; j < k; j++)
	{
		const float *cj = c + (size_t) j * d;

		for (int i = 0; i < d; i++)
			if (!isfinite(cj[i]))
				return "centroids must be finite";
		if (metric == KM_METRIC_COSINE && !(km_exact_norm(cj, d) > 0.0))
			return "cosine centroids must not be zero";
	}
	return NULL;
}

/*
 * Common start of a call: the state for data, k and metric, with the
 * caller's hooks (or defaults) copied to *hooks.
 */
static void
km_cpu_begin(km_cpu_state *st, const km_data *data, int k, km_metric metric,
			 const km_hooks *in, km_hooks *hooks)
{
	if (in != NULL)
		*hooks = *in;
	else
		memset(hooks, 0, sizeof(*hooks));
	memset(st, 0, sizeof(*st));
	st->t0 = km_cpu_now();
	st->data = data;
	st->n = data->n;
	st->d = data->d;
	st->k = k;
	st->cosine = metric == KM_METRIC_COSINE;
	st->hooks = hooks;
	st->avx2 = km_cpu_have_avx2();
	km_cpu_plan(st, st->n, st->d, k, hooks->n_threads);
}

/*
 * Start the thread team planned in st; the team may come out smaller.
 */
static void
km_cpu_team_start(km_cpu_state *st)
{
	st->nthreads = km_pool_start(&st->pool, st->threads, st->nthreads);
	st->pool_on = 1;
}

/*
 * Join the team (if started) and free everything.
 */
static void
km_cpu_end(km_cpu_state *st, km_cpu_arena *arena)
{
	if (st->pool_on)
		km_pool_stop(&st->pool);
	st->pool_on = 0;
	km_cpu_arena_free(arena);
}

/*
 * mu for assign and map: the mean of the centroids (in double, rounded to
 * float), with the same centring rule as for a fit.
 */
static void
km_cpu_centroid_mu(km_cpu_state *st, const float *c)
{
	const int	d = st->d;
	double		sqsum = 0.0;

	for (int i = 0; i < d; i++)
	{
		double		s = 0.0;

		for (int j = 0; j < st->k; j++)
			s += c[(size_t) j * d + i];
		st->mu[i] = (float) (s / st->k);
	}
	for (int j = 0; j < st->k; j++)
		sqsum += km_cpu_sqnorm(st->avx2, c + (size_t) j * d, d);
	km_cpu_choose_mu(st, NULL, sqsum, st->k);
}

/*
 * Whether params make sense for data; returns a message, or NULL when they do.
 */
static const char *
km_cpu_check_params(const km_data *data, const km_params *params)
{
	const char *msg;

	if ((msg = km_cpu_check_data(data)) != NULL)
		return msg;
	if (params == NULL)
		return "no parameters";
	if (params->k < 1)
		return "k must be at least 1";
	if (params->k > data->n)
		return "k must not exceed the number of rows";
	if (params->max_iter < 1)
		return "max_iter must be at least 1";
	if (!(params->tol >= 0.0))
		return "tol must not be negative";
	if (params->n_init < 1)
		return "n_init must be at least 1";
	if (params->metric != KM_METRIC_L2 && params->metric != KM_METRIC_COSINE)
		return "unknown metric";
	if (params->init != KM_INIT_KMEANSPP && params->init != KM_INIT_RANDOM &&
		params->init != KM_INIT_EXPLICIT && params->init != KM_INIT_KMEANS_PARALLEL &&
		params->init != KM_INIT_AFKMC2)
		return "unknown init";
	if (params->init == KM_INIT_AFKMC2 && params->chain_length < 1)
		return "chain_length must be at least 1";
	if (params->init == KM_INIT_EXPLICIT)
	{
		if (params->init_centroids == NULL)
			return "explicit init needs initial centroids";
		return km_cpu_check_centroids(params->init_centroids, params->k, data->d,
									  params->metric);
	}
	return NULL;
}

/*
 * The start of a fit (and of seed): the state, its allocations and team,
 * the pass before seeding and the levels of the sums.  labels: the
 * caller's array for the labels, or NULL to allocate one.  On failure
 * everything is freed and the status returned.
 */
static km_status
km_cpu_fit_begin(km_cpu_state *st, km_cpu_arena *arena, km_hooks *hooks,
				 const km_data *data, const km_params *params,
				 const km_hooks *hooks_in, int32_t *labels, km_error *error)
{
	km_progress p;
	km_status	status = KM_OK;

	km_cpu_begin(st, data, params->k, params->metric, hooks_in, hooks);
	km_cpu_arena_init(arena, hooks, 0);
	if (!km_cpu_setup(st, arena, KM_CPU_CALL_FIT, labels == NULL,
					  params->init != KM_INIT_EXPLICIT,
					  params->init == KM_INIT_KMEANSPP || params->init == KM_INIT_AFKMC2))
	{
		status = KM_ERR_NOMEM;
		goto fail;
	}
	if (labels != NULL)
		st->labels = labels;
	km_cpu_team_start(st);

	km_cpu_prepare(st);
	if (km_cpu_stopped(st))
	{
		status = KM_ERR_CANCELLED;
		goto fail;
	}
	if (!(st->workers[0].wtotal > 0.0))
	{
		km_cpu_end(st, arena);
		return km_cpu_fail(error, KM_ERR_INVALID, "total weight is zero");
	}
	/* the sums' levels, now that the terms are bounded */
	km_cpu_levels(st);
	if (!km_cpu_setup_sums(st, arena))
	{
		status = KM_ERR_NOMEM;
		goto fail;
	}
	memset(&p, 0, sizeof(p));
	p.phase = KM_PHASE_PREPARE;
	p.done = st->n;
	p.total = st->n;
	if (km_cpu_report(st, &p))
	{
		status = KM_ERR_CANCELLED;
		goto fail;
	}
	return KM_OK;

fail:
	km_cpu_end(st, arena);
	return km_cpu_finish(error, status);
}

/*
 * fit: n_init runs of seeding and Lloyd; the run with the lowest final
 * inertia (the earliest on ties) goes to result.
 */
static km_status
km_cpu_fit(const km_data *data, const km_params *params, const km_hooks *hooks_in,
		   km_result *result, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_status	status = KM_OK;
	const char *msg;
	int			own_labels;

	if ((msg = km_cpu_check_params(data, params)) != NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, msg);
	if (result == NULL || result->centroids == NULL || result->sizes == NULL ||
		result->cluster_inertia == NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, "result arrays missing");

	own_labels = result->labels == NULL || params->n_init > 1;
	status = km_cpu_fit_begin(&st, &arena, &hooks, data, params, hooks_in,
							  own_labels ? NULL : result->labels, error);
	if (status != KM_OK)
		return status;

	for (int run = 0; run < params->n_init; run++)
	{
		km_cpu_run rr;

		status = km_cpu_seed(&st, params, run, error);
		if (status != KM_OK)
			goto done;
		status = km_cpu_lloyd(&st, params, run, &rr);
		if (status != KM_OK)
			goto done;
		if (run > 0 && !(rr.inertia < result->inertia))
			continue;

		/* the best run so far */
		memcpy(result->centroids, st.cent, sizeof(float) * st.k * st.d);
		for (int j = 0; j < st.k; j++)
		{
			result->sizes[j] = st.counts[j];
			result->cluster_inertia[j] = st.csum[j];
		}
		if (own_labels && result->labels != NULL)
			memcpy(result->labels, st.labels, sizeof(int32_t) * st.n);
		result->inertia = rr.inertia;
		result->iterations = rr.iterations;
		result->converged = rr.converged;
		result->best_run = run;
		result->relocated = rr.relocated;
	}

done:
	km_cpu_end(&st, &arena);
	return km_cpu_finish(error, status);
}

/*
 * seed: the start centroids of one run, as fit would seed them.
 */
static km_status
km_cpu_seed_entry(const km_data *data, const km_params *params, int run,
				  const km_hooks *hooks_in, float *centroids, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_status	status;
	const char *msg;

	if ((msg = km_cpu_check_params(data, params)) != NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, msg);
	if (centroids == NULL || run < 0)
		return km_cpu_fail(error, KM_ERR_INVALID, "no room for the centroids");
	status = km_cpu_fit_begin(&st, &arena, &hooks, data, params, hooks_in, NULL, error);
	if (status != KM_OK)
		return status;
	status = km_cpu_seed(&st, params, run, error);
	if (status == KM_OK)
		memcpy(centroids, st.cent, sizeof(float) * st.k * st.d);
	km_cpu_end(&st, &arena);
	return km_cpu_finish(error, status);
}

/*
 * Set up assign or map: checks, allocations, mu, centroids and the team.
 */
static km_status
km_cpu_assign_begin(km_cpu_state *st, km_cpu_arena *arena, km_cpu_call call,
					const km_data *data, const float *centroids, int k,
					km_metric metric, const km_hooks *hooks_in, km_hooks *hooks,
					km_error *error)
{
	const char *msg;

	if ((msg = km_cpu_check_data(data)) != NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, msg);
	if (k < 1)
		return km_cpu_fail(error, KM_ERR_INVALID, "k must be at least 1");
	if (metric != KM_METRIC_L2 && metric != KM_METRIC_COSINE)
		return km_cpu_fail(error, KM_ERR_INVALID, "unknown metric");
	if ((msg = km_cpu_check_centroids(centroids, k, data->d, metric)) != NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, msg);

	km_cpu_begin(st, data, k, metric, hooks_in, hooks);
	km_cpu_arena_init(arena, hooks, 0);
	if (data->n == 0)
		return KM_OK;
	if (!km_cpu_setup(st, arena, call, 0, 0, 0))
	{
		km_cpu_end(st, arena);
		return km_cpu_fail(error, KM_ERR_NOMEM, "out of memory");
	}
	if (!st->cosine)
		km_cpu_centroid_mu(st, centroids);
	km_cpu_set_centroids(st, centroids);
	km_cpu_team_start(st);
	return KM_OK;
}

/*
 * assign: every row's exact nearest centroid and its distance.
 */
static km_status
km_cpu_assign(const km_data *data, const float *centroids, int k,
			  km_metric metric, int32_t *labels, double *distances,
			  const km_hooks *hooks_in, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_status	status;

	status = km_cpu_assign_begin(&st, &arena, KM_CPU_CALL_ASSIGN, data, centroids,
								 k, metric, hooks_in, &hooks, error);
	if (status != KM_OK || data->n == 0)
		return km_cpu_finish(error, status);

	st.labels_out = labels;
	st.dist_out = distances;
	km_cpu_pass(&st, KM_CPU_ASSIGN | (distances != NULL ? KM_CPU_COST : 0));
	if (km_cpu_stopped(&st))
		status = KM_ERR_CANCELLED;
	km_cpu_end(&st, &arena);
	return km_cpu_finish(error, status);
}

/*
 * map: the assignment folded into per-cluster sums, added to partial (see
 * kmeans_engine.h for exact mode).
 */
static km_status
km_cpu_map(const km_data *data, const float *centroids, int k,
		   km_metric metric, km_partial *partial,
		   const km_hooks *hooks_in, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_status	status;
	const size_t kd = (size_t) k * (data != NULL ? data->d : 0);

	if (partial == NULL || partial->sums == NULL || partial->weights == NULL ||
		partial->counts == NULL || partial->inertia == NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, "partial arrays missing");
	partial->nfar = 0;
	if ((partial->xsums != NULL || partial->xweights != NULL) && partial->stats == NULL)
		return km_cpu_fail(error, KM_ERR_INVALID, "exact sums need bounds on the terms");
	status = km_cpu_assign_begin(&st, &arena, KM_CPU_CALL_MAP, data, centroids,
								 k, metric, hooks_in, &hooks, error);
	if (status != KM_OK || data->n == 0)
		return km_cpu_finish(error, status);

	/* the levels: exact with the caller's bounds, else plain double sums */
	if (partial->stats != NULL)
	{
		st.xstats = *partial->stats;
		km_cpu_levels(&st);
	}
	else
	{
		km_xlevels_make(0, 0, 1, &st.xlev);
		km_xlevels_make(0, 0, 1, &st.wlev);
	}
	if (partial->labels != NULL)
		st.labels = partial->labels;
	else if (partial->far != NULL)
		st.labels = km_cpu_alloc(&arena, sizeof(int32_t) * (size_t) st.n);
	if (!km_cpu_setup_sums(&st, &arena))
	{
		km_cpu_end(&st, &arena);
		return km_cpu_fail(error, KM_ERR_NOMEM, "out of memory");
	}

	st.labels_out = st.labels;
	km_cpu_pass(&st, KM_CPU_ASSIGN | KM_CPU_SUMS | KM_CPU_COST);
	if (km_cpu_stopped(&st))
	{
		status = KM_ERR_CANCELLED;
		goto done;
	}
	km_cpu_reduce(&st, KM_CPU_SUMS | KM_CPU_COST);
	for (size_t i = 0; i < kd; i++)
		partial->sums[i] += km_xlevels_round(st.sums + i, st.xlev.n, kd);
	for (int j = 0; j < k; j++)
	{
		partial->weights[j] += st.wsumr[j];
		partial->counts[j] += st.counts[j];
		partial->inertia[j] += st.csum[j];
	}
	if (partial->xsums != NULL)
		for (size_t i = 0; i < (size_t) st.xlev.n * kd; i++)
			partial->xsums[i] += st.sums[i];
	if (partial->xweights != NULL)
		for (size_t j = 0; j < (size_t) st.wlev.n * k; j++)
			partial->xweights[j] += st.wsum[j];
	if (partial->xinertia != NULL)
		for (int j = 0; j < k; j++)
			km_xacc_merge(&partial->xinertia[j], &st.cacc[j]);

	/* clusters this call left without weight: the rows to re-seed them */
	if (partial->far != NULL)
	{
		int			nempty = 0;

		for (int j = 0; j < k; j++)
			if (!(st.wsumr[j] > 0.0))
				nempty++;
		if (nempty > 0)
		{
			int			nfar;

			st.nsel = nempty;
			st.labels_out = NULL;
			km_cpu_pass(&st, KM_CPU_FARTHEST);
			if (km_cpu_stopped(&st))
			{
				status = KM_ERR_CANCELLED;
				goto done;
			}
			nfar = km_cpu_merge(&st, -1);
			if (nfar > nempty)
				nfar = nempty;
			for (int e = 0; e < nfar; e++)
			{
				const km_cpu_cand *c = &st.merge[e];

				partial->far[e].row = c->row;
				partial->far[e].cost = -c->key;
				partial->far[e].hash = c->hash;
				partial->far[e].label = st.labels[c->row];
				partial->far[e].w = c->w;
			}
			partial->nfar = nfar;
		}
	}

done:
	km_cpu_end(&st, &arena);
	return km_cpu_finish(error, status);
}

/*
 * k-means|| fold (km_kmpar.h): the exact nearest of count candidates and
 * its cost, for every row, kept where nearer than the candidates before.
 */
km_status
km_cpu_kmpar_fold(const km_data *data, km_metric metric, const float *cands,
				  int first, int count, double *cost, int32_t *label,
				  const km_hooks *hooks_in, km_error *error)
{
	km_hooks	hooks;
	km_cpu_state st;
	km_cpu_arena arena;
	km_status	status;

	status = km_cpu_assign_begin(&st, &arena, KM_CPU_CALL_ASSIGN, data, cands,
								 count, metric, hooks_in, &hooks, error);
	if (status != KM_OK || data->n == 0)
		return km_cpu_finish(error, status);
	st.fold_cost = cost;
	st.fold_label = label;
	st.fold_first = first;
	km_cpu_pass(&st, KM_CPU_ASSIGN | KM_CPU_COST);
	if (km_cpu_stopped(&st))
		status = KM_ERR_CANCELLED;
	km_cpu_end(&st, &arena);
	return km_cpu_finish(error, status);
}

const km_engine km_cpu_engine = {
	KM_ENGINE_ABI,
	"cpu",
	km_cpu_fit_workspace,
	km_cpu_fit,
	km_cpu_assign,
	km_cpu_map,
	km_cpu_seed_entry
};
