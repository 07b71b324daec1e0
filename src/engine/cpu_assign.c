/*
 * cpu_assign.c
 *	  Passes over the rows: the exact assignment and what is folded into it.
 *
 * A tile of rows is labelled by the float32 filter of cpu_filter.c, f_ij =
 * |c'_j|^2 - 2 x'_i.c'_j, which leaves each row's best and second best
 * value.  Where the two are closer than km_filter_slack the filter cannot
 * be trusted, and the row is settled with km_exact.h among the centroids the
 * filter cannot rule out, so that every label is what km_exact_nearest
 * would say.
 *
 * For l2, x' = x - mu and c' = c - mu with mu the mean of the rows (or of
 * the centroids for assign and map): centring keeps |x'| small, hence the
 * slack, when data sit far from the origin.  When they do not (|mu| is
 * small next to the rows' spread) we skip it, read the rows in place and
 * save a copy per tile; labels are exact either way.  For cosine, x' is the
 * normalised row and c' the normalised centroid.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "km_exact.h"
#include "km_hash.h"

/*
 * Place a cursor at the start of worker id's slice of the rows: the rows
 * are cut into nthreads contiguous slices of (almost) equal size.
 */
void
km_cpu_cursor_init(const km_cpu_state *st, int id, km_cpu_cursor *cur)
{
	int64_t		q = st->n / st->nthreads;
	int64_t		r = st->n % st->nthreads;

	cur->row = q * id + (id < r ? id : r);
	cur->end = cur->row + q + (id < r ? 1 : 0);
	cur->base = 0;
	cur->chunk = 0;
	cur->tiles = 0;
}

/*
 * The next tile of a worker's slice; 0 when the slice is done or the pass
 * was stopped.  Worker 0 polls the caller's hook after each of its tiles
 * and raises the stop flag for everyone when told to stop.
 */
int
km_cpu_next_tile(km_cpu_state *st, int id, km_cpu_cursor *cur, km_cpu_tile *tile)
{
	const km_data *data = st->data;
	const km_chunk *ch;
	int64_t		off;
	int64_t		nt;

	if (id == 0 && cur->tiles > 0 && st->hooks->poll != NULL &&
		st->hooks->poll(st->hooks->ctx) != 0)
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
	if (cur->row >= cur->end || km_cpu_stopped(st))
		return 0;

	while (cur->row >= cur->base + data->chunks[cur->chunk].n)
	{
		cur->base += data->chunks[cur->chunk].n;
		cur->chunk++;
	}
	ch = &data->chunks[cur->chunk];
	off = cur->row - cur->base;
	nt = ch->n - off;
	if (nt > cur->end - cur->row)
		nt = cur->end - cur->row;
	if (nt > st->tile_rows)
		nt = st->tile_rows;

	tile->x = ch->x + off * st->d;
	tile->w = ch->w != NULL ? ch->w + off : NULL;
	tile->n = (int) nt;
	tile->row = cur->row;
	cur->row += nt;
	cur->tiles++;
	return 1;
}

/*
 * The tile's rows as the filter sees them, with wk->xn2 pointing at their
 * squared norms: normalised (cosine) or centred (l2 far from the origin)
 * copies in the worker's buffer, or the rows in place.
 */
const float *
km_cpu_tile_rows(km_cpu_state *st, km_cpu_worker *wk, const km_cpu_tile *t)
{
	const int	d = st->d;

	if (st->cosine)
	{
		const double *nrm;

		if (st->rownorm != NULL)
			nrm = st->rownorm + t->row;
		else
		{
			km_cpu_exact_norms(t->x, t->n, d, wk->nrm);
			nrm = wk->nrm;
		}
		for (int i = 0; i < t->n; i++)
			wk->xn2buf[i] = km_cpu_normalize(st->avx2, t->x + (size_t) i * d, nrm[i],
											 wk->xbuf + (size_t) i * d, d);
		wk->xn2 = wk->xn2buf;
		return wk->xbuf;
	}
	if (st->centred)
	{
		km_cpu_rows(st->avx2, t->x, st->mu, wk->xbuf, wk->xn2buf, t->n, d);
		wk->xn2 = wk->xn2buf;
		return wk->xbuf;
	}
	if (st->xnorm2 != NULL)
		wk->xn2 = st->xnorm2 + t->row;
	else
	{
		km_cpu_rows(st->avx2, t->x, NULL, NULL, wk->xn2buf, t->n, d);
		wk->xn2 = wk->xn2buf;
	}
	return t->x;
}

/*
 * Decide the l2 centring.  sum (NULL: st->mu is already set) is the sum of
 * count vectors and sqsum the sum of their squared norms: mu = their mean,
 * rounded to float, is used only when |mu|^2 is more than a sixteenth of
 * the mean squared norm (otherwise the slack would shrink by a few percent
 * at most, not worth a copy per tile).
 */
void
km_cpu_choose_mu(km_cpu_state *st, const double *sum, double sqsum, int64_t count)
{
	double		m2 = 0.0;

	for (int i = 0; i < st->d; i++)
	{
		if (sum != NULL)
			st->mu[i] = (float) (sum[i] / (double) count);
		m2 += (double) st->mu[i] * st->mu[i];
	}
	st->centred = !st->cosine && m2 * 16.0 > sqsum / (double) count;
}

/*
 * One vector as the filter sees it (centred, normalised or as is), written
 * to out; returns its squared norm in float.
 */
float
km_cpu_filter_row(const km_cpu_state *st, const float *x, float *out)
{
	if (st->cosine)
		return km_cpu_normalize(st->avx2, x, km_exact_norm(x, st->d), out, st->d);
	if (st->centred)
		return km_cpu_centre(st->avx2, x, st->mu, out, st->d);
	memcpy(out, x, sizeof(float) * st->d);
	return km_cpu_sqnorm(st->avx2, x, st->d);
}

/*
 * Make cref (k * d) the centroids of the next passes: their filter copies,
 * packed for the micro-kernel, squared norms and the largest norm; for
 * cosine also their exact norms.
 */
void
km_cpu_set_centroids(km_cpu_state *st, const float *cref)
{
	const int	d = st->d;
	float		cmax2 = 0.0f;

	st->cref = cref;
	for (int j = 0; j < st->k; j++)
	{
		const float *c = cref + (size_t) j * d;
		float	   *cp = st->cprime + (size_t) j * d;

		if (st->cosine)
		{
			st->cnorm[j] = km_exact_norm(c, d);
			st->cn[j] = km_cpu_normalize(st->avx2, c, st->cnorm[j], cp, d);
		}
		else if (st->centred)
			st->cn[j] = km_cpu_centre(st->avx2, c, st->mu, cp, d);
		else
			st->cn[j] = km_cpu_sqnorm(st->avx2, c, d);
		if (st->cn[j] > cmax2)
			cmax2 = st->cn[j];
	}
	st->cmax = sqrtf(cmax2);
	km_cpu_filter_pack(st->cosine || st->centred ? st->cprime : cref, st->cn,
					   st->k, d, st->panels, st->cnp);
}

/*
 * The exact winner for row x (raw for l2, normalised for cosine) among
 * ncand centroids listed in increasing order; ties go to the first.
 */
static int
km_cpu_exact_nearest(const km_cpu_state *st, const float *x, const int32_t *cand,
					 int ncand, double *cost_out)
{
	const int	d = st->d;
	const float *xs[4] = {x, x, x, x};
	double		cost[4];
	int			best = -1;
	double		best_cost = 0.0;

	for (int q = 0; q < ncand; q += 4)
	{
		const float *cs[4];
		double		cnorm[4] = {0, 0, 0, 0};
		int			m = ncand - q < 4 ? ncand - q : 4;

		for (int l = 0; l < m; l++)
		{
			cs[l] = st->cref + (size_t) cand[q + l] * d;
			if (st->cosine)
				cnorm[l] = st->cnorm[cand[q + l]];
		}
		if (m == 4)
			km_cpu_exact_cost4(xs, cs, cnorm, d, st->cosine, cost);
		else
			for (int l = 0; l < m; l++)
				cost[l] = km_exact_cost(x, cs[l], cnorm[l], d, st->cosine);
		for (int l = 0; l < m; l++)
			if (best < 0 || cost[l] < best_cost)
			{
				best = cand[q + l];
				best_cost = cost[l];
			}
	}
	*cost_out = best_cost;
	return best;
}

/*
 * Settle up to six rows of a tile that the filter could not: recompute
 * their filter values (the same values, bit for bit), keep the centroids
 * within the slack of the best, and take the exact winner among those.
 */
static void
km_cpu_settle(const km_cpu_state *st, km_cpu_worker *wk, const float *a,
			  const float *xe, const int *rows, int m)
{
	const int	d = st->d;
	const int	k = st->k;
	const float *x[KM_CPU_MR];
	float	   *out[KM_CPU_MR];
	float		slack[KM_CPU_MR];
	int			exact_all = 0;

	for (int r = 0; r < KM_CPU_MR; r++)
	{
		int			i = rows[r < m ? r : m - 1];

		x[r] = a + (size_t) i * d;
		out[r] = wk->fbuf + (size_t) r * st->kpad;
		slack[r] = km_filter_slack(d, sqrtf(wk->xn2[i]), st->cmax);
		if (r < m && !(isfinite(wk->best[i]) && isfinite(slack[r])))
			exact_all = 1;
	}
	if (!exact_all)
		km_cpu_filter_values(st, x, m, st->panels, st->cnp, 0, st->npanels, out);

	for (int r = 0; r < m; r++)
	{
		int			i = rows[r];
		int32_t    *cand = wk->cand + (size_t) r * k;
		int			ncand = 0;

		if (exact_all)
		{
			for (int j = 0; j < k; j++)
				cand[ncand++] = j;
		}
		else
		{
			for (int j = 0; j < k; j++)
				if (!(out[r][j] - wk->best[i] > slack[r]))
					cand[ncand++] = j;
		}
		wk->label[i] = km_cpu_exact_nearest(st, xe + (size_t) i * d, cand, ncand,
											&wk->cost[i]);
	}
}

/*
 * Label one tile: the filter's best and second best, then the exact check
 * of the rows it cannot settle.  Leaves wk->label, wk->best (filter value),
 * wk->cost (exact cost where computed, else -1); returns the rows exact
 * costs and M-step sums read (raw for l2, normalised for cosine).
 */
static const float *
km_cpu_tile_assign(km_cpu_state *st, km_cpu_worker *wk, const km_cpu_tile *t)
{
	const int	d = st->d;
	const int	nt = t->n;
	const float *a = km_cpu_tile_rows(st, wk, t);
	const float *xe = st->cosine ? a : t->x;
	int			amb[KM_CPU_MR];
	int			m = 0;

	km_cpu_filter_top2(st, wk, a, nt);
	for (int i = 0; i < nt; i++)
	{
		float		slack = km_filter_slack(d, sqrtf(wk->xn2[i]), st->cmax);

		wk->cost[i] = -1.0;
		if (wk->second[i] - wk->best[i] > slack)
			continue;
		/* too close to call in float */
		amb[m++] = i;
		if (m == KM_CPU_MR)
		{
			km_cpu_settle(st, wk, a, xe, amb, m);
			m = 0;
		}
	}
	if (m > 0)
		km_cpu_settle(st, wk, a, xe, amb, m);
	return xe;
}

/*
 * Exact cost of every row of the tile to its labelled centroid, where not
 * known yet, four rows at a time.
 */
static void
km_cpu_tile_costs(const km_cpu_state *st, km_cpu_worker *wk,
				  const km_cpu_tile *t, const float *xe)
{
	const int	d = st->d;
	const float *xs[4];
	const float *cs[4];
	double		cnorm[4] = {0, 0, 0, 0};
	double		cost[4];
	int			idx[4];
	int			m = 0;

	for (int i = 0; i < t->n; i++)
	{
		int			j = wk->label[i];

		if (wk->cost[i] >= 0.0)
			continue;
		idx[m] = i;
		xs[m] = xe + (size_t) i * d;
		cs[m] = st->cref + (size_t) j * d;
		cnorm[m] = st->cosine ? st->cnorm[j] : 0.0;
		if (++m < 4)
			continue;
		km_cpu_exact_cost4(xs, cs, cnorm, d, st->cosine, cost);
		for (int l = 0; l < 4; l++)
			wk->cost[idx[l]] = cost[l];
		m = 0;
	}
	for (int l = 0; l < m; l++)
		wk->cost[idx[l]] = km_exact_cost(xs[l], cs[l], cnorm[l], d, st->cosine);
}

/*
 * The row loop of a Lloyd iteration (KM_CPU_LLOYD), the hot one: count
 * moves, store labels, add each row to its cluster's sums.  Everything is
 * read into locals first, since the compiler cannot tell that the stores do
 * not touch the worker's arrays.
 */
static void
km_cpu_rows_lloyd(const km_cpu_state *st, km_cpu_worker *wk,
				  const km_cpu_tile *t, const float *xe)
{
	const int32_t *lab = wk->label;
	const double *cost = wk->cost;
	const float *best = wk->best;
	const float *xn2 = wk->xn2;
	const float *wt = t->w;
	int32_t    *labels = st->labels + t->row;
	double	   *wsum = wk->wsum;
	int64_t    *counts = wk->counts;
	int64_t		moved = 0;
	double		exact = 0.0;
	double		approx = 0.0;

	for (int i = 0; i < t->n; i++)
	{
		const int	j = lab[i];
		const double w = wt != NULL ? (double) wt[i] : 1.0;

		moved += labels[i] != j;
		labels[i] = j;
		counts[j]++;
		if (st->wlev.n == 1)
			wsum[j] += w;
		else
			km_xlevels_add(&st->wlev, wsum + j, (size_t) st->k, w);
		if (cost[i] >= 0.0)
			exact += w * cost[i];
		else
		{
			double		c = (double) best[i] + xn2[i];

			approx += c > 0.0 ? w * c : 0.0;
		}
	}
	/* the filter's estimate is |x - c|^2: 2 - 2 cos for cosine */
	wk->inertia += exact + (st->cosine ? 0.5 * approx : approx);
	wk->moved += moved;
	km_cpu_accumulate(st->avx2, &st->xlev, wk->sums, (size_t) st->k * st->d, xe, lab, wt,
					  t->n, st->d);
}

/*
 * Offer a row to a worker's heap of the rows farthest from their centroids
 * (key = -cost): its hash is computed only for a row that enters the heap
 * or ties with the root.
 */
static void
km_cpu_offer_far(const km_cpu_state *st, km_cpu_worker *wk, double cost,
				 int64_t row, const float *x, float w)
{
	km_cpu_cand c;

	c.key = -cost;
	if (wk->nheap == st->nsel && c.key > wk->heap[0].key)
		return;
	c.hash = km_row_hash(x, st->d, w);
	c.row = row;
	c.x = x;
	c.w = w;
	km_cpu_heap_push(wk->heap, &wk->nheap, st->nsel, &c);
}

/*
 * One worker's share of a pass (st->flags says what it does): label the
 * rows or take their labels, then count moves, accumulate the M-step sums,
 * exact costs or the farthest rows, into this worker's own accumulators.
 */
static void
km_cpu_pass_worker(void *arg, int id)
{
	km_cpu_state *st = (km_cpu_state *) arg;
	km_cpu_worker *wk = &st->workers[id];
	const int	d = st->d;
	const int	k = st->k;
	const int	flags = st->flags;
	km_cpu_cursor cur;
	km_cpu_tile t;

	wk->inertia = 0.0;
	wk->moved = 0;
	wk->nheap = 0;
	if (flags & KM_CPU_SUMS)
	{
		memset(wk->sums, 0, sizeof(double) * (size_t) st->xlev.n * k * d);
		memset(wk->wsum, 0, sizeof(double) * (size_t) st->wlev.n * k);
	}
	if (flags & (KM_CPU_SUMS | KM_CPU_COST))
		memset(wk->counts, 0, sizeof(int64_t) * k);
	if (flags & KM_CPU_COST)
	{
		memset(wk->csum, 0, sizeof(double) * k);
		if (wk->cacc != NULL)
			for (int j = 0; j < k; j++)
				km_xacc_clear(&wk->cacc[j]);
	}

	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
	{
		const float *xe;

		if (flags & KM_CPU_ASSIGN)
			xe = km_cpu_tile_assign(st, wk, &t);
		else
		{
			xe = st->cosine ? km_cpu_tile_rows(st, wk, &t) : t.x;
			for (int i = 0; i < t.n; i++)
			{
				wk->label[i] = st->labels[t.row + i];
				wk->cost[i] = -1.0;
			}
		}
		if (flags & (KM_CPU_COST | KM_CPU_FARTHEST))
			km_cpu_tile_costs(st, wk, &t, xe);
		if (flags == KM_CPU_LLOYD)
		{
			km_cpu_rows_lloyd(st, wk, &t, xe);
			continue;
		}

		for (int i = 0; i < t.n; i++)
		{
			int64_t		g = t.row + i;
			int			lab = wk->label[i];
			float		w = t.w != NULL ? t.w[i] : 1.0f;

			if ((flags & KM_CPU_MOVED) && st->labels[g] != lab)
				wk->moved++;
			if (st->labels_out != NULL)
				st->labels_out[g] = lab;
			if (flags & (KM_CPU_SUMS | KM_CPU_COST))
				wk->counts[lab]++;
			if (flags & KM_CPU_SUMS)
			{
				km_xlevels_add(&st->wlev, wk->wsum + lab, (size_t) k, w);
				km_cpu_accumulate(st->avx2, &st->xlev, wk->sums, (size_t) k * d,
								  xe + (size_t) i * d, &wk->label[i],
								  t.w != NULL ? t.w + i : NULL, 1, d);
			}
			if (flags & KM_CPU_COST)
			{
				double		c = (double) w * wk->cost[i];

				wk->csum[lab] += c;
				if (wk->cacc != NULL)
					km_xacc_add(&wk->cacc[lab], c);
				wk->inertia += c;
				if (st->dist_out != NULL)
					st->dist_out[g] = km_cost_to_distance(wk->cost[i], st->cosine);
				if (st->cost_out != NULL)
					st->cost_out[g] = wk->cost[i];
				/* k-means||: a new candidate nearer than every earlier one */
				if (st->fold_cost != NULL && wk->cost[i] < st->fold_cost[g])
				{
					st->fold_cost[g] = wk->cost[i];
					st->fold_label[g] = st->fold_first + lab;
				}
			}
			else if (flags & KM_CPU_ASSIGN)
			{
				double		c = wk->cost[i];

				/* the filter's estimate; cosine filters 2 - 2 cos */
				if (c < 0.0)
				{
					c = (double) wk->best[i] + wk->xn2[i];
					c = c > 0.0 ? (st->cosine ? 0.5 * c : c) : 0.0;
				}
				wk->inertia += (double) w * c;
			}
			if (flags & KM_CPU_FARTHEST)
				km_cpu_offer_far(st, wk, wk->cost[i], g, t.x + (size_t) i * d, w);
		}
	}
}

/*
 * Run one pass over all rows on the team.  st->stop tells afterwards
 * whether it was cut short.
 */
void
km_cpu_pass(km_cpu_state *st, int flags)
{
	st->flags = flags;
	km_pool_run(&st->pool, km_cpu_pass_worker, st);
}

/*
 * Sum the workers' accumulators of the last pass into st, in worker order
 * (every sum is exact, so the order changes nothing but is fixed anyway),
 * with the weights and the inertia rounded to double.
 */
void
km_cpu_reduce(km_cpu_state *st, int flags)
{
	const size_t kd = (size_t) st->k * st->d;
	const int	k = st->k;

	if (flags & KM_CPU_SUMS)
	{
		const size_t xn = (size_t) st->xlev.n * kd;
		const size_t wn = (size_t) st->wlev.n * k;

		memcpy(st->sums, st->workers[0].sums, sizeof(double) * xn);
		memcpy(st->wsum, st->workers[0].wsum, sizeof(double) * wn);
		for (int t = 1; t < st->nthreads; t++)
		{
			const km_cpu_worker *wk = &st->workers[t];

			for (size_t i = 0; i < xn; i++)
				st->sums[i] += wk->sums[i];
			for (size_t j = 0; j < wn; j++)
				st->wsum[j] += wk->wsum[j];
		}
		for (int j = 0; j < k; j++)
			st->wsumr[j] = km_xlevels_round(st->wsum + j, st->wlev.n, (size_t) k);
	}
	if (flags & (KM_CPU_SUMS | KM_CPU_COST))
	{
		memcpy(st->counts, st->workers[0].counts, sizeof(int64_t) * k);
		for (int t = 1; t < st->nthreads; t++)
			for (int j = 0; j < k; j++)
				st->counts[j] += st->workers[t].counts[j];
	}
	if (flags & KM_CPU_COST)
	{
		memcpy(st->csum, st->workers[0].csum, sizeof(double) * k);
		for (int t = 1; t < st->nthreads; t++)
			for (int j = 0; j < k; j++)
				st->csum[j] += st->workers[t].csum[j];
		/* the exact sum, rounded once */
		if (st->cacc != NULL)
			for (int j = 0; j < k; j++)
			{
				km_xacc_clear(&st->cacc[j]);
				for (int t = 0; t < st->nthreads; t++)
					km_xacc_merge(&st->cacc[j], &st->workers[t].cacc[j]);
				st->csum[j] = km_xacc_round(&st->cacc[j]);
			}
	}
}

/*
 * One worker's share of the pass before seeding: row hashes, the sums
 * behind mu, the total weight, and per-row norms (squared in float for l2,
 * exact for cosine) kept for every later pass.
 */
static void
km_cpu_prepare_worker(void *arg, int id)
{
	km_cpu_state *st = (km_cpu_state *) arg;
	km_cpu_worker *wk = &st->workers[id];
	const int	d = st->d;
	km_cpu_cursor cur;
	km_cpu_tile t;

	wk->wtotal = 0.0;
	wk->sqsum = 0.0;
	km_xstats_init(&wk->xs);
	memset(wk->dvec, 0, sizeof(double) * d);

	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
	{
		if (st->cosine)
			km_cpu_exact_norms(t.x, t.n, d, st->rownorm + t.row);
		km_cpu_xstats_rows(st->avx2, t.x, t.w, t.n, d, st->cosine,
						   st->cosine ? st->rownorm + t.row : NULL, &wk->xs);
		for (int i = 0; i < t.n; i++)
		{
			const float *x = t.x + (size_t) i * d;
			float		w = t.w != NULL ? t.w[i] : 1.0f;

			wk->wtotal += w;
			if (st->hashes != NULL)
				st->hashes[t.row + i] = km_row_hash(x, d, w);
			if (!st->cosine)
			{
				float		x2 = km_cpu_sqnorm(st->avx2, x, d);

				st->xnorm2[t.row + i] = x2;
				wk->sqsum += x2;
				km_cpu_add_row(st->avx2, wk->dvec, x, d);
			}
		}
	}
}

/*
 * The pass before seeding, reduced: st->mu and the centring choice (l2),
 * the total weight in workers[0].wtotal, and the bounds on the terms of
 * the sums (st->xstats).
 */
void
km_cpu_prepare(km_cpu_state *st)
{
	km_pool_run(&st->pool, km_cpu_prepare_worker, st);
	if (km_cpu_stopped(st))
		return;
	km_xstats_init(&st->xstats);
	km_xstats_merge(&st->xstats, &st->workers[0].xs);
	for (int t = 1; t < st->nthreads; t++)
	{
		km_cpu_worker *w0 = &st->workers[0];
		const km_cpu_worker *wk = &st->workers[t];

		w0->wtotal += wk->wtotal;
		w0->sqsum += wk->sqsum;
		km_xstats_merge(&st->xstats, &wk->xs);
		for (int i = 0; i < st->d; i++)
			w0->dvec[i] += wk->dvec[i];
	}
	if (!st->cosine)
		km_cpu_choose_mu(st, st->workers[0].dvec, st->workers[0].sqsum, st->n);
	else
		st->centred = 0;
}

/* One worker's share of km_cpu_stats. */
static void
km_cpu_stats_worker(void *arg, int id)
{
	km_cpu_state *st = (km_cpu_state *) arg;
	km_cpu_worker *wk = &st->workers[id];
	km_cpu_cursor cur;
	km_cpu_tile t;

	km_xstats_init(&wk->xs);
	km_cpu_cursor_init(st, id, &cur);
	while (km_cpu_next_tile(st, id, &cur, &t))
	{
		if (st->cosine)
			km_cpu_exact_norms(t.x, t.n, st->d, wk->nrm);
		km_cpu_xstats_rows(st->avx2, t.x, t.w, t.n, st->d, st->cosine, wk->nrm, &wk->xs);
	}
}

/*
 * Bounds on the terms of the sums, in st->xstats, for a call without a
 * prepare pass (map).
 */
void
km_cpu_stats(km_cpu_state *st)
{
	km_pool_run(&st->pool, km_cpu_stats_worker, st);
	km_xstats_init(&st->xstats);
	for (int t = 0; t < st->nthreads; t++)
		km_xstats_merge(&st->xstats, &st->workers[t].xs);
}

/*
 * The levels of the sums of rows and of weights, from st->xstats: enough
 * for n terms each (km_xsum.h).  Rows without weights add 1 to the weight
 * sums: one level.
 */
void
km_cpu_levels(km_cpu_state *st)
{
	int			unweighted = 0;

	st->weighted = 0;
	for (int c = 0; c < st->data->nchunks; c++)
		if (st->data->chunks[c].n > 0)
		{
			if (st->data->chunks[c].w != NULL)
				st->weighted = 1;
			else
				unweighted = 1;
		}
	km_xlevels_for(&st->xstats, st->n, st->weighted, unweighted, &st->xlev, &st->wlev);
}
