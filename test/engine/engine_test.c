/*
 * engine_test.c
 *	  TAP tests of the CPU engine (make test/engine/engine_test).
 *
 * Checks the rules of kmeans_engine.h against brute force: exact labels,
 * order and thread independence, weights, re-seeding of empty clusters,
 * stopping rules, n_init, cancellation, memory accounting and errors.
 * Prints "ok N - ..." / "not ok N - ..." lines and the plan; exits nonzero
 * if anything failed.
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kmeans_engine.h"
#include "km_exact.h"
#include "km_hash.h"
#include "km_kmpar.h"
#include "km_step.h"
#include "km_xsum.h"
#include "cpu_internal.h"

static int	n_tests;
static int	n_failed;

/* One TAP result line; diagnostics follow as "# " lines. */
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
/* random numbers */

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

/* ---------------------------------------------------------------------- */
/* hooks that count memory, polls and reports */

typedef struct test_ctx
{
	int64_t		live_blocks;
	size_t		live_bytes;
	size_t		peak_bytes;
	int64_t		allocs;
	int			fail_after;		/* > 0: the n-th allocation fails */
	int			polls;
	int			stop_after_polls;	/* > 0: poll says stop from then on */
	int			reports;
	int			stop_after_reports;
	int			check_signals;
	int			signals_ok;
	int			threads_seen;
	/* what reports said */
	int			phases[4];
	double		finish_inertia[16];
	int			last_seed_done;
	double		seed_potential;	/* the last seeding report's */
	int			first_relocated;
	double		first_inertia;	/* run 0, iteration 1 */
} test_ctx;

static void *
t_alloc(void *ctx, size_t size)
{
	test_ctx   *t = (test_ctx *) ctx;
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
	test_ctx   *t = (test_ctx *) ctx;
	size_t	   *p = (size_t *) ((char *) ptr - 16);

	t->live_blocks--;
	t->live_bytes -= p[0];
	free(p);
}

/* Whether every thread but the caller blocks all blockable signals. */
static int
workers_block_signals(int *nthreads)
{
	DIR		   *dir = opendir("/proc/self/task");
	struct dirent *e;
	long		self = syscall(SYS_gettid);
	int			good = 1;

	*nthreads = 0;
	if (dir == NULL)
		return 1;
	while ((e = readdir(dir)) != NULL)
	{
		char		path[128];
		char		line[256];
		FILE	   *f;
		long		tid = atol(e->d_name);

		if (tid <= 0)
			continue;
		(*nthreads)++;
		if (tid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof(line), f) != NULL)
			if (strncmp(line, "SigBlk:", 7) == 0)
			{
				unsigned long long m = strtoull(line + 7, NULL, 16);

				/* KILL, STOP and glibc's own 32, 33 cannot be blocked */
				unsigned long long must = 0xffffffffffffffffULL &
					~((1ULL << 8) | (1ULL << 18) | (1ULL << 31) | (1ULL << 32));

				if ((m & must) != must)
					good = 0;
			}
		fclose(f);
	}
	closedir(dir);
	return good;
}

static int
t_poll(void *ctx)
{
	test_ctx   *t = (test_ctx *) ctx;

	t->polls++;
	if (t->check_signals && t->polls == 3)
	{
		int			nth;

		t->signals_ok = workers_block_signals(&nth);
		if (nth > t->threads_seen)
			t->threads_seen = nth;
	}
	return t->stop_after_polls > 0 && t->polls >= t->stop_after_polls;
}

static int
t_report(void *ctx, const km_progress *p)
{
	test_ctx   *t = (test_ctx *) ctx;

	t->reports++;
	if (p->phase >= 0 && p->phase < 4)
		t->phases[p->phase]++;
	if (p->phase == KM_PHASE_FINISH && p->run < 16)
		t->finish_inertia[p->run] = p->inertia;
	if (p->phase == KM_PHASE_SEED)
	{
		t->last_seed_done = (int) p->done;
		t->seed_potential = p->inertia;
	}
	if (p->phase == KM_PHASE_ITERATE && p->iteration == 1 && p->run == 0)
	{
		t->first_relocated = p->relocated;
		t->first_inertia = p->inertia;
	}
	return t->stop_after_reports > 0 && t->reports >= t->stop_after_reports;
}

static km_hooks
hooks_for(test_ctx *t, int threads)
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

/* Threads of this process listed in /proc right now. */
static int
thread_count_now(void)
{
	DIR		   *dir = opendir("/proc/self/task");
	struct dirent *e;
	int			n = 0;

	if (dir == NULL)
		return 1;
	while ((e = readdir(dir)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

/*
 * Threads of this process once every joined worker is gone (1 when all
 * were joined).  pthread_join returns when the kernel clears the thread's
 * id, which is before the thread's task leaves /proc/self/task, so a
 * just-joined thread may still be listed for a moment: wait up to 200 ms
 * for the count to reach 1 (a thread never joined stays listed).
 */
static int
thread_count(void)
{
	int			n = thread_count_now();

	for (int i = 0; i < 200 && n > 1; i++)
	{
		struct timespec ts = {0, 1000000};

		nanosleep(&ts, NULL);
		n = thread_count_now();
	}
	return n;
}

/* ---------------------------------------------------------------------- */
/* data sets */

typedef struct dataset
{
	int64_t		n;
	int			d;
	float	   *x;
	float	   *w;				/* NULL: unweighted */
	int			nchunks;
	km_chunk	chunks[8];
	km_data		data;
} dataset;

/* Point ds->data at its rows, cut into nchunks chunks of uneven size. */
static void
ds_chunk(dataset *ds, int nchunks)
{
	int64_t		at = 0;

	ds->nchunks = nchunks;
	for (int c = 0; c < nchunks; c++)
	{
		int64_t		end = c == nchunks - 1 ? ds->n : ds->n * (c + 1) * (c + 1) / (nchunks * nchunks);

		ds->chunks[c].x = ds->x + at * ds->d;
		ds->chunks[c].w = ds->w != NULL ? ds->w + at : NULL;
		ds->chunks[c].n = end - at;
		at = end;
	}
	ds->data.d = ds->d;
	ds->data.n = ds->n;
	ds->data.nchunks = nchunks;
	ds->data.chunks = ds->chunks;
}

/* The km_data of a data set (fixed up: data sets are copied by value). */
static const km_data *
ds_data(dataset *ds)
{
	ds->data.chunks = ds->chunks;
	return &ds->data;
}

static dataset
ds_alloc(int64_t n, int d, int weighted)
{
	dataset		ds;

	memset(&ds, 0, sizeof(ds));
	ds.n = n;
	ds.d = d;
	ds.x = calloc((size_t) n * d, sizeof(float));
	ds.w = weighted ? calloc(n, sizeof(float)) : NULL;
	ds_chunk(&ds, 1);
	return ds;
}

static void
ds_free(dataset *ds)
{
	free(ds->x);
	free(ds->w);
}

/* Gaussian blobs: nb centres spread by sep, unit noise, plus an offset. */
static dataset
ds_blobs(int64_t n, int d, int nb, double sep, double offset, uint64_t seed,
		 int32_t *truth)
{
	dataset		ds = ds_alloc(n, d, 0);
	double	   *centres = malloc(sizeof(double) * nb * d);
	uint64_t	s = seed * 7919 + 17;

	for (int i = 0; i < nb * d; i++)
		centres[i] = sep * rnd_norm(&s);
	for (int64_t r = 0; r < n; r++)
	{
		int			b = (int) (rnd_next(&s) % nb);

		if (truth != NULL)
			truth[r] = b;
		for (int i = 0; i < d; i++)
			ds.x[r * d + i] = (float) (offset + centres[b * d + i] + rnd_norm(&s));
	}
	free(centres);
	return ds;
}

/* ---------------------------------------------------------------------- */
/* fit and result helpers */

typedef struct fitres
{
	km_result	r;
	km_status	status;
	km_error	error;
	int			k;
	int			d;
} fitres;

static fitres
do_fit(const km_data *data, const km_params *p, const km_hooks *h, int want_labels)
{
	fitres		f;

	memset(&f, 0, sizeof(f));
	f.k = p->k;
	f.d = data->d;
	f.r.centroids = calloc((size_t) p->k * data->d + 1, sizeof(float));
	f.r.sizes = calloc(p->k + 1, sizeof(int64_t));
	f.r.cluster_inertia = calloc(p->k + 1, sizeof(double));
	f.r.labels = want_labels ? calloc(data->n + 1, sizeof(int32_t)) : NULL;
	f.status = km_cpu_engine.fit(data, p, h, &f.r, &f.error);
	return f;
}

static void
fit_free(fitres *f)
{
	free(f->r.centroids);
	free(f->r.sizes);
	free(f->r.cluster_inertia);
	free(f->r.labels);
}

static km_params
params_for(int k, km_init init, km_metric metric, uint64_t seed)
{
	km_params	p;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = 100;
	p.tol = 0.0;
	p.init = init;
	p.metric = metric;
	p.seed = seed;
	p.n_init = 1;
	return p;
}

/* Largest |a - b| / max(1, |b|) over count floats. */
static double
max_rel(const float *a, const float *b, size_t count)
{
	double		m = 0.0;

	for (size_t i = 0; i < count; i++)
	{
		double		den = fabs((double) b[i]) > 1.0 ? fabs((double) b[i]) : 1.0;
		double		e = fabs((double) a[i] - b[i]) / den;

		if (e > m || isnan(e))
			m = isnan(e) ? INFINITY : e;
	}
	return m;
}

static int
all_finite(const float *a, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

/*
 * Brute force: exact labels and costs of every row for centroids c, as
 * km_exact_nearest decides them (cosine on normalised rows).
 */
static void
brute_labels(const dataset *ds, const float *c, int k, int cosine,
			 int32_t *labels, double *costs)
{
	const int	d = ds->d;
	double	   *cn = malloc(sizeof(double) * k);
	float	   *xr = malloc(sizeof(float) * d);

	for (int j = 0; j < k; j++)
		cn[j] = km_exact_norm(c + (size_t) j * d, d);
	for (int64_t r = 0; r < ds->n; r++)
	{
		double		cost;

		memcpy(xr, ds->x + r * d, sizeof(float) * d);
		if (cosine)
			km_normalize_row(xr, xr, d);
		labels[r] = km_exact_nearest(xr, c, cosine ? cn : NULL, k, d, cosine, &cost);
		if (costs != NULL)
			costs[r] = cost;
	}
	free(cn);
	free(xr);
}

/* ---------------------------------------------------------------------- */
/* tests */

/*
 * Random assignment problems with the traps: far offsets, duplicated rows,
 * rows sitting on centroids and exact ties (small integer coordinates).
 */
static void
test_exact_labels(void)
{
	static const int dims[] = {1, 2, 3, 4, 5, 8, 17, 64, 130};
	static const int ks[] = {1, 2, 3, 7, 16, 17, 40, 100};
	uint64_t	s = 12345;
	int			problems = 0;
	int			bad = 0;
	int			ties = 0;
	char		first_bad[256] = "";

	for (int trial = 0; trial < 72; trial++)
	{
		int			d = dims[trial % 9];
		int			k = ks[(trial / 9) % 8];
		int			kind = trial % 4;	/* 0 normal, 1 offset, 2 integers, 3 duplicates */
		int			cosine = (trial / 3) % 2;
		int			threads = 1 + trial % 4;
		int64_t		n = 50 + (int64_t) (rnd_next(&s) % 3000);
		dataset		ds = ds_alloc(n, d, 0);
		float	   *c = malloc(sizeof(float) * k * d);
		int32_t    *lab = malloc(sizeof(int32_t) * n);
		int32_t    *ref = malloc(sizeof(int32_t) * n);
		double	   *dist = malloc(sizeof(double) * n);
		double	   *cost = malloc(sizeof(double) * n);
		km_hooks	h;
		test_ctx	t;
		km_error	err;
		km_status	st;
		int			mism = 0;
		double		derr = 0.0;

		for (int i = 0; i < k * d; i++)
			c[i] = kind == 2 ? (float) (rnd_next(&s) % 4) : (float) rnd_norm(&s);
		for (int64_t r = 0; r < n; r++)
			for (int i = 0; i < d; i++)
			{
				float	   *v = &ds.x[r * d + i];

				if (kind == 2)
					*v = (float) (rnd_next(&s) % 4);
				else
					*v = (float) (1.5 * rnd_norm(&s));
			}
		if (kind == 1)
		{
			for (int64_t i = 0; i < n * d; i++)
				ds.x[i] += 1e4f;
			for (int i = 0; i < k * d; i++)
				c[i] += 1e4f;
		}
		if (kind == 3)
		{
			/* duplicated rows, and rows equal to centroids */
			for (int64_t r = 1; r < n; r += 3)
				memcpy(ds.x + r * d, ds.x + (r - 1) * d, sizeof(float) * d);
			for (int64_t r = 2; r < n; r += 7)
				memcpy(ds.x + r * d, c + (r % k) * d, sizeof(float) * d);
		}
		if (cosine)
		{
			/* cosine needs nonzero rows and centroids */
			for (int64_t r = 0; r < n; r++)
				if (km_exact_norm(ds.x + r * d, d) == 0.0)
					ds.x[r * d] = 1.0f;
			for (int j = 0; j < k; j++)
				if (km_exact_norm(c + j * d, d) == 0.0)
					c[j * d] = 1.0f;
		}
		ds_chunk(&ds, 1 + trial % 3);

		h = hooks_for(&t, threads);
		st = km_cpu_engine.assign(ds_data(&ds), c, k, cosine ? KM_METRIC_COSINE : KM_METRIC_L2,
								  lab, dist, &h, &err);
		brute_labels(&ds, c, k, cosine, ref, cost);
		for (int64_t r = 0; r < n; r++)
		{
			double		want = km_cost_to_distance(cost[r], cosine);

			if (lab[r] != ref[r])
				mism++;
			if (fabs(dist[r] - want) > derr)
				derr = fabs(dist[r] - want);
		}
		if (kind == 2)
		{
			/* count rows with an exact tie for the best centroid */
			for (int64_t r = 0; r < n; r++)
				for (int j = ref[r] + 1; j < k; j++)
					if (km_exact_cost(ds.x + r * d, c + j * d, 0, d, 0) == cost[r] && !cosine)
					{
						ties++;
						break;
					}
		}
		problems++;
		if (st != KM_OK || mism > 0 || derr != 0.0 || t.live_blocks != 0)
		{
			bad++;
			if (first_bad[0] == '\0')
				snprintf(first_bad, sizeof(first_bad),
						 "trial %d: n %lld d %d k %d kind %d cosine %d threads %d: status %d, %d labels differ, distance error %g, %lld blocks leaked",
						 trial, (long long) n, d, k, kind, cosine, threads, (int) st, mism,
						 derr, (long long) t.live_blocks);
		}
		ds_free(&ds);
		free(c);
		free(lab);
		free(ref);
		free(dist);
		free(cost);
	}
	if (!ok(bad == 0, "assign: labels and distances equal brute-force km_exact_nearest on %d random problems (offsets, duplicates, %d exact ties, both metrics, 1-4 threads)", problems, ties))
		diag("%s", first_bad);
	ok(ties > 100, "the integer problems contain exact ties (%d)", ties);
}

/*
 * Rows so large that the float filter overflows (|x|^2 > FLT_MAX): the
 * exact check still decides every label.
 */
static void
test_huge_values(void)
{
	uint64_t	s = 4242;
	int			all_ok = 1;

	for (int trial = 0; trial < 4; trial++)
	{
		int			d = trial % 2 ? 3 : 24;
		int			k = 9;
		dataset		ds = ds_alloc(500, d, 0);
		float	   *c = malloc(sizeof(float) * k * d);
		int32_t    *lab = malloc(sizeof(int32_t) * ds.n);
		int32_t    *ref = malloc(sizeof(int32_t) * ds.n);
		km_hooks	h;
		test_ctx	t;
		km_error	err;

		for (int64_t i = 0; i < ds.n * d; i++)
			ds.x[i] = (float) (1e20 * rnd_norm(&s));
		for (int i = 0; i < k * d; i++)
			c[i] = (float) (1e20 * rnd_norm(&s));
		h = hooks_for(&t, 2);
		if (km_cpu_engine.assign(ds_data(&ds), c, k, trial < 2 ? KM_METRIC_L2 : KM_METRIC_COSINE,
								 lab, NULL, &h, &err) != KM_OK)
			all_ok = 0;
		brute_labels(&ds, c, k, trial >= 2, ref, NULL);
		if (memcmp(lab, ref, sizeof(int32_t) * ds.n) != 0)
			all_ok = 0;
		ds_free(&ds);
		free(c);
		free(lab);
		free(ref);
	}
	ok(all_ok, "rows of magnitude 1e20 (the float filter overflows): labels still exact");
}

/*
 * One row at a time (km_nearest, what kmeans_assign runs): the same labels
 * and costs as brute force, on the traps of test_exact_labels plus values
 * that overflow the filter, with the AVX2 and the portable code, and the
 * same labels as the engine's batch assign.
 */
static void
test_nearest_row(void)
{
	static const int dims[] = {1, 2, 3, 4, 5, 8, 17, 64, 130};
	static const int ks[] = {1, 2, 3, 7, 16, 17, 40, 100, 300};
	uint64_t	s = 777;
	int			problems = 0;
	int			bad = 0;
	int64_t		rows = 0;
	char		first_bad[256] = "";

	for (int trial = 0; trial < 90; trial++)
	{
		int			d = dims[trial % 9];
		int			k = ks[(trial / 9) % 9];
		int			kind = trial % 5;	/* 0 normal, 1 offset, 2 integers, 3 duplicates, 4 huge */
		int			cosine = (trial / 5) % 2;
		int64_t		n = 50 + (int64_t) (rnd_next(&s) % 400);
		dataset		ds = ds_alloc(n, d, 0);
		float	   *c = malloc(sizeof(float) * k * d);
		int32_t    *ref = malloc(sizeof(int32_t) * n);
		int32_t    *lab = malloc(sizeof(int32_t) * n);
		double	   *cost = malloc(sizeof(double) * n);
		void	   *mem = malloc(km_nearest_size(k, d));
		km_nearest *nn;
		km_hooks	h;
		test_ctx	t;
		km_error	err;
		int			mism = 0;

		for (int i = 0; i < k * d; i++)
			c[i] = kind == 2 ? (float) (rnd_next(&s) % 4) : (float) rnd_norm(&s);
		for (int64_t i = 0; i < n * d; i++)
			ds.x[i] = kind == 2 ? (float) (rnd_next(&s) % 4) : (float) (1.5 * rnd_norm(&s));
		if (kind == 1 || kind == 4)
		{
			float		scale = kind == 1 ? 1e5f : 1e20f;

			for (int64_t i = 0; i < n * d; i++)
				ds.x[i] = kind == 1 ? ds.x[i] + scale : ds.x[i] * scale;
			for (int i = 0; i < k * d; i++)
				c[i] = kind == 1 ? c[i] + scale : c[i] * scale;
		}
		if (kind == 3)
		{
			for (int64_t r = 1; r < n; r += 3)
				memcpy(ds.x + r * d, ds.x + (r - 1) * d, sizeof(float) * d);
			for (int64_t r = 2; r < n; r += 7)
				memcpy(ds.x + r * d, c + (r % k) * d, sizeof(float) * d);
			if (k > 2)
				memcpy(c + d, c, sizeof(float) * d);	/* two equal centroids */
		}
		if (cosine)
		{
			for (int64_t r = 0; r < n; r++)
				if (km_exact_norm(ds.x + r * d, d) == 0.0)
					ds.x[r * d] = 1.0f;
			for (int j = 0; j < k; j++)
				if (km_exact_norm(c + j * d, d) == 0.0)
					c[j * d] = 1.0f;
		}
		brute_labels(&ds, c, k, cosine, ref, cost);
		for (int portable = 0; portable < 2; portable++)
		{
			nn = km_nearest_prepare(mem, c, k, d, cosine ? KM_METRIC_COSINE : KM_METRIC_L2);
			if (portable)
				km_nearest_portable(nn);
			for (int64_t r = 0; r < n; r++)
			{
				double		got;
				int			l = km_nearest_row(nn, ds.x + r * d, &got);

				if (l != ref[r] || got != cost[r])
					mism++;
			}
			rows += n;
		}
		h = hooks_for(&t, 1);
		if (km_cpu_engine.assign(ds_data(&ds), c, k, cosine ? KM_METRIC_COSINE : KM_METRIC_L2,
								 lab, NULL, &h, &err) != KM_OK ||
			memcmp(lab, ref, sizeof(int32_t) * n) != 0)
			mism++;
		problems++;
		if (mism > 0)
		{
			bad++;
			if (first_bad[0] == '\0')
				snprintf(first_bad, sizeof(first_bad),
						 "trial %d: n %lld d %d k %d kind %d cosine %d: %d rows differ",
						 trial, (long long) n, d, k, kind, cosine, mism);
		}
		ds_free(&ds);
		free(c);
		free(ref);
		free(lab);
		free(cost);
		free(mem);
	}
	if (!ok(bad == 0, "one row at a time (km_nearest): labels and costs equal brute force on %d problems, %lld rows (offsets, duplicates, ties, overflow, both metrics, AVX2 and portable)",
			problems, (long long) rows))
		diag("%s", first_bad);
	{
		float		z[3] = {0, 0, 0};
		float		c1[3] = {1, 0, 0};
		void	   *mem = malloc(km_nearest_size(1, 3));
		double		got;

		ok(km_nearest_row(km_nearest_prepare(mem, c1, 1, 3, KM_METRIC_COSINE), z, &got) == -1,
		   "one row at a time, cosine: a zero vector is refused (-1)");
		free(mem);
	}
}

/*
 * The portable kernel (what runs without AVX2) against the AVX2 one: both
 * lead to the same exact labels.  White-box: drives the passes directly.
 */
static void
test_portable_kernel(void)
{
	uint64_t	s = 99;
	int			bad = 0;
	int			runs = 0;

	for (int trial = 0; trial < 12; trial++)
	{
		int			d = (int[]) {2, 3, 9, 33} [trial % 4];
		int			k = (int[]) {1, 5, 16, 37} [trial / 3 % 4];
		int			cosine = trial % 2;
		int64_t		n = 700;
		dataset		ds = ds_alloc(n, d, 0);
		float	   *c = malloc(sizeof(float) * k * d);
		int32_t    *ref = malloc(sizeof(int32_t) * n);
		int32_t    *got = malloc(sizeof(int32_t) * n);

		for (int64_t i = 0; i < n * d; i++)
			ds.x[i] = (float) (rnd_next(&s) % 5) + (trial % 3 == 0 ? 0.0f : 1000.0f);
		for (int i = 0; i < k * d; i++)
			c[i] = (float) (rnd_next(&s) % 5) + (trial % 3 == 0 ? 0.0f : 1000.0f);
		/* cosine needs nonzero rows and centroids */
		for (int64_t r = 0; r < n; r++)
			if (km_exact_norm(ds.x + r * d, d) == 0.0)
				ds.x[r * d] = 1.0f;
		for (int j = 0; j < k; j++)
			if (km_exact_norm(c + j * d, d) == 0.0)
				c[j * d] = 1.0f;
		brute_labels(&ds, c, k, cosine, ref, NULL);

		for (int avx2 = 0; avx2 <= km_cpu_have_avx2(); avx2++)
		{
			km_cpu_state st;
			km_cpu_arena arena;
			km_hooks	h;
			double		sqsum = 0.0;

			memset(&h, 0, sizeof(h));
			memset(&st, 0, sizeof(st));
			st.data = ds_data(&ds);
			st.n = n;
			st.d = d;
			st.k = k;
			st.cosine = cosine;
			st.hooks = &h;
			st.avx2 = avx2;
			km_cpu_plan(&st, n, d, k, 1);
			km_cpu_arena_init(&arena, &h, 0);
			if (!km_cpu_setup(&st, &arena, KM_CPU_CALL_ASSIGN, 0, 0, 0))
			{
				bad++;
				km_cpu_arena_free(&arena);
				continue;
			}
			for (int i = 0; i < d; i++)
				st.mu[i] = c[i];
			for (int j = 0; j < k; j++)
				sqsum += km_cpu_sqnorm(avx2, c + j * d, d);
			km_cpu_choose_mu(&st, NULL, sqsum, k);
			km_cpu_set_centroids(&st, c);
			km_pool_start(&st.pool, st.threads, 1);
			st.nthreads = 1;
			st.labels_out = got;
			km_cpu_pass(&st, KM_CPU_ASSIGN);
			km_cpu_arena_free(&arena);
			runs++;
			if (memcmp(got, ref, sizeof(int32_t) * n) != 0)
			{
				int			mism = 0;

				for (int64_t r = 0; r < n; r++)
					mism += got[r] != ref[r];
				diag("%s kernel, d %d k %d %s: %d of %lld labels differ",
					 avx2 ? "AVX2" : "portable", d, k, cosine ? "cosine" : "l2",
					 mism, (long long) n);
				bad++;
			}
		}
		ds_free(&ds);
		free(c);
		free(ref);
		free(got);
	}
	ok(bad == 0 && runs > 0, "portable and AVX2 filter kernels give the exact labels (%d runs, AVX2 %s)",
	   runs, km_cpu_have_avx2() ? "available" : "not available");
}

/* k-means++ finds well separated blobs. */
static void
test_blobs(void)
{
	const int	nb = 6;
	int32_t    *truth = malloc(sizeof(int32_t) * 6000);
	dataset		ds = ds_blobs(6000, 8, nb, 20.0, 0.0, 7, truth);
	km_params	p = params_for(nb, KM_INIT_KMEANSPP, KM_METRIC_L2, 42);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	fitres		f;
	int			map[16];
	int			pure = 1;
	int			distinct = 1;

	f = do_fit(ds_data(&ds), &p, &h, 1);
	for (int b = 0; b < nb; b++)
		map[b] = -1;
	for (int64_t r = 0; r < ds.n; r++)
	{
		if (map[truth[r]] < 0)
			map[truth[r]] = f.r.labels[r];
		else if (map[truth[r]] != f.r.labels[r])
			pure = 0;
	}
	for (int a = 0; a < nb; a++)
		for (int b = a + 1; b < nb; b++)
			if (map[a] == map[b])
				distinct = 0;
	ok(f.status == KM_OK && pure && distinct && f.r.converged,
	   "k-means++ recovers %d planted Gaussian blobs exactly (iterations %d)", nb, f.r.iterations);
	ok(t.phases[KM_PHASE_PREPARE] == 1 && t.last_seed_done == nb &&
	   t.phases[KM_PHASE_ITERATE] == f.r.iterations && t.phases[KM_PHASE_FINISH] == 1,
	   "reports: prepare once, seeding up to k, one per iteration, finish once");
	ok(t.live_blocks == 0 && thread_count() == 1, "fit frees everything and joins its threads");
	fit_free(&f);
	ds_free(&ds);
	free(truth);
}

/*
 * k-means++ reports its potential with its seeding progress: in the last
 * report, the sum of w D2 over the rows for the seeds the seed entry gives
 * (D2 to the nearest seed, computed here in double; cosine: between the
 * normalised rows), which is also what the first iteration's assignment
 * costs (cosine: half of it, 1 - cos).  Weighted rows, some of weight 0,
 * three threads and one.  Random seeds and k = 1 report no potential.
 */
static void
test_seed_potential(void)
{
	const int	n = 8000,
				d = 6,
				k = 12;

	for (int m = 0; m < 2; m++)
	{
		const km_metric metric = m ? KM_METRIC_COSINE : KM_METRIC_L2;
		dataset		ds = ds_blobs(n, d, 5, 6.0, 0.0, 31 + m, NULL);
		km_params	p = params_for(k, KM_INIT_KMEANSPP, metric, 99);
		test_ctx	t3,
					t1,
					ts;
		km_hooks	h3 = hooks_for(&t3, 3),
					h1 = hooks_for(&t1, 1),
					hs = hooks_for(&ts, 1);
		float		seeds[12 * 6];
		km_error	err;
		km_status	st;
		fitres		f3,
					f1;
		double		direct = 0.0,
					rel_seed,
					rel_iter,
					rel_threads;

		ds.w = malloc(sizeof(float) * n);
		for (int64_t r = 0; r < n; r++)
			ds.w[r] = r % 17 == 0 ? 0.0f : (float) (1 + r % 3);
		ds_chunk(&ds, 2);
		p.max_iter = 1;
		f3 = do_fit(ds_data(&ds), &p, &h3, 0);
		f1 = do_fit(ds_data(&ds), &p, &h1, 0);
		st = km_cpu_engine.seed(ds_data(&ds), &p, 0, &hs, seeds, &err);
		for (int64_t r = 0; r < n; r++)
		{
			double		x[6],
						nx = 0.0,
						best = INFINITY;

			for (int i = 0; i < d; i++)
			{
				x[i] = ds.x[r * d + i];
				nx += x[i] * x[i];
			}
			for (int i = 0; i < d && m; i++)
				x[i] /= sqrt(nx);
			for (int j = 0; j < k; j++)
			{
				double		c[6],
							nc = 0.0,
							e = 0.0;

				for (int i = 0; i < d; i++)
				{
					c[i] = seeds[j * d + i];
					nc += c[i] * c[i];
				}
				for (int i = 0; i < d; i++)
				{
					const double t = x[i] - (m ? c[i] / sqrt(nc) : c[i]);

					e += t * t;
				}
				best = e < best ? e : best;
			}
			direct += (double) ds.w[r] * best;
		}
		rel_seed = fabs(t3.seed_potential - direct) / direct;
		rel_iter = fabs(t3.first_inertia - (m ? 0.5 * direct : direct)) / direct;
		rel_threads = fabs(t1.seed_potential - t3.seed_potential) / direct;
		ok(f3.status == KM_OK && f1.status == KM_OK && st == KM_OK && direct > 0.0 &&
		   t3.seed_potential > 0.0 && rel_seed <= 1e-5 && rel_iter <= 1e-5 && rel_threads <= 1e-12 &&
		   ts.seed_potential == t1.seed_potential,
		   "k-means++ reports its potential: the seeds' sum of w D2 (%s; relative differences %.1e to "
		   "the direct sum, %.1e to the first iteration, %.1e between 3 threads and 1)",
		   m ? "cosine" : "l2", rel_seed, rel_iter, rel_threads);
		fit_free(&f3);
		fit_free(&f1);

		/* random seeds, and k-means++ with one centroid: no potential */
		p.init = KM_INIT_RANDOM;
		t3.seed_potential = 0.0;
		f3 = do_fit(ds_data(&ds), &p, &h3, 0);
		ok(f3.status == KM_OK && t3.seed_potential == 0.0,
		   "random seeds report no potential (%s)", m ? "cosine" : "l2");
		fit_free(&f3);
		p.init = KM_INIT_KMEANSPP;
		p.k = 1;
		t3.last_seed_done = 0;
		f3 = do_fit(ds_data(&ds), &p, &h3, 0);
		ok(f3.status == KM_OK && t3.last_seed_done == 1 && t3.seed_potential == 0.0,
		   "k-means++ with k = 1 reports no potential (%s)", m ? "cosine" : "l2");
		fit_free(&f3);
		ds_free(&ds);
	}
}

/* The same call twice gives the same model, bit for bit. */
static void
test_deterministic(void)
{
	dataset		ds = ds_blobs(8000, 12, 10, 3.0, 5.0, 3, NULL);
	int			same = 1;

	for (int m = 0; m < 2; m++)
	{
		km_params	p = params_for(9, KM_INIT_KMEANSPP, m ? KM_METRIC_COSINE : KM_METRIC_L2, 5);
		test_ctx	t1,
					t2;
		km_hooks	h1 = hooks_for(&t1, 2);
		km_hooks	h2 = hooks_for(&t2, 2);
		fitres		a,
					b;

		p.n_init = 2;
		a = do_fit(ds_data(&ds), &p, &h1, 1);
		b = do_fit(ds_data(&ds), &p, &h2, 1);
		if (a.status != KM_OK || b.status != KM_OK ||
			memcmp(a.r.centroids, b.r.centroids, sizeof(float) * 9 * 12) != 0 ||
			memcmp(a.r.labels, b.r.labels, sizeof(int32_t) * ds.n) != 0 ||
			a.r.inertia != b.r.inertia || a.r.iterations != b.r.iterations)
			same = 0;
		fit_free(&a);
		fit_free(&b);
	}
	ok(same, "same data, seed and threads: identical model (l2 and cosine, n_init 2)");
	ds_free(&ds);
}

/*
 * Rows shuffled (weights with them) and cut into other chunks: the same
 * model, bit for bit (exact sums).
 */
static void
test_order_independence(void)
{
	static const km_init inits[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM};
	dataset		ds = ds_blobs(9000, 10, 8, 2.5, 3.0, 11, NULL);
	dataset		sh = ds_alloc(9000, 10, 1);
	int64_t    *perm = malloc(sizeof(int64_t) * ds.n);
	uint64_t	s = 5;

	ds.w = malloc(sizeof(float) * ds.n);
	for (int64_t r = 0; r < ds.n; r++)
	{
		ds.w[r] = (float) (1 + rnd_next(&s) % 3);
		perm[r] = r;
	}
	for (int64_t r = ds.n - 1; r > 0; r--)
	{
		int64_t		q = (int64_t) (rnd_next(&s) % (uint64_t) (r + 1));
		int64_t		tmp = perm[r];

		perm[r] = perm[q];
		perm[q] = tmp;
	}
	for (int64_t r = 0; r < ds.n; r++)
	{
		memcpy(sh.x + r * 10, ds.x + perm[r] * 10, sizeof(float) * 10);
		sh.w[r] = ds.w[perm[r]];
	}
	ds_chunk(&ds, 1);
	ds_chunk(&sh, 5);

	for (int m = 0; m < 2; m++)
		for (int ii = 0; ii < 2; ii++)
		{
			km_params	p = params_for(7, inits[ii], m ? KM_METRIC_COSINE : KM_METRIC_L2, 77);
			test_ctx	t1,
						t2;
			km_hooks	h1 = hooks_for(&t1, 1);
			km_hooks	h2 = hooks_for(&t2, 3);
			fitres		a,
						b;
			double		ce;
			int			sizes_same;
			int			labels_same = 1;

			p.n_init = 2;
			a = do_fit(ds_data(&ds), &p, &h1, 1);
			b = do_fit(ds_data(&sh), &p, &h2, 1);
			ce = max_rel(b.r.centroids, a.r.centroids, 7 * 10);
			sizes_same = memcmp(a.r.sizes, b.r.sizes, sizeof(int64_t) * 7) == 0;
			for (int64_t r = 0; r < ds.n; r++)
				if (b.r.labels[r] != a.r.labels[perm[r]])
					labels_same = 0;
			if (!ok(a.status == KM_OK && b.status == KM_OK &&
					memcmp(a.r.centroids, b.r.centroids, sizeof(float) * 7 * 10) == 0 &&
					sizes_same && labels_same && a.r.inertia == b.r.inertia &&
					memcmp(a.r.cluster_inertia, b.r.cluster_inertia, sizeof(double) * 7) == 0,
					"shuffled rows in 5 chunks, 3 threads vs 1: the same model bit for bit (%s, %s init)",
					m ? "cosine" : "l2", ii ? "random" : "k-means++"))
				diag("centroid rel diff %g, sizes %s, labels %s, inertia %.17g vs %.17g",
					 ce, sizes_same ? "same" : "differ", labels_same ? "same" : "differ",
					 a.r.inertia, b.r.inertia);
			fit_free(&a);
			fit_free(&b);
		}
	free(perm);
	ds_free(&ds);
	ds_free(&sh);
}

/* 1 thread against several: same labels, the same centroids bit for bit. */
static void
test_threads(void)
{
	dataset		ds = ds_blobs(20000, 16, 12, 2.0, 0.0, 21, NULL);
	km_params	p = params_for(12, KM_INIT_KMEANSPP, KM_METRIC_L2, 9);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 1);
	fitres		one = do_fit(ds_data(&ds), &p, &h, 1);

	for (int threads = 2; threads <= 4; threads++)
	{
		fitres		many;
		double		ce;

		h = hooks_for(&t, threads);
		t.check_signals = 1;
		/* the last fit's joined workers may still be listed in /proc: not this fit's */
		(void) thread_count();
		many = do_fit(ds_data(&ds), &p, &h, 1);
		ce = max_rel(many.r.centroids, one.r.centroids, 12 * 16);
		if (!ok(many.status == KM_OK &&
				memcmp(many.r.labels, one.r.labels, sizeof(int32_t) * ds.n) == 0 &&
				memcmp(many.r.centroids, one.r.centroids, sizeof(float) * 12 * 16) == 0 &&
				many.r.inertia == one.r.inertia,
				"%d threads vs 1: same labels, centroids and inertia bit for bit", threads))
			diag("centroid rel diff %g", ce);
		if (threads == 4)
			ok(t.signals_ok && t.threads_seen == 4,
			   "worker threads block every signal (%d threads seen)", t.threads_seen);
		fit_free(&many);
	}
	fit_free(&one);
	ds_free(&ds);
}

/* Integer weights are the same as repeating rows. */
static void
test_weights(void)
{
	dataset		ds = ds_blobs(3000, 6, 5, 2.0, 1.0, 31, NULL);
	dataset		rep;
	int64_t		nrep = 0;
	uint64_t	s = 8;
	float	   *init = malloc(sizeof(float) * 5 * 6);

	ds.w = malloc(sizeof(float) * ds.n);
	for (int64_t r = 0; r < ds.n; r++)
	{
		ds.w[r] = (float) (rnd_next(&s) % 4);
		nrep += (int64_t) ds.w[r];
	}
	ds_chunk(&ds, 2);
	rep = ds_alloc(nrep, 6, 0);
	nrep = 0;
	for (int64_t r = 0; r < ds.n; r++)
		for (int c = 0; c < (int) ds.w[r]; c++)
			memcpy(rep.x + (nrep++) * 6, ds.x + r * 6, sizeof(float) * 6);
	memcpy(init, ds.x + 10 * 6, sizeof(float) * 5 * 6);

	for (int m = 0; m < 2; m++)
	{
		km_params	p = params_for(5, KM_INIT_EXPLICIT, m ? KM_METRIC_COSINE : KM_METRIC_L2, 1);
		test_ctx	t;
		km_hooks	h = hooks_for(&t, 2);
		fitres		a,
					b;
		double		ce;

		p.init_centroids = init;
		a = do_fit(ds_data(&ds), &p, &h, 0);
		b = do_fit(ds_data(&rep), &p, &h, 0);
		ce = max_rel(a.r.centroids, b.r.centroids, 5 * 6);
		if (!ok(a.status == KM_OK && b.status == KM_OK && ce <= 1e-6 &&
				fabs(a.r.inertia - b.r.inertia) <= 1e-9 * b.r.inertia &&
				a.r.iterations == b.r.iterations,
				"weights 0-3 equal repeating rows (%s)", m ? "cosine" : "l2"))
			diag("centroid rel diff %g, inertia %.17g vs %.17g", ce, a.r.inertia, b.r.inertia);
		fit_free(&a);
		fit_free(&b);
	}
	free(init);
	ds_free(&ds);
	ds_free(&rep);
}

/*
 * Empty clusters: two initial centroids far from every row get the two
 * rows farthest from their first-iteration centroid, in that order, ties
 * to the lower row.
 */
static void
test_relocation(void)
{
	/* rows 5 and 6 tie for farthest from (0, 0); row 7 comes next */
	static const float rows[][2] = {
		{0, 0}, {1, 0}, {0, 1}, {-1, 0}, {0, -1}, {-3, 0}, {3, 0}, {0, 2}, {1, 1}, {0, 0}
	};
	float		init[3 * 2] = {0, 0, 1000, 1000, -1000, -1000};
	dataset		tiny = ds_alloc(10, 2, 0);
	dataset		ds = ds_blobs(500, 3, 2, 4.0, 0.0, 41, NULL);
	float		binit[4 * 3];
	km_params	p = params_for(3, KM_INIT_EXPLICIT, KM_METRIC_L2, 1);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	int32_t    *lab = malloc(sizeof(int32_t) * ds.n);
	double	   *cost = malloc(sizeof(double) * ds.n);
	int64_t		far1 = -1,
				far2 = -1;
	fitres		f;

	memcpy(tiny.x, rows, sizeof(rows));
	p.init_centroids = init;
	p.max_iter = 1;
	f = do_fit(ds_data(&tiny), &p, &h, 1);
	{
		/* the tie goes to the smaller row hash, wherever the row sits */
		int			first = km_row_hash(rows[5], 2, 1.0f) < km_row_hash(rows[6], 2, 1.0f) ? 5 : 6;
		int			second = 11 - first;

		ok(f.status == KM_OK && f.r.relocated == 2 &&
		   f.r.centroids[2] == rows[first][0] && f.r.centroids[3] == rows[first][1] &&
		   f.r.centroids[4] == rows[second][0] && f.r.centroids[5] == rows[second][1],
		   "empty clusters 1 and 2 get the two farthest rows, tied, the smaller hash first");
	}
	fit_free(&f);

	/* two centroids on the data, two far away (clusters 1 and 3) */
	memcpy(binit, ds.x, sizeof(float) * 3);
	memcpy(binit + 6, ds.x + 3, sizeof(float) * 3);
	for (int i = 0; i < 3; i++)
	{
		binit[3 + i] = 1e3f;
		binit[9 + i] = -1e3f;
	}
	brute_labels(&ds, binit, 4, 0, lab, cost);
	for (int64_t r = 0; r < ds.n; r++)
		if (far1 < 0 || cost[r] > cost[far1])
			far1 = r;
	for (int64_t r = 0; r < ds.n; r++)
		if (r != far1 && (far2 < 0 || cost[r] > cost[far2]))
			far2 = r;

	p = params_for(4, KM_INIT_EXPLICIT, KM_METRIC_L2, 1);
	p.init_centroids = binit;
	p.max_iter = 1;
	h = hooks_for(&t, 2);
	f = do_fit(ds_data(&ds), &p, &h, 1);
	ok(f.status == KM_OK && f.r.relocated == 2 && t.first_relocated == 2 &&
	   memcmp(f.r.centroids + 3, ds.x + far1 * 3, sizeof(float) * 3) == 0 &&
	   memcmp(f.r.centroids + 9, ds.x + far2 * 3, sizeof(float) * 3) == 0,
	   "blobs: empty clusters 1 and 3 get the farthest and second farthest rows");
	ok(all_finite(f.r.centroids, 12), "no NaN after re-seeding");
	fit_free(&f);

	/* run to convergence: still finite, sizes add up */
	p.max_iter = 100;
	f = do_fit(ds_data(&ds), &p, &h, 1);
	{
		int64_t		sum = 0;

		for (int j = 0; j < 4; j++)
			sum += f.r.sizes[j];
		ok(f.status == KM_OK && all_finite(f.r.centroids, 12) && sum == ds.n && f.r.converged,
		   "re-seeded fit converges with finite centroids");
	}
	fit_free(&f);
	free(lab);
	free(cost);
	ds_free(&ds);
	ds_free(&tiny);
}

/* k == n, and fewer distinct rows than k. */
static void
test_degenerate(void)
{
	dataset		ds = ds_blobs(40, 5, 3, 3.0, 0.0, 51, NULL);
	dataset		few = ds_alloc(60, 4, 0);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	km_params	p = params_for(40, KM_INIT_KMEANSPP, KM_METRIC_L2, 3);
	fitres		f;
	int			ones = 1;

	f = do_fit(ds_data(&ds), &p, &h, 1);
	for (int j = 0; j < 40; j++)
		if (f.r.sizes[j] != 1)
			ones = 0;
	ok(f.status == KM_OK && ones && f.r.inertia == 0.0, "k == n: every row its own cluster, inertia 0");
	fit_free(&f);

	for (int64_t r = 0; r < few.n; r++)
		for (int i = 0; i < 4; i++)
			few.x[r * 4 + i] = (float) ((r % 3) * 2 + i);
	for (int m = 0; m < 2; m++)
		for (int ii = 0; ii < 2; ii++)
		{
			int64_t		sum = 0;

			p = params_for(5, ii ? KM_INIT_RANDOM : KM_INIT_KMEANSPP,
						   m ? KM_METRIC_COSINE : KM_METRIC_L2, 4);
			h = hooks_for(&t, 2);
			f = do_fit(ds_data(&few), &p, &h, 1);
			for (int j = 0; j < 5; j++)
				sum += f.r.sizes[j];
			ok(f.status == KM_OK && all_finite(f.r.centroids, 20) && sum == few.n &&
			   f.r.inertia < (m ? 1e-6 : 1e-12),
			   "3 distinct rows, k = 5 (%s, %s): finite centroids, inertia %g",
			   m ? "cosine" : "l2", ii ? "random" : "k-means++", f.r.inertia);
			fit_free(&f);
		}
	ds_free(&ds);
	ds_free(&few);
}

/* Cosine centroids are unit vectors; labels are exact for them. */
static void
test_cosine(void)
{
	dataset		ds = ds_blobs(5000, 20, 6, 2.0, 1.0, 61, NULL);
	km_params	p = params_for(6, KM_INIT_KMEANSPP, KM_METRIC_COSINE, 8);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	fitres		f = do_fit(ds_data(&ds), &p, &h, 1);
	int32_t    *ref = malloc(sizeof(int32_t) * ds.n);
	double	   *cost = malloc(sizeof(double) * ds.n);
	double		worst = 0.0;
	double		inertia = 0.0;

	for (int j = 0; j < 6; j++)
	{
		double		nrm = km_exact_norm(f.r.centroids + j * 20, 20);

		if (fabs(nrm - 1.0) > worst)
			worst = fabs(nrm - 1.0);
	}
	brute_labels(&ds, f.r.centroids, 6, 1, ref, cost);
	for (int64_t r = 0; r < ds.n; r++)
		inertia += cost[r];
	ok(f.status == KM_OK && worst < 1e-6, "cosine centroids have unit norm (worst |1 - |c|| %g)", worst);
	ok(memcmp(ref, f.r.labels, sizeof(int32_t) * ds.n) == 0 &&
	   fabs(inertia - f.r.inertia) <= 1e-9 * inertia,
	   "cosine fit: labels and inertia are exact for the final centroids");
	fit_free(&f);
	free(ref);
	free(cost);
	ds_free(&ds);
}

/* tol = 0 runs until no row moves; a large tol stops early. */
static void
test_tol(void)
{
	dataset		ds = ds_blobs(6000, 4, 8, 1.5, 0.0, 71, NULL);
	km_params	p = params_for(8, KM_INIT_RANDOM, KM_METRIC_L2, 2);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	fitres		f;
	int32_t    *ref = malloc(sizeof(int32_t) * ds.n);
	double	   *sum = calloc(8 * 4, sizeof(double));
	int64_t		cnt[8] = {0};
	float		mean[8 * 4];

	p.max_iter = 1000;
	f = do_fit(ds_data(&ds), &p, &h, 1);
	brute_labels(&ds, f.r.centroids, 8, 0, ref, NULL);
	for (int64_t r = 0; r < ds.n; r++)
	{
		cnt[ref[r]]++;
		for (int i = 0; i < 4; i++)
			sum[ref[r] * 4 + i] += ds.x[r * 4 + i];
	}
	for (int j = 0; j < 8; j++)
		for (int i = 0; i < 4; i++)
			mean[j * 4 + i] = cnt[j] > 0 ? (float) (sum[j * 4 + i] / cnt[j]) : f.r.centroids[j * 4 + i];
	ok(f.status == KM_OK && f.r.converged && f.r.iterations < 1000 &&
	   memcmp(ref, f.r.labels, sizeof(int32_t) * ds.n) == 0 &&
	   memcmp(mean, f.r.centroids, sizeof(mean)) == 0,
	   "tol 0: stops when no row moves (%d iterations), a fixed point of Lloyd", f.r.iterations);
	fit_free(&f);

	p.tol = 0.5;
	h = hooks_for(&t, 2);
	f = do_fit(ds_data(&ds), &p, &h, 1);
	ok(f.status == KM_OK && f.r.converged && f.r.iterations == 2,
	   "tol 0.5: stops at iteration 2 (first moves all rows), got %d", f.r.iterations);
	fit_free(&f);

	p.tol = 0.0;
	p.max_iter = 2;
	h = hooks_for(&t, 2);
	f = do_fit(ds_data(&ds), &p, &h, 1);
	brute_labels(&ds, f.r.centroids, 8, 0, ref, NULL);
	ok(f.status == KM_OK && !f.r.converged && f.r.iterations == 2 &&
	   memcmp(ref, f.r.labels, sizeof(int32_t) * ds.n) == 0,
	   "max_iter 2: not converged, final labels exact for the returned centroids");
	fit_free(&f);
	free(ref);
	free(sum);
	ds_free(&ds);
}

/* n_init: the best run (lowest final inertia, earliest on ties) wins. */
static void
test_n_init(void)
{
	dataset		ds = ds_blobs(4000, 5, 15, 1.0, 0.0, 81, NULL);
	km_params	p = params_for(12, KM_INIT_RANDOM, KM_METRIC_L2, 13);
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 2);
	fitres		f;
	int			best = 0;
	int			differ = 0;

	p.n_init = 6;
	f = do_fit(ds_data(&ds), &p, &h, 1);
	for (int r = 1; r < 6; r++)
	{
		if (t.finish_inertia[r] < t.finish_inertia[best])
			best = r;
		if (t.finish_inertia[r] != t.finish_inertia[0])
			differ = 1;
	}
	ok(f.status == KM_OK && differ && f.r.best_run == best &&
	   f.r.inertia == t.finish_inertia[best],
	   "n_init 6 keeps the run with the lowest inertia (run %d, %.6g)", best, f.r.inertia);
	fit_free(&f);
	ds_free(&ds);
}

/* poll and report can stop a call; nothing leaks on any path. */
static void
test_cancel(void)
{
	dataset		ds = ds_blobs(30000, 16, 10, 2.0, 0.0, 91, NULL);
	km_params	p = params_for(10, KM_INIT_KMEANSPP, KM_METRIC_L2, 3);
	float	   *c = malloc(sizeof(float) * 10 * 16);
	int32_t    *lab = malloc(sizeof(int32_t) * ds.n);
	double	   *sums = calloc(10 * 16, sizeof(double));
	double		wts[10],
				ine[10];
	int64_t		cnts[10];
	km_partial	part = {sums, wts, cnts, ine};
	static const int polls[] = {1, 3, 40, 400};
	int			all_ok = 1;
	char		why[200] = "";
	test_ctx	t;
	km_hooks	h;
	km_error	err;
	fitres		f;

	memcpy(c, ds.x, sizeof(float) * 10 * 16);
	for (int i = 0; i < 4; i++)
	{
		h = hooks_for(&t, 2);
		t.stop_after_polls = polls[i];
		f = do_fit(ds_data(&ds), &p, &h, 1);
		if (f.status != KM_ERR_CANCELLED || t.live_blocks != 0 || thread_count() != 1 ||
			strlen(f.error.message) == 0)
			all_ok = 0;
		fit_free(&f);
	}
	ok(all_ok, "poll saying stop after 1, 3, 40, 400 polls: KM_ERR_CANCELLED, nothing leaked, threads joined");

	all_ok = 1;
	for (int i = 1; i <= 4; i++)
	{
		int			threads;

		h = hooks_for(&t, 2);
		t.stop_after_reports = i * 3;
		f = do_fit(ds_data(&ds), &p, &h, 1);
		threads = thread_count();
		if ((f.status != KM_ERR_CANCELLED || t.live_blocks != 0 || threads != 1) && all_ok)
		{
			/* the first run that failed, so that a failure says which condition */
			all_ok = 0;
			snprintf(why, sizeof(why), " (stop after %d reports: status %d after %d reports, "
					 "%ld blocks live, %d threads)", i * 3, (int) f.status, t.reports,
					 (long) t.live_blocks, threads);
		}
		fit_free(&f);
	}
	ok(all_ok, "report saying stop (seeding, iterations): KM_ERR_CANCELLED, nothing leaked%s", why);

	h = hooks_for(&t, 2);
	t.stop_after_polls = 2;
	all_ok = km_cpu_engine.assign(ds_data(&ds), c, 10, KM_METRIC_L2, lab, NULL, &h, &err) == KM_ERR_CANCELLED &&
		t.live_blocks == 0;
	h = hooks_for(&t, 2);
	t.stop_after_polls = 2;
	all_ok = all_ok && km_cpu_engine.map(ds_data(&ds), c, 10, KM_METRIC_L2, &part, &h, &err) == KM_ERR_CANCELLED &&
		t.live_blocks == 0 && thread_count() == 1;
	ok(all_ok, "assign and map can be cancelled, nothing leaked");

	h = hooks_for(&t, 2);
	f = do_fit(ds_data(&ds), &p, &h, 1);
	ok(f.status == KM_OK && t.live_blocks == 0 && t.allocs > 0,
	   "successful fit: %lld allocations, all freed", (long long) t.allocs);
	fit_free(&f);

	all_ok = 1;
	for (int n = 1; n <= 30; n++)
	{
		h = hooks_for(&t, 2);
		t.fail_after = n;
		f = do_fit(ds_data(&ds), &p, &h, 1);
		if (t.allocs >= n && (f.status != KM_ERR_NOMEM || t.live_blocks != 0))
			all_ok = 0;
		fit_free(&f);
	}
	ok(all_ok, "an allocation failing at any point: KM_ERR_NOMEM, nothing leaked");
	free(c);
	free(lab);
	free(sums);
	ds_free(&ds);
}

/* fit_workspace bounds what a fit asks of the hooks. */
static void
test_workspace(void)
{
	static const int shapes[][3] = {{5000, 3, 4}, {20000, 50, 30}, {3000, 300, 100}, {100, 2, 100}};
	int			all_ok = 1;

	for (int s = 0; s < 4; s++)
		for (int m = 0; m < 2; m++)
			for (int threads = 1; threads <= 3; threads += 2)
				for (int init = 0; init < 4; init++)
				{
					int64_t		n = shapes[s][0];
					int			d = shapes[s][1];
					int			k = shapes[s][2];
					dataset		ds = ds_blobs(n, d, 5, 2.0, 0.0, 100 + s, NULL);
					km_params	p = params_for(k, (km_init) init, m ? KM_METRIC_COSINE : KM_METRIC_L2, 1);
					test_ctx	t;
					km_hooks	h = hooks_for(&t, threads);
					size_t		est = km_cpu_engine.fit_workspace(n, d, k, threads) +
						(init == KM_INIT_KMEANS_PARALLEL ? km_cpu_kmpar_workspace(n, d, k, threads) : 0);
					fitres		f;

					p.init_centroids = init == KM_INIT_EXPLICIT ? ds.x : NULL;
					p.max_iter = 3;
					p.n_init = init == KM_INIT_EXPLICIT ? 1 : 2;
					f = do_fit(ds_data(&ds), &p, &h, init == 1);
					if (f.status != KM_OK || t.peak_bytes > est)
					{
						all_ok = 0;
						diag("n %lld d %d k %d threads %d: peak %zu > estimate %zu",
							 (long long) n, d, k, threads, t.peak_bytes, est);
					}
					fit_free(&f);
					ds_free(&ds);
				}
	ok(all_ok, "fit_workspace >= peak bytes allocated (4 shapes, both metrics, 1 and 3 threads, all inits)");
}

/* assign and map agree with fit's labels, sizes and inertia. */
static void
test_assign_map(void)
{
	for (int m = 0; m < 2; m++)
	{
		dataset		ds = ds_blobs(7000, 9, 6, 2.0, 50.0, 111, NULL);
		km_params	p = params_for(6, KM_INIT_KMEANSPP, m ? KM_METRIC_COSINE : KM_METRIC_L2, 2);
		test_ctx	t;
		km_hooks	h = hooks_for(&t, 2);
		fitres		f;
		int32_t    *lab = malloc(sizeof(int32_t) * ds.n);
		double	   *dist = malloc(sizeof(double) * ds.n);
		double	   *sums = calloc(6 * 9, sizeof(double));
		double		wts[6] = {0},
					ine[6] = {0};
		int64_t		cnts[6] = {0};
		km_partial	part = {sums, wts, cnts, ine};
		km_error	err;
		double		dsum = 0.0;
		int			sizes_ok = 1;
		double		ierr = 0.0;
		double		cerr = 0.0;

		ds.w = malloc(sizeof(float) * ds.n);
		for (int64_t r = 0; r < ds.n; r++)
			ds.w[r] = (float) (r % 3) * 0.5f + 0.25f;
		ds_chunk(&ds, 3);
		f = do_fit(ds_data(&ds), &p, &h, 1);
		km_cpu_engine.assign(ds_data(&ds), f.r.centroids, 6, p.metric, lab, dist, &h, &err);
		for (int64_t r = 0; r < ds.n; r++)
			dsum += (double) ds.w[r] * (m ? dist[r] : dist[r] * dist[r]);
		ok(f.status == KM_OK && memcmp(lab, f.r.labels, sizeof(int32_t) * ds.n) == 0 &&
		   fabs(dsum - f.r.inertia) <= 1e-9 * f.r.inertia,
		   "assign on fit's centroids: fit's labels, distances add up to its inertia (%s)",
		   m ? "cosine" : "l2");

		/* map twice: partials add */
		km_cpu_engine.map(ds_data(&ds), f.r.centroids, 6, p.metric, &part, &h, &err);
		km_cpu_engine.map(ds_data(&ds), f.r.centroids, 6, p.metric, &part, &h, &err);
		for (int j = 0; j < 6; j++)
		{
			if (cnts[j] != 2 * f.r.sizes[j])
				sizes_ok = 0;
			if (fabs(ine[j] - 2 * f.r.cluster_inertia[j]) > ierr)
				ierr = fabs(ine[j] - 2 * f.r.cluster_inertia[j]);
			if (m == 0)
				for (int i = 0; i < 9; i++)
				{
					double		mean = sums[j * 9 + i] / wts[j];
					double		e = fabs(mean - f.r.centroids[j * 9 + i]) / fabs(mean);

					if (e > cerr)
						cerr = e;
				}
		}
		ok(sizes_ok && ierr <= 1e-9 * f.r.inertia && cerr < 1e-6 && t.live_blocks == 0,
		   "map (twice) adds fit's sizes and cluster inertia; sums / weights give its centroids (%s)",
		   m ? "cosine" : "l2");
		fit_free(&f);
		free(lab);
		free(dist);
		free(sums);
		ds_free(&ds);
	}
}

/* Impossible parameters are refused with a message. */
static void
test_errors(void)
{
	dataset		ds = ds_blobs(100, 3, 2, 2.0, 0.0, 121, NULL);
	dataset		zero = ds_alloc(10, 3, 1);
	km_hooks	h;
	test_ctx	t;
	int			all_ok = 1;
	float		init[3 * 3] = {0};

	for (int c = 0; c < 9; c++)
	{
		km_params	p = params_for(3, KM_INIT_KMEANSPP, KM_METRIC_L2, 1);
		const km_data *data = ds_data(&ds);
		km_data		bad = ds.data;
		fitres		f;

		switch (c)
		{
			case 0:
				p.k = 0;
				break;
			case 1:
				p.k = 101;
				break;
			case 2:
				bad.d = 0;
				data = &bad;
				break;
			case 3:
				p.max_iter = 0;
				break;
			case 4:
				p.tol = -1.0;
				break;
			case 5:
				p.n_init = 0;
				break;
			case 6:
				p.init = KM_INIT_EXPLICIT;
				break;
			case 7:
				data = ds_data(&zero);
				break;
			case 8:
				p.init = KM_INIT_EXPLICIT;
				p.init_centroids = init;
				p.metric = KM_METRIC_COSINE;
				break;
		}
		h = hooks_for(&t, 2);
		f = do_fit(data, &p, &h, 0);
		if (f.status != KM_ERR_INVALID || f.error.message[0] == '\0' ||
			(f.error.message[0] >= 'A' && f.error.message[0] <= 'Z') || t.live_blocks != 0)
		{
			all_ok = 0;
			diag("case %d: status %d, message \"%s\"", c, (int) f.status, f.error.message);
		}
		fit_free(&f);
	}
	ok(all_ok, "k < 1, k > n, d < 1, max_iter < 1, tol < 0, n_init < 1, no init, zero weight, zero cosine init: KM_ERR_INVALID");
	ds_free(&ds);
	ds_free(&zero);
}

/* A larger problem through the whole path: exact final labels. */
static void
test_fit_exact(void)
{
	static const int dims[] = {2, 7, 40};
	int			all_ok = 1;

	for (int di = 0; di < 3; di++)
		for (int m = 0; m < 2; m++)
		{
			int			d = dims[di];
			dataset		ds = ds_blobs(12000, d, 30, 1.0, m ? 0.0 : 1e4, 131 + di, NULL);
			km_params	p = params_for(25, KM_INIT_KMEANSPP, m ? KM_METRIC_COSINE : KM_METRIC_L2, 6);
			test_ctx	t;
			km_hooks	h = hooks_for(&t, 3);
			fitres		f;
			int32_t    *ref = malloc(sizeof(int32_t) * ds.n);
			double	   *cost = malloc(sizeof(double) * ds.n);
			double		csum[25] = {0};
			int64_t		sz[25] = {0};
			int			good;

			p.max_iter = 20;
			f = do_fit(ds_data(&ds), &p, &h, 1);
			brute_labels(&ds, f.r.centroids, 25, m, ref, cost);
			for (int64_t r = 0; r < ds.n; r++)
			{
				sz[ref[r]]++;
				csum[ref[r]] += cost[r];
			}
			good = f.status == KM_OK && memcmp(ref, f.r.labels, sizeof(int32_t) * ds.n) == 0 &&
				memcmp(sz, f.r.sizes, sizeof(sz)) == 0;
			for (int j = 0; j < 25; j++)
				if (fabs(csum[j] - f.r.cluster_inertia[j]) > 1e-9 * (csum[j] + 1e-300))
					good = 0;
			if (!good)
			{
				all_ok = 0;
				diag("d %d %s: status %d", d, m ? "cosine" : "l2 offset 1e4", (int) f.status);
			}
			fit_free(&f);
			free(ref);
			free(cost);
			ds_free(&ds);
		}
	ok(all_ok, "fit: final labels, sizes and cluster inertia exact for the returned centroids (d 2, 7, 40; l2 at offset 1e4, cosine)");
}

/* ---------------------------------------------------------------------- */
/* exact sums (km_xsum.h) */

/* A double with a random exponent in [lo, hi] (subnormals below -1022), random sign. */
static double
rnd_double(uint64_t *s, int lo, int hi)
{
	double		m = 1.0 + rnd_unif(s);
	int			e = lo + (int) (rnd_next(s) % (uint64_t) (hi - lo + 1));
	double		v = ldexp(m, e);

	return (rnd_next(s) & 1) ? -v : v;
}

static void
test_xsum(void)
{
	uint64_t	s = 99;
	int			pairs_ok = 1;
	int			exact_ok = 1;
	int			canon_ok = 1;

	/* two terms: the rounded exact sum is what one IEEE addition gives */
	for (int i = 0; i < 200000; i++)
	{
		int			spread = (int) (rnd_next(&s) % 5);
		double		a = rnd_double(&s, -1074, 1022);
		double		b;
		km_xacc		x;

		if (spread == 0)
			b = rnd_double(&s, -1074, 1022);
		else
		{
			int			e;

			(void) frexp(a, &e);
			b = rnd_double(&s, e - 60 > -1074 ? e - 60 : -1074, e + 1 < 1022 ? e + 1 : 1022);
		}
		if (i % 7 == 0)
			b = -a * (1.0 + ldexp(1.0, -52));	/* cancellation */
		km_xacc_init(&x);
		km_xacc_add(&x, a);
		km_xacc_add(&x, b);
		if (km_xacc_round(&x) != a + b)
		{
			if (pairs_ok)
				diag("%a + %a: %a, expected %a", a, b, km_xacc_round(&x), a + b);
			pairs_ok = 0;
		}
	}
	ok(pairs_ok, "superaccumulator: round(a + b) is the IEEE sum for 200000 pairs (subnormals, cancellation)");

	/* many terms in two orders: the same canonical expansion, exact */
	for (int i = 0; i < 2000; i++)
	{
		double		t[40];
		double		e1[KM_XACC_MAXTERMS];
		double		e2[KM_XACC_MAXTERMS];
		int			n1,
					n2;
		km_xacc		x,
					y;
		int			nt = 2 + (int) (rnd_next(&s) % 38);
		int			lo = -1074 + (int) (rnd_next(&s) % 2000);

		for (int j = 0; j < nt; j++)
			t[j] = rnd_double(&s, lo, lo + 40 < 1022 ? lo + 40 : 1022);
		km_xacc_init(&x);
		km_xacc_init(&y);
		for (int j = 0; j < nt; j++)
			km_xacc_add(&x, t[j]);
		for (int j = nt - 1; j >= 0; j--)
			km_xacc_add(&y, t[j]);
		n1 = km_xacc_emit(&x, e1, KM_XACC_MAXTERMS);
		n2 = km_xacc_emit(&y, e2, KM_XACC_MAXTERMS);
		if (n1 != n2 || memcmp(e1, e2, sizeof(double) * (n1 > 0 ? n1 : 0)) != 0)
			canon_ok = 0;
		/* the expansion is the exact sum: terms minus expansion is zero */
		km_xacc_init(&x);
		for (int j = 0; j < nt; j++)
			km_xacc_add(&x, t[j]);
		for (int j = 0; j < n1; j++)
			km_xacc_add(&x, -e1[j]);
		if (!km_xacc_is_zero(&x))
		{
			km_xacc_normalize(&x);
			if (!km_xacc_is_zero(&x))
				exact_ok = 0;
		}
		for (int j = 1; j < n1; j++)
			if (fabs(e1[j]) > ldexp(fabs(e1[j - 1]), -53))
				canon_ok = 0;
	}
	ok(canon_ok && exact_ok,
	   "superaccumulator: sums of up to 40 terms in two orders give the same canonical expansion, which is exact");
}

/*
 * A data set whose double sums round: blobs in which one value in seven
 * is many orders of magnitude smaller than the rest, so that the bits of a
 * column's sum span more than a double holds.
 */
static dataset
ds_wide(int64_t n, int d, int nb, uint64_t seed)
{
	dataset		ds = ds_blobs(n, d, nb, 4.0, 3.0, seed, NULL);
	uint64_t	s = seed + 5;

	for (int64_t i = 0; i < n * d; i += 7)
		ds.x[i] = (float) ldexp(rnd_norm(&s), -20 - (int) (rnd_next(&s) % 30));
	return ds;
}

/* Whether summing column 0 in double in two orders gives different bits. */
static int
double_sums_round(const dataset *ds)
{
	double		a = 0.0,
				b = 0.0;

	for (int64_t r = 0; r < ds->n; r++)
		a += ds->x[r * ds->d];
	for (int64_t r = ds->n - 1; r >= 0; r--)
		b += ds->x[r * ds->d];
	return a != b;
}

/* Rows of ds shuffled, weights with them, in nchunks chunks. */
static dataset
ds_shuffled(const dataset *ds, int nchunks, uint64_t seed, int64_t *perm)
{
	dataset		sh = ds_alloc(ds->n, ds->d, ds->w != NULL);
	uint64_t	s = seed;

	for (int64_t r = 0; r < ds->n; r++)
		perm[r] = r;
	for (int64_t r = ds->n - 1; r > 0; r--)
	{
		int64_t		q = (int64_t) (rnd_next(&s) % (uint64_t) (r + 1));
		int64_t		tmp = perm[r];

		perm[r] = perm[q];
		perm[q] = tmp;
	}
	for (int64_t r = 0; r < ds->n; r++)
	{
		memcpy(sh.x + r * ds->d, ds->x + perm[r] * ds->d, sizeof(float) * ds->d);
		if (ds->w != NULL)
			sh.w[r] = ds->w[perm[r]];
	}
	ds_chunk(&sh, nchunks);
	return sh;
}

/* One part's exact map, merged into per-cell accumulators (k * d sums, then k weights). */
static km_status
map_exact_into(const km_data *data, const float *c, int k, km_metric metric,
			   const km_hooks *h, km_xacc *cells, km_xacc *inertia, int64_t *counts)
{
	int			d = data->d;
	size_t		kd = (size_t) k * d;
	km_xstats	xs;
	km_xlevels	xl,
				wl;
	int			weighted = 0,
				unweighted = 0;
	double	   *sums = calloc(kd, sizeof(double));
	double		wts[64] = {0},
				ine[64] = {0};
	int64_t		cnt[64] = {0};
	km_partial	part;
	km_error	err;
	km_status	st;
	int64_t		g = 0;

	km_xstats_init(&xs);
	for (int ch = 0; ch < data->nchunks; ch++)
	{
		const km_chunk *cc = &data->chunks[ch];

		if (cc->n > 0)
		{
			if (cc->w != NULL)
				weighted = 1;
			else
				unweighted = 1;
		}
		for (int64_t i = 0; i < cc->n; i++, g++)
			km_xstats_row(&xs, cc->x + i * d, d, cc->w ? cc->w[i] : 1.0f, cc->w != NULL,
						  metric == KM_METRIC_COSINE,
						  km_exact_norm(cc->x + i * d, d));
	}
	km_xlevels_for(&xs, data->n, weighted, unweighted, &xl, &wl);
	memset(&part, 0, sizeof(part));
	part.sums = sums;
	part.weights = wts;
	part.counts = cnt;
	part.inertia = ine;
	part.stats = &xs;
	part.xsums = calloc((size_t) xl.n * kd, sizeof(double));
	part.xweights = calloc((size_t) wl.n * k, sizeof(double));
	part.xinertia = inertia;
	st = km_cpu_engine.map(data, c, k, metric, &part, h, &err);
	for (size_t i = 0; i < kd; i++)
		for (int l = 0; l < xl.n; l++)
			km_xacc_add(&cells[i], part.xsums[(size_t) l * kd + i]);
	for (int j = 0; j < k; j++)
	{
		for (int l = 0; l < wl.n; l++)
			km_xacc_add(&cells[kd + j], part.xweights[(size_t) l * k + j]);
		counts[j] += cnt[j];
	}
	free(part.xsums);
	free(part.xweights);
	free(sums);
	return st;
}

/*
 * Exact sums where double sums round: fits agree bit for bit across row
 * orders, chunks and threads, and one Lloyd step computed from the exact
 * partials of three parts is the fit's first step, bit for bit.
 */
static void
test_exact_sums(void)
{
	for (int m = 0; m < 2; m++)
	{
		km_metric	metric = m ? KM_METRIC_COSINE : KM_METRIC_L2;
		dataset		ds = ds_wide(9000, 6, 5, 61 + m);
		int64_t    *perm = malloc(sizeof(int64_t) * ds.n);
		dataset		sh;
		km_params	p = params_for(5, KM_INIT_EXPLICIT, metric, 3);
		float		init[5 * 6];
		test_ctx	t1,
					t2;
		km_hooks	h1 = hooks_for(&t1, 1);
		km_hooks	h3 = hooks_for(&t2, 3);
		fitres		a,
					b,
					one;
		km_xacc    *cells = malloc(sizeof(km_xacc) * (5 * 6 + 5));
		km_xacc		ine[5];
		int64_t		counts[5] = {0};
		float		c1[5 * 6];
		int			step_ok = 1;
		km_status	st = KM_OK;

		ds.w = malloc(sizeof(float) * ds.n);
		for (int64_t r = 0; r < ds.n; r++)
			ds.w[r] = (r % 5 == 0) ? 0.3f : 1.0f;
		ds_chunk(&ds, 1);
		sh = ds_shuffled(&ds, 5, 77, perm);
		for (int j = 0; j < 5; j++)
			memcpy(init + j * 6, ds.x + (int64_t) (j * 1700) * 6, sizeof(float) * 6);
		p.init_centroids = init;
		p.max_iter = 8;
		a = do_fit(ds_data(&ds), &p, &h1, 0);
		b = do_fit(ds_data(&sh), &p, &h3, 0);
		if (!ok(double_sums_round(&ds) && a.status == KM_OK && b.status == KM_OK &&
				memcmp(a.r.centroids, b.r.centroids, sizeof(float) * 30) == 0 &&
				a.r.inertia == b.r.inertia && a.r.iterations == b.r.iterations,
				"data whose double sums round (%s): shuffled, 5 chunks, 3 threads vs 1 give the same model bit for bit",
				m ? "cosine" : "l2"))
			diag("rounds %d, status %d %d, centroids rel diff %g, inertia %.17g %.17g, iterations %d %d",
				 double_sums_round(&ds), a.status, b.status,
				 max_rel(a.r.centroids, b.r.centroids, 30), a.r.inertia, b.r.inertia,
				 a.r.iterations, b.r.iterations);

		/* three parts of the shuffled rows, mapped exactly and merged */
		p.max_iter = 1;
		one = do_fit(ds_data(&ds), &p, &h1, 0);
		for (int i = 0; i < 35; i++)
			km_xacc_init(&cells[i]);
		for (int j = 0; j < 5; j++)
			km_xacc_init(&ine[j]);
		for (int part = 0; part < 3; part++)
		{
			dataset		pd = sh;
			int64_t		from = sh.n * part / 3,
						to = sh.n * (part + 1) / 3;

			pd.x = sh.x + from * 6;
			pd.w = sh.w + from;
			pd.n = to - from;
			ds_chunk(&pd, 2);
			st = map_exact_into(ds_data(&pd), init, 5, metric, &h3, cells, ine, counts);
			if (st != KM_OK)
				step_ok = 0;
		}
		memcpy(c1, init, sizeof(c1));
		if (metric == KM_METRIC_COSINE)
			for (int j = 0; j < 5; j++)
				km_centroid_row(init + j * 6, 6, 1, c1 + j * 6);
		for (int j = 0; j < 5; j++)
		{
			double		sv[6];
			double		w = km_xacc_round(&cells[30 + j]);

			for (int i = 0; i < 6; i++)
				sv[i] = km_xacc_round(&cells[j * 6 + i]);
			if (w > 0.0)
				km_centroid_mean(sv, w, 6, metric == KM_METRIC_COSINE, c1 + j * 6);
		}
		if (!ok(step_ok && one.status == KM_OK &&
				memcmp(c1, one.r.centroids, sizeof(c1)) == 0,
				"three parts mapped exactly, merged and stepped: the fit's first step bit for bit (%s)",
				m ? "cosine" : "l2"))
			diag("centroid rel diff %g", max_rel(c1, one.r.centroids, 30));
		fit_free(&a);
		fit_free(&b);
		fit_free(&one);
		free(cells);
		free(perm);
		ds_free(&ds);
		ds_free(&sh);
	}
}

/*
 * Sums with heavy cancellation: in one cluster a column holds pairs of
 * values +-2^20 that cancel and, between them, values near 2^-20, so that
 * the mean is tiny while the running sums are large.  A double sum's
 * rounding then shows in the centroid's float; exact sums do not round.
 */
static void
test_cancellation(void)
{
	dataset		ds = ds_alloc(8000, 3, 0);
	uint64_t	s = 4242;
	int64_t    *perm = malloc(sizeof(int64_t) * ds.n);
	dataset		sh;
	float		init[6] = {0, 0, 0, 0, 1e9f, 0};
	km_params	p = params_for(2, KM_INIT_EXPLICIT, KM_METRIC_L2, 1);
	test_ctx	t1,
				t2;
	km_hooks	h1 = hooks_for(&t1, 1);
	km_hooks	h3 = hooks_for(&t2, 3);
	fitres		a,
				b;
	float		big = 0.0f;

	for (int64_t r = 0; r < ds.n; r++)
	{
		float	   *x = ds.x + r * 3;

		if (r < 4000)
		{
			if (r % 4 == 0)
				big = (float) ldexp(1.0 + rnd_unif(&s), 20);
			x[0] = r % 4 == 0 ? big : r % 4 == 1 ? -big :
				(float) ldexp(rnd_norm(&s), -20);
			x[1] = (float) rnd_norm(&s);
		}
		else
			x[1] = (float) (1e9 + rnd_norm(&s));
		x[2] = (float) rnd_norm(&s);
	}
	sh = ds_shuffled(&ds, 4, 5, perm);
	p.init_centroids = init;
	p.max_iter = 3;
	a = do_fit(ds_data(&ds), &p, &h1, 0);
	b = do_fit(ds_data(&sh), &p, &h3, 0);
	if (!ok(a.status == KM_OK && b.status == KM_OK &&
			memcmp(a.r.centroids, b.r.centroids, sizeof(float) * 6) == 0,
			"cancelling sums: shuffled, 4 chunks, 3 threads vs 1 give the same centroids bit for bit"))
		diag("centroid 0: %a %a vs %a %a", a.r.centroids[0], a.r.centroids[1],
			 b.r.centroids[0], b.r.centroids[1]);
	fit_free(&a);
	fit_free(&b);

	/* the first step from three parts' exact partials */
	{
		km_xacc		cells[2 * 3 + 2];
		km_xacc		ine[2];
		int64_t		counts[2] = {0, 0};
		float		c1[6];
		int			good = 1;

		p.max_iter = 1;
		a = do_fit(ds_data(&ds), &p, &h1, 0);
		for (int i = 0; i < 8; i++)
			km_xacc_init(&cells[i]);
		km_xacc_init(&ine[0]);
		km_xacc_init(&ine[1]);
		for (int q = 0; q < 3; q++)
		{
			dataset		pd = sh;
			int64_t		from = sh.n * q / 3,
						to = sh.n * (q + 1) / 3;

			pd.x = sh.x + from * 3;
			pd.n = to - from;
			ds_chunk(&pd, 1);
			good &= map_exact_into(ds_data(&pd), init, 2, KM_METRIC_L2, &h3, cells, ine,
								   counts) == KM_OK;
		}
		memcpy(c1, init, sizeof(c1));
		for (int j = 0; j < 2; j++)
		{
			double		sv[3];

			for (int i = 0; i < 3; i++)
				sv[i] = km_xacc_round(&cells[j * 3 + i]);
			km_centroid_mean(sv, km_xacc_round(&cells[6 + j]), 3, 0, c1 + j * 3);
		}
		ok(good && a.status == KM_OK && memcmp(c1, a.r.centroids, sizeof(c1)) == 0,
		   "cancelling sums: three parts mapped exactly, merged and stepped give the fit's first step bit for bit");
		fit_free(&a);
	}
	free(perm);
	ds_free(&ds);
	ds_free(&sh);
}

/*
 * map in exact mode keeps, when clusters got no weight, the rows farthest
 * from their centroids: as many as such clusters, farthest first, ties to
 * the smaller hash, with their labels.
 */
static void
test_map_far(void)
{
	dataset		ds = ds_blobs(3000, 4, 3, 3.0, 0.0, 17, NULL);
	float		c[5 * 4];
	int32_t    *lab = malloc(sizeof(int32_t) * ds.n);
	double	   *cost = malloc(sizeof(double) * ds.n);
	double		sums[5 * 4] = {0},
				wts[5] = {0},
				ine[5] = {0};
	int64_t		cnt[5] = {0};
	km_partial	part;
	km_far_row	far[5];
	km_xacc		xi[5];
	km_xstats	xs;
	km_xlevels	xl,
				wl;
	double	   *xsums;
	double		xw[5 * KM_XLEV_MAX] = {0};
	test_ctx	t;
	km_hooks	h = hooks_for(&t, 3);
	km_error	err;
	km_status	st;
	int64_t		best[2] = {-1, -1};
	int			good;

	memcpy(c, ds.x, sizeof(float) * 12);	/* three centroids on rows */
	for (int i = 0; i < 4; i++)
	{
		c[12 + i] = 1e6f;
		c[16 + i] = -1e6f;
	}
	brute_labels(&ds, c, 5, 0, lab, cost);
	for (int64_t r = 0; r < ds.n; r++)
		for (int b = 0; b < 2; b++)
			if (best[b] < 0 || cost[r] > cost[best[b]] ||
				(cost[r] == cost[best[b]] &&
				 km_row_hash(ds.x + r * 4, 4, 1.0f) < km_row_hash(ds.x + best[b] * 4, 4, 1.0f)))
			{
				if (b == 0)
					best[1] = best[0];
				best[b] = r;
				break;
			}
	km_xstats_init(&xs);
	for (int64_t r = 0; r < ds.n; r++)
		km_xstats_row(&xs, ds.x + r * 4, 4, 1.0f, 0, 0, 0.0);
	km_xlevels_for(&xs, ds.n, 0, 1, &xl, &wl);
	xsums = calloc((size_t) xl.n * 20, sizeof(double));
	for (int j = 0; j < 5; j++)
		km_xacc_init(&xi[j]);
	memset(&part, 0, sizeof(part));
	part.sums = sums;
	part.weights = wts;
	part.counts = cnt;
	part.inertia = ine;
	part.stats = &xs;
	part.xsums = xsums;
	part.xweights = xw;
	part.xinertia = xi;
	part.far = far;
	part.labels = malloc(sizeof(int32_t) * ds.n);
	ds_chunk(&ds, 3);
	st = km_cpu_engine.map(ds_data(&ds), c, 5, KM_METRIC_L2, &part, &h, &err);
	good = st == KM_OK && part.nfar == 2 && far[0].row == best[0] && far[1].row == best[1] &&
		far[0].cost == cost[best[0]] && far[0].label == lab[best[0]] &&
		far[1].hash == km_row_hash(ds.x + best[1] * 4, 4, 1.0f) &&
		memcmp(part.labels, lab, sizeof(int32_t) * ds.n) == 0 && t.live_blocks == 0;
	ok(good, "map keeps the rows farthest from their centroids for the clusters it left empty");
	free(part.labels);
	free(xsums);
	free(lab);
	free(cost);
	ds_free(&ds);
}

/* k-means|| over parts of the rows, as a coordinator would run it. */
typedef struct parts_ctx
{
	int			nparts;
	dataset    *parts;
	uint64_t   *hashes[4];
	double	   *cost[4];
	int32_t    *label[4];
	km_metric	metric;
	const km_hooks *hooks;
} parts_ctx;

static km_status
parts_keys(void *arg, uint64_t stream, int use_cost, int m, double *key, uint64_t *hash,
		   float *w, float *x, int *nout, km_error *error)
{
	parts_ctx  *pc = (parts_ctx *) arg;
	km_kmpar_draw *all = malloc(sizeof(km_kmpar_draw) * (size_t) m * pc->nparts);
	int		   *from = malloc(sizeof(int) * (size_t) m * pc->nparts);
	int			n = 0;

	for (int q = 0; q < pc->nparts; q++)
	{
		int			got;
		km_status	st = km_cpu_kmpar_keys(ds_data(&pc->parts[q]), pc->hashes[q],
										   use_cost ? pc->cost[q] : NULL, stream, m,
										   pc->hooks, all + n, &got, error);

		if (st != KM_OK)
			return st;
		for (int i = 0; i < got; i++)
			from[n + i] = q;
		n += got;
	}
	/* merge: insertion sort by (key, hash) */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && km_kmpar_before(&all[j], &all[j - 1]); j--)
		{
			km_kmpar_draw t = all[j];
			int			f = from[j];

			all[j] = all[j - 1];
			from[j] = from[j - 1];
			all[j - 1] = t;
			from[j - 1] = f;
		}
	*nout = n < m ? n : m;
	for (int i = 0; i < *nout; i++)
	{
		dataset    *pd = &pc->parts[from[i]];

		key[i] = all[i].key;
		hash[i] = all[i].hash;
		w[i] = all[i].w;
		memcpy(x + (size_t) i * pd->d, pd->x + all[i].row * pd->d, sizeof(float) * pd->d);
	}
	free(all);
	free(from);
	return KM_OK;
}

static km_status
parts_fold(void *arg, const float *cands, int first, int count, km_error *error)
{
	parts_ctx  *pc = (parts_ctx *) arg;

	for (int q = 0; q < pc->nparts; q++)
	{
		km_status	st = km_cpu_kmpar_fold(ds_data(&pc->parts[q]), pc->metric,
										   cands + (size_t) first * pc->parts[q].d, first,
										   count, pc->cost[q], pc->label[q], pc->hooks, error);

		if (st != KM_OK)
			return st;
	}
	return KM_OK;
}

static km_status
parts_weights(void *arg, int ncand, double *out, km_error *error)
{
	parts_ctx  *pc = (parts_ctx *) arg;
	km_xacc    *acc = malloc(sizeof(km_xacc) * ncand);
	double	   *lev = malloc(sizeof(double) * KM_XLEV_MAX * ncand);

	for (int c = 0; c < ncand; c++)
		km_xacc_init(&acc[c]);
	for (int q = 0; q < pc->nparts; q++)
	{
		km_xlevels	lv;

		memset(lev, 0, sizeof(double) * KM_XLEV_MAX * ncand);
		km_cpu_kmpar_weights(ds_data(&pc->parts[q]), pc->label[q], ncand, lev, &lv);
		for (int c = 0; c < ncand; c++)
			for (int l = 0; l < lv.n; l++)
				km_xacc_add(&acc[c], lev[(size_t) l * ncand + c]);
	}
	for (int c = 0; c < ncand; c++)
		out[c] = km_xacc_round(&acc[c]);
	free(acc);
	free(lev);
	return KM_OK;
}

/*
 * k-means||: independent of row order, chunks and threads; run over three
 * parts it seeds what the engine seeds over all rows; the engine's seed
 * entry gives the start of its fit; and it finds planted blobs.
 */
static void
test_kmeans_parallel(void)
{
	for (int m = 0; m < 2; m++)
	{
		km_metric	metric = m ? KM_METRIC_COSINE : KM_METRIC_L2;
		dataset		ds = ds_wide(6000, 5, 8, 71 + m);
		int64_t    *perm = malloc(sizeof(int64_t) * ds.n);
		dataset		sh;
		km_params	p = params_for(8, KM_INIT_KMEANS_PARALLEL, metric, 1234);
		test_ctx	t1,
					t2;
		km_hooks	h1 = hooks_for(&t1, 1);
		km_hooks	h3 = hooks_for(&t2, 3);
		fitres		a,
					b,
					e;
		float		seeded[8 * 5];
		float		byparts[8 * 5];
		km_error	err;
		km_status	st1,
					st2;
		parts_ctx	pc;
		dataset		parts[3];
		km_kmpar_ops ops;

		ds.w = malloc(sizeof(float) * ds.n);
		for (int64_t r = 0; r < ds.n; r++)
			ds.w[r] = (float) (1 + r % 4);
		ds_chunk(&ds, 1);
		sh = ds_shuffled(&ds, 5, 91, perm);
		p.n_init = 2;
		p.max_iter = 20;
		a = do_fit(ds_data(&ds), &p, &h1, 0);
		b = do_fit(ds_data(&sh), &p, &h3, 0);
		ok(a.status == KM_OK && b.status == KM_OK &&
		   memcmp(a.r.centroids, b.r.centroids, sizeof(float) * 40) == 0 &&
		   a.r.inertia == b.r.inertia && a.r.best_run == b.r.best_run,
		   "k-means|| fit: shuffled, 5 chunks, 3 threads vs 1: the same model bit for bit (%s, n_init 2)",
		   m ? "cosine" : "l2");

		/* the seed entry's start for run 1, and k-means|| over three parts */
		st1 = km_cpu_engine.seed(ds_data(&ds), &p, 1, &h1, seeded, &err);
		memset(&pc, 0, sizeof(pc));
		pc.nparts = 3;
		pc.parts = parts;
		pc.metric = metric;
		pc.hooks = &h3;
		for (int q = 0; q < 3; q++)
		{
			int64_t		from = sh.n * q / 3,
						to = sh.n * (q + 1) / 3;

			parts[q] = sh;
			parts[q].x = sh.x + from * 5;
			parts[q].w = sh.w + from;
			parts[q].n = to - from;
			ds_chunk(&parts[q], 1 + q);
			pc.hashes[q] = malloc(sizeof(uint64_t) * parts[q].n);
			pc.cost[q] = malloc(sizeof(double) * parts[q].n);
			pc.label[q] = malloc(sizeof(int32_t) * parts[q].n);
			for (int64_t r = 0; r < parts[q].n; r++)
			{
				pc.hashes[q][r] = km_row_hash(parts[q].x + r * 5, 5, parts[q].w[r]);
				pc.cost[q][r] = INFINITY;
				pc.label[q][r] = -1;
			}
		}
		ops.ctx = &pc;
		ops.keys = parts_keys;
		ops.fold = parts_fold;
		ops.weights = parts_weights;
		st2 = km_kmpar_run(&ops, 5, 8, metric, p.seed, 1, NULL, byparts, &err);
		ok(st1 == KM_OK && st2 == KM_OK && memcmp(seeded, byparts, sizeof(seeded)) == 0,
		   "k-means|| over three parts of the shuffled rows seeds what the engine seeds (%s)",
		   m ? "cosine" : "l2");

		/* a fit from the seed entry's start is the k-means|| fit */
		p.n_init = 1;
		st1 = km_cpu_engine.seed(ds_data(&ds), &p, 0, &h1, seeded, &err);
		fit_free(&a);
		a = do_fit(ds_data(&ds), &p, &h1, 0);
		p.init = KM_INIT_EXPLICIT;
		p.init_centroids = seeded;
		e = do_fit(ds_data(&ds), &p, &h1, 0);
		ok(st1 == KM_OK && a.status == KM_OK && e.status == KM_OK &&
		   memcmp(a.r.centroids, e.r.centroids, sizeof(float) * 40) == 0 &&
		   a.r.inertia == e.r.inertia && a.r.iterations == e.r.iterations &&
		   t1.live_blocks == 0 && t2.live_blocks == 0,
		   "seed gives the start of the fit: explicit fit from it = k-means|| fit (%s), nothing leaked",
		   m ? "cosine" : "l2");
		for (int q = 0; q < 3; q++)
		{
			free(pc.hashes[q]);
			free(pc.cost[q]);
			free(pc.label[q]);
		}
		fit_free(&a);
		fit_free(&b);
		fit_free(&e);
		free(perm);
		ds_free(&ds);
		ds_free(&sh);
	}

	/* planted blobs: as good a start as k-means++ */
	{
		int32_t    *truth = malloc(sizeof(int32_t) * 20000);
		dataset		ds = ds_blobs(20000, 8, 12, 8.0, 0.0, 81, truth);
		km_params	p = params_for(12, KM_INIT_KMEANS_PARALLEL, KM_METRIC_L2, 5);
		test_ctx	t;
		km_hooks	h = hooks_for(&t, 2);
		fitres		par,
					pp;

		p.max_iter = 50;
		par = do_fit(ds_data(&ds), &p, &h, 0);
		p.init = KM_INIT_KMEANSPP;
		pp = do_fit(ds_data(&ds), &p, &h, 0);
		if (!ok(par.status == KM_OK && pp.status == KM_OK &&
				par.r.inertia <= 1.02 * pp.r.inertia && par.r.inertia < 1.1 * 20000 * 8,
				"k-means|| finds 12 planted blobs: inertia per value near the noise variance 1, within 2%% of k-means++"))
			diag("k-means|| %g, k-means++ %g", par.r.inertia, pp.r.inertia);
		fit_free(&par);
		fit_free(&pp);
		free(truth);
		ds_free(&ds);
	}
}

int
main(void)
{
	test_exact_labels();
	test_huge_values();
	test_portable_kernel();
	test_nearest_row();
	test_fit_exact();
	test_blobs();
	test_seed_potential();
	test_deterministic();
	test_order_independence();
	test_threads();
	test_weights();
	test_relocation();
	test_degenerate();
	test_cosine();
	test_tol();
	test_n_init();
	test_cancel();
	test_workspace();
	test_assign_map();
	test_errors();
	test_xsum();
	test_exact_sums();
	test_cancellation();
	test_map_far();
	test_kmeans_parallel();
	printf("1..%d\n", n_tests);
	if (n_failed > 0)
		printf("# %d of %d tests failed\n", n_failed, n_tests);
	return n_failed > 0 ? 1 : 0;
}
