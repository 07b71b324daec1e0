/*
 * kmedoids_cpu.c
 *	  The k-medoids CPU engine: the kmd_engine table, its entry points, and
 *	  the passes over the rows the methods share.
 *
 * Each entry point checks its arguments, allocates everything it needs
 * through the caller's hooks before any thread computes, starts its thread
 * team, runs its passes, then stops the team and frees everything, on every
 * path.  A pass is a set of work items (blocks of KMD_BLOCK rows, tiles,
 * pieces of clusters) that the team takes from a shared counter; the calling
 * thread is worker 0 and polls for cancellation between its items.
 */
#include "kmedoids_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kmd_metric.h"
#include "km_hash.h"

/* Which entry point a state is set up for. */
typedef enum kmd_call
{
	KMD_CALL_FIT,
	KMD_CALL_ASSIGN,
	KMD_CALL_SILHOUETTE
} kmd_call;

/* Batches of FasterPAM candidates use at most this much memory. */
#define KMD_BATCH_BYTES ((size_t) 32 * 1024 * 1024)

/* ---------------------------------------------------------------------- */
/* the team and its work items */

/*
 * Run fn on the team over nitems work items (taken with kmd_take); a job
 * of less than KMD_MIN_PARALLEL_WORK distance operations runs on the
 * calling thread alone.
 */
void
kmd_run(kmd_state *st, km_pool_fn fn, int64_t nitems, double work)
{
	st->next = 0;
	st->nitems = nitems;
	if (st->nthreads == 1 || work < KMD_MIN_PARALLEL_WORK || nitems < 2)
		fn(st, 0);
	else
		km_pool_run(&st->pool, fn, st);
}

/*
 * Whether to stop: worker 0 asks the caller's hook (and raises the flag for
 * everyone), the others look at the flag.  Long items call it as they go.
 */
int
kmd_poll(kmd_state *st, int id)
{
	if (id == 0 && st->hooks->poll != NULL && st->hooks->poll(st->hooks->ctx) != 0)
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
	return kmd_stopped(st);
}

/*
 * The next work item of a job; 0 when there is none left or the job was
 * stopped.  Worker 0 polls the caller's hook before each of its items.
 */
int
kmd_take(kmd_state *st, int id, int64_t *item)
{
	if (kmd_poll(st, id))
		return 0;
	*item = __atomic_fetch_add(&st->next, 1, __ATOMIC_RELAXED);
	return *item < st->nitems;
}

/*
 * Progress to the caller's hook (no worker busy); nonzero, and the stop
 * flag raised, when it says stop.
 */
int
kmd_report(kmd_state *st, km_progress *p)
{
	if (st->hooks->report == NULL)
		return 0;
	p->elapsed = km_cpu_now() - st->t0;
	if (st->hooks->report(st->hooks->ctx, p) != 0)
	{
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* rows and distances */

/* Append data row `row` to r. */
void
kmd_rows_add(const kmd_state *st, kmd_rows *r, int64_t row)
{
	const kmd_data *data = st->data;

	r->row[r->n] = data->rows[row];
	r->m[r->n] = data->nfeat != NULL ? data->nfeat[row] : 0;
	r->aux[r->n] = st->aux != NULL ? st->aux[row] : 0.0;
	r->n++;
}

/* Pack up to KMD_TILE_B data rows, by index, into pk. */
void
kmd_pack_cols(kmd_state *st, kmd_pack *pk, const int64_t *cols, int ncols)
{
	pk->r.n = 0;
	for (int j = 0; j < ncols; j++)
		kmd_rows_add(st, &pk->r, cols[j]);
	kmd_pack_rows(&st->sp, pk);
}

/* The distance between data rows a and b, one pair. */
double
kmd_dist(const kmd_state *st, int64_t a, int64_t b)
{
	const kmd_data *data = st->data;

	return kmd_pair(st->sp.metric, data->rows[a], data->nfeat ? data->nfeat[a] : 0,
					st->aux ? st->aux[a] : 0.0, data->rows[b],
					data->nfeat ? data->nfeat[b] : 0, st->aux ? st->aux[b] : 0.0,
					st->sp.d, st->sp.alpha);
}

/* Work of one distance, in units of coordinate operations. */
static double
kmd_pair_work(const kmd_state *st)
{
	if (st->sp.metric == KMD_SQFD)
		return 64.0 * st->sp.d;	/* an exp per feature pair, a few pairs */
	return (double) st->sp.d;
}

/* ---------------------------------------------------------------------- */
/* the pass before anything else: aux and hashes */

static void
kmd_prepare_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	const kmd_data *data = st->data;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;

		for (int64_t o = b * KMD_BLOCK; o < end; o++)
		{
			int			m = data->nfeat != NULL ? data->nfeat[o] : 1;

			if (st->aux != NULL)
				st->aux[o] = kmd_aux(st->sp.metric, data->rows[o], m, st->sp.d, st->sp.alpha);
			if (st->hashes != NULL)
				st->hashes[o] = km_row_hash(data->rows[o], m * st->sp.d, 1.0f);
		}
	}
}

static void
kmd_prepare(kmd_state *st)
{
	double		work = (double) st->n * st->sp.d * (st->sp.metric == KMD_SQFD ? 64.0 : 1.0);

	if (st->aux == NULL && st->hashes == NULL)
		return;
	kmd_run(st, kmd_prepare_worker, st->nblocks, work);
}

/* ---------------------------------------------------------------------- */
/* nearest (and second nearest) medoid of every row */

/*
 * Whether (da, ca) comes before (db, cb): nearer first, ties to the lower
 * cluster id.
 */
static inline int
kmd_less(double da, int ca, double db, int cb)
{
	return da < db || (da == db && ca < cb);
}

/*
 * One worker's share of kmd_nearest_pass: rows in blocks, 64 at a time
 * against every pack of medoids (st->mpacks), keeping the best two.
 */
static void
kmd_nearest_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const kmd_pack *mp = st->job_packs;
	const int	nmp = (st->k + KMD_TILE_B - 1) / KMD_TILE_B;
	int32_t    *label = st->out_label;
	double	   *dn = st->out_dist;
	int32_t    *second = st->second;
	double	   *ds = st->ds;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;

		for (int64_t o0 = b * KMD_BLOCK; o0 < end; o0 += KMD_TILE_A)
		{
			int			na = end - o0 < KMD_TILE_A ? (int) (end - o0) : KMD_TILE_A;
			double		best[KMD_TILE_A];
			double		next[KMD_TILE_A];
			int32_t		lb[KMD_TILE_A];
			int32_t		ln[KMD_TILE_A];

			wk->a.n = 0;
			for (int i = 0; i < na; i++)
			{
				kmd_rows_add(st, &wk->a, o0 + i);
				best[i] = next[i] = INFINITY;
				lb[i] = ln[i] = -1;
			}
			for (int p = 0; p < nmp; p++)
			{
				kmd_block(&st->sp, &wk->a, &mp[p], wk->out, wk->xb);
				for (int i = 0; i < na; i++)
					for (int j = 0; j < mp[p].r.n; j++)
					{
						double		v = wk->out[(size_t) i * KMD_TILE_B + j];
						int			c = p * KMD_TILE_B + j;

						if (lb[i] < 0 || kmd_less(v, c, best[i], lb[i]))
						{
							next[i] = best[i];
							ln[i] = lb[i];
							best[i] = v;
							lb[i] = c;
						}
						else if (ln[i] < 0 || kmd_less(v, c, next[i], ln[i]))
						{
							next[i] = v;
							ln[i] = c;
						}
					}
			}
			for (int i = 0; i < na; i++)
			{
				label[o0 + i] = lb[i];
				dn[o0 + i] = best[i];
				if (second != NULL)
				{
					second[o0 + i] = ln[i];
					ds[o0 + i] = next[i];
				}
			}
		}
	}
}

/*
 * Every row's nearest medoid of the packs mp (k medoids) into label and
 * dist, and, with want_second, the second nearest into st->second and
 * st->ds (-1 and +inf when k is 1).
 */
void
kmd_nearest_into(kmd_state *st, const kmd_pack *mp, int32_t *label, double *dist,
				 int want_second)
{
	int32_t    *second = st->second;

	st->job_packs = mp;
	st->out_label = label;
	st->out_dist = dist;
	if (!want_second)
		st->second = NULL;
	kmd_run(st, kmd_nearest_worker, st->nblocks, (double) st->n * st->k * kmd_pair_work(st));
	st->second = second;
}

/* Pack the first count medoids (of st->medoids) into st->mpacks. */
void
kmd_pack_medoids_upto(kmd_state *st, int count)
{
	for (int p = 0; p * KMD_TILE_B < count; p++)
	{
		int			nc = count - p * KMD_TILE_B < KMD_TILE_B ? count - p * KMD_TILE_B : KMD_TILE_B;

		kmd_pack_cols(st, &st->mpacks[p], st->medoids + (size_t) p * KMD_TILE_B, nc);
	}
}

/*
 * Nearest medoid of every row into st->label and st->dn, and with
 * want_second the second nearest.
 */
void
kmd_nearest_pass(kmd_state *st, int want_second)
{
	kmd_pack_medoids_upto(st, st->k);
	kmd_nearest_into(st, st->mpacks, st->label, st->dn, want_second);
}

/*
 * The cost (sum of st->dn in row order), and per cluster the sizes and
 * costs (sums in row order), of st->label.
 */
double
kmd_cost_sum(const kmd_state *st, int64_t *sizes, double *cluster_cost)
{
	double		cost = 0.0;

	for (int c = 0; c < st->k; c++)
	{
		sizes[c] = 0;
		cluster_cost[c] = 0.0;
	}
	for (int64_t o = 0; o < st->n; o++)
	{
		cost += st->dn[o];
		sizes[st->label[o]]++;
		cluster_cost[st->label[o]] += st->dn[o];
	}
	return cost;
}

/* ---------------------------------------------------------------------- */
/* set-up and tear-down */

/* Threads for a problem: one per processor asked for, none for small ones. */
static int
kmd_plan_threads(int64_t n, int n_threads)
{
	int			team = n_threads < 1 ? 1 : n_threads;

	if (team > 1024)
		team = 1024;
	if (team > n / 64 + 1)
		team = (int) (n / 64 + 1);
	return team;
}

/* FasterPAM candidates per batch: KMD_TILE_B, or fewer for many rows. */
static int
kmd_batch_cap(int64_t n)
{
	size_t		cap = KMD_BATCH_BYTES / (sizeof(double) * (size_t) n);

	if (cap > KMD_TILE_B)
		cap = KMD_TILE_B;
	return cap < 1 ? 1 : (int) cap;
}

/*
 * Lay out one kmd_pack array of npacks packs with their panels.
 */
static kmd_pack *
kmd_alloc_packs(km_cpu_arena *ar, int npacks, int d, int dense)
{
	kmd_pack   *pk = km_cpu_alloc(ar, sizeof(kmd_pack) * npacks);
	double	   *panels = dense ? km_cpu_alloc(ar, kmd_pack_bytes(d) * npacks) : NULL;

	if (pk != NULL)
		for (int p = 0; p < npacks; p++)
			pk[p].panel = panels != NULL ? panels + (size_t) p * KMD_TILE_B * d : NULL;
	return pk;
}

/*
 * Allocate everything a call needs; st has data, n, k and sp set, and
 * nthreads planned.  Returns 0 when an allocation failed (what was taken
 * stays in the arena).  A dry arena only counts.
 */
static int
kmd_setup(kmd_state *st, km_cpu_arena *ar, kmd_call call, const kmd_params *p)
{
	const size_t n = (size_t) st->n;
	const size_t k = (size_t) st->k;
	const int	d = st->sp.d;
	const int	dense = st->sp.metric != KMD_SQFD;
	const int	team = st->nthreads;
	int			nmp = (st->k + KMD_TILE_B - 1) / KMD_TILE_B;
	size_t		heap = k > KMD_MAX_L ? k : KMD_MAX_L;
	kmd_worker *w;

	st->nblocks = (st->n + KMD_BLOCK - 1) / KMD_BLOCK;
	if (st->sp.metric != KMD_L1)
		st->aux = km_cpu_alloc(ar, sizeof(double) * n);

	st->workers = w = km_cpu_alloc(ar, sizeof(kmd_worker) * team);
	st->threads = km_cpu_alloc(ar, sizeof(pthread_t) * team);
	{
		/* one block per kind of buffer, carved per worker */
		double	   *panel = dense ? km_cpu_alloc(ar, kmd_pack_bytes(d) * team) : NULL;
		double	   *out = km_cpu_alloc(ar, sizeof(double) * KMD_TILE_A * KMD_TILE_B * team);
		double	   *xb = km_cpu_alloc(ar, kmd_block_scratch_bytes(d) * team);
		kmd_cand   *hp = call == KMD_CALL_FIT ?
			km_cpu_alloc(ar, sizeof(kmd_cand) * heap * team) : NULL;
		double	   *csum = call == KMD_CALL_SILHOUETTE ?
			km_cpu_alloc(ar, sizeof(double) * k * KMD_TILE_A * team) : NULL;

		for (int t = 0; w != NULL && !ar->failed && t < team; t++)
		{
			memset(&w[t], 0, sizeof(w[t]));
			w[t].pack.panel = panel != NULL ? panel + (size_t) t * KMD_TILE_B * d : NULL;
			w[t].out = out + (size_t) t * KMD_TILE_A * KMD_TILE_B;
			w[t].xb = xb + (size_t) t * KMD_MR * d;
			w[t].heap = hp != NULL ? hp + (size_t) t * heap : NULL;
			w[t].csum = csum != NULL ? csum + (size_t) t * k * KMD_TILE_A : NULL;
		}
	}
	if (call == KMD_CALL_ASSIGN)
		st->mpacks = kmd_alloc_packs(ar, nmp, d, dense);

	if (call == KMD_CALL_FIT)
	{
		int			fasterpam = p->method == KMD_FASTERPAM;

		if (p->init != KM_INIT_EXPLICIT)
			st->hashes = km_cpu_alloc(ar, sizeof(uint64_t) * n);
		st->medoids = km_cpu_alloc(ar, sizeof(int64_t) * k);
		st->is_medoid = km_cpu_alloc(ar, n);
		st->mpacks = kmd_alloc_packs(ar, nmp, d, dense);
		st->label = km_cpu_alloc(ar, sizeof(int32_t) * n);
		st->dn = km_cpu_alloc(ar, sizeof(double) * n);
		st->merge = km_cpu_alloc(ar, sizeof(kmd_cand) * heap * team);
		st->partial = km_cpu_alloc(ar, sizeof(double) * (size_t) st->nblocks * (k + KMD_MAX_L + 1));
		st->delta = km_cpu_alloc(ar, sizeof(double) * (k + KMD_MAX_L + 1));
		if (p->init == KM_INIT_KMEANSPP || p->init == KM_INIT_AFKMC2)
			st->dmin = km_cpu_alloc(ar, sizeof(double) * n);
		if (fasterpam)
		{
			st->bcap = kmd_batch_cap(st->n);
			st->second = km_cpu_alloc(ar, sizeof(int32_t) * n);
			st->ds = km_cpu_alloc(ar, sizeof(double) * n);
			st->cols = km_cpu_alloc(ar, sizeof(double) * n * st->bcap);
			st->removal = km_cpu_alloc(ar, sizeof(double) * k);
		}
		if (!fasterpam)
			st->job_items = km_cpu_alloc(ar, sizeof(int64_t) * 3 *
										 (2 * k + 8 * (size_t) team + 8));
		/* the seeding pass's candidates, FasterPAM's batch: one pack */
		st->cpack = kmd_alloc_packs(ar, 1, d, dense);
	}
	return !ar->failed;
}

/*
 * Upper bound of the bytes a fit asks of hooks->alloc.
 */
static size_t
kmd_cpu_fit_workspace(int64_t n, int d, const kmd_params *params, int n_threads)
{
	kmd_state	st;
	km_cpu_arena ar;
	size_t		bytes;

	if (n < 1 || d < 1 || params == NULL || params->k < 1)
		return 0;
	memset(&st, 0, sizeof(st));
	st.n = n;
	st.k = params->k;
	st.sp.metric = params->metric;
	st.sp.d = d;
	st.nthreads = kmd_plan_threads(n, n_threads);
	km_cpu_arena_init(&ar, NULL, 1);
	kmd_setup(&st, &ar, KMD_CALL_FIT, params);
	bytes = ar.bytes;
	if (params->method == KMD_ALTERNATE)
		bytes += kmd_alternate_bytes(n, params->k, st.nthreads);
	if (params->init == KM_INIT_AFKMC2)
		bytes += kmd_afkmc2_bytes(n, params->k, params->chain_length);
	return bytes;
}

/* Fill in error and return its status. */
static km_status
kmd_fail(km_error *error, km_status status, const char *message)
{
	if (error != NULL)
	{
		error->status = status;
		snprintf(error->message, sizeof(error->message), "%s", message);
	}
	return status;
}

static km_status
kmd_finish(km_error *error, km_status status)
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
			return kmd_fail(error, status, "out of memory");
		case KM_ERR_CANCELLED:
			return kmd_fail(error, status, "canceled");
		default:
			if (error != NULL && error->status == status && error->message[0] != '\0')
				return status;
			return kmd_fail(error, status, "invalid parameters");
	}
}

/*
 * Whether rows are well formed: n pointers, d >= 1, and for sqfd feature
 * counts of at least 1.  Returns a message, or NULL when they are.
 */
static const char *
kmd_check_data(const kmd_data *data, int metric)
{
	if (data == NULL || data->n < 0)
		return "no data";
	if (data->d < 1)
		return "dimension must be at least 1";
	if (data->n > 0 && data->rows == NULL)
		return "no rows";
	if (metric < KMD_METRIC_L2 || metric > KMD_METRIC_SQFD)
		return "unknown metric";
	if (metric == KMD_METRIC_SQFD)
	{
		if (data->d < 2)
			return "sqfd features need a weight and at least one coordinate";
		if (data->n > 0 && data->nfeat == NULL)
			return "sqfd needs feature counts";
		for (int64_t i = 0; i < data->n; i++)
			if (data->nfeat[i] < 1)
				return "a signature needs at least one feature";
	}
	for (int64_t i = 0; i < data->n; i++)
		if (data->rows[i] == NULL)
			return "a row is missing";
	return NULL;
}

/* The common start of a call. */
static void
kmd_begin(kmd_state *st, const kmd_data *data, int k, int metric, double alpha,
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
	st->k = k;
	st->hooks = hooks;
	kmd_space_init(&st->sp, metric, data->d, alpha);
	st->nthreads = kmd_plan_threads(data->n, hooks->n_threads);
}

static void
kmd_team_start(kmd_state *st)
{
	st->nthreads = km_pool_start(&st->pool, st->threads, st->nthreads);
	st->pool_on = 1;
}

static void
kmd_end(kmd_state *st, km_cpu_arena *ar)
{
	if (st->pool_on)
		km_pool_stop(&st->pool);
	st->pool_on = 0;
	km_cpu_arena_free(ar);
}

/* ---------------------------------------------------------------------- */
/* fit */

/*
 * The checks of a fit's (or a seeding's) arguments; a message, or NULL when
 * they are fine.
 */
static const char *
kmd_check_fit(const kmd_data *data, const kmd_params *params)
{
	const char *msg;

	if ((msg = kmd_check_data(data, params->metric)) != NULL)
		return msg;
	if (params->k < 1 || params->k > data->n)
		return "k must be between 1 and the number of rows";
	if (params->max_iter < 1)
		return "max_iter must be at least 1";
	if (params->method != KMD_ALTERNATE && params->method != KMD_FASTERPAM)
		return "unknown method";
	if (params->init != KM_INIT_KMEANSPP && params->init != KM_INIT_RANDOM &&
		params->init != KM_INIT_AFKMC2 && params->init != KM_INIT_EXPLICIT)
		return "unknown init";
	if (params->init == KM_INIT_AFKMC2 && params->chain_length < 1)
		return "chain_length must be at least 1";
	if (params->metric == KMD_METRIC_SQFD && !(params->alpha > 0.0 && isfinite(params->alpha)))
		return "alpha must be a finite number > 0";
	if (params->init == KM_INIT_EXPLICIT)
	{
		if (params->init_medoids == NULL)
			return "explicit init needs start medoids";
		for (int c = 0; c < params->k; c++)
		{
			if (params->init_medoids[c] < 0 || params->init_medoids[c] >= data->n)
				return "a start medoid is not a row";
			for (int e = 0; e < c; e++)
				if (params->init_medoids[e] == params->init_medoids[c])
					return "start medoids must be distinct rows";
		}
	}
	return NULL;
}

/*
 * The start of a fit, and all of a seeding: set up, prepare the rows, seed
 * (st->medoids).  On KM_OK the team is running and the caller ends with
 * kmd_end; otherwise everything is released.
 */
static km_status
kmd_fit_start(kmd_state *st, km_cpu_arena *ar, const kmd_data *data,
			  const kmd_params *params, const km_hooks *hooks_in, km_hooks *hooks)
{
	km_status	status;
	km_progress pr;

	kmd_begin(st, data, params->k, params->metric, params->alpha, hooks_in, hooks);
	km_cpu_arena_init(ar, hooks, 0);
	if (!kmd_setup(st, ar, KMD_CALL_FIT, params))
	{
		kmd_end(st, ar);
		return KM_ERR_NOMEM;
	}
	memset(st->is_medoid, 0, (size_t) st->n);
	kmd_team_start(st);

	kmd_prepare(st);
	memset(&pr, 0, sizeof(pr));
	pr.phase = KM_PHASE_PREPARE;
	pr.done = pr.total = st->n;
	if (kmd_stopped(st) || kmd_report(st, &pr))
		status = KM_ERR_CANCELLED;
	else
	{
		st->arena = ar;
		status = kmd_seed(st, params);
	}
	if (status != KM_OK)
		kmd_end(st, ar);
	return status;
}

static km_status
kmd_cpu_fit(const kmd_data *data, const kmd_params *params, const km_hooks *hooks_in,
			kmd_result *result, km_error *error)
{
	km_hooks	hooks;
	kmd_state	st;
	km_cpu_arena ar;
	km_status	status = KM_OK;
	const char *msg;

	if (params == NULL || result == NULL)
		return kmd_fail(error, KM_ERR_INVALID, "no parameters or result");
	if ((msg = kmd_check_fit(data, params)) != NULL)
		return kmd_fail(error, KM_ERR_INVALID, msg);
	if (result->medoids == NULL || result->sizes == NULL || result->cluster_cost == NULL)
		return kmd_fail(error, KM_ERR_INVALID, "result arrays missing");

	status = kmd_fit_start(&st, &ar, data, params, hooks_in, &hooks);
	if (status != KM_OK)
		return kmd_finish(error, status);

	if (params->method == KMD_FASTERPAM)
		status = kmd_fasterpam(&st, params, result);
	else
	{
		kmd_steps	steps;
		km_hooks	inner = hooks;

		/* the loop's own progress reports are the ones the caller sees */
		kmd_cpu_steps(&st, &steps);
		status = kmd_alternate(&steps, data, params, &inner, st.medoids, result, error);
		if (status == KM_ERR_CANCELLED)
			__atomic_store_n(&st.stop, 1, __ATOMIC_RELAXED);
	}

	kmd_end(&st, &ar);
	return kmd_finish(error, status);
}

/* The seeding of a fit alone: the start medoids into medoids (k). */
static km_status
kmd_cpu_seed(const kmd_data *data, const kmd_params *params, const km_hooks *hooks_in,
			 int64_t *medoids, km_error *error)
{
	km_hooks	hooks;
	kmd_state	st;
	km_cpu_arena ar;
	km_status	status;
	const char *msg;

	if (params == NULL || medoids == NULL)
		return kmd_fail(error, KM_ERR_INVALID, "no parameters or medoids");
	if ((msg = kmd_check_fit(data, params)) != NULL)
		return kmd_fail(error, KM_ERR_INVALID, msg);

	status = kmd_fit_start(&st, &ar, data, params, hooks_in, &hooks);
	if (status != KM_OK)
		return kmd_finish(error, status);
	memcpy(medoids, st.medoids, sizeof(int64_t) * params->k);
	kmd_end(&st, &ar);
	return kmd_finish(error, KM_OK);
}

/* ---------------------------------------------------------------------- */
/* assign */

static km_status
kmd_cpu_assign(const kmd_data *data, const kmd_data *medoids, kmd_metric metric,
			   double alpha, int32_t *labels, double *distances,
			   const km_hooks *hooks_in, km_error *error)
{
	km_hooks	hooks;
	kmd_state	st;
	km_cpu_arena ar;
	km_status	status = KM_OK;
	const char *msg;
	kmd_pack   *mp;
	double		maux[KMD_TILE_B];

	if ((msg = kmd_check_data(data, metric)) != NULL ||
		(msg = kmd_check_data(medoids, metric)) != NULL)
		return kmd_fail(error, KM_ERR_INVALID, msg);
	if (medoids->n < 1 || medoids->n > INT32_MAX || medoids->d != data->d)
		return kmd_fail(error, KM_ERR_INVALID, "medoids do not match the rows");
	if (metric == KMD_METRIC_SQFD && !(alpha > 0.0 && isfinite(alpha)))
		return kmd_fail(error, KM_ERR_INVALID, "alpha must be a finite number > 0");
	if (labels == NULL || distances == NULL)
		return kmd_fail(error, KM_ERR_INVALID, "result arrays missing");
	if (data->n == 0)
		return kmd_finish(error, KM_OK);

	kmd_begin(&st, data, (int) medoids->n, metric, alpha, hooks_in, &hooks);
	km_cpu_arena_init(&ar, &hooks, 0);
	if (!kmd_setup(&st, &ar, KMD_CALL_ASSIGN, NULL))
	{
		kmd_end(&st, &ar);
		return kmd_finish(error, KM_ERR_NOMEM);
	}
	kmd_team_start(&st);
	kmd_prepare(&st);

	/* the medoids' packs, from their own rows */
	mp = st.mpacks;
	for (int p = 0; p * KMD_TILE_B < st.k; p++)
	{
		int			nc = st.k - p * KMD_TILE_B < KMD_TILE_B ? st.k - p * KMD_TILE_B : KMD_TILE_B;

		mp[p].r.n = 0;
		for (int j = 0; j < nc; j++)
		{
			int64_t		c = (int64_t) p * KMD_TILE_B + j;
			int			m = medoids->nfeat != NULL ? medoids->nfeat[c] : 1;

			maux[j] = kmd_aux(metric, medoids->rows[c], m, data->d, alpha);
			mp[p].r.row[j] = medoids->rows[c];
			mp[p].r.m[j] = medoids->nfeat != NULL ? m : 0;
			mp[p].r.aux[j] = maux[j];
			mp[p].r.n++;
		}
		kmd_pack_rows(&st.sp, &mp[p]);
	}
	kmd_nearest_into(&st, mp, labels, distances, 0);
	if (kmd_stopped(&st))
		status = KM_ERR_CANCELLED;
	kmd_end(&st, &ar);
	return kmd_finish(error, status);
}

/* ---------------------------------------------------------------------- */
/* silhouette */

/*
 * One worker's share of the silhouette: items are tiles of KMD_TILE_A
 * rows; each row's distances to every row go into per-cluster sums, in row
 * order, then into its s_i.
 */
static void
kmd_silhouette_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const int32_t *label = st->job_labels;
	const int64_t *size = st->job_sizes;
	const int	k = st->k;
	int64_t		item;

	while (kmd_take(st, id, &item))
	{
		int64_t		i0 = item * KMD_TILE_A;
		int			na = st->n - i0 < KMD_TILE_A ? (int) (st->n - i0) : KMD_TILE_A;

		memset(wk->csum, 0, sizeof(double) * (size_t) k * na);
		wk->a.n = 0;
		for (int i = 0; i < na; i++)
			kmd_rows_add(st, &wk->a, i0 + i);
		for (int64_t j0 = 0; j0 < st->n && !kmd_poll(st, id); j0 += KMD_TILE_B)
		{
			int			nb = st->n - j0 < KMD_TILE_B ? (int) (st->n - j0) : KMD_TILE_B;

			wk->pack.r.n = 0;
			for (int j = 0; j < nb; j++)
				kmd_rows_add(st, &wk->pack.r, j0 + j);
			kmd_pack_rows(&st->sp, &wk->pack);
			kmd_block(&st->sp, &wk->a, &wk->pack, wk->out, wk->xb);
			for (int i = 0; i < na; i++)
			{
				double	   *cs = wk->csum + (size_t) i * k;
				const double *row = wk->out + (size_t) i * KMD_TILE_B;

				for (int j = 0; j < nb; j++)
					if (j0 + j != i0 + i)
						cs[label[j0 + j]] += row[j];
			}
		}
		for (int i = 0; i < na; i++)
		{
			const double *cs = wk->csum + (size_t) i * k;
			int			l = label[i0 + i];
			double		a;
			double		b = INFINITY;
			double		s = 0.0;

			for (int c = 0; c < k; c++)
				if (c != l && size[c] > 0 && cs[c] / (double) size[c] < b)
					b = cs[c] / (double) size[c];
			if (size[l] > 1)
			{
				a = cs[l] / (double) (size[l] - 1);
				if ((a > b ? a : b) > 0.0)
					s = (b - a) / (a > b ? a : b);
			}
			st->job_sil[i0 + i] = s;
		}
	}
}

static km_status
kmd_cpu_silhouette(const kmd_data *data, const int32_t *labels, int k, kmd_metric metric,
				   double alpha, double *mean, const km_hooks *hooks_in, km_error *error)
{
	km_hooks	hooks;
	kmd_state	st;
	km_cpu_arena ar;
	km_status	status = KM_OK;
	const char *msg;
	int64_t    *size;
	double	   *sil;
	int			nonempty = 0;
	double		sum = 0.0;

	if ((msg = kmd_check_data(data, metric)) != NULL)
		return kmd_fail(error, KM_ERR_INVALID, msg);
	if (labels == NULL || mean == NULL || k < 1)
		return kmd_fail(error, KM_ERR_INVALID, "no labels");
	if (metric == KMD_METRIC_SQFD && !(alpha > 0.0 && isfinite(alpha)))
		return kmd_fail(error, KM_ERR_INVALID, "alpha must be a finite number > 0");
	for (int64_t i = 0; i < data->n; i++)
		if (labels[i] < 0 || labels[i] >= k)
			return kmd_fail(error, KM_ERR_INVALID, "a label is out of range");

	kmd_begin(&st, data, k, metric, alpha, hooks_in, &hooks);
	km_cpu_arena_init(&ar, &hooks, 0);
	kmd_setup(&st, &ar, KMD_CALL_SILHOUETTE, NULL);
	size = km_cpu_alloc(&ar, sizeof(int64_t) * (size_t) k);
	sil = km_cpu_alloc(&ar, sizeof(double) * (size_t) (data->n > 0 ? data->n : 1));
	if (ar.failed)
	{
		kmd_end(&st, &ar);
		return kmd_finish(error, KM_ERR_NOMEM);
	}
	memset(size, 0, sizeof(int64_t) * (size_t) k);
	for (int64_t i = 0; i < data->n; i++)
		if (size[labels[i]]++ == 0)
			nonempty++;
	if (nonempty < 2)
	{
		kmd_end(&st, &ar);
		return kmd_fail(error, KM_ERR_INVALID, "the silhouette needs two clusters with rows");
	}

	kmd_team_start(&st);
	kmd_prepare(&st);
	st.job_labels = labels;
	st.job_sizes = size;
	st.job_sil = sil;
	kmd_run(&st, kmd_silhouette_worker, (st.n + KMD_TILE_A - 1) / KMD_TILE_A,
			(double) st.n * st.n * kmd_pair_work(&st));
	if (kmd_stopped(&st))
		status = KM_ERR_CANCELLED;
	else
	{
		for (int64_t i = 0; i < st.n; i++)
			sum += sil[i];
		*mean = sum / (double) st.n;
	}
	kmd_end(&st, &ar);
	return kmd_finish(error, status);
}

const kmd_engine kmd_cpu_engine = {
	KMD_ENGINE_ABI,
	"cpu",
	kmd_cpu_fit_workspace,
	kmd_cpu_fit,
	kmd_cpu_assign,
	kmd_cpu_silhouette,
	kmd_cpu_seed
};
