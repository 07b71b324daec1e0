/*
 * cpu_afkmc2.c
 *	  afk-mc2 seeding for the k-means CPU engine (km_afkmc2.h).
 *
 * The first centroid is k-means++'s (the row with the smallest key under
 * w).  One pass then computes every row's D1^2, the squared distance to it
 * (exact, in double, on normalised rows for cosine), kept as a float in
 * st->d2, and km_afkmc2.c draws the proposals from w D1^2 and w.  Each
 * further centroid is the end
 * of a Markov chain of chain_length proposals, whose distances to the
 * centroids so far come from the k-medoids engine's exact kernel
 * (kmedoids_kernels.c: the same bits as km_exact_sqdist).
 *
 * Passes go over fixed blocks of KMD_BLOCK rows, found in the chunks by
 * their global index, so nothing depends on the number of threads; draws
 * depend on the rows' hashes, not on their order.  What the seeding needs
 * beyond the fit's workspace (the sort, the proposals, buffers for the
 * chains) it takes through the caller's hooks and gives back before
 * returning: km_afkmc2_bytes() says how much.
 */
#include "cpu_internal.h"
#include "kmedoids_internal.h"

#include <math.h>
#include <string.h>

#include "km_afkmc2.h"
#include "km_exact.h"
#include "km_hash.h"

typedef struct km_afk
{
	km_cpu_state *st;
	const km_params *params;
	int			run;
	int64_t    *starts;			/* nchunks + 1: global index of each chunk's first row */
	int64_t		nblocks;
	int64_t		next;			/* next block (atomic) */
	int			phase;			/* what a pass does, below */
	km_cpu_cand *bmin;			/* nblocks: smallest key */
	float	   *unit;			/* nthreads x d: a normalised row per worker */
	const float *c1;			/* the first centroid (normalised for cosine) */
	double		S;				/* sum of w D1^2 */
	double		W;				/* sum of w */
	uint64_t	stream;
} km_afk;

#define AFK_FIRST	0			/* smallest key under w per block */
#define AFK_D1		1			/* D1^2 */

/* Bytes of what the seeding takes beyond the fit's workspace. */
size_t
km_afkmc2_bytes(int64_t n, int k, int chain_length, int n_threads, int d)
{
	size_t		M = (size_t) (k > 1 ? k - 1 : 1) * (size_t) chain_length;
	size_t		nblocks = (size_t) ((n + KMD_BLOCK - 1) / KMD_BLOCK);
	size_t		packs = (size_t) ((k + KMD_TILE_B - 1) / KMD_TILE_B);

	return sizeof(int64_t) * (size_t) (n + 1) + nblocks * sizeof(km_cpu_cand) +
		km_afkmc2_work_bytes(n) + M * sizeof(int64_t) +
		sizeof(float) * (size_t) d * ((size_t) n_threads + (size_t) chain_length) +
		packs * (sizeof(kmd_pack) + kmd_pack_bytes(d)) +
		sizeof(double) * (KMD_TILE_A * KMD_TILE_B + KMD_MR * (size_t) d + (size_t) chain_length) +
		4096;
}

/* Row g: its values and weight, found in the chunks. */
static const float *
km_afk_row(const km_afk *a, int64_t g, float *w)
{
	const km_data *data = a->st->data;
	int			lo = 0;
	int			hi = data->nchunks - 1;

	while (lo < hi)
	{
		int			mid = (lo + hi + 1) / 2;

		if (a->starts[mid] <= g)
			lo = mid;
		else
			hi = mid - 1;
	}
	while (data->chunks[lo].n == 0 || g >= a->starts[lo + 1])
		lo++;
	*w = data->chunks[lo].w != NULL ? data->chunks[lo].w[g - a->starts[lo]] : 1.0f;
	return data->chunks[lo].x + (size_t) (g - a->starts[lo]) * a->st->d;
}

/* q's terms for km_afkmc2_propose: w D1^2 and w. */
static double
km_afk_term_of(void *ctx, int64_t g, int which)
{
	km_afk	   *a = (km_afk *) ctx;
	float		w;

	(void) km_afk_row(a, g, &w);
	return which == 0 ? (double) w * a->st->d2[g] : (double) w;
}

/* The proposal probability of a row: q = 1/2 w D1^2 / S + 1/2 w / W. */
static inline double
km_afk_q(const km_afk *a, float w, float d2)
{
	if (!(a->S > 0.0))
		return (double) w / a->W;
	return 0.5 * (double) w * d2 / a->S + 0.5 * (double) w / a->W;
}

/*
 * One worker's share of a pass: blocks taken in turn; within a block the
 * rows in order, across chunks.
 */
static void
km_afk_worker(void *arg, int id)
{
	km_afk	   *a = (km_afk *) arg;
	km_cpu_state *st = a->st;
	const km_data *data = st->data;
	const int	d = st->d;
	float	   *unit = a->unit + (size_t) id * d;

	for (;;)
	{
		int64_t		b;
		int64_t		g;
		int64_t		end;
		int			c = 0;
		km_cpu_cand best;

		if (id == 0 && st->hooks->poll != NULL && st->hooks->poll(st->hooks->ctx) != 0)
			__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
		if (km_cpu_stopped(st))
			return;
		b = __atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED);
		if (b >= a->nblocks)
			return;
		g = b * KMD_BLOCK;
		end = g + KMD_BLOCK < st->n ? g + KMD_BLOCK : st->n;
		while (a->starts[c + 1] <= g)
			c++;
		best.key = INFINITY;
		best.row = -1;
		best.x = NULL;
		best.w = 0.0f;

		for (; g < end; g++)
		{
			const km_chunk *ch;
			int64_t		i;
			const float *x;
			float		w;

			while (g >= a->starts[c + 1])
				c++;
			ch = &data->chunks[c];
			i = g - a->starts[c];
			x = ch->x + (size_t) i * d;
			w = ch->w != NULL ? ch->w[i] : 1.0f;

			if (a->phase == AFK_FIRST)
			{
				double		key = km_sample_key(st->hashes[g], a->stream, w);

				if (key < best.key || (key == best.key && g < best.row))
				{
					best.key = key;
					best.row = g;
					best.x = x;
					best.w = w;
				}
			}
			else
			{
				if (st->cosine)
				{
					if (km_normalize_row(x, unit, d) == 0.0)
						memset(unit, 0, sizeof(float) * d);
					x = unit;
				}
				st->d2[g] = (float) km_exact_sqdist(x, a->c1, d);
			}
		}
		if (a->phase == AFK_FIRST)
			a->bmin[b] = best;
	}
}

static int
km_afk_pass(km_afk *a, int phase)
{
	a->phase = phase;
	a->next = 0;
	km_pool_run(&a->st->pool, km_afk_worker, a);
	return !km_cpu_stopped(a->st);
}

/* Centroid j becomes row x (cosine: normalised). */
static void
km_afk_take(km_cpu_state *st, int j, const float *x)
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
 * The seeding itself, with the memory of arena (see the file header).
 */
static km_status
km_afk_run(km_afk *a, km_cpu_arena *arena)
{
	km_cpu_state *st = a->st;
	const km_params *params = a->params;
	const int	k = st->k;
	const int	d = st->d;
	const int	m = params->chain_length;
	const int64_t M = (int64_t) (k - 1) * m;
	int			npacks = (k + KMD_TILE_B - 1) / KMD_TILE_B;
	km_cpu_cand first;
	int64_t    *props;
	void	   *work;
	double		totals[2];
	kmd_space	sp;
	kmd_pack   *packs;
	kmd_rows	rows;
	double	   *out;
	double	   *xb;
	double	   *dist;
	float	   *ybuf;
	uint64_t	chain_stream = km_stream(params->seed, a->run, KM_AFKMC2_STEP_CHAIN);
	double		last = km_cpu_now();
	km_progress p;

	/* the first centroid: the smallest key under w */
	a->stream = km_stream(params->seed, a->run, 0);
	if (!km_afk_pass(a, AFK_FIRST))
		return KM_ERR_CANCELLED;
	first = a->bmin[0];
	for (int64_t b = 1; b < a->nblocks; b++)
		if (km_cpu_before(&a->bmin[b], &first))
			first = a->bmin[b];
	if (first.row < 0)
		first = a->bmin[0];		/* no finite key: the first row */
	km_afk_take(st, 0, first.x != NULL ? first.x : st->data->chunks[0].x);
	if (k == 1)
		return KM_OK;

	/* D1^2, then the proposals */
	a->c1 = st->cent;
	if (!km_afk_pass(a, AFK_D1))
		return KM_ERR_CANCELLED;
	props = km_cpu_alloc(arena, sizeof(int64_t) * (size_t) M);
	work = km_cpu_alloc(arena, km_afkmc2_work_bytes(st->n));
	if (props == NULL || work == NULL)
		return KM_ERR_NOMEM;
	km_afkmc2_propose(st->n, st->hashes, km_afk_term_of, a, M,
					  km_stream(params->seed, a->run, KM_AFKMC2_STEP_PROPOSE), props,
					  totals, work);
	a->S = totals[0];
	a->W = totals[1];

	/* the chains: distances by the exact kernel, centroids packed */
	kmd_space_init(&sp, KMD_METRIC_SQEUCLIDEAN, d, 0.0);
	packs = km_cpu_alloc(arena, sizeof(kmd_pack) * npacks);
	out = km_cpu_alloc(arena, sizeof(double) * KMD_TILE_A * KMD_TILE_B);
	xb = km_cpu_alloc(arena, kmd_block_scratch_bytes(d));
	dist = km_cpu_alloc(arena, sizeof(double) * m);
	ybuf = st->cosine ? km_cpu_alloc(arena, sizeof(float) * (size_t) m * d) : NULL;
	if (packs == NULL || out == NULL || xb == NULL || dist == NULL ||
		(st->cosine && ybuf == NULL))
		return KM_ERR_NOMEM;
	{
		double	   *panels = km_cpu_alloc(arena, kmd_pack_bytes(d) * npacks);

		if (panels == NULL)
			return KM_ERR_NOMEM;
		for (int q = 0; q < npacks; q++)
		{
			packs[q].panel = panels + (size_t) q * KMD_TILE_B * d;
			packs[q].r.n = 0;
		}
	}

	for (int c = 1; c < k; c++)
	{
		const int64_t *chain = props + (int64_t) (c - 1) * m;
		kmd_pack   *last_pack = &packs[(c - 1) / KMD_TILE_B];
		float		cw[KMD_TILE_A];
		int			x = 0;
		double		px;
		double		qx;
		float		wx;
		float		wy;

		/* centroid c - 1 joins its pack */
		last_pack->r.row[last_pack->r.n] = st->cent + (size_t) (c - 1) * d;
		last_pack->r.m[last_pack->r.n] = 0;
		last_pack->r.aux[last_pack->r.n] = km_exact_dot(last_pack->r.row[last_pack->r.n],
														last_pack->r.row[last_pack->r.n], d);
		last_pack->r.n++;
		kmd_pack_rows(&sp, last_pack);

		if (st->hooks->poll != NULL && st->hooks->poll(st->hooks->ctx) != 0)
			return KM_ERR_CANCELLED;
		for (int j0 = 0; j0 < m; j0 += KMD_TILE_A)
		{
			int			na = m - j0 < KMD_TILE_A ? m - j0 : KMD_TILE_A;

			rows.n = 0;
			for (int i = 0; i < na; i++)
			{
				const float *y = km_afk_row(a, chain[j0 + i], &cw[i]);

				if (st->cosine)
				{
					float	   *u = ybuf + (size_t) (j0 + i) * d;

					if (km_normalize_row(y, u, d) == 0.0)
						memset(u, 0, sizeof(float) * d);
					y = u;
				}
				rows.row[rows.n] = y;
				rows.m[rows.n] = 0;
				rows.aux[rows.n] = km_exact_dot(y, y, d);
				rows.n++;
				dist[j0 + i] = INFINITY;
			}
			for (int q = 0; q * KMD_TILE_B < c; q++)
			{
				kmd_block(&sp, &rows, &packs[q], out, xb);
				for (int i = 0; i < na; i++)
					for (int j = 0; j < packs[q].r.n; j++)
						if (out[(size_t) i * KMD_TILE_B + j] < dist[j0 + i])
							dist[j0 + i] = out[(size_t) i * KMD_TILE_B + j];
			}
		}

		/* the chain: move to y with probability pi(y) q(x) / (pi(x) q(y)) */
		(void) km_afk_row(a, chain[0], &wx);
		px = (double) wx * dist[0];
		qx = km_afk_q(a, wx, st->d2[chain[0]]);
		for (int j = 1; j < m; j++)
		{
			double		py;
			double		qy;

			(void) km_afk_row(a, chain[j], &wy);
			py = (double) wy * dist[j];
			qy = km_afk_q(a, wy, st->d2[chain[j]]);

			if (px == 0.0 || km_chain_uniform(chain_stream, c, j) * px * qy < py * qx)
			{
				x = j;
				px = py;
				qx = qy;
			}
		}
		/* px == 0: every proposal was a centroid already; Lloyd re-seeds it */
		km_afk_take(st, c, km_afk_row(a, chain[x], &wx));

		if (c == k - 1 || km_cpu_now() - last >= 0.5)
		{
			last = km_cpu_now();
			memset(&p, 0, sizeof(p));
			p.phase = KM_PHASE_SEED;
			p.done = c + 1;
			p.total = k;
			if (km_cpu_report(st, &p))
				return KM_ERR_CANCELLED;
		}
	}
	return KM_OK;
}

/*
 * afk-mc2 initial centroids of run number run into st->cent.
 */
km_status
km_cpu_afkmc2(km_cpu_state *st, const km_params *params, int run)
{
	km_afk		a;
	km_cpu_arena arena;
	km_status	status;
	const km_data *data = st->data;

	memset(&a, 0, sizeof(a));
	a.st = st;
	a.params = params;
	a.run = run;
	a.nblocks = (st->n + KMD_BLOCK - 1) / KMD_BLOCK;
	km_cpu_arena_init(&arena, st->hooks, 0);
	a.starts = km_cpu_alloc(&arena, sizeof(int64_t) * (data->nchunks + 1));
	a.bmin = km_cpu_alloc(&arena, sizeof(km_cpu_cand) * a.nblocks);
	a.unit = km_cpu_alloc(&arena, sizeof(float) * (size_t) st->d * st->nthreads);
	if (arena.failed)
		status = KM_ERR_NOMEM;
	else
	{
		a.starts[0] = 0;
		for (int c = 0; c < data->nchunks; c++)
			a.starts[c + 1] = a.starts[c] + data->chunks[c].n;
		status = km_afk_run(&a, &arena);
	}
	km_cpu_arena_free(&arena);
	if (status == KM_ERR_CANCELLED)
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELAXED);
	return status;
}
