/*
 * seed_pp.h
 *	  The arithmetic of k-means++ seeding that the CUDA engine (kmeanspp.cu) and
 *	  its plain C reference (kernels/bench/ref_kmeans.c) share, so that the
 *	  reference reproduces the device's seeds bit for bit.  Plain C.
 *
 *	- D2: the squared distance in float, as four chains: chain j adds
 *	  (x[i] - c[i])^2 for i = j mod 4 in index order, each step one fused
 *	  multiply-add of the rounded difference; the result is
 *	  (a0 + a1) + (a2 + a3).  Equal rows give exactly 0.  The same value
 *	  comes out of one thread walking the row and of four lanes holding one
 *	  chain each, which is what lets the device take either layout.
 *	- Potentials: sum of w * min(D2, d) over rows with w > 0, each term
 *	  truncated to a 64-bit integer at a fixed scale (2^shift, from a bound
 *	  on every term and the row count) and added as integers: exact, so the
 *	  sum does not depend on the order of the rows or of the additions.
 *	  The candidate with the smallest sum wins, ties to the earlier one.
 */
#ifndef KMG_SEED_PP_H
#define KMG_SEED_PP_H

#include <math.h>
#include <stdint.h>

#include "km_hd.h"

/* One step of chain acc: acc += (x - c)^2, the difference rounded first. */
KM_HD float
kmg_pp_step(float acc, float x, float c)
{
#ifdef __CUDA_ARCH__
	const float t = __fsub_rn(x, c);

	return __fmaf_rn(t, t, acc);
#else
	const float t = x - c;

	return fmaf(t, t, acc);
#endif
}

KM_HD float
kmg_pp_join(float a0, float a1, float a2, float a3)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(__fadd_rn(a0, a1), __fadd_rn(a2, a3));
#else
	return (a0 + a1) + (a2 + a3);
#endif
}

/* D2 of two rows of d values (padding zeros past d change nothing). */
KM_HD float
kmg_pp_d2(const float *x, const float *c, int d)
{
	float		a[4] = {0.0f, 0.0f, 0.0f, 0.0f};

	for (int i = 0; i < d; i++)
		a[i & 3] = kmg_pp_step(a[i & 3], x[i], c[i]);
	return kmg_pp_join(a[0], a[1], a[2], a[3]);
}

/*
 * The scale of the potentials: every term w * D2 is at most
 * wmax * 4 * xmax2 (times 1.01 for the float rounding of D2 and of xmax2,
 * which is max |x|^2 as kmg_pp_sqnorm computes it); with n terms the sum
 * stays below 2^62.
 */
KM_HD int
kmg_pp_shift(float wmax, float xmax2, int64_t n)
{
	const double bound = (double) wmax * 4.0 * (double) xmax2 * 1.01 + 1e-300;
	int			e = 0;
	int			h = 1;

	(void) frexp(bound, &e);	/* bound < 2^e */
	while (h < 62 && ((int64_t) 1 << h) <= n)
		h++;					/* n < 2^h */
	return 62 - h - e;
}

/* One potential term: floor(w * m * 2^shift) (w * m is exact in double). */
KM_HD uint64_t
kmg_pp_term(float w, float m, int shift)
{
	double		v = ldexp((double) w * (double) m, shift);

	if (!(v >= 1.0))
		return 0;
	if (v > 0x1p62)
		v = 0x1p62;				/* past the bound: cannot happen, kept finite */
	return (uint64_t) v;
}

/* The sum as a double (for the sampling threshold only). */
KM_HD double
kmg_pp_value(uint64_t sum, int shift)
{
	return ldexp((double) sum, -shift);
}

/*
 * |x|^2 as the CPU engine's km_cpu_sqnorm computes it (eight float lanes,
 * their fixed tree, then the tail; no FMA); prep/prep.cu's statistics use the
 * same order, so xmax2 is the same on both sides.
 */
KM_HD float
kmg_pp_sqnorm(const float *x, int d)
{
	float		s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	float		r;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
		for (int l = 0; l < 8; l++)
			s[l] = s[l] + x[i + l] * x[i + l];
	r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	for (; i < d; i++)
		r = r + x[i] * x[i];
	return r;
}

#endif							/* KMG_SEED_PP_H */
