/*
 * kmeans_engine.h
 *	  The one interface between a k-means engine and whoever drives it.
 *
 * Plain C, no PostgreSQL headers: the SQL layer (the .c files of src/),
 * the standalone benchmark (test/bench) and the engine tests (test/engine)
 * all drive an engine through this header.  The CPU engine (src/engine/cpu_*.c) implements
 * it inside kmeans_gpu.so; the CUDA engine (kernels/) implements the same
 * table of functions in its own shared object, found at run time.
 *
 * Semantics every engine shares (so that engines agree with each other):
 *
 *	- Labels are exact.  A row goes to the centroid that is nearest when the
 *	  distance is evaluated in double precision by km_exact.h, ties to the
 *	  lowest cluster id.  Engines may use a fast float32 filter (the GEMM
 *	  expansion |x|^2 - 2 x.c + |c|^2) but must re-check a row with km_exact.h
 *	  whenever the filter's two best candidates are closer than its rounding
 *	  bound (km_filter_slack).  So CPU and GPU give the same labels for the same
 *	  centroids, and kmeans_assign agrees with every batch path.
 *	- Lloyd: each iteration assigns every row, counts rows whose label changed,
 *	  then moves every centroid to the weighted mean of its rows: the exact
 *	  sums of the rows and of their weights, each rounded once to double
 *	  (km_xsum.h), divided in double.  Exact sums make the centroids the same
 *	  for any order or split of the rows, across threads and across servers.
 *	  Stop when no row moved (centroids are then already the means),
 *	  when moved/n <= tol, or after max_iter iterations; unless no row moved,
 *	  a final assignment pass makes labels, sizes and inertia match the
 *	  centroids returned.
 *	- Empty clusters after an assignment are re-seeded with the rows farthest
 *	  from their centroid (exact distance, largest first, ties to the row
 *	  with the smaller km_row_hash, so that the choice does not depend on
 *	  where a row sits; rows with equal hashes are equal rows, either will
 *	  do): the first empty cluster gets the farthest row, and so on.
 *	  The row's weighted contribution moves from its old cluster to the new
 *	  one.  No centroid is ever NaN: a cluster left with no weight keeps its
 *	  previous position.
 *	- Cosine (spherical k-means): rows and centroids are normalised
 *	  (km_normalize_row); centroids are the normalised weighted mean.
 *	  Distance is 1 - cos; inertia is the weighted sum of 1 - cos.
 *	  L2: distance is the Euclidean distance; inertia the weighted sum of
 *	  squared distances.
 *	- Seeding is independent of row order: every random choice is made by
 *	  per-row keys derived from the row's contents (km_hash.h), so the same
 *	  rows in any order with the same seed give the same model.
 *
 * Threads: an engine may run worker threads, but every callback in km_hooks
 * is made from the calling thread, and the engine's threads block every
 * signal, so signals reach the caller's thread only.  Callbacks must return
 * normally (no longjmp): a caller that can raise errors catches them inside
 * the callback and answers "stop".  Every thread is joined and every
 * allocation freed before a call returns, whatever it returns.
 */
#ifndef KMEANS_ENGINE_H
#define KMEANS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or the km_engine table changes. */
#define KM_ENGINE_ABI 2

typedef enum km_status
{
	KM_OK = 0,
	KM_ERR_INVALID,				/* parameters the caller should have rejected */
	KM_ERR_NOMEM,				/* host allocation failed */
	KM_ERR_CANCELLED,			/* km_hooks.poll asked to stop */
	KM_ERR_DEVICE,				/* GPU error; the device is still usable */
	KM_ERR_DEVICE_FATAL,		/* sticky GPU error: do not use the device again */
	KM_ERR_DEVICE_NOMEM,		/* the work does not fit in GPU memory */
	KM_ERR_UNAVAILABLE			/* this engine cannot run here (no device) */
} km_status;

typedef struct km_error
{
	km_status	status;
	char		message[256];
} km_error;

typedef enum km_metric
{
	KM_METRIC_L2 = 0,
	KM_METRIC_COSINE = 1
} km_metric;

typedef enum km_init
{
	KM_INIT_KMEANSPP = 0,		/* greedy k-means++ (2 + ln k candidates) */
	KM_INIT_RANDOM = 1,			/* k distinct rows, weighted */
	KM_INIT_EXPLICIT = 2,		/* km_params.init_centroids */
	KM_INIT_KMEANS_PARALLEL = 3,	/* k-means|| (Bahmani et al. 2012), CPU engine */
	KM_INIT_AFKMC2 = 4			/* assumption-free k-MC^2 (km_afkmc2.h), CPU engine */
} km_init;

/*
 * Input rows, stored as chunks so that a caller can fill memory as a scan
 * goes and combine partial inputs without copying.  Rows are row-major
 * float32, d values each.  Engines never modify the rows.
 */
typedef struct km_chunk
{
	const float *x;				/* n * d values */
	const float *w;				/* n weights (finite, >= 0), or NULL for 1 */
	int64_t		n;
} km_chunk;

typedef struct km_data
{
	int			d;
	int			nchunks;
	const km_chunk *chunks;
	int64_t		n;				/* sum of chunks[i].n */
} km_data;

typedef struct km_params
{
	int			k;				/* 1 <= k <= n */
	int			max_iter;		/* >= 1 */
	double		tol;			/* stop when moved rows / n <= tol; 0: until none move */
	km_init		init;
	const float *init_centroids;	/* k * d, finite, for KM_INIT_EXPLICIT */
	km_metric	metric;
	uint64_t	seed;
	int			n_init;			/* >= 1: best of n_init runs by inertia */
	int			chain_length;	/* KM_INIT_AFKMC2: Markov chain length, >= 1 */
} km_params;

typedef enum km_phase
{
	KM_PHASE_PREPARE = 0,		/* one pass over the rows before seeding */
	KM_PHASE_SEED,				/* done = centroids chosen so far, total = k */
	KM_PHASE_ITERATE,			/* one Lloyd iteration finished */
	KM_PHASE_FINISH				/* final assignment pass */
} km_phase;

typedef struct km_progress
{
	km_phase	phase;
	int			run;			/* 0-based, < n_init */
	int			iteration;		/* 1-based, KM_PHASE_ITERATE */
	int64_t		done;
	int64_t		total;
	/*
	 * ITERATE: objective of this iteration's assignment.  SEED, from
	 * k-means++: the potential of the centroids chosen so far, the sum of
	 * w D2 over the rows as the engine's sampling adds it up (cosine: D2
	 * between the normalised rows); 0 before it is known (k = 1, the first
	 * centroid alone) and from the other seedings.  Each engine rounds its
	 * distances its own way (the GPU's sum is an integer, seed_pp.h; the
	 * CPU engine's a double sum per thread, so its last bits may change
	 * with the number of threads).
	 */
	double		inertia;
	double		moved;			/* ITERATE: fraction of rows that changed cluster */
	int			relocated;		/* ITERATE: empty clusters re-seeded */
	double		elapsed;		/* seconds since the call began */
} km_progress;

typedef struct km_hooks
{
	void	   *ctx;

	/*
	 * Host memory for everything the engine keeps (NULL: malloc/free).  Called
	 * from the calling thread only, never while worker threads run.  Returns
	 * NULL on failure.
	 */
	void	   *(*alloc) (void *ctx, size_t size);
	void		(*free) (void *ctx, void *ptr);

	/*
	 * Cheap check made often (between tiles, even while worker threads run):
	 * nonzero means stop now; the engine then frees what it holds and returns
	 * KM_ERR_CANCELLED.  NULL: never stop.
	 */
	int			(*poll) (void *ctx);

	/*
	 * Progress, once per iteration and at most about twice a second while
	 * seeding, while no worker thread is busy.  Nonzero means stop, as for
	 * poll.  NULL: no reports.
	 */
	int			(*report) (void *ctx, const km_progress *progress);

	int			n_threads;		/* worker threads to use; <= 0 means 1 */
} km_hooks;

/*
 * Output of a fit.  The caller allocates every array; labels may be NULL.
 */
typedef struct km_result
{
	float	   *centroids;		/* k * d */
	int64_t    *sizes;			/* k: rows per cluster */
	double	   *cluster_inertia;	/* k */
	int32_t    *labels;			/* n, in data order, or NULL */
	double		inertia;
	int			iterations;		/* Lloyd iterations of the best run */
	int			converged;		/* best run stopped before max_iter */
	int			best_run;		/* 0-based */
	int			relocated;		/* empty clusters re-seeded in the best run */
} km_result;

/* A row the map step keeps for re-seeding empty clusters (km_partial.far). */
typedef struct km_far_row
{
	int64_t		row;			/* index in the call's data */
	double		cost;			/* exact cost to the centroid it was assigned */
	uint64_t	hash;			/* km_row_hash of the row and its weight */
	int32_t		label;
	float		w;
} km_far_row;

struct km_xstats;
struct km_xacc;

/*
 * The map step on its own: per-cluster sums for given centroids, added to
 * what the arrays already hold, so that partitions can be mapped separately
 * and their partials summed (parallel and distributed modes).
 *
 * In exact mode (stats given; the CPU engine) the call also writes sums that
 * merge exactly, so that partials of any split of the rows add up to what
 * one fit over all of them computes: xsums and xweights receive the sums
 * cut in the levels km_xlevels_make gives for stats and data->n (km_xsum.h:
 * the exact sum of a cell is the sum of its levels), xinertia receives the
 * exact per-cluster inertia, labels each row's cluster, and far, when some
 * cluster received no weight in this call, the m rows farthest from their
 * centroids (m = the number of such clusters), farthest first, ties to the
 * smaller hash: a cluster empty over all partials is empty in each, so
 * these rows are all a merge needs to re-seed as a fit would.
 */
typedef struct km_partial
{
	double	   *sums;			/* k * d: sum of w * row (cosine: normalised rows) */
	double	   *weights;		/* k: sum of w */
	int64_t    *counts;			/* k */
	double	   *inertia;		/* k */

	/* exact mode: inputs */
	const struct km_xstats *stats;	/* bounds on this call's terms, or NULL */
	/* exact mode: outputs (zeroed by the caller), each may be NULL */
	double	   *xsums;			/* levels x k x d */
	double	   *xweights;		/* levels x k */
	struct km_xacc *xinertia;	/* k */
	int32_t    *labels;			/* n */
	km_far_row *far;			/* room for k rows */
	int			nfar;			/* out: rows written to far */
} km_partial;

typedef struct km_engine
{
	int			abi;			/* KM_ENGINE_ABI */
	const char *name;			/* "cpu", "gpu" */

	/*
	 * Host bytes the engine will ask of hooks->alloc for such a fit.  NULL
	 * where nothing asks: the GPU engine's (KmFitMemory sizes CPU fits).
	 */
	size_t		(*fit_workspace) (int64_t n, int d, int k, int n_threads);

	km_status	(*fit) (const km_data *data, const km_params *params,
						const km_hooks *hooks, km_result *result, km_error *error);

	/* Nearest centroid (exact, as above) and its distance, for every row. */
	km_status	(*assign) (const km_data *data, const float *centroids, int k,
						   km_metric metric, int32_t *labels, double *distances,
						   const km_hooks *hooks, km_error *error);

	/* The map step: assignment folded into a km_partial. */
	km_status	(*map) (const km_data *data, const float *centroids, int k,
						km_metric metric, km_partial *partial,
						const km_hooks *hooks, km_error *error);

	/*
	 * The start centroids of run number run (0-based) of a fit with these
	 * params, k * d floats, as fit would seed them: a caller can seed on the
	 * host and fit elsewhere from explicit centroids.  NULL in an engine that
	 * leaves seeding to another (the GPU engine: the CPU engine's seed runs
	 * every init method).
	 */
	km_status	(*seed) (const km_data *data, const km_params *params, int run,
						 const km_hooks *hooks, float *centroids, km_error *error);
} km_engine;

/* The CPU engine, always present. */
extern const km_engine km_cpu_engine;

/*
 * Threads the CPU engine runs for a fit of n rows of d values into k
 * clusters when given n_threads: fewer when there are fewer tiles of rows,
 * and 1 below its parallel threshold (small fits are not worth waking
 * threads for).
 */
extern int	km_cpu_threads(int64_t n, int d, int k, int n_threads);

/*
 * One row at a time (kmeans_assign): centroids prepared once, then each row
 * labelled with the exact rule above, at the cost of its k * d
 * multiply-adds (src/engine/cpu_nearest.c).  km_nearest_prepare lays the
 * prepared model out in mem (km_nearest_size bytes) and keeps a pointer to
 * centroids.  km_nearest_row returns the nearest centroid and stores its
 * cost (l2: squared distance, cosine: 1 - cos), or returns -1 when metric
 * cosine meets a zero vector; it uses scratch space inside the prepared
 * model, so one prepared model serves one thread.
 */
typedef struct km_nearest km_nearest;

extern size_t km_nearest_size(int k, int d);
extern km_nearest *km_nearest_prepare(void *mem, const float *centroids, int k, int d,
									  km_metric metric);
extern int	km_nearest_row(km_nearest *nn, const float *x, double *cost);

/*
 * Host bytes the CPU engine's afk-mc2 seeding asks of hooks->alloc beyond
 * fit_workspace (cpu_afkmc2.c), for n rows of d values, k centroids.
 */
extern size_t km_afkmc2_bytes(int64_t n, int k, int chain_length, int n_threads, int d);

#ifdef __cplusplus
}
#endif

#endif							/* KMEANS_ENGINE_H */
