/*
 * kmedoids_kernels.c
 *	  The distance kernel of the k-medoids engine: a block of rows against a
 *	  block of packed rows, every distance exactly kmd_pair().
 *
 * Dense metrics spend their time in one loop, over the coordinates of
 * KMD_MR rows against KMD_NR packed rows at once: the packed rows are
 * stored converted to double and interleaved (coordinate-major, KMD_NR
 * values per coordinate), so one AVX2 load brings four of them, and each
 * row's coordinate is broadcast.  Every lane does the scalar sequence of
 * kmd_metric.h for its own pair (subtract, square, add; or multiply, add;
 * no fused multiply-add), so the lanes give exactly the bits of kmd_pair():
 * vectorising across pairs, never across coordinates, is what keeps the
 * kernel exact.  The portable version runs the same loop in plain C.
 *
 * sqfd has no such structure (signatures of different lengths, an exp per
 * pair of features) and is computed pair by pair.
 */
#include "kmedoids_internal.h"

#include <math.h>
#include <string.h>

#include "kmd_metric.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KMD_X86 1
#endif

/* What the inner loop accumulates. */
#define KMD_KIND_SQ		0			/* (x - y)^2: l2, sqeuclidean */
#define KMD_KIND_ABS	1			/* |x - y|: l1 */
#define KMD_KIND_DOT	2			/* x * y: cosine */

void
kmd_space_init(kmd_space *sp, int metric, int d, double alpha)
{
	sp->metric = metric;
	sp->d = d;
	sp->alpha = alpha;
	sp->avx2 = km_cpu_have_avx2();
}

/* Bytes of a pack's panels. */
size_t
kmd_pack_bytes(int d)
{
	return sizeof(double) * (size_t) KMD_TILE_B * (size_t) d;
}

/*
 * Convert pk's rows into interleaved double panels (dense metrics), zero
 * beyond the last row.
 */
void
kmd_pack_rows(const kmd_space *sp, kmd_pack *pk)
{
	const int	d = sp->d;
	int			npanels = (pk->r.n + KMD_NR - 1) / KMD_NR;

	if (sp->metric == KMD_SQFD)
		return;
	for (int p = 0; p < npanels; p++)
	{
		double	   *panel = pk->panel + (size_t) p * d * KMD_NR;

		for (int q = 0; q < KMD_NR; q++)
		{
			int			j = p * KMD_NR + q;

			if (j < pk->r.n)
			{
				const float *y = pk->r.row[j];

				for (int i = 0; i < d; i++)
					panel[(size_t) i * KMD_NR + q] = (double) y[i];
			}
			else
				for (int i = 0; i < d; i++)
					panel[(size_t) i * KMD_NR + q] = 0.0;
		}
	}
}

/*
 * KMD_MR rows (x[r], the last ones repeated when there are fewer) against
 * one panel: acc[r * KMD_NR + q] gets the kind's sum for row r and packed
 * row q.  Portable C.
 */
static void
kmd_micro_c(int kind, const float *const *x, const double *panel, int d, double *acc)
{
	for (int t = 0; t < KMD_MR * KMD_NR; t++)
		acc[t] = 0.0;
	for (int i = 0; i < d; i++)
	{
		const double *p = panel + (size_t) i * KMD_NR;

		for (int r = 0; r < KMD_MR; r++)
		{
			double		xi = (double) x[r][i];
			double	   *a = acc + r * KMD_NR;

			for (int q = 0; q < KMD_NR; q++)
			{
				double		t;

				if (kind == KMD_KIND_DOT)
					a[q] = a[q] + xi * p[q];
				else
				{
					t = xi - p[q];
					a[q] = kind == KMD_KIND_SQ ? a[q] + t * t : a[q] + fabs(t);
				}
			}
		}
	}
}

#ifdef KMD_X86
/*
 * kmd_micro_c with AVX2: eight accumulators of four lanes, each lane one
 * pair.  kind is a constant in every call (the compiler specialises).
 */
__attribute__((target("avx2")))
static inline void
kmd_micro_avx2_kind(const int kind, const float *const *x, const double *panel, int d,
					double *acc)
{
	const __m256d sign = _mm256_set1_pd(-0.0);
	__m256d		a00 = _mm256_setzero_pd(),
				a01 = _mm256_setzero_pd();
	__m256d		a10 = _mm256_setzero_pd(),
				a11 = _mm256_setzero_pd();
	__m256d		a20 = _mm256_setzero_pd(),
				a21 = _mm256_setzero_pd();
	__m256d		a30 = _mm256_setzero_pd(),
				a31 = _mm256_setzero_pd();
	const float *x0 = x[0],
			   *x1 = x[1],
			   *x2 = x[2],
			   *x3 = x[3];

#define KMD_STEP(acc0, acc1, xv) \
	do { \
		if (kind == KMD_KIND_DOT) \
		{ \
			acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(xv, p0)); \
			acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(xv, p1)); \
		} \
		else \
		{ \
			__m256d t0 = _mm256_sub_pd(xv, p0); \
			__m256d t1 = _mm256_sub_pd(xv, p1); \
			if (kind == KMD_KIND_SQ) \
			{ \
				acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(t0, t0)); \
				acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(t1, t1)); \
			} \
			else \
			{ \
				acc0 = _mm256_add_pd(acc0, _mm256_andnot_pd(sign, t0)); \
				acc1 = _mm256_add_pd(acc1, _mm256_andnot_pd(sign, t1)); \
			} \
		} \
	} while (0)

	for (int i = 0; i < d; i++)
	{
		const double *p = panel + (size_t) i * KMD_NR;
		__m256d		p0 = _mm256_loadu_pd(p);
		__m256d		p1 = _mm256_loadu_pd(p + 4);
		__m256d		v0 = _mm256_set1_pd((double) x0[i]);
		__m256d		v1 = _mm256_set1_pd((double) x1[i]);
		__m256d		v2 = _mm256_set1_pd((double) x2[i]);
		__m256d		v3 = _mm256_set1_pd((double) x3[i]);

		KMD_STEP(a00, a01, v0);
		KMD_STEP(a10, a11, v1);
		KMD_STEP(a20, a21, v2);
		KMD_STEP(a30, a31, v3);
	}
#undef KMD_STEP
	_mm256_storeu_pd(acc + 0, a00);
	_mm256_storeu_pd(acc + 4, a01);
	_mm256_storeu_pd(acc + 8, a10);
	_mm256_storeu_pd(acc + 12, a11);
	_mm256_storeu_pd(acc + 16, a20);
	_mm256_storeu_pd(acc + 20, a21);
	_mm256_storeu_pd(acc + 24, a30);
	_mm256_storeu_pd(acc + 28, a31);
}

__attribute__((target("avx2")))
static void
kmd_micro_avx2(int kind, const float *const *x, const double *panel, int d, double *acc)
{
	if (kind == KMD_KIND_SQ)
		kmd_micro_avx2_kind(KMD_KIND_SQ, x, panel, d, acc);
	else if (kind == KMD_KIND_ABS)
		kmd_micro_avx2_kind(KMD_KIND_ABS, x, panel, d, acc);
	else
		kmd_micro_avx2_kind(KMD_KIND_DOT, x, panel, d, acc);
}
#endif

/*
 * The distances of a's rows to pk's: out[i * KMD_TILE_B + j] = kmd_pair of
 * a row i and packed row j.
 */
void
kmd_block(const kmd_space *sp, const kmd_rows *a, const kmd_pack *pk, double *out)
{
	const int	d = sp->d;
	const int	metric = sp->metric;
	const int	npanels = (pk->r.n + KMD_NR - 1) / KMD_NR;
	int			kind;

	if (metric == KMD_SQFD)
	{
		for (int i = 0; i < a->n; i++)
			for (int j = 0; j < pk->r.n; j++)
				out[(size_t) i * KMD_TILE_B + j] =
					kmd_pair(metric, a->row[i], a->m[i], a->aux[i],
							 pk->r.row[j], pk->r.m[j], pk->r.aux[j], d, sp->alpha);
		return;
	}

	kind = metric == KMD_L1 ? KMD_KIND_ABS :
		metric == KMD_COSINE ? KMD_KIND_DOT : KMD_KIND_SQ;
	for (int i0 = 0; i0 < a->n; i0 += KMD_MR)
	{
		const float *x[KMD_MR];
		int			mr = a->n - i0 < KMD_MR ? a->n - i0 : KMD_MR;

		for (int r = 0; r < KMD_MR; r++)
			x[r] = a->row[i0 + (r < mr ? r : mr - 1)];
		for (int p = 0; p < npanels; p++)
		{
			double		acc[KMD_MR * KMD_NR];
			const double *panel = pk->panel + (size_t) p * d * KMD_NR;

#ifdef KMD_X86
			if (sp->avx2)
				kmd_micro_avx2(kind, x, panel, d, acc);
			else
#endif
				kmd_micro_c(kind, x, panel, d, acc);

			for (int r = 0; r < mr; r++)
				for (int q = 0; q < KMD_NR && p * KMD_NR + q < pk->r.n; q++)
				{
					int			j = p * KMD_NR + q;
					double		s = acc[r * KMD_NR + q];
					double		v;

					if (metric == KMD_L2)
						v = km_dsqrt(s);
					else if (metric == KMD_COSINE)
						v = kmd_cosine_from_dot(s, a->aux[i0 + r], pk->r.aux[j]);
					else
						v = s;
					out[(size_t) (i0 + r) * KMD_TILE_B + j] = v;
				}
		}
	}
}
