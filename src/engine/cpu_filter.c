/*
 * cpu_filter.c
 *	  The float32 filter: f_ij = |c'_j|^2 - 2 x'_i.c'_j for a tile of rows
 *	  against all centroids, folded straight into each row's two best values.
 *
 * This is a small GEMM of our own rather than a BLAS call: the engine runs
 * it from several threads at once, which Debian's single-threaded OpenBLAS
 * does not survive (it shares its work buffers between calls without a
 * lock), and fusing the top-2 into the GEMM's epilogue means the tile x k
 * matrix is never stored at all.
 *
 * Centroids are packed once per pass into panels of 16, d rows of 16 floats
 * each (scaled by -2, padded with zeros and +inf norms).  The micro-kernel
 * computes 6 rows x 16 centroids with 12 accumulators, over the whole of d:
 * each value is one chain of fused multiply-adds in index order, so it does
 * not depend on which rows share the block or where the tile starts, and
 * recomputing a row later gives the very same value.  Each row keeps, per
 * lane of 8, the best value, its centroid and the second best; the lanes are
 * merged once all panels are done.
 *
 * The AVX2+FMA kernel is chosen at run time when the CPU has it (as pgvector
 * does for its distance functions); the portable kernel is plain C.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define KM_CPU_X86 1
#include <immintrin.h>
#endif

/*
 * Whether this CPU (and OS) can run the AVX2+FMA code paths.
 */
int
km_cpu_have_avx2(void)
{
#ifdef KM_CPU_X86
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

/*
 * Pack k vectors (row-major, k x d) into 16-wide panels of -2 c, padded with
 * zero columns; their squared norms go to cnp, padded with +inf so that a
 * padding column never wins.
 */
void
km_cpu_filter_pack(const float *c, const float *cn, int k, int d,
				   float *panels, float *cnp)
{
	int			kpad = (k + KM_CPU_NR - 1) / KM_CPU_NR * KM_CPU_NR;

	for (int p = 0; p < kpad / KM_CPU_NR; p++)
	{
		float	   *bp = panels + (size_t) p * KM_CPU_NR * d;

		for (int q = 0; q < KM_CPU_NR; q++)
		{
			int			j = p * KM_CPU_NR + q;

			if (j < k)
			{
				const float *cj = c + (size_t) j * d;

				for (int l = 0; l < d; l++)
					bp[(size_t) l * KM_CPU_NR + q] = -2.0f * cj[l];
				cnp[j] = cn[j];
			}
			else
			{
				for (int l = 0; l < d; l++)
					bp[(size_t) l * KM_CPU_NR + q] = 0.0f;
				cnp[j] = INFINITY;
			}
		}
	}
}

/* A lane state before any value: +inf, +inf, centroid 0. */
static const km_cpu_lanes km_cpu_lanes_init = {
	{INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY},
	{INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY},
	{0, 0, 0, 0, 0, 0, 0, 0}
};

/*
 * Fold value v of centroid j into a row's lane state (best, second, label):
 * a value equal to the best becomes the second, so ties show as a zero gap.
 */
static inline void
km_cpu_lane_update(km_cpu_lanes *s, int lane, float v, int j)
{
	if (v < s->second[lane])
	{
		if (v < s->best[lane])
		{
			s->second[lane] = s->best[lane];
			s->best[lane] = v;
			s->label[lane] = j;
		}
		else
			s->second[lane] = v;
	}
}

/*
 * Portable micro-kernel: 6 rows x one panel of 16 centroids over all of d.
 * out NULL: fold the values into the rows' lane states; else store them
 * (16 per row) at out[r].
 */
static void
km_cpu_block_c(const float *const *x, const float *bp, int d, const float *cnp,
			   int j0, int first, km_cpu_lanes *const *state, float *const *out)
{
	float		acc[KM_CPU_MR][KM_CPU_NR];

	memset(acc, 0, sizeof(acc));
	for (int l = 0; l < d; l++)
	{
		const float *b = bp + (size_t) l * KM_CPU_NR;

		for (int r = 0; r < KM_CPU_MR; r++)
		{
			float		a = x[r][l];

			for (int q = 0; q < KM_CPU_NR; q++)
				acc[r][q] += a * b[q];
		}
	}
	for (int r = 0; r < KM_CPU_MR; r++)
	{
		if (out == NULL && first)
			*state[r] = km_cpu_lanes_init;
		for (int q = 0; q < KM_CPU_NR; q++)
		{
			float		v = acc[r][q] + cnp[q];

			if (out != NULL)
				out[r][q] = v;
			else
				km_cpu_lane_update(state[r], q & 7, v, j0 + q);
		}
	}
}

#ifdef KM_CPU_X86

/*
 * Fold a row's 16 new values (v0: centroids j0..j0+7, v1: j0+8..j0+15)
 * into its lane state s (best, second, label; 8 lanes each).  The two
 * halves are first merged in registers (ties keep the lower centroid), then
 * with the state, which is only read when an earlier panel wrote it.  The
 * second best of {b <= s, b2 <= s2} is min(max(b, b2), min(s, s2)).
 */
#define KM_EPILOGUE(r, c0, c1) \
	do { \
		__m256		v0_ = _mm256_add_ps(c0, cn0); \
		__m256		v1_ = _mm256_add_ps(c1, cn1); \
		if (out != NULL) \
		{ \
			_mm256_storeu_ps(out[r], v0_); \
			_mm256_storeu_ps(out[r] + 8, v1_); \
		} \
		else \
		{ \
			km_cpu_lanes *s_ = state[r]; \
			__m256		m_ = _mm256_cmp_ps(v1_, v0_, _CMP_LT_OQ); \
			__m256		b2_ = _mm256_min_ps(v1_, v0_); \
			__m256		s2_ = _mm256_max_ps(v0_, v1_); \
			__m256		i2_ = _mm256_blendv_ps(jv0, jv1, m_); \
			if (!first) \
			{ \
				__m256		b_ = _mm256_load_ps(s_->best); \
				__m256		sc_ = _mm256_load_ps(s_->second); \
				__m256		i_ = _mm256_castsi256_ps(_mm256_load_si256((const __m256i *) s_->label)); \
				m_ = _mm256_cmp_ps(b2_, b_, _CMP_LT_OQ); \
				s2_ = _mm256_min_ps(_mm256_max_ps(b_, b2_), _mm256_min_ps(sc_, s2_)); \
				b2_ = _mm256_blendv_ps(b_, b2_, m_); \
				i2_ = _mm256_blendv_ps(i_, i2_, m_); \
			} \
			_mm256_store_ps(s_->best, b2_); \
			_mm256_store_ps(s_->second, s2_); \
			_mm256_store_si256((__m256i *) s_->label, _mm256_castps_si256(i2_)); \
		} \
	} while (0)

/*
 * The AVX2+FMA micro-kernel, same contract as km_cpu_block_c.  Twelve
 * accumulators, two panel loads and six broadcasts per step of d: the FMA
 * units, not the loads, set the pace.
 */
__attribute__((target("avx2,fma")))
static void
km_cpu_block_avx2(const float *const *x, const float *bp, int d, const float *cnp,
				  int j0, int first, km_cpu_lanes *const *state, float *const *out)
{
	const float *x0 = x[0],
			   *x1 = x[1],
			   *x2 = x[2],
			   *x3 = x[3],
			   *x4 = x[4],
			   *x5 = x[5];
	__m256		c00 = _mm256_setzero_ps(),
				c01 = _mm256_setzero_ps(),
				c10 = _mm256_setzero_ps(),
				c11 = _mm256_setzero_ps(),
				c20 = _mm256_setzero_ps(),
				c21 = _mm256_setzero_ps(),
				c30 = _mm256_setzero_ps(),
				c31 = _mm256_setzero_ps(),
				c40 = _mm256_setzero_ps(),
				c41 = _mm256_setzero_ps(),
				c50 = _mm256_setzero_ps(),
				c51 = _mm256_setzero_ps();
	__m256		cn0,
				cn1,
				jv0,
				jv1;

	for (int l = 0; l < d; l++)
	{
		__m256		b0 = _mm256_load_ps(bp);
		__m256		b1 = _mm256_load_ps(bp + 8);
		__m256		a;

		bp += KM_CPU_NR;
		a = _mm256_broadcast_ss(x0 + l);
		c00 = _mm256_fmadd_ps(a, b0, c00);
		c01 = _mm256_fmadd_ps(a, b1, c01);
		a = _mm256_broadcast_ss(x1 + l);
		c10 = _mm256_fmadd_ps(a, b0, c10);
		c11 = _mm256_fmadd_ps(a, b1, c11);
		a = _mm256_broadcast_ss(x2 + l);
		c20 = _mm256_fmadd_ps(a, b0, c20);
		c21 = _mm256_fmadd_ps(a, b1, c21);
		a = _mm256_broadcast_ss(x3 + l);
		c30 = _mm256_fmadd_ps(a, b0, c30);
		c31 = _mm256_fmadd_ps(a, b1, c31);
		a = _mm256_broadcast_ss(x4 + l);
		c40 = _mm256_fmadd_ps(a, b0, c40);
		c41 = _mm256_fmadd_ps(a, b1, c41);
		a = _mm256_broadcast_ss(x5 + l);
		c50 = _mm256_fmadd_ps(a, b0, c50);
		c51 = _mm256_fmadd_ps(a, b1, c51);
	}

	cn0 = _mm256_loadu_ps(cnp);
	cn1 = _mm256_loadu_ps(cnp + 8);
	jv0 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32(j0),
											   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
	jv1 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32(j0),
											   _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)));
	KM_EPILOGUE(0, c00, c01);
	KM_EPILOGUE(1, c10, c11);
	KM_EPILOGUE(2, c20, c21);
	KM_EPILOGUE(3, c30, c31);
	KM_EPILOGUE(4, c40, c41);
	KM_EPILOGUE(5, c50, c51);
}

#endif							/* KM_CPU_X86 */

/*
 * Run the micro-kernel of this state (AVX2 or portable).
 */
static inline void
km_cpu_block(const km_cpu_state *st, const float *const *x, const float *bp,
			 const float *cnp, int j0, int first, km_cpu_lanes *const *state,
			 float *const *out)
{
#ifdef KM_CPU_X86
	if (st->avx2)
	{
		km_cpu_block_avx2(x, bp, st->d, cnp, j0, first, state, out);
		return;
	}
#endif
	km_cpu_block_c(x, bp, st->d, cnp, j0, first, state, out);
}

/*
 * Merge a row's 8 lanes: the best value (lowest centroid among equal
 * values), its centroid, and the second best of all values.
 */
static void
km_cpu_lanes_merge_c(const km_cpu_lanes *s, float *best, float *second,
					 int32_t *label)
{
	int			win = 0;
	float		sec;

	for (int q = 1; q < 8; q++)
		if (s->best[q] < s->best[win] ||
			(s->best[q] == s->best[win] && s->label[q] < s->label[win]))
			win = q;
	sec = s->second[win];
	for (int q = 0; q < 8; q++)
	{
		if (q != win && s->best[q] < sec)
			sec = s->best[q];
		if (s->second[q] < sec)
			sec = s->second[q];
	}
	*best = s->best[win];
	*second = sec;
	*label = s->label[win];
}

#ifdef KM_CPU_X86

/* The minimum of 8 lanes, in every lane. */
__attribute__((target("avx2,fma")))
static inline __m256
km_cpu_hmin(__m256 v)
{
	v = _mm256_min_ps(v, _mm256_permute2f128_ps(v, v, 1));
	v = _mm256_min_ps(v, _mm256_shuffle_ps(v, v, 0x4e));
	return _mm256_min_ps(v, _mm256_shuffle_ps(v, v, 0xb1));
}

/*
 * km_cpu_lanes_merge_c without branches, for nt rows: the winning lane is
 * the one holding the minimum with the lowest centroid; the second best is
 * the minimum of all seconds and of the other lanes' bests.
 */
__attribute__((target("avx2,fma")))
static void
km_cpu_lanes_merge_avx2(const km_cpu_lanes *lanes, int nt, float *best,
						float *second, int32_t *label)
{
	const __m256i big = _mm256_set1_epi32(INT32_MAX);
	const __m256 inf = _mm256_set1_ps(INFINITY);

	for (int i = 0; i < nt; i++)
	{
		const km_cpu_lanes *s = &lanes[i];
		__m256		b = _mm256_load_ps(s->best);
		__m256		sc = _mm256_load_ps(s->second);
		__m256i		id = _mm256_load_si256((const __m256i *) s->label);
		__m256		m = km_cpu_hmin(b);
		__m256		eq = _mm256_cmp_ps(b, m, _CMP_EQ_OQ);
		__m256i		cid = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(big),
															   _mm256_castsi256_ps(id), eq));
		__m256		win;

		cid = _mm256_min_epi32(cid, _mm256_permute2x128_si256(cid, cid, 1));
		cid = _mm256_min_epi32(cid, _mm256_shuffle_epi32(cid, 0x4e));
		cid = _mm256_min_epi32(cid, _mm256_shuffle_epi32(cid, 0xb1));
		win = _mm256_and_ps(eq, _mm256_castsi256_ps(_mm256_cmpeq_epi32(id, cid)));
		sc = km_cpu_hmin(_mm256_min_ps(sc, _mm256_blendv_ps(b, inf, win)));
		best[i] = _mm256_cvtss_f32(m);
		second[i] = _mm256_cvtss_f32(sc);
		label[i] = _mm256_cvtsi256_si32(cid);
	}
}

/*
 * The filter for very small d (a few values per row), where a 6 x 16 block
 * would spend more on its epilogue than on arithmetic: eight rows sit in the
 * lanes of a vector and the loop runs over centroids, so each lane ends with
 * its own row's best, second best and label and nothing is left to merge.
 * Each value is the same chain as in km_cpu_block_avx2 (fused multiply-adds
 * from zero in index order, then + |c'|^2), so the values are identical.
 */
__attribute__((target("avx2,fma")))
static void
km_cpu_top2_rows_avx2(const km_cpu_state *st, const float *a, int nt,
					  float *best, float *second, int32_t *label)
{
	const int	d = st->d;
	const int	k = st->k;

	for (int r0 = 0; r0 < nt; r0 += 8)
	{
		__m256		xl[KM_CPU_SMALL_D];
		__m256		b = _mm256_set1_ps(INFINITY);
		__m256		s = b;
		__m256		id = _mm256_setzero_ps();
		__m256i		rows = _mm256_add_epi32(_mm256_set1_epi32(r0),
											_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
		float		ob[8],
					os[8];
		int32_t		ol[8];

		/* rows past the tile repeat its last row */
		rows = _mm256_min_epi32(rows, _mm256_set1_epi32(nt - 1));
		rows = _mm256_mullo_epi32(rows, _mm256_set1_epi32(d));
		for (int l = 0; l < d; l++)
			xl[l] = _mm256_i32gather_ps(a + l, rows, 4);

		for (int j = 0; j < k; j++)
		{
			const float *bj = st->panels + (size_t) (j / KM_CPU_NR) * KM_CPU_NR * d +
				j % KM_CPU_NR;
			__m256		v = _mm256_setzero_ps();
			__m256		m;

			for (int l = 0; l < d; l++)
				v = _mm256_fmadd_ps(xl[l], _mm256_broadcast_ss(bj + (size_t) l * KM_CPU_NR), v);
			v = _mm256_add_ps(v, _mm256_broadcast_ss(st->cnp + j));
			m = _mm256_cmp_ps(v, b, _CMP_LT_OQ);
			s = _mm256_min_ps(s, _mm256_max_ps(b, v));
			b = _mm256_min_ps(b, v);
			id = _mm256_blendv_ps(id, _mm256_castsi256_ps(_mm256_set1_epi32(j)), m);
		}

		_mm256_storeu_ps(ob, b);
		_mm256_storeu_ps(os, s);
		_mm256_storeu_si256((__m256i *) ol, _mm256_castps_si256(id));
		for (int r = 0; r < 8 && r0 + r < nt; r++)
		{
			best[r0 + r] = ob[r];
			second[r0 + r] = os[r];
			label[r0 + r] = ol[r];
		}
	}
}

#endif							/* KM_CPU_X86 */

/*
 * Best and second-best filter value, and the best centroid, of nt rows of
 * a tile (a: row-major, stride d) against the packed centroids of the pass,
 * into wk->best, wk->second and wk->label.
 */
void
km_cpu_filter_top2(const km_cpu_state *st, km_cpu_worker *wk, const float *a, int nt)
{
	const int	d = st->d;
	const float *x[KM_CPU_MR];
	km_cpu_lanes *state[KM_CPU_MR];

#ifdef KM_CPU_X86
	if (st->avx2 && d <= KM_CPU_SMALL_D)
	{
		km_cpu_top2_rows_avx2(st, a, nt, wk->best, wk->second, wk->label);
		return;
	}
#endif
	for (int p = 0; p < st->npanels; p++)
	{
		const float *bp = st->panels + (size_t) p * KM_CPU_NR * d;
		const float *cnp = st->cnp + p * KM_CPU_NR;

		for (int r0 = 0; r0 < nt; r0 += KM_CPU_MR)
		{
			/* rows past the tile repeat its last row into a scratch state */
			for (int r = 0; r < KM_CPU_MR; r++)
			{
				int			i = r0 + r < nt ? r0 + r : nt - 1;

				x[r] = a + (size_t) i * d;
				state[r] = r0 + r < nt ? &wk->lanes[i] : wk->scratch;
			}
			km_cpu_block(st, x, bp, cnp, p * KM_CPU_NR, p == 0, state, NULL);
		}
	}

#ifdef KM_CPU_X86
	if (st->avx2)
	{
		km_cpu_lanes_merge_avx2(wk->lanes, nt, wk->best, wk->second, wk->label);
		return;
	}
#endif
	for (int i = 0; i < nt; i++)
		km_cpu_lanes_merge_c(&wk->lanes[i], &wk->best[i], &wk->second[i],
							 &wk->label[i]);
}

/*
 * Filter values of up to 6 rows (pointers in x) against panels
 * [p0, p1) of packed vectors, stored 16 per panel per row at out[r]
 * (rows beyond nrows may be anything).
 */
void
km_cpu_filter_values(const km_cpu_state *st, const float *const *rows, int nrows,
					 const float *panels, const float *cnp, int p0, int p1,
					 float *const *out)
{
	const int	d = st->d;
	const float *x[KM_CPU_MR];
	float	   *o[KM_CPU_MR];

	for (int r = 0; r < KM_CPU_MR; r++)
		x[r] = rows[r < nrows ? r : nrows - 1];
	for (int p = p0; p < p1; p++)
	{
		for (int r = 0; r < KM_CPU_MR; r++)
			o[r] = out[r] + (size_t) (p - p0) * KM_CPU_NR;
		km_cpu_block(st, x, panels + (size_t) p * KM_CPU_NR * d,
					 cnp + p * KM_CPU_NR, p * KM_CPU_NR, 0, NULL, o);
	}
}
