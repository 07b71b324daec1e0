/*
 * km_fixsum.h
 *	  Sums of non-negative doubles that do not depend on the order of the
 *	  terms, for the inertia a model reports.
 *
 * Floating-point addition is not associative, so a sum over rows changes in
 * its last bits when the rows arrive in another order (a parallel plan, a
 * different scan) or are split over another number of threads, and two fits
 * of the same rows with the same seed would then differ.  Here every term is
 * scaled by a power of two fixed before the pass, truncated to a 128-bit
 * integer and added as an integer: integer addition is exact, so the sum is
 * the same in any order.  The scale comes from a bound on every term and
 * the number of terms, leaving no room for overflow; a term far below the
 * bound loses its lowest bits and a term above it saturates the sum, both of
 * which km_fix_value checks (the caller then keeps its ordinary double sum).
 * Shared by host and device code.
 */
#ifndef KM_FIXSUM_H
#define KM_FIXSUM_H

#include <math.h>
#include <stdint.h>

#include "km_hd.h"

/* A 128-bit unsigned integer as two words. */
typedef struct km_fix
{
	uint64_t	hi;
	uint64_t	lo;
} km_fix;

/* A sum that reached this high word met a term past its bound. */
#define KM_FIX_SATURATED ((uint64_t) 1 << 62)

/* Terms are multiplied by 2^shift; shift == INT32_MIN means "not set". */
typedef struct km_fixscale
{
	int			shift;
} km_fixscale;

#define KM_FIX_UNSET INT32_MIN

/*
 * The scale for n terms each in [0, bound]: the sum stays below 2^124.
 */
KM_HD km_fixscale
km_fix_scale(double bound, int64_t n)
{
	km_fixscale s;
	int			e;
	int			headroom = 1;

	s.shift = KM_FIX_UNSET;
	if (!(bound > 0.0) || !isfinite(bound) || n < 1)
		return s;
	(void) frexp(bound, &e);	/* bound < 2^e */
	while (headroom < 63 && ((int64_t) 1 << headroom) <= n)
		headroom++;
	s.shift = 124 - headroom - e;
	return s;
}

/* acc += t; a saturated sum stays saturated. */
KM_HD void
km_fix_add(km_fix *acc, km_fix t)
{
	uint64_t	lo = acc->lo + t.lo;

	acc->hi += t.hi + (lo < t.lo);
	acc->lo = lo;
	if (acc->hi >= KM_FIX_SATURATED || t.hi >= KM_FIX_SATURATED)
		acc->hi = KM_FIX_SATURATED;
}

/* A term as an integer: floor(t * 2^shift), exactly, for t in [0, bound]. */
KM_HD km_fix
km_fix_term(double t, km_fixscale s)
{
	km_fix		f = {0, 0};
	double		v;
	double		hi;

	if (!(t > 0.0))
		return f;
	v = ldexp(t, s.shift);		/* < 2^124 when t is within the bound */
	if (!(v < 0x1p124))
	{
		/* past the bound: mark the sum, which km_fix_value then refuses */
		f.hi = KM_FIX_SATURATED;
		return f;
	}
	hi = floor(ldexp(v, -64));
	f.hi = (uint64_t) hi;
	/* v - hi * 2^64 is v's low part: exact in double */
	f.lo = (uint64_t) floor(v - ldexp(hi, 64));
	return f;
}

/*
 * The sum as a double.  Returns 0 (and leaves *out alone) when truncation
 * could have cost more than 1e-12 relative, that is when the terms were far
 * below the bound: the caller then keeps its ordinary double sum.
 */
KM_HD int
km_fix_value(km_fix acc, km_fixscale s, int64_t nterms, double *out)
{
	double		v;

	if (s.shift == KM_FIX_UNSET || acc.hi >= KM_FIX_SATURATED)
		return 0;
	v = ldexp((double) acc.hi, 64) + (double) acc.lo;
	/* each term lost less than one unit */
	if ((double) nterms > 1e-12 * v)
		return 0;
	*out = ldexp(v, -s.shift);
	return 1;
}

#endif							/* KM_FIXSUM_H */
