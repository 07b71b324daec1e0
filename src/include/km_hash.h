/*
 * km_hash.h
 *	  Random choices that do not depend on row order.
 *
 * Seeding picks rows by per-row keys: each row gets a 64-bit hash of its own
 * values and weight, and every draw for that row is a function of that hash,
 * the seed, the run and the step.  Weighted sampling then takes the rows with
 * the smallest E / a, where E = -ln U is an exponential variate from the
 * row's uniform U and a is the row's sampling weight (w for random init,
 * w * D^2 for k-means++): the row with the smallest key is drawn with
 * probability a / sum(a), and the m smallest form a weighted sample without
 * replacement (Efraimidis and Spirakis).  The same rows in any order, split
 * over any number of parallel workers, yield the same choices.
 */
#ifndef KM_HASH_H
#define KM_HASH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "km_hd.h"

/* splitmix64's finaliser: a bijective 64-bit mixer. */
KM_HD uint64_t
km_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

KM_HD uint32_t
km_float_bits(float f)
{
	uint32_t	b;

	memcpy(&b, &f, sizeof(b));
	return b;
}

/* Hash of a row's values (d floats) and its weight. */
KM_HD uint64_t
km_row_hash(const float *x, int d, float w)
{
	uint64_t	h = 0x9e3779b97f4a7c15ULL ^ (uint64_t) d;
	int			i = 0;

	/* two values per step: half the dependent multiplies of one at a time */
	for (; i + 1 < d; i += 2)
	{
		uint64_t	pair = ((uint64_t) km_float_bits(x[i + 1]) << 32) |
			km_float_bits(x[i]);

		h = (h ^ pair) * 0xff51afd7ed558ccdULL;
		h ^= h >> 29;
	}
	if (i < d)
	{
		h = (h ^ km_float_bits(x[i])) * 0xff51afd7ed558ccdULL;
		h ^= h >> 29;
	}
	h ^= (uint64_t) km_float_bits(w) << 17;
	return km_mix64(h);
}

/* The stream of draws for one run and step. */
KM_HD uint64_t
km_stream(uint64_t seed, int run, int64_t step)
{
	return km_mix64(km_mix64(seed ^ 0x5851f42d4c957f2dULL) +
					((uint64_t) run << 40) + (uint64_t) step);
}

/* A uniform draw in (0, 1) for a row in a stream. */
KM_HD double
km_uniform(uint64_t row_hash, uint64_t stream)
{
	uint64_t	z = km_mix64(row_hash ^ stream);

	return ((double) (z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/*
 * Sampling key: smaller is drawn first.  weight <= 0 (or NaN) never wins:
 * the key is +inf.
 */
KM_HD double
km_sample_key(uint64_t row_hash, uint64_t stream, double weight)
{
	if (!(weight > 0.0))
		return INFINITY;
	return -log(km_uniform(row_hash, stream)) / weight;
}

#endif							/* KM_HASH_H */
