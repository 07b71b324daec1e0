/*
 * kmedoids_kernels.c
 *	  The distance kernel of the k-medoids engine: a block of rows against a
 *	  block of packed rows, every distance exactly kmd_pair().
 *
 * Dense metrics spend their time in one loop, over the coordinates of
 * KMD_MR rows against KMD_NR packed rows at once: the packed rows are
 * stored converted to double and interleaved (coordinate-major, KMD_NR
 * values per coordinate), so one AVX2 load brings four of them; the KMD_MR
 * rows are converted too, interleaved the same way, so that each of their
 * coordinates is one broadcast load.  Every lane does the scalar sequence of
 * kmd_metric.h for its own pair: for the dot products of l2, sqeuclidean
 * and cosine a fused multiply-add per coordinate (the product of two floats
 * is exact in double, so it rounds as the scalar multiply-then-add does),
 * for l1 subtract, absolute value, add.  Vectorising across pairs, never
 * across coordinates, is what keeps the kernel exact; the portable version
 * runs the same loop in plain C.
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
#define KMD_KIND_DOT	0			/* x * y: l2, sqeuclidean, cosine */
#define KMD_KIND_ABS	1			/* |x - y|: l1 */

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
 * KMD_MR rows, interleaved in xb (coordinate i of row r at xb[i * KMD_MR +
 * r]), against one panel: acc[r * KMD_NR + q] gets the kind's sum for row r
 * and packed row q.  Portable C.
 */
static void
kmd_micro_c(int kind, const double *xb, const double *panel, int d, double *acc)
{
	for (int t = 0; t < KMD_MR * KMD_NR; t++)
		acc[t] = 0.0;
	for (int i = 0; i < d; i++)
	{
		const double *p = panel + (size_t) i * KMD_NR;

		for (int r = 0; r < KMD_MR; r++)
		{
			double		xi = xb[(size_t) i * KMD_MR + r];
			double	   *a = acc + r * KMD_NR;

			for (int q = 0; q < KMD_NR; q++)
			{
				if (kind == KMD_KIND_DOT)
					a[q] = a[q] + xi * p[q];
				else
					a[q] = a[q] + fabs(xi - p[q]);
			}
		}
	}
}

#ifdef KMD_X86
/* kmd_micro_c for dot products: eight accumulators of four lanes, FMA. */
__attribute__((target("avx2,fma")))
static void
kmd_micro_dot_avx2(const double *xb, const double *panel, int d, double *acc)
{
	__m256d		a00 = _mm256_setzero_pd(),
				a01 = _mm256_setzero_pd();
	__m256d		a10 = _mm256_setzero_pd(),
				a11 = _mm256_setzero_pd();
	__m256d		a20 = _mm256_setzero_pd(),
				a21 = _mm256_setzero_pd();
	__m256d		a30 = _mm256_setzero_pd(),
				a31 = _mm256_setzero_pd();

	for (int i = 0; i < d; i++)
	{
		const double *p = panel + (size_t) i * KMD_NR;
		const double *x = xb + (size_t) i * KMD_MR;
		__m256d		p0 = _mm256_loadu_pd(p);
		__m256d		p1 = _mm256_loadu_pd(p + 4);
		__m256d		v;

		v = _mm256_broadcast_sd(x);
		a00 = _mm256_fmadd_pd(v, p0, a00);
		a01 = _mm256_fmadd_pd(v, p1, a01);
		v = _mm256_broadcast_sd(x + 1);
		a10 = _mm256_fmadd_pd(v, p0, a10);
		a11 = _mm256_fmadd_pd(v, p1, a11);
		v = _mm256_broadcast_sd(x + 2);
		a20 = _mm256_fmadd_pd(v, p0, a20);
		a21 = _mm256_fmadd_pd(v, p1, a21);
		v = _mm256_broadcast_sd(x + 3);
		a30 = _mm256_fmadd_pd(v, p0, a30);
		a31 = _mm256_fmadd_pd(v, p1, a31);
	}
	_mm256_storeu_pd(acc + 0, a00);
	_mm256_storeu_pd(acc + 4, a01);
	_mm256_storeu_pd(acc + 8, a10);
	_mm256_storeu_pd(acc + 12, a11);
	_mm256_storeu_pd(acc + 16, a20);
	_mm256_storeu_pd(acc + 20, a21);
	_mm256_storeu_pd(acc + 24, a30);
	_mm256_storeu_pd(acc + 28, a31);
}

/* kmd_micro_c for l1: subtract, clear the sign, add. */
__attribute__((target("avx2")))
static void
kmd_micro_abs_avx2(const double *xb, const double *panel, int d, double *acc)
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

#define KMD_ABS_STEP(acc0, acc1, xv) \
	do { \
		acc0 = _mm256_add_pd(acc0, _mm256_andnot_pd(sign, _mm256_sub_pd(xv, p0))); \
		acc1 = _mm256_add_pd(acc1, _mm256_andnot_pd(sign, _mm256_sub_pd(xv, p1))); \
	} while (0)

	for (int i = 0; i < d; i++)
	{
		const double *p = panel + (size_t) i * KMD_NR;
		const double *x = xb + (size_t) i * KMD_MR;
		__m256d		p0 = _mm256_loadu_pd(p);
		__m256d		p1 = _mm256_loadu_pd(p + 4);

		KMD_ABS_STEP(a00, a01, _mm256_broadcast_sd(x));
		KMD_ABS_STEP(a10, a11, _mm256_broadcast_sd(x + 1));
		KMD_ABS_STEP(a20, a21, _mm256_broadcast_sd(x + 2));
		KMD_ABS_STEP(a30, a31, _mm256_broadcast_sd(x + 3));
	}
#undef KMD_ABS_STEP
	_mm256_storeu_pd(acc + 0, a00);
	_mm256_storeu_pd(acc + 4, a01);
	_mm256_storeu_pd(acc + 8, a10);
	_mm256_storeu_pd(acc + 12, a11);
	_mm256_storeu_pd(acc + 16, a20);
	_mm256_storeu_pd(acc + 20, a21);
	_mm256_storeu_pd(acc + 24, a30);
	_mm256_storeu_pd(acc + 28, a31);
}
#endif

/* Bytes of kmd_block's scratch. */
size_t
kmd_block_scratch_bytes(int d)
{
	return sizeof(double) * KMD_MR * (size_t) d;
}

/*
 * The distances of a's rows to pk's: out[i * KMD_TILE_B + j] = kmd_pair of
 * a row i and packed row j.  xb: kmd_block_scratch_bytes(d) of scratch.
 */
void
kmd_block(const kmd_space *sp, const kmd_rows *a, const kmd_pack *pk, double *out,
		  double *xb)
{
	const int	d = sp->d;
	const int	metric = sp->metric;
	const int	npanels = (pk->r.n + KMD_NR - 1) / KMD_NR;
	const int	kind = metric == KMD_L1 ? KMD_KIND_ABS : KMD_KIND_DOT;

	if (metric == KMD_SQFD)
	{
		for (int i = 0; i < a->n; i++)
			for (int j = 0; j < pk->r.n; j++)
				out[(size_t) i * KMD_TILE_B + j] =
					kmd_pair(metric, a->row[i], a->m[i], a->aux[i],
							 pk->r.row[j], pk->r.m[j], pk->r.aux[j], d, sp->alpha);
		return;
	}

	for (int i0 = 0; i0 < a->n; i0 += KMD_MR)
	{
		int			mr = a->n - i0 < KMD_MR ? a->n - i0 : KMD_MR;

		/* the rows, interleaved (the last one repeated to fill the tile) */
		for (int r = 0; r < KMD_MR; r++)
		{
			const float *x = a->row[i0 + (r < mr ? r : mr - 1)];

			for (int i = 0; i < d; i++)
				xb[(size_t) i * KMD_MR + r] = (double) x[i];
		}
		for (int p = 0; p < npanels; p++)
		{
			double		acc[KMD_MR * KMD_NR];
			const double *panel = pk->panel + (size_t) p * d * KMD_NR;

#ifdef KMD_X86
			if (sp->avx2 && kind == KMD_KIND_DOT)
				kmd_micro_dot_avx2(xb, panel, d, acc);
			else if (sp->avx2)
				kmd_micro_abs_avx2(xb, panel, d, acc);
			else
#endif
				kmd_micro_c(kind, xb, panel, d, acc);

			for (int r = 0; r < mr; r++)
				for (int q = 0; q < KMD_NR && p * KMD_NR + q < pk->r.n; q++)
				{
					int			j = p * KMD_NR + q;
					double		s = acc[r * KMD_NR + q];
					double		ax = a->aux[i0 + r];
					double		ay = pk->r.aux[j];
					double		v;

					if (metric == KMD_L2)
						v = km_dsqrt(kmd_sqdist_from_dot(s, ax, ay));
					else if (metric == KMD_SQEUCLIDEAN)
						v = kmd_sqdist_from_dot(s, ax, ay);
					else if (metric == KMD_COSINE)
						v = kmd_cosine_from_dot(s, ax, ay);
					else
						v = s;
					out[(size_t) (i0 + r) * KMD_TILE_B + j] = v;
				}
		}
	}
}
