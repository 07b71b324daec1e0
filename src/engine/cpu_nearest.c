/*
 * cpu_nearest.c
 *	  One row at a time against prepared centroids (kmeans_assign).
 *
 * A per-row SQL function cannot batch rows the way the engines' assign
 * does, so this is the same decision shaped for a single row: the centroids
 * are prepared once per model (centred or normalised, packed into the
 * filter's 16-wide panels of -2c, as cpu_filter.c packs them), and each row
 * costs one pass over the panels plus, for the rare close call, the exact
 * double-precision comparison of km_exact.h among the centroids within the
 * filter's rounding slack.  The label is therefore the exact nearest
 * centroid, ties to the lowest id: what every engine and kmeans_labels give.
 *
 * Why it is fast: the row's filter values come from one chain of fused
 * multiply-adds per centroid over d, four panels (64 centroids, eight
 * accumulators) at a time so that the FMA latency is hidden, with the row's
 * value broadcast once per step for all of them; a model of up to a few
 * MB stays in the core's L2 cache from one row to the next, so a row costs
 * its k * d multiply-adds at about the cache's bandwidth.  The best value
 * and the candidates within the slack are found in one vectorised sweep of
 * the k values.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "km_exact.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define KM_NEAREST_X86 1
#include <immintrin.h>
#endif

#define KM_NEAREST_ALIGN 64

struct km_nearest
{
	int			k;
	int			d;
	int			kpad;			/* k rounded up to whole panels */
	int			cosine;
	int			centred;		/* l2: rows and centroids minus mu */
	int			avx2;
	const float *centroids;		/* the caller's, k x d, kept alive by it */
	double	   *cnorm;			/* k exact norms (cosine) */
	float	   *mu;				/* d */
	float	   *panels;			/* kpad x d: -2 c', 16-wide panels */
	float	   *cnp;			/* kpad: |c'|^2, +inf for padding */
	float		cmax;			/* largest |c'| */
	float	   *xprime;			/* d: the row as the filter sees it */
	float	   *values;			/* kpad: the row's filter values */
	int32_t    *cand;			/* k: centroids left for the exact check */
};

static size_t
km_nearest_round(size_t n)
{
	return (n + KM_NEAREST_ALIGN - 1) & ~(size_t) (KM_NEAREST_ALIGN - 1);
}

/*
 * Bytes km_nearest_prepare needs for k centroids of d values.
 */
size_t
km_nearest_size(int k, int d)
{
	size_t		kpad = (size_t) (k + KM_CPU_NR - 1) / KM_CPU_NR * KM_CPU_NR;

	return KM_NEAREST_ALIGN + km_nearest_round(sizeof(km_nearest))
		+ km_nearest_round(sizeof(double) * k)	/* cnorm */
		+ km_nearest_round(sizeof(float) * d) * 2	/* mu, xprime */
		+ km_nearest_round(sizeof(float) * kpad * d)	/* panels */
		+ km_nearest_round(sizeof(float) * kpad) * 2	/* cnp, values */
		+ km_nearest_round(sizeof(int32_t) * k)	/* cand */
		+ km_nearest_round(sizeof(float) * (size_t) k * d);	/* c' while packing */
}

static void *
km_nearest_carve(char **at, size_t size)
{
	void	   *p = *at;

	*at += km_nearest_round(size);
	return p;
}

/*
 * Prepare centroids (k x d, finite) for km_nearest_row in mem, which holds
 * km_nearest_size(k, d) bytes; the centroids must stay where they are while
 * the result is used.  For l2 the filter works on rows and centroids minus
 * mu, the centroids' mean, when that mean is far from the origin compared
 * with the centroids' spread (as the engines centre on the data's mean):
 * the rounding slack shrinks with |x - mu|.
 */
km_nearest *
km_nearest_prepare(void *mem, const float *centroids, int k, int d, km_metric metric)
{
	char	   *at = (char *) (((uintptr_t) mem + KM_NEAREST_ALIGN - 1) &
							   ~(uintptr_t) (KM_NEAREST_ALIGN - 1));
	km_nearest *nn = km_nearest_carve(&at, sizeof(km_nearest));
	float	   *cprime;
	float	   *cn;
	float		cmax2 = 0.0f;

	memset(nn, 0, sizeof(*nn));
	nn->k = k;
	nn->d = d;
	nn->kpad = (k + KM_CPU_NR - 1) / KM_CPU_NR * KM_CPU_NR;
	nn->cosine = metric == KM_METRIC_COSINE;
	nn->avx2 = km_cpu_have_avx2();
	nn->centroids = centroids;
	nn->cnorm = km_nearest_carve(&at, sizeof(double) * k);
	nn->mu = km_nearest_carve(&at, sizeof(float) * d);
	nn->xprime = km_nearest_carve(&at, sizeof(float) * d);
	nn->panels = km_nearest_carve(&at, sizeof(float) * (size_t) nn->kpad * d);
	nn->cnp = km_nearest_carve(&at, sizeof(float) * nn->kpad);
	nn->values = km_nearest_carve(&at, sizeof(float) * nn->kpad);
	nn->cand = km_nearest_carve(&at, sizeof(int32_t) * k);
	cprime = km_nearest_carve(&at, sizeof(float) * (size_t) k * d);
	cn = nn->values;			/* |c'|^2 until packed */

	if (!nn->cosine)
	{
		double		m2 = 0.0,
					c2 = 0.0;

		for (int i = 0; i < d; i++)
		{
			double		s = 0.0;

			for (int j = 0; j < k; j++)
				s += centroids[(size_t) j * d + i];
			nn->mu[i] = (float) (s / k);
			m2 += (double) nn->mu[i] * nn->mu[i];
		}
		for (size_t i = 0; i < (size_t) k * d; i++)
			c2 += (double) centroids[i] * centroids[i];
		nn->centred = m2 * 16.0 > c2 / k;
	}

	for (int j = 0; j < k; j++)
	{
		const float *c = centroids + (size_t) j * d;
		float	   *cp = cprime + (size_t) j * d;

		if (nn->cosine)
		{
			nn->cnorm[j] = km_exact_norm(c, d);
			cn[j] = km_cpu_normalize(nn->avx2, c, nn->cnorm[j], cp, d);
		}
		else if (nn->centred)
			cn[j] = km_cpu_centre(nn->avx2, c, nn->mu, cp, d);
		else
		{
			memcpy(cp, c, sizeof(float) * d);
			cn[j] = km_cpu_sqnorm(nn->avx2, c, d);
		}
		if (cn[j] > cmax2)
			cmax2 = cn[j];
	}
	nn->cmax = sqrtf(cmax2);
	km_cpu_filter_pack(cprime, cn, k, d, nn->panels, nn->cnp);
	return nn;
}

/*
 * Use the portable code from now on, whatever the CPU (for the engine
 * tests, which check that both lead to the same labels).
 */
void
km_nearest_portable(km_nearest *nn)
{
	nn->avx2 = 0;
}

/* Filter values of one row against every panel, portable C. */
static void
km_nearest_values_c(const km_nearest *nn, const float *x, float *out)
{
	const int	d = nn->d;

	for (int p = 0; p < nn->kpad / KM_CPU_NR; p++)
	{
		const float *bp = nn->panels + (size_t) p * KM_CPU_NR * d;
		float		acc[KM_CPU_NR] = {0};

		for (int l = 0; l < d; l++)
			for (int q = 0; q < KM_CPU_NR; q++)
				acc[q] = fmaf(x[l], bp[(size_t) l * KM_CPU_NR + q], acc[q]);
		for (int q = 0; q < KM_CPU_NR; q++)
			out[p * KM_CPU_NR + q] = nn->cnp[p * KM_CPU_NR + q] + acc[q];
	}
}

#ifdef KM_NEAREST_X86
/*
 * Filter values of one row, AVX2: four panels at a time, eight independent
 * accumulator chains, one broadcast of x[l] for all of them.
 */
__attribute__((target("avx2,fma")))
static void
km_nearest_values_avx2(const km_nearest *nn, const float *x, float *out)
{
	const int	d = nn->d;
	const int	npanels = nn->kpad / KM_CPU_NR;
	const size_t stride = (size_t) KM_CPU_NR * d;
	int			p = 0;

	for (; p + 4 <= npanels; p += 4)
	{
		const float *b0 = nn->panels + (size_t) p * stride;
		const float *b1 = b0 + stride,
				   *b2 = b1 + stride,
				   *b3 = b2 + stride;
		__m256		a00 = _mm256_setzero_ps(),
					a01 = _mm256_setzero_ps(),
					a10 = _mm256_setzero_ps(),
					a11 = _mm256_setzero_ps(),
					a20 = _mm256_setzero_ps(),
					a21 = _mm256_setzero_ps(),
					a30 = _mm256_setzero_ps(),
					a31 = _mm256_setzero_ps();
		const float *cnp = nn->cnp + p * KM_CPU_NR;

		for (int l = 0; l < d; l++)
		{
			__m256		xb = _mm256_broadcast_ss(x + l);
			size_t		o = (size_t) l * KM_CPU_NR;

			a00 = _mm256_fmadd_ps(xb, _mm256_load_ps(b0 + o), a00);
			a01 = _mm256_fmadd_ps(xb, _mm256_load_ps(b0 + o + 8), a01);
			a10 = _mm256_fmadd_ps(xb, _mm256_load_ps(b1 + o), a10);
			a11 = _mm256_fmadd_ps(xb, _mm256_load_ps(b1 + o + 8), a11);
			a20 = _mm256_fmadd_ps(xb, _mm256_load_ps(b2 + o), a20);
			a21 = _mm256_fmadd_ps(xb, _mm256_load_ps(b2 + o + 8), a21);
			a30 = _mm256_fmadd_ps(xb, _mm256_load_ps(b3 + o), a30);
			a31 = _mm256_fmadd_ps(xb, _mm256_load_ps(b3 + o + 8), a31);
		}
		_mm256_storeu_ps(out + p * KM_CPU_NR + 0, _mm256_add_ps(_mm256_loadu_ps(cnp + 0), a00));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 8, _mm256_add_ps(_mm256_loadu_ps(cnp + 8), a01));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 16, _mm256_add_ps(_mm256_loadu_ps(cnp + 16), a10));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 24, _mm256_add_ps(_mm256_loadu_ps(cnp + 24), a11));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 32, _mm256_add_ps(_mm256_loadu_ps(cnp + 32), a20));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 40, _mm256_add_ps(_mm256_loadu_ps(cnp + 40), a21));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 48, _mm256_add_ps(_mm256_loadu_ps(cnp + 48), a30));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 56, _mm256_add_ps(_mm256_loadu_ps(cnp + 56), a31));
	}
	for (; p < npanels; p++)
	{
		const float *b0 = nn->panels + (size_t) p * stride;
		__m256		a00 = _mm256_setzero_ps(),
					a01 = _mm256_setzero_ps();
		const float *cnp = nn->cnp + p * KM_CPU_NR;

		for (int l = 0; l < d; l++)
		{
			__m256		xb = _mm256_broadcast_ss(x + l);
			size_t		o = (size_t) l * KM_CPU_NR;

			a00 = _mm256_fmadd_ps(xb, _mm256_load_ps(b0 + o), a00);
			a01 = _mm256_fmadd_ps(xb, _mm256_load_ps(b0 + o + 8), a01);
		}
		_mm256_storeu_ps(out + p * KM_CPU_NR + 0, _mm256_add_ps(_mm256_loadu_ps(cnp + 0), a00));
		_mm256_storeu_ps(out + p * KM_CPU_NR + 8, _mm256_add_ps(_mm256_loadu_ps(cnp + 8), a01));
	}
}

/* The smallest of n values (n a multiple of 16; NaN never wins). */
__attribute__((target("avx2,fma")))
static float
km_nearest_min_avx2(const float *v, int n)
{
	__m256		m0 = _mm256_set1_ps(INFINITY),
				m1 = _mm256_set1_ps(INFINITY);
	float		lanes[8],
				best;

	for (int j = 0; j < n; j += 16)
	{
		m0 = _mm256_min_ps(_mm256_loadu_ps(v + j), m0);
		m1 = _mm256_min_ps(_mm256_loadu_ps(v + j + 8), m1);
	}
	_mm256_storeu_ps(lanes, _mm256_min_ps(m0, m1));
	best = lanes[0];
	for (int q = 1; q < 8; q++)
		if (lanes[q] < best)
			best = lanes[q];
	return best;
}

/*
 * Centroids j < k whose value is not more than slack above best (or not
 * comparable: NaN), in increasing order, into cand; returns how many.  The
 * vector test only skips groups of eight that are far out (more than twice
 * the slack above best); the filter's own test decides every other value.
 */
__attribute__((target("avx2,fma")))
static int
km_nearest_within_avx2(const float *v, int k, float best, float slack, int32_t *cand)
{
	const __m256 far = _mm256_set1_ps(best + 2.0f * slack);
	int			n = 0;
	int			j = 0;

	for (; j + 8 <= k; j += 8)
	{
		/* lanes not above far, or NaN */
		if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + j), far, _CMP_NGT_UQ)) == 0)
			continue;
		for (int q = 0; q < 8; q++)
			if (!(v[j + q] - best > slack))
				cand[n++] = j + q;
	}
	for (; j < k; j++)
		if (!(v[j] - best > slack))
			cand[n++] = j;
	return n;
}
#endif							/* KM_NEAREST_X86 */

/*
 * The exact nearest centroid to row x (d finite values) and its cost: the
 * squared distance for l2, 1 - cos for cosine.  Returns -1 (and nothing
 * else) when metric cosine meets a vector that cannot be normalised (zero).
 */
int
km_nearest_row(km_nearest *nn, const float *x, double *cost)
{
	const int	d = nn->d;
	const int	k = nn->k;
	const float *xe = x;		/* the row the exact check reads */
	float		xn2,
				best,
				slack;
	int			ncand = 0;
	int			label = -1;
	double		best_cost = 0.0;

	if (nn->cosine)
	{
		double		nrm = km_exact_norm(x, d);

		if (!(nrm > 0.0) || !isfinite(nrm))
			return -1;
		xn2 = km_cpu_normalize(nn->avx2, x, nrm, nn->xprime, d);
		xe = nn->xprime;
	}
	else if (nn->centred)
		xn2 = km_cpu_centre(nn->avx2, x, nn->mu, nn->xprime, d);
	else
	{
		memcpy(nn->xprime, x, sizeof(float) * d);
		xn2 = km_cpu_sqnorm(nn->avx2, x, d);
	}
	slack = km_filter_slack(d, sqrtf(xn2), nn->cmax);

#ifdef KM_NEAREST_X86
	if (nn->avx2)
	{
		km_nearest_values_avx2(nn, nn->xprime, nn->values);
		best = km_nearest_min_avx2(nn->values, nn->kpad);
		if (isfinite(best) && isfinite(slack))
			ncand = km_nearest_within_avx2(nn->values, k, best, slack, nn->cand);
	}
	else
#endif
	{
		km_nearest_values_c(nn, nn->xprime, nn->values);
		best = INFINITY;
		for (int j = 0; j < k; j++)
			if (nn->values[j] < best)
				best = nn->values[j];
		if (isfinite(best) && isfinite(slack))
			for (int j = 0; j < k; j++)
				if (!(nn->values[j] - best > slack))
					nn->cand[ncand++] = j;
	}

	if (!(isfinite(best) && isfinite(slack)))
	{
		/* an overflow may hide in the filter: decide every centroid exactly */
		for (int j = 0; j < k; j++)
			nn->cand[j] = j;
		ncand = k;
	}
	else if (ncand == 1)
	{
		/* the filter's winner is the exact winner; its cost, exactly */
		label = nn->cand[0];
		*cost = km_exact_cost(xe, nn->centroids + (size_t) label * d,
							  nn->cosine ? nn->cnorm[label] : 0.0, d, nn->cosine);
		return label;
	}

	for (int q = 0; q < ncand; q++)
	{
		int			j = nn->cand[q];
		double		c = km_exact_cost(xe, nn->centroids + (size_t) j * d,
									  nn->cosine ? nn->cnorm[j] : 0.0, d, nn->cosine);

		if (label < 0 || c < best_cost)
		{
			label = j;
			best_cost = c;
		}
	}
	*cost = best_cost;
	return label;
}
