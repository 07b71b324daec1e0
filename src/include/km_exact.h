/*
 * km_exact.h
 *	  The exact distance that decides every label, shared by all engines.
 *
 * Every engine assigns rows with a fast float32 filter and settles close
 * calls here, in double precision, coordinate by coordinate in index order,
 * with no fused multiply-add.  Each step is one correctly rounded IEEE
 * operation, so the host compiler and nvcc produce the same bits, and the CPU
 * engine, the GPU engine and kmeans_assign agree on every label.  Files that
 * include this must be compiled with -ffp-contract=off (the Makefile does).
 *
 * "Cost" below is what inertia sums: the squared Euclidean distance for l2,
 * 1 - cos for cosine.  The distance users see is sqrt(cost) for l2 and the
 * cost itself for cosine.
 */
#ifndef KM_EXACT_H
#define KM_EXACT_H

#include <math.h>
#include <stdint.h>

#include "km_hd.h"

/* One rounding each, on both sides of the bus. */
KM_HD double
km_dadd(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dadd_rn(a, b);
#else
	return a + b;
#endif
}

KM_HD double
km_dmul(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dmul_rn(a, b);
#else
	return a * b;
#endif
}

KM_HD double
km_ddiv(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __ddiv_rn(a, b);
#else
	return a / b;
#endif
}

KM_HD double
km_dsqrt(double a)
{
#ifdef __CUDA_ARCH__
	return __dsqrt_rn(a);
#else
	return sqrt(a);
#endif
}

/* Squared Euclidean distance in double. */
KM_HD double
km_exact_sqdist(const float *x, const float *c, int d)
{
	double		s = 0.0;

	for (int i = 0; i < d; i++)
	{
		double		t = km_dadd((double) x[i], -(double) c[i]);

		s = km_dadd(s, km_dmul(t, t));
	}
	return s;
}

KM_HD double
km_exact_dot(const float *x, const float *c, int d)
{
	double		s = 0.0;

	for (int i = 0; i < d; i++)
		s = km_dadd(s, km_dmul((double) x[i], (double) c[i]));
	return s;
}

KM_HD double
km_exact_norm(const float *x, int d)
{
	return km_dsqrt(km_exact_dot(x, x, d));
}

/*
 * The unit vector the cosine metric clusters: out = x / |x|, each value
 * rounded to float.  Returns |x|; 0 (or not finite) means x cannot be
 * normalised and out is untouched.  out may equal x.
 */
KM_HD double
km_normalize_row(const float *x, float *out, int d)
{
	double		nrm = km_exact_norm(x, d);

	if (!(nrm > 0.0) || !isfinite(nrm))
		return 0.0;
	for (int i = 0; i < d; i++)
		out[i] = (float) km_ddiv((double) x[i], nrm);
	return nrm;
}

/*
 * Cost of row x against centroid c.  For cosine, x must already be
 * normalised and cnorm is km_exact_norm(c); for l2 cnorm is ignored.
 */
KM_HD double
km_exact_cost(const float *x, const float *c, double cnorm, int d, int cosine)
{
	if (cosine)
	{
		double		cost = km_dadd(1.0, -km_ddiv(km_exact_dot(x, c, d), cnorm));

		return cost > 0.0 ? cost : 0.0;
	}
	return km_exact_sqdist(x, c, d);
}

/*
 * Nearest of k centroids (row-major, k * d), ties to the lowest index.
 * cnorms: k centroid norms for cosine (NULL for l2).  Stores the cost.
 */
KM_HD int
km_exact_nearest(const float *x, const float *centroids, const double *cnorms,
				 int k, int d, int cosine, double *cost_out)
{
	int			best = 0;
	double		best_cost = 0.0;

	for (int j = 0; j < k; j++)
	{
		double		cost = km_exact_cost(x, centroids + (int64_t) j * d,
										 cosine ? cnorms[j] : 0.0, d, cosine);

		if (j == 0 || cost < best_cost)
		{
			best = j;
			best_cost = cost;
		}
	}
	*cost_out = best_cost;
	return best;
}

/* What users see as the distance for a cost. */
KM_HD double
km_cost_to_distance(double cost, int cosine)
{
	return cosine ? cost : km_dsqrt(cost);
}

/*
 * How far apart the float32 filter's best and second-best values must be for
 * the filter's winner to be the exact winner.
 *
 * The filter computes f_j = |c'_j|^2 - 2 x'.c'_j in float32, in any order,
 * where x' and c'_j are the row and centroids after centring (l2: minus the
 * same float vector) or normalisation (cosine), each rounded to float.  The
 * rounding error of f_j + |x'|^2 against the exact cost is at most
 * (gamma_{d+2} + 2u) (|x'| + |c'_j|)^2 with u = 2^-24 and gamma_m = m u /
 * (1 - m u): the dot product and norm bound, plus the centring rounding of
 * x' and c'_j.  A wrong winner needs both candidates off by that much, so a
 * gap above twice the bound for the largest |c'_j| is safe.  We take 2.5
 * times (d + 8) u (|x'| + cmax)^2, which also covers rounding in computing
 * this value and in the double evaluation.
 *
 * Every |f_j| is at most (|x'| + cmax)^2; when that could pass the float
 * range (2^128), a filter value may have overflowed to an infinity, so the
 * slack is +infinity: the row must be decided exactly.
 */
KM_HD float
km_filter_slack(int d, float xnorm, float cmax)
{
	float		r = xnorm + cmax;

	if (!(r < 0x1p63f))			/* r^2 >= 2^126 (or NaN) */
		return INFINITY;
	return 2.5f * (float) (d + 8) * 5.9604645e-8f * r * r;
}

/*
 * The same for the tensor-core screen (kernels/assign/screen.cu): how
 * far above the screen's best value another centroid's screened value must
 * lie for that centroid to be out of the running.
 *
 * The screen computes s_j = cn_j + sum_i tf32(x_i) tf32(-2 c_ji) for the
 * rows and centroids the float32 filter takes (dp columns, zero padding),
 * on tensor cores: every input rounded to TF32 (round to nearest, relative
 * error at most u = 2^-11), the products exact in float32, the sums in
 * float32 in the hardware's order and rounding (NVIDIA documents neither;
 * measured tensor cores truncate with few guard bits, at most 2^-23 of the
 * running magnitude per operation).  Against f_j = |c_j|^2 - 2 x.c_j:
 *		|s_j - f_j| <= E_j = 2^-24 |c_j|^2 + 2 (2u + u^2) |x| |c_j|
 *						+ dp 2^-22 (1 + u)^2 (|c_j|^2 + 2 |x| |c_j|)
 *						+ dp 2^-124 (|x| + |c_j| + 1)
 * (cn_j's rounding, the inputs' rounding by Cauchy-Schwarz, 2^-22 of the
 * magnitude per column for the sums: a step of eight columns may lose 2^-23
 * per addend, with room to spare; and what flushing subnormal inputs,
 * products and sums to zero may lose, 2^-126 each).  The exact winner j* has
 * s_j* <= f_j* + E <= f_b + E <= s_b + 2E for the screen's best b, with E
 * the bound at |c| = cmax; we take 2.5 E, which also covers rounding in
 * computing this value and the threshold.  On top of it, km_filter_slack:
 * what rounding the rows and centroids to the filter's operands does to the
 * exact costs, and the float32 recomputation of a row settled fully.  So
 * this is the one slack a screened row needs, whichever way it is settled.
 * +infinity when (|x| + cmax)^2 could leave the float range: the row is
 * decided exactly.
 */
KM_HD float
km_screen_bound(int dp, float xnorm, float cmax)
{
	const float u = 0x1p-11f;
	const float xc = xnorm * cmax,
				cc = cmax * cmax;

	return 0x1p-24f * cc + 2.0f * (2.0f * u + u * u) * xc +
		(float) dp * 0x1p-22f * (1.0f + 2.5f * u) * (cc + 2.0f * xc) +
		(float) dp * 0x1p-124f * (xnorm + cmax + 1.0f);
}

KM_HD float
km_screen_slack(int d, int dp, float xnorm, float cmax)
{
	if (!(xnorm + cmax < 0x1p60f))
		return INFINITY;
	return 2.5f * km_screen_bound(dp, xnorm, cmax) + km_filter_slack(d, xnorm, cmax);
}

/*
 * The half-precision screen (the same kernel on float16 operands, mma
 * m16n8k16): the rows are kept as h(2^(14 - xe) x) and the centroid operand
 * is h(-2 2^(13 - ce) c'), where h rounds to float16 (nearest even: relative
 * error at most u = 2^-11, as TF32) and flushes results below 2^-14 to zero,
 * 2^xe > max |x_c| over all rows (km_screen16_exp, once a call) and 2^ce >
 * cmax (once an iteration).  Every value is then below 2^14, far from the
 * end of the float16 range, and the screen's values are the float32
 * filter's times S = 2^(27 - xe - ce): compared within a row, they need no
 * undoing but for fbest.  Against TF32 each input may also lose up to 2^-14
 * in its scaled units (a flushed value): 2^(xe - 28) of a row's value and
 * 2^(ce - 27) of -2 c_jc.  By Cauchy-Schwarz on those absolute parts,
 *		|dot error| <= 2 (2u + u^2) |x| |c| + (1 + u) 2^-14 sqrt(dp)
 *						 (2 |c| 2^(xe - 14) + |x| 2^(ce - 13)) + dp 2^-28 / S
 * and a float32 sum flushed in scaled units loses 2^-126 / S.  The bound is
 * km_screen_bound's with those terms added, the same factor 2.5 and the
 * float32 filter's slack on top.  +infinity where the scales are out of
 * range (S, or cn_j S, past the float range): the row is settled exactly.
 */
KM_HD int
km_screen16_exp(float v)
{
	int			e = 0;

	(void) frexpf(v, &e);		/* v < 2^e; 0 for v = 0 */
	return e < -100 ? -100 : e;
}

/* log2 of S: the screen's values are the float32 filter's times 2^this. */
KM_HD int
km_screen16_sexp(int xe, int ce)
{
	return 27 - xe - ce;
}

/* The scales are representable: S within 2^+-100, cn_j S < 2^(27 + ce - xe) below 2^117. */
KM_HD int
km_screen16_ok(int xe, int ce)
{
	const int	se = km_screen16_sexp(xe, ce);

	return se >= -100 && se <= 100 && ce - xe < 90 && xe <= 128 && ce <= 128;
}

KM_HD float
km_screen16_slack(int d, int dp, float xnorm, float cmax, int xe, int ce)
{
	const float u = 0x1p-11f;
	float		e;

	if (!(xnorm + cmax < 0x1p60f) || !km_screen16_ok(xe, ce))
		return INFINITY;
	e = km_screen_bound(dp, xnorm, cmax) +
		(1.0f + u) * 0x1p-14f * sqrtf((float) dp) *
		(2.0f * cmax * ldexpf(1.0f, xe - 14) + xnorm * ldexpf(1.0f, ce - 13)) +
		(float) dp * (0x1p-28f + 0x1p-124f) * ldexpf(1.0f, -km_screen16_sexp(xe, ce));
	return 2.5f * e + km_filter_slack(d, xnorm, cmax);
}

#endif							/* KM_EXACT_H */
