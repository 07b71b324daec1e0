/*
 * kmedoids_internal.h
 *	  What the files of the k-medoids CPU engine share (private to
 *	  src/engine/kmedoids_*.c).
 *
 * A call builds one kmd_state: the problem, the per-row arrays it keeps and
 * one kmd_worker of buffers per thread, all allocated up front through the
 * caller's hooks (the CPU k-means engine's arena, cpu_workspace.c), and a
 * thread team (thread_pool.c).  Work is cut into items (blocks of rows,
 * pieces of clusters) that workers take from a shared counter; whatever an
 * item computes is stored by item or by row, and the calling thread combines
 * it in item order, so results never depend on the number of threads or on
 * timing.
 *
 * Distances come from one kernel (kmedoids_kernels.c): a block of up to
 * KMD_TILE_A rows against up to KMD_TILE_B rows packed beforehand, exactly
 * kmd_pair() of kmd_metric.h for every pair.
 */
#ifndef KMEDOIDS_INTERNAL_H
#define KMEDOIDS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kmedoids_engine.h"
#include "cpu_internal.h"
#include "thread_pool.h"

#pragma GCC visibility push(hidden)

#define KMD_NR		8			/* packed rows per panel: two AVX2 vectors of doubles */
#define KMD_MR		4			/* rows per micro-kernel call */
#define KMD_TILE_A	64			/* rows of a kernel block */
#define KMD_TILE_B	64			/* packed rows of a kernel block */

/* Below this many distance operations a job runs on the calling thread. */
#define KMD_MIN_PARALLEL_WORK 2000000.0

/* How distances are computed. */
typedef struct kmd_space
{
	int			metric;			/* KMD_L2 ... KMD_SQFD (kmd_metric.h) */
	int			d;				/* values per row, or per feature (sqfd) */
	double		alpha;
	int			avx2;
} kmd_space;

/* Some rows by pointer, with their feature counts (sqfd) and aux values. */
typedef struct kmd_rows
{
	const float *row[KMD_TILE_B];
	int32_t		m[KMD_TILE_B];
	double		aux[KMD_TILE_B];
	int			n;
} kmd_rows;

/* Up to KMD_TILE_B rows ready for the kernel. */
typedef struct kmd_pack
{
	kmd_rows	r;
	double	   *panel;			/* dense: KMD_TILE_B / KMD_NR panels of d x KMD_NR */
} kmd_pack;

/* A row drawn by its key; selections keep the smallest (key, row). */
typedef struct kmd_cand
{
	double		key;
	int64_t		row;
} kmd_cand;

typedef struct kmd_worker
{
	kmd_pack	pack;			/* the packed side of this worker's block */
	kmd_rows	a;				/* the other side */
	double	   *out;			/* KMD_TILE_A x KMD_TILE_B distances */
	double	   *xb;				/* kmd_block's scratch */
	double	   *csum;			/* k * KMD_TILE_A: per-cluster sums (silhouette) */
	kmd_cand   *heap;			/* selections: up to max(k, KMD_MAX_L) entries */
	int			nheap;
} __attribute__((aligned(64))) kmd_worker;

/* k-means++ candidates per step, at most (2 + ln k < 24 for k < 2^31). */
#define KMD_MAX_L 24

typedef struct kmd_state
{
	/* the problem */
	const kmd_data *data;
	int64_t		n;
	int			k;
	kmd_space	sp;
	const km_hooks *hooks;
	double		t0;

	/* the team */
	int			nthreads;
	kmd_worker *workers;
	pthread_t  *threads;
	km_pool		pool;
	int			pool_on;
	int			stop;			/* poll or report said stop */
	int64_t		next;			/* next work item (atomic) */
	int64_t		nitems;

	/* per row */
	double	   *aux;			/* kmd_aux of every row (every metric but l1) */
	uint64_t   *hashes;			/* km_row_hash of every row */
	int64_t		nblocks;		/* KMD_BLOCK blocks of rows */

	/* memory of the call, for what is sized while it runs (afk-mc2) */
	km_cpu_arena *arena;

	/* the current medoids and what the rows know of them */
	int64_t    *medoids;		/* k */
	kmd_pack   *mpacks;			/* the medoids, packed, KMD_TILE_B a pack */
	char	   *is_medoid;		/* n (fasterpam, seeding) */
	int32_t    *label;			/* n: nearest medoid */
	double	   *dn;				/* n: distance to it */
	int32_t    *second;			/* n: second nearest (fasterpam) */
	double	   *ds;				/* n: distance to it */

	/* fasterpam */
	double	   *cols;			/* bcap x n: distances of a batch of candidates */
	int			bcap;			/* candidates per batch */
	double	   *removal;		/* k: removal loss of each medoid */
	double	   *partial;		/* nblocks x (k + 1): per-block sums */
	double	   *delta;			/* k + 1 */

	/* seeding */
	kmd_pack   *cpack;			/* candidates of a pass, or a FasterPAM batch */
	double	   *dmin;			/* n: distance to the nearest medoid so far */
	kmd_cand   *merge;			/* nthreads * KMD_MAX_L */
	int			ncand;			/* candidates of a seeding pass */
	int			fold;			/* column 0 is the last medoid, to fold into dmin */
	uint64_t	stream;			/* key stream of a selection pass */
	int			nsel;			/* entries a selection keeps */
	int			key_weight;		/* keys weighted by dmin (else 1) */

	/* job arguments */
	const kmd_pack *job_packs;	/* nearest pass: the medoids */
	int32_t    *out_label;		/* nearest pass: labels written */
	double	   *out_dist;		/* nearest pass: distances written */
	const int64_t *job_members; /* score: rows by cluster */
	const int64_t *job_offsets; /* score: where each cluster starts */
	int64_t    *job_items;		/* score: (cluster, first, end) per item */
	double	   *job_sums;		/* score: per member */
	const int32_t *job_labels;	/* silhouette */
	const int64_t *job_sizes;	/* silhouette: rows per cluster */
	double	   *job_sil;		/* silhouette: per row */
	const int64_t *job_props;	/* afk-mc2: a chain's proposals */
	int			job_col;		/* fasterpam: the candidate's column */
	int			job_swap;		/* fasterpam: the cluster swapped */
} kmd_state;

/* kmedoids_kernels.c */
extern void kmd_space_init(kmd_space *sp, int metric, int d, double alpha);
extern void kmd_pack_rows(const kmd_space *sp, kmd_pack *pk);
extern void kmd_block(const kmd_space *sp, const kmd_rows *a, const kmd_pack *pk,
					  double *out, double *xb);
extern size_t kmd_pack_bytes(int d);
extern size_t kmd_block_scratch_bytes(int d);

/* kmedoids_cpu.c */
extern void kmd_run(kmd_state *st, km_pool_fn fn, int64_t nitems, double work);
extern int	kmd_take(kmd_state *st, int id, int64_t *item);
extern int	kmd_poll(kmd_state *st, int id);
extern int	kmd_report(kmd_state *st, km_progress *p);
extern void kmd_rows_add(const kmd_state *st, kmd_rows *r, int64_t row);
extern void kmd_pack_cols(kmd_state *st, kmd_pack *pk, const int64_t *cols, int ncols);
extern double kmd_dist(const kmd_state *st, int64_t a, int64_t b);
extern void kmd_pack_medoids_upto(kmd_state *st, int count);
extern void kmd_nearest_pass(kmd_state *st, int want_second);
extern void kmd_nearest_into(kmd_state *st, const kmd_pack *mp, int32_t *label,
							 double *dist, int want_second);
extern double kmd_cost_sum(const kmd_state *st, int64_t *sizes, double *cluster_cost);

/* kmedoids_seed.c */
extern km_status kmd_seed(kmd_state *st, const kmd_params *params);

/* kmedoids_fasterpam.c */
extern km_status kmd_fasterpam(kmd_state *st, const kmd_params *params,
							   kmd_result *result);

/* kmedoids_alternate.c */
extern void kmd_cpu_steps(kmd_state *st, kmd_steps *steps);
extern size_t kmd_alternate_bytes(int64_t n, int k, int n_threads);

/* kmedoids_seed.c */
extern size_t kmd_afkmc2_bytes(int64_t n, int k, int chain_length);

/* Whether the stop flag is up. */
static inline int
kmd_stopped(const kmd_state *st)
{
	return __atomic_load_n(&st->stop, __ATOMIC_RELAXED);
}

/* (key, row) order: smaller key first, ties to the lower row. */
static inline int
kmd_before(const kmd_cand *a, const kmd_cand *b)
{
	return a->key < b->key || (a->key == b->key && a->row < b->row);
}

#pragma GCC visibility pop

#endif							/* KMEDOIDS_INTERNAL_H */
