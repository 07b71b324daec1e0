/*
 * km_afkmc2.h
 *	  The random draws of assumption-free k-MC^2 seeding (Bachem, Lucic,
 *	  Hassani and Krause, "Fast and provably good seedings for k-means",
 *	  NIPS 2016), made independent of row order.
 *
 * AFK-MC^2 replaces each of k-means++'s passes over the rows by a short
 * Markov chain.  After the first centre c1, one pass computes every row's
 * D1(x) = distance to c1 and the proposal distribution
 *
 *	q(x) = 1/2 D1(x)^l / sum D1^l + 1/2 w(x) / sum w
 *
 * (l = 2 for k-means, 1 for k-medoids, whose objective is not squared;
 * with weights, D1(x)^l is w(x) D1(x)^l).  Each further centre is the end
 * of a chain of m proposals drawn from q: the chain moves from x to the
 * proposal y with probability min(1, w(y) D(y)^l q(x) / (w(x) D(x)^l
 * q(y))), D being the distance to the nearest centre chosen so far.
 *
 * The (k - 1) m proposals are drawn at once, i.i.d. from q, without
 * depending on the order or split of the rows (km_afkmc2.c): the rows are
 * put in the order of their hashes (km_hash.h: equal only for identical
 * rows, which are interchangeable), the two parts of q are summed in that
 * order, and each proposal is the row where a uniform of the seed's stream
 * falls.  The chains' acceptance draws come from the seed, the chain and the
 * step alone.
 */
#ifndef KM_AFKMC2_H
#define KM_AFKMC2_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "km_hash.h"

/* Default chain length: the value of the paper's experiments. */
#define KM_AFKMC2_CHAIN_LENGTH 200

/* Steps of km_stream for these draws: never a k-means++ step (< 2^31) of any run. */
#define KM_AFKMC2_STEP_PROPOSE	((int64_t) 1 << 39)
#define KM_AFKMC2_STEP_CHAIN	(((int64_t) 1 << 39) + 1)

/* What q is made of, for row `row`: which = 0: w D1^l; which = 1: w. */
typedef double (*km_afk_term) (void *ctx, int64_t row, int which);

#ifndef __CUDACC__
#pragma GCC visibility push(hidden)
extern size_t km_afkmc2_work_bytes(int64_t n);
extern void km_afkmc2_propose(int64_t n, const uint64_t *hashes, km_afk_term term,
							  void *ctx, int64_t M, uint64_t stream, int64_t *out,
							  double totals[2], void *work);
#pragma GCC visibility pop
#endif

/* The uniform that decides step j of chain i. */
KM_HD double
km_chain_uniform(uint64_t stream, int64_t chain, int64_t step)
{
	return km_uniform(km_mix64(((uint64_t) chain << 32) + (uint64_t) step), stream);
}

#endif							/* KM_AFKMC2_H */
