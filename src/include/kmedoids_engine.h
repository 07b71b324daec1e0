/*
 * kmedoids_engine.h
 *	  The interface between a k-medoids engine and whoever drives it.
 *
 * Plain C, no PostgreSQL headers, like kmeans_engine.h, whose km_status,
 * km_error, km_init and km_hooks it shares: allocations through
 * hooks->alloc, cancellation through hooks->poll (often, from any thread of
 * the engine's) and hooks->report (between passes, from the calling thread).
 *
 * k-medoids picks k rows, the medoids, so that the sum of each row's
 * distance to its nearest medoid, the cost, is small.  Any metric of
 * kmd_metric.h will do, including the signature quadratic form distance
 * (sqfd) between feature signatures of different lengths.  No n x n
 * distance matrix is ever stored: distances are computed as they are needed.
 *
 * Semantics every engine shares:
 *
 *	- Distances are kmd_pair() of kmd_metric.h, bit for bit.
 *	- A row's label is its nearest medoid, ties to the lowest cluster id.
 *	- Rows are identified by their index in kmd_data; every tie between rows
 *	  (candidates, new medoids) goes to the lowest index.  The caller decides
 *	  the order (the SQL layer sorts rows by id, or by content), which is what
 *	  makes the result independent of scan order.
 *	- Random choices use per-row keys derived from each row's contents and
 *	  the seed (km_hash.h), so they do not depend on row order either.
 *	- Sums that decide something are taken in a fixed order that does not
 *	  depend on the number of threads: a row's sum over other rows in row
 *	  order, sums over all rows by fixed blocks of KMD_BLOCK rows, added in
 *	  block order.  Same rows, same seed: same medoids, any thread count.
 *
 * Methods:
 *
 *	- KMD_ALTERNATE (Park and Jun's alternating, or "Voronoi iteration",
 *	  method): assign every row to its nearest medoid; then in every cluster
 *	  score each member by its sum of distances to the other members and make
 *	  the member with the lowest sum (ties to the lowest row) the medoid.
 *	  Repeat until no medoid changes or max_iter rounds.  A cluster whose
 *	  members did not change keeps its medoid without being scored again.
 *	- KMD_FASTERPAM (Schubert and Rousseeuw's FasterPAM): from the seeded
 *	  medoids, visit the rows in index order, cyclically; for each row that is
 *	  not a medoid, compute the change of cost of swapping it with each medoid
 *	  at once in one pass over the rows (from each row's nearest and second
 *	  nearest medoid and the "removal loss" of each medoid), and make the best
 *	  swap at once when it lowers the cost.  Stop when a full round of the
 *	  rows brings no swap, or after max_iter rounds.  The visiting order is
 *	  the row order: another order may end in another local optimum.
 *
 * Where a GPU engine plugs in: the alternating method is a loop of two
 * steps, the assignment (n x k distances) and the score (sum over clusters
 * of size^2 distances), driven by kmd_alternate() (kmedoids_alternate.c)
 * through the kmd_steps table below.  The CPU engine's steps run on its
 * thread team; a GPU engine implements the same two functions with device
 * kernels (the score's work split by cluster cost, size^2: small clusters
 * batched into one launch, large ones cut into row ranges, each member's
 * sum taken over the other members in row order as here) and calls
 * kmd_alternate() with its own table, so that seeding, the loop and every
 * decision stay shared and the results stay bit for bit those of the CPU.
 * The CUDA engine does this (kernels/medoids/, kernels/driver/kmedoids.cu):
 * the SQL layer seeds with the CPU engine's seed(), then runs
 * kmd_alternate() on the CUDA engine's steps.
 */
#ifndef KMEDOIDS_ENGINE_H
#define KMEDOIDS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kmeans_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or the kmd_engine table changes. */
#define KMD_ENGINE_ABI 2

/* Rows per block of the fixed-order sums over all rows. */
#define KMD_BLOCK 2048

typedef enum kmd_metric
{
	KMD_METRIC_L2 = 0,			/* Euclidean distance */
	KMD_METRIC_SQEUCLIDEAN = 1, /* squared Euclidean distance */
	KMD_METRIC_L1 = 2,			/* Manhattan distance */
	KMD_METRIC_COSINE = 3,		/* 1 - cos */
	KMD_METRIC_SQFD = 4			/* signature quadratic form distance */
} kmd_metric;

typedef enum kmd_method
{
	KMD_ALTERNATE = 0,
	KMD_FASTERPAM = 1
} kmd_method;

/*
 * The rows.  Dense metrics: every row has d values.  sqfd: row i is a
 * signature of nfeat[i] features of d floats each (the weight, then d - 1
 * coordinates), stored one after another.  Engines never modify the rows.
 */
typedef struct kmd_data
{
	int64_t		n;
	int			d;
	const float *const *rows;	/* n pointers */
	const int32_t *nfeat;		/* sqfd: n feature counts (>= 1); else NULL */
} kmd_data;

typedef struct kmd_params
{
	int			k;				/* 1 <= k <= n */
	kmd_metric	metric;
	kmd_method	method;
	int			max_iter;		/* >= 1: rounds (alternate) or passes (fasterpam) */
	km_init		init;			/* k-means++, random, afk-mc2 or explicit */
	const int64_t *init_medoids;	/* KM_INIT_EXPLICIT: k distinct row indices */
	uint64_t	seed;
	double		alpha;			/* sqfd: similarity exp(-alpha |c - e|^2), > 0 */
	int			chain_length;	/* afk-mc2: Markov chain length, >= 1 */
} kmd_params;

/* Output of a fit; the caller allocates every array (labels may be NULL). */
typedef struct kmd_result
{
	int64_t    *medoids;		/* k row indices, by cluster */
	int64_t    *sizes;			/* k */
	double	   *cluster_cost;	/* k: sum of the members' distances */
	int32_t    *labels;			/* n, or NULL */
	double		cost;			/* sum of every row's distance to its medoid */
	int			iterations;		/* rounds or passes */
	int			converged;		/* stopped before max_iter */
	int64_t		swaps;			/* fasterpam: swaps made; alternate: medoid changes */
} kmd_result;

/*
 * The two steps of the alternating method (see the file header).  ctx is
 * the implementation's; medoids are row indices of the data the steps were
 * built for.
 */
typedef struct kmd_steps
{
	void	   *ctx;

	/*
	 * Every row's nearest medoid (labels) and its distance (dist), ties to the
	 * lowest cluster id.
	 */
	km_status	(*assign) (void *ctx, const int64_t *medoids, int k,
						   int32_t *labels, double *dist);

	/*
	 * For every cluster c with todo[c] set: members[offsets[c] ..
	 * offsets[c + 1]) are its rows in increasing order; sums[p] becomes the
	 * sum, in member order, of the distances from members[p] to every other
	 * member of its cluster.
	 */
	km_status	(*score) (void *ctx, const int64_t *members, const int64_t *offsets,
						  const char *todo, int k, double *sums);
} kmd_steps;

/*
 * Progress goes through hooks->report as km_progress: KM_PHASE_SEED while
 * seeding, KM_PHASE_ITERATE after every round or pass (inertia = cost;
 * alternate: moved = fraction of rows whose label changed, relocated =
 * medoids changed; fasterpam: moved = -1, relocated = swaps of the pass),
 * KM_PHASE_FINISH at the end.
 */
typedef struct kmd_engine
{
	int			abi;			/* KMD_ENGINE_ABI */
	const char *name;			/* "cpu" */

	/* Host bytes the engine will ask of hooks->alloc for such a fit. */
	size_t		(*fit_workspace) (int64_t n, int d, const kmd_params *params,
								  int n_threads);

	km_status	(*fit) (const kmd_data *data, const kmd_params *params,
						const km_hooks *hooks, kmd_result *result, km_error *error);

	/*
	 * Nearest of the k medoids (their own rows, not necessarily in data) for
	 * every row, ties to the lowest cluster id, and the distance.
	 */
	km_status	(*assign) (const kmd_data *data, const kmd_data *medoids,
						   kmd_metric metric, double alpha, int32_t *labels,
						   double *distances, const km_hooks *hooks, km_error *error);

	/*
	 * Silhouette of labelled rows (labels in [0, k)), exactly: for row i, a =
	 * mean distance to the other rows of its cluster, b = the lowest mean
	 * distance to the rows of another cluster, s_i = (b - a) / max(a, b), 0
	 * when its cluster has one row or max(a, b) is 0; *mean is the mean of
	 * s_i in row order.  Needs at least two clusters with rows.
	 */
	km_status	(*silhouette) (const kmd_data *data, const int32_t *labels, int k,
							   kmd_metric metric, double alpha, double *mean,
							   const km_hooks *hooks, km_error *error);

	/*
	 * The k start medoids (row indices) fit would start from, with the same
	 * checks, progress (KM_PHASE_PREPARE, KM_PHASE_SEED) and memory
	 * (fit_workspace bounds it): an engine that runs the alternating method
	 * with steps of its own seeds here, then calls kmd_alternate().
	 */
	km_status	(*seed) (const kmd_data *data, const kmd_params *params,
						 const km_hooks *hooks, int64_t *medoids, km_error *error);
} kmd_engine;

/* The CPU engine. */
extern const kmd_engine kmd_cpu_engine;

/*
 * The alternating method on any steps: seeding and every decision on the
 * host, the two steps by the table.  The CPU engine's fit calls it with its
 * own steps.
 */
extern km_status kmd_alternate(const kmd_steps *steps, const kmd_data *data,
							   const kmd_params *params, const km_hooks *hooks,
							   const int64_t *seeds, kmd_result *result,
							   km_error *error);

#ifdef __cplusplus
}
#endif

#endif							/* KMEDOIDS_ENGINE_H */
