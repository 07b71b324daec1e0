/*
 * kmedoids_seed.c
 *	  The first k medoids: random rows, greedy k-means++, afk-mc2, or the
 *	  caller's.
 *
 * Every random choice is a row's key (km_hash.h): random init takes the k
 * rows with the smallest keys.  k-means++ takes the smallest key first,
 * then at each step draws L = 2 + ln k candidates by their keys under
 * weight D (the distance to the nearest medoid so far: k-medoids' objective
 * sums distances, not their squares, so rows are drawn in proportion to what
 * they add to it) and keeps the candidate that leaves the lowest sum of
 * min(D, distance to it), as the k-means engine does.  Each step is one pass
 * that folds the last medoid into D and scores the candidates, plus one
 * pass that draws the next candidates.  afk-mc2 (km_afkmc2.h) starts from
 * the same first medoid and draws the others by Markov chains.
 *
 * Rows at distance 0 from a medoid (duplicates) are never drawn while
 * others are left; sums over rows go by blocks in block order.
 */
#include "kmedoids_internal.h"

#include <math.h>
#include <string.h>

#include "km_afkmc2.h"
#include "km_hash.h"

/* ---------------------------------------------------------------------- */
/* the smallest keys */

/* Restore the max-heap order below position i of a[0..n). */
static void
kmd_sift(kmd_cand *a, int64_t n, int64_t i)
{
	kmd_cand	v = a[i];

	for (;;)
	{
		int64_t		l = 2 * i + 1;
		int64_t		m = l;

		if (l >= n)
			break;
		if (l + 1 < n && kmd_before(&a[l], &a[l + 1]))
			m = l + 1;
		if (!kmd_before(&v, &a[m]))
			break;
		a[i] = a[m];
		i = m;
	}
	a[i] = v;
}

/* Offer c to a heap keeping the cap smallest entries (largest at the root). */
static void
kmd_heap_push(kmd_cand *heap, int *len, int cap, kmd_cand c)
{
	int			i;

	if (*len < cap)
	{
		i = (*len)++;
		while (i > 0)
		{
			int			p = (i - 1) / 2;

			if (!kmd_before(&heap[p], &c))
				break;
			heap[i] = heap[p];
			i = p;
		}
		heap[i] = c;
		return;
	}
	if (cap == 0 || !kmd_before(&c, &heap[0]))
		return;
	heap[0] = c;
	kmd_sift(heap, cap, 0);
}

/* Sort by (key, row) in place, without allocating (heapsort). */
static void
kmd_sort(kmd_cand *a, int64_t n)
{
	for (int64_t i = n / 2 - 1; i >= 0; i--)
		kmd_sift(a, n, i);
	for (int64_t end = n - 1; end > 0; end--)
	{
		kmd_cand	t = a[0];

		a[0] = a[end];
		a[end] = t;
		kmd_sift(a, end, 0);
	}
}

/*
 * One worker's share of a selection: the st->nsel smallest keys in stream
 * st->stream among rows that are not medoids, under weight dmin (when
 * st->key_weight) or 1.
 */
static void
kmd_select_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	int64_t		b;

	wk->nheap = 0;
	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;

		for (int64_t o = b * KMD_BLOCK; o < end; o++)
		{
			kmd_cand	c;

			if (st->is_medoid[o])
				continue;
			c.key = km_sample_key(st->hashes[o], st->stream,
								  st->key_weight ? st->dmin[o] : 1.0);
			c.row = o;
			if (c.key < INFINITY)
				kmd_heap_push(wk->heap, &wk->nheap, st->nsel, c);
		}
	}
}

/*
 * The m smallest keys, sorted, in st->merge; returns how many (fewer when
 * fewer rows have a finite key).
 */
static int
kmd_select(kmd_state *st, uint64_t stream, int m, int weighted)
{
	int			total = 0;

	st->stream = stream;
	st->nsel = m;
	st->key_weight = weighted;
	for (int t = 0; t < st->nthreads; t++)
		st->workers[t].nheap = 0;
	kmd_run(st, kmd_select_worker, st->nblocks, (double) st->n * 40.0);
	if (kmd_stopped(st))
		return 0;
	for (int t = 0; t < st->nthreads; t++)
	{
		memcpy(st->merge + total, st->workers[t].heap, sizeof(kmd_cand) * st->workers[t].nheap);
		total += st->workers[t].nheap;
	}
	kmd_sort(st->merge, total);
	return total < m ? total : m;
}

/* ---------------------------------------------------------------------- */
/* passes that fold a medoid into dmin and score candidates */

/*
 * One worker's share: columns of st->cpack are [the medoid to fold into
 * dmin, when st->fold] then st->ncand candidates.  Per block: dmin updated,
 * and partial[b][l] = sum in row order of min(dmin, distance to candidate
 * l); partial[b][ncand] = sum of dmin.  st->fold == 2 sets dmin instead of
 * lowering it.
 */
static void
kmd_pp_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	const int	off = st->fold ? 1 : 0;
	const int	stride = KMD_MAX_L + 1;
	int64_t		b;

	while (kmd_take(st, id, &b))
	{
		int64_t		end = (b + 1) * KMD_BLOCK < st->n ? (b + 1) * KMD_BLOCK : st->n;
		double	   *part = st->partial + (size_t) b * stride;

		for (int l = 0; l <= st->ncand; l++)
			part[l] = 0.0;
		for (int64_t o0 = b * KMD_BLOCK; o0 < end; o0 += KMD_TILE_A)
		{
			int			na = end - o0 < KMD_TILE_A ? (int) (end - o0) : KMD_TILE_A;

			wk->a.n = 0;
			for (int i = 0; i < na; i++)
				kmd_rows_add(st, &wk->a, o0 + i);
			kmd_block(&st->sp, &wk->a, st->cpack, wk->out, wk->xb);
			for (int i = 0; i < na; i++)
			{
				const double *row = wk->out + (size_t) i * KMD_TILE_B;
				double		dm = st->dmin[o0 + i];

				if (st->fold == 2 || (st->fold && row[0] < dm))
					dm = row[0];
				st->dmin[o0 + i] = dm;
				for (int l = 0; l < st->ncand; l++)
					part[l] += row[off + l] < dm ? row[off + l] : dm;
				part[st->ncand] += dm;
			}
		}
	}
}

/*
 * Run kmd_pp_worker over the columns [fold medoid] + cands; per-candidate
 * sums go to st->delta[0..ncand), the sum of dmin to st->delta[ncand].
 */
static void
kmd_pp_pass(kmd_state *st, int64_t fold_row, int fold, const int64_t *cands, int ncand)
{
	const int	stride = KMD_MAX_L + 1;
	int64_t		cols[KMD_MAX_L + 1];
	int			ncols = 0;

	if (fold)
		cols[ncols++] = fold_row;
	for (int l = 0; l < ncand; l++)
		cols[ncols++] = cands[l];
	kmd_pack_cols(st, st->cpack, cols, ncols);
	st->fold = fold;
	st->ncand = ncand;
	kmd_run(st, kmd_pp_worker, st->nblocks, (double) st->n * ncols * st->sp.d);
	if (kmd_stopped(st))
		return;
	for (int l = 0; l <= ncand; l++)
	{
		double		s = 0.0;

		for (int64_t b = 0; b < st->nblocks; b++)
			s += st->partial[(size_t) b * stride + l];
		st->delta[l] = s;
	}
}

/* Make row the medoid of cluster c. */
static void
kmd_take_medoid(kmd_state *st, int c, int64_t row)
{
	st->medoids[c] = row;
	st->is_medoid[row] = 1;
}

/*
 * Seeding progress: throttled to about twice a second unless final;
 * nonzero when the caller asked to stop.
 */
static int
kmd_seed_report(kmd_state *st, int done, double *last, int final)
{
	km_progress p;
	double		now = km_cpu_now();

	if (!final && now - *last < 0.5)
		return kmd_stopped(st);
	*last = now;
	memset(&p, 0, sizeof(p));
	p.phase = KM_PHASE_SEED;
	p.done = done;
	p.total = st->k;
	return kmd_report(st, &p);
}

/*
 * A medoid for cluster c when no row is left with a finite weighted key
 * (all at distance 0 from a medoid): the smallest unweighted key among the
 * rows that are not medoids.
 */
static km_status
kmd_fallback(kmd_state *st, const kmd_params *params, int c)
{
	if (kmd_select(st, km_stream(params->seed, 0, c), 1, 0) < 1)
		return KM_ERR_CANCELLED;
	kmd_take_medoid(st, c, st->merge[0].row);
	return KM_OK;
}

/* Greedy k-means++ over the metric, D weighting (see the file header). */
static km_status
kmd_kmeanspp(kmd_state *st, const kmd_params *params)
{
	const int	L = 2 + (int) log((double) st->k);
	double		last = km_cpu_now();
	int64_t		cands[KMD_MAX_L];

	if (kmd_select(st, km_stream(params->seed, 0, 0), 1, 0) < 1)
		return KM_ERR_CANCELLED;
	kmd_take_medoid(st, 0, st->merge[0].row);

	for (int s = 1; s < st->k; s++)
	{
		int			ncand;
		int			best = 0;

		/* fold the last medoid in, then draw this step's candidates */
		kmd_pp_pass(st, st->medoids[s - 1], s == 1 ? 2 : 1, NULL, 0);
		if (kmd_stopped(st))
			return KM_ERR_CANCELLED;
		ncand = kmd_select(st, km_stream(params->seed, 0, s), L, 1);
		if (kmd_stopped(st))
			return KM_ERR_CANCELLED;
		if (ncand == 0)
		{
			if (kmd_fallback(st, params, s) != KM_OK)
				return KM_ERR_CANCELLED;
			continue;
		}
		for (int l = 0; l < ncand; l++)
			cands[l] = st->merge[l].row;

		/* the candidate that leaves the lowest sum wins, ties to the first */
		kmd_pp_pass(st, 0, 0, cands, ncand);
		if (kmd_stopped(st))
			return KM_ERR_CANCELLED;
		for (int l = 1; l < ncand; l++)
			if (st->delta[l] < st->delta[best])
				best = l;
		kmd_take_medoid(st, s, cands[best]);
		if (kmd_seed_report(st, s + 1, &last, s == st->k - 1))
			return KM_ERR_CANCELLED;
	}
	return KM_OK;
}

/* ---------------------------------------------------------------------- */
/* afk-mc2 */

/* The proposal probability q(o) (km_afkmc2.h), l = 1, weights 1. */
static inline double
kmd_q(const kmd_state *st, const double *totals, int64_t o)
{
	if (!(totals[0] > 0.0))
		return 1.0 / totals[1];
	return 0.5 * st->dmin[o] / totals[0] + 0.5 / totals[1];
}

/* q's terms for km_afkmc2_propose: D1 and 1. */
static double
kmd_term(void *ctx, int64_t o, int which)
{
	const kmd_state *st = (const kmd_state *) ctx;

	return which == 0 ? st->dmin[o] : 1.0;
}

/*
 * Distances of a chain's proposals (st->job_props[0..st->nsel)) to the
 * first st->ncand medoids (packed in st->mpacks): the minimum, into delta.
 */
static void
kmd_chain_worker(void *arg, int id)
{
	kmd_state  *st = (kmd_state *) arg;
	kmd_worker *wk = &st->workers[id];
	int64_t		t;

	while (kmd_take(st, id, &t))
	{
		int			p0 = (int) t * KMD_TILE_A;
		int			na = st->nsel - p0 < KMD_TILE_A ? st->nsel - p0 : KMD_TILE_A;

		wk->a.n = 0;
		for (int i = 0; i < na; i++)
		{
			kmd_rows_add(st, &wk->a, st->job_props[p0 + i]);
			st->delta[p0 + i] = INFINITY;
		}
		for (int p = 0; p * KMD_TILE_B < st->ncand; p++)
		{
			int			nc = st->ncand - p * KMD_TILE_B;

			kmd_block(&st->sp, &wk->a, &st->mpacks[p], wk->out, wk->xb);
			for (int i = 0; i < na; i++)
				for (int j = 0; j < nc && j < KMD_TILE_B; j++)
					if (wk->out[(size_t) i * KMD_TILE_B + j] < st->delta[p0 + i])
						st->delta[p0 + i] = wk->out[(size_t) i * KMD_TILE_B + j];
		}
	}
}

/* Bytes afk-mc2 asks for while it runs: the sort, proposals, a chain's distances. */
size_t
kmd_afkmc2_bytes(int64_t n, int k, int chain_length)
{
	size_t		M = (size_t) (k > 1 ? k - 1 : 1) * (size_t) chain_length;

	return km_afkmc2_work_bytes(n) + M * sizeof(int64_t) +
		sizeof(double) * (size_t) chain_length + 256;
}

/* afk-mc2 with l = 1 (see km_afkmc2.h). */
static km_status
kmd_afkmc2(kmd_state *st, const kmd_params *params)
{
	const int	m = params->chain_length;
	const int64_t M = (int64_t) (st->k - 1) * m;
	double		last = km_cpu_now();
	int64_t    *props;
	void	   *work;
	double	   *dist;
	double		totals[2];
	uint64_t	chain_stream = km_stream(params->seed, 0, KM_AFKMC2_STEP_CHAIN);
	double	   *delta = st->delta;

	if (kmd_select(st, km_stream(params->seed, 0, 0), 1, 0) < 1)
		return KM_ERR_CANCELLED;
	kmd_take_medoid(st, 0, st->merge[0].row);
	if (st->k == 1)
		return KM_OK;

	/* D1, then the proposals */
	kmd_pp_pass(st, st->medoids[0], 2, NULL, 0);
	if (kmd_stopped(st))
		return KM_ERR_CANCELLED;
	props = km_cpu_alloc(st->arena, sizeof(int64_t) * (size_t) M);
	work = km_cpu_alloc(st->arena, km_afkmc2_work_bytes(st->n));
	dist = km_cpu_alloc(st->arena, sizeof(double) * (size_t) m);
	if (props == NULL || work == NULL || dist == NULL)
		return KM_ERR_NOMEM;
	km_afkmc2_propose(st->n, st->hashes, kmd_term, st, M,
					  km_stream(params->seed, 0, KM_AFKMC2_STEP_PROPOSE), props, totals, work);

	/* one chain per medoid */
	for (int c = 1; c < st->k; c++)
	{
		const int64_t *chain = props + (int64_t) (c - 1) * m;
		int64_t		x;
		double		dx;
		double		qx;

		/* the chain's distances to the medoids so far */
		kmd_pack_medoids_upto(st, c);
		st->job_props = chain;
		st->nsel = m;
		st->ncand = c;
		st->delta = dist;
		kmd_run(st, kmd_chain_worker, (m + KMD_TILE_A - 1) / KMD_TILE_A,
				(double) m * c * st->sp.d);
		st->delta = delta;
		if (kmd_stopped(st))
			return KM_ERR_CANCELLED;

		x = chain[0];
		dx = dist[0];
		qx = kmd_q(st, totals, x);
		for (int j = 1; j < m; j++)
		{
			int64_t		y = chain[j];
			double		dy = dist[j];
			double		qy = kmd_q(st, totals, y);

			if (dx == 0.0 ||
				km_chain_uniform(chain_stream, c, j) * dx * qy < dy * qx)
			{
				x = y;
				dx = dy;
				qx = qy;
			}
		}
		if (dx == 0.0)
		{
			/* the chain never left the medoids: any other row will do */
			if (kmd_fallback(st, params, c) != KM_OK)
				return KM_ERR_CANCELLED;
		}
		else
			kmd_take_medoid(st, c, x);
		if (kmd_seed_report(st, c + 1, &last, c == st->k - 1))
			return KM_ERR_CANCELLED;
	}
	return KM_OK;
}

/*
 * The start medoids of a fit into st->medoids (and st->is_medoid).
 */
km_status
kmd_seed(kmd_state *st, const kmd_params *params)
{
	switch (params->init)
	{
		case KM_INIT_EXPLICIT:
			for (int c = 0; c < st->k; c++)
				kmd_take_medoid(st, c, params->init_medoids[c]);
			return KM_OK;

		case KM_INIT_RANDOM:
			if (kmd_select(st, km_stream(params->seed, 0, 0), st->k, 0) < st->k)
				return KM_ERR_CANCELLED;
			for (int c = 0; c < st->k; c++)
				st->medoids[c] = st->merge[c].row;
			for (int c = 0; c < st->k; c++)
				st->is_medoid[st->medoids[c]] = 1;
			return KM_OK;

		case KM_INIT_KMEANSPP:
			return kmd_kmeanspp(st, params);

		case KM_INIT_AFKMC2:
			return kmd_afkmc2(st, params);

		default:
			return KM_ERR_INVALID;
	}
}
