/*
 * cpu_internal.h
 *	  What the files of the CPU engine share (private to src/engine/cpu_*.c).
 *
 * A call (fit, assign or map) builds one km_cpu_state: the problem, the
 * per-row arrays it keeps, the centroids of the current pass and one
 * km_cpu_worker of buffers per thread, all allocated up front from the
 * caller's hooks.  Work is done in passes: the calling thread fills in what
 * the pass needs, runs one job on the thread team, then reduces what each
 * worker accumulated, in worker order, so results do not depend on timing.
 *
 * Each worker walks its own contiguous slice of the rows in tiles, which
 * never cross a chunk; the caller (worker 0) polls for cancellation after
 * each of its tiles and the others watch the shared stop flag.
 */
#ifndef KM_CPU_INTERNAL_H
#define KM_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kmeans_engine.h"
#include "km_xsum.h"
#include "thread_pool.h"

/* Nothing below is exported from the shared object: only km_cpu_engine. */
#pragma GCC visibility push(hidden)

/* Tiling: rows per tile, and the filter's micro-kernel block (cpu_filter.c). */
#define KM_CPU_TILE_MAX		256		/* rows per tile, at most */
#define KM_CPU_TILE_FLOATS	49152	/* rows * d of a copied tile, about */
#define KM_CPU_MR			6		/* rows per micro-kernel block */
#define KM_CPU_NR			16		/* centroids per packed panel */
#define KM_CPU_SMALL_D		4		/* up to this d, rows go in vector lanes */

/* Below this many flops per pass the caller works alone. */
#define KM_CPU_MIN_PARALLEL_WORK 4000000.0

/* What a pass over the rows does (km_cpu_state.flags). */
#define KM_CPU_ASSIGN	0x01	/* label rows (else take st->labels) */
#define KM_CPU_MOVED	0x02	/* count labels that change */
#define KM_CPU_SUMS		0x04	/* per-cluster sums of w * row, weights */
#define KM_CPU_COST		0x08	/* exact cost: per-cluster inertia */
#define KM_CPU_FARTHEST 0x10	/* keep the rows farthest from their centroid */
#define KM_CPU_LLOYD	(KM_CPU_ASSIGN | KM_CPU_MOVED | KM_CPU_SUMS)

/* What a call sets up (km_cpu_setup). */
typedef enum km_cpu_call
{
	KM_CPU_CALL_FIT,
	KM_CPU_CALL_ASSIGN,
	KM_CPU_CALL_MAP
} km_cpu_call;

/*
 * A row picked by its key; selections keep the smallest (key, hash, row):
 * the hash (km_row_hash of the row and its weight) settles ties the same
 * way however the rows are split, the row index only between equal rows.
 */
typedef struct km_cpu_cand
{
	double		key;
	uint64_t	hash;
	int64_t		row;			/* global index */
	const float *x;				/* the row, in the caller's data */
	float		w;
} km_cpu_cand;

/* Rows a worker handles in one go, all from one chunk. */
typedef struct km_cpu_tile
{
	const float *x;
	const float *w;				/* NULL: weight 1 */
	int			n;
	int64_t		row;			/* global index of the first row */
} km_cpu_tile;

typedef struct km_cpu_cursor
{
	int64_t		row;			/* next global row */
	int64_t		end;
	int64_t		base;			/* global index of the chunk's first row */
	int			chunk;
	int			tiles;			/* tiles handed out so far */
} km_cpu_cursor;

/*
 * A row's running top-2 in the filter (cpu_filter.c), per vector lane: lane
 * q has seen centroids q, q + 8, q + 16, ... in order.
 */
typedef struct km_cpu_lanes
{
	float		best[8];
	float		second[8];
	int32_t		label[8];
} km_cpu_lanes;

/* k-means++: what one pass computes (see cpu_seed.c). */
typedef struct km_cpu_pp
{
	int			ncols;			/* filter columns: [previous] + candidates */
	int			npanels;		/* packed panels of those columns */
	int			first;			/* column 0 initialises D2 */
	int			prev;			/* column 0 is the last chosen centroid */
	int			ncand;			/* candidates of this step */
	int			keys;			/* draw the next step's keys */
	uint64_t	stream;			/* the next step's stream */
} km_cpu_pp;

typedef struct km_cpu_worker
{
	/* one tile */
	float	   *xbuf;			/* tile_rows * d: rows as the filter sees them */
	km_cpu_lanes *lanes;		/* tile_rows: per-row top-2 lane state */
	km_cpu_lanes *scratch;		/* lane state of padding rows */
	float	   *fbuf;			/* fcols floats: filter values kept */
	float	   *xn2buf;			/* tile_rows: |x'|^2 computed per tile */
	const float *xn2;			/* |x'|^2 of the current tile's rows */
	double	   *nrm;			/* tile_rows: cosine row norms */
	float	   *best;			/* tile_rows: best filter value */
	float	   *second;			/* tile_rows: second best */
	int32_t    *label;			/* tile_rows */
	double	   *cost;			/* tile_rows: exact cost, < 0 if not computed */
	int32_t    *cand;			/* MR * k: centroids ambiguous rows may go to */

	/* what a pass accumulates */
	double	   *sums;			/* xlev.n levels of k * d (km_xsum.h) */
	double	   *wsum;			/* wlev.n levels of k */
	int64_t    *counts;			/* k */
	double	   *csum;			/* k: sum of w * exact cost */
	km_xacc    *cacc;			/* k: the same, exactly */
	double	   *dvec;			/* d: sum of rows (prepare) */
	double		inertia;
	double		wtotal;
	double		sqsum;
	km_xstats	xs;				/* prepare: bounds on the terms of the sums */
	int64_t		moved;

	/* selections */
	km_cpu_cand *heap;			/* k entries */
	int			nheap;
	km_cpu_cand *ppheap;		/* L heaps of L entries, then one of 1 */
	int		   *ppn;			/* L + 1 lengths */
	double	   *pot;			/* L k-means++ potentials */
} __attribute__((aligned(64))) km_cpu_worker;	/* no false sharing */

typedef struct km_cpu_state
{
	/* the problem */
	const km_data *data;
	int64_t		n;
	int			d;
	int			k;
	int			cosine;
	const km_hooks *hooks;
	double		t0;				/* when the call began (seconds) */

	/* the work split */
	int			nthreads;		/* team size, the caller included */
	int			tile_rows;
	int			kpad;			/* k rounded up to panels */
	int			npanels;
	int			fcols;			/* floats of a worker's filter buffer */
	int			L;				/* k-means++ candidates per step */
	int			avx2;			/* use the AVX2+FMA code paths */
	km_cpu_worker *workers;
	pthread_t  *threads;
	km_pool		pool;
	int			pool_on;
	int			stop;			/* set when poll or report said stop */

	/* per-row arrays (fit) */
	int32_t    *labels;
	uint64_t   *hashes;
	float	   *d2;
	float	   *xnorm2;			/* l2: |x|^2 */
	double	   *rownorm;		/* cosine: |x| */

	/* the filter */
	int			centred;		/* l2 rows are x - mu, copied per tile */
	float	   *mu;				/* d */
	float	   *cent;			/* k * d: working centroids (fit) */
	const float *cref;			/* k * d: labels are exact against these */
	float	   *cprime;			/* k * d: centred or normalised copy */
	float	   *panels;			/* kpad * d: -2 c', packed (cpu_filter.c) */
	float	   *cnp;			/* kpad: |c'_j|^2, +inf padding */
	float	   *cn;				/* k: |c'_j|^2 */
	double	   *cnorm;			/* k: cosine, km_exact_norm(cref_j) */
	float		cmax;			/* max |c'_j| */

	/* exact sums: how terms are cut (km_xsum.h) */
	km_xstats	xstats;			/* bounds on every term of the call */
	km_xlevels	xlev;			/* levels of the sums of rows */
	km_xlevels	wlev;			/* levels of the sums of weights */
	int			weighted;		/* some chunk has weights */

	/* reductions and scratch (caller only) */
	double	   *sums;			/* xlev.n levels of k * d */
	double	   *wsum;			/* wlev.n levels of k */
	double	   *sumr;			/* k * d: sums rounded to double */
	double	   *wsumr;			/* k: weights rounded to double */
	int64_t    *counts;			/* k */
	double	   *csum;			/* k */
	km_xacc    *cacc;			/* k */
	int32_t    *empty;			/* k */
	char	   *relocated;		/* k */
	double	   *dtmp;			/* d */
	km_cpu_cand *merge;			/* nthreads * max(k, L + 1) */
	float	   *ppcols;			/* (L + 1) * d: k-means++ filter vectors */
	float	   *ppcolsn;		/* L + 1 */
	float	   *pppanels;		/* their packed panels */
	float	   *ppcnp;			/* their squared norms, +inf padding */

	/* the current pass */
	int			flags;
	int32_t    *labels_out;		/* labels written, or NULL */
	double	   *dist_out;		/* distances written, or NULL */
	double	   *cost_out;		/* exact costs written, or NULL */
	double	   *fold_cost;		/* k-means||: lowest cost so far, per row */
	int32_t    *fold_label;		/* k-means||: its candidate, per row */
	int			fold_first;		/* number of the first centroid of the pass */
	int			nsel;			/* entries each worker's heap keeps */
	uint64_t	stream;			/* stream of a key pass */
	km_cpu_pp  *pp;
} km_cpu_state;

/* Memory: every allocation of a call, freed together. */
#define KM_CPU_MAX_BLOCKS 64

typedef struct km_cpu_arena
{
	const km_hooks *hooks;
	int			dry;			/* only count what would be asked for */
	int			failed;
	size_t		bytes;
	int			nblocks;
	void	   *blocks[KM_CPU_MAX_BLOCKS];
} km_cpu_arena;

/* cpu_workspace.c */
extern void km_cpu_arena_init(km_cpu_arena *arena, const km_hooks *hooks, int dry);
extern void *km_cpu_alloc(km_cpu_arena *arena, size_t size);
extern void km_cpu_arena_free(km_cpu_arena *arena);
extern void km_cpu_plan(km_cpu_state *st, int64_t n, int d, int k, int n_threads);
extern int	km_cpu_setup(km_cpu_state *st, km_cpu_arena *arena, km_cpu_call call,
						 int need_labels, int need_hashes, int need_d2);
extern int	km_cpu_setup_sums(km_cpu_state *st, km_cpu_arena *arena);
extern size_t km_cpu_fit_workspace(int64_t n, int d, int k, int n_threads);

/* cpu_filter.c */
extern int	km_cpu_have_avx2(void);
extern void km_nearest_portable(km_nearest *nn);
extern void km_cpu_filter_pack(const float *c, const float *cn, int k, int d,
							   float *panels, float *cnp);
extern void km_cpu_filter_top2(const km_cpu_state *st, km_cpu_worker *wk,
							   const float *a, int nt);
extern void km_cpu_filter_values(const km_cpu_state *st, const float *const *rows,
								 int nrows, const float *panels, const float *cnp,
								 int p0, int p1, float *const *out);

/* cpu_kernels.c */
extern void km_cpu_accumulate(int avx2, const km_xlevels *lv, double *sums, size_t stride,
							  const float *x, const int32_t *label, const float *w,
							  int nt, int d);
extern void km_cpu_rows(int avx2, const float *x, const float *mu, float *out,
						float *xn2, int nt, int d);
extern float km_cpu_sqnorm(int avx2, const float *x, int d);
extern float km_cpu_absmax(int avx2, const float *x, int d);
extern float km_cpu_centre(int avx2, const float *x, const float *mu, float *out, int d);
extern float km_cpu_normalize(int avx2, const float *x, double nrm, float *out, int d);
extern void km_cpu_add_row(int avx2, double *acc, const float *x, int d);
extern void km_cpu_add_row_w(int avx2, double *acc, const float *x, double w, int d);
extern void km_cpu_xstats_rows(int avx2, const float *x, const float *w, int nt, int d,
							   int cosine, const double *norms, km_xstats *s);
extern void km_cpu_exact_cost4(const float *const *x, const float *const *c,
							   const double *cnorm, int d, int cosine, double *out);
extern void km_cpu_exact_norms(const float *x, int nrows, int d, double *out);

/* cpu_assign.c */
extern void km_cpu_cursor_init(const km_cpu_state *st, int id, km_cpu_cursor *cur);
extern int	km_cpu_next_tile(km_cpu_state *st, int id, km_cpu_cursor *cur,
							 km_cpu_tile *tile);
extern const float *km_cpu_tile_rows(km_cpu_state *st, km_cpu_worker *wk,
									 const km_cpu_tile *t);
extern void km_cpu_choose_mu(km_cpu_state *st, const double *sum, double sqsum,
							 int64_t count);
extern float km_cpu_filter_row(const km_cpu_state *st, const float *x, float *out);
extern void km_cpu_set_centroids(km_cpu_state *st, const float *cref);
extern void km_cpu_pass(km_cpu_state *st, int flags);
extern void km_cpu_reduce(km_cpu_state *st, int flags);
extern void km_cpu_prepare(km_cpu_state *st);
extern void km_cpu_stats(km_cpu_state *st);
extern void km_cpu_levels(km_cpu_state *st);

/* cpu_select.c */
extern void km_cpu_heap_push(km_cpu_cand *heap, int *len, int cap,
							 const km_cpu_cand *c);
extern int	km_cpu_merge(km_cpu_state *st, int which);

/* cpu_seed.c */
extern km_status km_cpu_seed(km_cpu_state *st, const km_params *params, int run,
							 km_error *error);

/* cpu_kmpar.c */
extern km_status km_cpu_kmeans_parallel(km_cpu_state *st, const km_params *params, int run,
										km_error *error);
extern const float *km_cpu_data_row(const km_data *data, int64_t row);

/* cpu_afkmc2.c */
extern km_status km_cpu_afkmc2(km_cpu_state *st, const km_params *params, int run);

/* cpu_lloyd.c */
typedef struct km_cpu_run
{
	double		inertia;
	int			iterations;
	int			converged;
	int			relocated;
} km_cpu_run;

extern km_status km_cpu_lloyd(km_cpu_state *st, const km_params *params, int run,
							  km_cpu_run *out);

/* cpu_engine.c */
extern double km_cpu_now(void);
extern int	km_cpu_report(km_cpu_state *st, km_progress *progress);

/*
 * Whether a comes before b in a selection: smaller key first, then the
 * smaller hash, so a selection does not depend on how rows are split; the
 * row index only orders equal rows.
 */
static inline int
km_cpu_before(const km_cpu_cand *a, const km_cpu_cand *b)
{
	if (a->key != b->key)
		return a->key < b->key;
	if (a->hash != b->hash)
		return a->hash < b->hash;
	return a->row < b->row;
}

/* Whether the stop flag is up (any thread). */
static inline int
km_cpu_stopped(const km_cpu_state *st)
{
	return __atomic_load_n(&st->stop, __ATOMIC_RELAXED);
}

#pragma GCC visibility pop

#endif							/* KM_CPU_INTERNAL_H */
