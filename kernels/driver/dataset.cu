/*
 * dataset.cu
 *	  Rows streamed to the device while the caller is still producing them.
 *
 * The caller asks for a pinned staging buffer (dataset_stage), writes rows
 * into it and hands it over (dataset_commit), which queues the copy on the
 * dataset's own stream and returns at once; with three buffers the caller
 * fills one while the others travel, and dataset_stage waits only when all
 * three are still in flight.  Rows land in the padded layout the kernels
 * read (dp = d rounded up to KM_FILTER_DPAD): straight from the pinned
 * buffer when d == dp, else through a device staging buffer and a small
 * expand kernel on the same stream.  The device buffer is reserved for the
 * expected row count plus an eighth and grows by half when more rows come
 * (a copy on the device; growth is rare when the estimate is sane).
 *
 * engine->fit, assign and map use the same code for rows in host memory
 * (kmg_ds_load), so there is one upload path.
 */
#include "kmg_common.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"

#include <stdlib.h>
#include <string.h>

#define KMG_NSTAGE 3
#define KMG_STAGE_BYTES ((size_t) 32 << 20)

/* Rows on the device, and the staging buffers that bring them there. */
struct km_gpu_dataset
{
	int			d;
	int			dp;
	int			weighted;
	int			internal;		/* made by engine->fit/assign/map */
	int64_t		n;				/* rows committed */
	int64_t		cap;			/* rows the device buffers hold */
	float	   *X;				/* cap x dp */
	float	   *W;				/* cap, when weighted */
	int64_t		stage_rows;
	float	   *pin[KMG_NSTAGE];	/* pinned: stage_rows x d (+ stage_rows weights) */
	float	   *dstage[KMG_NSTAGE];	/* device: stage_rows x d, when d != dp */
	cudaEvent_t ev[KMG_NSTAGE];
	int			busy[KMG_NSTAGE];
	int			cur;			/* buffer handed out by stage, or -1 */
	int			next;
	cudaStream_t copy;
	km_gpu_dataset *prev_ds;
	km_gpu_dataset *next_ds;
};

/* Live datasets, for release_all. */
static km_gpu_dataset *kmg_live = NULL;

/* Put a new dataset on the live list. */
static void
kmg_ds_link(km_gpu_dataset *ds)
{
	ds->prev_ds = NULL;
	ds->next_ds = kmg_live;
	if (kmg_live != NULL)
		kmg_live->prev_ds = ds;
	kmg_live = ds;
}

/* Take a dataset off the live list. */
static void
kmg_ds_unlink(km_gpu_dataset *ds)
{
	if (ds->prev_ds != NULL)
		ds->prev_ds->next_ds = ds->next_ds;
	else if (kmg_live == ds)
		kmg_live = ds->next_ds;
	if (ds->next_ds != NULL)
		ds->next_ds->prev_ds = ds->prev_ds;
	ds->prev_ds = ds->next_ds = NULL;
}

/*
 * Rows of one staging buffer: what fits KMG_STAGE_BYTES with its weight,
 * but no more than the expected rows (at least 4096).
 */
static int64_t
kmg_stage_rows_for(int d, int64_t expected)
{
	int64_t		r = (int64_t) (KMG_STAGE_BYTES / ((size_t) d * sizeof(float) + sizeof(float)));

	if (expected < 4096)
		expected = 4096;
	if (r > expected)
		r = expected;
	return r < 1 ? 1 : r;
}

/* Device bytes of a dataset of rows rows (data, weights, staging). */
uint64_t
kmg_ds_bytes(int64_t rows, int d, int weighted)
{
	const int	dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	const int64_t cap = rows + rows / 8 + 1024;
	uint64_t	b = (uint64_t) cap * dp * sizeof(float);

	if (weighted)
		b += (uint64_t) cap * sizeof(float);
	if (dp != d)
		b += (uint64_t) KMG_NSTAGE * kmg_stage_rows_for(d, rows) * d * sizeof(float);
	return b;
}

/*
 * Free a dataset (NULL is ignored): wait for its copies, then give back its
 * device, pinned and host memory and take it off the live list.
 */
void
kmg_ds_free(km_gpu_dataset *ds)
{
	if (ds == NULL)
		return;
	if (ds->copy != NULL)
		(void) cudaStreamSynchronize(ds->copy);
	for (int b = 0; b < KMG_NSTAGE; b++)
	{
		if (ds->pin[b] != NULL)
			(void) cudaFreeHost(ds->pin[b]);
		if (ds->dstage[b] != NULL)
			(void) cudaFree(ds->dstage[b]);
		if (ds->ev[b] != NULL)
			(void) cudaEventDestroy(ds->ev[b]);
	}
	if (ds->X != NULL)
		(void) cudaFree(ds->X);
	if (ds->W != NULL)
		(void) cudaFree(ds->W);
	if (ds->copy != NULL)
		(void) cudaStreamDestroy(ds->copy);
	kmg_ds_unlink(ds);
	free(ds);
}

/* Free every live dataset (release_all). */
void
kmg_ds_free_all(void)
{
	while (kmg_live != NULL)
		kmg_ds_free(kmg_live);
}

/* Allocate device memory, checking the free amount first. */
static km_status
kmg_ds_malloc(void **p, size_t bytes, const char *what, km_error *err)
{
	cudaError_t e = cudaMalloc(p, bytes);

	if (e != cudaSuccess)
	{
		*p = NULL;
		if (e == cudaErrorMemoryAllocation)
		{
			(void) cudaGetLastError();
			return kmg_set_error(err, KM_ERR_DEVICE_NOMEM,
								 "out of GPU memory: %s needs %zu bytes", what, bytes);
		}
		return kmg_cuda_error(err, e, what);
	}
	return KM_OK;
}

/*
 * A new empty dataset of d floats a row: device rows for the expected count
 * (plus an eighth and 1024 unless internal, whose count is exact), KMG_NSTAGE
 * pinned staging buffers, device staging buffers when d is not a multiple
 * of KM_FILTER_DPAD, and a copy stream.  Refuses at once when the device
 * lacks the memory.  internal: made by engine->fit/assign/map, whose rows
 * the fit may normalise in place.  NULL with err filled on failure.
 */
km_gpu_dataset *
kmg_ds_create(int d, int weighted, int64_t expected_rows, int internal, km_error *err)
{
	km_gpu_dataset *ds;
	km_status	st = KM_OK;
	size_t		freeb = 0,
				total = 0;

	ds = (km_gpu_dataset *) calloc(1, sizeof(km_gpu_dataset));
	if (ds == NULL)
	{
		kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
		return NULL;
	}
	if (expected_rows < 1)
		expected_rows = 1;
	ds->d = d;
	ds->dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	ds->weighted = weighted != 0;
	ds->internal = internal;
	ds->cur = -1;
	ds->cap = internal ? expected_rows : expected_rows + expected_rows / 8 + 1024;
	ds->stage_rows = kmg_stage_rows_for(d, expected_rows);
	kmg_ds_link(ds);

	KMG_CK(cudaMemGetInfo(&freeb, &total));
	if (kmg_ds_bytes(ds->cap, d, weighted) > freeb)
	{
		st = kmg_set_error(err, KM_ERR_DEVICE_NOMEM,
						   "out of GPU memory: %lld rows of %d floats need %llu bytes, %zu free",
						   (long long) ds->cap, d,
						   (unsigned long long) kmg_ds_bytes(ds->cap, d, weighted), freeb);
		goto done;
	}
	if ((st = kmg_ds_malloc((void **) &ds->X, (size_t) ds->cap * ds->dp * sizeof(float),
							"the rows", err)) != KM_OK)
		goto done;
	if (ds->weighted &&
		(st = kmg_ds_malloc((void **) &ds->W, (size_t) ds->cap * sizeof(float),
							"the weights", err)) != KM_OK)
		goto done;
	KMG_CK(cudaStreamCreateWithFlags(&ds->copy, cudaStreamNonBlocking));
	for (int b = 0; b < KMG_NSTAGE; b++)
	{
		cudaError_t e = cudaHostAlloc((void **) &ds->pin[b],
									  (size_t) ds->stage_rows * (d + 1) * sizeof(float),
									  cudaHostAllocDefault);

		if (e == cudaErrorMemoryAllocation)
		{
			(void) cudaGetLastError();
			ds->pin[b] = NULL;
			st = kmg_set_error(err, KM_ERR_NOMEM, "out of pinned host memory for staging");
			goto done;
		}
		KMG_CK(e);
		if (ds->dp != d &&
			(st = kmg_ds_malloc((void **) &ds->dstage[b],
								(size_t) ds->stage_rows * d * sizeof(float),
								"the staging buffers", err)) != KM_OK)
			goto done;
		KMG_CK(cudaEventCreateWithFlags(&ds->ev[b], cudaEventDisableTiming));
	}
done:
	if (st != KM_OK)
	{
		kmg_ds_free(ds);
		return NULL;
	}
	return ds;
}

/*
 * The next pinned staging buffer for the caller to fill: *room rows of d
 * floats, then (weighted) *weights, room floats.  Waits only while its last
 * copy is still in flight.  Every stage must be committed before the next.
 */
float *
kmg_ds_stage(km_gpu_dataset *ds, int64_t *room, float **weights, km_error *err)
{
	const int	b = ds->next;
	cudaError_t e;

	if (ds->cur >= 0)
	{
		kmg_set_error(err, KM_ERR_INVALID, "the last staged buffer was not committed");
		return NULL;
	}
	/* copies finish in order: if this one is busy, every buffer is */
	if (ds->busy[b])
	{
		e = cudaEventSynchronize(ds->ev[b]);
		if (e != cudaSuccess)
		{
			kmg_cuda_error(err, e, "cudaEventSynchronize (staging)");
			return NULL;
		}
		ds->busy[b] = 0;
	}
	ds->cur = b;
	*room = ds->stage_rows;
	if (weights != NULL)
		*weights = ds->weighted ? ds->pin[b] + (size_t) ds->stage_rows * ds->d : NULL;
	return ds->pin[b];
}

/* Make room for at least need rows, keeping what is there. */
static km_status
kmg_ds_grow(km_gpu_dataset *ds, int64_t need, km_error *err)
{
	int64_t		cap = ds->cap + ds->cap / 2;
	float	   *X = NULL,
			   *W = NULL;
	km_status	st = KM_OK;

	if (cap < need)
		cap = need;
	KMG_CK(cudaStreamSynchronize(ds->copy));
	if ((st = kmg_ds_malloc((void **) &X, (size_t) cap * ds->dp * sizeof(float),
							"growing the rows", err)) != KM_OK)
		goto done;
	if (ds->weighted &&
		(st = kmg_ds_malloc((void **) &W, (size_t) cap * sizeof(float),
							"growing the weights", err)) != KM_OK)
		goto done;
	KMG_CK(cudaMemcpyAsync(X, ds->X, (size_t) ds->n * ds->dp * sizeof(float),
						   cudaMemcpyDeviceToDevice, ds->copy));
	if (ds->weighted)
		KMG_CK(cudaMemcpyAsync(W, ds->W, (size_t) ds->n * sizeof(float),
							   cudaMemcpyDeviceToDevice, ds->copy));
	KMG_CK(cudaStreamSynchronize(ds->copy));
	(void) cudaFree(ds->X);
	if (ds->W != NULL)
		(void) cudaFree(ds->W);
	ds->X = X;
	ds->W = W;
	X = W = NULL;
	ds->cap = cap;
done:
	if (X != NULL)
		(void) cudaFree(X);
	if (W != NULL)
		(void) cudaFree(W);
	return st;
}

/*
 * Send the first rows of the staged buffer to the end of the device rows
 * (growing them when needed): queued on the copy stream, through the expand
 * kernel when d != dp, and returns at once.
 */
km_status
kmg_ds_commit(km_gpu_dataset *ds, int64_t rows, km_error *err)
{
	const int	b = ds->cur;
	km_status	st = KM_OK;

	if (b < 0)
		return kmg_set_error(err, KM_ERR_INVALID, "nothing staged");
	if (rows < 0 || rows > ds->stage_rows)
		return kmg_set_error(err, KM_ERR_INVALID, "%lld rows committed, %lld staged at most",
							 (long long) rows, (long long) ds->stage_rows);
	if (ds->n + rows >= INT32_MAX)
		return kmg_set_error(err, KM_ERR_INVALID,
							 "the GPU engine takes fewer than 2^31 rows");
	ds->cur = -1;
	if (rows == 0)
		return KM_OK;
	if (ds->n + rows > ds->cap && (st = kmg_ds_grow(ds, ds->n + rows, err)) != KM_OK)
		return st;

	if (ds->dp == ds->d)
		KMG_CK(cudaMemcpyAsync(ds->X + (size_t) ds->n * ds->dp, ds->pin[b],
							   (size_t) rows * ds->d * sizeof(float),
							   cudaMemcpyHostToDevice, ds->copy));
	else
	{
		KMG_CK(cudaMemcpyAsync(ds->dstage[b], ds->pin[b], (size_t) rows * ds->d * sizeof(float),
							   cudaMemcpyHostToDevice, ds->copy));
		KMG_CK(kmg_expand_rows(ds->dstage[b], rows, ds->d, ds->dp,
							   ds->X + (size_t) ds->n * ds->dp, ds->copy));
	}
	if (ds->weighted)
		KMG_CK(cudaMemcpyAsync(ds->W + ds->n, ds->pin[b] + (size_t) ds->stage_rows * ds->d,
							   (size_t) rows * sizeof(float), cudaMemcpyHostToDevice,
							   ds->copy));
	KMG_CK(cudaEventRecord(ds->ev[b], ds->copy));
	ds->busy[b] = 1;
	ds->next = (b + 1) % KMG_NSTAGE;
	ds->n += rows;
done:
	return st;
}

/* Wait until every committed row is on the device. */
km_status
kmg_ds_sync(km_gpu_dataset *ds, km_error *err)
{
	cudaError_t e = cudaStreamSynchronize(ds->copy);

	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaStreamSynchronize (upload)");
	for (int b = 0; b < KMG_NSTAGE; b++)
		ds->busy[b] = 0;
	return KM_OK;
}

/* Copy rows [row0, row0 + rows) of host data through the staging buffers. */
km_status
kmg_ds_load(km_gpu_dataset *ds, const km_data *data, int64_t row0, int64_t rows,
			km_error *err)
{
	int64_t		base = 0;
	const int	d = ds->d;

	for (int c = 0; c < data->nchunks && rows > 0; c++)
	{
		const km_chunk *ch = &data->chunks[c];
		int64_t		off;

		if (row0 >= base + ch->n)
		{
			base += ch->n;
			continue;
		}
		off = row0 - base;
		while (off < ch->n && rows > 0)
		{
			int64_t		room = 0;
			float	   *w = NULL;
			float	   *x = kmg_ds_stage(ds, &room, &w, err);
			int64_t		m = ch->n - off;
			km_status	st;

			if (x == NULL)
				return err->status;
			if (m > room)
				m = room;
			if (m > rows)
				m = rows;
			memcpy(x, ch->x + (size_t) off * d, (size_t) m * d * sizeof(float));
			if (w != NULL)
			{
				if (ch->w != NULL)
					memcpy(w, ch->w + off, (size_t) m * sizeof(float));
				else
					for (int64_t i = 0; i < m; i++)
						w[i] = 1.0f;
			}
			if ((st = kmg_ds_commit(ds, m, err)) != KM_OK)
				return st;
			off += m;
			row0 += m;
			rows -= m;
		}
		base += ch->n;
	}
	return KM_OK;
}

/* Forget the rows (assign and map reuse one dataset for every batch). */
void
kmg_ds_reset(km_gpu_dataset *ds)
{
	ds->n = 0;
}

/* Rows committed so far. */
int64_t
kmg_ds_rows(const km_gpu_dataset *ds)
{
	return ds->n;
}

/* The dataset's rows as the drivers see them (after kmg_ds_sync). */
void
kmg_ds_rows_view(km_gpu_dataset *ds, kmg_rows *rows)
{
	rows->X = ds->X;
	rows->W = ds->weighted ? ds->W : NULL;
	rows->n = ds->n;
	rows->d = ds->d;
	rows->dp = ds->dp;
	rows->in_place = ds->internal;
}
