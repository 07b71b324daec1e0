/*
 * kmedoids.cu
 *	  The host side of k-medoids on the device: the rows of a fit uploaded
 *	  once (km_gpu_kmd), the two steps of the alternating method on them
 *	  (kmd_steps of src/include/kmedoids_engine.h), and the silhouette.
 *
 * The SQL layer seeds with the CPU engine, then runs kmd_alternate() (the
 * loop and every decision, on the host) with the steps of a km_gpu_kmd:
 *	- assign: the medoids go up (k indices), kmg_kmd_assign runs over the
 *	  rows in launches of bounded work, labels and distances come down;
 *	- score: the members go up (n indices, cluster after cluster), the items
 *	  (up to 64 members of a cluster against the whole cluster, heaviest
 *	  first: the work of a cluster is size^2) are built here, kmg_kmd_score
 *	  runs over them in launches of bounded work, the sums come down.
 * Between launches the driver waits for the device and asks hooks->poll,
 * so that a cancel is seen within one launch (about KMG_KMD_LAUNCH_WORK
 * coordinate operations, a few tens of milliseconds on an H100; a launch
 * also holds at least two blocks per multiprocessor, as many as are resident
 * at once, so one cluster of millions of rows can make longer ones).
 *
 * Memory: the device memory of a handle is one allocation, sized by
 * kmd_layout (the same code lays it out and counts it for
 * kmd_device_bytes), checked against cudaMemGetInfo first.  The host
 * buffers (staging of the upload, indices and items) are the handle's own,
 * from malloc, counted by kmd_host_bytes so that the caller can check them
 * against its limit; kmd_close frees everything, and release_all frees any
 * handle still open (kmg_kmd_free_all), so no exit path keeps memory.
 * Errors of a step go to the km_error given to kmd_open, with the status
 * the step returns.
 */
#include "kmg_common.cuh"
#include "driver/driver.cuh"
#include "medoids/medoids.cuh"
#include "kmd_metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * Coordinate operations per launch: 2^37, about 30 to 60 ms of FP64
 * multiply-adds on an H100 at the tile's throughput, the latency of a cancel.
 */
#define KMG_KMD_LAUNCH_WORK 137438953472.0

/* Entries of the assignment's merge buffers (medoid ranges x rows). */
#define KMG_KMD_PART_CAP 65536

/* Bytes of the upload's staging buffer, at most. */
#define KMG_KMD_STAGE_BYTES ((size_t) 64 << 20)

struct km_gpu_kmd
{
	km_gpu_kmd *next;			/* the process's open handles */
	km_hooks	hooks;			/* poll (the others are not used) */
	km_error   *err;			/* where the steps' errors go */
	int64_t		n;
	int			d;
	int			k;
	int			metric;
	double		alpha;
	int64_t		values;			/* floats of the rows */
	double		pair_work;		/* coordinate operations of a distance */
	int			sms;
	cudaStream_t stream;
	void	   *arena;

	/* on the device */
	kmg_kmd_rows R;
	float	   *X;
	int64_t    *off;
	int32_t    *m;
	double	   *aux;
	int32_t    *medoids;		/* k */
	int32_t    *labels;			/* n */
	double	   *dist;			/* n */
	int32_t    *members;		/* n */
	double	   *sums;			/* n: the score, or the silhouette */
	kmg_kmd_item *items;		/* max_items */
	double	   *part_d;			/* KMG_KMD_PART_CAP */
	int32_t    *part_j;
	int64_t    *sizes;			/* k: the silhouette */
	int64_t		max_items;

	/* on the host */
	int32_t    *h_idx;			/* n: members or medoids, as int32 */
	kmg_kmd_item *h_items;		/* max_items */
};

static km_gpu_kmd *kmg_kmd_live = NULL;

/* Floats of the rows: n x d, or every signature's features x d. */
static int64_t
kmd_values(const kmd_data *data, int metric)
{
	int64_t		v = 0;

	if (metric != KMD_SQFD)
		return data->n * (int64_t) data->d;
	for (int64_t i = 0; i < data->n; i++)
		v += (int64_t) data->nfeat[i] * data->d;
	return v;
}

/* Items a score may need: a cluster of s members gives ceil(s / 64). */
static int64_t
kmd_max_items(int64_t n, int k)
{
	return (n + KMG_KMD_T - 1) / KMG_KMD_T + k;
}

/*
 * Lay out the device memory of a handle at base (NULL: only count);
 * returns the bytes.  Every array on a 256-byte boundary.
 */
static size_t
kmd_layout(int64_t n, int k, int64_t values, int metric, char *base, km_gpu_kmd *h)
{
	size_t		pos = 0;
	const int64_t items = kmd_max_items(n, k);

#define KMD_TAKE(field, type, count) \
	do { \
		if (base != NULL) \
			h->field = (type *) (base + pos); \
		pos += KMG_ROUND_UP(sizeof(type) * (size_t) (count), 256); \
	} while (0)

	KMD_TAKE(X, float, values > 0 ? values : 1);
	if (metric == KMD_SQFD)
	{
		KMD_TAKE(off, int64_t, n);
		KMD_TAKE(m, int32_t, n);
	}
	KMD_TAKE(aux, double, n);
	KMD_TAKE(medoids, int32_t, k);
	KMD_TAKE(labels, int32_t, n);
	KMD_TAKE(dist, double, n);
	KMD_TAKE(members, int32_t, n);
	KMD_TAKE(sums, double, n);
	KMD_TAKE(items, kmg_kmd_item, items);
	KMD_TAKE(part_d, double, KMG_KMD_PART_CAP);
	KMD_TAKE(part_j, int32_t, KMG_KMD_PART_CAP);
	KMD_TAKE(sizes, int64_t, k);
#undef KMD_TAKE
	return pos;
}

/* Host bytes of a handle: indices, items, and the upload's staging. */
static size_t
kmd_host_layout(int64_t n, int k, int64_t values, int metric)
{
	size_t		stage = sizeof(float) * (size_t) values;

	if (stage > KMG_KMD_STAGE_BYTES)
		stage = KMG_KMD_STAGE_BYTES;
	if (metric == KMD_SQFD)
		stage += (sizeof(int64_t) + sizeof(int32_t)) * (size_t) n;
	return sizeof(int32_t) * (size_t) (n > k ? n : k) +
		sizeof(kmg_kmd_item) * (size_t) kmd_max_items(n, k) + stage + 4096;
}

/* Whether the rows can go to the device: a message, or NULL. */
static const char *
kmd_check(const kmd_data *data, int metric, int k)
{
	if (data == NULL || data->n < 1 || data->rows == NULL)
		return "no rows";
	if (data->n >= INT32_MAX)
		return "the GPU engine takes fewer than 2^31 rows per call";
	if (data->d < 1)
		return "dimension must be at least 1";
	if (metric < KMD_L2 || metric > KMD_SQFD)
		return "unknown metric";
	if (metric == KMD_SQFD)
	{
		if (data->nfeat == NULL || data->d < 2)
			return "sqfd needs feature counts and features of at least 2 values";
		for (int64_t i = 0; i < data->n; i++)
			if (data->nfeat[i] < 1)
				return "a signature needs at least one feature";
	}
	if (k < 1)
		return "k must be at least 1";
	return NULL;
}

/* km_gpu_api.kmd_device_bytes: device memory of a handle on data (0: bad data). */
uint64_t
kmg_kmd_device_bytes(const kmd_data *data, int k, kmd_metric metric)
{
	if (kmd_check(data, metric, k) != NULL)
		return 0;
	return kmd_layout(data->n, k, kmd_values(data, metric), metric, NULL, NULL);
}

/* km_gpu_api.kmd_host_bytes: host memory of a handle on data (0: bad data). */
size_t
kmg_kmd_host_bytes(const kmd_data *data, int k, kmd_metric metric)
{
	if (kmd_check(data, metric, k) != NULL)
		return 0;
	return kmd_host_layout(data->n, k, kmd_values(data, metric), metric) +
		sizeof(double) * (size_t) data->n;	/* the silhouette's values */
}

/* km_gpu_api.kmd_close: everything of the handle, on the device and here. */
void
kmg_kmd_close(km_gpu_kmd *h)
{
	if (h == NULL)
		return;
	for (km_gpu_kmd **p = &kmg_kmd_live; *p != NULL; p = &(*p)->next)
		if (*p == h)
		{
			*p = h->next;
			break;
		}
	if (h->stream != NULL)
		(void) cudaStreamDestroy(h->stream);
	if (h->arena != NULL)
		(void) cudaFree(h->arena);
	free(h->h_idx);
	free(h->h_items);
	free(h);
}

/* Every handle still open (release_all). */
void
kmg_kmd_free_all(void)
{
	while (kmg_kmd_live != NULL)
		kmg_kmd_close(kmg_kmd_live);
}

/*
 * A copy on the handle's stream, finished when it returns: after the
 * kernels queued before it, and before the host reads or reuses its
 * (pageable) buffer.
 */
static cudaError_t
kmd_copy(km_gpu_kmd *h, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, h->stream);

	if (e == cudaSuccess)
		e = cudaStreamSynchronize(h->stream);
	return e;
}

/* Whether the caller asked to stop. */
static int
kmd_polled(const km_gpu_kmd *h)
{
	return h->hooks.poll != NULL && h->hooks.poll(h->hooks.ctx) != 0;
}

/*
 * Wait for what is queued, then ask the poll: KM_OK to go on, else the
 * status (an error of the device, or KM_ERR_CANCELLED) with err filled.
 */
static km_status
kmd_wait(km_gpu_kmd *h, km_error *err)
{
	cudaError_t e = cudaStreamSynchronize(h->stream);

	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "a k-medoids kernel");
	if (kmd_polled(h))
		return kmg_set_error(err, KM_ERR_CANCELLED, "canceled");
	return KM_OK;
}

/* sqfd: each signature's offset (in floats) and feature count. */
static km_status
kmd_upload_shape(km_gpu_kmd *h, const kmd_data *data, km_error *err)
{
	int64_t    *off = (int64_t *) malloc(sizeof(int64_t) * (size_t) h->n);
	int32_t    *m = (int32_t *) malloc(sizeof(int32_t) * (size_t) h->n);
	km_status	st = KM_OK;
	int64_t		o = 0;

	if (off == NULL || m == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of memory staging the rows");
		goto done;
	}
	for (int64_t i = 0; i < h->n; i++)
	{
		off[i] = o;
		m[i] = data->nfeat[i];
		o += (int64_t) data->nfeat[i] * data->d;
	}
	KMG_CK(kmd_copy(h, h->off, off, sizeof(int64_t) * h->n, cudaMemcpyHostToDevice));
	KMG_CK(kmd_copy(h, h->m, m, sizeof(int32_t) * h->n, cudaMemcpyHostToDevice));
done:
	free(off);
	free(m);
	return st;
}

/*
 * Send the rows: packed (dense: d floats a row; sqfd: each signature's
 * features, with their offsets and counts) through a staging buffer of at
 * most KMG_KMD_STAGE_BYTES, polling between pieces.
 */
static km_status
kmd_upload(km_gpu_kmd *h, const kmd_data *data, km_error *err)
{
	const int	d = data->d;
	size_t		cap = sizeof(float) * (size_t) h->values;
	float	   *stage;
	km_status	st = KM_OK;
	int64_t		fill = 0;		/* floats in the stage */
	int64_t		sent = 0;		/* floats sent */

	if (cap > KMG_KMD_STAGE_BYTES)
		cap = KMG_KMD_STAGE_BYTES;
	stage = (float *) malloc(cap);
	if (stage == NULL)
		return kmg_set_error(err, KM_ERR_NOMEM, "out of memory staging the rows");

	if (h->metric == KMD_SQFD && (st = kmd_upload_shape(h, data, err)) != KM_OK)
		goto done;

	for (int64_t i = 0; i < h->n; i++)
	{
		const int64_t len = (int64_t) (h->metric == KMD_SQFD ? data->nfeat[i] : 1) * d;
		const float *row = data->rows[i];
		int64_t		done_floats = 0;

		/* a signature longer than the stage goes in pieces */
		while (done_floats < len)
		{
			int64_t		take = len - done_floats;

			if (take > (int64_t) (cap / sizeof(float)) - fill)
				take = (int64_t) (cap / sizeof(float)) - fill;
			memcpy(stage + fill, row + done_floats, sizeof(float) * (size_t) take);
			fill += take;
			done_floats += take;
			if (fill == (int64_t) (cap / sizeof(float)))
			{
				KMG_CK(kmd_copy(h, h->X + sent, stage, sizeof(float) * fill, cudaMemcpyHostToDevice));
				sent += fill;
				fill = 0;
				if (kmd_polled(h))
				{
					st = kmg_set_error(err, KM_ERR_CANCELLED, "canceled");
					goto done;
				}
			}
		}
	}
	if (fill > 0)
		KMG_CK(kmd_copy(h, h->X + sent, stage, sizeof(float) * fill, cudaMemcpyHostToDevice));

done:
	free(stage);
	return st;
}

/* A distance's coordinate operations, for sizing launches. */
static double
kmd_pair_work(const km_gpu_kmd *h)
{
	if (h->metric == KMD_SQFD)
	{
		double		f = (double) h->values / ((double) h->n * h->d);

		return f * f * (h->d + 40.0);	/* an exp of about 40 operations a feature pair */
	}
	return (double) KMG_ROUND_UP(h->d, 16);
}

/*
 * km_gpu_api.kmd_open: the rows of data on the device, their aux values
 * computed, room for k medoids; NULL and err filled when it cannot be.
 * Errors of the steps later go to err as well.
 */
km_gpu_kmd *
kmg_kmd_open(const kmd_data *data, kmd_metric metric, double alpha, int k,
			 const km_hooks *hooks, km_error *err)
{
	km_gpu_kmd *h;
	const char *msg;
	km_status	st;
	size_t		bytes;

	if ((st = kmg_begin(err)) != KM_OK)
		return NULL;
	if ((msg = kmd_check(data, metric, k)) != NULL)
	{
		kmg_set_error(err, KM_ERR_INVALID, "%s", msg);
		return NULL;
	}
	if (metric == KMD_SQFD && !(alpha > 0.0 && isfinite(alpha)))
	{
		kmg_set_error(err, KM_ERR_INVALID, "alpha must be a finite number > 0");
		return NULL;
	}
	h = (km_gpu_kmd *) calloc(1, sizeof(km_gpu_kmd));
	if (h == NULL)
	{
		kmg_set_error(err, KM_ERR_NOMEM, "out of memory");
		return NULL;
	}
	if (hooks != NULL)
		h->hooks = *hooks;
	h->err = err;
	h->n = data->n;
	h->d = data->d;
	h->k = k;
	h->metric = metric;
	h->alpha = alpha;
	h->values = kmd_values(data, metric);
	h->pair_work = kmd_pair_work(h);
	h->sms = kmg_dev()->sms;
	h->max_items = kmd_max_items(h->n, k);
	h->next = kmg_kmd_live;
	kmg_kmd_live = h;

	h->h_idx = (int32_t *) malloc(sizeof(int32_t) * (size_t) (h->n > k ? h->n : k));
	h->h_items = (kmg_kmd_item *) malloc(sizeof(kmg_kmd_item) * (size_t) h->max_items);
	if (h->h_idx == NULL || h->h_items == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of memory");
		goto done;
	}
	bytes = kmd_layout(h->n, k, h->values, metric, NULL, NULL);
	if ((st = kmg_alloc_arena(&h->arena, bytes, "k-medoids", err)) != KM_OK)
		goto done;
	kmd_layout(h->n, k, h->values, metric, (char *) h->arena, h);
	KMG_CK(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));

	if ((st = kmd_upload(h, data, err)) != KM_OK)
		goto done;
	h->R.X = h->X;
	h->R.off = metric == KMD_SQFD ? h->off : NULL;
	h->R.m = metric == KMD_SQFD ? h->m : NULL;
	h->R.aux = h->aux;
	h->R.n = h->n;
	h->R.d = h->d;
	h->R.metric = metric;
	h->R.alpha = alpha;
	KMG_CK(kmg_kmd_aux(&h->R, h->aux, h->stream));
	st = kmd_wait(h, err);

done:
	if (st != KM_OK)
	{
		kmg_kmd_close(h);
		return NULL;
	}
	return h;
}

/*
 * The assignment step (kmd_steps.assign): every row's nearest medoid and
 * its distance, in launches of rows of bounded work.
 */
static km_status
kmd_step_assign(void *ctx, const int64_t *medoids, int k, int32_t *labels, double *dist)
{
	km_gpu_kmd *h = (km_gpu_kmd *) ctx;
	km_error   *err = h->err;
	km_status	st;
	int64_t		rows;

	if ((st = kmg_begin(err)) != KM_OK)
		return st;
	if (k < 1 || k > h->k)
		return kmg_set_error(err, KM_ERR_INVALID, "%d medoids for a handle of %d", k, h->k);
	for (int c = 0; c < k; c++)
	{
		if (medoids[c] < 0 || medoids[c] >= h->n)
			return kmg_set_error(err, KM_ERR_INVALID, "medoid %d is not a row", c);
		h->h_idx[c] = (int32_t) medoids[c];
	}
	KMG_CK(kmd_copy(h, h->medoids, h->h_idx, sizeof(int32_t) * k, cudaMemcpyHostToDevice));

	/* rows per launch: the work budget, but at least two blocks per multiprocessor */
	rows = (int64_t) (KMG_KMD_LAUNCH_WORK / ((double) k * h->pair_work));
	if (rows < 2 * (int64_t) h->sms * KMG_KMD_T)
		rows = 2 * (int64_t) h->sms * KMG_KMD_T;
	rows = KMG_ROUND_UP(rows, KMG_KMD_T);
	for (int64_t r0 = 0; r0 < h->n; r0 += rows)
	{
		const int64_t nr = h->n - r0 < rows ? h->n - r0 : rows;
		const int	splits = kmg_kmd_assign_splits(nr, k, h->sms, KMG_KMD_PART_CAP);

		KMG_CK(kmg_kmd_assign(&h->R, h->medoids, k, r0, nr, splits, h->part_d, h->part_j,
							  h->labels, h->dist, h->stream));
		if ((st = kmd_wait(h, err)) != KM_OK)
			goto done;
	}
	KMG_CK(kmd_copy(h, labels, h->labels, sizeof(int32_t) * h->n, cudaMemcpyDeviceToHost));
	KMG_CK(kmd_copy(h, dist, h->dist, sizeof(double) * h->n, cudaMemcpyDeviceToHost));
	st = KM_OK;
done:
	return st;
}

/* Heaviest item first: the larger cluster, then the fuller item, then by position. */
static int
kmd_item_cmp(const void *pa, const void *pb)
{
	const kmg_kmd_item *a = (const kmg_kmd_item *) pa;
	const kmg_kmd_item *b = (const kmg_kmd_item *) pb;
	const int64_t wa = (int64_t) (a->b1 - a->b0) * a->na;
	const int64_t wb = (int64_t) (b->b1 - b->b0) * b->na;

	if (wa != wb)
		return wa > wb ? -1 : 1;
	return a->a0 < b->a0 ? -1 : (a->a0 > b->a0 ? 1 : 0);
}

/*
 * The score step (kmd_steps.score): for the clusters to do, each member's
 * sum of distances to the other members, by items of up to 64 members, in
 * launches of bounded work.
 */
static km_status
kmd_step_score(void *ctx, const int64_t *members, const int64_t *offsets, const char *todo,
			   int k, double *sums)
{
	km_gpu_kmd *h = (km_gpu_kmd *) ctx;
	km_error   *err = h->err;
	km_status	st;
	int64_t		nitems = 0;
	int64_t		i0;

	if ((st = kmg_begin(err)) != KM_OK)
		return st;
	if (k < 1 || k > h->k || offsets[0] != 0 || offsets[k] != h->n)
		return kmg_set_error(err, KM_ERR_INVALID, "the clusters do not cover the rows");
	for (int64_t p = 0; p < h->n; p++)
		h->h_idx[p] = (int32_t) members[p];

	/* the items of the clusters to do */
	for (int c = 0; c < k; c++)
	{
		if (!todo[c])
			continue;
		for (int64_t p = offsets[c]; p < offsets[c + 1]; p += KMG_KMD_T)
		{
			kmg_kmd_item *it = &h->h_items[nitems++];

			it->a0 = (int32_t) p;
			it->na = (int32_t) (offsets[c + 1] - p < KMG_KMD_T ? offsets[c + 1] - p : KMG_KMD_T);
			it->b0 = (int32_t) offsets[c];
			it->b1 = (int32_t) offsets[c + 1];
		}
	}
	if (nitems == 0)
		return KM_OK;
	qsort(h->h_items, (size_t) nitems, sizeof(kmg_kmd_item), kmd_item_cmp);
	KMG_CK(kmd_copy(h, h->members, h->h_idx, sizeof(int32_t) * h->n, cudaMemcpyHostToDevice));
	KMG_CK(kmd_copy(h, h->items, h->h_items, sizeof(kmg_kmd_item) * nitems, cudaMemcpyHostToDevice));

	/* launches: items in order until the budget, at least two blocks per multiprocessor */
	for (i0 = 0; i0 < nitems;)
	{
		double		work = 0.0;
		int64_t		i1 = i0;

		while (i1 < nitems && (i1 - i0 < 2 * (int64_t) h->sms || work < KMG_KMD_LAUNCH_WORK))
		{
			const kmg_kmd_item *it = &h->h_items[i1];

			work += (double) it->na * (double) (it->b1 - it->b0) * h->pair_work;
			i1++;
			if (work >= KMG_KMD_LAUNCH_WORK && i1 - i0 >= 2 * (int64_t) h->sms)
				break;
		}
		KMG_CK(kmg_kmd_score(&h->R, h->members, h->items + i0, (int) (i1 - i0), h->sums,
							 h->stream));
		if ((st = kmd_wait(h, err)) != KM_OK)
			goto done;
		i0 = i1;
	}
	KMG_CK(kmd_copy(h, sums, h->sums, sizeof(double) * h->n, cudaMemcpyDeviceToHost));
	st = KM_OK;
done:
	return st;
}

/* km_gpu_api.kmd_steps_of: the steps of the alternating method on h's rows. */
void
kmg_kmd_steps(km_gpu_kmd *h, kmd_steps *steps)
{
	steps->ctx = h;
	steps->assign = kmd_step_assign;
	steps->score = kmd_step_score;
}

/*
 * km_gpu_api.kmd_silhouette: the mean silhouette of labelled rows, as
 * kmd_cpu_engine.silhouette computes it: s_i on the device, their mean here
 * in row order.
 */
km_status
kmg_kmd_silhouette_rows(const kmd_data *data, const int32_t *labels, int k,
						kmd_metric metric, double alpha, double *mean,
						const km_hooks *hooks, km_error *err)
{
	km_gpu_kmd *h;
	km_status	st = KM_OK;
	int64_t    *sizes = NULL;
	int64_t    *fill = NULL;
	double	   *sil = NULL;
	int			nonempty = 0;
	int64_t		rows;
	double		sum = 0.0;

	if (labels == NULL || mean == NULL || data == NULL || k < 1)
		return kmg_set_error(err, KM_ERR_INVALID, "no labels");
	for (int64_t i = 0; i < data->n; i++)
		if (labels[i] < 0 || labels[i] >= k)
			return kmg_set_error(err, KM_ERR_INVALID, "a label is out of range");
	h = kmg_kmd_open(data, metric, alpha, k, hooks, err);
	if (h == NULL)
		return err->status;

	sizes = (int64_t *) calloc((size_t) k + 1, sizeof(int64_t));
	fill = (int64_t *) calloc((size_t) k + 1, sizeof(int64_t));
	sil = (double *) malloc(sizeof(double) * (size_t) h->n);
	if (sizes == NULL || fill == NULL || sil == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of memory");
		goto done;
	}
	for (int64_t i = 0; i < h->n; i++)
		if (sizes[labels[i]]++ == 0)
			nonempty++;
	if (nonempty < 2)
	{
		st = kmg_set_error(err, KM_ERR_INVALID, "the silhouette needs two clusters with rows");
		goto done;
	}
	/* the rows cluster after cluster, each in row order (counting sort) */
	for (int c = 0; c < k; c++)
		fill[c + 1] = fill[c] + sizes[c];
	for (int64_t i = 0; i < h->n; i++)
		h->h_idx[fill[labels[i]]++] = (int32_t) i;
	KMG_CK(kmd_copy(h, h->members, h->h_idx, sizeof(int32_t) * h->n, cudaMemcpyHostToDevice));
	KMG_CK(kmd_copy(h, h->labels, labels, sizeof(int32_t) * h->n, cudaMemcpyHostToDevice));
	KMG_CK(kmd_copy(h, h->sizes, sizes, sizeof(int64_t) * k, cudaMemcpyHostToDevice));

	rows = (int64_t) (KMG_KMD_LAUNCH_WORK / ((double) h->n * h->pair_work));
	if (rows < 2 * (int64_t) h->sms * KMG_KMD_T)
		rows = 2 * (int64_t) h->sms * KMG_KMD_T;
	rows = KMG_ROUND_UP(rows, KMG_KMD_T);
	for (int64_t r0 = 0; r0 < h->n; r0 += rows)
	{
		const int64_t nr = h->n - r0 < rows ? h->n - r0 : rows;

		KMG_CK(kmg_kmd_silhouette(&h->R, h->members, h->labels, h->sizes, r0, nr, h->sums,
								  h->stream));
		if ((st = kmd_wait(h, err)) != KM_OK)
			goto done;
	}
	KMG_CK(kmd_copy(h, sil, h->sums, sizeof(double) * h->n, cudaMemcpyDeviceToHost));
	for (int64_t i = 0; i < h->n; i++)
		sum += sil[i];
	*mean = sum / (double) h->n;
	st = KM_OK;

done:
	free(sizes);
	free(fill);
	free(sil);
	kmg_kmd_close(h);
	return st;
}
