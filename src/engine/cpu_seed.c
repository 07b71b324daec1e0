/*
 * cpu_seed.c
 *	  Initial centroids: greedy k-means++, random rows, or the caller's.
 *
 * Every random choice is a row's sampling key (km_hash.h), so seeds do not
 * depend on row order.  Random init takes the k rows with the smallest
 * keys under weight w.  k-means++ takes the smallest key under w first,
 * then at each step s draws L = 2 + ln k candidates by their keys under
 * w * D2 (D2: squared distance to the nearest centroid so far, in filter
 * arithmetic) and keeps the candidate that leaves the lowest potential
 * sum w * min(D2, dist^2 to it), as scikit-learn does.
 *
 * Each step is one pass over the rows.  The pass for step s computes, per
 * row, the distances to the L candidates (the filter kernel) and,
 * in the same column block, to the centroid chosen at step s - 1, which it
 * folds into D2 first.  Since the winner of step s is only known once all
 * potentials are in, the pass also keeps, for every candidate, the rows
 * with the smallest keys of step s + 1 had that candidate won: the next
 * candidates are then ready when the winner is, without a second pass or
 * n x L distances kept in memory.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "km_exact.h"
#include "km_hash.h"

/* Room for L = 2 + ln k candidates, k < 2^31. */
#define KM_CPU_MAX_L 32

/*
 * Centroid j becomes row x (cosine: the normalised row).
 */
static void
km_cpu_take_row(km_cpu_state *st, int j, const float *x)
{
	float	   *c = st->cent + (size_t) j * st->d;

	if (st->cosine)
	{
		if (km_normalize_row(x, c, st->d) == 0.0)
			memset(c, 0, sizeof(float) * st->d);
	}
	else
		memcpy(c, x, sizeof(float) * st->d);
}

/*
 * Offer a row to a bounded heap, looking at the root first: most rows lose
 * against it, and then no call is made.
 */
static inline void
km_cpu_offer(km_cpu_cand *heap, int *len, int cap, double key, uint64_t hash,
			 int64_t row, const float *x, float w)
{
	km_cpu_cand c;

	if (*len == cap && key > heap[0].key)
		return;
	c.key = key;
	c.hash = hash;
	c.row = row;
	c.x = x;
	c.w = w;
	km_cpu_heap_push(heap, len, cap, &c);
}

/*
 * One worker's share of a key pass: its st->nsel rows with the smallest
 * km_sample_key under weight w in stream st->stream.
 */
static void
km_cpu_keys_worker(void *arg, int id)
{
	km_cpu_state *st = (km_cpu_state *) arg;
	km_cpu_worker *wk = &st->workers[id];
	km_cpu_cursor cur;
	km_cpu_tile t;

	wk->nheap = 0;
	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
		for (int i = 0; i < t.n; i++)
		{
			float		w = t.w != NULL ? t.w[i] : 1.0f;
			double		key = km_sample_key(st->hashes[t.row + i], st->stream, w);

			km_cpu_offer(wk->heap, &wk->nheap, st->nsel, key, st->hashes[t.row + i], t.row + i,
						 t.x + (size_t) i * st->d, w);
		}
}

/*
 * The m rows with the smallest keys under w in a stream, sorted, in
 * st->merge; returns how many (all rows, at most m each per worker).
 */
static int
km_cpu_smallest_keys(km_cpu_state *st, uint64_t stream, int m)
{
	st->stream = stream;
	st->nsel = m;
	km_pool_run(&st->pool, km_cpu_keys_worker, st);
	if (km_cpu_stopped(st))
		return 0;
	return km_cpu_merge(st, -1);
}

/*
 * One worker's share of a k-means++ pass (see the file header): fold the
 * last centroid into D2, add up each candidate's potential, and keep, per
 * candidate, the best keys of the next step should it win, plus the best
 * keys under w alone for when no row is left with D2 > 0.
 */
static void
km_cpu_pp_worker(void *arg, int id)
{
	km_cpu_state *st = (km_cpu_state *) arg;
	km_cpu_worker *wk = &st->workers[id];
	const km_cpu_pp *pp = st->pp;
	const int	L = st->L;
	const int	d = st->d;
	const int	off = pp->first || pp->prev ? 1 : 0;
	const int	ppw = pp->npanels * KM_CPU_NR;
	km_cpu_cand *fallback = wk->ppheap + (size_t) L * L;
	km_cpu_cursor cur;
	km_cpu_tile t;

	for (int l = 0; l <= L; l++)
		wk->ppn[l] = 0;
	for (int l = 0; l < L; l++)
		wk->pot[l] = 0.0;

	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
	{
		const float *a = km_cpu_tile_rows(st, wk, &t);

		/* filter values of the tile against the columns, ppw per row */
		for (int r0 = 0; r0 < t.n; r0 += KM_CPU_MR)
		{
			const float *x[KM_CPU_MR];
			float	   *out[KM_CPU_MR];
			int			m = t.n - r0 < KM_CPU_MR ? t.n - r0 : KM_CPU_MR;

			for (int r = 0; r < KM_CPU_MR; r++)
			{
				x[r] = a + (size_t) (r0 + (r < m ? r : m - 1)) * d;
				out[r] = wk->fbuf + (size_t) (r0 + r) * ppw;
			}
			km_cpu_filter_values(st, x, m, st->pppanels, st->ppcnp, 0,
								 pp->npanels, out);
		}

		for (int i = 0; i < t.n; i++)
		{
			const float *f = wk->fbuf + (size_t) i * ppw;
			const float x2 = wk->xn2[i];
			const int64_t g = t.row + i;
			const float *x = t.x + (size_t) i * d;
			float		w = t.w != NULL ? t.w[i] : 1.0f;
			float		d2 = 0.0f;
			double		e = 0.0;

			if (off)
			{
				float		d0 = x2 + f[0];

				d0 = d0 > 0.0f ? d0 : 0.0f;
				d2 = (pp->first || d0 < st->d2[g]) ? d0 : st->d2[g];
			}
			else
				d2 = st->d2[g];
			st->d2[g] = d2;
			if (!(w > 0.0f))
				continue;

			if (pp->keys)
			{
				/* km_sample_key(h, stream, a) is e / a for every weight a */
				e = -log(km_uniform(st->hashes[g], pp->stream));
				km_cpu_offer(fallback, &wk->ppn[L], 1, e / (double) w, st->hashes[g], g, x, w);
				if (pp->ncand == 0 && d2 > 0.0f)
					km_cpu_offer(wk->ppheap, &wk->ppn[0], L,
								 e / ((double) w * d2), st->hashes[g], g, x, w);
			}
			for (int l = 0; l < pp->ncand; l++)
			{
				float		dl = x2 + f[off + l];
				float		m = dl < d2 ? (dl > 0.0f ? dl : 0.0f) : d2;

				wk->pot[l] += (double) w * m;
				if (pp->keys && m > 0.0f)
					km_cpu_offer(wk->ppheap + (size_t) l * L, &wk->ppn[l], L,
								 e / ((double) w * m), st->hashes[g], g, x, w);
			}
		}
	}
}

/*
 * Pack the first ncols k-means++ columns for the filter; returns the panels.
 */
static int
km_cpu_pack_columns(km_cpu_state *st, int ncols)
{
	km_cpu_filter_pack(st->ppcols, st->ppcolsn, ncols, st->d, st->pppanels, st->ppcnp);
	return (ncols + KM_CPU_NR - 1) / KM_CPU_NR;
}

/*
 * Report seeding progress: throttled to about twice a second unless final.
 * potential: k-means++'s sum of w D2 over the rows for the centroids chosen
 * so far (0: not known).  Returns nonzero when the caller asked to stop.
 */
static int
km_cpu_seed_report(km_cpu_state *st, int run, int done, double potential, double *last, int final)
{
	km_progress p;
	double		now;

	if (st->hooks->report == NULL)
		return 0;
	now = km_cpu_now();
	if (!final && now - *last < 0.5)
		return 0;
	*last = now;
	memset(&p, 0, sizeof(p));
	p.phase = KM_PHASE_SEED;
	p.run = run;
	p.done = done;
	p.total = st->k;
	p.inertia = potential;
	return km_cpu_report(st, &p);
}

/*
 * Greedy k-means++ into st->cent (see the file header).
 */
static km_status
km_cpu_kmeanspp(km_cpu_state *st, const km_params *params, int run)
{
	const int	k = st->k;
	const int	d = st->d;
	const int	L = st->L;
	km_cpu_cand cands[KM_CPU_MAX_L];
	km_cpu_cand first;
	double		pot[KM_CPU_MAX_L];
	km_cpu_pp	pp;
	double		last = km_cpu_now();
	int			outcome = 0;
	int			chosen_col = 0;

	/* the first centroid: the smallest key under w */
	if (km_cpu_smallest_keys(st, km_stream(params->seed, run, 0), 1) == 0)
		return KM_ERR_CANCELLED;
	first = st->merge[0];
	km_cpu_take_row(st, 0, first.x);
	if (k == 1)
		return km_cpu_seed_report(st, run, 1, 0.0, &last, 1) ? KM_ERR_CANCELLED : KM_OK;

	/* D2 from it, and the keys of step 1 */
	memset(&pp, 0, sizeof(pp));
	st->ppcolsn[0] = km_cpu_filter_row(st, first.x, st->ppcols);
	pp.ncols = 1;
	pp.npanels = km_cpu_pack_columns(st, 1);
	pp.first = 1;
	pp.keys = 1;
	pp.stream = km_stream(params->seed, run, 1);
	st->pp = &pp;
	km_pool_run(&st->pool, km_cpu_pp_worker, st);
	if (km_cpu_stopped(st))
		return KM_ERR_CANCELLED;

	for (int s = 1; s < k; s++)
	{
		int			ncand;
		int			off = s >= 2 ? 1 : 0;
		int			best = 0;

		/* the candidates of step s, had the last winner been chosen */
		ncand = km_cpu_merge(st, outcome);
		if (ncand == 0)
			ncand = km_cpu_merge(st, L) > 0 ? 1 : 0;
		if (ncand > L)
			ncand = L;
		memcpy(cands, st->merge, sizeof(km_cpu_cand) * ncand);
		if (ncand == 0)
		{
			/* no finite key at all (weights too small to draw): repeat */
			cands[0] = first;
			ncand = 1;
		}

		/* columns: the last winner (to fold into D2), then the candidates */
		if (off)
		{
			memmove(st->ppcols, st->ppcols + (size_t) chosen_col * d,
					sizeof(float) * d);
			st->ppcolsn[0] = st->ppcolsn[chosen_col];
		}
		for (int l = 0; l < ncand; l++)
			st->ppcolsn[off + l] = km_cpu_filter_row(st, cands[l].x,
													 st->ppcols + (size_t) (off + l) * d);
		pp.ncols = off + ncand;
		pp.npanels = km_cpu_pack_columns(st, pp.ncols);
		pp.first = 0;
		pp.prev = off;
		pp.ncand = ncand;
		pp.keys = s < k - 1;
		pp.stream = km_stream(params->seed, run, s + 1);
		km_pool_run(&st->pool, km_cpu_pp_worker, st);
		if (km_cpu_stopped(st))
			return KM_ERR_CANCELLED;

		/* the lowest potential wins; ties to the smaller key */
		for (int l = 0; l < ncand; l++)
		{
			pot[l] = 0.0;
			for (int t = 0; t < st->nthreads; t++)
				pot[l] += st->workers[t].pot[l];
			if (pot[l] < pot[best])
				best = l;
		}
		km_cpu_take_row(st, s, cands[best].x);
		outcome = best;
		chosen_col = off + best;

		/* pot[best]: the potential with the winner, the sum its pass made for it */
		if (km_cpu_seed_report(st, run, s + 1, pot[best], &last, s == k - 1))
			return KM_ERR_CANCELLED;
	}
	return KM_OK;
}

/*
 * Initial centroids of run number run into st->cent.
 */
km_status
km_cpu_seed(km_cpu_state *st, const km_params *params, int run, km_error *error)
{
	const int	d = st->d;

	switch (params->init)
	{
		case KM_INIT_EXPLICIT:
			for (int j = 0; j < st->k; j++)
				km_cpu_take_row(st, j, params->init_centroids + (size_t) j * d);
			return KM_OK;

		case KM_INIT_RANDOM:
			if (km_cpu_smallest_keys(st, km_stream(params->seed, run, 0), st->k) < st->k)
				return KM_ERR_CANCELLED;
			for (int j = 0; j < st->k; j++)
				km_cpu_take_row(st, j, st->merge[j].x);
			return KM_OK;

		case KM_INIT_KMEANSPP:
			return km_cpu_kmeanspp(st, params, run);

		case KM_INIT_KMEANS_PARALLEL:
			return km_cpu_kmeans_parallel(st, params, run, error);

		case KM_INIT_AFKMC2:
			return km_cpu_afkmc2(st, params, run);	/* cpu_afkmc2.c */
	}
	error->status = KM_ERR_INVALID;
	return KM_ERR_INVALID;
}
