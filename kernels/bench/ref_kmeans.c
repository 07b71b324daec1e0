/*
 * ref_kmeans.c
 *	  Plain C reference of the engine semantics (src/include/kmeans_engine.h,
 *	  the rules of src/engine/cpu_lloyd.c and cpu_seed.c), for the GPU
 *	  engine's harness (bench_engine.cu).
 *
 * Labels are km_exact_nearest's, found fast: a double-precision distance
 * to every centroid (any order, error ~1e-15 relative) picks the few
 * centroids within a generous bound of the minimum, and km_exact_cost
 * settles those.  Everything else is the straightforward loop: sums in
 * row order, re-seeding of empty clusters with the farthest rows, the
 * cosine mean normalised in double.  k-means++ computes D2 and the
 * potentials as the GPU does (seed_pp.h: four fused chains of (x - c)^2,
 * integer sums), so seeds can be compared bit for bit.  Built with
 * -ffp-contract=off and -mfma (fmaf is one instruction).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_engine.h"
#include "km_exact.h"
#include "km_hash.h"
#include "ref_kmeans.h"
#include "seed/seed_pp.h"

/* x . c in double, eight independent sums (vectorises without reassociation). */
static double
ref_dot(const float *x, const float *c, int d)
{
	double		s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int			i = 0;

	for (; i + 8 <= d; i += 8)
		for (int l = 0; l < 8; l++)
			s[l] += (double) x[i + l] * (double) c[i + l];
	for (; i < d; i++)
		s[0] += (double) x[i] * (double) c[i];
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* Exact labels (and costs) of rows xf (raw l2 / normalised cosine). */
void
ref_assign(const float *xf, int64_t n, int d, const float *C, int k, int cosine,
		   int32_t *labels, double *cost)
{
	double	   *cnorm = malloc(sizeof(double) * k);
	double	   *cn2 = malloc(sizeof(double) * k);
	double		cmax2 = 0.0;

	for (int j = 0; j < k; j++)
	{
		double		s = 0.0;

		for (int i = 0; i < d; i++)
			s += (double) C[(size_t) j * d + i] * C[(size_t) j * d + i];
		cn2[j] = s;
		if (s > cmax2)
			cmax2 = s;
		cnorm[j] = km_exact_norm(C + (size_t) j * d, d);
	}

#pragma omp parallel
	{
		double	   *a = malloc(sizeof(double) * k);

#pragma omp for schedule(dynamic, 64)
		for (int64_t r = 0; r < n; r++)
		{
			const float *x = xf + (size_t) r * d;
			double		xx = 0.0,
						amin = INFINITY,
						tol;
			int			best = -1;
			double		bc = 0.0;

			for (int i = 0; i < d; i++)
				xx += (double) x[i] * x[i];
			for (int j = 0; j < k; j++)
			{
				const double dot = ref_dot(x, C + (size_t) j * d, d);

				if (cosine)
					a[j] = cnorm[j] > 0.0 ? 1.0 - dot / cnorm[j] : -INFINITY;
				else
					a[j] = xx + cn2[j] - 2.0 * dot;
				if (a[j] < amin)
					amin = a[j];
			}
			/* generous: the double evaluation is off by ~d * 1e-16 (|x| + |c|)^2 */
			tol = 1e-12 * (double) (d + 8) * (xx + cmax2 + 1.0);
			for (int j = 0; j < k; j++)
				if (!(a[j] > amin + tol) || !isfinite(amin))
				{
					double		c = km_exact_cost(x, C + (size_t) j * d, cnorm[j], d, cosine);

					if (best < 0 || c < bc)
					{
						best = j;
						bc = c;
					}
				}
			labels[r] = best;
			if (cost != NULL)
				cost[r] = bc;
		}
		free(a);
	}
	free(cnorm);
	free(cn2);
}

/* Rows as the filter and sums see them (cosine: normalised copy). */
static float *
ref_filter_rows(const float *x, int64_t n, int d, int cosine)
{
	float	   *xf = malloc(sizeof(float) * n * d);

	memcpy(xf, x, sizeof(float) * n * d);
	if (cosine)
		for (int64_t r = 0; r < n; r++)
			km_normalize_row(xf + (size_t) r * d, xf + (size_t) r * d, d);
	return xf;
}

typedef struct
{
	double		key;
	int64_t		row;
} ref_cand;

static int
ref_cand_cmp(const void *a, const void *b)
{
	const ref_cand *p = a,
			   *q = b;

	if (p->key < q->key)
		return -1;
	if (p->key > q->key)
		return 1;
	return p->row < q->row ? -1 : p->row > q->row;
}

/*
 * The seeds of run `run` into C.  phis (NULL: not wanted), k + 1 entries:
 * phis[m] is k-means++'s potential with its first m seeds chosen (the sum of
 * w D2 as seed_pp.h adds it up, which the GPU engine reports with m seeds
 * done), phis[0] and phis[1] of a run with k = 1 and every entry of the
 * other seedings 0.
 */
static void
ref_seed(const float *xf, const float *W, const uint64_t *h, int64_t n, int d,
		 const km_params *p, int run, float *C, double *phis)
{
	const int	k = p->k;

	if (phis != NULL)
		for (int m = 0; m <= k; m++)
			phis[m] = 0.0;

	if (p->init == KM_INIT_EXPLICIT)
	{
		for (int j = 0; j < k; j++)
		{
			float	   *c = C + (size_t) j * d;

			if (p->metric == KM_METRIC_COSINE)
			{
				if (km_normalize_row(p->init_centroids + (size_t) j * d, c, d) == 0.0)
					memcpy(c, p->init_centroids + (size_t) j * d, sizeof(float) * d);
			}
			else
				memcpy(c, p->init_centroids + (size_t) j * d, sizeof(float) * d);
		}
		return;
	}
	if (p->init == KM_INIT_RANDOM)
	{
		ref_cand   *c = malloc(sizeof(ref_cand) * n);
		uint64_t	s = km_stream(p->seed, run, 0);

		for (int64_t r = 0; r < n; r++)
		{
			c[r].key = km_sample_key(h[r], s, W ? W[r] : 1.0);
			c[r].row = r;
		}
		qsort(c, n, sizeof(ref_cand), ref_cand_cmp);
		for (int j = 0; j < k; j++)
			memcpy(C + (size_t) j * d, xf + (size_t) c[j].row * d, sizeof(float) * d);
		free(c);
		return;
	}

	/* greedy k-means++ (the rules and arithmetic of seed/kmeanspp.cu, seed_pp.h) */
	{
		int			L = 2 + (int) log((double) k);
		float	   *D2 = malloc(sizeof(float) * n);
		float	   *dist;
		ref_cand   *cand;
		ref_cand	best = {INFINITY, INT64_MAX};
		uint64_t	s0 = km_stream(p->seed, run, 0);
		float		wmax = 0.0f,
					xmax2 = 0.0f;
		int			shift;

		if (L > 24)
			L = 24;
		dist = malloc(sizeof(float) * n * L);
		cand = malloc(sizeof(ref_cand) * (L + 1));
		for (int64_t r = 0; r < n; r++)
		{
			const float w = W ? W[r] : 1.0f;
			const float x2 = kmg_pp_sqnorm(xf + (size_t) r * d, d);

			wmax = w > wmax ? w : wmax;
			xmax2 = x2 > xmax2 ? x2 : xmax2;
		}
		shift = kmg_pp_shift(wmax, xmax2, n);
		for (int64_t r = 0; r < n; r++)
		{
			ref_cand	c = {km_sample_key(h[r], s0, W ? W[r] : 1.0), r};

			if (ref_cand_cmp(&c, &best) < 0)
				best = c;
		}
		memcpy(C, xf + (size_t) best.row * d, sizeof(float) * d);
#pragma omp parallel for
		for (int64_t r = 0; r < n; r++)
			D2[r] = kmg_pp_d2(xf + (size_t) r * d, C, d);
		if (phis != NULL && k > 1)
		{
			/* one seed: the potential the first SELECT adds up (k = 1 reports none) */
			uint64_t	acc = 0;

			for (int64_t r = 0; r < n; r++)
			{
				const float w = W ? W[r] : 1.0f;

				if (w > 0.0f)
					acc += kmg_pp_term(w, D2[r], shift);
			}
			phis[1] = kmg_pp_value(acc, shift);
		}

		for (int s = 1; s < k; s++)
		{
			uint64_t	st = km_stream(p->seed, run, s);
			int			nc = 0;
			uint64_t	pot[24];
			int			bl = 0;

			/* the L smallest finite keys under w D2 (insertion into a sorted list) */
			for (int64_t r = 0; r < n; r++)
			{
				double		w = W ? W[r] : 1.0;
				ref_cand	c;

				if (!(w > 0.0))
					continue;
				c.key = km_sample_key(h[r], st, w * (double) D2[r]);
				c.row = r;
				if (!isfinite(c.key))
					continue;
				if (nc == L && ref_cand_cmp(&c, &cand[L - 1]) >= 0)
					continue;
				{
					int			q = nc < L ? nc++ : L - 1;

					while (q > 0 && ref_cand_cmp(&c, &cand[q - 1]) < 0)
					{
						cand[q] = cand[q - 1];
						q--;
					}
					cand[q] = c;
				}
			}
			if (nc == 0)
			{
				ref_cand	fb = {INFINITY, INT64_MAX};

				for (int64_t r = 0; r < n; r++)
				{
					double		w = W ? W[r] : 1.0;
					ref_cand	c;

					if (!(w > 0.0))
						continue;
					c.key = km_sample_key(h[r], st, w);
					c.row = r;
					if (ref_cand_cmp(&c, &fb) < 0)
						fb = c;
				}
				if (fb.row == INT64_MAX)
					fb.row = 0;
				cand[0] = fb;
				nc = 1;
			}
#pragma omp parallel for
			for (int64_t r = 0; r < n; r++)
				for (int l = 0; l < nc; l++)
					dist[(size_t) l * n + r] = kmg_pp_d2(xf + (size_t) r * d,
														 xf + (size_t) cand[l].row * d, d);
			/* order-free sums: integers (seed_pp.h); lowest wins, ties to the earlier */
			for (int l = 0; l < nc; l++)
			{
				uint64_t	acc = 0;

				for (int64_t r = 0; r < n; r++)
				{
					const float w = W ? W[r] : 1.0f;
					float		v = dist[(size_t) l * n + r];
					float		m = v < D2[r] ? v : D2[r];

					if (w > 0.0f)
						acc += kmg_pp_term(w, m, shift);
				}
				pot[l] = acc;
				if (pot[l] < pot[bl])
					bl = l;
			}
			if (phis != NULL)
				phis[s + 1] = kmg_pp_value(pot[bl], shift);
			memcpy(C + (size_t) s * d, xf + (size_t) cand[bl].row * d, sizeof(float) * d);
			for (int64_t r = 0; r < n; r++)
			{
				float		v = dist[(size_t) bl * n + r];

				if (v < D2[r])
					D2[r] = v;
			}
		}
		free(D2);
		free(dist);
		free(cand);
	}
}

static int
ref_far_cmp(const void *a, const void *b)
{
	const ref_cand *p = a,
			   *q = b;

	/* decreasing cost, ties to the lower row */
	if (p->key > q->key)
		return -1;
	if (p->key < q->key)
		return 1;
	return p->row < q->row ? -1 : p->row > q->row;
}

int
ref_fit(const float *x, const float *W, int64_t n, int d, const km_params *p,
		ref_result *out)
{
	const int	k = p->k;
	const int	cosine = p->metric == KM_METRIC_COSINE;
	float	   *xf = ref_filter_rows(x, n, d, cosine);
	uint64_t   *h = malloc(sizeof(uint64_t) * n);
	float	   *C = malloc(sizeof(float) * k * d);
	int32_t    *lab = malloc(sizeof(int32_t) * n);
	int32_t    *nl = malloc(sizeof(int32_t) * n);
	double	   *cost = malloc(sizeof(double) * n);
	double	   *sums = malloc(sizeof(double) * k * d);
	double	   *wsum = malloc(sizeof(double) * k);
	int64_t    *cnt = malloc(sizeof(int64_t) * k);
	char	   *reloc = malloc(k);
	double	   *csum = malloc(sizeof(double) * k);
	ref_cand   *far = malloc(sizeof(ref_cand) * n);

	for (int64_t r = 0; r < n; r++)
		h[r] = km_row_hash(x + (size_t) r * d, d, W ? W[r] : 1.0f);

	for (int run = 0; run < p->n_init; run++)
	{
		int			t,
					settled = 0,
					converged = 0,
					relocated = 0;
		double		inertia = 0.0;

		ref_seed(xf, W, h, n, d, p, run, C, NULL);
		for (int64_t r = 0; r < n; r++)
			lab[r] = -1;
		for (t = 1;; t++)
		{
			int64_t		moved = 0;

			ref_assign(xf, n, d, C, k, cosine, nl, NULL);
			memset(sums, 0, sizeof(double) * k * d);
			memset(wsum, 0, sizeof(double) * k);
			memset(cnt, 0, sizeof(int64_t) * k);
			for (int64_t r = 0; r < n; r++)
			{
				int			j = nl[r];
				double		w = W ? W[r] : 1.0;

				moved += lab[r] != j;
				lab[r] = j;
				wsum[j] += w;
				cnt[j]++;
				for (int i = 0; i < d; i++)
					sums[(size_t) j * d + i] += w * (double) xf[(size_t) r * d + i];
			}
			if (moved > 0)
			{
				int			ne = 0;

				memset(reloc, 0, k);
				for (int j = 0; j < k; j++)
					ne += !(wsum[j] > 0.0);
				if (ne > 0)
				{
					double	   *cn = malloc(sizeof(double) * k);
					int			e = 0;

					for (int j = 0; j < k; j++)
						cn[j] = km_exact_norm(C + (size_t) j * d, d);
					for (int64_t r = 0; r < n; r++)
					{
						far[r].key = km_exact_cost(xf + (size_t) r * d, C + (size_t) lab[r] * d,
												   cn[lab[r]], d, cosine);
						far[r].row = r;
					}
					qsort(far, n, sizeof(ref_cand), ref_far_cmp);
					for (int j = 0; j < k && e < n; j++)
					{
						int64_t		r;
						int			old;
						double		w;

						if (wsum[j] > 0.0)
							continue;
						r = far[e++].row;
						old = lab[r];
						w = W ? W[r] : 1.0;
						memcpy(C + (size_t) j * d, xf + (size_t) r * d, sizeof(float) * d);
						for (int i = 0; i < d; i++)
						{
							double		v = w * (double) C[(size_t) j * d + i];

							sums[(size_t) old * d + i] -= v;
							sums[(size_t) j * d + i] = v;
						}
						wsum[old] -= w;
						wsum[j] = w;
						cnt[j] = 1;
						if (--cnt[old] == 0)
						{
							memset(sums + (size_t) old * d, 0, sizeof(double) * d);
							wsum[old] = 0.0;
						}
						reloc[j] = 1;
						relocated++;
					}
					free(cn);
				}
				for (int j = 0; j < k; j++)
				{
					double		w = wsum[j],
								scale = 1.0;
					int			ok = 1;

					if (reloc[j] || !(w > 0.0))
						continue;
					if (cosine)
					{
						double		nrm = 0.0;

						for (int i = 0; i < d; i++)
						{
							double		m = sums[(size_t) j * d + i] / w;

							nrm += m * m;
						}
						scale = sqrt(nrm);
						ok = scale > 0.0 && isfinite(scale);
					}
					for (int i = 0; i < d && ok; i++)
						ok = isfinite((float) (sums[(size_t) j * d + i] / w / scale));
					if (!ok)
						continue;
					for (int i = 0; i < d; i++)
						C[(size_t) j * d + i] = (float) (sums[(size_t) j * d + i] / w / scale);
				}
			}
			if (moved == 0)
			{
				settled = converged = 1;
				break;
			}
			if ((double) moved / (double) n <= p->tol)
			{
				converged = 1;
				break;
			}
			if (t >= p->max_iter)
				break;
		}
		(void) settled;
		/* final pass */
		ref_assign(xf, n, d, C, k, cosine, lab, cost);
		memset(csum, 0, sizeof(double) * k);
		memset(cnt, 0, sizeof(int64_t) * k);
		for (int64_t r = 0; r < n; r++)
		{
			csum[lab[r]] += (W ? (double) W[r] : 1.0) * cost[r];
			cnt[lab[r]]++;
		}
		for (int j = 0; j < k; j++)
			inertia += csum[j];
		if (run == 0 || inertia < out->inertia)
		{
			out->inertia = inertia;
			memcpy(out->centroids, C, sizeof(float) * k * d);
			memcpy(out->sizes, cnt, sizeof(int64_t) * k);
			memcpy(out->cluster_inertia, csum, sizeof(double) * k);
			if (out->labels)
				memcpy(out->labels, lab, sizeof(int32_t) * n);
			out->iterations = t;
			out->converged = converged;
			out->best_run = run;
			out->relocated = relocated;
		}
	}
	free(xf);
	free(h);
	free(C);
	free(lab);
	free(nl);
	free(cost);
	free(sums);
	free(wsum);
	free(cnt);
	free(reloc);
	free(csum);
	free(far);
	return 0;
}

/*
 * The seeds of run `run` alone (k x d; cosine: normalised rows), and in
 * phis (k + 1 entries) k-means++'s potential with m seeds chosen, m = 0..k
 * (the sum of w D2 over the rows, as the GPU engine reports it in its
 * KM_PHASE_SEED progress with m seeds done; phis[k] in its last report; 0
 * for the other seedings and k = 1).
 */
void
ref_seeds(const float *x, const float *W, int64_t n, int d, const km_params *p, int run,
		  float *C, double *phis)
{
	float	   *xf = ref_filter_rows(x, n, d, p->metric == KM_METRIC_COSINE);
	uint64_t   *h = malloc(sizeof(uint64_t) * n);

	for (int64_t r = 0; r < n; r++)
		h[r] = km_row_hash(x + (size_t) r * d, d, W ? W[r] : 1.0f);
	ref_seed(xf, W, h, n, d, p, run, C, phis);
	free(xf);
	free(h);
}

/* Rows as the filter sees them, for callers comparing assign(). */
float *
ref_rows(const float *x, int64_t n, int d, int cosine)
{
	return ref_filter_rows(x, n, d, cosine);
}
