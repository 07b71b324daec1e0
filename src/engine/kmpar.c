/*
 * kmpar.c
 *	  k-means|| seeding: the rounds, and weighted k-means++ on the
 *	  candidates (see km_kmpar.h).
 *
 * This part never sees a row: it asks km_kmpar_ops for keys, folds and
 * weights, and works on the candidates, a few thousand at most, in one
 * thread and in a fixed order, so that every caller with the same answers
 * gets the same centroids.
 */
#include "km_kmpar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "km_exact.h"
#include "km_hash.h"
#include "km_step.h"

/* k-means++ trials per step on the candidates, as the CPU engine's k-means++ */
#define KM_KMPAR_MAX_TRIALS 32

static void *
km_kmpar_alloc(const km_hooks *hooks, size_t size)
{
	if (size == 0)
		size = 1;
	if (hooks != NULL && hooks->alloc != NULL)
		return hooks->alloc(hooks->ctx, size);
	return malloc(size);
}

static void
km_kmpar_free(const km_hooks *hooks, void *p)
{
	if (p == NULL)
		return;
	if (hooks != NULL && hooks->alloc != NULL)
	{
		if (hooks->free != NULL)
			hooks->free(hooks->ctx, p);
	}
	else
		free(p);
}

static km_status
km_kmpar_fail(km_error *error, km_status status, const char *message)
{
	if (error != NULL)
	{
		error->status = status;
		strncpy(error->message, message, sizeof(error->message) - 1);
		error->message[sizeof(error->message) - 1] = '\0';
	}
	return status;
}

/* Progress once the centroids are chosen; nonzero means stop. */
static int
km_kmpar_report(const km_hooks *hooks, int run, int done, int total)
{
	km_progress p;

	if (hooks == NULL || hooks->report == NULL)
		return 0;
	memset(&p, 0, sizeof(p));
	p.phase = KM_PHASE_SEED;
	p.run = run;
	p.done = done;
	p.total = total;
	return hooks->report(hooks->ctx, &p);
}

/*
 * Greedy weighted k-means++ over the ncand candidates (unit rows for
 * cosine, with their norms in cn): the first centroid is the candidate
 * with the smallest key under its weight, then each step draws up to L
 * trials by their keys under weight * D2 and keeps the one that leaves
 * the smallest potential (sum of weight * min(D2, cost), in candidate
 * order), ties to the earlier trial.  When no candidate is left at a
 * positive distance, the rest repeat the first (the fit re-seeds them).
 */
static km_status
km_kmpar_choose(const float *u, const double *cn, const uint64_t *hash,
				const double *wt, int ncand, int d, int k, int cosine,
				uint64_t seed, int run, double *d2, double *trialcost,
				float *centroids, const km_hooks *hooks, km_error *error)
{
	const int	L = 2 + (int) log((double) k);
	int			trial[KM_KMPAR_MAX_TRIALS];
	double		tkey[KM_KMPAR_MAX_TRIALS];
	int			first = -1;
	double		best_key = INFINITY;
	uint64_t	stream = km_stream(seed, run, KM_KMPAR_ROUNDS + 1);

	for (int c = 0; c < ncand; c++)
	{
		double		key = km_sample_key(hash[c], stream, wt[c]);

		if (first < 0 || key < best_key)
		{
			first = c;
			best_key = key;
		}
	}
	memcpy(centroids, u + (size_t) first * d, sizeof(float) * d);
	for (int c = 0; c < ncand; c++)
		d2[c] = km_exact_cost(u + (size_t) c * d, u + (size_t) first * d, cn[first], d, cosine);

	for (int s = 1; s < k; s++)
	{
		int			ntrial = 0;
		int			best = -1;
		double		best_pot = 0.0;

		if (hooks != NULL && hooks->poll != NULL && hooks->poll(hooks->ctx))
			return km_kmpar_fail(error, KM_ERR_CANCELLED, "canceled");
		stream = km_stream(seed, run, KM_KMPAR_ROUNDS + 1 + s);

		/* the L smallest keys under weight * D2, sorted (insertion: L is small) */
		for (int c = 0; c < ncand; c++)
		{
			double		key = km_sample_key(hash[c], stream, wt[c] * d2[c]);
			int			at;

			if (!(key < INFINITY))
				continue;
			if (ntrial == L && !(key < tkey[L - 1]))
				continue;
			at = ntrial < L ? ntrial++ : L - 1;
			while (at > 0 && key < tkey[at - 1])
			{
				tkey[at] = tkey[at - 1];
				trial[at] = trial[at - 1];
				at--;
			}
			tkey[at] = key;
			trial[at] = c;
		}
		if (ntrial == 0)
		{
			/* every candidate sits on a centroid already */
			memcpy(centroids + (size_t) s * d, centroids, sizeof(float) * d);
			continue;
		}

		for (int t = 0; t < ntrial; t++)
		{
			const float *ct = u + (size_t) trial[t] * d;
			double	   *tc = trialcost + (size_t) t * ncand;
			double		pot = 0.0;

			for (int c = 0; c < ncand; c++)
			{
				double		cost = km_exact_cost(u + (size_t) c * d, ct, cn[trial[t]], d, cosine);

				tc[c] = cost;
				pot += wt[c] * (cost < d2[c] ? cost : d2[c]);
			}
			if (best < 0 || pot < best_pot)
			{
				best = t;
				best_pot = pot;
			}
		}
		memcpy(centroids + (size_t) s * d, u + (size_t) trial[best] * d, sizeof(float) * d);
		for (int c = 0; c < ncand; c++)
		{
			double		cost = trialcost[(size_t) best * ncand + c];

			if (cost < d2[c])
				d2[c] = cost;
		}
	}
	return KM_OK;
}

/*
 * k-means|| (km_kmpar.h): the rounds through ops, then the candidates'
 * weights and weighted k-means++ on them.
 */
km_status
km_kmpar_run(const km_kmpar_ops *ops, int d, int k, km_metric metric,
			 uint64_t seed, int run, const km_hooks *hooks, float *centroids,
			 km_error *error)
{
	const int	cosine = metric == KM_METRIC_COSINE;
	const int64_t cap64 = km_kmpar_max_candidates(k);
	const int	ell = 2 * k;
	const int	L = 2 + (int) log((double) k);
	int			cap;
	int			ncand = 0;
	float	   *x = NULL;
	float	   *u = NULL;
	double	   *key = NULL;
	uint64_t   *hash = NULL;
	float	   *w = NULL;
	double	   *wt = NULL;
	double	   *cn = NULL;
	double	   *d2 = NULL;
	double	   *trialcost = NULL;
	km_status	status = KM_OK;
	int			nout = 0;

	if (k < 1 || d < 1 || cap64 > (int64_t) 1 << 30 ||
		(double) cap64 * d > 2e9 || L > KM_KMPAR_MAX_TRIALS)
		return km_kmpar_fail(error, KM_ERR_INVALID, "k-means|| cannot seed this many centroids");
	cap = (int) cap64;
	x = km_kmpar_alloc(hooks, sizeof(float) * (size_t) cap * d);
	u = km_kmpar_alloc(hooks, sizeof(float) * (size_t) cap * d);
	key = km_kmpar_alloc(hooks, sizeof(double) * (size_t) cap);
	hash = km_kmpar_alloc(hooks, sizeof(uint64_t) * (size_t) cap);
	w = km_kmpar_alloc(hooks, sizeof(float) * (size_t) cap);
	wt = km_kmpar_alloc(hooks, sizeof(double) * (size_t) cap);
	cn = km_kmpar_alloc(hooks, sizeof(double) * (size_t) cap);
	d2 = km_kmpar_alloc(hooks, sizeof(double) * (size_t) cap);
	trialcost = km_kmpar_alloc(hooks, sizeof(double) * (size_t) cap * L);
	if (!x || !u || !key || !hash || !w || !wt || !cn || !d2 || !trialcost)
	{
		status = km_kmpar_fail(error, KM_ERR_NOMEM, "out of memory");
		goto done;
	}

	/* the first candidate, then the rounds */
	status = ops->keys(ops->ctx, km_stream(seed, run, 0), 0, 1, key, hash, w, x, &nout, error);
	if (status != KM_OK)
		goto done;
	if (nout == 0)
	{
		status = km_kmpar_fail(error, KM_ERR_INVALID, "total weight is zero");
		goto done;
	}
	ncand = 1;
	status = ops->fold(ops->ctx, x, 0, 1, error);
	for (int r = 1; r <= KM_KMPAR_ROUNDS && status == KM_OK; r++)
	{
		status = ops->keys(ops->ctx, km_stream(seed, run, r), 1, ell,
						   key + ncand, hash + ncand, w + ncand, x + (size_t) ncand * d,
						   &nout, error);
		if (status != KM_OK || nout == 0)
			break;				/* no row is left away from every candidate */
		status = ops->fold(ops->ctx, x, ncand, nout, error);
		ncand += nout;
	}
	if (status == KM_OK)
		status = ops->weights(ops->ctx, ncand, wt, error);
	if (status != KM_OK)
		goto done;

	/* the candidates as centroids: the rows, or their unit vectors */
	for (int c = 0; c < ncand; c++)
	{
		km_centroid_row(x + (size_t) c * d, d, cosine, u + (size_t) c * d);
		cn[c] = cosine ? km_exact_norm(u + (size_t) c * d, d) : 0.0;
	}
	status = km_kmpar_choose(u, cn, hash, wt, ncand, d, k, cosine, seed, run, d2,
							 trialcost, centroids, hooks, error);
	if (status == KM_OK && km_kmpar_report(hooks, run, k, k))
		status = km_kmpar_fail(error, KM_ERR_CANCELLED, "canceled");

done:
	km_kmpar_free(hooks, trialcost);
	km_kmpar_free(hooks, d2);
	km_kmpar_free(hooks, cn);
	km_kmpar_free(hooks, wt);
	km_kmpar_free(hooks, w);
	km_kmpar_free(hooks, hash);
	km_kmpar_free(hooks, key);
	km_kmpar_free(hooks, u);
	km_kmpar_free(hooks, x);
	return status;
}
