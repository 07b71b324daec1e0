/*
 * bench_medoids.cu
 *	  The k-medoids kernels (kernels/medoids/) against their C references,
 *	  bit for bit, and their time against the CPU engine.
 *
 *	bin/bench_medoids [validate] [bench]      (both when no argument)
 *
 * The kernels are #included from their production files (one copy of the
 * code) and called through their launchers; the driver is the engine
 * itself, kmeans_gpu_cuda.so, opened with dlopen() as the SQL layer opens
 * it ($KMG_CUDA_SO, default bin/kmeans_gpu_cuda.so); the CPU engine
 * (src/engine/) is linked in, so the references are its own functions:
 *	- rows.cu: every row's aux against kmd_aux;
 *	- assign.cu: labels and distances against kmd_cpu_engine.assign, with
 *	  the medoids in one range and split over blocks (few rows, many
 *	  medoids);
 *	- sums.cu, the score: every member's sum against a loop over kmd_pair()
 *	  in member order (the definition the CPU engine's kernel is tested
 *	  against: test/engine/kmedoids_test.c);
 *	- sums.cu, the silhouette: against kmd_cpu_engine.silhouette;
 *	- whole fits: the CPU engine's fit against seed() + kmd_alternate() on
 *	  the CUDA engine's steps (km_gpu_api, as the SQL layer runs them):
 *	  medoids, labels, sizes, per-cluster costs, cost and iterations;
 * on random blobs and on adversarial data: duplicated rows, integer grids
 * (exact ties of distances and of scores), all rows equal, a large common
 * offset, clusters of one row and one of thousands, k = 1 and k = n, and
 * signatures of 1 to 12 features, permuted features and duplicates, for
 * every metric (l2, sqeuclidean, l1, cosine, sqfd at several alpha).
 * "identical" means memcmp of the doubles: no tolerance.
 *
 * bench: on larger shapes, the median of 5 runs of the assignment kernel,
 * the assignment step (with its transfers), the score kernel and step (all
 * clusters to do) and the silhouette, against the CPU engine with one
 * thread per processor (its assignment and silhouette directly; its score
 * as a round of its alternating loop minus its assignment, from the
 * progress reports), then a whole alternating loop from the same seeds on
 * both engines; prints each time and the ratio, and the GPU kernel's
 * FP64 rate.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <dlfcn.h>

#include "kmg_common.cuh"
#include "medoids/medoids.cuh"
#include "kmd_metric.h"
#include "kmedoids_engine.h"

/* the kernels under test, from their production files */
#include "medoids/rows.cu"
#include "medoids/assign.cu"
#include "medoids/sums.cu"
#include "bench_check.h"

/* The engine's table, from kmeans_gpu_cuda.so (open_engine). */
static const km_gpu_api *engine_api = NULL;
static int	device_sms = 0;

static const km_gpu_api *
km_api(void)
{
	return engine_api;
}

static int	n_checks = 0;
static int	n_failed = 0;

static void
check(bool ok, const char *fmt,...)
{
	va_list		ap;

	n_checks++;
	if (!ok)
		n_failed++;
	printf("%s %d - ", ok ? "ok" : "not ok", n_checks);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* ---- data ---- */

static uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double
unif(uint64_t *s)
{
	*s = mix(*s + 0x9E3779B97F4A7C15ULL);
	return (double) (*s >> 11) * (1.0 / 9007199254740992.0);
}

static double
gauss(uint64_t *s)
{
	double		u = unif(s) + 1e-300;

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * unif(s));
}

/* Host rows in the engine's form. */
typedef struct rows
{
	const char *name;
	int			metric;
	double		alpha;
	int64_t		n;
	int			d;
	std::vector<float> x;
	std::vector<const float *> ptr;
	std::vector<int32_t> nfeat;
	kmd_data	data;
} rows;

static void
rows_finish(rows *r, const std::vector<int64_t> &start)
{
	r->ptr.resize(r->n);
	for (int64_t i = 0; i < r->n; i++)
		r->ptr[i] = r->x.data() + start[i];
	r->data.n = r->n;
	r->data.d = r->d;
	r->data.rows = r->ptr.data();
	r->data.nfeat = r->metric == KMD_SQFD ? r->nfeat.data() : NULL;
}

/*
 * Dense rows: kind 0 blobs around k centres, 1 integer grid (many exact
 * ties), 2 every row a copy of one of dup rows, 3 all rows equal, 4 blobs
 * at a common offset of 1000.
 */
static rows
make_dense(const char *name, int metric, int64_t n, int d, int k, int kind, uint64_t seed)
{
	rows		r;
	std::vector<int64_t> start(n);
	std::vector<double> centres((size_t) k * d);
	const int	dup = 7;

	r.name = name;
	r.metric = metric;
	r.alpha = 1.0;
	r.n = n;
	r.d = d;
	r.x.resize((size_t) n * d);
	for (auto &c : centres)
		c = 10.0 * (unif(&seed) - 0.5);
	for (int64_t i = 0; i < n; i++)
	{
		const int	c = (int) (mix(seed + i) % k);

		start[i] = i * d;
		for (int j = 0; j < d; j++)
		{
			double		v;

			switch (kind)
			{
				case 1:
					v = (double) (int) (4.0 * unif(&seed)) - 1.0;
					break;
				case 2:
					v = (double) ((mix((uint64_t) (i % dup) * 131 + j) % 1000)) / 100.0 - 5.0;
					break;
				case 3:
					v = 0.5 + j;
					break;
				case 4:
					v = 1000.0 + centres[(size_t) c * d + j] + 0.01 * gauss(&seed);
					break;
				default:
					v = centres[(size_t) c * d + j] + gauss(&seed);
			}
			if (metric == KMD_COSINE && j == 0 && v == 0.0)
				v = 1.0;		/* no zero rows for cosine */
			r.x[(size_t) i * d + j] = (float) v;
		}
	}
	rows_finish(&r, start);
	return r;
}

/*
 * Signatures of 1 to maxm features of fd floats (weight, coordinates)
 * around k prototypes; every 5th row repeats an earlier one with its
 * features in another order, every 7th repeats one as it is.
 */
static rows
make_sigs(const char *name, int64_t n, int fd, int maxm, int k, double alpha, uint64_t seed)
{
	rows		r;
	std::vector<int64_t> start(n);

	r.name = name;
	r.metric = KMD_SQFD;
	r.alpha = alpha;
	r.n = n;
	r.d = fd;
	r.nfeat.resize(n);
	for (int64_t i = 0; i < n; i++)
	{
		start[i] = (int64_t) r.x.size();
		if (i >= 10 && i % 7 == 0)
		{
			const int64_t src = (int64_t) (mix(seed + i) % (uint64_t) i);

			r.nfeat[i] = r.nfeat[src];
			for (int64_t q = 0; q < (int64_t) r.nfeat[src] * fd; q++)
				r.x.push_back(r.x[start[src] + q]);
			continue;
		}
		if (i >= 10 && i % 5 == 0)
		{
			const int64_t src = (int64_t) (mix(seed + 3 * i) % (uint64_t) i);
			const int	m = r.nfeat[src];

			r.nfeat[i] = m;
			for (int f = m - 1; f >= 0; f--)
				for (int q = 0; q < fd; q++)
					r.x.push_back(r.x[start[src] + (int64_t) f * fd + q]);
			continue;
		}
		{
			const int	m = 1 + (int) (mix(seed ^ (uint64_t) i) % maxm);
			const double base = (double) (mix(seed + 7 * i) % k);

			r.nfeat[i] = m;
			for (int f = 0; f < m; f++)
			{
				r.x.push_back((float) (0.05 + unif(&seed)));
				for (int q = 1; q < fd; q++)
					r.x.push_back((float) (base + 0.4 * gauss(&seed) + 0.1 * f));
			}
		}
	}
	rows_finish(&r, start);
	return r;
}

/* ---- the CPU engine's hooks: malloc, every processor ---- */

static km_hooks
cpu_hooks(void)
{
	km_hooks	h;

	memset(&h, 0, sizeof(h));
	h.n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
	return h;
}

static double
aux_of(const rows *r, int64_t i)
{
	return kmd_aux(r->metric, r->ptr[i], r->metric == KMD_SQFD ? r->nfeat[i] : 1, r->d, r->alpha);
}

/* The C reference of the score: kmd_pair over the cluster in member order. */
static void
ref_score(const rows *r, const std::vector<double> &aux, const int64_t *members,
		  const int64_t *offsets, int k, std::vector<double> &sums)
{
	sums.assign(r->n, 0.0);
	for (int c = 0; c < k; c++)
		for (int64_t p = offsets[c]; p < offsets[c + 1]; p++)
		{
			const int64_t i = members[p];
			double		s = 0.0;

			for (int64_t q = offsets[c]; q < offsets[c + 1]; q++)
			{
				const int64_t j = members[q];

				if (q != p)
					s += kmd_pair(r->metric, r->ptr[i], r->metric == KMD_SQFD ? r->nfeat[i] : 0,
								  aux[i], r->ptr[j], r->metric == KMD_SQFD ? r->nfeat[j] : 0,
								  aux[j], r->d, r->alpha);
			}
			sums[p] = s;
		}
}

/* members by cluster (counting sort, row order inside a cluster) */
static void
group(const int32_t *labels, int64_t n, int k, std::vector<int64_t> &members,
	  std::vector<int64_t> &offsets)
{
	std::vector<int64_t> fill(k + 1, 0);

	offsets.assign(k + 1, 0);
	for (int64_t i = 0; i < n; i++)
		offsets[labels[i] + 1]++;
	for (int c = 0; c < k; c++)
		offsets[c + 1] += offsets[c];
	fill.assign(offsets.begin(), offsets.end());
	members.resize(n);
	for (int64_t i = 0; i < n; i++)
		members[fill[labels[i]]++] = i;
}

/* Rows on the device for the kernel-level checks. */
typedef struct dev_rows
{
	kmg_kmd_rows R;
	float	   *X;
	int64_t    *off;
	int32_t    *m;
	double	   *aux;
} dev_rows;

static dev_rows
upload(const rows *r)
{
	dev_rows	D;
	std::vector<float> packed;
	std::vector<int64_t> off(r->n);

	memset(&D, 0, sizeof(D));
	for (int64_t i = 0; i < r->n; i++)
	{
		const int64_t len = (int64_t) (r->metric == KMD_SQFD ? r->nfeat[i] : 1) * r->d;

		off[i] = (int64_t) packed.size();
		packed.insert(packed.end(), r->ptr[i], r->ptr[i] + len);
	}
	CK(cudaMalloc(&D.X, sizeof(float) * packed.size()));
	CK(cudaMemcpy(D.X, packed.data(), sizeof(float) * packed.size(), cudaMemcpyHostToDevice));
	CK(cudaMalloc(&D.aux, sizeof(double) * r->n));
	if (r->metric == KMD_SQFD)
	{
		CK(cudaMalloc(&D.off, sizeof(int64_t) * r->n));
		CK(cudaMalloc(&D.m, sizeof(int32_t) * r->n));
		CK(cudaMemcpy(D.off, off.data(), sizeof(int64_t) * r->n, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(D.m, r->nfeat.data(), sizeof(int32_t) * r->n, cudaMemcpyHostToDevice));
	}
	D.R.X = D.X;
	D.R.off = D.off;
	D.R.m = D.m;
	D.R.aux = D.aux;
	D.R.n = r->n;
	D.R.d = r->d;
	D.R.metric = r->metric;
	D.R.alpha = r->alpha;
	CK(kmg_kmd_aux(&D.R, D.aux, 0));
	CK(cudaDeviceSynchronize());
	return D;
}

static void
dev_free(dev_rows *D)
{
	cudaFree(D->X);
	cudaFree(D->off);
	cudaFree(D->m);
	cudaFree(D->aux);
}

static const char *const metric_names[] = {"l2", "sqeuclidean", "l1", "cosine", "sqfd"};

/* k medoids drawn from the rows (distinct) */
static std::vector<int64_t>
pick_medoids(int64_t n, int k, uint64_t seed)
{
	std::vector<int64_t> all(n);
	std::vector<int64_t> med(k);

	for (int64_t i = 0; i < n; i++)
		all[i] = i;
	for (int c = 0; c < k; c++)
	{
		const int64_t j = c + (int64_t) (mix(seed + c) % (uint64_t) (n - c));

		std::swap(all[c], all[j]);
		med[c] = all[c];
	}
	return med;
}

/* The kernels of a data set against their references. */
static void
validate_kernels(const rows *r, int k, uint64_t seed)
{
	dev_rows	D = upload(r);
	const int64_t n = r->n;
	std::vector<double> aux(n),
				gaux(n);
	std::vector<int64_t> med = pick_medoids(n, k, seed);
	std::vector<int32_t> lab(n),
				glab(n),
				med32(k);
	std::vector<double> dist(n),
				gdist(n);
	std::vector<int64_t> members,
				offsets;
	std::vector<double> sums,
				gsums(n);
	kmd_data	mdata;
	std::vector<const float *> mptr(k);
	std::vector<int32_t> mfeat(k);
	km_hooks	h = cpu_hooks();
	km_error	err;
	int32_t    *dmed,
			   *dlab,
			   *dpj,
			   *dmem;
	double	   *ddist,
			   *dpd,
			   *dsums;
	int			bad;

	/* aux */
	for (int64_t i = 0; i < n; i++)
		aux[i] = aux_of(r, i);
	CK(cudaMemcpy(gaux.data(), D.aux, sizeof(double) * n, cudaMemcpyDeviceToHost));
	check(memcmp(aux.data(), gaux.data(), sizeof(double) * n) == 0,
		  "%s (n=%lld, d=%d, %s): aux = kmd_aux bit for bit", r->name, (long long) n, r->d,
		  metric_names[r->metric]);

	/* assign, against the CPU engine's assign */
	for (int c = 0; c < k; c++)
	{
		mptr[c] = r->ptr[med[c]];
		mfeat[c] = r->metric == KMD_SQFD ? r->nfeat[med[c]] : 0;
		med32[c] = (int32_t) med[c];
	}
	mdata.n = k;
	mdata.d = r->d;
	mdata.rows = mptr.data();
	mdata.nfeat = r->metric == KMD_SQFD ? mfeat.data() : NULL;
	memset(&err, 0, sizeof(err));
	if (kmd_cpu_engine.assign(&r->data, &mdata, (kmd_metric) r->metric, r->alpha, lab.data(),
							  dist.data(), &h, &err) != KM_OK)
	{
		check(false, "CPU assign: %s", err.message);
		return;
	}
	CK(cudaMalloc(&dmed, sizeof(int32_t) * k));
	CK(cudaMalloc(&dlab, sizeof(int32_t) * n));
	CK(cudaMalloc(&ddist, sizeof(double) * n));
	CK(cudaMalloc(&dpd, sizeof(double) * 65536));
	CK(cudaMalloc(&dpj, sizeof(int32_t) * 65536));
	CK(cudaMemcpy(dmed, med32.data(), sizeof(int32_t) * k, cudaMemcpyHostToDevice));
	for (int splits = 1; splits <= 3; splits += 2)
	{
		int			used = splits;

		if (splits > 1)
			used = kmg_kmd_assign_splits(n, k, 1 << 20, 65536);	/* as many ranges as allowed */
		if (splits > 1 && used < 2)
			continue;
		CK(cudaMemset(dlab, 0xff, sizeof(int32_t) * n));
		CK(kmg_kmd_assign(&D.R, dmed, k, 0, n, used, dpd, dpj, dlab, ddist, 0));
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(glab.data(), dlab, sizeof(int32_t) * n, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(gdist.data(), ddist, sizeof(double) * n, cudaMemcpyDeviceToHost));
		bad = 0;
		for (int64_t i = 0; i < n; i++)
			bad += glab[i] != lab[i] || memcmp(&gdist[i], &dist[i], sizeof(double)) != 0;
		check(bad == 0, "%s (k=%d, %d medoid range%s): labels and distances = kmd_cpu_engine.assign bit for bit (%d rows differ)",
			  r->name, k, used, used == 1 ? "" : "s", bad);
	}

	/* score, every cluster, against kmd_pair in member order */
	group(lab.data(), n, k, members, offsets);
	ref_score(r, aux, members.data(), offsets.data(), k, sums);
	{
		std::vector<kmg_kmd_item> items;
		std::vector<int32_t> mem32(n);
		kmg_kmd_item *ditems;

		for (int64_t p = 0; p < n; p++)
			mem32[p] = (int32_t) members[p];
		for (int c = 0; c < k; c++)
			for (int64_t p = offsets[c]; p < offsets[c + 1]; p += KMG_KMD_T)
			{
				kmg_kmd_item it;

				it.a0 = (int32_t) p;
				it.na = (int32_t) std::min((int64_t) KMG_KMD_T, offsets[c + 1] - p);
				it.b0 = (int32_t) offsets[c];
				it.b1 = (int32_t) offsets[c + 1];
				items.push_back(it);
			}
		/* in reverse, to show the order of items does not matter */
		std::reverse(items.begin(), items.end());
		CK(cudaMalloc(&dmem, sizeof(int32_t) * n));
		CK(cudaMalloc(&dsums, sizeof(double) * n));
		CK(cudaMalloc(&ditems, sizeof(kmg_kmd_item) * items.size()));
		CK(cudaMemcpy(dmem, mem32.data(), sizeof(int32_t) * n, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(ditems, items.data(), sizeof(kmg_kmd_item) * items.size(), cudaMemcpyHostToDevice));
		CK(kmg_kmd_score(&D.R, dmem, ditems, (int) items.size(), dsums, 0));
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(gsums.data(), dsums, sizeof(double) * n, cudaMemcpyDeviceToHost));
		bad = 0;
		for (int64_t p = 0; p < n; p++)
			bad += memcmp(&gsums[p], &sums[p], sizeof(double)) != 0;
		check(bad == 0, "%s (k=%d, largest cluster %lld): score sums = kmd_pair in member order bit for bit (%d differ)",
			  r->name, k, (long long) [&] {
				  int64_t m = 0;
				  for (int c = 0; c < k; c++) m = std::max(m, offsets[c + 1] - offsets[c]);
				  return m; }(), bad);
		cudaFree(ditems);
		cudaFree(dmem);
		cudaFree(dsums);
	}

	/* silhouette, through the API, against the CPU engine's */
	{
		const km_gpu_api *api = km_api();
		double		mc = 0.0,
					mg = 0.0;
		km_status	sc,
					sg;
		int			nonempty = 0;

		for (int c = 0; c < k; c++)
			nonempty += offsets[c + 1] > offsets[c];
		if (nonempty >= 2 && nonempty < n)
		{
			memset(&err, 0, sizeof(err));
			sc = kmd_cpu_engine.silhouette(&r->data, lab.data(), k, (kmd_metric) r->metric,
										   r->alpha, &mc, &h, &err);
			memset(&err, 0, sizeof(err));
			sg = api->kmd_silhouette(&r->data, lab.data(), k, (kmd_metric) r->metric, r->alpha,
									 &mg, NULL, &err);
			check(sc == KM_OK && sg == KM_OK && memcmp(&mc, &mg, sizeof(double)) == 0,
				  "%s (k=%d): silhouette = kmd_cpu_engine.silhouette bit for bit (%.17g, %.17g%s%s)",
				  r->name, k, mc, mg, sg != KM_OK ? ": " : "", sg != KM_OK ? err.message : "");
		}
	}
	cudaFree(dmed);
	cudaFree(dlab);
	cudaFree(ddist);
	cudaFree(dpd);
	cudaFree(dpj);
	dev_free(&D);
}

/* ---- whole fits ---- */

typedef struct fit_out
{
	km_status	status;
	std::vector<int64_t> medoids,
				sizes;
	std::vector<double> ccost;
	std::vector<int32_t> labels;
	kmd_result	res;
	km_error	err;
	double		seconds;
	double		seed_seconds;
} fit_out;

static void
fit_prepare(fit_out *f, int k, int64_t n)
{
	f->medoids.assign(k, -1);
	f->sizes.assign(k, 0);
	f->ccost.assign(k, 0.0);
	f->labels.assign(n, -1);
	memset(&f->res, 0, sizeof(f->res));
	f->res.medoids = f->medoids.data();
	f->res.sizes = f->sizes.data();
	f->res.cluster_cost = f->ccost.data();
	f->res.labels = f->labels.data();
	memset(&f->err, 0, sizeof(f->err));
}

/* The CPU engine's fit. */
static void
fit_cpu(const rows *r, const kmd_params *p, fit_out *f)
{
	km_hooks	h = cpu_hooks();
	double		t0 = now();

	fit_prepare(f, p->k, r->n);
	f->status = kmd_cpu_engine.fit(&r->data, p, &h, &f->res, &f->err);
	f->seconds = now() - t0;
}

/* As the SQL layer runs it: seed() on the CPU, kmd_alternate on the GPU's steps. */
static void
fit_gpu(const rows *r, const kmd_params *p, fit_out *f)
{
	const km_gpu_api *api = km_api();
	km_hooks	h = cpu_hooks();
	std::vector<int64_t> seeds(p->k);
	km_gpu_kmd *kmd;
	kmd_steps	steps;
	double		t0 = now();

	fit_prepare(f, p->k, r->n);
	f->status = kmd_cpu_engine.seed(&r->data, p, &h, seeds.data(), &f->err);
	f->seed_seconds = now() - t0;
	if (f->status != KM_OK)
		return;
	kmd = api->kmd_open(&r->data, (kmd_metric) p->metric, p->alpha, p->k, &h, &f->err);
	if (kmd == NULL)
	{
		f->status = f->err.status;
		return;
	}
	api->kmd_steps_of(kmd, &steps);
	f->status = kmd_alternate(&steps, &r->data, p, &h, seeds.data(), &f->res, &f->err);
	api->kmd_close(kmd);
	f->seconds = now() - t0;
}

static kmd_params
params_for(const rows *r, int k, km_init init, uint64_t seed, int max_iter)
{
	kmd_params	p;

	memset(&p, 0, sizeof(p));
	p.k = k;
	p.metric = (kmd_metric) r->metric;
	p.method = KMD_ALTERNATE;
	p.max_iter = max_iter;
	p.init = init;
	p.seed = seed;
	p.alpha = r->alpha;
	p.chain_length = 50;
	return p;
}

static void
validate_fit(const rows *r, int k, km_init init, uint64_t seed)
{
	kmd_params	p = params_for(r, k, init, seed, 100);
	fit_out		c,
				g;

	fit_cpu(r, &p, &c);
	fit_gpu(r, &p, &g);
	check(c.status == KM_OK && g.status == KM_OK && c.medoids == g.medoids &&
		  c.labels == g.labels && c.sizes == g.sizes &&
		  memcmp(c.ccost.data(), g.ccost.data(), sizeof(double) * k) == 0 &&
		  memcmp(&c.res.cost, &g.res.cost, sizeof(double)) == 0 &&
		  c.res.iterations == g.res.iterations && c.res.converged == g.res.converged &&
		  c.res.swaps == g.res.swaps,
		  "%s (n=%lld, d=%d, %s, k=%d): fit on the GPU's steps = the CPU engine's fit bit for bit (%d rounds, cost %.17g / %.17g%s%s)",
		  r->name, (long long) r->n, r->d, metric_names[r->metric], k, g.res.iterations,
		  c.res.cost, g.res.cost, g.status != KM_OK ? ": " : "", g.status != KM_OK ? g.err.message : "");
}

static void
validate(void)
{
	const km_gpu_api *api = km_api();
	km_error	err;

	memset(&err, 0, sizeof(err));
	if (api->set_device(0, &err) != KM_OK)
	{
		check(false, "device 0: %s", err.message);
		return;
	}
	for (int metric = KMD_L2; metric <= KMD_COSINE; metric++)
	{
		rows		blobs = make_dense("blobs", metric, 3000, 13, 7, 0, 1 + metric);
		rows		wide = make_dense("blobs", metric, 700, 200, 5, 0, 11 + metric);
		rows		grid = make_dense("integer grid", metric, 2000, 3, 4, 1, 21 + metric);
		rows		dups = make_dense("duplicates", metric, 1500, 9, 3, 2, 31 + metric);
		rows		same = make_dense("all rows equal", metric, 300, 5, 1, 3, 41 + metric);
		rows		offs = make_dense("offset 1000", metric, 2500, 16, 6, 4, 51 + metric);
		rows		tiny = make_dense("d = 1", metric, 500, 1, 3, 0, 61 + metric);

		validate_kernels(&blobs, 7, 3);
		validate_kernels(&blobs, 150, 4);		/* medoid ranges over blocks */
		validate_kernels(&wide, 5, 5);
		validate_kernels(&grid, 9, 6);
		validate_kernels(&dups, 4, 7);
		validate_kernels(&same, 3, 8);
		validate_kernels(&offs, 6, 9);
		validate_kernels(&tiny, 2, 10);
		validate_kernels(&blobs, 1, 11);

		validate_fit(&blobs, 7, KM_INIT_KMEANSPP, 1);
		validate_fit(&blobs, 40, KM_INIT_RANDOM, 2);
		validate_fit(&wide, 5, KM_INIT_AFKMC2, 3);
		validate_fit(&grid, 9, KM_INIT_KMEANSPP, 4);
		validate_fit(&dups, 4, KM_INIT_RANDOM, 5);
		validate_fit(&same, 3, KM_INIT_KMEANSPP, 6);
		validate_fit(&offs, 6, KM_INIT_KMEANSPP, 7);
		validate_fit(&tiny, 2, KM_INIT_KMEANSPP, 8);
		validate_fit(&blobs, 1, KM_INIT_KMEANSPP, 9);
		{
			rows		few = make_dense("k = n", metric, 70, 4, 3, 0, 71 + metric);

			validate_fit(&few, 70, KM_INIT_RANDOM, 10);
			validate_kernels(&few, 70, 12);
		}
	}
	/* one cluster of thousands beside clusters of one row */
	{
		rows		skew = make_dense("skewed clusters", KMD_L2, 5000, 8, 1, 0, 81);

		for (int i = 0; i < 20; i++)
			for (int j = 0; j < 8; j++)
				skew.x[(size_t) i * 8 + j] = (float) (1000.0 * (i + 1) + j);
		validate_kernels(&skew, 21, 13);
		validate_fit(&skew, 21, KM_INIT_KMEANSPP, 11);
	}
	for (int a = 0; a < 3; a++)
	{
		static const double alphas[] = {0.5, 1.0, 30.0};
		rows		sig = make_sigs("signatures", 1500, 4, 12, 6, alphas[a], 91 + a);
		rows		small = make_sigs("signatures", 200, 3, 3, 4, alphas[a], 101 + a);

		validate_kernels(&sig, 6, 14 + a);
		validate_kernels(&sig, 90, 17 + a);
		validate_kernels(&small, 4, 20 + a);
		validate_fit(&sig, 6, KM_INIT_KMEANSPP, 12 + a);
		validate_fit(&small, 4, KM_INIT_AFKMC2, 15 + a);
	}
	/* the whole fit through the device's memory check, cancel and bad input */
	{
		rows		r = make_dense("blobs", KMD_L2, 1000, 4, 3, 0, 111);

		memset(&err, 0, sizeof(err));
		check(api->kmd_open(&r.data, KMD_METRIC_L2, 1.0, 0, NULL, &err) == NULL &&
			  err.status == KM_ERR_INVALID, "kmd_open refuses k = 0 (%s)", err.message);
		check(api->kmd_device_bytes(&r.data, 3, KMD_METRIC_L2) >= (uint64_t) 1000 * 4 * 4 + 36 * 1000,
			  "kmd_device_bytes counts the rows and the per-row arrays (%llu bytes)",
			  (unsigned long long) api->kmd_device_bytes(&r.data, 3, KMD_METRIC_L2));
	}
}

/* ---- timing ---- */

static double
median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

/* Wall times of the CPU engine's progress reports (its rounds). */
typedef struct report_times
{
	std::vector<double> t;
} report_times;

static int
record_report(void *ctx, const km_progress *p)
{
	if (p->phase == KM_PHASE_ITERATE)
		((report_times *) ctx)->t.push_back(now());
	return 0;
}

static void
bench_shape(const rows *r, int k, int reps)
{
	const km_gpu_api *api = km_api();
	const int64_t n = r->n;
	dev_rows	D = upload(r);
	std::vector<int64_t> med = pick_medoids(n, k, 5);
	std::vector<int32_t> med32(k),
				lab(n),
				glab(n);
	std::vector<double> dist(n),
				gdist(n);
	std::vector<const float *> mptr(k);
	std::vector<int32_t> mfeat(k);
	kmd_data	mdata;
	km_hooks	h = cpu_hooks();
	km_error	err;
	std::vector<double> t_cpu_assign,
				t_kernel_assign,
				t_step_assign,
				t_kernel_score,
				t_step_score,
				t_cpu_sil,
				t_gpu_sil;
	cudaEvent_t e0,
				e1;
	int32_t    *dmed,
			   *dlab,
			   *dpj,
			   *dmem;
	double	   *ddist,
			   *dpd,
			   *dsums;
	std::vector<int64_t> members,
				offsets;
	kmg_kmd_item *ditems;
	std::vector<kmg_kmd_item> items;
	double		pairs_assign = (double) n * k;
	double		pairs_score = 0.0;
	double		work = r->metric == KMD_SQFD ? 0.0 : (double) r->d;
	km_gpu_kmd *kmd;
	kmd_steps	steps;
	int			bad = 0;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int c = 0; c < k; c++)
	{
		mptr[c] = r->ptr[med[c]];
		mfeat[c] = r->metric == KMD_SQFD ? r->nfeat[med[c]] : 0;
		med32[c] = (int32_t) med[c];
	}
	mdata.n = k;
	mdata.d = r->d;
	mdata.rows = mptr.data();
	mdata.nfeat = r->metric == KMD_SQFD ? mfeat.data() : NULL;

	printf("\n%s: n = %lld, d = %d, k = %d, %s, CPU engine on %d threads\n", r->name,
		   (long long) n, r->d, k, metric_names[r->metric], h.n_threads);

	/* the assignment */
	CK(cudaMalloc(&dmed, sizeof(int32_t) * k));
	CK(cudaMalloc(&dlab, sizeof(int32_t) * n));
	CK(cudaMalloc(&ddist, sizeof(double) * n));
	CK(cudaMalloc(&dpd, sizeof(double) * 65536));
	CK(cudaMalloc(&dpj, sizeof(int32_t) * 65536));
	CK(cudaMemcpy(dmed, med32.data(), sizeof(int32_t) * k, cudaMemcpyHostToDevice));
	for (int rep = 0; rep < reps; rep++)
	{
		double		t0 = now();
		const int	splits = kmg_kmd_assign_splits(n, k, device_sms, 65536);
		float		ms;

		memset(&err, 0, sizeof(err));
		if (kmd_cpu_engine.assign(&r->data, &mdata, (kmd_metric) r->metric, r->alpha,
								  lab.data(), dist.data(), &h, &err) != KM_OK)
			printf("CPU assign failed: %s\n", err.message);
		t_cpu_assign.push_back(now() - t0);
		CK(cudaEventRecord(e0));
		CK(kmg_kmd_assign(&D.R, dmed, k, 0, n, splits, dpd, dpj, dlab, ddist, 0));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t_kernel_assign.push_back(ms * 1e-3);
	}
	CK(cudaMemcpy(glab.data(), dlab, sizeof(int32_t) * n, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(gdist.data(), ddist, sizeof(double) * n, cudaMemcpyDeviceToHost));
	for (int64_t i = 0; i < n; i++)
		bad += glab[i] != lab[i] || memcmp(&gdist[i], &dist[i], sizeof(double)) != 0;
	check(bad == 0, "%s: the timed assignment = kmd_cpu_engine.assign bit for bit (%d rows differ)",
		  r->name, bad);

	/* the score, every cluster to do, clusters from that assignment */
	group(lab.data(), n, k, members, offsets);
	for (int c = 0; c < k; c++)
	{
		const double s = (double) (offsets[c + 1] - offsets[c]);

		pairs_score += s * s;
		for (int64_t p = offsets[c]; p < offsets[c + 1]; p += KMG_KMD_T)
		{
			kmg_kmd_item it;

			it.a0 = (int32_t) p;
			it.na = (int32_t) std::min((int64_t) KMG_KMD_T, offsets[c + 1] - p);
			it.b0 = (int32_t) offsets[c];
			it.b1 = (int32_t) offsets[c + 1];
			items.push_back(it);
		}
	}
	std::sort(items.begin(), items.end(), [](const kmg_kmd_item &a, const kmg_kmd_item &b) {
		return (int64_t) (a.b1 - a.b0) * a.na > (int64_t) (b.b1 - b.b0) * b.na; });
	{
		std::vector<int32_t> mem32(n);

		for (int64_t p = 0; p < n; p++)
			mem32[p] = (int32_t) members[p];
		CK(cudaMalloc(&dmem, sizeof(int32_t) * n));
		CK(cudaMalloc(&dsums, sizeof(double) * n));
		CK(cudaMalloc(&ditems, sizeof(kmg_kmd_item) * items.size()));
		CK(cudaMemcpy(dmem, mem32.data(), sizeof(int32_t) * n, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(ditems, items.data(), sizeof(kmg_kmd_item) * items.size(), cudaMemcpyHostToDevice));
	}
	for (int rep = 0; rep < reps; rep++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CK(kmg_kmd_score(&D.R, dmem, ditems, (int) items.size(), dsums, 0));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t_kernel_score.push_back(ms * 1e-3);
	}

	/* the steps through the API (transfers included) */
	memset(&err, 0, sizeof(err));
	kmd = api->kmd_open(&r->data, (kmd_metric) r->metric, r->alpha, k, NULL, &err);
	if (kmd == NULL)
		printf("kmd_open failed: %s\n", err.message);
	else
	{
		std::vector<double> sums(n);
		std::vector<char> todo(k, 1);

		api->kmd_steps_of(kmd, &steps);
		for (int rep = 0; rep < reps; rep++)
		{
			double		t0 = now();

			if (steps.assign(steps.ctx, med.data(), k, glab.data(), gdist.data()) != KM_OK)
				printf("assign step failed: %s\n", err.message);
			t_step_assign.push_back(now() - t0);
			t0 = now();
			if (steps.score(steps.ctx, members.data(), offsets.data(), todo.data(), k,
							sums.data()) != KM_OK)
				printf("score step failed: %s\n", err.message);
			t_step_score.push_back(now() - t0);
		}
		api->kmd_close(kmd);
	}

	/* the silhouette, on at most 10000 rows (kmeans_score's default sample) */
	{
		kmd_data	head = r->data;
		double		mc = 0.0,
					mg = 0.0;

		head.n = std::min(n, (int64_t) 10000);
		for (int rep = 0; rep < std::min(reps, 3); rep++)
		{
			double		t0 = now();

			memset(&err, 0, sizeof(err));
			(void) kmd_cpu_engine.silhouette(&head, lab.data(), k, (kmd_metric) r->metric,
											 r->alpha, &mc, &h, &err);
			t_cpu_sil.push_back(now() - t0);
			t0 = now();
			memset(&err, 0, sizeof(err));
			(void) api->kmd_silhouette(&head, lab.data(), k, (kmd_metric) r->metric, r->alpha,
									   &mg, NULL, &err);
			t_gpu_sil.push_back(now() - t0);
		}
		check(memcmp(&mc, &mg, sizeof(double)) == 0,
			  "%s: the timed silhouette (%lld rows) = the CPU engine's bit for bit (%.17g)",
			  r->name, (long long) head.n, mg);
	}

	/* whole alternating loops from the same seeds; the CPU's rounds give its score time */
	{
		kmd_params	p = params_for(r, k, KM_INIT_KMEANSPP, 3, 8);
		std::vector<int64_t> seeds(k);
		fit_out		c,
					g;
		report_times rt;
		km_hooks	hc = cpu_hooks();
		double		t0;

		memset(&err, 0, sizeof(err));
		if (kmd_cpu_engine.seed(&r->data, &p, &h, seeds.data(), &err) != KM_OK)
			printf("seed failed: %s\n", err.message);
		p.init = KM_INIT_EXPLICIT;
		p.init_medoids = seeds.data();
		hc.ctx = &rt;
		hc.report = record_report;
		fit_prepare(&c, k, n);
		t0 = now();
		c.status = kmd_cpu_engine.fit(&r->data, &p, &hc, &c.res, &c.err);
		c.seconds = now() - t0;
		fit_gpu(r, &p, &g);
		check(c.status == KM_OK && g.status == KM_OK && c.medoids == g.medoids &&
			  c.labels == g.labels && memcmp(&c.res.cost, &g.res.cost, sizeof(double)) == 0 &&
			  c.res.iterations == g.res.iterations,
			  "%s: %d rounds from the same seeds, CPU = GPU bit for bit", r->name, c.res.iterations);
		{
			std::vector<double> rounds;
			double		ca = median(t_cpu_assign);
			double		ka = median(t_kernel_assign);
			double		sa = median(t_step_assign);
			double		ks = median(t_kernel_score);
			double		ss = median(t_step_score);
			double		cs;

			for (size_t i = 1; i < rt.t.size(); i++)
				rounds.push_back(rt.t[i] - rt.t[i - 1]);
			/* a round is a score then an assignment; the first scores every cluster */
			cs = rounds.empty() ? NAN : rounds[0] - ca;
			printf("  %-34s %12s %12s %12s %8s\n", "step", "CPU s", "GPU kernel s", "GPU step s",
				   "ratio");
			printf("  %-34s %12.4f %12.5f %12.5f %8.1f   (%.3g pairs, GPU kernel %.1f GFLOP/s FP64)\n",
				   "assignment (n x k)", ca, ka, sa, ca / sa, pairs_assign,
				   work > 0 ? 2.0 * pairs_assign * work / ka * 1e-9 : 0.0);
			printf("  %-34s %12.4f %12.5f %12.5f %8.1f   (%.3g pairs, GPU kernel %.1f GFLOP/s FP64)\n",
				   "score, every cluster (sum size^2)", cs, ks, ss, cs / ss, pairs_score,
				   work > 0 ? 2.0 * pairs_score * work / ks * 1e-9 : 0.0);
			printf("  %-34s %12.4f %12s %12.5f %8.1f   (%lld rows)\n", "silhouette", median(t_cpu_sil),
				   "", median(t_gpu_sil), median(t_cpu_sil) / median(t_gpu_sil),
				   (long long) std::min(n, (int64_t) 10000));
			printf("  %-34s %12.4f %12s %12.5f %8.1f   (%d rounds; GPU: upload and aux included)\n",
				   "alternating loop, same seeds", c.seconds, "", g.seconds - g.seed_seconds,
				   c.seconds / (g.seconds - g.seed_seconds), c.res.iterations);
			printf("  (CPU score = its first round minus its assignment; seeding on the CPU: %.4f s)\n",
				   g.seed_seconds);
		}
	}
	cudaFree(ditems);
	cudaFree(dmem);
	cudaFree(dsums);
	cudaFree(dmed);
	cudaFree(dlab);
	cudaFree(ddist);
	cudaFree(dpd);
	cudaFree(dpj);
	dev_free(&D);
}

static void
bench(void)
{
	const km_gpu_api *api = km_api();
	km_error	err;
	cudaDeviceProp prop;

	memset(&err, 0, sizeof(err));
	if (api->set_device(0, &err) != KM_OK)
	{
		check(false, "device 0: %s", err.message);
		return;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("\n# timing on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
	{
		rows		r = make_dense("blobs", KMD_L2, 100000, 32, 100, 0, 201);

		bench_shape(&r, 100, 5);
	}
	{
		rows		r = make_dense("blobs", KMD_L2, 50000, 128, 20, 0, 202);

		bench_shape(&r, 20, 5);
	}
	{
		rows		r = make_dense("Fashion-MNIST shape", KMD_L2, 20000, 784, 10, 0, 203);

		bench_shape(&r, 10, 5);
	}
	{
		rows		r = make_dense("blobs", KMD_L1, 50000, 64, 50, 0, 204);

		bench_shape(&r, 50, 5);
	}
	{
		rows		r = make_dense("blobs", KMD_COSINE, 50000, 64, 50, 0, 205);

		bench_shape(&r, 50, 5);
	}
	{
		rows		r = make_sigs("signatures", 20000, 5, 10, 20, 1.0, 206);

		bench_shape(&r, 20, 3);
	}
}

/* dlopen the CUDA engine as the SQL layer does; false when it cannot be. */
static bool
open_engine(void)
{
	const char *so = getenv("KMG_CUDA_SO") != NULL ? getenv("KMG_CUDA_SO") : "bin/kmeans_gpu_cuda.so";
	void	   *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	const km_gpu_api *(*get) (void);

	if (h == NULL)
	{
		check(false, "dlopen %s: %s", so, dlerror());
		return false;
	}
	get = (const km_gpu_api *(*) (void)) dlsym(h, "km_gpu_get_api");
	engine_api = get != NULL ? get() : NULL;
	if (engine_api == NULL || engine_api->abi != KM_GPU_ABI)
	{
		check(false, "%s is not this version's engine (ABI %d)", so,
			  engine_api != NULL ? engine_api->abi : -1);
		return false;
	}
	CK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0));
	printf("# engine %s\n", so);
	return true;
}

int
main(int argc, char **argv)
{
	bool		do_validate = argc < 2;
	bool		do_bench = argc < 2;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "validate") == 0)
			do_validate = true;
		else if (strcmp(argv[i], "bench") == 0)
			do_bench = true;
		else
		{
			fprintf(stderr, "usage: %s [validate] [bench]\n", argv[0]);
			return 2;
		}
	}
	if (open_engine())
	{
		if (do_validate)
			validate();
		if (do_bench)
			bench();
	}
	printf("1..%d\n", n_checks);
	if (n_failed > 0)
		printf("# %d of %d failed\n", n_failed, n_checks);
	return n_failed > 0;
}
