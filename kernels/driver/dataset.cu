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
 * (kmg_ds_load), so there is one upload path (kmg_ds_put).  The pinned
 * buffers are allocated when first staged: a dataset fed by a drain never
 * pays for them (cudaHostAlloc of 3 x 32 MB took 46 ms on an H200 host).
 *
 * A drain (kmg_ds_drain_*) feeds the dataset from a ring of blocks that
 * other processes fill in shared memory (km_ring, kmeans_gpu_cuda.h): the
 * ring is registered with CUDA, so each full block goes to the device by
 * DMA straight from where its writer left it, and a thread of this process
 * watches the ring, so the caller's thread (a backend running the query
 * whose workers write the rows) need not.  The thread blocks every signal
 * and calls nothing but CUDA and the dataset's own functions.
 */
#include "kmg_common.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KMG_NSTAGE 3
#define KMG_STAGE_BYTES ((size_t) 32 << 20)
#define KMG_DRAIN_INFLIGHT 32		/* block copies a drain keeps queued */
#define KMG_DRAIN_IDLE_NS 20000		/* a drain's first nap when no block is full */
#define KMG_DRAIN_IDLE_MAX_NS 200000	/* its longest, after idle passes in a row */

/* A drain of a ring into the dataset (kmg_ds_drain_start). */
typedef struct kmg_drain
{
	km_ring		ring;
	pthread_t	thread;
	int			device;
	int			registered;		/* ring.base is registered with CUDA */
	int			started;		/* the thread runs (until joined) */
	int			finish;			/* atomic: the writers are done */
	int			stop;			/* atomic: end now */
	int			positive_weight;
	km_status	status;
	km_error	err;
	float	   *dstage;			/* device: a block's rows, when d != dp */
	cudaEvent_t ev[KMG_DRAIN_INFLIGHT];
	uint32_t	inflight[KMG_DRAIN_INFLIGHT];	/* blocks being copied, oldest first */
	int			head;
	int			count;
} kmg_drain;

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
	kmg_drain  *drain;			/* a ring being drained into the rows, or NULL */
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
	kmg_ds_drain_stop(ds);
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
	if (ds->drain != NULL)
	{
		kmg_set_error(err, KM_ERR_INVALID, "the dataset is being drained from a ring");
		return NULL;
	}
	if (ds->pin[b] == NULL)
	{
		e = cudaHostAlloc((void **) &ds->pin[b],
						  (size_t) ds->stage_rows * (ds->d + 1) * sizeof(float),
						  cudaHostAllocDefault);
		if (e != cudaSuccess)
		{
			ds->pin[b] = NULL;
			if (e != cudaErrorMemoryAllocation)
			{
				kmg_cuda_error(err, e, "cudaHostAlloc (staging)");
				return NULL;
			}
			(void) cudaGetLastError();
			kmg_set_error(err, KM_ERR_NOMEM, "out of pinned host memory for staging");
			return NULL;
		}
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
 * Queue the copy of rows rows (x: rows x d floats, w: their weights when the
 * dataset is weighted) from pinned or registered host memory to the end of
 * the device rows, growing them when needed; through dstage (device, rows x
 * d floats) and the expand kernel when d != dp.  Returns at once; x, w and
 * dstage must stay untouched until the copy stream has passed the copy.
 */
static km_status
kmg_ds_put(km_gpu_dataset *ds, const float *x, const float *w, int64_t rows, float *dstage,
		   km_error *err)
{
	km_status	st = KM_OK;

	if (ds->n + rows >= INT32_MAX)
		return kmg_set_error(err, KM_ERR_INVALID,
							 "the GPU engine takes fewer than 2^31 rows");
	if (ds->n + rows > ds->cap && (st = kmg_ds_grow(ds, ds->n + rows, err)) != KM_OK)
		return st;
	if (ds->dp == ds->d)
		KMG_CK(cudaMemcpyAsync(ds->X + (size_t) ds->n * ds->dp, x,
							   (size_t) rows * ds->d * sizeof(float),
							   cudaMemcpyHostToDevice, ds->copy));
	else
	{
		KMG_CK(cudaMemcpyAsync(dstage, x, (size_t) rows * ds->d * sizeof(float),
							   cudaMemcpyHostToDevice, ds->copy));
		KMG_CK(kmg_expand_rows(dstage, rows, ds->d, ds->dp,
							   ds->X + (size_t) ds->n * ds->dp, ds->copy));
	}
	if (ds->weighted)
		KMG_CK(cudaMemcpyAsync(ds->W + ds->n, w, (size_t) rows * sizeof(float),
							   cudaMemcpyHostToDevice, ds->copy));
	ds->n += rows;
done:
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
	ds->cur = -1;
	if (rows == 0)
		return KM_OK;
	if ((st = kmg_ds_put(ds, ds->pin[b], ds->pin[b] + (size_t) ds->stage_rows * ds->d, rows,
						 ds->dstage[b], err)) != KM_OK)
		return st;
	KMG_CK(cudaEventRecord(ds->ev[b], ds->copy));
	ds->busy[b] = 1;
	ds->next = (b + 1) % KMG_NSTAGE;
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

/* ---- draining a ring (km_ring, kmeans_gpu_cuda.h) ---- */

static inline km_ring_block *
kmg_ring_block(const km_ring *ring, uint32_t b)
{
	return (km_ring_block *) (ring->base + ring->first + (size_t) b * ring->block_bytes);
}

/* The drain failed: keep the first error, and stop the writers. */
static void
kmg_drain_fail(kmg_drain *dr, km_status st)
{
	if (dr->status == KM_OK)
		dr->status = st;
	__atomic_store_n(dr->ring.failed, 1u, __ATOMIC_RELEASE);
}

/*
 * Queue the copy of block b (state FULL, or FILLING once the writers are
 * done) and mark it COPYING; a block without rows goes back FREE at once.
 */
static km_status
kmg_drain_issue(km_gpu_dataset *ds, kmg_drain *dr, uint32_t b)
{
	km_ring_block *blk = kmg_ring_block(&dr->ring, b);
	const char *rows = (const char *) blk + dr->ring.rows_offset;
	const int	slot = (dr->head + dr->count) % KMG_DRAIN_INFLIGHT;
	km_error   *err = &dr->err;
	km_status	st = KM_OK;

	if (blk->n == 0)
	{
		__atomic_store_n(&blk->state, KM_RING_FREE, __ATOMIC_RELEASE);
		return KM_OK;
	}
	if (blk->n < 0 || blk->n > dr->ring.block_rows)
		return kmg_set_error(err, KM_ERR_INVALID, "a block of the ring holds %lld rows, %lld at most",
							 (long long) blk->n, (long long) dr->ring.block_rows);
	if ((st = kmg_ds_put(ds, (const float *) rows,
						 (const float *) ((const char *) blk + dr->ring.weights_offset),
						 blk->n, dr->dstage, err)) != KM_OK)
		return st;
	KMG_CK(cudaEventRecord(dr->ev[slot], ds->copy));
	if (blk->positive_weight)
		dr->positive_weight = 1;
	__atomic_store_n(&blk->state, KM_RING_COPYING, __ATOMIC_RELAXED);
	dr->inflight[slot] = b;
	dr->count++;
done:
	return st;
}

/* Hand back FREE the blocks whose copies are done; false on an error. */
static km_status
kmg_drain_retire(kmg_drain *dr, int *progress)
{
	while (dr->count > 0)
	{
		cudaError_t e = cudaEventQuery(dr->ev[dr->head]);
		km_ring_block *blk;

		if (e == cudaErrorNotReady)
			break;
		if (e != cudaSuccess)
			return kmg_cuda_error(&dr->err, e, "cudaEventQuery (drain)");
		blk = kmg_ring_block(&dr->ring, dr->inflight[dr->head]);
		blk->n = 0;
		blk->positive_weight = 0;
		__atomic_store_n(&blk->state, KM_RING_FREE, __ATOMIC_RELEASE);
		dr->head = (dr->head + 1) % KMG_DRAIN_INFLIGHT;
		dr->count--;
		*progress = 1;
	}
	return KM_OK;
}

/*
 * The drain's thread: until told to stop, or until the writers are done
 * and every block with rows was copied, copy the full blocks (oldest copies
 * retired first, at most KMG_DRAIN_INFLIGHT queued), napping when there is
 * nothing to do: 20 us, doubled after each idle pass up to 200 us, so that
 * a slow scan (a table read from disk) does not keep a core polling.  The
 * copies are waited for before it returns, so that the ring's memory may go
 * once it is joined.
 */
static void *
kmg_drain_main(void *arg)
{
	km_gpu_dataset *ds = (km_gpu_dataset *) arg;
	kmg_drain  *dr = ds->drain;
	cudaError_t e = cudaSetDevice(dr->device);
	km_status	st = KM_OK;
	long		nap_ns = KMG_DRAIN_IDLE_NS;

	if (e != cudaSuccess)
		st = kmg_cuda_error(&dr->err, e, "cudaSetDevice (drain)");
	while (st == KM_OK && !__atomic_load_n(&dr->stop, __ATOMIC_ACQUIRE))
	{
		const int	finishing = __atomic_load_n(&dr->finish, __ATOMIC_ACQUIRE);
		int			progress = 0;
		int			issued = 0;

		if ((st = kmg_drain_retire(dr, &progress)) != KM_OK)
			break;
		for (uint32_t b = 0; b < dr->ring.nblocks && dr->count < KMG_DRAIN_INFLIGHT; b++)
		{
			uint32_t	state = __atomic_load_n(&kmg_ring_block(&dr->ring, b)->state,
												__ATOMIC_ACQUIRE);

			if (state == KM_RING_FULL || (finishing && state == KM_RING_FILLING))
			{
				if ((st = kmg_drain_issue(ds, dr, b)) != KM_OK)
					break;
				issued = progress = 1;
			}
		}
		if (st != KM_OK || (finishing && !issued && dr->count == 0))
			break;
		if (progress)
			nap_ns = KMG_DRAIN_IDLE_NS;
		else
		{
			struct timespec nap = {0, nap_ns};

			nanosleep(&nap, NULL);
			if (nap_ns < KMG_DRAIN_IDLE_MAX_NS)
				nap_ns *= 2;
		}
	}
	if (st != KM_OK)
		kmg_drain_fail(dr, st);
	e = cudaStreamSynchronize(ds->copy);
	if (e != cudaSuccess && dr->status == KM_OK)
		kmg_drain_fail(dr, kmg_cuda_error(&dr->err, e, "cudaStreamSynchronize (drain)"));
	return NULL;
}

/* Join the thread, then give back what the drain holds; the dataset keeps its rows. */
static void
kmg_drain_end(km_gpu_dataset *ds)
{
	kmg_drain  *dr = ds->drain;

	if (dr->started)
		(void) pthread_join(dr->thread, NULL);
	if (dr->registered)
		(void) cudaHostUnregister(dr->ring.base);
	for (int i = 0; i < KMG_DRAIN_INFLIGHT; i++)
		if (dr->ev[i] != NULL)
			(void) cudaEventDestroy(dr->ev[i]);
	if (dr->dstage != NULL)
		(void) cudaFree(dr->dstage);
	free(dr);
	ds->drain = NULL;
}

/*
 * Start draining ring into the dataset (km_gpu_api.dataset_drain_start):
 * register its memory, and start the thread with every signal blocked.
 */
km_status
kmg_ds_drain_start(km_gpu_dataset *ds, const km_ring *ring, km_error *err)
{
	kmg_drain  *dr;
	km_status	st = KM_OK;
	sigset_t	all,
				old;
	int			rc;

	if (ds->drain != NULL || ds->cur >= 0)
		return kmg_set_error(err, KM_ERR_INVALID, "the dataset is already being fed");
	if (ring->nblocks < 1 || ring->block_rows < 1 || ring->failed == NULL ||
		ring->rows_offset + (size_t) ring->block_rows * ds->d * sizeof(float) > ring->block_bytes ||
		(ds->weighted &&
		 ring->weights_offset + (size_t) ring->block_rows * sizeof(float) > ring->block_bytes) ||
		ring->first + (size_t) ring->nblocks * ring->block_bytes > ring->bytes)
		return kmg_set_error(err, KM_ERR_INVALID, "the ring's layout does not hold its blocks");
	dr = (kmg_drain *) calloc(1, sizeof(kmg_drain));
	if (dr == NULL)
		return kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
	ds->drain = dr;
	dr->ring = *ring;
	dr->status = KM_OK;
	KMG_CK(cudaGetDevice(&dr->device));
	for (int i = 0; i < KMG_DRAIN_INFLIGHT; i++)
		KMG_CK(cudaEventCreateWithFlags(&dr->ev[i], cudaEventDisableTiming));
	if (ds->dp != ds->d &&
		(st = kmg_ds_malloc((void **) &dr->dstage,
							(size_t) ring->block_rows * ds->d * sizeof(float),
							"the drain's staging buffer", err)) != KM_OK)
		goto done;
	{
		cudaError_t e = cudaHostRegister(ring->base, ring->bytes, cudaHostRegisterDefault);

		if (e != cudaSuccess)
		{
			/* memory CUDA cannot pin is no failure of the device: the caller reads otherwise */
			st = kmg_cuda_error(err, e, "cudaHostRegister (drain)");
			if (st != KM_ERR_DEVICE_FATAL)
			{
				(void) cudaGetLastError();
				st = kmg_set_error(err, KM_ERR_UNAVAILABLE,
								   "the ring's memory cannot be registered with CUDA: %s",
								   cudaGetErrorString(e));
			}
			goto done;
		}
	}
	dr->registered = 1;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&dr->thread, NULL, kmg_drain_main, ds);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "could not start the drain's thread (error %d)", rc);
		goto done;
	}
	dr->started = 1;
done:
	if (st != KM_OK)
		kmg_drain_end(ds);
	return st;
}

/*
 * The writers are done: copy what is left, wait for it, and end the drain
 * (km_gpu_api.dataset_drain_finish).
 */
km_status
kmg_ds_drain_finish(km_gpu_dataset *ds, int *positive_weight, km_error *err)
{
	kmg_drain  *dr = ds->drain;
	km_status	st;

	if (dr == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no drain runs");
	__atomic_store_n(&dr->finish, 1, __ATOMIC_RELEASE);
	if (dr->started)
	{
		(void) pthread_join(dr->thread, NULL);
		dr->started = 0;
	}
	st = dr->status;
	if (st != KM_OK)
		*err = dr->err;
	else
		*positive_weight = dr->positive_weight;
	kmg_drain_end(ds);
	return st;
}

/* End a drain at once, its rows left as they are (km_gpu_api.dataset_drain_stop). */
void
kmg_ds_drain_stop(km_gpu_dataset *ds)
{
	if (ds == NULL || ds->drain == NULL)
		return;
	__atomic_store_n(&ds->drain->stop, 1, __ATOMIC_RELEASE);
	kmg_drain_end(ds);
}
