/*
 * kmeans_bench.c
 *	  Standalone driver of the CPU engine, for benchmarks and comparisons.
 *
 * Reads a float32 matrix (raw, row-major, --n rows of --d values) or makes
 * one up (--gen), optionally initial centroids and weights, runs one fit and
 * prints machine-readable "key value" lines: per-iteration times (from the
 * engine's progress reports), iterations, inertia and so on.  Labels and
 * centroids can be written to files (int32 and float32, raw).
 *
 *	kmeans_bench --n N --d D --k K [--data FILE | --gen SEED] [options]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_engine.h"

typedef struct bench_state
{
	double		last;			/* elapsed at the previous report */
	double	   *iter_s;			/* seconds per Lloyd iteration */
	int			niter;
	int			cap;
	double		seed_end;		/* elapsed when seeding was done */
	double		prepare_end;
	int			verbose;
} bench_state;

/*
 * Progress hook: time every Lloyd iteration as the gap between reports.
 */
static int
bench_report(void *ctx, const km_progress *p)
{
	bench_state *b = (bench_state *) ctx;

	if (p->phase == KM_PHASE_PREPARE)
		b->prepare_end = p->elapsed;
	if (p->phase == KM_PHASE_SEED && p->done == p->total)
		b->seed_end = p->elapsed;
	if (p->phase == KM_PHASE_ITERATE && p->run == 0 && b->niter < b->cap)
	{
		if (p->iteration == 1)
			b->last = b->seed_end > 0.0 ? b->seed_end : b->prepare_end;
		b->iter_s[b->niter++] = p->elapsed - b->last;
		if (b->verbose)
			fprintf(stderr, "iter %d: %.3f ms moved %.6f inertia %.6g relocated %d\n",
					p->iteration, 1e3 * (p->elapsed - b->last), p->moved,
					p->inertia, p->relocated);
	}
	b->last = p->elapsed;
	return 0;
}

/* Read exactly count floats (or int32s) from path; exits on failure. */
static void *
read_file(const char *path, size_t bytes)
{
	FILE	   *f = fopen(path, "rb");
	void	   *buf = malloc(bytes > 0 ? bytes : 1);

	if (f == NULL || buf == NULL || fread(buf, 1, bytes, f) != bytes)
	{
		fprintf(stderr, "kmeans_bench: cannot read %zu bytes from %s\n", bytes, path);
		exit(2);
	}
	fclose(f);
	return buf;
}

static void
write_file(const char *path, const void *buf, size_t bytes)
{
	FILE	   *f = fopen(path, "wb");

	if (f == NULL || fwrite(buf, 1, bytes, f) != bytes || fclose(f) != 0)
	{
		fprintf(stderr, "kmeans_bench: cannot write %s\n", path);
		exit(2);
	}
}

/* xorshift64* and Box-Muller: reproducible data without libraries. */
static uint64_t
rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

static double
rng_uniform(uint64_t *s)
{
	return ((double) (rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static double
rng_normal(uint64_t *s)
{
	return sqrt(-2.0 * log(rng_uniform(s))) * cos(6.283185307179586 * rng_uniform(s));
}

/*
 * Blobs around 2k random centres (spread 1) plus 10% uniform noise in the
 * bounding box, so that Lloyd does not converge in a couple of steps.
 */
static float *
generate(int64_t n, int d, int k, uint64_t seed)
{
	uint64_t	s = seed * 0x9E3779B97F4A7C15ULL + 1;
	int			nc = 2 * k;
	float	   *centres = malloc(sizeof(float) * nc * d);
	float	   *x = malloc(sizeof(float) * n * d);

	for (int i = 0; i < nc * d; i++)
		centres[i] = (float) (10.0 * (2.0 * rng_uniform(&s) - 1.0));
	for (int64_t r = 0; r < n; r++)
	{
		float	   *row = x + r * d;

		if (rng_uniform(&s) < 0.1)
			for (int i = 0; i < d; i++)
				row[i] = (float) (10.0 * (2.0 * rng_uniform(&s) - 1.0));
		else
		{
			const float *c = centres + (rng_next(&s) % nc) * d;

			for (int i = 0; i < d; i++)
				row[i] = c[i] + (float) (2.0 * rng_normal(&s));
		}
	}
	free(centres);
	return x;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: kmeans_bench --n N --d D --k K [--data FILE | --gen SEED]\n"
			"  [--weights FILE] [--init-file FILE] [--init kmeans++|random|explicit]\n"
			"  [--metric l2|cosine] [--max-iter M] [--tol T] [--threads P]\n"
			"  [--seed S] [--n-init R] [--chunks C]\n"
			"  [--labels-out FILE] [--centroids-out FILE] [--verbose]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int64_t		n = 0;
	int			d = 0;
	int			nchunks = 1;
	const char *data_path = NULL;
	const char *weights_path = NULL;
	const char *init_path = NULL;
	const char *labels_out = NULL;
	const char *centroids_out = NULL;
	long long	gen_seed = -1;
	km_params	params;
	km_hooks	hooks;
	km_result	result;
	km_error	error;
	km_data		data;
	km_chunk   *chunks;
	bench_state bs;
	float	   *x;
	float	   *w = NULL;
	km_status	status;
	double		median = 0.0;

	memset(&params, 0, sizeof(params));
	params.k = 8;
	params.max_iter = 300;
	params.tol = 1e-4;
	params.init = KM_INIT_KMEANSPP;
	params.metric = KM_METRIC_L2;
	params.n_init = 1;
	memset(&hooks, 0, sizeof(hooks));
	hooks.n_threads = 1;
	memset(&bs, 0, sizeof(bs));

	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--verbose") == 0)
		{
			bs.verbose = 1;
			continue;
		}
		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--n") == 0)
			n = atoll(v);
		else if (strcmp(a, "--d") == 0)
			d = atoi(v);
		else if (strcmp(a, "--k") == 0)
			params.k = atoi(v);
		else if (strcmp(a, "--data") == 0)
			data_path = v;
		else if (strcmp(a, "--gen") == 0)
			gen_seed = atoll(v);
		else if (strcmp(a, "--weights") == 0)
			weights_path = v;
		else if (strcmp(a, "--init-file") == 0)
		{
			init_path = v;
			params.init = KM_INIT_EXPLICIT;
		}
		else if (strcmp(a, "--init") == 0)
			params.init = strcmp(v, "random") == 0 ? KM_INIT_RANDOM :
				strcmp(v, "explicit") == 0 ? KM_INIT_EXPLICIT : KM_INIT_KMEANSPP;
		else if (strcmp(a, "--metric") == 0)
			params.metric = strcmp(v, "cosine") == 0 ? KM_METRIC_COSINE : KM_METRIC_L2;
		else if (strcmp(a, "--max-iter") == 0)
			params.max_iter = atoi(v);
		else if (strcmp(a, "--tol") == 0)
			params.tol = atof(v);
		else if (strcmp(a, "--threads") == 0)
			hooks.n_threads = atoi(v);
		else if (strcmp(a, "--seed") == 0)
			params.seed = strtoull(v, NULL, 10);
		else if (strcmp(a, "--n-init") == 0)
			params.n_init = atoi(v);
		else if (strcmp(a, "--chunks") == 0)
			nchunks = atoi(v);
		else if (strcmp(a, "--labels-out") == 0)
			labels_out = v;
		else if (strcmp(a, "--centroids-out") == 0)
			centroids_out = v;
		else
			usage();
	}
	if (n < 1 || d < 1 || params.k < 1 || nchunks < 1 || (data_path == NULL) == (gen_seed < 0))
		usage();

	x = data_path != NULL ? read_file(data_path, sizeof(float) * n * d)
		: generate(n, d, params.k, (uint64_t) gen_seed);
	if (weights_path != NULL)
		w = read_file(weights_path, sizeof(float) * n);
	if (init_path != NULL)
		params.init_centroids = read_file(init_path, sizeof(float) * params.k * d);

	chunks = calloc(nchunks, sizeof(km_chunk));
	for (int c = 0; c < nchunks; c++)
	{
		int64_t		lo = n * c / nchunks;
		int64_t		hi = n * (c + 1) / nchunks;

		chunks[c].x = x + lo * d;
		chunks[c].w = w != NULL ? w + lo : NULL;
		chunks[c].n = hi - lo;
	}
	data.d = d;
	data.n = n;
	data.nchunks = nchunks;
	data.chunks = chunks;

	bs.cap = params.max_iter;
	bs.iter_s = calloc(params.max_iter, sizeof(double));
	hooks.ctx = &bs;
	hooks.report = bench_report;

	memset(&result, 0, sizeof(result));
	result.centroids = malloc(sizeof(float) * params.k * d);
	result.sizes = malloc(sizeof(int64_t) * params.k);
	result.cluster_inertia = malloc(sizeof(double) * params.k);
	result.labels = labels_out != NULL ? malloc(sizeof(int32_t) * n) : NULL;

	status = km_cpu_engine.fit(&data, &params, &hooks, &result, &error);
	if (status != KM_OK)
	{
		fprintf(stderr, "kmeans_bench: fit failed (%d): %s\n", (int) status, error.message);
		return 1;
	}

	if (bs.niter > 0)
	{
		double	   *sorted = malloc(sizeof(double) * bs.niter);

		memcpy(sorted, bs.iter_s, sizeof(double) * bs.niter);
		qsort(sorted, bs.niter, sizeof(double), cmp_double);
		median = bs.niter % 2 ? sorted[bs.niter / 2]
			: 0.5 * (sorted[bs.niter / 2 - 1] + sorted[bs.niter / 2]);
		free(sorted);
	}
	printf("n %lld\nd %d\nk %d\nthreads %d\n", (long long) n, d, params.k, hooks.n_threads);
	printf("iterations %d\nconverged %d\nrelocated %d\n", result.iterations,
		   result.converged, result.relocated);
	printf("inertia %.17g\n", result.inertia);
	printf("prepare_s %.6f\nseed_s %.6f\n", bs.prepare_end,
		   bs.seed_end > 0.0 ? bs.seed_end - bs.prepare_end : 0.0);
	printf("iter_ms_median %.4f\n", 1e3 * median);
	printf("iter_ms");
	for (int i = 0; i < bs.niter; i++)
		printf(" %.4f", 1e3 * bs.iter_s[i]);
	printf("\nworkspace_bytes %zu\n",
		   km_cpu_engine.fit_workspace(n, d, params.k, hooks.n_threads));

	if (labels_out != NULL)
		write_file(labels_out, result.labels, sizeof(int32_t) * n);
	if (centroids_out != NULL)
		write_file(centroids_out, result.centroids, sizeof(float) * params.k * d);
	return 0;
}
