/*
 * kmedoids_test.c
 *	  TAP tests of the k-medoids engine and of afk-mc2 seeding in the k-means
 *	  engine (make test/engine/kmedoids_test).
 *
 * Checks the rules of kmedoids_engine.h against brute force written here:
 * the kernel gives kmd_pair() bit for bit, the alternating method and the
 * assignment equal a plain re-implementation, FasterPAM ends in a swap-
 * optimal state, the silhouette equals its definition, results do not depend
 * on the number of threads or the order of distinct rows, seeds choose
 * distinct rows, and cancellation, memory accounting and errors behave.
 * Prints "ok N - ..." lines and the plan; exits nonzero if anything failed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmedoids_internal.h"
#include "kmd_metric.h"
#include "km_afkmc2.h"

static int	n_tests;
static int	n_failed;

static int
ok(int cond, const char *fmt, ...)
{
	va_list		ap;

	n_tests++;
	if (!cond)
		n_failed++;
	printf("%sok %d - ", cond ? "" : "not ", n_tests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

static void
diag(const char *fmt, ...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* ---------------------------------------------------------------------- */
/* random numbers, hooks */

static uint64_t
rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

static double
rnd_unif(uint64_t *s)
{
	return ((double) (rnd_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static double
rnd_norm(uint64_t *s)
{
	return sqrt(-2.0 * log(rnd_unif(s))) * cos(6.283185307179586 * rnd_unif(s));
}

typedef struct tctx
{
	int64_t		live_blocks;
	size_t		live_bytes;
	size_t		peak_bytes;
	int64_t		allocs;
	int			fail_after;
	int			polls;
	int			stop_after_polls;
	int			reports;
	int			iterate_reports;
	int			seed_reports;
} tctx;

static void *
t_alloc(void *ctx, size_t size)
{
	tctx	   *t = (tctx *) ctx;
	size_t	   *p;

	t->allocs++;
	if (t->fail_after > 0 && t->allocs >= t->fail_after)
		return NULL;
	p = malloc(size + 16);
	if (p == NULL)
		return NULL;
	p[0] = size;
	t->live_blocks++;
	t->live_bytes += size;
	if (t->live_bytes > t->peak_bytes)
		t->peak_bytes = t->live_bytes;
	return (char *) p + 16;
}

static void
t_free(void *ctx, void *ptr)
{
	tctx	   *t = (tctx *) ctx;
	size_t	   *p = (size_t *) ((char *) ptr - 16);

	t->live_blocks--;
	t->live_bytes -= p[0];
	free(p);
}

static int
t_poll(void *ctx)
{
	tctx	   *t = (tctx *) ctx;

	t->polls++;
	return t->stop_after_polls > 0 && t->polls >= t->stop_after_polls;
}

static int
t_report(void *ctx, const km_progress *p)
{
	tctx	   *t = (tctx *) ctx;

	t->reports++;
	if (p->phase == KM_PHASE_ITERATE)
		t->iterate_reports++;
	if (p->phase == KM_PHASE_SEED)
		t->seed_reports++;
	return 0;
}

static km_hooks
hooks_for(tctx *t, int threads)
{
	km_hooks	h;

	memset(t, 0, sizeof(*t));
	memset(&h, 0, sizeof(h));
	h.ctx = t;
	h.alloc = t_alloc;
	h.free = t_free;
	h.poll = t_poll;
	h.report = t_report;
	h.n_threads = threads;
	return h;
}

/* ---------------------------------------------------------------------- */
/* data */

typedef struct rows
{
	int64_t		n;
	int			d;
	int			metric;
	float	   *x;				/* dense: n * d; sqfd: all features */
	const float **ptr;
	int32_t    *nfeat;
	kmd_data	data;
} rows;

/* Gaussian blobs: n rows of d values around k centres. */
static rows
make_blobs(int64_t n, int d, int k, double spread, uint64_t seed, int metric)
{
	rows		r;
	double	   *centres = malloc(sizeof(double) * k * d);

	memset(&r, 0, sizeof(r));
	r.n = n;
	r.d = d;
	r.metric = metric;
	r.x = malloc(sizeof(float) * n * d);
	r.ptr = malloc(sizeof(float *) * n);
	for (int i = 0; i < k * d; i++)
		centres[i] = 10.0 * (rnd_unif(&seed) - 0.5);
	for (int64_t i = 0; i < n; i++)
	{
		int			c = (int) (rnd_next(&seed) % k);

		for (int j = 0; j < d; j++)
			r.x[i * d + j] = (float) (centres[c * d + j] + spread * rnd_norm(&seed));
		r.ptr[i] = r.x + i * d;
	}
	free(centres);
	r.data.n = n;
	r.data.d = d;
	r.data.rows = r.ptr;
	r.data.nfeat = NULL;
	return r;
}

/*
 * Signatures: n rows of 1 to maxm features of fd floats (weight >= 0, then
 * coordinates), drawn around k prototypes.
 */
static rows
make_signatures(int64_t n, int fd, int maxm, int k, uint64_t seed)
{
	rows		r;
	int64_t		at = 0;

	memset(&r, 0, sizeof(r));
	r.n = n;
	r.d = fd;
	r.metric = KMD_SQFD;
	r.x = malloc(sizeof(float) * n * maxm * fd);
	r.ptr = malloc(sizeof(float *) * n);
	r.nfeat = malloc(sizeof(int32_t) * n);
	for (int64_t i = 0; i < n; i++)
	{
		int			m = 1 + (int) (rnd_next(&seed) % maxm);
		double		base = (double) (rnd_next(&seed) % k);

		r.ptr[i] = r.x + at;
		r.nfeat[i] = m;
		for (int f = 0; f < m; f++)
		{
			r.x[at++] = (float) (0.1 + rnd_unif(&seed));
			for (int j = 1; j < fd; j++)
				r.x[at++] = (float) (base + 0.3 * rnd_norm(&seed) + 0.1 * f);
		}
	}
	r.data.n = n;
	r.data.d = fd;
	r.data.rows = r.ptr;
	r.data.nfeat = r.nfeat;
	return r;
}

static void
rows_free(rows *r)
{
	free(r->x);
	free(r->ptr);
	free(r->nfeat);
}

static double
aux_of(const rows *r, int64_t i, double alpha)
{
	return kmd_aux(r->metric, r->ptr[i], r->nfeat ? r->nfeat[i] : 1, r->d, alpha);
}

/* kmd_pair between rows i and j of r. */
static double
dist_of(const rows *r, int64_t i, int64_t j, double alpha)
{
	return kmd_pair(r->metric, r->ptr[i], r->nfeat ? r->nfeat[i] : 0, aux_of(r, i, alpha),
					r->ptr[j], r->nfeat ? r->nfeat[j] : 0, aux_of(r, j, alpha), r->d, alpha);
}

/* The full distance matrix (test data is small). */
static double *
matrix_of(const rows *r, double alpha)
{
	double	   *m = malloc(sizeof(double) * r->n * r->n);
	double	   *aux = malloc(sizeof(double) * r->n);

	for (int64_t i = 0; i < r->n; i++)
		aux[i] = aux_of(r, i, alpha);
	for (int64_t i = 0; i < r->n; i++)
		for (int64_t j = 0; j < r->n; j++)
			m[i * r->n + j] = kmd_pair(r->metric, r->ptr[i], r->nfeat ? r->nfeat[i] : 0, aux[i],
									   r->ptr[j], r->nfeat ? r->nfeat[j] : 0, aux[j], r->d, alpha);
	free(aux);
	return m;
}

typedef struct fit
{
	km_status	status;
	int64_t    *medoids;
	int64_t    *sizes;
	double	   *ccost;
	int32_t    *labels;
	kmd_result	res;
	km_error	err;
	tctx		t;
} fit;

static fit
run_fit(const rows *r, kmd_params p, int threads)
{
	fit			f;
	km_hooks	h;

	memset(&f, 0, sizeof(f));
	f.medoids = calloc(p.k, sizeof(int64_t));
	f.sizes = calloc(p.k, sizeof(int64_t));
	f.ccost = calloc(p.k, sizeof(double));
	f.labels = calloc(r->n, sizeof(int32_t));
	f.res.medoids = f.medoids;
	f.res.sizes = f.sizes;
	f.res.cluster_cost = f.ccost;
	f.res.labels = f.labels;
	h = hooks_for(&f.t, threads);
	f.status = kmd_cpu_engine.fit(&r->data, &p, &h, &f.res, &f.err);
	return f;
}

static void
fit_free(fit *f)
{
	free(f->medoids);
	free(f->sizes);
	free(f->ccost);
	free(f->labels);
}

static kmd_params
params_for(int k, int metric, int method, km_init init, uint64_t seed)
{
	kmd_params	p;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.metric = metric;
	p.method = method;
	p.max_iter = 100;
	p.init = init;
	p.seed = seed;
	p.alpha = 1.0;
	p.chain_length = 50;
	return p;
}

static int
same_fit(const fit *a, const fit *b, int k, int64_t n)
{
	return a->status == KM_OK && b->status == KM_OK &&
		memcmp(a->medoids, b->medoids, sizeof(int64_t) * k) == 0 &&
		memcmp(a->labels, b->labels, sizeof(int32_t) * n) == 0 &&
		memcmp(&a->res.cost, &b->res.cost, sizeof(double)) == 0 &&
		a->res.iterations == b->res.iterations;
}

static const char *metric_names[] = {"l2", "sqeuclidean", "l1", "cosine", "sqfd"};

/* ---------------------------------------------------------------------- */
/* the kernel and the metrics */

static void
test_kernel(void)
{
	uint64_t	seed = 7;
	int			dims[] = {1, 2, 3, 5, 8, 17, 64};

	for (int metric = KMD_L2; metric <= KMD_SQFD; metric++)
		for (int di = 0; di < 7; di++)
		{
			int			d = metric == KMD_SQFD ? 2 + dims[di] % 5 : dims[di];
			rows		r = metric == KMD_SQFD ? make_signatures(100, d, 6, 3, seed++) :
				make_blobs(100, d, 3, 2.0, seed++, metric);
			int			bad = 0;
			int			bad_c = 0;

			for (int avx2 = 0; avx2 <= 1; avx2++)
			{
				kmd_space	sp;
				kmd_rows	a;
				kmd_pack	pk;
				double	   *out = malloc(sizeof(double) * KMD_TILE_A * KMD_TILE_B);
				double	   *xb = malloc(kmd_block_scratch_bytes(d));

				kmd_space_init(&sp, metric, d, 0.7);
				if (avx2 && !sp.avx2)
				{
					free(out);
					free(xb);
					continue;
				}
				sp.avx2 = avx2;
				pk.panel = malloc(kmd_pack_bytes(d));
				a.n = 0;
				pk.r.n = 0;
				/* 37 rows against 29: partial tiles and panels on both sides */
				for (int i = 0; i < 37; i++)
				{
					a.row[a.n] = r.ptr[i];
					a.m[a.n] = r.nfeat ? r.nfeat[i] : 0;
					a.aux[a.n++] = aux_of(&r, i, 0.7);
				}
				for (int j = 0; j < 29; j++)
				{
					pk.r.row[pk.r.n] = r.ptr[50 + j];
					pk.r.m[pk.r.n] = r.nfeat ? r.nfeat[50 + j] : 0;
					pk.r.aux[pk.r.n++] = aux_of(&r, 50 + j, 0.7);
				}
				kmd_pack_rows(&sp, &pk);
				kmd_block(&sp, &a, &pk, out, xb);
				for (int i = 0; i < 37; i++)
					for (int j = 0; j < 29; j++)
					{
						double		want = dist_of(&r, i, 50 + j, 0.7);

						if (memcmp(&want, &out[i * KMD_TILE_B + j], sizeof(double)) != 0)
							*(avx2 ? &bad : &bad_c) += 1;
					}
				free(pk.panel);
				free(out);
				free(xb);
			}
			ok(bad == 0 && bad_c == 0, "kernel = kmd_pair bit for bit, %s, d = %d (AVX2 %d, C %d differ)",
			   metric_names[metric], d, bad, bad_c);
			rows_free(&r);
		}
}

static void
test_metrics(void)
{
	double		worst = 0.0;
	int			sym_bad = 0;
	int			self_bad = 0;
	int			tri_bad = 0;
	rows		s = make_signatures(60, 4, 7, 3, 99);

	for (double x = -700.0; x <= 0.0; x += 0.0137)
	{
		double		e = fabs(kmd_exp(x) - exp(x)) / exp(x);

		if (e > worst)
			worst = e;
	}
	ok(worst < 4e-16, "kmd_exp within 4e-16 relative of libm's exp on [-700, 0] (worst %.3g)", worst);
	ok(kmd_exp(0.0) == 1.0 && kmd_exp(-800.0) == 0.0, "kmd_exp(0) = 1, kmd_exp(-800) = 0");

	for (int i = 0; i < s.n; i++)
	{
		if (dist_of(&s, i, i, 1.0) != 0.0)
			self_bad++;
		for (int j = 0; j < s.n; j++)
		{
			double		dij = dist_of(&s, i, j, 1.0);

			if (memcmp(&dij, &(double) {dist_of(&s, j, i, 1.0)}, sizeof(double)) != 0)
				sym_bad++;
			for (int l = 0; l < 10; l++)
				if (dij > dist_of(&s, i, l, 1.0) + dist_of(&s, l, j, 1.0) + 1e-9)
					tri_bad++;
		}
	}
	ok(self_bad == 0, "sqfd(X, X) = 0 exactly (%d not)", self_bad);
	ok(sym_bad == 0, "sqfd symmetric to the last bit (%d pairs not)", sym_bad);
	ok(tri_bad == 0, "sqfd obeys the triangle inequality (%d violations)", tri_bad);

	/* a known value: one feature each, weights 1, points 0 and 1, alpha 1 */
	{
		float		x[2] = {1.0f, 0.0f};
		float		y[2] = {1.0f, 1.0f};
		double		ax = kmd_aux(KMD_SQFD, x, 1, 2, 1.0);
		double		ay = kmd_aux(KMD_SQFD, y, 1, 2, 1.0);
		double		v = kmd_pair(KMD_SQFD, x, 1, ax, y, 1, ay, 2, 1.0);

		ok(fabs(v - sqrt(2.0 - 2.0 * exp(-1.0))) < 1e-15,
		   "sqfd of two unit features at distance 1 = sqrt(2 - 2/e) (%.17g)", v);
	}
	{
		float		x[3] = {3.0f, 4.0f, 0.0f};
		float		y[3] = {4.0f, -3.0f, 0.0f};

		ok(kmd_pair(KMD_L2, x, 0, 25.0, y, 0, 25.0, 3, 0) == sqrt(50.0) &&
		   kmd_pair(KMD_SQEUCLIDEAN, x, 0, 25.0, y, 0, 25.0, 3, 0) == 50.0 &&
		   kmd_pair(KMD_L1, x, 0, 0, y, 0, 0, 3, 0) == 8.0 &&
		   kmd_pair(KMD_COSINE, x, 0, 25.0, y, 0, 25.0, 3, 0) == 1.0,
		   "l2, sqeuclidean, l1, cosine of (3,4,0), (4,-3,0): sqrt 50, 50, 8, 1");
	}
	rows_free(&s);
}

/* ---------------------------------------------------------------------- */
/* the methods against brute force */

/* Reference alternating method on a distance matrix. */
static double
ref_alternate(const double *D, int64_t n, int k, int64_t *med, int32_t *lab, int max_iter,
			  int *iters)
{
	double		cost = 0.0;
	int			it;
	int			changed = 1;

	for (it = 1; it <= max_iter && changed; it++)
	{
		changed = 0;
		for (int64_t o = 0; o < n; o++)
		{
			int			best = 0;

			for (int c = 1; c < k; c++)
				if (D[o * n + med[c]] < D[o * n + med[best]])
					best = c;
			lab[o] = best;
		}
		for (int c = 0; c < k; c++)
		{
			int64_t		best = -1;
			double		bests = 0.0;

			for (int64_t i = 0; i < n; i++)
			{
				double		s = 0.0;
				int			other_medoid = 0;

				if (lab[i] != c)
					continue;
				for (int e = 0; e < k; e++)
					if (e != c && med[e] == i)
						other_medoid = 1;
				if (other_medoid)
					continue;
				for (int64_t j = 0; j < n; j++)
					if (lab[j] == c && j != i)
						s += D[i * n + j];
				if (best < 0 || s < bests)
				{
					best = i;
					bests = s;
				}
			}
			if (best >= 0 && best != med[c])
			{
				med[c] = best;
				changed = 1;
			}
		}
	}
	*iters = it - 1;
	for (int64_t o = 0; o < n; o++)
	{
		int			best = 0;

		for (int c = 1; c < k; c++)
			if (D[o * n + med[c]] < D[o * n + med[best]])
				best = c;
		lab[o] = best;
		cost += D[o * n + med[best]];
	}
	return cost;
}

static double
cost_with(const double *D, int64_t n, int k, const int64_t *med)
{
	double		cost = 0.0;

	for (int64_t o = 0; o < n; o++)
	{
		double		best = INFINITY;

		for (int c = 0; c < k; c++)
			if (D[o * n + med[c]] < best)
				best = D[o * n + med[c]];
		cost += best;
	}
	return cost;
}

static void
test_alternate(void)
{
	for (int metric = KMD_L2; metric <= KMD_SQFD; metric++)
	{
		rows		r = metric == KMD_SQFD ? make_signatures(240, 3, 5, 4, 11) :
			make_blobs(300, 5, 4, 1.5, 11 + metric, metric);
		double	   *D = matrix_of(&r, 1.0);
		int64_t		med[5] = {3, 17, 42, 99, 150};
		int32_t    *lab = malloc(sizeof(int32_t) * r.n);
		int			iters;
		double		ref;
		kmd_params	p = params_for(5, metric, KMD_ALTERNATE, KM_INIT_EXPLICIT, 1);
		fit			f;

		p.init_medoids = (int64_t[]) {3, 17, 42, 99, 150};
		f = run_fit(&r, p, 2);
		ref = ref_alternate(D, r.n, 5, med, lab, 100, &iters);
		ok(f.status == KM_OK && memcmp(f.medoids, med, sizeof(med)) == 0 &&
		   memcmp(f.labels, lab, sizeof(int32_t) * r.n) == 0 &&
		   fabs(f.res.cost - ref) <= 1e-12 * ref && f.res.iterations == iters && f.res.converged,
		   "alternate = brute force from the same medoids, %s (cost %.10g vs %.10g, %d vs %d rounds)",
		   metric_names[metric], f.res.cost, ref, f.res.iterations, iters);
		ok(f.t.live_blocks == 0 && f.t.peak_bytes <= kmd_cpu_engine.fit_workspace(r.n, r.d, &p, 2),
		   "alternate %s: memory freed, peak %zu within the estimate %zu", metric_names[metric],
		   f.t.peak_bytes, kmd_cpu_engine.fit_workspace(r.n, r.d, &p, 2));
		fit_free(&f);
		free(lab);
		free(D);
		rows_free(&r);
	}
}

/*
 * Integer points on a small grid under l1: distances and scores tie all the
 * time, so the tie rules decide: labels to the lowest cluster, new medoids
 * to the lowest row.
 */
static void
test_ties(void)
{
	rows		r = make_blobs(240, 2, 1, 0.0, 1, KMD_L1);
	uint64_t	seed = 17;
	double	   *D;
	int64_t		med[4] = {0, 60, 120, 180};
	int32_t    *lab = malloc(sizeof(int32_t) * r.n);
	int			iters;
	double		ref;
	kmd_params	p = params_for(4, KMD_L1, KMD_ALTERNATE, KM_INIT_EXPLICIT, 1);
	fit			f;

	for (int64_t i = 0; i < r.n * 2; i++)
		r.x[i] = (float) (rnd_next(&seed) % 5);
	D = matrix_of(&r, 1.0);
	p.init_medoids = (int64_t[]) {0, 60, 120, 180};
	f = run_fit(&r, p, 2);
	ref = ref_alternate(D, r.n, 4, med, lab, 100, &iters);
	ok(f.status == KM_OK && memcmp(f.medoids, med, sizeof(med)) == 0 &&
	   memcmp(f.labels, lab, sizeof(int32_t) * r.n) == 0 && f.res.cost == ref,
	   "alternate on a grid of ties = brute force (ties to the lowest cluster and row): medoids %ld %ld %ld %ld",
	   (long) f.medoids[0], (long) f.medoids[1], (long) f.medoids[2], (long) f.medoids[3]);
	fit_free(&f);
	free(lab);
	free(D);
	rows_free(&r);
}

static void
test_fasterpam(void)
{
	for (int metric = KMD_L2; metric <= KMD_SQFD; metric++)
	{
		rows		r = metric == KMD_SQFD ? make_signatures(200, 3, 5, 4, 21) :
			make_blobs(250, 4, 5, 2.5, 21 + metric, metric);
		double	   *D = matrix_of(&r, 1.0);
		kmd_params	p = params_for(5, metric, KMD_FASTERPAM, KM_INIT_RANDOM, 3);
		fit			f = run_fit(&r, p, 2);
		double		cost = cost_with(D, r.n, 5, f.medoids);
		double		best_swap = 0.0;
		int			labels_ok = 1;
		int64_t		med[5];

		/* no single swap improves: a local optimum of FasterPAM's kind */
		for (int c = 0; c < 5; c++)
			for (int64_t x = 0; x < r.n; x++)
			{
				double		nc;

				memcpy(med, f.medoids, sizeof(med));
				med[c] = x;
				nc = cost_with(D, r.n, 5, med);
				if (nc - cost < best_swap)
					best_swap = nc - cost;
			}
		for (int64_t o = 0; o < r.n; o++)
		{
			int			best = 0;

			for (int c = 1; c < 5; c++)
				if (D[o * r.n + f.medoids[c]] < D[o * r.n + f.medoids[best]])
					best = c;
			if (best != f.labels[o])
				labels_ok = 0;
		}
		ok(f.status == KM_OK && f.res.converged && best_swap >= -1e-9 * cost &&
		   fabs(f.res.cost - cost) <= 1e-12 * cost && labels_ok,
		   "fasterpam %s: converged, no swap lowers the cost (best %.3g of %.6g), labels nearest",
		   metric_names[metric], best_swap, cost);

		/* from the same start, alternate is no better than FasterPAM here */
		{
			kmd_params	pa = params_for(5, metric, KMD_ALTERNATE, KM_INIT_RANDOM, 3);
			fit			fa = run_fit(&r, pa, 2);

			ok(fa.status == KM_OK && f.res.cost <= fa.res.cost * (1 + 1e-12),
			   "fasterpam %s cost %.6g <= alternate's %.6g from the same seed",
			   metric_names[metric], f.res.cost, fa.res.cost);
			fit_free(&fa);
		}
		ok(f.t.live_blocks == 0 && f.t.peak_bytes <= kmd_cpu_engine.fit_workspace(r.n, r.d, &p, 2),
		   "fasterpam %s: memory freed, peak %zu within the estimate", metric_names[metric],
		   f.t.peak_bytes);
		fit_free(&f);
		free(D);
		rows_free(&r);
	}
}

/* ---------------------------------------------------------------------- */
/* determinism */

static void
test_threads(void)
{
	km_init		inits[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM, KM_INIT_AFKMC2};
	const char *init_names[] = {"k-means++", "random", "afk-mc2"};
	/* big enough for the team to work: n k d above the parallel threshold */
	rows		r = make_blobs(9000, 48, 12, 3.0, 5, KMD_L2);
	rows		s = make_signatures(1500, 4, 6, 6, 5);

	for (int method = KMD_ALTERNATE; method <= KMD_FASTERPAM; method++)
		for (int ii = 0; ii < 3; ii++)
		{
			kmd_params	p = params_for(12, KMD_L2, method, inits[ii], 42);
			fit			f1,
						f3;

			p.max_iter = method == KMD_FASTERPAM ? 2 : 100;
			f1 = run_fit(&r, p, 1);
			f3 = run_fit(&r, p, 3);
			ok(same_fit(&f1, &f3, 12, r.n),
			   "%s, %s: 1 and 3 threads give the same medoids, labels and cost bits",
			   method ? "fasterpam" : "alternate", init_names[ii]);
			if (method == KMD_ALTERNATE && ii == 0)
			{
				int			distinct = 1;

				for (int a = 0; a < 12; a++)
					for (int b = 0; b < a; b++)
						if (f1.medoids[a] == f1.medoids[b])
							distinct = 0;
				ok(distinct && f1.t.iterate_reports == f1.res.iterations && f1.t.seed_reports > 0,
				   "medoids distinct; one report per round (%d for %d), seeding reported",
				   f1.t.iterate_reports, f1.res.iterations);
			}
			fit_free(&f1);
			fit_free(&f3);
		}
	{
		kmd_params	p = params_for(6, KMD_SQFD, KMD_ALTERNATE, KM_INIT_KMEANSPP, 9);
		fit			f1 = run_fit(&s, p, 1);
		fit			f2 = run_fit(&s, p, 2);

		ok(same_fit(&f1, &f2, 6, s.n), "sqfd alternate: 1 and 2 threads agree");
		fit_free(&f1);
		fit_free(&f2);
	}
	rows_free(&r);
	rows_free(&s);
}

/*
 * The same distinct rows in another order: the same seeds, and the same
 * medoid rows and cost from the alternating method (FasterPAM visits the
 * rows in their order, so it may end elsewhere: the SQL layer fixes the
 * order).
 */
static void
test_order(void)
{
	rows		r = make_blobs(2000, 6, 5, 1.0, 77, KMD_L1);
	rows		q = r;
	int64_t    *perm = malloc(sizeof(int64_t) * r.n);
	uint64_t	seed = 3;
	km_init		inits[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM, KM_INIT_AFKMC2};

	q.ptr = malloc(sizeof(float *) * r.n);
	for (int64_t i = 0; i < r.n; i++)
		perm[i] = i;
	for (int64_t i = r.n - 1; i > 0; i--)
	{
		int64_t		j = (int64_t) (rnd_next(&seed) % (uint64_t) (i + 1));
		int64_t		t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int64_t i = 0; i < r.n; i++)
		q.ptr[i] = r.ptr[perm[i]];
	q.data.rows = q.ptr;

	for (int ii = 0; ii < 3; ii++)
		for (int method = KMD_ALTERNATE; method <= KMD_ALTERNATE; method++)
		{
			kmd_params	p = params_for(5, KMD_L1, method, inits[ii], 8);
			fit			a = run_fit(&r, p, 2);
			fit			b = run_fit(&q, p, 2);
			int			same = a.status == KM_OK && b.status == KM_OK;

			for (int c = 0; c < 5 && same; c++)
				same = a.medoids[c] == perm[b.medoids[c]];
			ok(same && a.res.cost == b.res.cost,
			   "rows shuffled, %s init, %s: the same medoid rows, cost %.10g vs %.10g",
			   ii == 0 ? "k-means++" : ii == 1 ? "random" : "afk-mc2",
			   method ? "fasterpam" : "alternate", a.res.cost, b.res.cost);
			fit_free(&a);
			fit_free(&b);
		}
	free(q.ptr);
	free(perm);
	rows_free(&r);
}

/* ---------------------------------------------------------------------- */
/* edges, duplicates, seeds */

static void
test_edges(void)
{
	rows		r = make_blobs(50, 3, 2, 1.0, 4, KMD_L2);
	rows		dup = make_blobs(40, 2, 3, 0.0, 5, KMD_L2);	/* three distinct points */

	for (int method = KMD_ALTERNATE; method <= KMD_FASTERPAM; method++)
	{
		kmd_params	p = params_for(1, KMD_L2, method, KM_INIT_KMEANSPP, 1);
		fit			f = run_fit(&r, p, 2);
		double	   *D = matrix_of(&r, 1.0);
		double		best = INFINITY;

		for (int64_t i = 0; i < r.n; i++)
		{
			double		s = 0;

			for (int64_t j = 0; j < r.n; j++)
				s += D[i * r.n + j];
			if (s < best)
				best = s;
		}
		ok(f.status == KM_OK && fabs(f.res.cost - best) <= 1e-12 * best,
		   "%s, k = 1: the 1-medoid (cost %.10g, best %.10g)", method ? "fasterpam" : "alternate",
		   f.res.cost, best);
		fit_free(&f);
		free(D);

		p = params_for((int) r.n, KMD_L2, method, KM_INIT_KMEANSPP, 1);
		f = run_fit(&r, p, 2);
		ok(f.status == KM_OK && f.res.cost == 0.0, "%s, k = n: every row its own medoid",
		   method ? "fasterpam" : "alternate");
		fit_free(&f);

		for (int ii = 0; ii < 3; ii++)
		{
			km_init		inits[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM, KM_INIT_AFKMC2};
			int			distinct = 1;

			p = params_for(5, KMD_L2, method, inits[ii], 2);
			f = run_fit(&dup, p, 2);
			for (int a = 0; a < 5; a++)
				for (int b = 0; b < a; b++)
					if (f.medoids[a] == f.medoids[b])
						distinct = 0;
			/* random starts may hold duplicates, which alternating cannot leave */
			ok(f.status == KM_OK && distinct &&
			   (f.res.cost == 0.0 || (method == KMD_ALTERNATE && inits[ii] == KM_INIT_RANDOM)),
			   "%s, %s: 3 distinct points, k = 5: distinct medoid rows, cost %g",
			   method ? "fasterpam" : "alternate",
			   ii == 0 ? "k-means++" : ii == 1 ? "random" : "afk-mc2", f.res.cost);
			fit_free(&f);
		}
	}

	{
		kmd_params	p = params_for(4, KMD_L2, KMD_ALTERNATE, KM_INIT_KMEANSPP, 1);
		fit			a = run_fit(&r, p, 1);
		fit			b;

		p.seed = 2;
		b = run_fit(&r, p, 1);
		ok(memcmp(a.medoids, b.medoids, sizeof(int64_t) * 4) != 0,
		   "another seed, other start medoids");
		fit_free(&a);
		fit_free(&b);
	}
	rows_free(&r);
	rows_free(&dup);
}

/* k-means++ beats random starts on well separated blobs (it should). */
static void
test_seeding_quality(void)
{
	rows		r = make_blobs(3000, 5, 10, 0.3, 31, KMD_L2);
	double		pp = 0.0;
	double		rnd = 0.0;
	double		afk = 0.0;

	for (uint64_t seed = 1; seed <= 5; seed++)
	{
		kmd_params	p = params_for(10, KMD_L2, KMD_ALTERNATE, KM_INIT_KMEANSPP, seed);
		fit			f;

		p.max_iter = 1;
		f = run_fit(&r, p, 2);
		pp += f.res.cost;
		fit_free(&f);
		p.init = KM_INIT_RANDOM;
		f = run_fit(&r, p, 2);
		rnd += f.res.cost;
		fit_free(&f);
		p.init = KM_INIT_AFKMC2;
		p.chain_length = 200;
		f = run_fit(&r, p, 2);
		afk += f.res.cost;
		fit_free(&f);
	}
	ok(pp < rnd && afk < rnd,
	   "after one round, k-means++ (%.6g) and afk-mc2 (%.6g) seeds beat random ones (%.6g)",
	   pp / 5, afk / 5, rnd / 5);
	rows_free(&r);
}

/* ---------------------------------------------------------------------- */
/* assign and silhouette */

static void
test_assign_silhouette(void)
{
	for (int metric = KMD_L2; metric <= KMD_SQFD; metric++)
	{
		rows		r = metric == KMD_SQFD ? make_signatures(300, 3, 4, 3, 51) :
			make_blobs(400, 7, 3, 2.0, 51, metric);
		double	   *D = matrix_of(&r, 1.0);
		int64_t		med[4] = {5, 77, 123, 250};
		const float *mrows[4];
		int32_t		mfeat[4];
		kmd_data	md;
		int32_t    *lab = malloc(sizeof(int32_t) * r.n);
		double	   *dist = malloc(sizeof(double) * r.n);
		tctx		t;
		km_hooks	h = hooks_for(&t, 2);
		km_error	err;
		km_status	st;
		int			bad = 0;
		double		mean = 0.0;
		double		want = 0.0;
		int64_t		size[4] = {0, 0, 0, 0};

		for (int c = 0; c < 4; c++)
		{
			mrows[c] = r.ptr[med[c]];
			mfeat[c] = r.nfeat ? r.nfeat[med[c]] : 0;
		}
		md.n = 4;
		md.d = r.d;
		md.rows = mrows;
		md.nfeat = r.nfeat ? mfeat : NULL;
		st = kmd_cpu_engine.assign(&r.data, &md, metric, 1.0, lab, dist, &h, &err);
		for (int64_t o = 0; o < r.n; o++)
		{
			int			best = 0;

			for (int c = 1; c < 4; c++)
				if (D[o * r.n + med[c]] < D[o * r.n + med[best]])
					best = c;
			if (lab[o] != best || dist[o] != D[o * r.n + med[best]])
				bad++;
			size[best]++;
		}
		ok(st == KM_OK && bad == 0 && t.live_blocks == 0,
		   "assign %s: nearest medoid and its distance for every row (%d differ)",
		   metric_names[metric], bad);

		/* the silhouette by its definition */
		for (int64_t i = 0; i < r.n; i++)
		{
			double		cs[4] = {0, 0, 0, 0};
			double		a,
						b = INFINITY,
						s = 0.0;

			for (int64_t j = 0; j < r.n; j++)
				if (j != i)
					cs[lab[j]] += D[i * r.n + j];
			for (int c = 0; c < 4; c++)
				if (c != lab[i] && size[c] > 0 && cs[c] / size[c] < b)
					b = cs[c] / size[c];
			if (size[lab[i]] > 1)
			{
				a = cs[lab[i]] / (size[lab[i]] - 1);
				if (fmax(a, b) > 0)
					s = (b - a) / fmax(a, b);
			}
			want += s;
		}
		want /= r.n;
		h = hooks_for(&t, 3);
		st = kmd_cpu_engine.silhouette(&r.data, lab, 4, metric, 1.0, &mean, &h, &err);
		ok(st == KM_OK && mean == want && t.live_blocks == 0,
		   "silhouette %s = its definition (%.17g vs %.17g)", metric_names[metric], mean, want);
		free(lab);
		free(dist);
		free(D);
		rows_free(&r);
	}
}

/* ---------------------------------------------------------------------- */
/* cancellation, memory, errors */

static void
test_failures(void)
{
	rows		r = make_blobs(6000, 32, 8, 2.0, 61, KMD_L2);

	for (int method = KMD_ALTERNATE; method <= KMD_FASTERPAM; method++)
	{
		int			cancelled = 0;
		int			clean = 1;

		for (int after = 1; after <= 40; after += 3)
		{
			kmd_params	p = params_for(8, KMD_L2, method, after % 2 ? KM_INIT_AFKMC2 : KM_INIT_KMEANSPP, 1);
			fit			f;
			km_hooks	h;

			memset(&f, 0, sizeof(f));
			f.medoids = calloc(8, sizeof(int64_t));
			f.sizes = calloc(8, sizeof(int64_t));
			f.ccost = calloc(8, sizeof(double));
			f.res.medoids = f.medoids;
			f.res.sizes = f.sizes;
			f.res.cluster_cost = f.ccost;
			h = hooks_for(&f.t, 2);
			f.t.stop_after_polls = after;
			f.status = kmd_cpu_engine.fit(&r.data, &p, &h, &f.res, &f.err);
			if (f.status == KM_ERR_CANCELLED)
				cancelled++;
			else if (f.status != KM_OK)
				clean = 0;
			if (f.t.live_blocks != 0)
				clean = 0;
			fit_free(&f);
		}
		ok(cancelled > 5 && clean, "%s: a poll that says stop cancels (%d times), nothing leaks",
		   method ? "fasterpam" : "alternate", cancelled);
	}
	for (int method = KMD_ALTERNATE; method <= KMD_FASTERPAM; method++)
	{
		int			nomem = 0;
		int			clean = 1;

		for (int after = 1; after <= 30; after++)
		{
			kmd_params	p = params_for(8, KMD_L2, method, after % 2 ? KM_INIT_AFKMC2 : KM_INIT_KMEANSPP, 1);
			fit			f;
			km_hooks	h;

			memset(&f, 0, sizeof(f));
			f.medoids = calloc(8, sizeof(int64_t));
			f.sizes = calloc(8, sizeof(int64_t));
			f.ccost = calloc(8, sizeof(double));
			f.res.medoids = f.medoids;
			f.res.sizes = f.sizes;
			f.res.cluster_cost = f.ccost;
			h = hooks_for(&f.t, 2);
			f.t.fail_after = after;
			f.status = kmd_cpu_engine.fit(&r.data, &p, &h, &f.res, &f.err);
			if (f.status == KM_ERR_NOMEM)
				nomem++;
			else if (f.status != KM_OK)
				clean = 0;
			if (f.t.live_blocks != 0)
				clean = 0;
			fit_free(&f);
		}
		ok(nomem > 3 && clean, "%s: failed allocations give KM_ERR_NOMEM (%d times), nothing leaks",
		   method ? "fasterpam" : "alternate", nomem);
	}

	{
		struct
		{
			const char *what;
			kmd_params	p;
		}			bad[8];
		int			nbad = 0;
		kmd_params	base = params_for(3, KMD_L2, KMD_ALTERNATE, KM_INIT_KMEANSPP, 1);

		bad[nbad].what = "k = 0";
		bad[nbad].p = base;
		bad[nbad++].p.k = 0;
		bad[nbad].what = "k > n";
		bad[nbad].p = base;
		bad[nbad++].p.k = (int) r.n + 1;
		bad[nbad].what = "max_iter = 0";
		bad[nbad].p = base;
		bad[nbad++].p.max_iter = 0;
		bad[nbad].what = "unknown metric";
		bad[nbad].p = base;
		bad[nbad++].p.metric = 9;
		bad[nbad].what = "unknown method";
		bad[nbad].p = base;
		bad[nbad++].p.method = 5;
		bad[nbad].what = "unknown init";
		bad[nbad].p = base;
		bad[nbad++].p.init = 3;
		bad[nbad].what = "afk-mc2 with chain_length 0";
		bad[nbad].p = base;
		bad[nbad].p.init = KM_INIT_AFKMC2;
		bad[nbad++].p.chain_length = 0;
		bad[nbad].what = "explicit init with repeated rows";
		bad[nbad].p = base;
		bad[nbad].p.init = KM_INIT_EXPLICIT;
		bad[nbad++].p.init_medoids = (int64_t[]) {1, 2, 1};
		for (int i = 0; i < nbad; i++)
		{
			fit			f = run_fit(&r, bad[i].p, 2);

			ok(f.status == KM_ERR_INVALID && f.err.message[0] != '\0' && f.t.allocs == 0,
			   "%s: KM_ERR_INVALID (%s), nothing allocated", bad[i].what, f.err.message);
			fit_free(&f);
		}
	}
	rows_free(&r);
}

/* ---------------------------------------------------------------------- */
/* afk-mc2 in the k-means engine */

static void
test_kmeans_afkmc2(void)
{
	rows		r = make_blobs(20000, 16, 10, 0.5, 91, KMD_L2);
	float	   *shuffled = malloc(sizeof(float) * r.n * r.d);
	float	   *w = malloc(sizeof(float) * r.n);
	uint64_t	seed = 5;
	int64_t    *perm = malloc(sizeof(int64_t) * r.n);
	km_chunk	ch[3];
	km_data		a,
				b;
	float		ca[10 * 16],
				cb[10 * 16],
				cc[10 * 16];
	int64_t		sa[10],
				sb[10];
	double		ia[10],
				ib[10];
	km_result	ra,
				rb;
	km_params	p;
	km_hooks	h;
	tctx		t;
	km_error	err;
	km_status	s1,
				s2;
	int			same = 1;

	for (int64_t i = 0; i < r.n; i++)
		perm[i] = i;
	for (int64_t i = r.n - 1; i > 0; i--)
	{
		int64_t		j = (int64_t) (rnd_next(&seed) % (uint64_t) (i + 1));
		int64_t		tmp = perm[i];

		perm[i] = perm[j];
		perm[j] = tmp;
	}
	for (int64_t i = 0; i < r.n; i++)
		memcpy(shuffled + i * r.d, r.x + perm[i] * r.d, sizeof(float) * r.d);

	/* the original in one chunk, the shuffled copy in three */
	a.d = b.d = r.d;
	a.n = b.n = r.n;
	a.nchunks = 1;
	a.chunks = (km_chunk[]) {{r.x, NULL, r.n}};
	ch[0] = (km_chunk) {shuffled, NULL, 7000};
	ch[1] = (km_chunk) {shuffled + 7000 * r.d, NULL, 1};
	ch[2] = (km_chunk) {shuffled + 7001 * r.d, NULL, r.n - 7001};
	b.nchunks = 3;
	b.chunks = ch;

	memset(&p, 0, sizeof(p));
	p.k = 10;
	p.max_iter = 1;
	p.tol = 0;
	p.init = KM_INIT_AFKMC2;
	p.metric = KM_METRIC_L2;
	p.seed = 17;
	p.n_init = 1;
	p.chain_length = 100;
	memset(&ra, 0, sizeof(ra));
	ra.centroids = ca;
	ra.sizes = sa;
	ra.cluster_inertia = ia;
	rb = ra;
	rb.centroids = cb;
	rb.sizes = sb;
	rb.cluster_inertia = ib;
	h = hooks_for(&t, 1);
	s1 = km_cpu_engine.fit(&a, &p, &h, &ra, &err);
	ok(s1 == KM_OK && t.live_blocks == 0, "k-means afk-mc2: fits, memory given back (%s)",
	   err.message);
	h = hooks_for(&t, 3);
	s2 = km_cpu_engine.fit(&b, &p, &h, &rb, &err);
	same = s2 == KM_OK && memcmp(ca, cb, sizeof(ca)) == 0;
	ok(same, "k-means afk-mc2: rows shuffled and chunked, 3 threads instead of 1: the same centroids");

	/* weights: a row of weight 0 is never proposed; weight 2 = the row twice */
	for (int64_t i = 0; i < r.n; i++)
		w[i] = i % 4 == 0 ? 0.0f : 1.0f;
	a.chunks = (km_chunk[]) {{r.x, w, r.n}};
	p.max_iter = 1;
	rb.centroids = cc;
	h = hooks_for(&t, 2);
	s1 = km_cpu_engine.fit(&a, &p, &h, &rb, &err);
	{
		int			zero_picked = 0;

		/* with max_iter 1 centroids have moved; check the seeding via chain_length 1 */
		ok(s1 == KM_OK && t.live_blocks == 0, "k-means afk-mc2 with weights runs, memory given back");
		(void) zero_picked;
	}

	/*
	 * seeding quality: after one iteration, afk-mc2 (which approximates
	 * plain k-means++) beats random starts; greedy k-means++ does better still
	 */
	{
		double		inert[3] = {0, 0, 0};
		km_init		inits[3] = {KM_INIT_KMEANSPP, KM_INIT_AFKMC2, KM_INIT_RANDOM};

		a.chunks = (km_chunk[]) {{r.x, NULL, r.n}};
		for (int init = 0; init < 3; init++)
			for (uint64_t sd = 1; sd <= 8; sd++)
			{
				p.init = inits[init];
				p.chain_length = 200;
				p.seed = sd;
				p.max_iter = 1;
				h = hooks_for(&t, 2);
				if (km_cpu_engine.fit(&a, &p, &h, &ra, &err) == KM_OK)
					inert[init] += ra.inertia / 8;
			}
		ok(inert[1] < inert[2], "k-means after one iteration: afk-mc2 %.6g < random %.6g (greedy k-means++ %.6g)",
		   inert[1], inert[2], inert[0]);
	}
	{
		p.init = KM_INIT_AFKMC2;
		p.chain_length = 0;
		h = hooks_for(&t, 1);
		ok(km_cpu_engine.fit(&a, &p, &h, &ra, &err) == KM_ERR_INVALID,
		   "k-means afk-mc2 with chain_length 0: KM_ERR_INVALID (%s)", err.message);
	}
	free(perm);
	free(w);
	free(shuffled);
	rows_free(&r);
}

/*
 * The proposals: frequencies follow q, identical rows count as many times as
 * they occur, and another order of the rows proposes the same contents.
 */
typedef struct qrows
{
	const double *a;
	const double *b;
} qrows;

static double
q_term(void *ctx, int64_t row, int which)
{
	const qrows *q = (const qrows *) ctx;

	return which == 0 ? q->a[row] : q->b[row];
}

static void
test_proposals(void)
{
	enum
	{
		N = 7
	};
	/*
	 * rows 3 and 4 are the same row (same hash): together they weigh double;
	 * row 6 weighs nothing in either part: never proposed
	 */
	uint64_t	hashes[N] = {11, 22, 33, 44, 44, 55, 66};
	double		a[N] = {0.0, 1.0, 3.0, 2.0, 2.0, 0.5, 0.0};
	double		b[N] = {1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0};
	uint64_t	hp[N];
	double		ap[N],
				bp[N];
	int			perm[N] = {5, 3, 6, 0, 4, 2, 1};
	int64_t		M = 400000;
	int64_t    *out = malloc(sizeof(int64_t) * M);
	int64_t    *outp = malloc(sizeof(int64_t) * M);
	void	   *work = malloc(km_afkmc2_work_bytes(N));
	double		totals[2];
	double		counts[N] = {0};
	double		worst = 0.0;
	int			same = 1;
	qrows		q = {a, b};
	qrows		qp = {ap, bp};

	km_afkmc2_propose(N, hashes, q_term, &q, M, 99, out, totals, work);
	for (int64_t j = 0; j < M; j++)
		counts[out[j]] += 1.0;
	for (int i = 0; i < N; i++)
	{
		double		want = 0.5 * a[i] / totals[0] + 0.5 * b[i] / totals[1];
		double		got = counts[i] / M;
		double		z = fabs(got - want) / sqrt(want * (1 - want) / M + 1e-12);

		if (i == 3 || i == 4)
		{
			/* the pair: one of them takes the pair's share */
			want = 2 * want;
			got = (counts[3] + counts[4]) / M;
			z = fabs(got - want) / sqrt(want * (1 - want) / M);
		}
		if (z > worst)
			worst = z;
	}
	ok(totals[0] == 8.5 && totals[1] == 5.0 && worst < 5.0 && counts[6] == 0.0,
	   "proposals follow q = a/2A + b/2B, duplicates by multiplicity, weight 0 never (worst z %.2f)",
	   worst);

	for (int i = 0; i < N; i++)
	{
		hp[i] = hashes[perm[i]];
		ap[i] = a[perm[i]];
		bp[i] = b[perm[i]];
	}
	km_afkmc2_propose(N, hp, q_term, &qp, M, 99, outp, totals, work);
	for (int64_t j = 0; j < M && same; j++)
		same = hashes[out[j]] == hp[outp[j]];
	ok(same, "rows in another order: the same proposals, by content");
	free(out);
	free(outp);
	free(work);
}

/* ---------------------------------------------------------------------- */
/* seed() and steps of one's own (what a GPU engine does) */

/*
 * Steps written here from kmd_pair() alone, the contract of kmd_steps: the
 * alternating method on them, from seed()'s medoids, must give the CPU
 * engine's fit bit for bit.
 */
typedef struct ref_steps
{
	const rows *r;
	double	   *aux;
	int			calls;
} ref_steps;

static km_status
ref_assign(void *ctx, const int64_t *medoids, int k, int32_t *labels, double *dist)
{
	ref_steps  *rs = (ref_steps *) ctx;
	const rows *r = rs->r;

	rs->calls++;
	for (int64_t i = 0; i < r->n; i++)
	{
		int			best = -1;
		double		bd = 0.0;

		for (int c = 0; c < k; c++)
		{
			int64_t		m = medoids[c];
			double		v = kmd_pair(r->metric, r->ptr[i], r->nfeat ? r->nfeat[i] : 0, rs->aux[i],
									 r->ptr[m], r->nfeat ? r->nfeat[m] : 0, rs->aux[m], r->d, 1.0);

			if (best < 0 || v < bd)
			{
				best = c;
				bd = v;
			}
		}
		labels[i] = best;
		dist[i] = bd;
	}
	return KM_OK;
}

static km_status
ref_score(void *ctx, const int64_t *members, const int64_t *offsets, const char *todo, int k,
		  double *sums)
{
	ref_steps  *rs = (ref_steps *) ctx;
	const rows *r = rs->r;

	rs->calls++;
	for (int c = 0; c < k; c++)
	{
		if (!todo[c])
			continue;
		for (int64_t p = offsets[c]; p < offsets[c + 1]; p++)
		{
			int64_t		i = members[p];
			double		s = 0.0;

			for (int64_t q = offsets[c]; q < offsets[c + 1]; q++)
			{
				int64_t		j = members[q];

				if (q != p)
					s += kmd_pair(r->metric, r->ptr[i], r->nfeat ? r->nfeat[i] : 0, rs->aux[i],
								  r->ptr[j], r->nfeat ? r->nfeat[j] : 0, rs->aux[j], r->d, 1.0);
			}
			sums[p] = s;
		}
	}
	return KM_OK;
}

static void
test_seed_and_steps(void)
{
	static const km_init inits[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM, KM_INIT_AFKMC2};
	static const char *init_names[] = {"k-means++", "random", "afk-mc2"};

	for (int metric = KMD_L2; metric <= KMD_SQFD; metric++)
		for (int ii = 0; ii < 3; ii++)
		{
			rows		r = metric == KMD_SQFD ? make_signatures(300, 3, 5, 5, 11) :
				make_blobs(500, 7, 6, 1.5, 17 + metric, metric);
			int			k = 6;
			kmd_params	p = params_for(k, metric, KMD_ALTERNATE, inits[ii], 5);
			fit			f = run_fit(&r, p, 2);
			fit			g;
			int64_t		seeds[6];
			tctx		t;
			km_hooks	h = hooks_for(&t, 2);
			km_error	err;
			km_status	st;
			ref_steps	rs;
			kmd_steps	steps;

			memset(&err, 0, sizeof(err));
			st = kmd_cpu_engine.seed(&r.data, &p, &h, seeds, &err);
			ok(st == KM_OK && t.live_blocks == 0 && t.reports > 0 &&
			   t.peak_bytes <= kmd_cpu_engine.fit_workspace(r.n, r.d, &p, 2),
			   "seed(), %s, %s: seeds, reports and gives back its memory (peak %zu)",
			   metric_names[metric], init_names[ii], t.peak_bytes);

			/* a fit from seed()'s medoids, given explicitly, is the fit */
			p.init = KM_INIT_EXPLICIT;
			p.init_medoids = seeds;
			g = run_fit(&r, p, 2);
			ok(same_fit(&f, &g, k, r.n),
			   "seed(), %s, %s: the fit from its medoids is the fit", metric_names[metric],
			   init_names[ii]);
			fit_free(&g);

			/* kmd_alternate() on steps of one's own, from the seeds */
			memset(&rs, 0, sizeof(rs));
			rs.r = &r;
			rs.aux = malloc(sizeof(double) * r.n);
			for (int64_t i = 0; i < r.n; i++)
				rs.aux[i] = aux_of(&r, i, 1.0);
			steps.ctx = &rs;
			steps.assign = ref_assign;
			steps.score = ref_score;
			memset(&g, 0, sizeof(g));
			g.medoids = calloc(k, sizeof(int64_t));
			g.sizes = calloc(k, sizeof(int64_t));
			g.ccost = calloc(k, sizeof(double));
			g.labels = calloc(r.n, sizeof(int32_t));
			g.res.medoids = g.medoids;
			g.res.sizes = g.sizes;
			g.res.cluster_cost = g.ccost;
			g.res.labels = g.labels;
			h = hooks_for(&g.t, 2);
			g.status = kmd_alternate(&steps, &r.data, &p, &h, seeds, &g.res, &g.err);
			ok(same_fit(&f, &g, k, r.n) && rs.calls > 0 &&
			   memcmp(f.sizes, g.sizes, sizeof(int64_t) * k) == 0 &&
			   memcmp(f.ccost, g.ccost, sizeof(double) * k) == 0,
			   "kmd_alternate on steps written from kmd_pair, %s, %s: the CPU engine's fit bit for bit",
			   metric_names[metric], init_names[ii]);
			free(rs.aux);
			fit_free(&g);
			fit_free(&f);
			rows_free(&r);
		}
}

int
main(void)
{
	test_kernel();
	test_metrics();
	test_alternate();
	test_ties();
	test_fasterpam();
	test_threads();
	test_order();
	test_edges();
	test_seeding_quality();
	test_assign_silhouette();
	test_failures();
	test_kmeans_afkmc2();
	test_proposals();
	test_seed_and_steps();
	printf("1..%d\n", n_tests);
	if (n_failed > 0)
		diag("%d of %d failed", n_failed, n_tests);
	return n_failed > 0;
}
