/*
 * bench_engine.cu
 *	  The GPU engine end to end: validation against the plain C reference
 *	  (ref_kmeans.c) and per-iteration timing against cuBLAS SGEMM.
 *
 *	bin/bench_engine [--so PATH] [validate] [bench] [quick] [split] [splitbench] [screen] [bounds]
 *
 * The engine is used exactly as the SQL layer will: dlopen() of
 * kmeans_gpu_cuda.so (bin/ by default), km_gpu_get_api(), and the table.
 *
 * validate: for shapes with d in {2..784}, k from 2 to 5000 (k == n too),
 *   n from 100 to 1M, both metrics, weights (zeros too), every init, empty
 *   clusters, duplicates: the GPU fit against ref_fit: labels must be
 *   identical, inertia within 1e-5 relative, centroids close, sizes and
 *   iterations equal.  Then assign/map against ref_assign, the streaming
 *   path (with growth) against engine->fit, determinism (two fits, same
 *   bits), cancellation, invalid input, out of memory, and no device memory
 *   left behind.
 * split: the split fits (several devices, out of core, half precision)
 *   against the CPU engine, bit for bit, on SPLIT_DEVICES (default "0") and
 *   the same list twice; then their refusals, cancellation and labels.
 * screen: the tensor-core screen on adversarial data (screen_checks).
 * bounds: whole fits with and without the bounds that skip rows: the same
 *   model, and the iterations' time (bounds_bench).
 * splitbench: their time per iteration against the in-memory one-device fit
 *   and the copy rate (see split_bench).
 * bench: per Lloyd iteration time = (T(max_iter = N2) - T(N1)) / (N2 - N1),
 *   tol = 0, explicit init, rows already uploaded (dataset API), data made
 *   by test/bench/kmeans_bench.c's generator (blobs plus 10% noise); and in
 *   the same run cuBLAS SGEMM of (n x d)(d x k), strict fp32, and the ratio.
 *   BENCH_ONLY=i: shape i alone; BENCH_N2=m: N2 = m for every shape; BENCH_N=m:
 *   m rows for every shape; BENCH_D=c, BENCH_K=j: c columns and j clusters.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kmeans_gpu_cuda.h"
#include "ref_kmeans.h"
#include "bench_check.h"

#ifdef WITH_CPU_ENGINE
/* The CPU engine (src/engine/*.c), linked in: labels must agree row by row. */
#include <unistd.h>
#endif

static const km_gpu_api *api;
static int	failures = 0;
static FILE *summary;


static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- data: test/bench/kmeans_bench.c's generator, per-row streams ---- */

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

static uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Fashion-MNIST, train then t10k (70000 x 784, raw 0..255 pixels as float),
 * from kernels/bench/bin/*-images-idx3-ubyte.gz (copied there from
 * /usr/share/datasets/fashion-mnist), decompressed with gzip -dc.  NULL
 * when the files are not there.
 */
static float *
fashion_rows(int64_t *n_out)
{
	const char *files[2] = {"kernels/bench/bin/train-images-idx3-ubyte.gz",
	"kernels/bench/bin/t10k-images-idx3-ubyte.gz"};
	static float *cache = NULL;
	static int64_t cache_n = 0;
	std::vector<float> rows;

	if (cache != NULL)
	{
		*n_out = cache_n;
		return cache;
	}
	for (int f = 0; f < 2; f++)
	{
		char		cmd[300];
		unsigned char hdr[16];
		FILE	   *p;
		int64_t		cnt;
		std::vector<unsigned char> buf;

		snprintf(cmd, sizeof(cmd), "gzip -dc %s 2>/dev/null", files[f]);
		p = popen(cmd, "r");
		if (p == NULL)
			return NULL;
		if (fread(hdr, 1, 16, p) != 16)
		{
			pclose(p);
			return NULL;
		}
		cnt = ((int64_t) hdr[4] << 24) | (hdr[5] << 16) | (hdr[6] << 8) | hdr[7];
		if (hdr[2] != 8 || hdr[3] != 3 || hdr[8] != 0 || hdr[9] != 0 || hdr[10] != 0 ||
			hdr[11] != 28 || hdr[15] != 28)
		{
			pclose(p);
			return NULL;
		}
		buf.resize((size_t) cnt * 784);
		if (fread(buf.data(), 1, buf.size(), p) != buf.size())
		{
			pclose(p);
			return NULL;
		}
		pclose(p);
		for (size_t i = 0; i < buf.size(); i++)
			rows.push_back((float) buf[i]);
	}
	cache_n = (int64_t) (rows.size() / 784);
	cache = (float *) malloc(sizeof(float) * rows.size());
	memcpy(cache, rows.data(), sizeof(float) * rows.size());
	*n_out = cache_n;
	return cache;
}

/*
 * Rows of bytes built for the byte pass's certificate (assign/bytes.cu): k
 * centres of even values in 40..214, centre 2m + 1 that of 2m moved by 2
 * in three columns (close pairs); rows: 35 % a centre, 30 % the midpoint of
 * a pair (integers, at equal distance from both), 25 % a centre plus noise
 * in -3..3, 10 % values 0 or 255 only; and the rows explicit starts take,
 * (j 7919) % n, are the centres, so the first pass meets exact ties.
 */
static void
generate_bytes(float *x, int64_t n, int d, int k, uint64_t seed)
{
	std::vector<int> cb((size_t) k * d);
	uint64_t	s = mix(seed) | 1;

	for (int j = 0; j < k; j++)
	{
		for (int i = 0; i < d; i++)
			cb[(size_t) j * d + i] = j % 2 == 1 ? cb[(size_t) (j - 1) * d + i]
				: 40 + 2 * (int) (rng_next(&s) % 88);
		if (j % 2 == 1)
			for (int m = 0; m < 3; m++)
			{
				int		   &v = cb[(size_t) j * d + rng_next(&s) % d];

				v = v > 210 ? v - 2 : v + 2;
			}
	}
	for (int64_t r = 0; r < n; r++)
	{
		float	   *row = x + (size_t) r * d;
		const double u = rng_uniform(&s);
		const int	c = (int) (rng_next(&s) % k);
		const int	c2 = (c ^ 1) < k ? c ^ 1 : c;

		for (int i = 0; i < d; i++)
		{
			const int	a = cb[(size_t) c * d + i];
			int			v = u < 0.35 ? a
				: u < 0.65 ? (a + cb[(size_t) c2 * d + i]) / 2
				: u < 0.9 ? a + (int) (rng_next(&s) % 7) - 3
				: (rng_next(&s) & 1) ? 255 : 0;

			row[i] = (float) v;
		}
	}
	for (int j = 0; j < k; j++)
		for (int i = 0; i < d; i++)
			x[(size_t) ((j * 7919) % n) * d + i] = (float) cb[(size_t) j * d + i];
}

/*
 * kind 0: blobs around 2k centres plus 10% noise; 1: uniform [0,1); 2: few
 * distinct rows; 4: Fashion-MNIST (d must be 784; the first n images); 6:
 * bytes at and near the bisectors of close centres (generate_bytes)
 */
static float *
generate(int64_t n, int d, int k, uint64_t seed, int kind)
{
	const int	nc = kind == 2 ? 20 : 2 * k;
	float	   *centres;
	float	   *x = (float *) malloc(sizeof(float) * (size_t) n * d);
	uint64_t	s = mix(seed) | 1;

	if (kind == 6)
	{
		generate_bytes(x, n, d, k, seed);
		return x;
	}
	if (kind == 4)
	{
		int64_t		nf = 0;
		const float *f = fashion_rows(&nf);

		if (f == NULL || d != 784 || n > nf)
		{
			fprintf(stderr, "Fashion-MNIST not found in kernels/bench/bin (or n/d wrong)\n");
			exit(3);
		}
		memcpy(x, f, sizeof(float) * (size_t) n * d);
		return x;
	}
	centres = (float *) malloc(sizeof(float) * (size_t) nc * d);

	for (int i = 0; i < nc * d; i++)
		centres[i] = (float) (10.0 * (2.0 * rng_uniform(&s) - 1.0));
#pragma omp parallel for schedule(static, 4096)
	for (int64_t r = 0; r < n; r++)
	{
		uint64_t	rs = mix(seed * 0x9E3779B97F4A7C15ULL + (uint64_t) r) | 1;
		float	   *row = x + (size_t) r * d;

		if (kind == 1)
			for (int i = 0; i < d; i++)
				row[i] = (float) rng_uniform(&rs);
		else if (kind == 2)
			memcpy(row, centres + (rng_next(&rs) % nc) * d, sizeof(float) * d);
		else if (rng_uniform(&rs) < 0.1)
			for (int i = 0; i < d; i++)
				row[i] = (float) (10.0 * (2.0 * rng_uniform(&rs) - 1.0));
		else
		{
			const float *c = centres + (rng_next(&rs) % nc) * d;

			for (int i = 0; i < d; i++)
				row[i] = c[i] + (float) (2.0 * rng_normal(&rs));
		}
	}
	free(centres);
	return x;
}

static float *
gen_weights(int64_t n, uint64_t seed, int zeros)
{
	float	   *w = (float *) malloc(sizeof(float) * n);
	uint64_t	s = mix(seed + 77) | 1;

	for (int64_t r = 0; r < n; r++)
	{
		double		u = rng_uniform(&s);

		w[r] = zeros && u < 0.05 ? 0.0f : (float) (0.25 + 2.0 * rng_uniform(&s));
	}
	return w;
}

static void
result_alloc(km_result *r, int64_t n, int d, int k)
{
	memset(r, 0, sizeof(*r));
	r->centroids = (float *) malloc(sizeof(float) * k * d);
	r->sizes = (int64_t *) malloc(sizeof(int64_t) * k);
	r->cluster_inertia = (double *) malloc(sizeof(double) * k);
	r->labels = (int32_t *) malloc(sizeof(int32_t) * n);
}

static void
result_free(km_result *r)
{
	free(r->centroids);
	free(r->sizes);
	free(r->cluster_inertia);
	free(r->labels);
}

/* Whether two fits are the same model, bit for bit; what differs into why. */
static int
same_model(const km_result *a, const km_result *b, int64_t n, int d, int k, char *why, size_t len)
{
	int64_t		lab = 0;
	int			cent = 0,
				size = 0,
				ci = 0;

	for (int64_t r = 0; r < n; r++)
		lab += a->labels[r] != b->labels[r];
	for (int j = 0; j < k; j++)
	{
		cent += memcmp(a->centroids + (size_t) j * d, b->centroids + (size_t) j * d,
					   sizeof(float) * d) != 0;
		size += a->sizes[j] != b->sizes[j];
		ci += memcmp(&a->cluster_inertia[j], &b->cluster_inertia[j], sizeof(double)) != 0;
	}
	snprintf(why, len, "labels %lld, centroids %d, sizes %d, cluster inertia %d differ; inertia %s; "
			 "iterations %d/%d, converged %d/%d, re-seeded %d/%d",
			 (long long) lab, cent, size, ci,
			 memcmp(&a->inertia, &b->inertia, sizeof(double)) == 0 ? "same bits" : "DIFFERS",
			 a->iterations, b->iterations, a->converged, b->converged, a->relocated, b->relocated);
	return lab == 0 && cent == 0 && size == 0 && ci == 0 &&
		memcmp(&a->inertia, &b->inertia, sizeof(double)) == 0 &&
		a->iterations == b->iterations && a->converged == b->converged &&
		a->relocated == b->relocated;
}

/* A fit's parameters: k, max_iter, tol 0, init, metric, one run (the rest zero). */
static km_params
fit_params(int k, int max_iter, km_init init, km_metric metric)
{
	km_params	p;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = max_iter;
	p.tol = 0.0;
	p.init = init;
	p.metric = metric;
	p.n_init = 1;
	return p;
}

/* ---- hooks ---- */

typedef struct hook_ctx
{
	int			polls;
	int			stop_after;		/* poll answers stop after this many calls (0: never) */
	int			reports;
	int			iter_reports;
} hook_ctx;

static int
hook_poll(void *ctx)
{
	hook_ctx   *h = (hook_ctx *) ctx;

	h->polls++;
	return h->stop_after > 0 && h->polls >= h->stop_after;
}

static int
hook_report(void *ctx, const km_progress *p)
{
	hook_ctx   *h = (hook_ctx *) ctx;

	h->reports++;
	if (p->phase == KM_PHASE_ITERATE)
		h->iter_reports++;
	return 0;
}

/* ---- one validation case ---- */

typedef struct vcase
{
	const char *name;
	int64_t		n;
	int			d;
	int			k;
	km_metric	metric;
	int			weighted;		/* 1: weights, 2: weights with zeros */
	km_init		init;
	int			max_iter;
	double		tol;
	int			n_init;
	int			kind;			/* data kind; 3: blobs and far explicit init (empties);
								 * 5: blobs + 1000; 6: bytes (generate_bytes); 7: bytes
								 * and far explicit init; 8: blobs with cancelling
								 * giants (every 50th row +2^50 in column 0, the
								 * next -2^50: a double sum loses the small values
								 * under them, an exact one does not) */
	uint64_t	seed;
} vcase;

static void
run_case(const vcase *c)
{
	const int64_t n = c->n;
	const int	d = c->d,
				k = c->k;
	float	   *x = generate(n, d, k, c->seed, c->kind == 3 || c->kind == 5 || c->kind == 8 ? 0 : c->kind == 7 ? 6 : c->kind);
	float	   *w = c->weighted ? gen_weights(n, c->seed, c->weighted == 2) : NULL;
	float	   *init = NULL;
	km_chunk	chunks[3];

	if (c->kind == 5)
		for (int64_t i = 0; i < n * d; i++)
			x[i] += 1000.0f;	/* far from the origin: the l2 centring matters */
	if (c->kind == 8)
		for (int64_t r = 0; r + 1 < n; r += 50)
		{
			x[(size_t) r * d] = 0x1p50f;
			x[(size_t) (r + 1) * d] = -0x1p50f;
		}
	km_data		data;
	km_params	p;
	km_hooks	hooks;
	hook_ctx	hc;
	km_result	gr;
	ref_result	rr;
	km_error	err;
	km_status	st;
	double		t0,
				tg,
				tr;
	int64_t		lab_diff = 0,
				size_diff = 0;
	double		cdiff = 0.0,
				cscale = 0.0,
				irel;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = c->max_iter;
	p.tol = c->tol;
	p.init = c->init;
	p.metric = c->metric;
	p.seed = c->seed * 31 + 7;
	p.n_init = c->n_init;
	if (c->init == KM_INIT_EXPLICIT)
	{
		init = (float *) malloc(sizeof(float) * k * d);
		for (int j = 0; j < k; j++)
			for (int i = 0; i < d; i++)
				init[(size_t) j * d + i] = (c->kind == 3 || c->kind == 7) && j % 3 == 1
					? 1000.0f + (float) j
					: x[(size_t) ((j * 7919) % n) * d + i];
		p.init_centroids = init;
	}
	/* three chunks, to exercise the chunk walk */
	{
		int64_t		a = n / 3,
					b = n / 2;

		chunks[0].x = x;
		chunks[0].w = w;
		chunks[0].n = a;
		chunks[1].x = x + (size_t) a * d;
		chunks[1].w = w ? w + a : NULL;
		chunks[1].n = b - a;
		chunks[2].x = x + (size_t) b * d;
		chunks[2].w = w ? w + b : NULL;
		chunks[2].n = n - b;
	}
	data.d = d;
	data.nchunks = 3;
	data.chunks = chunks;
	data.n = n;
	memset(&hooks, 0, sizeof(hooks));
	memset(&hc, 0, sizeof(hc));
	hooks.ctx = &hc;
	hooks.poll = hook_poll;
	hooks.report = hook_report;

	gr.centroids = (float *) malloc(sizeof(float) * k * d);
	gr.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
	gr.cluster_inertia = (double *) malloc(sizeof(double) * k);
	gr.labels = (int32_t *) malloc(sizeof(int32_t) * n);
	rr.centroids = (float *) malloc(sizeof(float) * k * d);
	rr.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
	rr.cluster_inertia = (double *) malloc(sizeof(double) * k);
	rr.labels = (int32_t *) malloc(sizeof(int32_t) * n);

	t0 = now();
	st = api->engine->fit(&data, &p, &hooks, &gr, &err);
	tg = now() - t0;
	if (st != KM_OK)
	{
		printf("FAIL %-28s gpu fit: status %d: %s\n", c->name, st, err.message);
		fprintf(summary, "FAIL %s: status %d %s\n", c->name, st, err.message);
		failures++;
		goto out;
	}
	t0 = now();
	ref_fit(x, w, n, d, &p, &rr);
	tr = now() - t0;

	for (int64_t r = 0; r < n; r++)
		lab_diff += gr.labels[r] != rr.labels[r];
	for (int j = 0; j < k; j++)
	{
		size_diff += gr.sizes[j] != rr.sizes[j];
		for (int i = 0; i < d; i++)
		{
			double		dv = fabs((double) gr.centroids[(size_t) j * d + i] -
								  (double) rr.centroids[(size_t) j * d + i]);

			cdiff = dv > cdiff ? dv : cdiff;
			cscale = fabs(rr.centroids[(size_t) j * d + i]) > cscale
				? fabs(rr.centroids[(size_t) j * d + i]) : cscale;
		}
	}
	irel = fabs(gr.inertia - rr.inertia) / (fabs(rr.inertia) > 0 ? fabs(rr.inertia) : 1.0);
	{
		/* kind 8: the reference's plain double sums lose what the giants cover (the CPU engine's line checks) */
		int			ok = lab_diff == 0 && size_diff == 0 && irel <= 1e-5 &&
			gr.iterations == rr.iterations && gr.converged == rr.converged &&
			gr.relocated == rr.relocated && gr.best_run == rr.best_run &&
			(c->kind == 8 || cdiff <= 1e-5 * (cscale > 1 ? cscale : 1));

		printf("%s %-28s n=%lld d=%d k=%d %s %s: labels diff %lld, sizes diff %lld, inertia rel %.2e, "
			   "centroid diff %.2e (scale %.3g), iters %d/%d conv %d/%d reloc %d/%d run %d/%d, "
			   "reports %d, gpu %.3f s ref %.3f s\n",
			   ok ? "ok  " : "FAIL", c->name, (long long) n, d, k,
			   c->metric == KM_METRIC_COSINE ? "cos" : "l2",
			   c->init == KM_INIT_EXPLICIT ? "explicit" : c->init == KM_INIT_RANDOM ? "random" : "k-means++",
			   (long long) lab_diff, (long long) size_diff, irel, cdiff, cscale,
			   gr.iterations, rr.iterations, gr.converged, rr.converged, gr.relocated, rr.relocated,
			   gr.best_run, rr.best_run, hc.iter_reports, tg, tr);
		if (!ok)
		{
			failures++;
			fprintf(summary, "FAIL %s: labels diff %lld inertia rel %.2e iters %d/%d\n", c->name,
					(long long) lab_diff, irel, gr.iterations, rr.iterations);
		}
	}
#ifdef WITH_CPU_ENGINE
	{
		km_result	cr;
		km_hooks	ch;
		int64_t		cdl = 0;
		double		cirel;

		memset(&ch, 0, sizeof(ch));
		ch.n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
		cr.centroids = (float *) malloc(sizeof(float) * k * d);
		cr.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
		cr.cluster_inertia = (double *) malloc(sizeof(double) * k);
		cr.labels = (int32_t *) malloc(sizeof(int32_t) * n);
		t0 = now();
		st = km_cpu_engine.fit(&data, &p, &ch, &cr, &err);
		tr = now() - t0;
		if (st != KM_OK)
			printf("     %-28s cpu engine: status %d: %s\n", c->name, st, err.message);
		else
		{
			for (int64_t r = 0; r < n; r++)
				cdl += gr.labels[r] != cr.labels[r];
			cirel = fabs(gr.inertia - cr.inertia) / (fabs(cr.inertia) > 0 ? fabs(cr.inertia) : 1.0);
			/* k-means++ draws D2 in different float arithmetic: report only */
			{
				int			must = c->init != KM_INIT_KMEANSPP;
				int			same_bits = memcmp(&gr.inertia, &cr.inertia, sizeof(double)) == 0;
				int			cbits = 0;
				int64_t		fbits = 0;
				int			ok;

				for (int j = 0; j < k; j++)
					cbits += memcmp(&gr.cluster_inertia[j], &cr.cluster_inertia[j], sizeof(double)) != 0;
				for (int64_t i = 0; i < (int64_t) k * d; i++)
					fbits += memcmp(&gr.centroids[i], &cr.centroids[i], sizeof(float)) != 0;
				/*
				 * the final inertia is order-free on both sides (km_fixsum.h): the
				 * same bits; kind 8's centroids too (exact sums on both sides,
				 * where a double sum would not be)
				 */
				ok = cdl == 0 && cirel <= 1e-5 && gr.iterations == cr.iterations &&
					(cdl != 0 || (same_bits && cbits == 0)) && (c->kind != 8 || fbits == 0);
				printf("%s %-28s vs CPU engine: labels diff %lld, inertia rel %.2e (bits equal %s, clusters differing %d), centroid values differing %lld, iters %d/%d, reloc %d/%d, cpu %.3f s%s\n",
					   ok ? "ok  " : must ? "FAIL" : "note", c->name, (long long) cdl, cirel,
					   same_bits ? "yes" : "NO", cbits, (long long) fbits,
					   gr.iterations, cr.iterations, gr.relocated, cr.relocated, tr,
					   must ? "" : " (k-means++: informative)");
				if (!ok && must)
				{
					failures++;
					fprintf(summary, "FAIL %s vs CPU engine: labels diff %lld inertia rel %.2e\n",
							c->name, (long long) cdl, cirel);
				}
			}
		}
		free(cr.centroids);
		free(cr.sizes);
		free(cr.cluster_inertia);
		free(cr.labels);
	}
#endif
out:
	free(x);
	free(w);
	free(init);
	free(gr.centroids);
	free(gr.sizes);
	free(gr.cluster_inertia);
	free(gr.labels);
	free(rr.centroids);
	free(rr.sizes);
	free(rr.cluster_inertia);
	free(rr.labels);
}

static void
check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
	{
		failures++;
		fprintf(summary, "FAIL %s\n", what);
	}
}

/* assign, map, streaming, determinism, cancel, errors, leaks */
static void
api_checks(void)
{
	const int64_t n = 60000;
	const int	d = 35,
				k = 40;
	float	   *x = generate(n, d, k, 4242, 0);
	float	   *w = gen_weights(n, 4242, 1);
	km_chunk	ch = {x, w, n};
	km_data		data = {d, 1, &ch, n};
	km_error	err;
	km_status	st;
	size_t		free0 = 0,
				free1 = 0,
				total = 0;

	CK(cudaMemGetInfo(&free0, &total));

	for (int metric = 0; metric < 2; metric++)
	{
		const int	cosine = metric == 1;
		float	   *C = (float *) malloc(sizeof(float) * k * d);
		int32_t    *gl = (int32_t *) malloc(sizeof(int32_t) * n);
		int32_t    *rl = (int32_t *) malloc(sizeof(int32_t) * n);
		double	   *gd = (double *) malloc(sizeof(double) * n);
		double	   *rc = (double *) malloc(sizeof(double) * n);
		float	   *xf = ref_rows(x, n, d, cosine);
		int64_t		ldiff = 0,
					ddiff = 0;

		for (int j = 0; j < k; j++)
			for (int i = 0; i < d; i++)
				C[j * d + i] = x[(size_t) (j * 997 % n) * d + i] * (cosine ? 3.0f : 1.0f) + 0.01f * i;
		st = api->engine->assign(&data, C, k, (km_metric) metric, gl, gd, NULL, &err);
		ref_assign(xf, n, d, C, k, cosine, rl, rc);
		for (int64_t r = 0; r < n && st == KM_OK; r++)
		{
			ldiff += gl[r] != rl[r];
			ddiff += gd[r] != (cosine ? rc[r] : sqrt(rc[r]));
		}
		{
			char		msg[200];

			snprintf(msg, sizeof(msg), "assign %s: status %d, labels diff %lld, distances not bit-equal %lld",
					 cosine ? "cos" : "l2", st, (long long) ldiff, (long long) ddiff);
			check(st == KM_OK && ldiff == 0 && ddiff == 0, msg);
		}
		/* map: twice, so the partial must hold twice the sums */
		{
			double	   *sums = (double *) calloc((size_t) k * d, sizeof(double));
			double	   *ws = (double *) calloc(k, sizeof(double));
			int64_t    *cnt = (int64_t *) calloc(k, sizeof(int64_t));
			double	   *in = (double *) calloc(k, sizeof(double));
			km_partial	part = {sums, ws, cnt, in};
			double		maxrel = 0.0;
			int64_t		cdiff = 0;
			char		msg[200];

			st = api->engine->map(&data, C, k, (km_metric) metric, &part, NULL, &err);
			if (st == KM_OK)
				st = api->engine->map(&data, C, k, (km_metric) metric, &part, NULL, &err);
			{
				double	   *rs = (double *) calloc((size_t) k * d, sizeof(double));
				double	   *rw = (double *) calloc(k, sizeof(double));
				int64_t    *rn = (int64_t *) calloc(k, sizeof(int64_t));
				double	   *ri = (double *) calloc(k, sizeof(double));

				for (int64_t r = 0; r < n; r++)
				{
					int			j = rl[r];

					rw[j] += w[r];
					rn[j]++;
					ri[j] += w[r] * rc[r];
					for (int i = 0; i < d; i++)
						rs[(size_t) j * d + i] += (double) w[r] * xf[(size_t) r * d + i];
				}
				for (int j = 0; j < k; j++)
				{
					cdiff += cnt[j] != 2 * rn[j];
					maxrel = std::max(maxrel, fabs(ws[j] - 2 * rw[j]) / (fabs(rw[j]) + 1e-300));
					maxrel = std::max(maxrel, fabs(in[j] - 2 * ri[j]) / (fabs(ri[j]) + 1e-300));
					for (int i = 0; i < d; i++)
						maxrel = std::max(maxrel, fabs(sums[j * d + i] - 2 * rs[j * d + i]) /
										  (fabs(rs[j * d + i]) + 1e-9));
				}
				free(rs);
				free(rw);
				free(rn);
				free(ri);
			}
			snprintf(msg, sizeof(msg), "map %s (twice, added): status %d, counts diff %lld, max rel %.2e",
					 cosine ? "cos" : "l2", st, (long long) cdiff, maxrel);
			check(st == KM_OK && cdiff == 0 && maxrel < 1e-9, msg);
			free(sums);
			free(ws);
			free(cnt);
			free(in);
		}
		free(C);
		free(gl);
		free(rl);
		free(gd);
		free(rc);
		free(xf);
	}

	/* streaming with growth against engine->fit; and determinism */
	for (int metric = 0; metric < 2; metric++)
	{
		km_params	p;
		km_result	a,
					b,
					c;
		km_result  *rs[3] = {&a, &b, &c};
		km_gpu_dataset *ds;
		int64_t		done = 0;
		int			same_ab = 1,
					same_ac = 1;
		char		msg[200];

		p = fit_params(k, 30, KM_INIT_KMEANSPP, (km_metric) metric);
		p.seed = 99;
		p.n_init = 2;
		for (int i = 0; i < 3; i++)
		{
			rs[i]->centroids = (float *) malloc(sizeof(float) * k * d);
			rs[i]->sizes = (int64_t *) malloc(sizeof(int64_t) * k);
			rs[i]->cluster_inertia = (double *) malloc(sizeof(double) * k);
			rs[i]->labels = (int32_t *) malloc(sizeof(int32_t) * n);
		}
		st = api->engine->fit(&data, &p, NULL, &a, &err);
		check(st == KM_OK, "fit for determinism");
		st = api->engine->fit(&data, &p, NULL, &b, &err);
		ds = api->dataset_create(d, 1, 1000, &err);	/* far too few: grows */
		check(ds != NULL, "dataset_create");
		while (ds != NULL && done < n)
		{
			int64_t		room = 0;
			float	   *wb = NULL;
			float	   *xb = api->dataset_stage(ds, &room, &wb, &err);
			int64_t		m = std::min<int64_t>(room, std::min<int64_t>(n - done, 7777));

			if (xb == NULL || wb == NULL)
			{
				check(0, "dataset_stage");
				break;
			}
			memcpy(xb, x + (size_t) done * d, sizeof(float) * m * d);
			memcpy(wb, w + done, sizeof(float) * m);
			if (api->dataset_commit(ds, m, &err) != KM_OK)
			{
				check(0, err.message);
				break;
			}
			done += m;
		}
		check(ds != NULL && api->dataset_rows(ds) == n, "dataset_rows after streaming");
		if (ds != NULL)
		{
			st = api->dataset_fit(ds, &p, NULL, &c, &err);
			check(st == KM_OK, "dataset_fit");
			/* a second fit on the same dataset (cosine must not have changed the rows) */
			st = api->dataset_fit(ds, &p, NULL, &c, &err);
			api->dataset_free(ds);
		}
		same_ab = memcmp(a.centroids, b.centroids, sizeof(float) * k * d) == 0 &&
			memcmp(a.labels, b.labels, sizeof(int32_t) * n) == 0 && a.inertia == b.inertia;
		same_ac = memcmp(a.centroids, c.centroids, sizeof(float) * k * d) == 0 &&
			memcmp(a.labels, c.labels, sizeof(int32_t) * n) == 0 && a.inertia == c.inertia;
		snprintf(msg, sizeof(msg), "%s: two fits bit-identical %d; streamed (grown) dataset, fitted twice, identical %d",
				 metric ? "cos" : "l2", same_ab, same_ac);
		check(same_ab && same_ac, msg);
		for (int i = 0; i < 3; i++)
		{
			free(rs[i]->centroids);
			free(rs[i]->sizes);
			free(rs[i]->cluster_inertia);
			free(rs[i]->labels);
		}
	}

	/* cancellation, seeding and Lloyd (uniform rows: Lloyd is slow to settle) */
	for (int init = 0; init < 2; init++)
	{
		float	   *xu = generate(n, d, k, 555, 1);
		km_chunk	chu = {xu, NULL, n};
		km_data		du = {d, 1, &chu, n};

		km_params	p;
		km_result	r;
		km_hooks	hooks;
		hook_ctx	hc;
		char		msg[160];

		memset(&p, 0, sizeof(p));
		p.k = init == 0 ? 2000 : 30;
		p.max_iter = 100000;
		p.init = init == 0 ? KM_INIT_KMEANSPP : KM_INIT_RANDOM;
		p.n_init = 1;
		memset(&hooks, 0, sizeof(hooks));
		memset(&hc, 0, sizeof(hc));
		hc.stop_after = 2;
		hooks.ctx = &hc;
		hooks.poll = hook_poll;
		r.centroids = (float *) malloc(sizeof(float) * p.k * d);
		r.sizes = (int64_t *) malloc(sizeof(int64_t) * p.k);
		r.cluster_inertia = (double *) malloc(sizeof(double) * p.k);
		r.labels = NULL;
		st = api->engine->fit(&du, &p, &hooks, &r, &err);
		free(xu);
		snprintf(msg, sizeof(msg), "cancel during %s: status %d (%s)",
				 init == 0 ? "k-means++" : "Lloyd", st, err.message);
		check(st == KM_ERR_CANCELLED, msg);
		free(r.centroids);
		free(r.sizes);
		free(r.cluster_inertia);
	}

	/* invalid input and out of memory */
	{
		km_params	p;
		km_result	r;

		memset(&p, 0, sizeof(p));
		memset(&r, 0, sizeof(r));
		p.k = (int) n + 1;
		p.max_iter = 10;
		p.n_init = 1;
		st = api->engine->fit(&data, &p, NULL, &r, &err);
		check(st == KM_ERR_INVALID, "k > n is KM_ERR_INVALID");
		{
			km_gpu_dataset *ds = api->dataset_create(4096, 0, (int64_t) 1 << 34, &err);
			char		msg[300];

			snprintf(msg, sizeof(msg), "a 256 TB dataset is KM_ERR_DEVICE_NOMEM: %d (%s)",
					 err.status, err.message);
			check(ds == NULL && err.status == KM_ERR_DEVICE_NOMEM, msg);
		}
	}

	CK(cudaMemGetInfo(&free1, &total));
	{
		char		msg[160];

		snprintf(msg, sizeof(msg), "device memory after the API checks: %.1f MB less free than before",
				 ((double) free0 - (double) free1) / 1e6);
		check(free1 + (8 << 20) >= free0, msg);
	}
	free(x);
	free(w);
}


/* ---- k-means++ seeding: the seeds themselves ---- */

/* A GPU fit's KM_PHASE_SEED reports: (seeds done, potential) of each, in order. */
typedef std::vector<std::pair<int64_t, double>> seed_reports;

/* hooks->report for gpu_seeds */
static int
seed_phi_report(void *ctx, const km_progress *pr)
{
	if (pr->phase == KM_PHASE_SEED)
		((seed_reports *) ctx)->push_back(std::make_pair(pr->done, pr->inertia));
	return 0;
}

/*
 * Whether a fit's seeding reports hold the reference's potentials (phis[m]:
 * m seeds chosen, ref_seeds) bit for bit, every one and the last with all k
 * seeds, with at least one report before the last (the check would
 * otherwise see none of them); *nmid counts those.
 */
static int
seed_reports_ok(const seed_reports &reps, const std::vector<double> &phis, int k, int *nmid)
{
	int			ok = !reps.empty() && reps.back().first == k;

	*nmid = 0;
	for (size_t i = 0; i < reps.size(); i++)
	{
		const int64_t m = reps[i].first;

		if (m < 1 || m > k || memcmp(&reps[i].second, &phis[m], sizeof(double)) != 0)
			ok = 0;
		if (i + 1 < reps.size())
			(*nmid)++;
	}
	return ok && *nmid > 0;
}

/*
 * A GPU fit that stops at the seeds (KMG_SEED_ONLY=1: no Lloyd iteration;
 * the final pass labels the rows for the seeds); env: extra variable to set
 * for this fit (NULL: none).  Returns the status; C (k x d), *inertia and
 * reps, its KM_PHASE_SEED reports, one after every batch of units
 * (KMG_REPORT_INTERVAL=0), the last with k-means++'s potential over all k
 * seeds: each an integer sum of every row's w D2, so it holds each D2 bit
 * for bit where the seeds alone may not (a different rounding of one
 * distance seldom changes a draw).
 */
static km_status
gpu_seeds(const float *x, const float *w, int64_t n, int d, const km_params *p, float *C,
		  double *inertia, seed_reports *reps, const char *env)
{
	km_chunk	ch = {x, w, n};
	km_data		data = {d, 1, &ch, n};
	km_result	r;
	km_error	err;
	km_status	st;
	km_hooks	hk;

	memset(&hk, 0, sizeof(hk));
	hk.ctx = reps;
	hk.report = seed_phi_report;
	reps->clear();

	r.centroids = C;
	r.sizes = (int64_t *) malloc(sizeof(int64_t) * p->k);
	r.cluster_inertia = (double *) malloc(sizeof(double) * p->k);
	r.labels = NULL;
	setenv("KMG_SEED_ONLY", "1", 1);
	setenv("KMG_REPORT_INTERVAL", "0", 1);
	if (env != NULL)
		setenv(env, "1", 1);
	st = api->engine->fit(&data, p, &hk, &r, &err);
	unsetenv("KMG_SEED_ONLY");
	unsetenv("KMG_REPORT_INTERVAL");
	if (env != NULL)
		unsetenv(env);
	if (st != KM_OK)
		printf("     gpu seeds: status %d: %s\n", st, err.message);
	*inertia = r.inertia;
	free(r.sizes);
	free(r.cluster_inertia);
	return st;
}

/*
 * Seeding checks: GPU seeds and potential against the reference's (bit for
 * bit: the last report's and every report's before it), the same twice,
 * with the int8 filter off (KMG_PP_NOSHADOW: every distance computed), and
 * on the rows in another order; then k-means++
 * quality: one Lloyd iteration after the seeds, GPU against the CPU engine
 * (inertia).
 */
static void
seed_checks(void)
{
	struct sc
	{
		const char *name;
		int64_t		n;
		int			d,
					k;
		km_metric	metric;
		int			weighted;
		int			kind;
	}			scs[] = {
		{"blobs d=64 k=256", 100000, 64, 256, KM_METRIC_L2, 0, 0},
		{"uniform d=35 k=200 w0", 60000, 35, 200, KM_METRIC_L2, 2, 1},
		{"blobs+1000 d=16 k=100", 50000, 16, 100, KM_METRIC_L2, 0, 5},
		{"cos d=100 k=100 w", 50000, 100, 100, KM_METRIC_COSINE, 1, 0},
		{"fashion 20000 k=64", 20000, 784, 64, KM_METRIC_L2, 0, 4},
		{"dups 20 rows k=500", 3000, 8, 500, KM_METRIC_L2, 0, 2},
		{"blobs d=256 k=40 w", 30000, 256, 40, KM_METRIC_L2, 1, 0},
	};

	for (size_t ci = 0; ci < sizeof(scs) / sizeof(scs[0]); ci++)
	{
		const struct sc *c = &scs[ci];
		const int64_t n = c->n;
		const int	d = c->d,
					k = c->k;
		float	   *x = generate(n, d, k, 900 + ci, c->kind == 5 ? 0 : c->kind);
		float	   *w = c->weighted ? gen_weights(n, 900 + ci, c->weighted == 2) : NULL;
		float	   *xp = (float *) malloc(sizeof(float) * n * d);
		float	   *wp = w ? (float *) malloc(sizeof(float) * n) : NULL;
		std::vector<float> C1((size_t) k * d), C2((size_t) k * d), C3((size_t) k * d),
					C4((size_t) k * d), CR((size_t) k * d);
		std::vector<int64_t> perm(n);
		km_params	p;
		double		i1 = 0,
					i2 = 0,
					i3 = 0,
					i4 = 0,
					ph[4],		/* the GPU fits' last potentials (gpu_seeds), in the order of C1..C4 */
					t0,
					tg,
					tr;
		int			ok1,
					ok2,
					ok3,
					okr,
					okp,
					okm = 1,
					nmid[4];
		seed_reports reps[4];
		std::vector<double> phis((size_t) k + 1);
		km_status	s1,
					s2,
					s3,
					s4;
		char		msg[600];

		if (c->kind == 5)
			for (int64_t i = 0; i < n * d; i++)
				x[i] += 1000.0f;
		/* a fixed permutation of the rows (Fisher-Yates, fixed stream) */
		{
			uint64_t	rs = 12345 + ci;

			for (int64_t i = 0; i < n; i++)
				perm[i] = i;
			for (int64_t i = n - 1; i > 0; i--)
			{
				int64_t		j = (int64_t) (rng_next(&rs) % (uint64_t) (i + 1));
				int64_t		t = perm[i];

				perm[i] = perm[j];
				perm[j] = t;
			}
			for (int64_t i = 0; i < n; i++)
			{
				memcpy(xp + (size_t) i * d, x + (size_t) perm[i] * d, sizeof(float) * d);
				if (w)
					wp[i] = w[perm[i]];
			}
		}
		memset(&p, 0, sizeof(p));
		p.k = k;
		p.max_iter = 1;
		p.tol = 0.0;
		p.init = KM_INIT_KMEANSPP;
		p.metric = c->metric;
		p.seed = 77 + ci;
		p.n_init = 1;

		t0 = now();
		s1 = gpu_seeds(x, w, n, d, &p, C1.data(), &i1, &reps[0], NULL);
		tg = now() - t0;
		s2 = gpu_seeds(x, w, n, d, &p, C2.data(), &i2, &reps[1], NULL);
		s3 = gpu_seeds(x, w, n, d, &p, C3.data(), &i3, &reps[2], "KMG_PP_NOSHADOW");
		s4 = gpu_seeds(xp, wp, n, d, &p, C4.data(), &i4, &reps[3], NULL);
		t0 = now();
		ref_seeds(x, w, n, d, &p, 0, CR.data(), phis.data());
		tr = now() - t0;
		for (int f = 0; f < 4; f++)
		{
			ph[f] = reps[f].empty() ? -1.0 : reps[f].back().second;
			okm &= seed_reports_ok(reps[f], phis, k, &nmid[f]);
		}
		ok1 = s1 == KM_OK && s2 == KM_OK && memcmp(C1.data(), C2.data(), sizeof(float) * k * d) == 0 &&
			i1 == i2 && memcmp(&ph[0], &ph[1], sizeof(double)) == 0;
		ok2 = s3 == KM_OK && memcmp(C1.data(), C3.data(), sizeof(float) * k * d) == 0 &&
			memcmp(&ph[0], &ph[2], sizeof(double)) == 0;
		ok3 = s4 == KM_OK && memcmp(C1.data(), C4.data(), sizeof(float) * k * d) == 0 &&
			memcmp(&ph[0], &ph[3], sizeof(double)) == 0;
		okr = memcmp(C1.data(), CR.data(), sizeof(float) * k * d) == 0;
		okp = memcmp(&ph[0], &phis[k], sizeof(double)) == 0;
		{
			int			first_diff = -1;

			for (int j = 0; j < k && first_diff < 0; j++)
				if (memcmp(C1.data() + (size_t) j * d, CR.data() + (size_t) j * d, sizeof(float) * d) != 0)
					first_diff = j;
			snprintf(msg, sizeof(msg), "seeds %-24s n=%lld d=%d k=%d: = reference %s (first differing centroid %d), "
					 "potential = reference %s (%.17g, ref %.17g), the %d, %d, %d, %d reports before "
					 "= reference %s, "
					 "twice same %s, filter off same %s, rows permuted same %s; seeded inertia %.6g "
					 "(gpu %.3f s, ref %.3f s)",
					 c->name, (long long) n, d, k, okr ? "yes" : "NO", first_diff,
					 okp ? "yes" : "NO", ph[0], phis[k], nmid[0], nmid[1], nmid[2], nmid[3],
					 okm ? "yes" : "NO",
					 ok1 ? "yes" : "NO", ok2 ? "yes" : "NO", ok3 ? "yes" : "NO", i1, tg, tr);
			check(ok1 && ok2 && ok3 && okr && okp && okm, msg);
		}
#ifdef WITH_CPU_ENGINE
		{
			/* quality: one Lloyd iteration after k-means++, GPU against the CPU engine */
			km_chunk	ch = {x, w, n};
			km_data		data = {d, 1, &ch, n};
			km_result	gr,
						cr;
			km_hooks	hk;
			km_error	err;
			km_status	sg,
						scpu;

			memset(&hk, 0, sizeof(hk));
			hk.n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
			gr.centroids = (float *) malloc(sizeof(float) * k * d);
			gr.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
			gr.cluster_inertia = (double *) malloc(sizeof(double) * k);
			gr.labels = NULL;
			cr.centroids = (float *) malloc(sizeof(float) * k * d);
			cr.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
			cr.cluster_inertia = (double *) malloc(sizeof(double) * k);
			cr.labels = NULL;
			sg = api->engine->fit(&data, &p, NULL, &gr, &err);
			scpu = km_cpu_engine.fit(&data, &p, &hk, &cr, &err);
			{
				/* both 0 (as many distinct rows as clusters) is a perfect seeding, not a failure */
				const int	ran = sg == KM_OK && scpu == KM_OK;
				const int	zero = ran && cr.inertia == 0.0 && gr.inertia == 0.0;
				const double ratio = ran && cr.inertia > 0 ? gr.inertia / cr.inertia : 0.0;

				snprintf(msg, sizeof(msg), "k-means++ quality %-24s: inertia after 1 iteration gpu %.6g, cpu engine %.6g, ratio %.4f (<= 1.05; both 0 passes)",
						 c->name, gr.inertia, cr.inertia, ratio);
				check(ran && (zero || (ratio > 0.0 && ratio <= 1.05)), msg);
			}
			free(gr.centroids);
			free(gr.sizes);
			free(gr.cluster_inertia);
			free(cr.centroids);
			free(cr.sizes);
			free(cr.cluster_inertia);
		}
#endif
		fflush(stdout);
		free(x);
		free(w);
		free(xp);
		free(wp);
	}
}

/*
 * The tensor-core screen's certificate on adversarial data: engine->assign
 * with KMG_SCREEN=fp16, tf32 and fp32, labels and distances against
 * ref_assign (the exact nearest centroid, ties to the lowest index); then
 * fits from the same start with each screen, which must give the same
 * model bit for bit, with labels equal to ref_assign's for the final
 * centroids.
 *	kinds: 0 small integers (exact ties everywhere), 1 every centroid twice,
 *	2 blobs offset by 1e5, 3 blobs scaled to 1e18 (past the screen's range),
 *	4 blobs scaled to 1e-19 (products near the subnormals), 5 blobs,
 *	6 rows at the midpoint of two centroids or on one.
 * The "wide:" cases (128 < dp <= 1016, k <= 16) run the wide pass whatever
 * the screen; they hold any certificate that pass uses to the same data.
 */
static const char *const screens[] = {"fp16", "tf32", "fp32"};
#define NSCREENS 3

static void
screen_checks(void)
{
	struct sc
	{
		const char *name;
		int64_t		n;
		int			d,
					k;
		int			cosine;
		int			kind;
	}			cs[] = {
		{"small integers, exact ties", 200000, 64, 512, 0, 0},
		{"every centroid twice", 100000, 32, 256, 0, 1},
		{"blobs offset by 1e5", 100000, 128, 512, 0, 2},
		{"blobs scaled to 1e18", 20000, 16, 64, 0, 3},
		{"blobs scaled to 1e-19", 20000, 16, 64, 0, 4},
		{"d = 1", 200000, 1, 200, 0, 5},
		{"d = 4096", 5000, 4096, 100, 0, 5},
		{"blobs d=256 k=1024", 100000, 256, 1024, 0, 5},
		{"blobs d=408 k=5000", 30000, 408, 5000, 0, 5},
		{"cosine blobs d=256 k=300", 50000, 256, 300, 1, 5},
		{"midpoints of two centroids", 100000, 128, 1024, 0, 6},
		/* the wide pass (128 < dp <= 1016, k <= 16): its own TF32 certificate */
		{"wide: small integers, exact ties", 100000, 200, 10, 0, 0},
		{"wide: every centroid twice", 50000, 256, 16, 0, 1},
		{"wide: blobs offset by 1e5", 50000, 784, 10, 0, 2},
		{"wide: blobs scaled to 1e18", 20000, 200, 12, 0, 3},
		{"wide: blobs scaled to 1e-19", 20000, 200, 12, 0, 4},
		{"wide: midpoints of two centroids", 50000, 784, 16, 0, 6},
		{"wide: cosine blobs d=300 k=8", 30000, 300, 8, 1, 5},
	};
	const char *prev = getenv("KMG_SCREEN");
	char	   *saved = prev != NULL ? strdup(prev) : NULL;

	for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++)
	{
		const struct sc *c = &cs[ci];
		const int64_t n = c->n;
		const int	d = c->d,
					k = c->k;
		float	   *x = generate(n, d, k, 5150 + ci, 0);
		std::vector<float> C((size_t) k * d);
		uint64_t	rs = 777 + ci;

		if (c->kind == 0)
		{
			for (int64_t i = 0; i < n * d; i++)
				x[i] = (float) ((int) (rng_next(&rs) % 7) - 3);
			for (size_t i = 0; i < C.size(); i++)
				C[i] = (float) ((int) (rng_next(&rs) % 7) - 3);
		}
		else
		{
			const float scale = c->kind == 3 ? 1e17f : c->kind == 4 ? 1e-20f : 1.0f;
			const float shift = c->kind == 2 ? 1e5f : 0.0f;

			for (int64_t i = 0; i < n * d; i++)
				x[i] = x[i] * scale + shift;
			for (int j = 0; j < k; j++)
			{
				const int	src = c->kind == 1 ? j / 2 : j;

				for (int i = 0; i < d; i++)
					C[(size_t) j * d + i] = x[(size_t) ((int64_t) src * 997 % n) * d + i] +
						(c->kind == 1 ? 0.0f : 0.01f * scale * (float) (i % 5));
			}
			if (c->kind == 6)
				for (int64_t r = 0; r < n; r++)
				{
					const int	a = (int) (rng_next(&rs) % k),
								b = (int) (rng_next(&rs) % k);
					const int	on = r % 5 == 0;

					for (int i = 0; i < d; i++)
						x[(size_t) r * d + i] = on ? C[(size_t) a * d + i] :
							0.5f * (C[(size_t) a * d + i] + C[(size_t) b * d + i]);
				}
		}

		{
			km_chunk	ch = {x, NULL, n};
			km_data		data = {d, 1, &ch, n};
			float	   *xf = ref_rows(x, n, d, c->cosine);
			std::vector<int32_t> rl(n), gl(n);
			std::vector<double> rc(n), gd(n);

			ref_assign(xf, n, d, C.data(), k, c->cosine, rl.data(), rc.data());
			for (int sc = 0; sc < NSCREENS; sc++)
			{
				km_error	err;
				km_status	st;
				int64_t		ldiff = 0,
							ddiff = 0;
				char		msg[300];

				setenv("KMG_SCREEN", screens[sc], 1);
				st = api->engine->assign(&data, C.data(), k,
										 c->cosine ? KM_METRIC_COSINE : KM_METRIC_L2,
										 gl.data(), gd.data(), NULL, &err);
				for (int64_t r = 0; r < n && st == KM_OK; r++)
				{
					ldiff += gl[r] != rl[r];
					ddiff += gd[r] != (c->cosine ? rc[r] : sqrt(rc[r]));
				}
				snprintf(msg, sizeof(msg), "screen %s: assign %-30s n=%lld d=%d k=%d: status %d, "
						 "labels diff %lld, distances not bit-equal %lld",
						 screens[sc], c->name, (long long) n, d, k, st,
						 (long long) ldiff, (long long) ddiff);
				check(st == KM_OK && ldiff == 0 && ddiff == 0, msg);
			}
			free(xf);
		}

		{
			/* fits from C with each screen: the same model, labels exact for its centroids */
			km_chunk	ch = {x, NULL, n};
			km_data		data = {d, 1, &ch, n};
			km_params	p;
			km_result	r[NSCREENS];
			km_status	st[NSCREENS];
			km_error	err;
			char		msg[400];
			float	   *xf = ref_rows(x, n, d, c->cosine);
			std::vector<int32_t> fl(n);

			p = fit_params(k, 6, KM_INIT_EXPLICIT, c->cosine ? KM_METRIC_COSINE : KM_METRIC_L2);
			p.init_centroids = C.data();
			for (int sc = 0; sc < NSCREENS; sc++)
			{
				setenv("KMG_SCREEN", screens[sc], 1);
				result_alloc(&r[sc], n, d, k);
				st[sc] = api->engine->fit(&data, &p, NULL, &r[sc], &err);
			}
			for (int sc = 1; sc < NSCREENS; sc++)
			{
				char		what[200];
				const int	same = same_model(&r[0], &r[sc], n, d, k, what, sizeof(what));

				snprintf(msg, sizeof(msg), "screen %s = %s: fit %-30s: status %d %d, %s", screens[0],
						 screens[sc], c->name, st[0], st[sc], what);
				check(st[0] == KM_OK && st[sc] == KM_OK && same, msg);
			}
			if (st[0] == KM_OK)
			{
				int64_t		ldiff = 0;

				ref_assign(xf, n, d, r[0].centroids, k, c->cosine, fl.data(), NULL);
				for (int64_t i = 0; i < n; i++)
					ldiff += fl[i] != r[0].labels[i];
				snprintf(msg, sizeof(msg), "screen %s: fit %-30s: final labels against ref_assign of "
						 "its centroids: diff %lld", screens[0], c->name, (long long) ldiff);
				check(ldiff == 0, msg);
			}
			for (int sc = 0; sc < NSCREENS; sc++)
				result_free(&r[sc]);
			free(xf);
		}
		fflush(stdout);
		free(x);
	}
	if (saved != NULL)
	{
		setenv("KMG_SCREEN", saved, 1);
		free(saved);
	}
	else
		unsetenv("KMG_SCREEN");
}

static std::vector<vcase> cases = {
		{"tiny d=2 k++", 1000, 2, 5, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 100, 0.0, 1, 0, 1},
		{"d=3 cos random weights", 5000, 3, 8, KM_METRIC_COSINE, 1, KM_INIT_RANDOM, 100, 0.0, 1, 0, 2},
		{"d=10 empties (far init)", 20000, 10, 16, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 50, 0.0, 1, 3, 3},
		{"d=10 cos empties", 20000, 10, 12, KM_METRIC_COSINE, 0, KM_INIT_EXPLICIT, 50, 0.0, 1, 3, 4},
		{"k == n d=35", 100, 35, 100, KM_METRIC_L2, 0, KM_INIT_RANDOM, 20, 0.0, 1, 0, 5},
		{"d=35 k=40 filter w0", 10000, 35, 40, KM_METRIC_L2, 2, KM_INIT_KMEANSPP, 40, 0.0, 1, 0, 6},
		{"d=784 k=10 direct", 20000, 784, 10, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 30, 0.0, 1, 0, 7},
		{"d=784 k=10 cos", 20000, 784, 10, KM_METRIC_COSINE, 1, KM_INIT_RANDOM, 30, 0.0, 1, 0, 8},
		{"1M d=3 k=5", 1000000, 3, 5, KM_METRIC_L2, 0, KM_INIT_RANDOM, 20, 0.0, 1, 0, 9},
		{"d=256 k=1024", 50000, 256, 1024, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 4, 0.0, 1, 0, 10},
		{"d=408 k=3000", 12000, 408, 3000, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 3, 0.0, 1, 0, 11},
		{"d=128 k=256 tol", 200000, 128, 256, KM_METRIC_L2, 1, KM_INIT_EXPLICIT, 10, 1e-3, 1, 0, 12},
		{"k == n d=8 k=3000", 3000, 8, 3000, KM_METRIC_L2, 0, KM_INIT_RANDOM, 10, 0.0, 1, 0, 13},
		{"n_init=3 d=16 k=20", 8000, 16, 20, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 50, 0.0, 3, 0, 14},
		{"dups k++ fallback", 500, 4, 30, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 20, 0.0, 1, 2, 15},
		{"d=256 cos k=300", 20000, 256, 300, KM_METRIC_COSINE, 0, KM_INIT_KMEANSPP, 8, 0.0, 1, 0, 16},
		{"uniform d=8 k=16", 200000, 8, 16, KM_METRIC_L2, 0, KM_INIT_RANDOM, 40, 0.0, 1, 1, 17},
		{"d=2 k=2 weights0", 100, 2, 2, KM_METRIC_L2, 2, KM_INIT_KMEANSPP, 50, 0.0, 2, 0, 18},
		{"d=784 k=32 filter", 5000, 784, 32, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 10, 0.0, 1, 0, 19},
		{"d=128 k=5000 cos", 20000, 128, 5000, KM_METRIC_COSINE, 0, KM_INIT_RANDOM, 3, 0.0, 1, 0, 20},
		{"d=50 k=24 weights", 30000, 50, 24, KM_METRIC_L2, 1, KM_INIT_KMEANSPP, 30, 0.0, 1, 0, 21},
		{"d=100 k=7 cos uniform", 40000, 100, 7, KM_METRIC_COSINE, 0, KM_INIT_RANDOM, 25, 0.0, 1, 1, 22},
		{"d=32 k=32 uniform", 100000, 32, 32, KM_METRIC_L2, 0, KM_INIT_RANDOM, 25, 0.0, 1, 1, 23},
		/* this round: the wide pass centred and ambiguous-heavy, Fashion-MNIST, more narrow/wide */
		{"uniform d=784 k=10", 20000, 784, 10, KM_METRIC_L2, 0, KM_INIT_RANDOM, 20, 0.0, 1, 1, 24},
		{"fashion 70000 k=10 explicit", 70000, 784, 10, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 40, 0.0, 1, 4, 25},
		{"fashion 20000 k=16 k++ w", 20000, 784, 16, KM_METRIC_L2, 1, KM_INIT_KMEANSPP, 30, 0.0, 1, 4, 26},
		{"d=200 k=3 weights0", 30000, 200, 3, KM_METRIC_L2, 2, KM_INIT_RANDOM, 30, 0.0, 1, 0, 27},
		{"d=24 k=32 uniform w", 50000, 24, 32, KM_METRIC_L2, 1, KM_INIT_RANDOM, 30, 0.0, 1, 1, 28},
		{"d=300 k=12 cos empties", 10000, 300, 12, KM_METRIC_COSINE, 0, KM_INIT_EXPLICIT, 30, 0.0, 1, 3, 29},
		{"d=8 k=16 blobs+1000", 300000, 8, 16, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 30, 0.0, 1, 5, 30},
		/* k-means++ on the device: long enough for the int8 filter and its lists */
		{"k++ d=64 k=300 weights", 80000, 64, 300, KM_METRIC_L2, 1, KM_INIT_KMEANSPP, 5, 0.0, 1, 0, 31},
		{"k++ d=128 k=64 n_init=2", 60000, 128, 64, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 8, 0.0, 2, 0, 32},
		/* the screen with bounds and running sums through re-seeds (update/running.cu rebuilds) */
		{"d=40 k=64 empties (far init) bounds", 30000, 40, 64, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 40, 0.0, 1, 3, 33},
		{"d=40 k=64 empties weights0 bounds", 30000, 40, 64, KM_METRIC_L2, 2, KM_INIT_EXPLICIT, 40, 0.0, 1, 3, 34},
		/* rows of bytes (assign/bytes.cu): ties at the start, close pairs, centroids outside 0..255 */
		{"bytes d=200 k=15 ties", 30000, 200, 15, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 40, 0.0, 1, 6, 35},
		{"bytes d=130 k=9 far init", 20000, 130, 9, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 40, 0.0, 1, 7, 36},
		{"bytes d=784 k=12 random", 25000, 784, 12, KM_METRIC_L2, 0, KM_INIT_RANDOM, 30, 0.0, 1, 6, 37},
		{"bytes d=800 k=2 k++ n_init=2", 9000, 800, 2, KM_METRIC_L2, 0, KM_INIT_KMEANSPP, 30, 0.0, 2, 6, 38},
		{"bytes d=300 k=8 weights (floats)", 20000, 300, 8, KM_METRIC_L2, 1, KM_INIT_RANDOM, 30, 0.0, 1, 6, 39},
		{"bytes d=160 k=16 (floats)", 20000, 160, 16, KM_METRIC_L2, 0, KM_INIT_RANDOM, 30, 0.0, 1, 6, 40},
		/*
		 * the end for k > 64 (update/finalize.cu, a warp a cluster): k not a
		 * multiple of its four clusters a block, a lane's columns past 512,
		 * re-seeds; cosine with weights
		 */
		{"d=600 k=67 empties (far init)", 20000, 600, 67, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 30, 0.0, 1, 3, 41},
		{"d=70 k=130 cos weights", 20000, 70, 130, KM_METRIC_COSINE, 1, KM_INIT_KMEANSPP, 10, 0.0, 1, 0, 42},
		/*
		 * the narrow pass's exact running sums (assign/narrow.cu): re-seeds
		 * restart them (a rebuild pass); giants whose double sums would lose
		 * the rest, at dp 8 and 16
		 */
		{"d=8 k=12 empties (far init)", 200000, 8, 12, KM_METRIC_L2, 0, KM_INIT_EXPLICIT, 60, 0.0, 1, 3, 43},
		{"d=6 k=1 cancelling giants", 100000, 6, 1, KM_METRIC_L2, 0, KM_INIT_RANDOM, 10, 0.0, 1, 8, 44},
		{"d=12 k=1 cancelling giants", 100000, 12, 1, KM_METRIC_L2, 0, KM_INIT_RANDOM, 30, 0.0, 1, 8, 45},
};

static void
validate(int quick)
{
	for (size_t i = 0; i < cases.size(); i++)
	{
		if (quick && cases[i].n * (int64_t) cases[i].k * cases[i].d > (int64_t) 2e9)
			continue;
		run_case(&cases[i]);
		fflush(stdout);
	}
	api_checks();
}

/* ---- benchmark ---- */

typedef struct cublas_fns
{
	int			(*create) (void **);
	int			(*destroy) (void *);
	int			(*set_math) (void *, int);
	int			(*sgemm) (void *, int, int, int, int, int, const float *, const float *, int,
						  const float *, int, const float *, float *, int);
} cublas_fns;

static int
load_cublas(cublas_fns *f)
{
	const char *names[] = {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13",
	"libcublas.so.12", NULL};
	void	   *h = NULL;

	for (int i = 0; names[i] != NULL && h == NULL; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL)
		return 0;
	f->create = (int (*) (void **)) dlsym(h, "cublasCreate_v2");
	f->destroy = (int (*) (void *)) dlsym(h, "cublasDestroy_v2");
	f->set_math = (int (*) (void *, int)) dlsym(h, "cublasSetMathMode");
	f->sgemm = (int (*) (void *, int, int, int, int, int, const float *, const float *, int,
						 const float *, int, const float *, float *, int)) dlsym(h, "cublasSgemm_v2");
	return f->create && f->destroy && f->set_math && f->sgemm;
}

/* Median time of SGEMM (n x d)(d x k) -> n x k, fp32 without TF32. */
static double
sgemm_ms(const cublas_fns *cb, int64_t n, int d, int k)
{
	float	   *A,
			   *B,
			   *Cm;
	void	   *h = NULL;
	cudaEvent_t e0,
				e1;
	std::vector<double> t;
	const float one = 1.0f,
				zero = 0.0f;

	CK(cudaMalloc(&A, sizeof(float) * n * d));
	CK(cudaMalloc(&B, sizeof(float) * (size_t) k * d));
	CK(cudaMalloc(&Cm, sizeof(float) * n * k));
	CK(cudaMemset(A, 0x3c, sizeof(float) * n * d));	/* ~0.01: not zeros */
	CK(cudaMemset(B, 0x3d, sizeof(float) * (size_t) k * d));
	cb->create(&h);
	cb->set_math(h, 0);			/* CUBLAS_DEFAULT_MATH: fp32, no TF32 */
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int it = 0; it < 8; it++)
	{
		float		ms = 0;

		CK(cudaEventRecord(e0, 0));
		/* column-major: C^T (k x n) = B (k x d as d x k, transposed) * A^T */
		cb->sgemm(h, 1 /* T */ , 0 /* N */ , k, (int) n, d, &one, B, d, A, d, &zero, Cm, k);
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (it >= 2)
			t.push_back(ms);
	}
	std::sort(t.begin(), t.end());
	cb->destroy(h);
	CK(cudaFree(A));
	CK(cudaFree(B));
	CK(cudaFree(Cm));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return t[t.size() / 2];
}

/* Seconds of one fit into r (labels when r->labels); a failure counted, as "FAIL what fit: ...". */
static double
timed_fit(km_gpu_dataset *ds, km_params *p, km_result *r, const char *what)
{
	km_error	err;
	const double t0 = now();
	const km_status st = api->dataset_fit(ds, p, NULL, r, &err);
	const double t = now() - t0;

	if (st != KM_OK)
	{
		printf("FAIL %s fit: %s\n", what, err.message);
		failures++;
	}
	return t;
}

/* A dataset holding the n rows of x (d floats each), streamed as a scan would; NULL on failure. */
static km_gpu_dataset *
dataset_of(const float *x, int64_t n, int d, km_error *err)
{
	km_gpu_dataset *ds = api->dataset_create(d, 0, n, err);

	for (int64_t done = 0; ds != NULL && done < n;)
	{
		int64_t		room = 0;
		float	   *xb = api->dataset_stage(ds, &room, NULL, err);
		int64_t		m = std::min(room, n - done);

		memcpy(xb, x + (size_t) done * d, sizeof(float) * m * d);
		api->dataset_commit(ds, m, err);
		done += m;
	}
	return ds;
}

static double
fit_seconds(km_gpu_dataset *ds, km_params *p, int d, int max_iter, int *iters)
{
	km_result	r;
	double		t;

	r.centroids = (float *) malloc(sizeof(float) * p->k * d);
	r.sizes = (int64_t *) malloc(sizeof(int64_t) * p->k);
	r.cluster_inertia = (double *) malloc(sizeof(double) * p->k);
	r.labels = NULL;
	p->max_iter = max_iter;
	t = timed_fit(ds, p, &r, "bench");
	*iters = r.iterations;
	free(r.centroids);
	free(r.sizes);
	free(r.cluster_inertia);
	return t;
}


/*
 * k-means++ seeding time at (1000000, 128, 1024), blobs (SEEDBENCH_KIND=1:
 * uniform rows, the in-database benchmark's): a fit with k-means++ minus
 * one with explicit init, same max_iter (1), best of three each; then the
 * same with the int8 filter off (every distance computed), whose seeds
 * must be the same bits.
 */
static void
seed_bench(void)
{
	const int64_t n = 1000000;
	const int	d = 128,
				k = 1024;
	/* SEEDBENCH_KIND=1: uniform rows (the in-database benchmark's), else blobs */
	const int	kind = getenv("SEEDBENCH_KIND") != NULL && atoi(getenv("SEEDBENCH_KIND")) == 1 ? 1 : 0;
	float	   *x = generate(n, d, k, 4321, kind);
	float	   *init = (float *) malloc(sizeof(float) * k * d);
	km_error	err;
	km_gpu_dataset *ds = dataset_of(x, n, d, &err);
	km_params	p;
	double		tpp = 1e30,
				tex = 1e30,
				tdn = 1e30;
	int			it = 0,
				same = 0;
	char		line[400];

	if (ds == NULL)
	{
		printf("FAIL seed bench dataset_create: %s\n", err.message);
		failures++;
		free(x);
		free(init);
		return;
	}
	for (int j = 0; j < k; j++)
		memcpy(init + (size_t) j * d, x + (size_t) ((int64_t) j * 977 % n) * d, sizeof(float) * d);
	memset(&p, 0, sizeof(p));
	p.k = k;
	p.tol = 0.0;
	p.metric = KM_METRIC_L2;
	p.n_init = 1;
	p.seed = 2024;
	for (int rep = 0; rep < 3; rep++)
	{
		p.init = KM_INIT_KMEANSPP;
		p.init_centroids = NULL;
		tpp = std::min(tpp, fit_seconds(ds, &p, d, 1, &it));
		p.init = KM_INIT_EXPLICIT;
		p.init_centroids = init;
		tex = std::min(tex, fit_seconds(ds, &p, d, 1, &it));
	}
	p.init = KM_INIT_KMEANSPP;
	p.init_centroids = NULL;
	setenv("KMG_PP_NOSHADOW", "1", 1);
	for (int rep = 0; rep < 2; rep++)
		tdn = std::min(tdn, fit_seconds(ds, &p, d, 1, &it));
	unsetenv("KMG_PP_NOSHADOW");
	{
		/* the seeds with and without the filter: one Lloyd iteration from each, same bits */
		km_result	a,
					b;

		a.centroids = (float *) malloc(sizeof(float) * k * d);
		a.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
		a.cluster_inertia = (double *) malloc(sizeof(double) * k);
		a.labels = NULL;
		b.centroids = (float *) malloc(sizeof(float) * k * d);
		b.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
		b.cluster_inertia = (double *) malloc(sizeof(double) * k);
		b.labels = NULL;
		p.max_iter = 1;
		setenv("KMG_VERBOSE", "1", 1);
		fprintf(stderr, "== trace: k-means++ (1000000,128,1024), the filter on\n");
		km_status	s1 = api->dataset_fit(ds, &p, NULL, &a, &err);

		setenv("KMG_PP_NOSHADOW", "1", 1);
		fprintf(stderr, "== trace: k-means++ (1000000,128,1024), the filter off\n");
		km_status	s2 = api->dataset_fit(ds, &p, NULL, &b, &err);

		unsetenv("KMG_PP_NOSHADOW");
		unsetenv("KMG_VERBOSE");
		same = s1 == KM_OK && s2 == KM_OK &&
			memcmp(a.centroids, b.centroids, sizeof(float) * k * d) == 0 && a.inertia == b.inertia;
		free(a.centroids);
		free(a.sizes);
		free(a.cluster_inertia);
		free(b.centroids);
		free(b.sizes);
		free(b.cluster_inertia);
	}
	api->dataset_free(ds);
	snprintf(line, sizeof(line),
			 "seeding (1000000,128,1024) %s: k-means++ %.1f ms = %.1f us a step (fit %.1f - explicit %.1f ms); "
			 "filter off: %.1f ms = %.1f us a step; same seeds %s",
			 kind ? "unif" : "blob", 1e3 * (tpp - tex), 1e6 * (tpp - tex) / (k - 1), 1e3 * tpp, 1e3 * tex,
			 1e3 * (tdn - tex), 1e6 * (tdn - tex) / (k - 1), same ? "yes" : "NO");
	printf("%s\n", line);
	fprintf(summary, "%s\n", line);
	if (!same)
		failures++;
	fflush(stdout);
	free(x);
	free(init);
}


/* One k-means++ fit at (1000000, 128, 1024), for a profiler to look at (seedprof). */
static void
seed_profile(void)
{
	const int64_t n = 1000000;
	const int	d = 128,
				k = 1024;
	float	   *x = generate(n, d, k, 4321, 0);
	km_chunk	ch = {x, NULL, n};
	km_data		data = {d, 1, &ch, n};
	km_params	p;
	km_result	r;
	km_error	err;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = 1;
	p.init = KM_INIT_KMEANSPP;
	p.metric = KM_METRIC_L2;
	p.n_init = 1;
	p.seed = 2024;
	r.centroids = (float *) malloc(sizeof(float) * k * d);
	r.sizes = (int64_t *) malloc(sizeof(int64_t) * k);
	r.cluster_inertia = (double *) malloc(sizeof(double) * k);
	r.labels = NULL;
	if (api->engine->fit(&data, &p, NULL, &r, &err) != KM_OK)
	{
		printf("FAIL seedprof fit: %s\n", err.message);
		failures++;
	}
	free(r.centroids);
	free(r.sizes);
	free(r.cluster_inertia);
	free(x);
}

static void
bench(void)
{
	struct shape
	{
		int64_t		n;
		int			d,
					k;
		int			n1,
					n2;
		double		target;		/* ratio, or absolute microseconds when < 0 */
		int			kind;		/* 0: blobs + noise (kmeans_bench.c), 1: uniform, 4: Fashion-MNIST */
	}			shapes[] = {
		{100000, 256, 1024, 3, 13, 1.2, 0},
		{300000, 408, 5000, 2, 6, 1.2, 0},
		{2000000, 128, 1024, 2, 6, 1.2, 0},
		{1000000, 8, 16, 5, 45, -30, 0},
		{1000000, 8, 16, 5, 45, -30, 1},
		{70000, 784, 10, 1, 4, -100, 0},
		{70000, 784, 10, 5, 45, -100, 1},
		{70000, 784, 10, 3, 23, -100, 4},
		{10000000, 96, 256, 2, 6, 1.2, 0},
		/* the in-database benchmark's rows (test/gpu/db_benchmark.py): no clusters */
		{1000000, 128, 1024, 2, 6, 1.2, 1},
	};
	cublas_fns	cb;
	int			have_cublas = load_cublas(&cb);

	/* whole iterations against the GEMM: no row skipped by bounds (bounds_bench times those) */
	setenv("KMG_BOUNDS", "0", 1);
	printf("\n%-22s %12s %12s %8s %10s %5s %9s  %s\n", "shape (n,d,k)", "iter (us)", "sgemm (us)",
		   "ratio", "target", "met", "upload", "iters");
	fprintf(summary, "\nper-iteration time (explicit init, tol 0, data on the GPU), SGEMM strict fp32\n");
	/* BENCH_SHAPES=m: the first m shapes only (the large-k ones are 3) */
	const size_t nshapes = getenv("BENCH_SHAPES") != NULL ?
		std::min(sizeof(shapes) / sizeof(shapes[0]), (size_t) atoi(getenv("BENCH_SHAPES"))) :
		sizeof(shapes) / sizeof(shapes[0]);

	for (size_t s = 0; s < nshapes; s++)
	{
		/* BENCH_ONLY=i: shape i alone (profiling) */
		if (getenv("BENCH_ONLY") != NULL && atoi(getenv("BENCH_ONLY")) != (int) s)
			continue;

		/* BENCH_N=m: m rows instead of the shape's (a pass's tiles at other sizes) */
		const int64_t n = getenv("BENCH_N") != NULL && atoll(getenv("BENCH_N")) > 0 ?
			atoll(getenv("BENCH_N")) : shapes[s].n;
		/* BENCH_D=c, BENCH_K=j: c columns, j clusters instead of the shape's (other instances of a pass) */
		const int	d = getenv("BENCH_D") != NULL && atoi(getenv("BENCH_D")) > 0 ?
			atoi(getenv("BENCH_D")) : shapes[s].d,
					k = getenv("BENCH_K") != NULL && atoi(getenv("BENCH_K")) > 0 ?
			atoi(getenv("BENCH_K")) : shapes[s].k;
		/*
		 * BENCH_N2=m: the longer fit runs to m iterations (a fit's set-up,
		 * which varies by some 100 us from fit to fit, then weighs less in
		 * a short iteration's figure)
		 */
		const int	n2 = getenv("BENCH_N2") != NULL && atoi(getenv("BENCH_N2")) > shapes[s].n1 ?
			atoi(getenv("BENCH_N2")) : shapes[s].n2;
		float	   *x = generate(n, d, k, 1234 + s, shapes[s].kind);
		float	   *init = (float *) malloc(sizeof(float) * k * d);
		km_error	err;
		km_gpu_dataset *ds;
		km_params	p;
		double		t0,
					up,
					best1 = 1e30,
					best2 = 1e30,
					per,
					gm = 0;
		int			i1 = 0,
					i2 = 0;
		char		line[300];

		for (int j = 0; j < k; j++)
			memcpy(init + (size_t) j * d, x + (size_t) ((int64_t) j * 977 % n) * d, sizeof(float) * d);
		t0 = now();
		ds = dataset_of(x, n, d, &err);
		if (ds == NULL)
		{
			printf("FAIL dataset_create: %s\n", err.message);
			failures++;
			continue;
		}
		up = now() - t0;
		memset(&p, 0, sizeof(p));
		p.k = k;
		p.tol = 0.0;
		p.init = KM_INIT_EXPLICIT;
		p.init_centroids = init;
		p.metric = KM_METRIC_L2;
		p.n_init = 1;
		for (int rep = 0; rep < 3; rep++)
		{
			best1 = std::min(best1, fit_seconds(ds, &p, d, shapes[s].n1, &i1));
			best2 = std::min(best2, fit_seconds(ds, &p, d, n2, &i2));
		}
		per = (best2 - best1) / (i2 - i1 > 0 ? i2 - i1 : 1);
		if (getenv("BENCH_VERBOSE") != NULL)
		{
			/* one more fit with the engine's per-batch trace (KMG_VERBOSE) on stderr */
			fprintf(stderr, "== trace (%lld,%d,%d) kind %d, max_iter %d\n", (long long) n, d, k,
					shapes[s].kind, n2);
			setenv("KMG_VERBOSE", "1", 1);
			(void) fit_seconds(ds, &p, d, n2, &i2);
			unsetenv("KMG_VERBOSE");
		}
		api->dataset_free(ds);
		if (have_cublas)
			gm = sgemm_ms(&cb, n, d, k) * 1e-3;
		{
			const char *kname = shapes[s].kind == 4 ? " fmni" : shapes[s].kind ? " unif" : " blob";
			const int	met = shapes[s].target > 0 ? (gm > 0 && per / gm <= shapes[s].target)
				: per * 1e6 <= -shapes[s].target;

			if (shapes[s].target > 0)
				snprintf(line, sizeof(line), "(%lld,%d,%d)%s %12.1f %12.1f %8.3f %10s %5s %7.1fGB/s  %d-%d",
						 (long long) n, d, k, kname, per * 1e6, gm * 1e6, gm > 0 ? per / gm : 0.0,
						 "<= 1.2x", met ? "yes" : "NO", (double) n * d * 4 / up / 1e9, i1, i2);
			else
				snprintf(line, sizeof(line), "(%lld,%d,%d)%s %12.1f %12.1f %8.3f %7.0f us %5s %7.1fGB/s  %d-%d",
						 (long long) n, d, k, kname, per * 1e6, gm * 1e6,
						 gm > 0 ? per / gm : 0.0, -shapes[s].target, met ? "yes" : "NO",
						 (double) n * d * 4 / up / 1e9, i1, i2);
		}
		printf("%s\n", line);
		fprintf(summary, "%s\n", line);
		fflush(stdout);
		free(x);
		free(init);
	}
	unsetenv("KMG_BOUNDS");
}

/*
 * BOUNDS_DUMP=dir: a shape's rows and seeds as raw float32 (dir/NAME.x, n x
 * d; dir/NAME.seeds, k x d), for bounds_model.py --data to fit the same
 * data from the same seeds.
 */
static void
dump_fit_input(const char *dir, const char *name, const float *x, int64_t n, int d, const float *seeds, int k)
{
	const struct
	{
		const char *ext;
		const float *v;
		size_t		count;
	}			f[] = {{"x", x, (size_t) n * d}, {"seeds", seeds, (size_t) k * d}};

	for (const auto &e : f)
	{
		char		path[1024];
		FILE	   *fp;

		snprintf(path, sizeof(path), "%s/%s.%s", dir, name, e.ext);
		if ((fp = fopen(path, "wb")) == NULL || fwrite(e.v, sizeof(float), e.count, fp) != e.count ||
			fclose(fp) != 0)
		{
			fprintf(stderr, "BOUNDS_DUMP: cannot write %s\n", path);
			exit(3);
		}
	}
}

/*
 * Whole fits with and without the bounds that skip rows (assign/bounds.cu):
 * blobs as bench makes them, k-means++ seeds (taken once, KMG_SEED_ONLY),
 * then from those seeds tol 1e-4, max_iter 300, with KMG_BOUNDS=0, with
 * bounds, and with KMG_BOUNDS=0 KMG_RUNNING=0 (every row sorted and summed
 * every iteration, no running sums), twice each, rows uploaded once.  The
 * three models must be the same bit for bit.  The iterations' time: a
 * fit's time less its fixed part, fixed = T(max_iter 1, no bounds) - one
 * full iteration, a full iteration being (T(off) - T(max_iter 1)) /
 * (iterations - 1), each with and without running sums; every fit timed
 * returns its labels, so their copy to the host (tens of ms at 10M rows)
 * is in the fixed part of each.  Prints the time with bounds over
 * iterations x the full iteration (the target: at most 0.4), and over the
 * full iterations that sum every row.
 * BOUNDS_SHAPES=m: the first m shapes (=CF: shapes C and F); KMG_VERBOSE=1 in the environment
 * traces the bounded fit (rows screened per iteration); BOUNDS_DUMP=dir writes each shape's rows
 * and seeds (dump_fit_input).
 */
static void
bounds_bench(void)
{
	struct shape
	{
		const char *name;
		int64_t		n;
		int			d,
					k;
	}			shapes[] = {
		{"A", 100000, 256, 1024},
		{"C", 2000000, 128, 1024},
		{"B", 300000, 408, 5000},
		{"F", 10000000, 96, 256},
	};
	const char *only = getenv("BOUNDS_SHAPES");
	const int	letters = only != NULL && only[0] >= 'A' && only[0] <= 'Z';
	const size_t nshapes = only != NULL && !letters ?
		std::min(sizeof(shapes) / sizeof(shapes[0]), (size_t) atoi(only)) :
		sizeof(shapes) / sizeof(shapes[0]);
	const char *verbose = getenv("KMG_VERBOSE");
	char	   *vsaved = verbose != NULL ? strdup(verbose) : NULL;

	unsetenv("KMG_VERBOSE");
	printf("\nwhole fits, k-means++ seeds, tol 1e-4, max_iter 300: iterations' time with bounds "
		   "against iterations x a full iteration\n");
	for (size_t s = 0; s < nshapes; s++)
	{
		const struct shape *sh = &shapes[s];

		if (letters && strchr(only, sh->name[0]) == NULL)
			continue;

		float	   *x = generate(sh->n, sh->d, sh->k, 4321 + s, 0);
		km_error	err;
		km_gpu_dataset *ds = dataset_of(x, sh->n, sh->d, &err);
		km_params	p;
		km_result	r[3];
		double		tb[3] = {1e30, 1e30, 1e30},	/* without bounds, with, without and every row summed */
					t1[2] = {1e30, 1e30};	/* max_iter 1, without bounds: running sums, every row summed */
		char		msg[400],
					label[40];

		snprintf(label, sizeof(label), "bounds %s:", sh->name);
		if (ds == NULL)
		{
			printf("FAIL bounds %s: dataset: %s\n", sh->name, err.message);
			failures++;
			free(x);
			continue;
		}
		memset(&p, 0, sizeof(p));
		p.k = sh->k;
		p.tol = 1e-4;
		p.max_iter = 300;
		p.init = KM_INIT_KMEANSPP;
		p.metric = KM_METRIC_L2;
		p.n_init = 1;
		p.seed = 7;
		/* the seeds once */
		result_alloc(&r[0], sh->n, sh->d, sh->k);
		setenv("KMG_SEED_ONLY", "1", 1);
		if (api->dataset_fit(ds, &p, NULL, &r[0], &err) != KM_OK)
		{
			printf("FAIL bounds %s: seeding: %s\n", sh->name, err.message);
			failures++;
		}
		unsetenv("KMG_SEED_ONLY");
		std::vector<float> seeds(r[0].centroids, r[0].centroids + (size_t) sh->k * sh->d);

		result_free(&r[0]);
		if (getenv("BOUNDS_DUMP") != NULL)
			dump_fit_input(getenv("BOUNDS_DUMP"), sh->name, x, sh->n, sh->d, seeds.data(), sh->k);
		p.init = KM_INIT_EXPLICIT;
		p.init_centroids = seeds.data();
		for (int rep = 0; rep < 2; rep++)
			for (int b = 0; b < 3; b++)
			{
				setenv("KMG_BOUNDS", b == 1 ? "1" : "0", 1);
				if (b == 2)
					setenv("KMG_RUNNING", "0", 1);
				if (rep == 1 && b == 1 && vsaved != NULL)
				{
					setenv("KMG_VERBOSE", vsaved, 1);
					fprintf(stderr, "== trace: bounds %s (%lld,%d,%d)\n", sh->name, (long long) sh->n,
							sh->d, sh->k);
				}
				if (rep == 1)
					result_free(&r[b]);
				result_alloc(&r[b], sh->n, sh->d, sh->k);
				p.max_iter = 300;
				tb[b] = std::min(tb[b], timed_fit(ds, &p, &r[b], label));
				unsetenv("KMG_VERBOSE");
				unsetenv("KMG_RUNNING");
			}
		/* with labels, as the fits above: their copy to the host is part of the fixed time */
		setenv("KMG_BOUNDS", "0", 1);
		p.max_iter = 1;
		for (int rep = 0; rep < 2; rep++)
			for (int all = 0; all < 2; all++)
			{
				km_result	r1;

				if (all)
					setenv("KMG_RUNNING", "0", 1);
				result_alloc(&r1, sh->n, sh->d, sh->k);
				t1[all] = std::min(t1[all], timed_fit(ds, &p, &r1, label));
				result_free(&r1);
				unsetenv("KMG_RUNNING");
			}
		unsetenv("KMG_BOUNDS");
		for (int b = 1; b < 3; b++)
		{
			char		what[200];
			const int	same = same_model(&r[0], &r[b], sh->n, sh->d, sh->k, what, sizeof(what));

			snprintf(msg, sizeof(msg), "bounds %s (%lld,%d,%d): the same model %s: %s",
					 sh->name, (long long) sh->n, sh->d, sh->k,
					 b == 1 ? "with and without bounds" : "with and without running sums", what);
			check(same, msg);
		}
		{
			const int	it = r[0].iterations;
			/* a whole iteration and the fixed part of a fit, each way of summing */
			const double full = it > 1 ? (tb[0] - t1[0]) / (it - 1) : 0.0,
						fullall = it > 1 ? (tb[2] - t1[1]) / (it - 1) : 0.0;
			const double on = tb[1] - (t1[0] - full),
						off = tb[0] - (t1[0] - full),
						offall = tb[2] - (t1[1] - fullall);
			char		line[400];

			snprintf(line, sizeof(line), "bounds %s (%lld,%d,%d): %d iterations; full iteration %.3f ms "
					 "(every row summed: %.3f); iterations' time without bounds %.1f ms (every row summed: "
					 "%.1f), with %.1f ms: ratio %.3f (target <= 0.4; %.3f of every row summed)",
					 sh->name, (long long) sh->n, sh->d, sh->k, it, 1e3 * full, 1e3 * fullall, 1e3 * off,
					 1e3 * offall, 1e3 * on, off > 0 ? on / off : 0.0, offall > 0 ? on / offall : 0.0);
			printf("%s\n", line);
			fprintf(summary, "%s\n", line);
		}
		for (int b = 0; b < 3; b++)
			result_free(&r[b]);
		api->dataset_free(ds);
		free(x);
		fflush(stdout);
	}
	if (vsaved != NULL)
	{
		setenv("KMG_VERBOSE", vsaved, 1);
		free(vsaved);
	}
}

/* ---- split fits (driver/split.cu): several devices, out of core, half precision ---- */

#ifdef WITH_CPU_ENGINE
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* A layout from a device list such as "0,0". */
static km_gpu_layout
split_layout(const char *devs, uint64_t limit, km_storage storage, int out_of_core)
{
	km_gpu_layout L;
	const char *s = devs;

	memset(&L, 0, sizeof(L));
	while (*s && L.ndevices < KM_GPU_MAX_DEVICES)
	{
		L.devices[L.ndevices++] = atoi(s);
		while (*s && *s != ',')
			s++;
		if (*s == ',')
			s++;
	}
	L.memory_limit = limit;
	L.storage = storage;
	L.out_of_core = out_of_core;
	return L;
}

/* Every value rounded to the storage's precision, as the SQL layer reads rows. */
static void
split_round(float *x, size_t nv, km_storage storage)
{
	for (size_t i = 0; i < nv; i++)
		x[i] = storage == KM_STORAGE_FLOAT16 ? __half2float(__float2half_rn(x[i])) :
			storage == KM_STORAGE_BFLOAT16 ? __bfloat162float(__float2bfloat16_rn(x[i])) : x[i];
}

/*
 * The smallest memory limit (in MB) with which the layout plans the rows
 * out of core, so that a fit takes many steps.
 */
static uint64_t
split_tight_limit(int64_t n, int d, int k, km_metric metric, int weighted, km_gpu_layout L)
{
	km_gpu_split sp;
	km_error	err;

	for (uint64_t mb = 33; mb < 65536; mb++)
	{
		L.memory_limit = mb << 20;
		if (api->split_plan(n, d, k, metric, weighted, &L, &sp, &err) == KM_OK)
			return L.memory_limit;
	}
	return 0;
}

typedef struct scase
{
	const char *name;
	int64_t		n;
	int			d;
	int			k;
	km_metric	metric;
	int			weighted;		/* 1: weights, 2: with zeros */
	int			kind;			/* generate()'s; 3: blobs and far start centroids (empties) */
	km_storage	storage;
	int			max_iter;
	double		tol;
} scase;

/*
 * One case: the CPU engine's fit from explicit start centroids against the
 * split fit of the same rows and start under several layouts (in memory and
 * out of core, one logical device and several: devs, and devs twice); each
 * must be the same model bit for bit.  The one-device GPU fit (engine->fit)
 * is compared too, for information.
 */
static void
split_case(const scase *c, const char *devs)
{
	const int64_t n = c->n;
	const int	d = c->d,
				k = c->k;
	float	   *x = generate(n, d, k, 991 + n + d + k, c->kind == 3 ? 0 : c->kind);
	float	   *w = c->weighted ? gen_weights(n, 17 + k, c->weighted == 2) : NULL;
	float	   *init = (float *) malloc(sizeof(float) * k * d);
	km_chunk	chunks[3];
	km_data		data;
	km_params	p;
	km_hooks	hooks;
	km_result	cr,
				sr;
	km_error	err;
	char		why[400],
				two[64];
	double		t0,
				tc;

	split_round(x, (size_t) n * d, c->storage);
	for (int j = 0; j < k; j++)
		for (int i = 0; i < d; i++)
			init[(size_t) j * d + i] = c->kind == 3 && j % 3 == 1 ? 1000.0f + (float) j
				: x[(size_t) ((j * 7919) % n) * d + i];
	chunks[0].x = x;
	chunks[0].w = w;
	chunks[0].n = n / 3;
	chunks[1].x = x + (size_t) (n / 3) * d;
	chunks[1].w = w ? w + n / 3 : NULL;
	chunks[1].n = n / 2 - n / 3;
	chunks[2].x = x + (size_t) (n / 2) * d;
	chunks[2].w = w ? w + n / 2 : NULL;
	chunks[2].n = n - n / 2;
	data.d = d;
	data.nchunks = 3;
	data.chunks = chunks;
	data.n = n;
	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = c->max_iter;
	p.tol = c->tol;
	p.init = KM_INIT_EXPLICIT;
	p.init_centroids = init;
	p.metric = c->metric;
	p.n_init = 1;
	memset(&hooks, 0, sizeof(hooks));
	hooks.n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);

	result_alloc(&cr, n, d, k);
	result_alloc(&sr, n, d, k);
	t0 = now();
	if (km_cpu_engine.fit(&data, &p, &hooks, &cr, &err) != KM_OK)
	{
		printf("FAIL %-26s cpu engine: %s\n", c->name, err.message);
		failures++;
		goto out;
	}
	tc = now() - t0;
	snprintf(two, sizeof(two), "%s,%s", devs, devs);
	for (int v = 0; v < 4; v++)
	{
		const int	ooc = v >= 2;
		km_gpu_layout L = split_layout(v % 2 ? two : devs, 0, c->storage, ooc);
		km_status	st;
		double		ts;
		int			ok;

		if (ooc)
			L.memory_limit = split_tight_limit(n, d, k, c->metric, w != NULL, L);
		t0 = now();
		st = api->split_fit(&data, &p, &L, NULL, &sr, &err);
		ts = now() - t0;
		if (st != KM_OK)
		{
			printf("FAIL %-26s split %s%s: status %d: %s\n", c->name, v % 2 ? two : devs,
				   ooc ? " out of core" : "", st, err.message);
			fprintf(summary, "FAIL split %s: %s\n", c->name, err.message);
			failures++;
			continue;
		}
		ok = same_model(&sr, &cr, n, d, k, why, sizeof(why));
		printf("%s %-26s n=%lld d=%d k=%d %s%s %s, devices %s%s (limit %llu MB): %s; split %.3f s, cpu %.3f s\n",
			   ok ? "ok  " : "FAIL", c->name, (long long) n, d, k,
			   c->metric == KM_METRIC_COSINE ? "cos" : "l2", w ? " weighted" : "",
			   c->storage == KM_STORAGE_FLOAT16 ? "float16" : c->storage == KM_STORAGE_BFLOAT16 ? "bfloat16" : "float32",
			   v % 2 ? two : devs, ooc ? " out of core" : " in memory",
			   (unsigned long long) (L.memory_limit >> 20), why, ts, tc);
		if (!ok)
		{
			failures++;
			fprintf(summary, "FAIL split %s devices %s%s: %s\n", c->name, v % 2 ? two : devs,
					ooc ? " out of core" : "", why);
		}
		fflush(stdout);
	}
	if (c->storage == KM_STORAGE_FLOAT32)
	{
		/* the one-device fit sums in double in row order: equal wherever those sums are exact */
		if (api->engine->fit(&data, &p, NULL, &sr, &err) == KM_OK)
			printf("%s %-26s one-device GPU fit against the CPU engine: %s\n",
				   same_model(&sr, &cr, n, d, k, why, sizeof(why)) ? "ok  " : "note", c->name, why);
	}
out:
	result_free(&cr);
	result_free(&sr);
	free(x);
	free(w);
	free(init);
}

/* Free device memory of every device, summed. */
static uint64_t
split_free_memory(void)
{
	int			count = 0;
	uint64_t	total = 0;

	cudaGetDeviceCount(&count);
	for (int i = 0; i < count; i++)
	{
		km_gpu_device dev;
		km_error	err;

		if (api->device_info(i, &dev, &err) == KM_OK)
			total += dev.free_bytes;
	}
	return total;
}

/* The checks around the split fits: refusals, cancellation, memory, labels. */
static void
split_checks(const char *devs)
{
	const int64_t n = 30000;
	const int	d = 24,
				k = 20;
	float	   *x = generate(n, d, k, 5, 0);
	float	   *init = (float *) malloc(sizeof(float) * k * d);
	km_chunk	ch = {x, NULL, n};
	km_data		data = {d, 1, &ch, n};
	km_params	p;
	km_result	r;
	km_error	err;
	km_gpu_layout L;
	km_gpu_split plan;
	hook_ctx	hc;
	km_hooks	hooks;
	uint64_t	before,
				after;
	int32_t    *l1 = (int32_t *) malloc(sizeof(int32_t) * n),
			   *l2 = (int32_t *) malloc(sizeof(int32_t) * n);
	char		two[64];

	snprintf(two, sizeof(two), "%s,%s", devs, devs);
	for (int j = 0; j < k; j++)
		memcpy(init + (size_t) j * d, x + (size_t) (j * 101) * d, sizeof(float) * d);
	memset(&p, 0, sizeof(p));
	p.k = k;
	p.max_iter = 50;
	p.init = KM_INIT_EXPLICIT;
	p.init_centroids = init;
	p.n_init = 1;
	result_alloc(&r, n, d, k);

	/* float16 storage of values it cannot hold: refused, naming a row */
	L = split_layout(devs, 0, KM_STORAGE_FLOAT16, 0);
	check(api->split_fit(&data, &p, &L, NULL, &r, &err) == KM_ERR_INVALID &&
		  strstr(err.message, "float16") != NULL, "split: unrounded rows refused for float16");
	/* a device that does not exist */
	L = split_layout("0,99", 0, KM_STORAGE_FLOAT32, 0);
	check(api->split_fit(&data, &p, &L, NULL, &r, &err) == KM_ERR_INVALID,
		  "split: a device that does not exist is refused");
	/* not explicit */
	L = split_layout(devs, 0, KM_STORAGE_FLOAT32, 0);
	p.init = KM_INIT_KMEANSPP;
	check(api->split_fit(&data, &p, &L, NULL, &r, &err) == KM_ERR_INVALID,
		  "split: only explicit start centroids");
	p.init = KM_INIT_EXPLICIT;
	/* too little memory for anything */
	L = split_layout(devs, (uint64_t) 1 << 20, KM_STORAGE_FLOAT32, 1);
	check(api->split_plan(n, d, k, KM_METRIC_L2, 0, &L, &plan, &err) == KM_ERR_DEVICE_NOMEM &&
		  plan.device_bytes[0] > plan.budget[0], "split: a plan over the limit says so, with figures");
	/* cancellation in every layout; device memory back afterwards */
	for (int v = 0; v < 3; v++)
	{
		char		what[200];

		L = split_layout(v == 1 ? two : devs, 0, v == 2 ? KM_STORAGE_BFLOAT16 : KM_STORAGE_FLOAT32,
						 v == 2);
		if (v == 2)
		{
			split_round(x, (size_t) n * d, KM_STORAGE_BFLOAT16);
			L.memory_limit = split_tight_limit(n, d, k, KM_METRIC_L2, 0, L);
		}
		memset(&hc, 0, sizeof(hc));
		hc.stop_after = 5;
		memset(&hooks, 0, sizeof(hooks));
		hooks.ctx = &hc;
		hooks.poll = hook_poll;
		before = split_free_memory();
		p.tol = 0.0;
		p.max_iter = 1000;
		{
			const km_status st = api->split_fit(&data, &p, &L, &hooks, &r, &err);

			after = split_free_memory();
			snprintf(what, sizeof(what), "split: cancel (%s%s) stops the fit (status %d) and frees the device (%lld bytes)",
					 v == 1 ? "devices twice" : "one device", v == 2 ? ", out of core, bfloat16" : "",
					 st, (long long) before - (long long) after);
			check(st == KM_ERR_CANCELLED && after >= before, what);
		}
	}
	/* labels over several devices = labels on one */
	L = split_layout(two, 0, KM_STORAGE_FLOAT32, 0);
	check(api->engine->assign(&data, init, k, KM_METRIC_L2, l1, NULL, NULL, &err) == KM_OK &&
		  api->split_assign(&data, init, k, KM_METRIC_L2, &L, l2, NULL, NULL, &err) == KM_OK &&
		  memcmp(l1, l2, sizeof(int32_t) * n) == 0, "split_assign: the labels of one device");
	result_free(&r);
	free(x);
	free(init);
	free(l1);
	free(l2);
}

static const scase split_cases[] = {
	{"blobs l2", 50000, 64, 100, KM_METRIC_L2, 0, 0, KM_STORAGE_FLOAT32, 100, 0.0},
	{"blobs cosine", 50000, 64, 100, KM_METRIC_COSINE, 0, 0, KM_STORAGE_FLOAT32, 100, 0.0},
	{"weights with zeros, d 33", 40000, 33, 50, KM_METRIC_L2, 2, 0, KM_STORAGE_FLOAT32, 60, 0.0},
	{"narrow: d 8, k 16", 60000, 8, 16, KM_METRIC_L2, 0, 0, KM_STORAGE_FLOAT32, 100, 0.0},
	{"wide: d 200, k 10", 30000, 200, 10, KM_METRIC_L2, 1, 0, KM_STORAGE_FLOAT32, 60, 0.0},
	{"direct: d 40, k 20, cosine", 30000, 40, 20, KM_METRIC_COSINE, 0, 1, KM_STORAGE_FLOAT32, 60, 0.0},
	{"empties re-seeded", 30000, 16, 30, KM_METRIC_L2, 1, 3, KM_STORAGE_FLOAT32, 40, 0.0},
	{"tol 1e-3", 80000, 32, 64, KM_METRIC_L2, 0, 0, KM_STORAGE_FLOAT32, 300, 1e-3},
	{"filter: k 1024", 200000, 128, 1024, KM_METRIC_L2, 0, 0, KM_STORAGE_FLOAT32, 8, 0.0},
	{"float16", 50000, 64, 100, KM_METRIC_L2, 0, 0, KM_STORAGE_FLOAT16, 100, 0.0},
	{"bfloat16 cosine weighted", 40000, 33, 50, KM_METRIC_COSINE, 1, 0, KM_STORAGE_BFLOAT16, 60, 0.0},
	{"float16 empties", 30000, 16, 30, KM_METRIC_L2, 0, 3, KM_STORAGE_FLOAT16, 40, 0.0},
};

/* split: every case under every layout against the CPU engine, then the checks. */
static void
split_validate(void)
{
	const char *devs = getenv("SPLIT_DEVICES") != NULL ? getenv("SPLIT_DEVICES") : "0";

	for (size_t i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++)
		split_case(&split_cases[i], devs);
	split_checks(devs);
}

/* Seconds of a split fit of max_iter iterations (explicit start, tol 0). */
static double
split_seconds(const km_data *data, km_params *p, const km_gpu_layout *L, int max_iter, int *iters)
{
	km_result	r;
	km_error	err;
	double		t0,
				t;

	result_alloc(&r, 1, data->d, p->k);
	free(r.labels);
	r.labels = NULL;
	p->max_iter = max_iter;
	t0 = now();
	if (api->split_fit(data, p, L, NULL, &r, &err) != KM_OK)
	{
		printf("FAIL split bench fit: %s\n", err.message);
		failures++;
	}
	t = now() - t0;
	*iters = r.iterations;
	result_free(&r);
	return t;
}

/*
 * splitbench: per Lloyd iteration, (T(n2) - T(n1)) / (n2 - n1), best of
 * three, of the one-device fit on uploaded rows (the in-memory path) and of
 * split fits: SPLIT_DEVICES (default "0"; a list such as "0,1" spreads the
 * rows over GPUs), in memory and out of core (forced by a limit of the
 * rows' bytes a device), float32 and float16, all from the centroids of ten
 * iterations (so that no path times the early re-seeding); the copy rate,
 * the out-of-core floor max(rows' bytes / copy rate, in-memory iteration)
 * and each ratio to its floor; in memory, the one-device in-memory time
 * over the split's (the speed-up of several devices).  SPLIT_SHAPES=m: the
 * first m shapes; SPLIT_PATHS: which split paths (a mask, see below).
 */
static void
split_bench(void)
{
	struct
	{
		int64_t		n;
		int			d,
					k,
					n1,
					n2;
	}			shapes[] = {
		{1000000, 128, 1024, 2, 6},
		{2000000, 128, 1024, 2, 6},
		{300000, 408, 5000, 2, 4},
		{10000000, 96, 256, 2, 5},
	};
	const char *devs = getenv("SPLIT_DEVICES") != NULL ? getenv("SPLIT_DEVICES") : "0";
	/* SPLIT_PATHS: a mask of the four split paths below (1 f32 in memory, 2 f16 in memory, 4 f32 out of core, 8 f16 out of core) */
	const int	paths = getenv("SPLIT_PATHS") != NULL ? atoi(getenv("SPLIT_PATHS")) : 15;
	const size_t nshapes = getenv("SPLIT_SHAPES") != NULL ?
		std::min(sizeof(shapes) / sizeof(shapes[0]), (size_t) atoi(getenv("SPLIT_SHAPES"))) :
		sizeof(shapes) / sizeof(shapes[0]);
	km_error	err;
	const double rate = api->copy_rate(0, &err);

	printf("\nsplit fits, devices %s: pinned host-to-device copy %.1f GB/s\n", devs, rate / 1e9);
	printf("%-20s %-28s %12s %10s %10s\n", "shape (n,d,k)", "path", "iter (ms)", "floor (ms)",
		   "ratio");
	for (size_t s = 0; s < nshapes; s++)
	{
		const int64_t n = shapes[s].n;
		const int	d = shapes[s].d,
					k = shapes[s].k;
		float	   *x = generate(n, d, k, 77 + s, 0);
		float	   *init = (float *) malloc(sizeof(float) * k * d);
		km_chunk	ch = {x, NULL, n};
		km_data		data = {d, 1, &ch, n};
		km_params	p;
		double		inmem = 0.0;

		for (int j = 0; j < k; j++)
			memcpy(init + (size_t) j * d, x + (size_t) ((int64_t) j * 977 % n) * d, sizeof(float) * d);
		memset(&p, 0, sizeof(p));
		p.k = k;
		p.init = KM_INIT_EXPLICIT;
		p.init_centroids = init;
		p.n_init = 1;
		/* the in-memory one-device path, rows uploaded once */
		{
			km_gpu_dataset *ds = dataset_of(x, n, d, &err);
			double		b1 = 1e30,
						b2 = 1e30;
			int			i1 = 0,
						i2 = 0;

			if (ds != NULL)
			{
				{
					/*
					 * start where ten iterations led, past the early empty
					 * clusters: every path then times plain iterations
					 */
					km_result	r;

					result_alloc(&r, n, d, k);
					p.max_iter = 10;
					if (api->dataset_fit(ds, &p, NULL, &r, &err) == KM_OK)
						memcpy(init, r.centroids, sizeof(float) * k * d);
					result_free(&r);
				}
				for (int rep = 0; rep < 3; rep++)
				{
					b1 = std::min(b1, fit_seconds(ds, &p, d, shapes[s].n1, &i1));
					b2 = std::min(b2, fit_seconds(ds, &p, d, shapes[s].n2, &i2));
				}
				api->dataset_free(ds);
				inmem = (b2 - b1) / (i2 - i1 > 0 ? i2 - i1 : 1);
				printf("(%lld,%d,%d) %-28s %12.3f\n", (long long) n, d, k, "one device, in memory",
					   inmem * 1e3);
			}
			else
				printf("(%lld,%d,%d) one device in memory: %s\n", (long long) n, d, k, err.message);
		}
		for (int v = 0; v < 4; v++)
		{
			const km_storage storage = v % 2 ? KM_STORAGE_FLOAT16 : KM_STORAGE_FLOAT32;
			const int	ooc = v >= 2;
			km_gpu_layout L = split_layout(devs, 0, storage, ooc);
			double		b1 = 1e30,
						b2 = 1e30,
						per,
						floor = 0.0;
			int			i1 = 0,
						i2 = 0;
			char		path[64];

			if (storage != KM_STORAGE_FLOAT32)
				split_round(x, (size_t) n * d, storage);	/* later float32 paths time the same on rounded rows */
			if (!(paths & (1 << v)))
				continue;
			if (ooc)
			{
				/* the rows' bytes a device: they and the fit's working memory cannot stay */
				L.memory_limit = (uint64_t) n * d * (storage == KM_STORAGE_FLOAT32 ? 4 : 2) /
					L.ndevices;
				if (L.memory_limit < ((uint64_t) 256 << 20))
					L.memory_limit = (uint64_t) 256 << 20;
			}
			for (int rep = 0; rep < 3; rep++)
			{
				b1 = std::min(b1, split_seconds(&data, &p, &L, shapes[s].n1, &i1));
				b2 = std::min(b2, split_seconds(&data, &p, &L, shapes[s].n2, &i2));
			}
			per = (b2 - b1) / (i2 - i1 > 0 ? i2 - i1 : 1);
			snprintf(path, sizeof(path), "split %s %s", storage == KM_STORAGE_FLOAT16 ? "f16" : "f32",
					 ooc ? "out of core" : "in memory");
			if (ooc && rate > 0.0)
				floor = std::max((double) n * d * (storage == KM_STORAGE_FLOAT32 ? 4 : 2) / rate / 1.0, inmem);
			printf("(%lld,%d,%d) %-28s %12.3f", (long long) n, d, k, path, per * 1e3);
			if (floor > 0.0)
				printf(" %10.3f %10.3f", floor * 1e3, per / floor);
			else if (inmem > 0.0)
				printf(" %10s %10.3f", "speed-up", inmem / per);
			printf("  (%d-%d iterations, fit of %d: %.3f s)\n", i1, i2, i2, b2);
			fprintf(summary, "split (%lld,%d,%d) %s, devices %s: %.3f ms an iteration%s\n",
					(long long) n, d, k, path, devs, per * 1e3, "");
			if (getenv("BENCH_VERBOSE") != NULL)
			{
				setenv("KMG_VERBOSE", "1", 1);
				(void) split_seconds(&data, &p, &L, shapes[s].n2, &i2);
				unsetenv("KMG_VERBOSE");
			}
			fflush(stdout);
		}
		free(x);
		free(init);
	}
}
#endif

int
main(int argc, char **argv)
{
	const char *so = "kernels/bench/bin/kmeans_gpu_cuda.so";
	int			do_val = 0,
				do_bench = 0,
				do_api = 0,
				do_seed = 0,
				do_seedbench = 0,
				do_seedprof = 0,
				do_split = 0,
				do_splitbench = 0,
				do_screen = 0,
				do_bounds = 0,
				one_case = -1,
				quick = 0;
	void	   *h;
	const km_gpu_api *(*get) (void);

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--so") == 0 && i + 1 < argc)
			so = argv[++i];
		else if (strcmp(argv[i], "validate") == 0)
			do_val = 1;
		else if (strcmp(argv[i], "bench") == 0)
			do_bench = 1;
		else if (strcmp(argv[i], "quick") == 0)
			quick = 1;
		else if (strcmp(argv[i], "api") == 0)
			do_api = 1;
		else if (strcmp(argv[i], "seed") == 0)
			do_seed = 1;
		else if (strcmp(argv[i], "seedbench") == 0)
			do_seedbench = 1;
		else if (strcmp(argv[i], "seedprof") == 0)
			do_seedprof = 1;
		else if (strcmp(argv[i], "split") == 0)
			do_split = 1;
		else if (strcmp(argv[i], "splitbench") == 0)
			do_splitbench = 1;
		else if (strcmp(argv[i], "screen") == 0)
			do_screen = 1;
		else if (strcmp(argv[i], "bounds") == 0)
			do_bounds = 1;
		else if (strcmp(argv[i], "case") == 0 && i + 1 < argc)
			one_case = atoi(argv[++i]);
		else if (strcmp(argv[i], "ncases") == 0)
		{
			printf("%zu\n", cases.size());
			return 0;
		}
	}
	if (!do_val && !do_bench && !do_api && !do_seed && !do_seedbench && !do_seedprof && !do_split &&
		!do_splitbench && !do_screen && !do_bounds && one_case < 0)
		do_val = do_bench = 1;
	summary = tmpfile();
	h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
	{
		fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
		return 2;
	}
	get = (const km_gpu_api *(*) (void)) dlsym(h, "km_gpu_get_api");
	if (get == NULL || (api = get()) == NULL || api->abi != KM_GPU_ABI ||
		api->engine->abi != KM_ENGINE_ABI)
	{
		fprintf(stderr, "no usable km_gpu_get_api in %s\n", so);
		return 2;
	}
	{
		km_error	err;
		km_gpu_device dev;
		int			count = api->device_count(&err);

		if (count < 1 || api->device_info(0, &dev, &err) != KM_OK)
		{
			fprintf(stderr, "no device: %s\n", err.message);
			return 2;
		}
		printf("device 0: %s, cc %d.%d, %d SMs, %.1f GB free of %.1f\n", dev.name, dev.cc_major,
			   dev.cc_minor, dev.multiprocessors, dev.free_bytes / 1e9, dev.total_bytes / 1e9);
	}
	if (do_val)
		validate(quick);
	if (one_case >= 0 && one_case < (int) cases.size())
		run_case(&cases[one_case]);
	if (do_api)
		api_checks();
	if (do_seed)
		seed_checks();
	if (do_screen)
		screen_checks();
	if (do_bounds)
		bounds_bench();
	if (do_seedprof)
		seed_profile();
	if (do_bench || do_seedbench)
		seed_bench();
	if (do_bench)
		bench();
#ifdef WITH_CPU_ENGINE
	if (do_split)
		split_validate();
	if (do_splitbench)
		split_bench();
#else
	if (do_split || do_splitbench)
		printf("FAIL split: built without the CPU engine (WITH_CPU=0)\n"), failures++;
#endif
	api->release_all();

	printf("\n==== summary: %d failure(s) ====\n", failures);
	rewind(summary);
	{
		char		buf[512];

		while (fgets(buf, sizeof(buf), summary) != NULL)
			fputs(buf, stdout);
	}
	return failures == 0 ? 0 : 1;
}
