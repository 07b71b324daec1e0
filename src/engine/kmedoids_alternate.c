/*
 * kmedoids_alternate.c
 *	  The alternating method: assign every row to its nearest medoid, then
 *	  make each cluster's medoid the member with the lowest sum of distances
 *	  to the other members, until no medoid changes.
 *
 * kmd_alternate() is the loop and every decision in it; the two steps that
 * cost (the assignment, n x k distances; the score, size^2 distances per
 * cluster) come from a kmd_steps table, so that a GPU engine can run the
 * same loop with its own kernels (kmedoids_engine.h says how).  The CPU
 * engine's steps are at the end of this file.
 *
 * A cluster whose members did not change keeps its medoid without being
 * scored again (its scores would be the same).  Ties go to the lowest
 * cluster id (labels) and the lowest row (new medoids); a row that is
 * another cluster's medoid is never taken, so no two clusters share one.
 */
#include "kmedoids_internal.h"

#include <math.h>
#include <string.h>

/* Score work items: about this many per thread, so that the team balances. */
#define KMD_ITEMS_PER_THREAD 8

/* Bytes kmd_alternate asks of hooks->alloc, and the CPU steps' items. */
size_t
kmd_alternate_bytes(int64_t n, int k, int n_threads)
{
	size_t		rows = (size_t) n * (2 * sizeof(int32_t) + 2 * sizeof(double) +
									 sizeof(int64_t) + 1);
	size_t		clusters = (size_t) (k + 1) * (2 * sizeof(int64_t) + 2);
	size_t		items = (size_t) (2 * k + KMD_ITEMS_PER_THREAD * n_threads + 8) *
		3 * sizeof(int64_t);

	return rows + clusters + items + 16 * 64;
}

/*
 * The alternating method from the start medoids seeds (k distinct rows),
 * with the steps' implementation; fills result.
 */
km_status
kmd_alternate(const kmd_steps *steps, const kmd_data *data, const kmd_params *params,
			  const km_hooks *hooks, const int64_t *seeds, kmd_result *result,
			  km_error *error)
{
	const int64_t n = data->n;
	const int	k = params->k;
	km_cpu_arena ar;
	int32_t    *labels;
	int32_t    *prev;
	double	   *dist;
	int64_t    *members;
	int64_t    *offsets;
	int64_t    *fill;
	int64_t    *medoids;
	double	   *sums;
	char	   *todo;
	char	   *taken;
	km_status	status = KM_OK;
	int			converged = 0;
	int			it;
	int64_t		swaps = 0;
	int			changes = 0;
	double		t0 = km_cpu_now();
	km_progress pr;

	km_cpu_arena_init(&ar, hooks, 0);
	labels = km_cpu_alloc(&ar, sizeof(int32_t) * n);
	prev = km_cpu_alloc(&ar, sizeof(int32_t) * n);
	dist = km_cpu_alloc(&ar, sizeof(double) * n);
	members = km_cpu_alloc(&ar, sizeof(int64_t) * n);
	sums = km_cpu_alloc(&ar, sizeof(double) * n);
	taken = km_cpu_alloc(&ar, n);
	offsets = km_cpu_alloc(&ar, sizeof(int64_t) * (k + 1));
	fill = km_cpu_alloc(&ar, sizeof(int64_t) * (k + 1));
	medoids = km_cpu_alloc(&ar, sizeof(int64_t) * k);
	todo = km_cpu_alloc(&ar, k);
	if (ar.failed)
	{
		km_cpu_arena_free(&ar);
		return KM_ERR_NOMEM;
	}
	memcpy(medoids, seeds, sizeof(int64_t) * k);
	memset(taken, 0, n);
	for (int c = 0; c < k; c++)
		taken[medoids[c]] = 1;

	for (it = 1; it <= params->max_iter; it++)
	{
		int64_t		moved = 0;
		double		cost = 0.0;

		status = steps->assign(steps->ctx, medoids, k, labels, dist);
		if (status != KM_OK)
			goto done;

		/* which clusters gained or lost a row */
		if (it == 1)
		{
			memset(todo, 1, k);
			moved = n;
		}
		else
		{
			memset(todo, 0, k);
			for (int64_t o = 0; o < n; o++)
				if (labels[o] != prev[o])
				{
					moved++;
					todo[labels[o]] = 1;
					todo[prev[o]] = 1;
				}
		}
		for (int64_t o = 0; o < n; o++)
			cost += dist[o];

		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_ITERATE;
		pr.iteration = it;
		pr.inertia = cost;
		pr.moved = (double) moved / (double) n;
		pr.relocated = changes;
		pr.elapsed = km_cpu_now() - t0;
		if (hooks->report != NULL && hooks->report(hooks->ctx, &pr) != 0)
		{
			status = KM_ERR_CANCELLED;
			goto done;
		}
		if (moved == 0)
		{
			/* same clusters, same scores: the medoids stay */
			converged = 1;
			break;
		}

		/* members by cluster, each in row order (counting sort) */
		memset(offsets, 0, sizeof(int64_t) * (k + 1));
		for (int64_t o = 0; o < n; o++)
			offsets[labels[o] + 1]++;
		for (int c = 0; c < k; c++)
			offsets[c + 1] += offsets[c];
		memcpy(fill, offsets, sizeof(int64_t) * (k + 1));
		for (int64_t o = 0; o < n; o++)
			members[fill[labels[o]]++] = o;

		status = steps->score(steps->ctx, members, offsets, todo, k, sums);
		if (status != KM_OK)
			goto done;

		/* the member with the lowest score, ties to the lowest row */
		changes = 0;
		for (int c = 0; c < k; c++)
		{
			int64_t		best = -1;

			if (!todo[c])
				continue;
			for (int64_t p = offsets[c]; p < offsets[c + 1]; p++)
				if ((!taken[members[p]] || members[p] == medoids[c]) &&
					(best < 0 || sums[p] < sums[best]))
					best = p;
			if (best >= 0 && members[best] != medoids[c])
			{
				taken[medoids[c]] = 0;
				medoids[c] = members[best];
				taken[medoids[c]] = 1;
				changes++;
			}
		}
		swaps += changes;
		memcpy(prev, labels, sizeof(int32_t) * n);
		if (changes == 0)
		{
			converged = 1;
			break;
		}
	}
	if (!converged)
	{
		/* labels and cost for the medoids returned */
		it = params->max_iter;
		status = steps->assign(steps->ctx, medoids, k, labels, dist);
		if (status != KM_OK)
			goto done;
	}

	memcpy(result->medoids, medoids, sizeof(int64_t) * k);
	for (int c = 0; c < k; c++)
	{
		result->sizes[c] = 0;
		result->cluster_cost[c] = 0.0;
	}
	result->cost = 0.0;
	for (int64_t o = 0; o < n; o++)
	{
		result->cost += dist[o];
		result->sizes[labels[o]]++;
		result->cluster_cost[labels[o]] += dist[o];
	}
	if (result->labels != NULL)
		memcpy(result->labels, labels, sizeof(int32_t) * n);
	result->iterations = it;
	result->converged = converged;
	result->swaps = swaps;

	memset(&pr, 0, sizeof(pr));
	pr.phase = KM_PHASE_FINISH;
	pr.inertia = result->cost;
	pr.elapsed = km_cpu_now() - t0;
	if (hooks->report != NULL && hooks->report(hooks->ctx, &pr) != 0)
		status = KM_ERR_CANCELLED;

done:
	km_cpu_arena_free(&ar);
	if (status != KM_OK && error != NULL && status != KM_ERR_CANCELLED &&
		status != KM_ERR_NOMEM && error->message[0] == '\0')
	{
		error->status = status;
		strcpy(error->message, "a step of the alternating method failed");
	}
	return status;
}

/* ---------------------------------------------------------------------- */
/* the CPU engine's steps */

static km_status
kmd_cpu_step_assign(void *ctx, const int64_t *medoids, int k, int32_t *labels,
					double *dist)
{
	kmd_state  *st = (kmd_state *) ctx;

	memcpy(st->medoids, medoids, sizeof(int64_t) * k);
	kmd_pack_medoids_upto(st, k);
	kmd_nearest_into(st, st->mpacks, labels, dist, 0);
	return kmd_stopped(st) ? KM_ERR_CANCELLED : KM_OK;
}

/*
 * One worker's share of the score: items (cluster, first, end) of member
 * positions; each member's sum over the cluster's members in order, the
 * members packed KMD_TILE_B at a time.
 */
static void
kmd_score_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const int64_t *members = st->job_members;
	int64_t		item;

	while (kmd_take(st, id, &item))
	{
		const int64_t *it = st->job_items + 3 * item;
		int64_t		c = it[0];
		int64_t		first = it[1];
		int64_t		end = it[2];
		int64_t		c0 = st->job_offsets[c];
		int64_t		c1 = st->job_offsets[c + 1];

		for (int64_t p = first; p < end; p++)
			st->job_sums[p] = 0.0;
		for (int64_t j0 = c0; j0 < c1 && !kmd_poll(st, id); j0 += KMD_TILE_B)
		{
			int			nb = c1 - j0 < KMD_TILE_B ? (int) (c1 - j0) : KMD_TILE_B;

			kmd_pack_cols(st, &wk->pack, members + j0, nb);
			for (int64_t i0 = first; i0 < end; i0 += KMD_TILE_A)
			{
				int			na = end - i0 < KMD_TILE_A ? (int) (end - i0) : KMD_TILE_A;

				wk->a.n = 0;
				for (int i = 0; i < na; i++)
					kmd_rows_add(st, &wk->a, members[i0 + i]);
				kmd_block(&st->sp, &wk->a, &wk->pack, wk->out, wk->xb);
				for (int i = 0; i < na; i++)
				{
					const double *row = wk->out + (size_t) i * KMD_TILE_B;
					double		s = st->job_sums[i0 + i];

					for (int j = 0; j < nb; j++)
						if (j0 + j != i0 + i)
							s += row[j];
					st->job_sums[i0 + i] = s;
				}
			}
		}
	}
}

/*
 * The score step on the team: each cluster to score is cut into pieces of
 * members of about equal work (size x piece), so that one big cluster is
 * shared by the team and small ones are one item each.
 */
static km_status
kmd_cpu_step_score(void *ctx, const int64_t *members, const int64_t *offsets,
				   const char *todo, int k, double *sums)
{
	kmd_state  *st = (kmd_state *) ctx;
	double		work = 0.0;
	double		target;
	int64_t		nitems = 0;
	int64_t		cap = 2 * (int64_t) k + KMD_ITEMS_PER_THREAD * st->nthreads + 8;

	for (int c = 0; c < k; c++)
		if (todo[c])
		{
			double		s = (double) (offsets[c + 1] - offsets[c]);

			work += s * s;
		}
	target = work / (KMD_ITEMS_PER_THREAD * st->nthreads);
	if (target < KMD_TILE_A * KMD_TILE_B)
		target = KMD_TILE_A * KMD_TILE_B;

	for (int c = 0; c < k; c++)
	{
		int64_t		size = offsets[c + 1] - offsets[c];
		int64_t		pieces;
		int64_t		step;

		if (!todo[c] || size == 0)
			continue;
		pieces = (int64_t) ceil((double) size * size / target);
		if (pieces < 1)
			pieces = 1;
		if (pieces > size)
			pieces = size;
		step = (size + pieces - 1) / pieces;
		for (int64_t first = 0; first < size && nitems < cap; first += step)
		{
			int64_t    *it = st->job_items + 3 * nitems++;

			it[0] = c;
			it[1] = offsets[c] + first;
			it[2] = offsets[c] + (first + step < size ? first + step : size);
		}
	}

	st->job_members = members;
	st->job_offsets = offsets;
	st->job_sums = sums;
	kmd_run(st, kmd_score_worker, nitems, work * st->sp.d);
	return kmd_stopped(st) ? KM_ERR_CANCELLED : KM_OK;
}

/* The CPU engine's kmd_steps, on state st. */
void
kmd_cpu_steps(kmd_state *st, kmd_steps *steps)
{
	steps->ctx = st;
	steps->assign = kmd_cpu_step_assign;
	steps->score = kmd_cpu_step_score;
}
