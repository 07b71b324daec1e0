/*
 * kmd_metric.h
 *	  The distances of k-medoids, defined once for every engine.
 *
 * k-medoids decides everything (labels, swaps, new medoids) from sums of
 * distances, so the distance between two rows is defined here as an exact
 * sequence of IEEE double operations: each coordinate converted to double,
 * one correctly rounded operation at a time, coordinates in index order.
 * Any engine that follows the sequence gets the same bits: the CPU engine's
 * vector kernels (kmedoids_kernels.c) compute several pairs at once, lane by
 * lane, and must match kmd_pair() exactly (the engine tests check it), and a
 * GPU kernel with __dadd_rn and __dmul_rn (or __fma_rn, see below) would too.
 *
 * The product of two floats is exact in double (24 + 24 bits of
 * significand), so s + x * y rounds once whether it is computed as a
 * multiply then an add or as one fused multiply-add: dot products may use
 * FMA and still give these bits.  That is why l2 and sqeuclidean go through
 * dot products (half the work of subtracting, squaring and adding): the
 * squared distance is |x|^2 + |y|^2 - 2 x.y, clamped at 0, each term a
 * sequential sum of exact products.  It is exactly 0 for identical rows
 * (the three sums are the same sum), and off by at most a few units of
 * 2^-52 (|x|^2 + |y|^2) otherwise, which matters only for rows much closer
 * to each other than to the origin.
 *
 *	sqeuclidean	|x|^2 + |y|^2 - 2 x.y, at least 0
 *	l2			its square root
 *	l1			sum |x_i - y_i|
 *	cosine		1 - x.y / sqrt(|x|^2 |y|^2), within [0, 2]; identical rows
 *				are at distance 0 exactly
 *	sqfd		signature quadratic form distance: a signature is a list of
 *				features (w, c): a weight and a point.  With the similarity
 *				s(c, e) = exp(-alpha |c - e|^2) and
 *				Q(X, Y) = sum_i sum_j w_i v_j s(c_i, e_j) (i outer, j inner),
 *				sqfd(X, Y) = sqrt(max(0, Q(X, X) + Q(Y, Y) - 2 Q(X, Y))).
 *				Q(X, Y) and Q(Y, X) add the same terms in another order, so
 *				the pair is taken in a fixed order of the two signatures
 *				(kmd_sig_before): sqfd is symmetric to the last bit, as the
 *				other metrics are.  |c - e|^2 here is the sequential sum of
 *				squared differences (km_exact_sqdist), and exp is kmd_exp
 *				below, built of basic operations, so that it too gives the
 *				same bits everywhere (libm's exp and CUDA's do not agree in
 *				the last place).

 * "aux" is what a row contributes on its own and is computed once per row:
 * |x|^2 for l2, sqeuclidean and cosine, Q(X, X) for sqfd, unused for l1.
 */
#ifndef KMD_METRIC_H
#define KMD_METRIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "km_exact.h"

/* Metric numbers: also the wire format of kmedoids_engine.h. */
#define KMD_L2			0
#define KMD_SQEUCLIDEAN 1
#define KMD_L1			2
#define KMD_COSINE		3
#define KMD_SQFD		4

/*
 * exp(x) for x <= 0 from + and * only: x = j ln2 + r with |r| <= ln2 / 2
 * (Cody and Waite's two-part ln 2, whose high part has trailing zeros, so
 * that j * ln2_hi is exact), exp(r) by its Taylor polynomial to degree 13 in
 * Horner form (truncation below 2^-60 for |r| <= 0.35), then times 2^j.
 * Accurate to a few units in the last place; below -708 the result would be
 * subnormal and is 0.
 */
KM_HD double
kmd_exp(double x)
{
	const double ln2_hi = 6.93147180369123816490e-01;	/* 0x3fe62e42fee00000 */
	const double ln2_lo = 1.90821492927058770002e-10;
	const double inv_ln2 = 1.44269504088896338700e+00;
	double		j;
	double		r;
	double		p;

	if (!(x > -708.0))
		return 0.0;				/* and NaN, which the callers never pass */
	if (x > 0.0)
		x = 0.0;
	j = floor(km_dadd(km_dmul(x, inv_ln2), 0.5));
	r = km_dadd(km_dadd(x, -km_dmul(j, ln2_hi)), -km_dmul(j, ln2_lo));
	p = 1.0 / 6227020800.0;		/* 1/13! */
	p = km_dadd(1.0 / 479001600.0, km_dmul(r, p));
	p = km_dadd(1.0 / 39916800.0, km_dmul(r, p));
	p = km_dadd(1.0 / 3628800.0, km_dmul(r, p));
	p = km_dadd(1.0 / 362880.0, km_dmul(r, p));
	p = km_dadd(1.0 / 40320.0, km_dmul(r, p));
	p = km_dadd(1.0 / 5040.0, km_dmul(r, p));
	p = km_dadd(1.0 / 720.0, km_dmul(r, p));
	p = km_dadd(1.0 / 120.0, km_dmul(r, p));
	p = km_dadd(1.0 / 24.0, km_dmul(r, p));
	p = km_dadd(1.0 / 6.0, km_dmul(r, p));
	p = km_dadd(0.5, km_dmul(r, p));
	p = km_dadd(1.0, km_dmul(r, p));
	p = km_dadd(1.0, km_dmul(r, p));
	/* 2^j, j in [-1022, 0]: a power of two, so the product is exact */
	return km_dmul(p, ldexp(1.0, (int) j));
}

/* |x|^2 + |y|^2 - 2 x.y from the three sums, at least 0 */
KM_HD double
kmd_sqdist_from_dot(double dot, double xx, double yy)
{
	double		s = km_dadd(km_dadd(xx, yy), -km_dmul(2.0, dot));

	return s > 0.0 ? s : 0.0;
}

/* sum |x_i - y_i| */
KM_HD double
kmd_l1(const float *x, const float *y, int d)
{
	double		s = 0.0;

	for (int i = 0; i < d; i++)
		s = km_dadd(s, fabs(km_dadd((double) x[i], -(double) y[i])));
	return s;
}

/* 1 - dot / sqrt(xx yy), within [0, 2]; 0 when either norm is 0 */
KM_HD double
kmd_cosine_from_dot(double dot, double xx, double yy)
{
	double		den = km_dsqrt(km_dmul(xx, yy));
	double		c;

	if (!(den > 0.0))
		return 0.0;
	c = km_dadd(1.0, -km_ddiv(dot, den));
	return c < 0.0 ? 0.0 : (c > 2.0 ? 2.0 : c);
}

/*
 * Q(X, Y) of two signatures of mx and my features, each fd floats: the
 * weight, then fd - 1 coordinates.
 */
KM_HD double
kmd_sqfd_q(const float *x, int mx, const float *y, int my, int fd, double alpha)
{
	double		q = 0.0;

	for (int i = 0; i < mx; i++)
	{
		const float *fi = x + (int64_t) i * fd;

		for (int j = 0; j < my; j++)
		{
			const float *fj = y + (int64_t) j * fd;
			double		s = kmd_exp(-km_dmul(alpha, km_exact_sqdist(fi + 1, fj + 1, fd - 1)));

			q = km_dadd(q, km_dmul(km_dmul((double) fi[0], (double) fj[0]), s));
		}
	}
	return q;
}

/*
 * Whether signature x comes before y in the order that fixes Q's: fewer
 * features first, then by the bit patterns of their floats.
 */
KM_HD int
kmd_sig_before(const float *x, int mx, const float *y, int my, int d)
{
	if (mx != my)
		return mx < my;
	for (int64_t i = 0; i < (int64_t) mx * d; i++)
	{
		uint32_t	a;
		uint32_t	b;

		memcpy(&a, x + i, sizeof(a));
		memcpy(&b, y + i, sizeof(b));
		if (a != b)
			return a < b;
	}
	return 1;
}

/* Q(X, Y) with the pair in kmd_sig_before order: Q(X, Y) == Q(Y, X). */
KM_HD double
kmd_sqfd_q_sym(const float *x, int mx, const float *y, int my, int d, double alpha)
{
	if (kmd_sig_before(x, mx, y, my, d))
		return kmd_sqfd_q(x, mx, y, my, d, alpha);
	return kmd_sqfd_q(y, my, x, mx, d, alpha);
}

/* sqfd from Q(X, X), Q(Y, Y) and Q(X, Y) */
KM_HD double
kmd_sqfd_from_q(double qxx, double qyy, double qxy)
{
	/* one addition of two terms is commutative: symmetric in x and y */
	double		s = km_dadd(km_dadd(qxx, qyy), -km_dmul(2.0, qxy));

	return s > 0.0 ? km_dsqrt(s) : 0.0;
}

/*
 * A row's aux: |x|^2 for l2, sqeuclidean and cosine, Q(X, X) for sqfd (m
 * features), 0 for l1.
 */
KM_HD double
kmd_aux(int metric, const float *x, int m, int d, double alpha)
{
	if (metric == KMD_L2 || metric == KMD_SQEUCLIDEAN || metric == KMD_COSINE)
		return km_exact_dot(x, x, d);
	if (metric == KMD_SQFD)
		return kmd_sqfd_q(x, m, x, m, d, alpha);
	return 0.0;
}

/*
 * The distance between rows x and y.  Dense metrics: d values each (mx, my
 * unused).  sqfd: mx and my features of d floats.  ax and ay are the rows'
 * aux values.
 */
KM_HD double
kmd_pair(int metric, const float *x, int mx, double ax, const float *y, int my,
		 double ay, int d, double alpha)
{
	switch (metric)
	{
		case KMD_L2:
			return km_dsqrt(kmd_sqdist_from_dot(km_exact_dot(x, y, d), ax, ay));
		case KMD_SQEUCLIDEAN:
			return kmd_sqdist_from_dot(km_exact_dot(x, y, d), ax, ay);
		case KMD_L1:
			return kmd_l1(x, y, d);
		case KMD_COSINE:
			return kmd_cosine_from_dot(km_exact_dot(x, y, d), ax, ay);
		default:
			return kmd_sqfd_from_q(ax, ay, kmd_sqfd_q_sym(x, mx, y, my, d, alpha));
	}
}

#endif							/* KMD_METRIC_H */
