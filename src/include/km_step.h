/*
 * km_step.h
 *	  The arithmetic of a Lloyd step's update, shared by the CPU engine and
 *	  by kmeans_step (the SQL layer), so that a centroid computed from
 *	  merged partials is the one a fit computes, bit for bit.
 *
 * Plain C, no PostgreSQL headers; compile with -ffp-contract=off.  KM_HD:
 * the split fits of the GPU engine run km_centroid_mean on the device
 * (kernels/update/xsums.cu), with the same rounding (km_exact.h).
 */
#ifndef KM_STEP_H
#define KM_STEP_H

#include <math.h>

#include "km_exact.h"
#include "km_hd.h"

/*
 * Centroid c becomes the weighted mean of its rows, given s (d values) and
 * w: the exact sums of w * row (cosine: of the unit rows) and of the
 * weights, each rounded to double.  c_i = (float) (s_i / w); cosine
 * normalises the mean first, in double: m_i = s_i / w, r = sqrt(sum of m_i
 * * m_i in index order), c_i = (float) (m_i / r).  c keeps its place when
 * the mean is not finite in float (or, for cosine, has no direction).  s is
 * overwritten.
 */
KM_HD void
km_centroid_mean(double *s, double w, int d, int cosine, float *c)
{
	double		scale;
	int			ok = 1;

	for (int i = 0; i < d; i++)
		s[i] = km_ddiv(s[i], w);
	if (cosine)
	{
		double		nrm = 0.0;

		for (int i = 0; i < d; i++)
			nrm = km_dadd(nrm, km_dmul(s[i], s[i]));
		scale = km_dsqrt(nrm);
		ok = scale > 0.0 && isfinite(scale);
		for (int i = 0; i < d && ok; i++)
			s[i] = km_ddiv(s[i], scale);
	}
	for (int i = 0; i < d && ok; i++)
		ok = isfinite((float) s[i]);
	if (!ok)
		return;
	for (int i = 0; i < d; i++)
		c[i] = (float) s[i];
}

/*
 * The centroid a re-seeded cluster takes: the row itself (cosine: the unit
 * row, zeros if it has no direction).
 */
KM_HD void
km_centroid_row(const float *x, int d, int cosine, float *c)
{
	if (cosine)
	{
		if (km_normalize_row(x, c, d) == 0.0)
			for (int i = 0; i < d; i++)
				c[i] = 0.0f;
	}
	else
		for (int i = 0; i < d; i++)
			c[i] = x[i];
}

#endif							/* KM_STEP_H */
