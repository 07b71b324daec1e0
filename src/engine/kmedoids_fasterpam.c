/*
 * kmedoids_fasterpam.c
 *	  FasterPAM: swaps of one medoid for one other row, made eagerly, as
 *	  Schubert and Rousseeuw describe it ("Fast and eager k-medoids
 *	  clustering", Information Systems 101, 2021).
 *
 * Every row o keeps its nearest medoid n(o) at distance dn(o) and its
 * second nearest at ds(o).  Removing medoid i alone would cost
 *
 *	R_i = sum over o with n(o) = i of (ds(o) - dn(o))		(removal loss)
 *
 * and swapping medoid i for a row c changes the cost by R_i plus, for each
 * row o at distance d = d(o, c):
 *
 *	d < dn(o):			d - dn(o) for every i (o moves to c), and for
 *						i = n(o) the R_i term of o taken back: dn(o) - ds(o)
 *	dn(o) <= d < ds(o):	for i = n(o) only, d - ds(o) (o goes to c, not to
 *						its second)
 *
 * so one pass over the rows prices the swap of c with every medoid at once.
 * FasterPAM visits the rows in order, cyclically, prices each one that is
 * not a medoid, and makes its best swap at once when it lowers the cost by
 * more than rounding could explain (1e-11 of the cost); it stops when a
 * full round brings no swap.  After a swap every row's nearest and second
 * nearest are brought up to date (from scratch only for the rows that had
 * the removed medoid as one of them) and R is recomputed.
 *
 * The n distances to a candidate are the expensive part: they are computed
 * for a batch of up to KMD_TILE_B consecutive candidates at once, by the
 * team, with the exact kernel (one row's coordinates against eight
 * candidates per instruction), into a batch x n buffer.  Distances do not
 * depend on the medoids, so a swap within the batch leaves the rest of it
 * valid, and the visits stay exactly those of the one-at-a-time algorithm.
 * Pricing a candidate is a pass of a few operations per row, by blocks
 * summed in block order.
 */
#include "kmedoids_internal.h"

#include <math.h>
#include <string.h>

#include "kmd_metric.h"

/* A swap must lower the cost by more than this fraction of it. */
#define KMD_SWAP_EPS 1e-11

/* Whether (da, ca) comes before (db, cb): nearer, then lower cluster id. */
static inline int
kmd_less(double da, int ca, double db, int cb)
{
	return da < db || (da == db && ca < cb);
}

/* ---------------------------------------------------------------------- */
/* removal loss */

static void
kmd_removal_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	const int	stride = st->k + 1;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;
		double	   *part = st->partial + (size_t) b * stride;

		for (int c = 0; c < st->k; c++)
			part[c] = 0.0;
		if (st->k == 1)
			continue;
		for (int64_t o = b * KMD_BLOCK; o < end; o++)
			part[st->label[o]] += st->ds[o] - st->dn[o];
	}
}

/* R_i of every medoid into st->removal, and the cost; returns the cost. */
static double
kmd_removal(kmd_state *st)
{
	const int	stride = st->k + 1;
	double		cost = 0.0;

	kmd_run(st, kmd_removal_worker, st->nblocks, (double) st->n * 2.0);
	for (int c = 0; c < st->k; c++)
	{
		double		s = 0.0;

		for (int64_t b = 0; b < st->nblocks; b++)
			s += st->partial[(size_t) b * stride + c];
		st->removal[c] = s;
	}
	for (int64_t o = 0; o < st->n; o++)
		cost += st->dn[o];
	return cost;
}

/* ---------------------------------------------------------------------- */
/* a batch of candidates' distances */

static void
kmd_batch_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const int	nb = st->cpack->r.n;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;

		for (int64_t o0 = b * KMD_BLOCK; o0 < end; o0 += KMD_TILE_A)
		{
			int			na = end - o0 < KMD_TILE_A ? (int) (end - o0) : KMD_TILE_A;

			wk->a.n = 0;
			for (int i = 0; i < na; i++)
				kmd_rows_add(st, &wk->a, o0 + i);
			kmd_block(&st->sp, &wk->a, st->cpack, wk->out, wk->xb);
			for (int j = 0; j < nb; j++)
			{
				double	   *col = st->cols + (size_t) j * st->n + o0;

				for (int i = 0; i < na; i++)
					col[i] = wk->out[(size_t) i * KMD_TILE_B + j];
			}
		}
	}
}

/* ---------------------------------------------------------------------- */
/* pricing a candidate */

/*
 * One worker's share of pricing the candidate in column st->job_col: per
 * block, partial[b][i] for each medoid i and partial[b][k] for the part
 * shared by all (see the file header).
 */
static void
kmd_price_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	const int	k = st->k;
	const int	stride = k + 1;
	const double *col = st->cols + (size_t) st->job_col * st->n;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;
		double	   *part = st->partial + (size_t) b * stride;
		double		shared = 0.0;

		for (int c = 0; c < k; c++)
			part[c] = 0.0;
		for (int64_t o = b * KMD_BLOCK; o < end; o++)
		{
			double		d = col[o];
			double		dn = st->dn[o];

			if (k == 1)
				part[0] += d - dn;
			else if (d < dn)
			{
				shared += d - dn;
				part[st->label[o]] += dn - st->ds[o];
			}
			else if (d < st->ds[o])
				part[st->label[o]] += d - st->ds[o];
		}
		part[k] = shared;
	}
}

/*
 * The best swap for candidate column col: the medoid i and the change of
 * cost it brings, ties to the lowest i.
 */
static double
kmd_price(kmd_state *st, int col, int *best)
{
	const int	k = st->k;
	const int	stride = k + 1;
	double		shared = 0.0;
	double		bestv = INFINITY;

	st->job_col = col;
	kmd_run(st, kmd_price_worker, st->nblocks, (double) st->n * 4.0);
	for (int c = 0; c <= k; c++)
	{
		double		s = c < k ? st->removal[c] : 0.0;

		for (int64_t b = 0; b < st->nblocks; b++)
			s += st->partial[(size_t) b * stride + c];
		st->delta[c] = s;
	}
	shared = st->delta[k];
	*best = 0;
	for (int c = 0; c < k; c++)
	{
		double		v = st->delta[c] + shared;

		if (v < bestv)
		{
			bestv = v;
			*best = c;
		}
	}
	return bestv;
}

/* ---------------------------------------------------------------------- */
/* making a swap */

/*
 * One worker's share of a swap of cluster st->job_swap's medoid for the
 * candidate of column st->job_col: rows whose nearest or second nearest was
 * the old medoid are decided again against every medoid (in tiles, with the
 * kernel); the others only compare the new medoid with what they have.
 */
static void
kmd_swap_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const int	i = st->job_swap;
	const double *col = st->cols + (size_t) st->job_col * st->n;
	const int	nmp = (st->k + KMD_TILE_B - 1) / KMD_TILE_B;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;
		int64_t		redo[KMD_TILE_A];
		int			nredo = 0;

		for (int64_t o = b * KMD_BLOCK; o <= end; o++)
		{
			if (o < end)
			{
				double		d = col[o];

				if (st->label[o] == i || st->second[o] == i)
					redo[nredo++] = o;
				else if (kmd_less(d, i, st->dn[o], st->label[o]))
				{
					st->second[o] = st->label[o];
					st->ds[o] = st->dn[o];
					st->label[o] = i;
					st->dn[o] = d;
				}
				else if (st->second[o] < 0 || kmd_less(d, i, st->ds[o], st->second[o]))
				{
					st->second[o] = i;
					st->ds[o] = d;
				}
			}
			if (nredo == KMD_TILE_A || (o == end && nredo > 0))
			{
				double		best[KMD_TILE_A];
				double		next[KMD_TILE_A];
				int32_t		lb[KMD_TILE_A];
				int32_t		ln[KMD_TILE_A];

				wk->a.n = 0;
				for (int r = 0; r < nredo; r++)
				{
					kmd_rows_add(st, &wk->a, redo[r]);
					best[r] = next[r] = INFINITY;
					lb[r] = ln[r] = -1;
				}
				for (int p = 0; p < nmp; p++)
				{
					kmd_block(&st->sp, &wk->a, &st->mpacks[p], wk->out, wk->xb);
					for (int r = 0; r < nredo; r++)
						for (int j = 0; j < st->mpacks[p].r.n; j++)
						{
							double		v = wk->out[(size_t) r * KMD_TILE_B + j];
							int			c = p * KMD_TILE_B + j;

							if (lb[r] < 0 || kmd_less(v, c, best[r], lb[r]))
							{
								next[r] = best[r];
								ln[r] = lb[r];
								best[r] = v;
								lb[r] = c;
							}
							else if (ln[r] < 0 || kmd_less(v, c, next[r], ln[r]))
							{
								next[r] = v;
								ln[r] = c;
							}
						}
				}
				for (int r = 0; r < nredo; r++)
				{
					st->label[redo[r]] = lb[r];
					st->dn[redo[r]] = best[r];
					st->second[redo[r]] = ln[r];
					st->ds[redo[r]] = next[r];
				}
				nredo = 0;
			}
		}
	}
}

static void
kmd_swap(kmd_state *st, int i, int64_t c, int col)
{
	st->is_medoid[st->medoids[i]] = 0;
	st->is_medoid[c] = 1;
	st->medoids[i] = c;
	kmd_pack_medoids_upto(st, st->k);
	st->job_swap = i;
	st->job_col = col;
	kmd_run(st, kmd_swap_worker, st->nblocks,
			(double) st->n * 4.0 + 2.0 * st->n * st->sp.d);
}

/* ---------------------------------------------------------------------- */

/*
 * FasterPAM from the seeded medoids (st->medoids); fills result.
 */
km_status
kmd_fasterpam(kmd_state *st, const kmd_params *params, kmd_result *result)
{
	const int64_t n = st->n;
	int64_t		pos = 0;		/* next candidate */
	int64_t		since = 0;		/* candidates visited since the last swap */
	int			passes = 0;
	int64_t		swaps = 0;
	int64_t		pass_swaps = 0;
	int			converged = 0;
	double		cost;
	km_progress pr;

	kmd_nearest_pass(st, 1);
	if (kmd_stopped(st))
		return KM_ERR_CANCELLED;
	cost = kmd_removal(st);

	while (!converged)
	{
		int64_t		nb;
		int64_t		cols[KMD_TILE_B];

		if (pos == 0)
		{
			if (passes > 0)
			{
				memset(&pr, 0, sizeof(pr));
				pr.phase = KM_PHASE_ITERATE;
				pr.iteration = passes;
				pr.inertia = cost;
				pr.moved = -1.0;	/* no moved fraction: swaps instead */
				pr.relocated = (int) (pass_swaps < INT32_MAX ? pass_swaps : INT32_MAX);
				if (kmd_report(st, &pr))
					return KM_ERR_CANCELLED;
			}
			if (passes == params->max_iter)
				break;
			passes++;
			pass_swaps = 0;
		}

		/* the next batch of candidates, up to the end of the rows */
		nb = n - pos < st->bcap ? n - pos : st->bcap;
		for (int j = 0; j < nb; j++)
			cols[j] = pos + j;
		kmd_pack_cols(st, st->cpack, cols, (int) nb);
		kmd_run(st, kmd_batch_worker, st->nblocks, (double) n * nb * st->sp.d);
		if (kmd_stopped(st))
			return KM_ERR_CANCELLED;

		for (int j = 0; j < nb && !converged; j++)
		{
			int64_t		c = pos + j;
			int			best;
			double		change;

			if (!st->is_medoid[c])
			{
				change = kmd_price(st, j, &best);
				if (kmd_stopped(st))
					return KM_ERR_CANCELLED;
				if (change < -KMD_SWAP_EPS * cost)
				{
					kmd_swap(st, best, c, j);
					if (kmd_stopped(st))
						return KM_ERR_CANCELLED;
					cost = kmd_removal(st);
					swaps++;
					pass_swaps++;
					since = 0;
					continue;
				}
			}
			if (++since >= n)
				converged = 1;
		}
		pos += nb;
		if (pos == n)
			pos = 0;
	}

	if (converged)
	{
		/* the pass that found no swap ended early: it is reported here */
		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_ITERATE;
		pr.iteration = passes;
		pr.inertia = cost;
		pr.moved = -1.0;
		pr.relocated = (int) (pass_swaps < INT32_MAX ? pass_swaps : INT32_MAX);
		if (kmd_report(st, &pr))
			return KM_ERR_CANCELLED;
	}

	memcpy(result->medoids, st->medoids, sizeof(int64_t) * st->k);
	result->cost = kmd_cost_sum(st, result->sizes, result->cluster_cost);
	if (result->labels != NULL)
		memcpy(result->labels, st->label, sizeof(int32_t) * n);
	result->iterations = passes;
	result->converged = converged;
	result->swaps = swaps;

	memset(&pr, 0, sizeof(pr));
	pr.phase = KM_PHASE_FINISH;
	pr.inertia = result->cost;
	return kmd_report(st, &pr) ? KM_ERR_CANCELLED : KM_OK;
}
