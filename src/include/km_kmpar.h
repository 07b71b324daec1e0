/*
 * km_kmpar.h
 *	  k-means|| seeding (Bahmani, Moseley, Vattani, Kumar, Vassilvitskii,
 *	  "Scalable k-means++", VLDB 2012), for one server or many.
 *
 * The algorithm, for run r of a fit with seed s:
 *
 *	1. The first candidate: the row with the smallest sampling key under its
 *	   weight w in stream (s, r, 0) (km_hash.h).
 *	2. KM_KMPAR_ROUNDS rounds: every row knows its cost to the nearest
 *	   candidate so far (exact, km_exact.h: D2); round i adds the ell = 2k
 *	   rows with the smallest keys under w * D2 in stream (s, r, i), a
 *	   weighted sample without replacement (Efraimidis and Spirakis) of the
 *	   oversampled D2 distribution the paper draws, of fixed size.
 *	3. Every candidate is weighted by the weight of the rows nearest to it
 *	   (exact sums, km_xsum.h), and greedy weighted k-means++ on the
 *	   candidates (2 + ln k trials per step, as the engine's k-means++) picks
 *	   the k start centroids.
 *
 * Steps 1 to 3 touch the rows only through three operations, km_kmpar_ops:
 * the smallest keys, folding new candidates into D2, and the candidates'
 * weights.  Each is a function of the set of rows alone, whatever their
 * order or split: keys come from each row's hash, ties go to the smaller
 * hash, costs and weights are exact.  So the CPU engine (one part, all the
 * rows) and kmeans_fit_sharded (one part per server, merged by the
 * coordinator) run km_kmpar_run with their own ops and get the same
 * centroids, bit for bit.
 *
 * Plain C, no PostgreSQL headers.
 */
#ifndef KM_KMPAR_H
#define KM_KMPAR_H

#include <stdint.h>

#include "kmeans_engine.h"
#include "km_xsum.h"

#define KM_KMPAR_ROUNDS 5

/* Candidates a run can gather: the first, then ell = 2k per round. */
static inline int64_t
km_kmpar_max_candidates(int k)
{
	return 1 + (int64_t) KM_KMPAR_ROUNDS * 2 * k;
}

/* A row drawn by its key. */
typedef struct km_kmpar_draw
{
	double		key;
	uint64_t	hash;
	int64_t		row;			/* index in the part's data */
	float		w;
} km_kmpar_draw;

/* Whether a is drawn before b: the smaller key, then the smaller hash. */
static inline int
km_kmpar_before(const km_kmpar_draw *a, const km_kmpar_draw *b)
{
	if (a->key != b->key)
		return a->key < b->key;
	return a->hash < b->hash;
}

typedef struct km_kmpar_ops
{
	void	   *ctx;

	/*
	 * The m rows of all parts with the smallest keys in stream, sorted
	 * (km_kmpar_before): under the row's weight (use_cost = 0) or its weight
	 * times its cost to the nearest candidate (use_cost = 1; rows at cost 0
	 * are never drawn).  Writes key, hash and weight of each, and its d
	 * values to x; *nout <= m rows.
	 */
	km_status	(*keys) (void *ctx, uint64_t stream, int use_cost, int m,
						 double *key, uint64_t *hash, float *w, float *x,
						 int *nout, km_error *error);

	/* Candidates first .. first + count - 1 (of cands, d values each) join. */
	km_status	(*fold) (void *ctx, const float *cands, int first, int count,
						 km_error *error);

	/*
	 * Every candidate's weight: the exact sum of the weights of the rows
	 * whose nearest candidate it is (ties to the lowest candidate), rounded.
	 */
	km_status	(*weights) (void *ctx, int ncand, double *out, km_error *error);
} km_kmpar_ops;

/*
 * Run k-means|| with ops: the k start centroids (k * d) of run number run.
 * Memory for the candidates comes from hooks (NULL: malloc); hooks->report
 * hears when the centroids are chosen, hooks->poll is asked between steps.
 */
extern km_status km_kmpar_run(const km_kmpar_ops *ops, int d, int k, km_metric metric,
							  uint64_t seed, int run, const km_hooks *hooks,
							  float *centroids, km_error *error);

/*
 * The CPU engine's three operations on one part's rows (the engine's own
 * k-means|| and the shard side of kmeans_fit_sharded call them).
 *
 * keys: this part's m smallest keys, sorted; hashes are the rows'
 * km_row_hash values, cost (NULL for use_cost = 0) their costs.
 * fold: candidates (count of them, numbered from first) folded into cost
 * and label (cost +inf and label -1 before the first fold).
 * weights: each candidate's exact weight, the sum of the weights of the
 * rows labelled with it, cut in the levels *lv of the weights' bounds
 * (km_xsum.h): lev holds KM_XLEV_MAX x ncand doubles, zeroed by the
 * caller; candidate c's weight is the exact sum of lev[l * ncand + c].
 * workspace: the bytes k-means|| asks of hooks->alloc on top of a fit's
 * own (km_engine.fit_workspace).
 */
extern km_status km_cpu_kmpar_keys(const km_data *data, const uint64_t *hashes,
								   const double *cost, uint64_t stream, int m,
								   const km_hooks *hooks, km_kmpar_draw *out,
								   int *nout, km_error *error);
extern km_status km_cpu_kmpar_fold(const km_data *data, km_metric metric,
								   const float *cands, int first, int count,
								   double *cost, int32_t *label,
								   const km_hooks *hooks, km_error *error);
extern void km_cpu_kmpar_weights(const km_data *data, const int32_t *label, int ncand,
								 double *lev, km_xlevels *lv);
extern size_t km_cpu_kmpar_workspace(int64_t n, int d, int k, int n_threads);

#endif							/* KM_KMPAR_H */
