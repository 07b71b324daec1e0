/*
 * cpu_workspace.c
 *	  Memory of a CPU engine call: the plan, the allocations, the estimate.
 *
 * Everything a call needs is allocated before any thread computes, from the
 * calling thread, through the caller's hooks, and freed together at the end.
 * The same code sizes a call without allocating (a "dry" arena), so that
 * fit_workspace reports exactly what a fit of that shape asks for.
 */
#include "cpu_internal.h"
#include "km_kmpar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every buffer starts on its own cache line: no false sharing, aligned loads. */
#define KM_CPU_ALIGN 64

static size_t
km_cpu_round(size_t size)
{
	return (size + KM_CPU_ALIGN - 1) & ~(size_t) (KM_CPU_ALIGN - 1);
}

/*
 * Start an arena on the caller's hooks (NULL or a NULL alloc: malloc).  A
 * dry arena only adds up sizes.
 */
void
km_cpu_arena_init(km_cpu_arena *arena, const km_hooks *hooks, int dry)
{
	memset(arena, 0, sizeof(*arena));
	arena->hooks = hooks;
	arena->dry = dry;
}

/*
 * A cache-line aligned block of size bytes, or NULL when the hooks fail (the
 * arena remembers, so callers may check once at the end).  Dry arenas
 * return NULL and only count.
 */
void *
km_cpu_alloc(km_cpu_arena *arena, size_t size)
{
	size_t		want;
	void	   *p;
	uintptr_t	addr;

	if (arena->failed)
		return NULL;
	if (size > SIZE_MAX - 2 * KM_CPU_ALIGN)
	{
		arena->failed = 1;
		return NULL;
	}
	want = km_cpu_round(size) + KM_CPU_ALIGN;
	arena->bytes += want;
	if (arena->dry)
		return NULL;
	if (arena->nblocks == KM_CPU_MAX_BLOCKS)
	{
		arena->failed = 1;
		return NULL;
	}
	if (arena->hooks != NULL && arena->hooks->alloc != NULL)
		p = arena->hooks->alloc(arena->hooks->ctx, want);
	else
		p = malloc(want);
	if (p == NULL)
	{
		arena->failed = 1;
		return NULL;
	}
	arena->blocks[arena->nblocks++] = p;
	addr = ((uintptr_t) p + KM_CPU_ALIGN - 1) & ~(uintptr_t) (KM_CPU_ALIGN - 1);
	return (void *) addr;
}

/*
 * Give every block back, newest first.
 */
void
km_cpu_arena_free(km_cpu_arena *arena)
{
	while (arena->nblocks > 0)
	{
		void	   *p = arena->blocks[--arena->nblocks];

		if (arena->hooks != NULL && arena->hooks->alloc != NULL)
		{
			if (arena->hooks->free != NULL)
				arena->hooks->free(arena->hooks->ctx, p);
		}
		else
			free(p);
	}
}

/*
 * Tile rows, panels, k-means++ candidates and the team size for a problem.
 * Tiles of copied rows stay around 200 KB so that they are still in cache
 * when the M step reads them again.  Small problems are not worth waking
 * threads for.
 */
void
km_cpu_plan(km_cpu_state *st, int64_t n, int d, int k, int n_threads)
{
	int			rows;
	int64_t		ntiles;
	int			team;
	int			ppw;

	rows = KM_CPU_TILE_FLOATS / d;
	if (rows > KM_CPU_TILE_MAX)
		rows = KM_CPU_TILE_MAX;
	if (rows >= 16)
		rows &= ~7;
	else
		rows = 16;
	if (rows > n)
		rows = (int) n;

	st->tile_rows = rows;
	st->kpad = (k + KM_CPU_NR - 1) / KM_CPU_NR * KM_CPU_NR;
	st->npanels = st->kpad / KM_CPU_NR;
	st->L = 2 + (int) log((double) k);
	/* filter values kept: six rows being settled, or a k-means++ tile */
	ppw = (st->L + 1 + KM_CPU_NR - 1) / KM_CPU_NR * KM_CPU_NR;
	st->fcols = KM_CPU_MR * st->kpad;
	if ((rows + KM_CPU_MR) * ppw > st->fcols)
		st->fcols = (rows + KM_CPU_MR) * ppw;

	ntiles = (n + rows - 1) / rows;
	team = n_threads < 1 ? 1 : n_threads;
	if (team > 1024)
		team = 1024;
	if (team > ntiles)
		team = (int) ntiles;
	if ((double) n * d * (k + 2) < KM_CPU_MIN_PARALLEL_WORK)
		team = 1;
	st->nthreads = team;
}

/*
 * The team a fit of this shape runs with (kmeans_engine.h), as km_cpu_plan
 * decides it, so that what the caller reports is what runs.
 */
int
km_cpu_threads(int64_t n, int d, int k, int n_threads)
{
	km_cpu_state st;

	memset(&st, 0, sizeof(st));
	km_cpu_plan(&st, n, d, k, n_threads);
	return st.nthreads;
}

/*
 * Hand out size bytes at *off of a worker's block (base NULL: sizing only).
 */
static void *
km_cpu_carve(char *base, size_t *off, size_t size)
{
	void	   *p = base != NULL ? (void *) (base + *off) : NULL;

	*off += km_cpu_round(size);
	return p;
}

/*
 * Lay out one worker's buffers in base (NULL: only size them); returns the
 * bytes a worker needs.
 */
static size_t
km_cpu_worker_layout(const km_cpu_state *st, km_cpu_call call, char *base,
					 km_cpu_worker *wk)
{
	size_t		off = 0;
	size_t		rows = (size_t) st->tile_rows;
	size_t		k = (size_t) st->k;
	size_t		d = (size_t) st->d;
	size_t		L = (size_t) st->L;

	memset(wk, 0, sizeof(*wk));
	wk->xbuf = km_cpu_carve(base, &off, sizeof(float) * rows * d);
	wk->lanes = km_cpu_carve(base, &off, sizeof(km_cpu_lanes) * rows);
	wk->scratch = km_cpu_carve(base, &off, sizeof(km_cpu_lanes));
	wk->fbuf = km_cpu_carve(base, &off, sizeof(float) * (size_t) st->fcols);
	wk->xn2buf = km_cpu_carve(base, &off, sizeof(float) * rows);
	wk->nrm = km_cpu_carve(base, &off, sizeof(double) * rows);
	wk->best = km_cpu_carve(base, &off, sizeof(float) * rows);
	wk->second = km_cpu_carve(base, &off, sizeof(float) * rows);
	wk->label = km_cpu_carve(base, &off, sizeof(int32_t) * rows);
	wk->cost = km_cpu_carve(base, &off, sizeof(double) * rows);
	wk->cand = km_cpu_carve(base, &off, sizeof(int32_t) * KM_CPU_MR * k);
	wk->counts = km_cpu_carve(base, &off, sizeof(int64_t) * k);
	wk->csum = km_cpu_carve(base, &off, sizeof(double) * k);
	if (call != KM_CPU_CALL_ASSIGN)
	{
		wk->cacc = km_cpu_carve(base, &off, sizeof(km_xacc) * k);
		/* the rows farthest from their centroids, for re-seeding */
		wk->heap = km_cpu_carve(base, &off, sizeof(km_cpu_cand) * k);
	}
	if (call == KM_CPU_CALL_FIT)
	{
		wk->dvec = km_cpu_carve(base, &off, sizeof(double) * d);
		wk->ppheap = km_cpu_carve(base, &off, sizeof(km_cpu_cand) * (L * L + 1));
		wk->ppn = km_cpu_carve(base, &off, sizeof(int) * (L + 1));
		wk->pot = km_cpu_carve(base, &off, sizeof(double) * L);
	}
	return off;
}

/*
 * Allocate everything a call needs (st planned by km_cpu_plan, with d, k,
 * n and cosine set).  Returns 0 when an allocation failed; whatever was
 * allocated stays in the arena for the caller to free.  With a dry arena,
 * only arena->bytes means anything afterwards.
 */
int
km_cpu_setup(km_cpu_state *st, km_cpu_arena *arena, km_cpu_call call,
			 int need_labels, int need_hashes, int need_d2)
{
	size_t		n = (size_t) st->n;
	size_t		k = (size_t) st->k;
	size_t		d = (size_t) st->d;
	size_t		L = (size_t) st->L;
	size_t		team = (size_t) st->nthreads;
	size_t		wbytes;
	size_t		nmerge;
	km_cpu_worker sizing;
	char	   *block;

	if ((uint64_t) st->n > SIZE_MAX / 64)
	{
		arena->failed = 1;
		return 0;
	}

	st->mu = km_cpu_alloc(arena, sizeof(float) * d);
	st->cprime = km_cpu_alloc(arena, sizeof(float) * k * d);
	st->panels = km_cpu_alloc(arena, sizeof(float) * (size_t) st->kpad * d);
	st->cnp = km_cpu_alloc(arena, sizeof(float) * (size_t) st->kpad);
	st->cn = km_cpu_alloc(arena, sizeof(float) * k);
	st->cnorm = km_cpu_alloc(arena, sizeof(double) * k);
	st->counts = km_cpu_alloc(arena, sizeof(int64_t) * k);
	st->csum = km_cpu_alloc(arena, sizeof(double) * k);
	if (call != KM_CPU_CALL_ASSIGN)
		st->cacc = km_cpu_alloc(arena, sizeof(km_xacc) * k);
	if (call == KM_CPU_CALL_MAP)
		st->merge = km_cpu_alloc(arena, sizeof(km_cpu_cand) * team * k);
	if (call == KM_CPU_CALL_FIT)
	{
		if (need_labels)
			st->labels = km_cpu_alloc(arena, sizeof(int32_t) * n);
		if (need_hashes)
			st->hashes = km_cpu_alloc(arena, sizeof(uint64_t) * n);
		if (need_d2)
			st->d2 = km_cpu_alloc(arena, sizeof(float) * n);
		if (st->cosine)
			st->rownorm = km_cpu_alloc(arena, sizeof(double) * n);
		else
			st->xnorm2 = km_cpu_alloc(arena, sizeof(float) * n);
		st->cent = km_cpu_alloc(arena, sizeof(float) * k * d);
		st->empty = km_cpu_alloc(arena, sizeof(int32_t) * k);
		st->relocated = km_cpu_alloc(arena, k);
		st->dtmp = km_cpu_alloc(arena, sizeof(double) * d);
		nmerge = team * (k > L + 1 ? k : L + 1);
		st->merge = km_cpu_alloc(arena, sizeof(km_cpu_cand) * nmerge);
		st->ppcols = km_cpu_alloc(arena, sizeof(float) * (L + 1) * d);
		st->ppcolsn = km_cpu_alloc(arena, sizeof(float) * (L + 1));
		st->pppanels = km_cpu_alloc(arena, sizeof(float) * (L + KM_CPU_NR) * d);
		st->ppcnp = km_cpu_alloc(arena, sizeof(float) * (L + KM_CPU_NR));
	}

	st->workers = km_cpu_alloc(arena, sizeof(km_cpu_worker) * team);
	st->threads = km_cpu_alloc(arena, sizeof(pthread_t) * team);
	wbytes = km_cpu_worker_layout(st, call, NULL, &sizing);
	block = km_cpu_alloc(arena, wbytes * team);
	if (arena->failed || arena->dry)
		return !arena->failed;

	for (size_t t = 0; t < team; t++)
	{
		km_cpu_worker_layout(st, call, block + t * wbytes, &st->workers[t]);
		if (st->workers[t].cacc != NULL)
			for (size_t j = 0; j < k; j++)
				km_xacc_init(&st->workers[t].cacc[j]);
	}
	if (st->cacc != NULL)
		for (size_t j = 0; j < k; j++)
			km_xacc_init(&st->cacc[j]);
	return 1;
}

/*
 * The sums of a fit or a map, once st->xlev and st->wlev are known: every
 * worker's levels and the caller's reduction, and the rounded sums.
 * Returns 0 when an allocation failed.
 */
int
km_cpu_setup_sums(km_cpu_state *st, km_cpu_arena *arena)
{
	size_t		kd = (size_t) st->k * (size_t) st->d;
	size_t		k = (size_t) st->k;
	size_t		per = (size_t) st->xlev.n * kd + (size_t) st->wlev.n * k;
	size_t		team = (size_t) st->nthreads;
	double	   *block;

	/* each worker's share on its own cache lines */
	per = (per * sizeof(double) + 63) / 64 * 64 / sizeof(double);
	block = km_cpu_alloc(arena, sizeof(double) * per * team);
	st->sums = km_cpu_alloc(arena, sizeof(double) * (size_t) st->xlev.n * kd);
	st->wsum = km_cpu_alloc(arena, sizeof(double) * (size_t) st->wlev.n * k);
	st->sumr = km_cpu_alloc(arena, sizeof(double) * kd);
	st->wsumr = km_cpu_alloc(arena, sizeof(double) * k);
	if (arena->failed || arena->dry)
		return !arena->failed;
	for (size_t t = 0; t < team; t++)
	{
		st->workers[t].sums = block + t * per;
		st->workers[t].wsum = block + t * per + (size_t) st->xlev.n * kd;
	}
	return 1;
}

/*
 * Bytes k-means|| asks for on top of a fit's own (cpu_kmpar.c, kmpar.c): a
 * cost per row and the draws, the candidates of km_kmpar_run, and the
 * largest of the calls it makes (a fold against 2k candidates, a key pass,
 * the candidates' weights).
 */
static size_t
km_cpu_kmpar_bytes(int64_t n, int d, int k, int n_threads, int cosine)
{
	size_t		cap = (size_t) km_kmpar_max_candidates(k);
	size_t		L = (size_t) (2 + (int) log((double) k));
	size_t		outer = sizeof(double) * (size_t) n + sizeof(km_kmpar_draw) * 2 * (size_t) k;
	size_t		run = cap * (sizeof(float) * 2 * (size_t) d + sizeof(double) * (4 + L) +
							 sizeof(uint64_t) + sizeof(float));
	size_t		fold,
				keys,
				weights = cap * sizeof(double) * KM_XLEV_MAX;
	km_cpu_state st;
	km_cpu_arena arena;

	memset(&st, 0, sizeof(st));
	st.n = n;
	st.d = d;
	st.k = 2 * k;
	st.cosine = cosine;
	km_cpu_plan(&st, n, d, 2 * k, n_threads);
	km_cpu_arena_init(&arena, NULL, 1);
	km_cpu_setup(&st, &arena, KM_CPU_CALL_ASSIGN, 0, 0, 0);
	fold = arena.bytes;
	keys = (size_t) (n_threads < 1 ? 1 : n_threads) *
		(sizeof(km_cpu_worker) + sizeof(pthread_t) + 2 * sizeof(km_cpu_cand) * 2 * (size_t) k +
		 4 * KM_CPU_ALIGN);
	if (keys > fold)
		fold = keys;
	if (weights > fold)
		fold = weights;
	return outer + run + 16 * KM_CPU_ALIGN + fold;
}

/* km_kmpar.h: k-means||'s bytes for the larger of the two metrics. */
size_t
km_cpu_kmpar_workspace(int64_t n, int d, int k, int n_threads)
{
	size_t		a = km_cpu_kmpar_bytes(n, d, k, n_threads, 0);
	size_t		b = km_cpu_kmpar_bytes(n, d, k, n_threads, 1);

	return n < 1 || d < 1 || k < 1 ? 0 : (a > b ? a : b);
}

/*
 * Upper bound of the bytes a fit asks of hooks->alloc: the allocations of
 * the larger of the two metrics, with every optional array counted but
 * k-means||'s (km_cpu_kmpar_workspace).
 */
size_t
km_cpu_fit_workspace(int64_t n, int d, int k, int n_threads)
{
	size_t		most = 0;

	if (n < 1 || d < 1 || k < 1)
		return 0;
	for (int cosine = 0; cosine <= 1; cosine++)
	{
		km_cpu_state st;
		km_cpu_arena arena;

		memset(&st, 0, sizeof(st));
		st.n = n;
		st.d = d;
		st.k = k;
		st.cosine = cosine;
		km_cpu_plan(&st, n, d, k, n_threads);
		km_cpu_arena_init(&arena, NULL, 1);
		km_cpu_setup(&st, &arena, KM_CPU_CALL_FIT, 1, 1, 1);
		/* sums in two levels, which is what most data need (km_xsum.h) */
		st.xlev.n = 2;
		st.wlev.n = 2;
		km_cpu_setup_sums(&st, &arena);
		if (arena.bytes > most)
			most = arena.bytes;
	}
	return most;
}
