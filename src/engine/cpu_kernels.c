/*
 * cpu_kernels.c
 *	  The small loops of the CPU engine's hot path.
 *
 * Float reductions use eight independent partial sums (one vector),
 * combined in a fixed order, so the result does not depend on where a row
 * sits in memory.  Double loops that
 * must round exactly like km_exact.h evaluate several rows or centroids side
 * by side, each with the very operations of km_exact.h in index order, to
 * overlap the dependent additions.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "km_exact.h"

/*
 * Vector types for the loops below.  They compile to SSE2 in the portable
 * build and to AVX2 in the copies made for CPUs that have it; either way the
 * arithmetic is the same, operation for operation (no contraction), so the
 * results do not depend on the CPU.  aligned(4) and may_alias make them
 * safe to load from any float or double pointer.
 */
typedef float km_v8sf __attribute__((vector_size(32), aligned(4), may_alias));
typedef float km_v4sf __attribute__((vector_size(16), aligned(4), may_alias));
typedef double km_v4df __attribute__((vector_size(32), aligned(8), may_alias));
typedef uint32_t km_v8su __attribute__((vector_size(32), aligned(4), may_alias));

#define KM_CPU_BODY static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__)
#define KM_CPU_X86 1
#define KM_CPU_AVX2 __attribute__((target("avx2,fma")))
#endif

/*
 * Sum of eight partial sums, always in the same order (by pointer: a vector
 * argument would change the calling convention between the two builds).
 */
KM_CPU_BODY float
km_cpu_sum8(const km_v8sf *v)
{
	const km_v8sf s = *v;

	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/*
 * The largest |x_i| of a row, exactly: for finite floats the magnitude
 * bits order like the magnitudes, so an integer maximum of them does.
 */
KM_CPU_BODY float
km_cpu_absmax_body(const float *x, int d)
{
	km_v8su		m = {0, 0, 0, 0, 0, 0, 0, 0};
	uint32_t	r = 0;
	float		f;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
	{
		km_v8su		v = *(const km_v8su *) (x + i) & 0x7fffffffu;

		m = m ^ ((m ^ v) & (km_v8su) (v > m));
	}
	for (int j = 0; j < 8; j++)
		r = m[j] > r ? m[j] : r;
	for (; i < d; i++)
	{
		uint32_t	b;

		memcpy(&b, x + i, sizeof(b));
		b &= 0x7fffffffu;
		r = b > r ? b : r;
	}
	memcpy(&f, &r, sizeof(f));
	return f;
}

/* |x|^2 in float: the row norm the filter's slack needs. */
KM_CPU_BODY float
km_cpu_sqnorm_body(const float *x, int d)
{
	km_v8sf		s = {0, 0, 0, 0, 0, 0, 0, 0};
	float		r;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
	{
		km_v8sf		v = *(const km_v8sf *) (x + i);

		s += v * v;
	}
	r = km_cpu_sum8(&s);
	for (; i < d; i++)
		r += x[i] * x[i];
	return r;
}

/* out = x - mu, each difference rounded to float once; returns |out|^2. */
KM_CPU_BODY float
km_cpu_centre_body(const float *x, const float *mu, float *out, int d)
{
	km_v8sf		s = {0, 0, 0, 0, 0, 0, 0, 0};
	float		r;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
	{
		km_v8sf		v = *(const km_v8sf *) (x + i) - *(const km_v8sf *) (mu + i);

		*(km_v8sf *) (out + i) = v;
		s += v * v;
	}
	r = km_cpu_sum8(&s);
	for (; i < d; i++)
	{
		float		v = x[i] - mu[i];

		out[i] = v;
		r += v * v;
	}
	return r;
}

/*
 * The unit row km_normalize_row makes, for a known norm nrm = |x| (exact,
 * in double): each value is (float) (x / nrm); returns |out|^2 in float.
 */
KM_CPU_BODY float
km_cpu_normalize_body(const float *x, double nrm, float *out, int d)
{
	km_v8sf		s = {0, 0, 0, 0, 0, 0, 0, 0};
	km_v4df		n4 = {nrm, nrm, nrm, nrm};
	float		r;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
	{
		km_v4df		lo = __builtin_convertvector(*(const km_v4sf *) (x + i), km_v4df);
		km_v4df		hi = __builtin_convertvector(*(const km_v4sf *) (x + i + 4), km_v4df);
		km_v4sf		flo = __builtin_convertvector(lo / n4, km_v4sf);
		km_v4sf		fhi = __builtin_convertvector(hi / n4, km_v4sf);
		km_v8sf		v = {flo[0], flo[1], flo[2], flo[3], fhi[0], fhi[1], fhi[2], fhi[3]};

		*(km_v8sf *) (out + i) = v;
		s += v * v;
	}
	r = km_cpu_sum8(&s);
	for (; i < d; i++)
	{
		float		v = (float) ((double) x[i] / nrm);

		out[i] = v;
		r += v * v;
	}
	return r;
}

/* acc += w * x in double (w * x is exact in double); w == 1 skips it. */
KM_CPU_BODY void
km_cpu_add_row_body(double *acc, const float *x, double w, int d, int weighted)
{
	km_v4df		w4 = {w, w, w, w};
	int			i = 0;

	for (; i + 4 <= d; i += 4)
	{
		km_v4df		v = __builtin_convertvector(*(const km_v4sf *) (x + i), km_v4df);

		if (weighted)
			v *= w4;
		*(km_v4df *) (acc + i) += v;
	}
	for (; i < d; i++)
		acc[i] += weighted ? w * (double) x[i] : (double) x[i];
}

/*
 * The same into two levels (km_xsum.h): h = w * x rounded to a multiple of
 * the cut by (v + magic) - magic, which the compiler may not simplify
 * (no -ffast-math), goes to acc0, the exact rest v - h to acc1.
 */
KM_CPU_BODY void
km_cpu_add_row2_body(double *acc0, double *acc1, const float *x, double w,
					 double magic, int d, int weighted)
{
	km_v4df		w4 = {w, w, w, w};
	km_v4df		m4 = {magic, magic, magic, magic};
	int			i = 0;

	for (; i + 4 <= d; i += 4)
	{
		km_v4df		v = __builtin_convertvector(*(const km_v4sf *) (x + i), km_v4df);
		km_v4df		h;

		if (weighted)
			v *= w4;
		h = (v + m4) - m4;
		*(km_v4df *) (acc0 + i) += h;
		*(km_v4df *) (acc1 + i) += v - h;
	}
	for (; i < d; i++)
	{
		double		v = weighted ? w * (double) x[i] : (double) x[i];
		double		h = (v + magic) - magic;

		acc0[i] += h;
		acc1[i] += v - h;
	}
}

/* The same into any number of levels, stride doubles apart. */
KM_CPU_BODY void
km_cpu_add_rowk_body(double *acc, size_t stride, const km_xlevels *lv,
					 const float *x, double w, int d, int weighted)
{
	km_v4df		w4 = {w, w, w, w};
	int			i = 0;

	for (; i + 4 <= d; i += 4)
	{
		km_v4df		v = __builtin_convertvector(*(const km_v4sf *) (x + i), km_v4df);

		if (weighted)
			v *= w4;
		for (int l = 1; l < lv->n; l++)
		{
			double		m = lv->magic[l];
			km_v4df		m4 = {m, m, m, m};
			km_v4df		h = (v + m4) - m4;

			*(km_v4df *) (acc + (size_t) (l - 1) * stride + i) += h;
			v -= h;
		}
		*(km_v4df *) (acc + (size_t) (lv->n - 1) * stride + i) += v;
	}
	for (; i < d; i++)
	{
		double		v = weighted ? w * (double) x[i] : (double) x[i];

		for (int l = 1; l < lv->n; l++)
		{
			double		h = (v + lv->magic[l]) - lv->magic[l];

			acc[(size_t) (l - 1) * stride + i] += h;
			v -= h;
		}
		acc[(size_t) (lv->n - 1) * stride + i] += v;
	}
}

/*
 * The exponent fields of a row (see km_xstats_exponents), eight values at
 * a time: the largest, and the smallest among nonzero values.
 */
KM_CPU_BODY void
km_cpu_exponents_body(const float *x, int d, uint32_t *emax, uint32_t *emin)
{
	const km_v8su one = {1, 1, 1, 1, 1, 1, 1, 1};
	const km_v8su none = {255, 255, 255, 255, 255, 255, 255, 255};
	km_v8su		hi = {0, 0, 0, 0, 0, 0, 0, 0};
	km_v8su		lo = none;
	uint32_t	h = 0;
	uint32_t	l = 255;
	int			i = 0;

	for (; i + 8 <= d; i += 8)
	{
		km_v8su		v = *(const km_v8su *) (x + i) & 0x7fffffffu;
		km_v8su		e = v >> 23;
		km_v8su		nz = (km_v8su) (v != 0);
		km_v8su		e1 = e ^ ((e ^ one) & (km_v8su) (e < one));	/* max(e, 1) */
		km_v8su		c = (nz & e1) | (~nz & none);

		hi = hi ^ ((hi ^ e) & (km_v8su) (e > hi));
		lo = lo ^ ((lo ^ c) & (km_v8su) (c < lo));
	}
	for (int j = 0; j < 8; j++)
	{
		h = hi[j] > h ? hi[j] : h;
		l = lo[j] < l ? lo[j] : l;
	}
	for (; i < d; i++)
	{
		uint32_t	b;
		uint32_t	e;

		memcpy(&b, x + i, sizeof(b));
		b &= 0x7fffffffu;
		e = b >> 23;
		h = e > h ? e : h;
		if (b != 0 && (e > 0 ? e : 1) < l)
			l = e > 0 ? e : 1;
	}
	*emax = h;
	*emin = l;
}

/* Bounds on the terms of nt rows (norms: their exact norms, for cosine). */
KM_CPU_BODY void
km_cpu_xstats_rows_body(const float *x, const float *w, int nt, int d, int cosine,
						const double *norms, km_xstats *s)
{
	for (int r = 0; r < nt; r++)
	{
		uint32_t	emax,
					emin;

		km_cpu_exponents_body(x + (size_t) r * d, d, &emax, &emin);
		km_xstats_add(s, emax, emin, w != NULL ? w[r] : 1.0f, w != NULL, cosine,
					  cosine ? norms[r] : 0.0);
	}
}

/*
 * A tile's worth of rows (nt rows of d, contiguous) as the filter sees them:
 * centred (mu != NULL) or as they are, with their squared norms in xn2.
 */
KM_CPU_BODY void
km_cpu_rows_body(const float *x, const float *mu, float *out, float *xn2,
				 int nt, int d)
{
	for (int r = 0; r < nt; r++)
	{
		const float *xr = x + (size_t) r * d;

		if (mu != NULL)
			xn2[r] = km_cpu_centre_body(xr, mu, out + (size_t) r * d, d);
		else
			xn2[r] = km_cpu_sqnorm_body(xr, d);
	}
}

/*
 * The M step's sums for a tile: row r added (times w[r], unless w is NULL)
 * to the sums of cluster label[r], in the levels of lv (each level stride
 * doubles after the previous).
 */
KM_CPU_BODY void
km_cpu_accumulate_body(const km_xlevels *lv, double *sums, size_t stride,
					   const float *x, const int32_t *label, const float *w,
					   int nt, int d)
{
	if (lv->n == 1)
		for (int r = 0; r < nt; r++)
			km_cpu_add_row_body(sums + (size_t) label[r] * d, x + (size_t) r * d,
								w != NULL ? (double) w[r] : 1.0, d, w != NULL);
	else if (lv->n == 2)
		for (int r = 0; r < nt; r++)
		{
			double	   *acc = sums + (size_t) label[r] * d;

			km_cpu_add_row2_body(acc, acc + stride, x + (size_t) r * d,
								 w != NULL ? (double) w[r] : 1.0, lv->magic[1], d,
								 w != NULL);
		}
	else
		for (int r = 0; r < nt; r++)
			km_cpu_add_rowk_body(sums + (size_t) label[r] * d, stride, lv,
								 x + (size_t) r * d, w != NULL ? (double) w[r] : 1.0,
								 d, w != NULL);
}

/*
 * Each helper is compiled twice, portable and for AVX2 CPUs; avx2 says
 * which copy to run.
 */
static void
km_cpu_accumulate_plain(const km_xlevels *lv, double *sums, size_t stride,
						const float *x, const int32_t *label, const float *w,
						int nt, int d)
{
	km_cpu_accumulate_body(lv, sums, stride, x, label, w, nt, d);
}

static void
km_cpu_xstats_rows_plain(const float *x, const float *w, int nt, int d, int cosine,
						 const double *norms, km_xstats *s)
{
	km_cpu_xstats_rows_body(x, w, nt, d, cosine, norms, s);
}

static void
km_cpu_rows_plain(const float *x, const float *mu, float *out, float *xn2,
				  int nt, int d)
{
	km_cpu_rows_body(x, mu, out, xn2, nt, d);
}

static float
km_cpu_sqnorm_plain(const float *x, int d)
{
	return km_cpu_sqnorm_body(x, d);
}

static float
km_cpu_absmax_plain(const float *x, int d)
{
	return km_cpu_absmax_body(x, d);
}

static float
km_cpu_centre_plain(const float *x, const float *mu, float *out, int d)
{
	return km_cpu_centre_body(x, mu, out, d);
}

static float
km_cpu_normalize_plain(const float *x, double nrm, float *out, int d)
{
	return km_cpu_normalize_body(x, nrm, out, d);
}

static void
km_cpu_add_row_plain(double *acc, const float *x, double w, int d, int weighted)
{
	km_cpu_add_row_body(acc, x, w, d, weighted);
}

#ifdef KM_CPU_X86
KM_CPU_AVX2 static void
km_cpu_accumulate_avx2(const km_xlevels *lv, double *sums, size_t stride,
					   const float *x, const int32_t *label, const float *w,
					   int nt, int d)
{
	km_cpu_accumulate_body(lv, sums, stride, x, label, w, nt, d);
}

KM_CPU_AVX2 static void
km_cpu_xstats_rows_avx2(const float *x, const float *w, int nt, int d, int cosine,
						const double *norms, km_xstats *s)
{
	km_cpu_xstats_rows_body(x, w, nt, d, cosine, norms, s);
}

KM_CPU_AVX2 static void
km_cpu_rows_avx2(const float *x, const float *mu, float *out, float *xn2,
				 int nt, int d)
{
	km_cpu_rows_body(x, mu, out, xn2, nt, d);
}

KM_CPU_AVX2 static float
km_cpu_sqnorm_avx2(const float *x, int d)
{
	return km_cpu_sqnorm_body(x, d);
}

KM_CPU_AVX2 static float
km_cpu_absmax_avx2(const float *x, int d)
{
	return km_cpu_absmax_body(x, d);
}

KM_CPU_AVX2 static float
km_cpu_centre_avx2(const float *x, const float *mu, float *out, int d)
{
	return km_cpu_centre_body(x, mu, out, d);
}

KM_CPU_AVX2 static float
km_cpu_normalize_avx2(const float *x, double nrm, float *out, int d)
{
	return km_cpu_normalize_body(x, nrm, out, d);
}

KM_CPU_AVX2 static void
km_cpu_add_row_avx2(double *acc, const float *x, double w, int d, int weighted)
{
	km_cpu_add_row_body(acc, x, w, d, weighted);
}
#else
#define km_cpu_accumulate_avx2 km_cpu_accumulate_plain
#define km_cpu_xstats_rows_avx2 km_cpu_xstats_rows_plain
#define km_cpu_rows_avx2 km_cpu_rows_plain
#define km_cpu_sqnorm_avx2 km_cpu_sqnorm_plain
#define km_cpu_absmax_avx2 km_cpu_absmax_plain
#define km_cpu_centre_avx2 km_cpu_centre_plain
#define km_cpu_normalize_avx2 km_cpu_normalize_plain
#define km_cpu_add_row_avx2 km_cpu_add_row_plain
#endif

/* Add nt rows (times their weights) to their clusters' sums, in levels. */
void
km_cpu_accumulate(int avx2, const km_xlevels *lv, double *sums, size_t stride,
				  const float *x, const int32_t *label, const float *w, int nt, int d)
{
	if (avx2)
		km_cpu_accumulate_avx2(lv, sums, stride, x, label, w, nt, d);
	else
		km_cpu_accumulate_plain(lv, sums, stride, x, label, w, nt, d);
}

/* Bounds on the terms nt rows add to sums (km_xsum.h). */
void
km_cpu_xstats_rows(int avx2, const float *x, const float *w, int nt, int d,
				   int cosine, const double *norms, km_xstats *s)
{
	if (avx2)
		km_cpu_xstats_rows_avx2(x, w, nt, d, cosine, norms, s);
	else
		km_cpu_xstats_rows_plain(x, w, nt, d, cosine, norms, s);
}

/* nt rows centred into out (mu != NULL), and their squared norms. */
void
km_cpu_rows(int avx2, const float *x, const float *mu, float *out, float *xn2,
			int nt, int d)
{
	if (avx2)
		km_cpu_rows_avx2(x, mu, out, xn2, nt, d);
	else
		km_cpu_rows_plain(x, mu, out, xn2, nt, d);
}

/* The largest |x_i| of a row. */
float
km_cpu_absmax(int avx2, const float *x, int d)
{
	return avx2 ? km_cpu_absmax_avx2(x, d) : km_cpu_absmax_plain(x, d);
}

/* |x|^2 in float. */
float
km_cpu_sqnorm(int avx2, const float *x, int d)
{
	return avx2 ? km_cpu_sqnorm_avx2(x, d) : km_cpu_sqnorm_plain(x, d);
}

/* out = x - mu; returns |out|^2. */
float
km_cpu_centre(int avx2, const float *x, const float *mu, float *out, int d)
{
	return avx2 ? km_cpu_centre_avx2(x, mu, out, d) :
		km_cpu_centre_plain(x, mu, out, d);
}

/* acc += x, in double. */
void
km_cpu_add_row(int avx2, double *acc, const float *x, int d)
{
	if (avx2)
		km_cpu_add_row_avx2(acc, x, 1.0, d, 0);
	else
		km_cpu_add_row_plain(acc, x, 1.0, d, 0);
}

/* acc += w * x, in double. */
void
km_cpu_add_row_w(int avx2, double *acc, const float *x, double w, int d)
{
	if (avx2)
		km_cpu_add_row_avx2(acc, x, w, d, 1);
	else
		km_cpu_add_row_plain(acc, x, w, d, 1);
}

/*
 * out = the unit row, (float) (x / nrm) for nrm = |x| in double; returns
 * |out|^2.  A row that cannot be normalised becomes zeros, not garbage.
 */
float
km_cpu_normalize(int avx2, const float *x, double nrm, float *out, int d)
{
	if (!(nrm > 0.0) || !isfinite(nrm))
	{
		for (int i = 0; i < d; i++)
			out[i] = 0.0f;
		return 0.0f;
	}
	return avx2 ? km_cpu_normalize_avx2(x, nrm, out, d) :
		km_cpu_normalize_plain(x, nrm, out, d);
}

/*
 * km_exact_cost for four (row, centroid) pairs at once.  Each pair sees
 * exactly the operations of km_exact.h in index order; only the four
 * independent chains are interleaved.
 */
void
km_cpu_exact_cost4(const float *const *x, const float *const *c,
				   const double *cnorm, int d, int cosine, double *out)
{
	const float *x0 = x[0],
			   *x1 = x[1],
			   *x2 = x[2],
			   *x3 = x[3];
	const float *c0 = c[0],
			   *c1 = c[1],
			   *c2 = c[2],
			   *c3 = c[3];
	double		s0 = 0.0,
				s1 = 0.0,
				s2 = 0.0,
				s3 = 0.0;

	if (cosine)
	{
		for (int i = 0; i < d; i++)
		{
			s0 = km_dadd(s0, km_dmul((double) x0[i], (double) c0[i]));
			s1 = km_dadd(s1, km_dmul((double) x1[i], (double) c1[i]));
			s2 = km_dadd(s2, km_dmul((double) x2[i], (double) c2[i]));
			s3 = km_dadd(s3, km_dmul((double) x3[i], (double) c3[i]));
		}
		out[0] = km_dadd(1.0, -km_ddiv(s0, cnorm[0]));
		out[1] = km_dadd(1.0, -km_ddiv(s1, cnorm[1]));
		out[2] = km_dadd(1.0, -km_ddiv(s2, cnorm[2]));
		out[3] = km_dadd(1.0, -km_ddiv(s3, cnorm[3]));
		for (int q = 0; q < 4; q++)
			out[q] = out[q] > 0.0 ? out[q] : 0.0;
		return;
	}

	for (int i = 0; i < d; i++)
	{
		double		t0 = km_dadd((double) x0[i], -(double) c0[i]);
		double		t1 = km_dadd((double) x1[i], -(double) c1[i]);
		double		t2 = km_dadd((double) x2[i], -(double) c2[i]);
		double		t3 = km_dadd((double) x3[i], -(double) c3[i]);

		s0 = km_dadd(s0, km_dmul(t0, t0));
		s1 = km_dadd(s1, km_dmul(t1, t1));
		s2 = km_dadd(s2, km_dmul(t2, t2));
		s3 = km_dadd(s3, km_dmul(t3, t3));
	}
	out[0] = s0;
	out[1] = s1;
	out[2] = s2;
	out[3] = s3;
}

/*
 * km_exact_norm of nrows consecutive rows, four at a time.
 */
void
km_cpu_exact_norms(const float *x, int nrows, int d, double *out)
{
	int			r = 0;

	for (; r + 4 <= nrows; r += 4)
	{
		const float *x0 = x + (size_t) r * d;
		const float *x1 = x0 + d;
		const float *x2 = x1 + d;
		const float *x3 = x2 + d;
		double		s0 = 0.0,
					s1 = 0.0,
					s2 = 0.0,
					s3 = 0.0;

		for (int i = 0; i < d; i++)
		{
			s0 = km_dadd(s0, km_dmul((double) x0[i], (double) x0[i]));
			s1 = km_dadd(s1, km_dmul((double) x1[i], (double) x1[i]));
			s2 = km_dadd(s2, km_dmul((double) x2[i], (double) x2[i]));
			s3 = km_dadd(s3, km_dmul((double) x3[i], (double) x3[i]));
		}
		out[r] = km_dsqrt(s0);
		out[r + 1] = km_dsqrt(s1);
		out[r + 2] = km_dsqrt(s2);
		out[r + 3] = km_dsqrt(s3);
	}
	for (; r < nrows; r++)
		out[r] = km_exact_norm(x + (size_t) r * d, d);
}
