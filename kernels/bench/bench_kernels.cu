/*
 * bench_kernels.cu
 *	  Each kernel family of the engine against its plain C reference, and
 *	  the time of every step of a Lloyd iteration, on the target shapes.
 *
 *	bin/bench_kernels [validate] [bench]
 *	(KBENCH_ONLY=i: bench's shape i alone)
 *
 * Linked with the engine's objects (bin/engine_objs/), so it calls the
 * launchers of the family headers (assign/assign.cuh, prep/prep.cuh,
 * update/update.cuh) directly:
 *	- assign/direct.cu / assign/exact.cu: labels against ref_assign
 *	  (km_exact_nearest), on data with many near-ties (duplicated rows and
 *	  centroids, a large common offset), for both metrics;
 *	- update/sums.cu: per-cluster sums against a C loop (relative 1e-12);
 *	- the timing of prepare, filter, classify, exact, sort, segment,
 *	  finalize (large k) and of the fused pass, reduction and finalize
 *	  (small k), each the median of 20 launches, against the bytes each
 *	  must move and cuBLAS-free ceilings (4.3 TB/s); for the wide pass also
 *	  the rows it listed for the exact settling.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "update/update.cuh"
#include "ref_kmeans.h"
#include "bench_check.h"

static int	failures = 0;

static uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float
urand(uint64_t *s)
{
	*s = mix(*s + 0x9E3779B97F4A7C15ULL);
	return (float) ((*s >> 40) * (1.0 / 16777216.0));
}

/* Rows on the device and everything an iteration needs. */
typedef struct setup
{
	kmg_args	a;
	kmg_assign_plan plan;		/* the engine's plan for the shape (fused ones only) */
	kmg_assign_plan fplan;		/* the filter path's plan for the shape */
	kmg_device	dev;
	int64_t		n;
	int			d,
				dp,
				k,
				kp;
	float	   *X;
	int32_t    *iota;
	void	   *work;
	void	   *temp;
	size_t		temp_bytes;
	int			sms;
} setup;

static void *
dmalloc(size_t b)
{
	void	   *p;

	CK(cudaMalloc(&p, b > 0 ? b : 1));
	CK(cudaMemset(p, 0, b > 0 ? b : 1));
	return p;
}

/*
 * x: n x d host rows (already normalised for cosine), C: k x d.  centre: l2
 * centring of the fused passes (mu = the column means, as kmg_rows_setup of
 * driver/workspace.cu sets it up), when the plan takes it.
 */
static void
make_setup(setup *s, const float *x, int64_t n, int d, const float *C, int k, int cosine,
		   int want_direct, int centre = 0)
{
	const int	dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	const int	kp = km_filter_kpad(k);
	kmg_args   *a = &s->a;
	kmg_ctl		c;

	memset(s, 0, sizeof(*s));
	CK(kmg_device_limits(0, &s->dev));
	s->fplan = kmg_assign_plan_path(KMG_PATH_FILTER, n, d, dp, k, KMG_MODE_ITER, &s->dev);
	/* the float32 filter: this setup has no room for the tensor-core screen (bench_engine screen checks that) */
	s->fplan.screen = KMG_SCREEN_FP32;
	s->n = n;
	s->d = d;
	s->dp = dp;
	s->k = k;
	s->kp = kp;
	s->sms = s->dev.sms;
	s->X = (float *) dmalloc(sizeof(float) * n * dp);
	CK(cudaMemcpy2D(s->X, dp * 4, x, d * 4, d * 4, n, cudaMemcpyHostToDevice));
	a->X = s->X;
	a->W = NULL;
	a->xnorm = (float *) dmalloc(sizeof(float) * n);
	a->n = n;
	a->d = d;
	a->dp = dp;
	a->cosine = cosine;
	a->lloyd = 1;
	a->k = k;
	a->kp = kp;
	a->C = (float *) dmalloc(sizeof(float) * kp * dp);
	a->Cf = cosine || centre ? (float *) dmalloc(sizeof(float) * kp * dp) : a->C;
	CK(cudaMemcpy2D(a->C, dp * 4, C, d * 4, d * 4, k, cudaMemcpyHostToDevice));
	a->cn = (float *) dmalloc(sizeof(float) * kp);
	a->cnf = (float *) dmalloc(sizeof(float) * k);
	a->cnorm = (double *) dmalloc(sizeof(double) * k);
	a->labels = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->best = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->fbest = (float *) dmalloc(sizeof(float) * n);
	a->fsecond = (float *) dmalloc(sizeof(float) * n);
	a->wrow = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->wmask = (uint32_t *) dmalloc(sizeof(uint32_t) * n);
	a->ishift = KM_FIX_UNSET;
	a->cost = (double *) dmalloc(sizeof(double) * n);
	a->amb = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->skeys = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->svals = (int32_t *) dmalloc(sizeof(int32_t) * n);
	a->clus = (double *) dmalloc(sizeof(double) * k * KMG_CW(dp));
	a->maxpieces = kmg_max_pieces(n, k);
	a->bounds = (int2 *) dmalloc(sizeof(int2) * k);
	a->pclus = (int2 *) dmalloc(sizeof(int2) * k);
	a->ptab = (int4 *) dmalloc(sizeof(int4) * a->maxpieces);
	a->npieces = (int *) dmalloc(sizeof(int));
	a->pdone = (int *) dmalloc(sizeof(int) * k);
	a->ppart = (double *) dmalloc(sizeof(double) * a->maxpieces * KMG_CW(dp));
	a->xcap = kmg_exact_cap(n);
	a->fbn = km_filter_tile_cols(s->fplan.ftile);
	a->xchunks = (k + a->fbn - 1) / a->fbn;
	a->xcost = (double *) dmalloc(sizeof(double) * a->xcap * a->xchunks);
	a->xidx = (int32_t *) dmalloc(sizeof(int32_t) * a->xcap * a->xchunks);
	a->reloc = (int *) dmalloc(sizeof(int) * k);
	a->empties = (int32_t *) dmalloc(sizeof(int32_t) * k);
	a->ctl = (kmg_ctl *) dmalloc(sizeof(kmg_ctl));
	a->stats = (kmg_stat *) dmalloc(sizeof(kmg_stat) * 1000);
	s->iota = (int32_t *) dmalloc(sizeof(int32_t) * n);
	CK(kmg_fill_int(s->iota, n, 0, 1, 0));
	CK(kmg_fill_int(a->labels, n, -1, 0, 0));
	s->work = dmalloc(km_filter_work_bytes(kp, dp));
	a->fwork = (const float *) s->work;
	{
		/* the narrow pass's order-free sums; weights up to 4 in the tests */
		double		xabs = 0.0;

		for (int64_t i = 0; i < n * d; i++)
			xabs = std::max(xabs, (double) fabsf(x[i]));
		a->sshift = km_fix_scale(4.0 * xabs * 1.01 + 1e-300, n).shift;
		a->wshift = km_fix_scale(4.0 * 1.01, n).shift;
		a->nfix = (unsigned long long *) dmalloc(kmg_narrow_fix_bytes(k, d));
	}
	s->temp_bytes = kmg_sort_temp_bytes(n, k);
	s->temp = dmalloc(s->temp_bytes);
	memset(&c, 0, sizeof(c));
	c.max_iter = 1000000;
	CK(cudaMemcpy(a->ctl, &c, sizeof(c), cudaMemcpyHostToDevice));
	CK(kmg_prep_rows(s->X, NULL, n, d, dp, 0, NULL, (float *) a->xnorm, NULL, 0));
	if (want_direct)
	{
		s->plan = kmg_assign_make_plan(n, d, dp, k, KMG_MODE_ITER, &s->dev);
		if (kmg_plan_fused(&s->plan))
		{
			CK(kmg_assign_prepare(&s->plan, &s->dev));
			/* room for the run-2 kernel's grid too (bench compares the two) */
			const int	nbmax = std::max(s->plan.nblocks, 4 * s->sms);

			a->part = (double *) dmalloc(sizeof(double) * nbmax * k * KMG_CW(dp));
			a->part_moved = (int *) dmalloc(sizeof(int) * nbmax);
			a->wcount = (int *) dmalloc(sizeof(int) * s->plan.nblocks);
			a->nblocks = s->plan.nblocks;
		}
	}
	if (centre && !cosine &&
		(s->plan.path == KMG_PATH_NARROW || s->plan.path == KMG_PATH_WIDE))
	{
		/* mu = the column means in double, rounded to float */
		std::vector<float> mu(dp, 0.0f);

		for (int i = 0; i < d; i++)
		{
			double		m = 0.0;

			for (int64_t r = 0; r < n; r++)
				m += x[(size_t) r * d + i];
			mu[i] = (float) (m / (double) n);
		}
		a->mu = (float *) dmalloc(sizeof(float) * dp);
		CK(cudaMemcpy((void *) a->mu, mu.data(), sizeof(float) * dp, cudaMemcpyHostToDevice));
		CK(kmg_centred_norms(s->X, a->mu, n, d, dp, (float *) a->xnorm, 0));
	}
	if (!cosine && a->mu == NULL && a->Cf != a->C)
	{
		/* not centred: l2 filters the centroids themselves (as kmg_rows_setup) */
		CK(cudaFree(a->Cf));
		a->Cf = a->C;
	}
	CK(kmg_finalize(a, KMG_FIN_SETUP, 0));
	CK(cudaDeviceSynchronize());
}

static void
free_setup(setup *s)
{
	kmg_args   *a = &s->a;
	void	   *ps[] = {s->X, (void *) a->xnorm, a->C, a->cn, a->cnf, a->cnorm, a->labels, a->best,
		a->fbest, a->fsecond, a->cost, a->amb, a->skeys, a->svals, a->clus, a->reloc,
		a->empties, a->ctl, a->stats, s->iota, s->work, s->temp, a->part, a->part_moved,
		a->bounds, a->pclus, a->ptab, a->npieces, a->pdone, a->ppart, a->xcost, a->xidx,
		a->wrow, a->wmask, a->wcount, (void *) a->mu, a->nfix};

	if (a->Cf != a->C)
		CK(cudaFree(a->Cf));
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		if (ps[i] != NULL)
			CK(cudaFree(ps[i]));
}

/* Exact labels for the setup's centroids, by its fused plan or the filter path. */
static void
gpu_labels(setup *s, int direct)
{
	kmg_args	a = s->a;

	a.lloyd = 0;
	CK(kmg_assign_pass(&a, direct ? &s->plan : &s->fplan, KMG_MODE_LABELS, s->work, 0));
	CK(cudaDeviceSynchronize());
}

/*
 * Labels: rows with a large common offset (the slack is then large, many
 * rows are ambiguous) and duplicated rows and centroids (exact ties).
 */
static void
validate_labels(void)
{
	struct
	{
		int64_t		n;
		int			d,
					k,
					cosine,
					direct;
		float		offset;
		int			centre;
	}			cs[] = {
		{20000, 8, 16, 0, 1, 100.0f, 0}, {20000, 8, 16, 1, 1, 0.0f, 0}, {5000, 784, 10, 0, 1, 50.0f, 0},
		{5000, 35, 24, 0, 1, 0.0f, 0}, {20000, 3, 5, 0, 1, 1000.0f, 0}, {20000, 64, 32, 1, 1, 0.0f, 0},
		{20000, 8, 16, 0, 0, 100.0f, 0}, {10000, 256, 300, 0, 0, 30.0f, 0}, {4000, 408, 1000, 1, 0, 0.0f, 0},
		{3000, 17, 3000, 0, 0, 5.0f, 0}, {100000, 8, 40, 0, 0, 100.0f, 0}, {20000, 100, 20, 0, 1, 20.0f, 0},
		/* the fused passes of this round: narrow (dp <= 32) and wide, centred or not */
		{20000, 8, 16, 0, 1, 100.0f, 1}, {20000, 3, 5, 0, 1, 1000.0f, 1}, {8000, 24, 32, 0, 1, 5.0f, 1},
		{8000, 32, 20, 1, 1, 0.0f, 0}, {30000, 13, 7, 0, 1, 0.0f, 0},
		{5000, 784, 10, 0, 1, 50.0f, 1}, {6000, 784, 16, 1, 1, 0.0f, 0}, {7000, 200, 3, 0, 1, 10.0f, 1},
		{3000, 1000, 12, 0, 1, 0.0f, 0}, {4000, 784, 10, 0, 1, 0.0f, 1},
	};

	for (size_t t = 0; t < sizeof(cs) / sizeof(cs[0]); t++)
	{
		const int64_t n = cs[t].n;
		const int	d = cs[t].d,
					k = cs[t].k;
		float	   *x = (float *) malloc(sizeof(float) * n * d);
		float	   *C = (float *) malloc(sizeof(float) * k * d);
		int32_t    *gl = (int32_t *) malloc(sizeof(int32_t) * n);
		int32_t    *rl = (int32_t *) malloc(sizeof(int32_t) * n);
		uint64_t	sd = 1000 + t;
		setup		s;
		int64_t		diff = 0;
		int			namb = 0;
		float	   *xf;

		for (int64_t r = 0; r < n; r++)
			for (int i = 0; i < d; i++)
				x[r * d + i] = (r % 7 == 3 && r > 0) ? x[(r - 1) * d + i]
					: cs[t].offset + urand(&sd);
		for (int j = 0; j < k; j++)
			for (int i = 0; i < d; i++)
				C[j * d + i] = (j % 5 == 4) ? C[(j - 1) * d + i]
					: x[(size_t) ((j * 131) % n) * d + i] + 0.01f * urand(&sd);
		xf = ref_rows(x, n, d, cs[t].cosine);
		make_setup(&s, xf, n, d, C, k, cs[t].cosine, cs[t].direct, cs[t].centre);
		if (cs[t].direct && !kmg_plan_fused(&s.plan))
		{
			printf("FAIL labels case %zu: direct plan refused\n", t);
			failures++;
			free_setup(&s);
			continue;
		}
		gpu_labels(&s, cs[t].direct);
		CK(cudaMemcpy(gl, s.a.labels, sizeof(int32_t) * n, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&namb, &s.a.ctl->namb, sizeof(int), cudaMemcpyDeviceToHost));
		if (cs[t].direct && s.plan.path == KMG_PATH_WIDE)
		{
			std::vector<int> wc(s.plan.nblocks);

			CK(cudaMemcpy(wc.data(), s.a.wcount, sizeof(int) * s.plan.nblocks, cudaMemcpyDeviceToHost));
			namb = 0;
			for (int v : wc)
				namb += v;
		}
		ref_assign(xf, n, d, C, k, cs[t].cosine, rl, NULL);
		for (int64_t r = 0; r < n; r++)
			diff += gl[r] != rl[r];
		printf("%s labels %-6s n=%lld d=%d k=%d %s offset %g%s: %lld differ (ambiguous listed: %d)\n",
			   diff == 0 ? "ok  " : "FAIL",
			   !cs[t].direct ? "filter" : s.plan.path == KMG_PATH_NARROW ? "narrow" :
			   s.plan.path == KMG_PATH_WIDE ? "wide" : "direct", (long long) n, d, k,
			   cs[t].cosine ? "cos" : "l2", cs[t].offset, s.a.mu != NULL ? " centred" : "",
			   (long long) diff, namb);
		failures += diff != 0;
		free_setup(&s);
		free(x);
		free(C);
		free(gl);
		free(rl);
		free(xf);
	}
}

/*
 * Sums per cluster: the sort + segment path and the fused passes (direct,
 * narrow, wide) against a C loop; weights too.  The sorted path also sums
 * the exact costs order-free (km_fixsum.h) in the final-pass mode: that
 * column must equal, bit for bit, the CPU engine's way (km_fix_term of each
 * w * cost, km_fix_value).
 */
static void
validate_sums(void)
{
	const struct
	{
		int			direct;
		int64_t		n;
		int			d,
					k,
					weighted;
		float		offset;
	}			cfg[] = {
		{0, 50000, 40, 300, 0, 0.0f}, {1, 50000, 12, 20, 0, 0.0f}, {0, 200000, 16, 40, 0, 0.0f},
		{1, 30000, 100, 10, 0, 0.0f}, {1, 100000, 8, 16, 1, 3.0f}, {1, 40000, 32, 32, 1, 0.0f},
		{1, 20000, 784, 10, 0, 2.0f}, {1, 9000, 300, 16, 1, 0.0f}, {1, 5000, 5, 3, 0, 0.0f},
		{0, 30000, 256, 1000, 1, 0.0f},
	};

	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++)
	{
		const int	direct = cfg[t].direct;
		const int64_t n = cfg[t].n;
		const int	d = cfg[t].d,
					k = cfg[t].k;
		const int	dp = KMG_ROUND_UP(d, 8);
		const int	cw = KMG_CW(dp);
		float	   *x = (float *) malloc(sizeof(float) * n * d);
		float	   *C = (float *) malloc(sizeof(float) * k * d);
		float	   *w = (float *) malloc(sizeof(float) * n);
		int32_t    *lab = (int32_t *) malloc(sizeof(int32_t) * n);
		double	   *cl = (double *) malloc(sizeof(double) * k * cw);
		double	   *rs = (double *) calloc((size_t) k * d, sizeof(double));
		double	   *rn = (double *) calloc(k, sizeof(double));
		double	   *rw = (double *) calloc(k, sizeof(double));
		uint64_t	sd = 77 + t;
		setup		s;
		double		maxrel = 0;
		int64_t		cdiff = 0;
		float	   *dW = NULL;
		const char *kind = "sorted";

		for (int64_t i = 0; i < n * d; i++)
			x[i] = urand(&sd) * 4 - 2 + cfg[t].offset;
		for (int64_t i = 0; i < n; i++)
			w[i] = (i % 17 == 5) ? 0.0f : 0.25f + 2.0f * urand(&sd);
		for (int j = 0; j < k; j++)
			memcpy(C + j * d, x + (size_t) j * 17 * d, sizeof(float) * d);
		make_setup(&s, x, n, d, C, k, 0, direct, cfg[t].offset > 0.0f);
		if (cfg[t].weighted)
		{
			dW = (float *) dmalloc(sizeof(float) * n);
			CK(cudaMemcpy(dW, w, sizeof(float) * n, cudaMemcpyHostToDevice));
			s.a.W = dW;
		}
		if (direct)
		{
			kind = s.plan.path == KMG_PATH_NARROW ? "narrow" :
				s.plan.path == KMG_PATH_WIDE ? "wide" : "direct";
			CK(kmg_assign_pass(&s.a, &s.plan, KMG_MODE_ITER, s.work, 0));
		}
		else
		{
			gpu_labels(&s, 0);
			CK(kmg_sort_labels(&s.a, s.iota, s.temp, s.temp_bytes, 0));
			{
				kmg_args	a = s.a;

				a.lloyd = 0;
				CK(kmg_segment(&a, KMG_MODE_ITER, 1, 0));
			}
		}
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(lab, s.a.labels, sizeof(int32_t) * n, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(cl, s.a.clus, sizeof(double) * k * cw, cudaMemcpyDeviceToHost));
		for (int64_t r = 0; r < n; r++)
		{
			const double wr = cfg[t].weighted ? (double) w[r] : 1.0;

			rn[lab[r]] += 1;
			rw[lab[r]] += wr;
			for (int i = 0; i < d; i++)
				rs[lab[r] * d + i] += wr * x[r * d + i];
		}
		for (int j = 0; j < k; j++)
		{
			cdiff += cl[j * cw + dp + 1] != rn[j];
			maxrel = std::max(maxrel, fabs(cl[j * cw + dp] - rw[j]) / (fabs(rw[j]) + 1e-9));
			for (int i = 0; i < d; i++)
				maxrel = std::max(maxrel, fabs(cl[j * cw + i] - rs[j * d + i]) /
								  (fabs(rs[j * d + i]) + 1e-9));
		}
		printf("%s sums %-6s n=%lld d=%d k=%d%s%s: counts differ %lld, max rel %.2e\n",
			   cdiff == 0 && maxrel < 1e-12 ? "ok  " : "FAIL", kind, (long long) n, d, k,
			   cfg[t].weighted ? " weighted" : "", s.a.mu != NULL ? " centred" : "",
			   (long long) cdiff, maxrel);
		failures += !(cdiff == 0 && maxrel < 1e-12);

		if (!direct)
		{
			/* the final pass's order-free inertia against the CPU engine's way */
			kmg_args	a = s.a;
			std::vector<double> cost(n);
			std::vector<km_fix> fx(k, km_fix{0, 0});
			std::vector<int64_t> cnt(k, 0);
			double		xmax2 = 0.0;
			km_fixscale fs;
			int64_t		bad = 0;

			for (int64_t r = 0; r < n; r++)
			{
				double		s2 = 0.0;

				for (int i = 0; i < d; i++)
					s2 += (double) x[r * d + i] * x[r * d + i];
				xmax2 = std::max(xmax2, s2);
			}
			fs = km_fix_scale((cfg[t].weighted ? 2.25 : 1.0) * 4.0 * xmax2 * 1.01, n);

			a.lloyd = 0;
			a.ishift = fs.shift;
			CK(kmg_row_costs(&a, 0));
			CK(kmg_segment(&a, KMG_MODE_LABELS, 0, 0));
			CK(cudaDeviceSynchronize());
			CK(cudaMemcpy(cost.data(), a.cost, sizeof(double) * n, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(cl, a.clus, sizeof(double) * k * cw, cudaMemcpyDeviceToHost));
			std::vector<double> dsum(k, 0.0);

			for (int64_t r = 0; r < n; r++)
			{
				const float wf = cfg[t].weighted ? w[r] : 1.0f;

				km_fix_add(&fx[lab[r]], km_fix_term((double) wf * cost[r], fs));
				dsum[lab[r]] += (double) wf * cost[r];	/* row order: the fallback */
				cnt[lab[r]]++;
			}
			for (int j = 0; j < k; j++)
			{
				double		v = 0.0;

				if (!km_fix_value(fx[j], fs, cnt[j], &v))
					v = dsum[j];
				bad += memcmp(&v, &cl[j * cw + dp + 2], sizeof(double)) != 0;
			}
			printf("%s order-free inertia (final pass) n=%lld k=%d: %lld clusters differ from km_fix\n",
				   bad == 0 ? "ok  " : "FAIL", (long long) n, k, (long long) bad);
			failures += bad != 0;
		}
		if (dW != NULL)
		{
			s.a.W = NULL;
			CK(cudaFree(dW));
		}
		free_setup(&s);
		free(x);
		free(C);
		free(w);
		free(lab);
		free(cl);
		free(rs);
		free(rn);
		free(rw);
	}
}

/* ---- timing ---- */

typedef cudaError_t (*step_fn) (setup *s);

static cudaError_t
st_prepare(setup *s)
{
	return km_filter_prepare(s->fplan.ftile, s->a.Cf, s->a.cn, s->k, s->kp, s->dp, s->work, 0);
}

static cudaError_t
st_top2(setup *s)
{
	return km_filter_top2(s->fplan.ftile, s->a.X, s->n, s->dp, s->work, s->k, s->kp, s->a.best,
						  s->a.fbest,
						  s->a.fsecond, 0);
}

/* as the engine runs it, after km_filter_top2 */
static cudaError_t
st_classify(setup *s)
{
	cudaError_t e = cudaMemset(&s->a.ctl->namb, 0, sizeof(int));

	return e != cudaSuccess ? e : kmg_classify(&s->a, KMG_MODE_ITER, 0);
}

static cudaError_t
st_exact(setup *s)
{
	return kmg_exact_refine(&s->a, &s->fplan, KMG_MODE_ITER, 0);
}

static cudaError_t
st_sort(setup *s)
{
	return kmg_sort_labels(&s->a, s->iota, s->temp, s->temp_bytes, 0);
}

static cudaError_t
st_segment(setup *s)
{
	return kmg_segment(&s->a, KMG_MODE_ITER, 1, 0);
}

static cudaError_t
st_finalize(setup *s)
{
	return kmg_finalize(&s->a, KMG_FIN_SETUP, 0);
}

/* a whole iteration (finalize included); lloyd = 0: a settled run still runs */
static cudaError_t
st_direct(setup *s)
{
	kmg_args	a = s->a;

	a.lloyd = 0;
	return kmg_assign_pass(&a, &s->plan, KMG_MODE_ITER, s->work, 0);
}

/* the fused kernel alone (the run-2 comparison: the direct kernel's pass) */
static cudaError_t
st_direct_old(setup *s)
{
	kmg_args	a = s->a;

	a.lloyd = 0;
	return kmg_fused_launch(&a, &s->plan, KMG_MODE_ITER, 0);
}

static cudaError_t
st_reduce(setup *s)
{
	kmg_args	a = s->a;

	a.lloyd = 0;
	return kmg_reduce_finalize(&a, 0);
}

/* the labels-only pass (final pass, assign) */
static cudaError_t
st_fused_labels(setup *s)
{
	kmg_args	a = s->a;

	a.lloyd = 0;
	return kmg_assign_pass(&a, &s->plan, KMG_MODE_LABELS, s->work, 0);
}

static double
time_step(setup *s, step_fn f)
{
	cudaEvent_t e0,
				e1;
	std::vector<float> t;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 23; i++)
	{
		float		ms;

		CK(cudaEventRecord(e0, 0));
		CK(f(s));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 3)
			t.push_back(ms);
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	std::sort(t.begin(), t.end());
	return t[t.size() / 2] * 1e3;
}

/* kmeans_bench.c's data: blobs around 2k centres, 10% noise. */
static float *
blobs(int64_t n, int d, int k, uint64_t seed)
{
	float	   *c = (float *) malloc(sizeof(float) * 2 * k * d);
	float	   *x = (float *) malloc(sizeof(float) * n * d);
	uint64_t	s = seed;

	for (int i = 0; i < 2 * k * d; i++)
		c[i] = 20 * urand(&s) - 10;
#pragma omp parallel for
	for (int64_t r = 0; r < n; r++)
	{
		uint64_t	rs = mix(seed + r);
		float	   *row = x + r * d;

		if (urand(&rs) < 0.1f)
			for (int i = 0; i < d; i++)
				row[i] = 20 * urand(&rs) - 10;
		else
		{
			const float *cc = c + (size_t) (mix(rs) % (2 * k)) * d;

			for (int i = 0; i < d; i++)
			{
				float		u1 = urand(&rs) + 1e-7f,
							u2 = urand(&rs);

				row[i] = cc[i] + 2.0f * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
			}
		}
	}
	free(c);
	return x;
}

static void
bench(void)
{
	struct
	{
		int64_t		n;
		int			d,
					k;
	}			shapes[] = {
		{100000, 256, 1024}, {300000, 408, 5000}, {2000000, 128, 1024}, {1000000, 8, 16},
		{70000, 784, 10},
	};

	printf("\nstep times (median of 20, us); data: blobs + 10%% noise, centroids = rows\n");
	for (size_t t = 0; t < sizeof(shapes) / sizeof(shapes[0]); t++)
	{
		/* KBENCH_ONLY=i: shape i alone */
		if (getenv("KBENCH_ONLY") != NULL && atoi(getenv("KBENCH_ONLY")) != (int) t)
			continue;

		const int64_t n = shapes[t].n;
		const int	d = shapes[t].d,
					k = shapes[t].k;
		float	   *x = blobs(n, d, k, 5 + t);
		float	   *C = (float *) malloc(sizeof(float) * k * d);
		setup		s;
		const double xbytes = (double) n * KMG_ROUND_UP(d, 8) * 4;
		int			namb = 0;

		for (int j = 0; j < k; j++)
			memcpy(C + (size_t) j * d, x + (size_t) ((int64_t) j * 977 % n) * d, sizeof(float) * d);
		make_setup(&s, x, n, d, C, k, 0, 1);
		printf("(%lld,%d,%d): X = %.1f MB, one read at 4.3 TB/s = %.1f us\n", (long long) n, d, k,
			   xbytes / 1e6, xbytes / 4.3e12 * 1e6);
		if (kmg_plan_fused(&s.plan))
		{
			const char *kind = s.plan.path == KMG_PATH_NARROW ? "narrow" :
				s.plan.path == KMG_PATH_WIDE ? "wide" : "direct";
			double		a = time_step(&s, st_direct),
						c = time_step(&s, st_finalize),
						it = time_step(&s, st_fused_labels);

			printf("  fused iteration (%s: pass, reduce, finalize) %.1f (%.2f TB/s)  labels-only pass %.1f  finalize alone %.1f  (plan: kb %d s %d smem %zu grid %d)\n",
				   kind, a, xbytes / a / 1e6, it, c, s.plan.kb, s.plan.s, s.plan.smem, s.plan.nblocks);
			if (s.plan.path == KMG_PATH_WIDE)
			{
				std::vector<int> wc(s.plan.nblocks);
				int64_t		listed = 0;

				CK(cudaMemcpy(wc.data(), s.a.wcount, sizeof(int) * s.plan.nblocks, cudaMemcpyDeviceToHost));
				for (int v : wc)
					listed += v;
				printf("  wide pass: %lld rows listed for the exact settling (%.2f%%)\n",
					   (long long) listed, 100.0 * listed / n);
			}
			if (s.plan.path != KMG_PATH_DIRECT)
			{
				/* the run-2 kernel on the same shape, for comparison */
				kmg_assign_plan keep = s.plan;

				s.plan = kmg_assign_plan_path(KMG_PATH_DIRECT, n, d, KMG_ROUND_UP(d, 8), k,
											  KMG_MODE_ITER, &s.dev);
				if (s.plan.path == KMG_PATH_DIRECT)
				{
					CK(kmg_assign_prepare(&s.plan, &s.dev));
					s.a.nblocks = s.plan.nblocks;
					printf("  run-2 kmg_direct_kernel: pass %.1f  reduce + finalize %.1f\n",
						   time_step(&s, st_direct_old), time_step(&s, st_reduce));
					s.a.nblocks = keep.nblocks;
				}
				s.plan = keep;
			}
		}
		/* the filter path on every shape (the small ones only for reference) */
		{
			double		tp = time_step(&s, st_prepare),
						tt = time_step(&s, st_top2),	/* before classify: it reads its output */
						tc = time_step(&s, st_classify),
						tx,
						ts,
						tg,
						tf;

			CK(cudaMemcpy(&namb, &s.a.ctl->namb, sizeof(int), cudaMemcpyDeviceToHost));
			tx = time_step(&s, st_exact);
			ts = time_step(&s, st_sort);
			tg = time_step(&s, st_segment);
			tf = time_step(&s, st_finalize);
			printf("  filter path: prepare %.1f  top2 %.1f  classify %.1f  exact %.1f (%d listed, %.2f%%)  sort %.1f  segment %.1f  finalize %.1f  => non-GEMM %.1f (%.1f%% of top2)\n",
				   tp, tt, tc, tx, namb, 100.0 * namb / n, ts, tg, tf,
				   tp + tc + tx + ts + tg + tf, 100.0 * (tp + tc + tx + ts + tg + tf) / tt);
		}
		fflush(stdout);
		free_setup(&s);
		free(x);
		free(C);
	}
}

/* One launch of each step on three shapes, for a profiler (ncu) to look at. */
static void
profile(void)
{
	struct
	{
		int64_t		n;
		int			d,
					k;
	}			shapes[] = {{1000000, 8, 16}, {70000, 784, 10}, {100000, 256, 1024}};

	for (int t = 0; t < 3; t++)
	{
		const int64_t n = shapes[t].n;
		const int	d = shapes[t].d,
					k = shapes[t].k;
		float	   *x = blobs(n, d, k, 5 + t);
		float	   *C = (float *) malloc(sizeof(float) * k * d);
		setup		s;

		for (int j = 0; j < k; j++)
			memcpy(C + (size_t) j * d, x + (size_t) ((int64_t) j * 977 % n) * d, sizeof(float) * d);
		make_setup(&s, x, n, d, C, k, 0, 1);
		if (kmg_plan_fused(&s.plan))
		{
			CK(st_direct(&s));
			CK(st_direct(&s));
			CK(st_reduce(&s));
		}
		else
		{
			CK(st_top2(&s));
			CK(st_classify(&s));
			CK(st_exact(&s));
			CK(st_sort(&s));
			CK(st_segment(&s));
		}
		CK(st_finalize(&s));
		CK(cudaDeviceSynchronize());
		free_setup(&s);
		free(x);
		free(C);
	}
}

int
main(int argc, char **argv)
{
	int			val = 0,
				ben = 0;

	for (int i = 1; i < argc; i++)
	{
		val |= strcmp(argv[i], "validate") == 0;
		ben |= strcmp(argv[i], "bench") == 0;
		if (strcmp(argv[i], "profile") == 0)
		{
			profile();
			return 0;
		}
	}
	if (!val && !ben)
		val = ben = 1;
	if (val)
	{
		validate_labels();
		validate_sums();
	}
	if (ben)
		bench();
	printf("\n==== bench_kernels: %d failure(s) ====\n", failures);
	return failures != 0;
}
