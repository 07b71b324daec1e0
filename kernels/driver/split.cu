/*
 * split.cu
 *	  Split fits: one fit's rows spread over several (logical) devices,
 *	  streamed from host memory every iteration when they do not fit in
 *	  device memory, or kept on the device in half precision.
 *
 * One algorithm for all of them, the CPU engine's (src/engine/cpu_lloyd.c):
 * each iteration every device labels its rows exactly (the plan's labels
 * pass, assign/dispatch.cu), counts the rows that moved, and sums its rows
 * per cluster exactly, in the levels of km_xsum.h (update/xsums.cu); the
 * host adds the devices' level sums (exactly: the levels leave room for
 * every row), rounds each once, moves the centroids (km_step.h) and
 * re-seeds empty clusters with the farthest rows, ties to the smaller row
 * hash, as the CPU engine does.  So the model is the CPU engine's, bit for
 * bit, for the same rows and start, on any number of devices and however
 * the rows are split or streamed.  The caller seeds (the CPU engine's
 * seed(), run by run) and passes explicit start centroids.
 *
 * A logical device ("part") takes a contiguous range of the rows and works
 * through it in steps of `chunk` rows:
 *	- whole: float32 rows kept on the device, padded and prepared once (the
 *	  cosine copy normalised in place, the row norms); one step is all of
 *	  them;
 *	- half in memory: the rows kept as float16/bfloat16 (2 bytes a value),
 *	  each step converted to padded floats (prep/storage.cu) and prepared;
 *	- out of core: the rows stay in host memory (float32: the caller's rows,
 *	  page-locked for the call; half: a pinned copy at 2 bytes a value) and
 *	  each step is copied up on a copy stream into one of two buffers while
 *	  the step before it computes.
 * Steps of every device are queued round-robin from this one thread, so
 * the devices work at the same time; the host waits only at the end of an
 * iteration (and, between steps, for a buffer to come free, polling for
 * cancellation meanwhile).
 *
 * Memory: split_plan and split_fit size everything with the same function
 * (kmg_part_bytes, which counts the chunk's workspace with workspace.cu's
 * layout), so what the SQL layer is told is what is taken; every exit frees
 * every device and pinned allocation and unregisters the caller's rows.
 */
#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "update/update.cuh"
#include "km_step.h"

#include <algorithm>
#include <functional>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

/* Rows of one step: at least, at most, and at most this many bytes of rows. */
#define KMG_SPLIT_MIN_CHUNK ((int64_t) 4096)
#define KMG_SPLIT_MAX_CHUNK ((int64_t) 1 << 21)
#define KMG_SPLIT_CHUNK_BYTES ((uint64_t) 1 << 30)

/* Resident half rows are converted in steps of at most this many rows. */
#define KMG_SPLIT_HALF_CHUNK ((int64_t) 1 << 20)

/* What CUDA, CUB and alignment take besides what is counted. */
#define KMG_SPLIT_SLACK ((uint64_t) 32 << 20)

/* Level sums a plan counts on (most data need one or two; the fit uses the real number). */
#define KMG_SPLIT_PLAN_LEVELS 2

/* Caller's host chunks at least this large are page-locked for the call. */
#define KMG_SPLIT_REGISTER_MIN ((size_t) 1 << 20)

/* One logical device's share of a split fit. */
typedef struct kmg_part
{
	int			ordinal;
	kmg_device	dev;
	int64_t		row0;			/* its rows: [row0, row0 + n) of the data */
	int64_t		n;
	int64_t		chunk;			/* rows of one step */
	int			whole;			/* float32 rows on the device, one step */
	int			resident;		/* rows on the device (whole, or half) */
	cudaStream_t s;				/* compute */
	cudaStream_t cs;			/* copies up (out of core) */
	cudaEvent_t ready[2];		/* buffer b holds a step's rows */
	cudaEvent_t freed[2];		/* buffer b may be overwritten */
	cudaEvent_t done;			/* the part's work of the iteration */
	int64_t		inflight[2];	/* step of buffer b not yet seen done, or -1 */
	int64_t		pre[2];			/* step whose rows were sent ahead into buffer b, or -1 */
	kmg_shape	sh;				/* the workspace of one step */
	kmg_work	w;
	void	   *arena;			/* workspace, labels, rows, buffers */
	void	   *rows;			/* resident rows: n x dp floats (whole) or n x d halves */
	float	   *wres;			/* resident weights, or NULL */
	void	   *buf[2];			/* out of core: a step's rows (stored format, d a row) */
	float	   *wbuf[2];		/* ... and weights */
	float	   *xwork;			/* a step's rows as padded floats (not whole) */
	int32_t    *labels;			/* n */
	int		   *xst;			/* 4: km_xstats of the rows */
	unsigned long long *bad;	/* 1: first row a half storage cannot hold, + 1 */
	void	   *accmem;			/* device accumulators */
	kmg_xsum_acc acc;
	void	   *hpin;			/* pinned host: the accumulators' mirror */
	kmg_xsum_acc hacc;
	size_t		accbytes;
	void	   *peer;			/* home part: the other parts' accumulators, copied */
	double	   *rkeys;			/* re-seeding: a step's costs, sorted (taken when needed) */
	int32_t    *rrows;			/* ... and their rows */
	void	   *hrows;			/* out of core, half: the part's rows, pinned */
	float	   *hw;				/* ... and weights, pinned */
} kmg_part;

/* A split fit, assign or plan. */
typedef struct kmg_split
{
	const km_data *data;
	const km_hooks *hooks;
	km_gpu_layout L;
	int			np;
	kmg_part	part[KM_GPU_MAX_DEVICES];
	int64_t		n;
	int			d;
	int			dp;
	int			k;
	int			cosine;
	int			weighted;		/* some rows carry weights */
	int			unweighted;		/* some do not */
	int			bytes;			/* of a stored value */
	km_xlevels	xlev;
	km_xlevels	wlev;
	int			ishift;
	/* registered host chunks, to unregister */
	int			nreg;
	const void **reg;
	/* the host's side of the iterations (as km_cpu_state's) */
	double	   *sums;			/* nlx x k x d */
	double	   *wsum;			/* nlw x k */
	double	   *wsumr;			/* k */
	double	   *dtmp;			/* d */
	int64_t    *counts;			/* k */
	char	   *relocated;		/* k */
	int		   *empty;			/* k */
	int32_t    *chosen;			/* k: the old labels of the rows re-seeding takes */
	float	   *cent;			/* k x d */
	double	   *costs;			/* n, when re-seeding or for the inertia's fallback */
	int32_t    *hlabels;		/* n, likewise */
	struct kmg_far *cand;		/* re-seeding: the farthest rows of every step */
	int64_t		ncand;
	int64_t		capcand;
	int			want;			/* ... this many of each step, and their ties */
	double		t0;
	int			verbose;		/* KMG_VERBOSE=1: time the parts of an iteration apart */
	double		t_pass;			/* seconds in the iterations' passes */
	double		t_gather;		/* ... in adding the devices' sums */
	double		t_host;			/* ... and in the steps */
} kmg_split;

/* ---- the layout of a split ---- */

/*
 * Device bytes of a part of rows rows worked through in steps of chunk
 * rows (with nlx / nlw levels of sums); fills sh with the step's shape.
 */
static uint64_t
kmg_part_bytes(int64_t rows, int64_t chunk, int d, int k, int cosine, int weighted,
			   int storage, int out_of_core, int nlx, int nlw, const kmg_device *dev,
			   kmg_shape *sh)
{
	const int	dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	const uint64_t vb = (uint64_t) kmg_storage_bytes(storage);
	const uint64_t wb = weighted ? sizeof(float) : 0;
	uint64_t	b;

	kmg_make_shape(sh, chunk, d, k, cosine, 0, 0, NULL, 1, dev);
	kmg_shape_without_rows16(sh);
	b = kmg_layout(sh, NULL, NULL);
	b += KMG_ROUND_UP((uint64_t) rows * sizeof(int32_t), 256) + 1024;
	b += kmg_xsum_acc_bytes(k, d, nlx, nlw) + 256;
	if (out_of_core)
		b += (uint64_t) chunk * dp * sizeof(float) + 2 * (uint64_t) chunk * (d * vb + wb) + 1024;
	else if (storage == KM_STORAGE_FLOAT32)
		b += (uint64_t) rows * dp * sizeof(float) + (uint64_t) rows * wb + 512;
	else
		b += (uint64_t) rows * (d * vb + wb) + (uint64_t) chunk * dp * sizeof(float) + 512;
	return b + KMG_SPLIT_SLACK;
}

/*
 * What each logical device may use: the layout's limit, else the device's
 * free memory shared equally by the logical devices on it, less a
 * twentieth for other sessions' contexts.  Without a device the limit
 * alone (0: none).
 */
static uint64_t
kmg_part_budget(const km_gpu_layout *L, int i, int have_device)
{
	size_t		freeb = 0,
				total = 0;
	int			same = 0;

	if (L->memory_limit > 0)
		return L->memory_limit;
	if (!have_device || cudaSetDevice(L->devices[i]) != cudaSuccess ||
		cudaMemGetInfo(&freeb, &total) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return 0;
	}
	for (int j = 0; j < L->ndevices; j++)
		same += L->devices[j] == L->devices[i];
	return (uint64_t) (freeb - freeb / 20) / (uint64_t) same;
}

/*
 * Lay n rows out over the layout's devices (sp->part[i].row0, .n, .chunk,
 * .whole, .resident) and fill out; KM_ERR_DEVICE_NOMEM when some part
 * does not fit its budget.  Rows go to the parts in proportion to their
 * budgets; a step is as large as fits, within KMG_SPLIT_MAX_CHUNK rows and
 * KMG_SPLIT_CHUNK_BYTES, and at least KMG_SPLIT_MIN_CHUNK rows (out of
 * core, or half in memory) or the whole part (float32 in memory).
 */
static km_status
kmg_split_layout(kmg_split *sp, int64_t n, int d, int k, km_metric metric, int weighted,
				 const km_gpu_layout *L, int have_device, int nlx, int nlw, km_gpu_split *out,
				 km_error *err)
{
	uint64_t	budget[KM_GPU_MAX_DEVICES];
	double		btotal = 0.0;
	int64_t		given = 0;
	int			fits = 1;
	const int	cosine = metric == KM_METRIC_COSINE;
	const int	dp = KMG_ROUND_UP(d, KM_FILTER_DPAD);
	const uint64_t vb = (uint64_t) kmg_storage_bytes(L->storage);

	memset(out, 0, sizeof(*out));
	if (L->ndevices < 1 || L->ndevices > KM_GPU_MAX_DEVICES)
		return kmg_set_error(err, KM_ERR_INVALID, "%d devices: between 1 and %d", L->ndevices,
							 KM_GPU_MAX_DEVICES);
	if (L->storage != KM_STORAGE_FLOAT32 && L->storage != KM_STORAGE_FLOAT16 &&
		L->storage != KM_STORAGE_BFLOAT16)
		return kmg_set_error(err, KM_ERR_INVALID, "unknown storage %d", (int) L->storage);
	if (n < 1 || d < 1 || d > 32768 || k < 1)
		return kmg_set_error(err, KM_ERR_INVALID, "no rows, or a bad shape");
	for (int i = 0; i < L->ndevices; i++)
	{
		budget[i] = kmg_part_budget(L, i, have_device);
		if (budget[i] == 0)
			return kmg_set_error(err, KM_ERR_UNAVAILABLE,
								 "no usable GPU to plan for, and no memory limit");
		btotal += (double) budget[i];
	}
	out->chunk_rows = INT64_MAX;
	for (int i = 0; i < L->ndevices; i++)
	{
		kmg_part   *p = &sp->part[i];
		int64_t		rows = i == L->ndevices - 1 ? n - given :
			(int64_t) floor((double) n * ((double) budget[i] / btotal));
		kmg_device	lim;
		kmg_shape	sh;
		uint64_t	b;

		if (rows > n - given)
			rows = n - given;
		if (rows < 1 && n - given >= L->ndevices - i)
			rows = 1;			/* every logical device takes a row when there are enough */
		if (rows >= INT32_MAX)
			return kmg_set_error(err, KM_ERR_INVALID,
								 "a device takes fewer than 2^31 rows: list more devices");
		p->ordinal = L->devices[i];
		p->row0 = given;
		p->n = rows;
		given += rows;
		p->whole = !L->out_of_core && L->storage == KM_STORAGE_FLOAT32;
		p->resident = !L->out_of_core;
		if (have_device && kmg_device_limits(p->ordinal, &lim) == cudaSuccess)
			p->dev = lim;
		else
		{
			(void) cudaGetLastError();
			memset(&p->dev, 0, sizeof(p->dev));
			p->dev.ordinal = -1;
		}
		if (rows < 1)
			p->chunk = 1;		/* nothing to do: the pass skips it */
		else if (p->whole)
			p->chunk = rows;
		else
		{
			int64_t		c = KMG_SPLIT_MAX_CHUNK;
			const int64_t cb = (int64_t) (KMG_SPLIT_CHUNK_BYTES / ((uint64_t) dp * 4 + d * vb));

			if (c > cb)
				c = cb;
			if (!L->out_of_core && c > KMG_SPLIT_HALF_CHUNK)
				c = KMG_SPLIT_HALF_CHUNK;
			if (c < KMG_SPLIT_MIN_CHUNK)
				c = KMG_SPLIT_MIN_CHUNK;
			if (c > rows)
				c = rows > 0 ? rows : 1;
			/* halve the step until it fits, down to the least */
			while (c > KMG_SPLIT_MIN_CHUNK &&
				   kmg_part_bytes(rows, c, d, k, cosine, weighted, L->storage, L->out_of_core,
								  nlx, nlw, p->dev.ordinal >= 0 ? &p->dev : NULL, &sh) > budget[i])
				c = c / 2 > KMG_SPLIT_MIN_CHUNK ? c / 2 : KMG_SPLIT_MIN_CHUNK;
			p->chunk = c;
		}
		b = kmg_part_bytes(rows, p->chunk, d, k, cosine, weighted, L->storage, L->out_of_core,
						   nlx, nlw, p->dev.ordinal >= 0 ? &p->dev : NULL, &sh);
		if (i == 0)				/* the home part adds the others' sums: their copies */
			b += (uint64_t) (L->ndevices - 1) * (kmg_xsum_acc_bytes(k, d, nlx, nlw) + 256);
		out->rows[i] = rows;
		out->device_bytes[i] = b;
		out->budget[i] = budget[i];
		if (p->chunk < out->chunk_rows)
			out->chunk_rows = p->chunk;
		if (L->out_of_core && L->storage != KM_STORAGE_FLOAT32)
			out->pinned_bytes += (uint64_t) rows * (d * vb + (weighted ? 4 : 0));
		out->pinned_bytes += kmg_xsum_acc_bytes(k, d, nlx, nlw);
		if (b > budget[i])
			fits = 0;
	}
	sp->np = L->ndevices;
	if (!fits)
		return kmg_set_error(err, KM_ERR_DEVICE_NOMEM,
							 "the split does not fit: a device needs more than it may use");
	return KM_OK;
}

/* ---- host rows ---- */

/*
 * Copy rows [r0, r0 + m) of the host data up: values as dense rows of d
 * floats into x (or, with pad, into rows of dp floats, zeros past d),
 * weights into w (1 for rows without; w NULL: none).  Queued on stream s.
 */
static cudaError_t
kmg_split_upload(const kmg_split *sp, int64_t r0, int64_t m, float *x, int pad, float *w,
				 cudaStream_t s)
{
	int64_t		base = 0;
	const int	d = sp->d;
	cudaError_t e = cudaSuccess;

	for (int c = 0; c < sp->data->nchunks && m > 0 && e == cudaSuccess; c++)
	{
		const km_chunk *ch = &sp->data->chunks[c];
		int64_t		off,
					take;

		if (r0 >= base + ch->n)
		{
			base += ch->n;
			continue;
		}
		off = r0 - base;
		take = ch->n - off < m ? ch->n - off : m;
		if (pad)
			e = cudaMemcpy2DAsync(x, (size_t) sp->dp * sizeof(float), ch->x + (size_t) off * d,
								  (size_t) d * sizeof(float), (size_t) d * sizeof(float),
								  (size_t) take, cudaMemcpyHostToDevice, s);
		else
			e = cudaMemcpyAsync(x, ch->x + (size_t) off * d, (size_t) take * d * sizeof(float),
								cudaMemcpyHostToDevice, s);
		if (e == cudaSuccess && w != NULL)
		{
			if (ch->w != NULL)
				e = cudaMemcpyAsync(w, ch->w + off, (size_t) take * sizeof(float),
									cudaMemcpyHostToDevice, s);
			else				/* 1.0f, written as its bits */
				e = kmg_fill_int((int32_t *) w, take, 0x3f800000, 0, s);
		}
		x += (size_t) take * (pad ? sp->dp : d);
		if (w != NULL)
			w += take;
		r0 += take;
		m -= take;
		base += ch->n;
	}
	return e;
}

/* The host row r (values and weight). */
static const float *
kmg_split_row(const kmg_split *sp, int64_t r, float *w)
{
	int64_t		base = 0;

	for (int c = 0; c < sp->data->nchunks; c++)
	{
		const km_chunk *ch = &sp->data->chunks[c];

		if (r < base + ch->n)
		{
			*w = ch->w != NULL ? ch->w[r - base] : 1.0f;
			return ch->x + (size_t) (r - base) * sp->d;
		}
		base += ch->n;
	}
	*w = 1.0f;
	return NULL;
}

/*
 * Page-lock the caller's large chunks for the call, so that copies run at
 * the bus's rate (pageable memory moves about 20 times slower).  A chunk
 * that cannot be registered is simply copied from pageable memory.
 */
static void
kmg_split_register(kmg_split *sp)
{
	sp->reg = (const void **) kmg_host_alloc(sp->hooks, sizeof(void *) * 2 * sp->data->nchunks);
	if (sp->reg == NULL)
		return;
	for (int c = 0; c < sp->data->nchunks; c++)
	{
		const km_chunk *ch = &sp->data->chunks[c];
		const void *ptrs[2] = {ch->x, ch->w};
		const size_t lens[2] = {(size_t) ch->n * sp->d * sizeof(float),
		(size_t) ch->n * sizeof(float)};

		for (int q = 0; q < 2; q++)
		{
			if (ptrs[q] == NULL || lens[q] < KMG_SPLIT_REGISTER_MIN)
				continue;
			if (cudaHostRegister((void *) ptrs[q], lens[q], cudaHostRegisterPortable) == cudaSuccess)
				sp->reg[sp->nreg++] = ptrs[q];
			else
				(void) cudaGetLastError();
		}
	}
}

static void
kmg_split_unregister(kmg_split *sp)
{
	for (int i = 0; i < sp->nreg; i++)
		(void) cudaHostUnregister((void *) sp->reg[i]);
	sp->nreg = 0;
	kmg_host_free(sp->hooks, sp->reg);
	sp->reg = NULL;
}

/* ---- a part's memory ---- */

/* The next bytes of a part's allocation, 256-byte aligned. */
static char *
kmg_take(char *base, size_t *off, size_t bytes)
{
	char	   *p = base + *off;

	*off += KMG_ROUND_UP(bytes, 256);
	return p;
}

/* Free everything of a part (on its device). */
static void
kmg_part_free(kmg_part *p)
{
	if (p->ordinal < 0 || cudaSetDevice(p->ordinal) != cudaSuccess)
		return;
	if (p->s != NULL)
		(void) cudaStreamSynchronize(p->s);
	if (p->cs != NULL)
		(void) cudaStreamSynchronize(p->cs);
	for (int b = 0; b < 2; b++)
	{
		if (p->ready[b] != NULL)
			(void) cudaEventDestroy(p->ready[b]);
		if (p->freed[b] != NULL)
			(void) cudaEventDestroy(p->freed[b]);
	}
	if (p->done != NULL)
		(void) cudaEventDestroy(p->done);
	if (p->s != NULL)
		(void) cudaStreamDestroy(p->s);
	if (p->cs != NULL)
		(void) cudaStreamDestroy(p->cs);
	if (p->arena != NULL)
		(void) cudaFree(p->arena);
	if (p->accmem != NULL)
		(void) cudaFree(p->accmem);
	if (p->peer != NULL)
		(void) cudaFree(p->peer);
	if (p->rkeys != NULL)
		(void) cudaFree(p->rkeys);
	if (p->rrows != NULL)
		(void) cudaFree(p->rrows);
	if (p->hpin != NULL)
		(void) cudaFreeHost(p->hpin);
	if (p->hrows != NULL)
		(void) cudaFreeHost(p->hrows);
	if (p->hw != NULL)
		(void) cudaFreeHost(p->hw);
	memset(p, 0, sizeof(*p));
	p->ordinal = -1;
}

/*
 * A part's allocation: the step's workspace (workspace.cu's layout), then
 * its labels, the resident rows or the stream buffers and the float copy
 * of a step, the statistics; its streams and events.
 */
static km_status
kmg_part_alloc(kmg_split *sp, kmg_part *p, km_error *err)
{
	km_status	st = KM_OK;
	size_t		off,
				total;
	const int	d = sp->d,
				dp = sp->dp;
	const size_t wb = sp->weighted ? sizeof(float) : 0;
	char	   *base;

	KMG_CK(cudaSetDevice(p->ordinal));
	kmg_make_shape(&p->sh, p->chunk, d, sp->k, sp->cosine, 0, 0, NULL, 1, &p->dev);
	kmg_shape_without_rows16(&p->sh);
	KMG_CK(kmg_assign_prepare(&p->sh.plan, &p->dev));
	off = KMG_ROUND_UP(kmg_layout(&p->sh, NULL, NULL), 256);
	total = off + KMG_ROUND_UP((size_t) p->n * sizeof(int32_t), 256) + 256;
	if (p->whole)
		total += KMG_ROUND_UP((size_t) p->n * dp * sizeof(float), 256) +
			KMG_ROUND_UP((size_t) p->n * wb, 256);
	else if (p->resident)
		total += KMG_ROUND_UP((size_t) p->n * d * sp->bytes, 256) +
			KMG_ROUND_UP((size_t) p->n * wb, 256) +
			KMG_ROUND_UP((size_t) p->chunk * dp * sizeof(float), 256);
	else
		total += KMG_ROUND_UP((size_t) p->chunk * dp * sizeof(float), 256) +
			2 * (KMG_ROUND_UP((size_t) p->chunk * d * sp->bytes, 256) +
				 KMG_ROUND_UP((size_t) p->chunk * wb, 256));
	if ((st = kmg_alloc_arena(&p->arena, total, "a split fit's part", err)) != KM_OK)
		goto done;
	base = (char *) p->arena;
	kmg_layout(&p->sh, base, &p->w);
	p->labels = (int32_t *) kmg_take(base, &off, (size_t) p->n * sizeof(int32_t));
	p->xst = (int *) kmg_take(base, &off, 4 * sizeof(int) + sizeof(unsigned long long));
	p->bad = (unsigned long long *) (p->xst + 4);
	if (p->whole)
	{
		p->rows = (void *) kmg_take(base, &off, (size_t) p->n * dp * sizeof(float));
		if (wb)
			p->wres = (float *) kmg_take(base, &off, (size_t) p->n * wb);
	}
	else if (p->resident)
	{
		p->rows = (void *) kmg_take(base, &off, (size_t) p->n * d * sp->bytes);
		if (wb)
			p->wres = (float *) kmg_take(base, &off, (size_t) p->n * wb);
		p->xwork = (float *) kmg_take(base, &off, (size_t) p->chunk * dp * sizeof(float));
	}
	else
	{
		p->xwork = (float *) kmg_take(base, &off, (size_t) p->chunk * dp * sizeof(float));
		for (int b = 0; b < 2; b++)
		{
			p->buf[b] = (void *) kmg_take(base, &off, (size_t) p->chunk * d * sp->bytes);
			if (wb)
				p->wbuf[b] = (float *) kmg_take(base, &off, (size_t) p->chunk * wb);
		}
	}
	KMG_CK(cudaStreamCreateWithFlags(&p->s, cudaStreamNonBlocking));
	KMG_CK(cudaStreamCreateWithFlags(&p->cs, cudaStreamNonBlocking));
	for (int b = 0; b < 2; b++)
	{
		KMG_CK(cudaEventCreateWithFlags(&p->ready[b], cudaEventDisableTiming));
		KMG_CK(cudaEventCreateWithFlags(&p->freed[b], cudaEventDisableTiming));
		p->inflight[b] = -1;
		p->pre[b] = -1;
	}
	KMG_CK(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));

	/* the step's arguments that never change */
	p->w.a.d = d;
	p->w.a.dp = dp;
	p->w.a.k = sp->k;
	p->w.a.kp = p->sh.kp;
	p->w.a.cosine = sp->cosine;
	p->w.a.lloyd = 0;
	p->w.a.mu = NULL;
	p->w.a.Cf = sp->cosine ? p->w.a.Cf : p->w.a.C;
	p->w.a.ishift = KM_FIX_UNSET;
	KMG_CK(cudaMemsetAsync(p->w.a.ctl, 0, sizeof(kmg_ctl), p->s));
	KMG_CK(cudaMemsetAsync(p->w.a.C, 0, (size_t) p->sh.kp * dp * sizeof(float), p->s));
	if (p->w.a.Cf != p->w.a.C)
		KMG_CK(cudaMemsetAsync(p->w.a.Cf, 0, (size_t) p->sh.kp * dp * sizeof(float), p->s));
	KMG_CK(cudaMemsetAsync(p->w.a.reloc, 0, (size_t) sp->k * sizeof(int), p->s));
	KMG_CK(kmg_fill_int(p->w.iota, p->chunk, 0, 1, p->s));
done:
	return st;
}

/* The accumulators (device and pinned mirror), once the levels are known. */
static km_status
kmg_part_acc(kmg_split *sp, kmg_part *p, km_error *err)
{
	km_status	st = KM_OK;

	KMG_CK(cudaSetDevice(p->ordinal));
	p->accbytes = kmg_xsum_acc_bytes(sp->k, sp->d, sp->xlev.n, sp->wlev.n);
	if ((st = kmg_alloc_arena(&p->accmem, p->accbytes, "a split fit's sums", err)) != KM_OK)
		goto done;
	KMG_CK(cudaHostAlloc(&p->hpin, p->accbytes, cudaHostAllocDefault));
	kmg_xsum_acc_carve(&p->acc, p->accmem, sp->k, sp->d, sp->xlev.n, sp->wlev.n);
	kmg_xsum_acc_carve(&p->hacc, p->hpin, sp->k, sp->d, sp->xlev.n, sp->wlev.n);
	p->acc.xlev = p->hacc.xlev = sp->xlev;
	p->acc.wlev = p->hacc.wlev = sp->wlev;
	if (p == &sp->part[0] && sp->np > 1)
	{
		/* the home part adds the others' sums: room for their copies, and direct peer copies */
		if ((st = kmg_alloc_arena(&p->peer, p->accbytes * (sp->np - 1), "a split fit's sums",
								  err)) != KM_OK)
			goto done;
		for (int i = 1; i < sp->np; i++)
		{
			int			can = 0;
			const int	o = sp->part[i].ordinal;

			if (o == p->ordinal || cudaDeviceCanAccessPeer(&can, p->ordinal, o) != cudaSuccess || !can)
				continue;
			if (cudaSetDevice(p->ordinal) == cudaSuccess)
				(void) cudaDeviceEnablePeerAccess(o, 0);
			if (cudaSetDevice(o) == cudaSuccess)
				(void) cudaDeviceEnablePeerAccess(p->ordinal, 0);
			(void) cudaGetLastError();	/* "already enabled" is fine */
		}
	}
done:
	return st;
}

/* ---- steps ---- */

/*
 * The arguments of step [off, off + m) of part p, its rows in X (padded
 * floats) and weights in W.
 */
static kmg_args
kmg_step_args(const kmg_part *p, const float *X, const float *W, int64_t m)
{
	kmg_args	a = p->w.a;

	a.X = X;
	a.W = W;
	a.n = m;
	return a;
}

/*
 * Wait for an event, polling the caller for cancellation meanwhile (the
 * only places a long iteration waits): yielding at first, so that the end
 * of an iteration is seen at once, then sleeping 100 us at a time.
 */
static km_status
kmg_wait_event(const kmg_split *sp, cudaEvent_t ev, km_error *err)
{
	const double t0 = kmg_now();

	for (int spins = 0;; spins++)
	{
		const cudaError_t e = cudaEventQuery(ev);

		if (e == cudaSuccess)
			return KM_OK;
		if (e != cudaErrorNotReady)
			return kmg_cuda_error(err, e, "cudaEventQuery");
		if ((spins & 255) == 0 && sp->hooks != NULL && sp->hooks->poll != NULL &&
			sp->hooks->poll(sp->hooks->ctx))
			return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
		if (kmg_now() - t0 < 0.05)
			sched_yield();
		else
			usleep(100);
	}
}

/*
 * Queue the copy of step's rows (out of core) into buffer step & 1 on the
 * copy stream, once the step that last used the buffer is done with it;
 * ready[b] marks their arrival.
 */
static km_status
kmg_step_send(kmg_split *sp, kmg_part *p, int64_t step, km_error *err)
{
	km_status	st = KM_OK;
	const int	b = (int) (step & 1);
	const int64_t off = step * p->chunk;
	const int64_t m = p->n - off < p->chunk ? p->n - off : p->chunk;
	const int	d = sp->d;

	KMG_CK(cudaStreamWaitEvent(p->cs, p->freed[b], 0));
	if (sp->L.storage == KM_STORAGE_FLOAT32)
		KMG_CK(kmg_split_upload(sp, p->row0 + off, m, (float *) p->buf[b], 0, p->wbuf[b], p->cs));
	else
	{
		KMG_CK(cudaMemcpyAsync(p->buf[b], (const char *) p->hrows + (size_t) off * d * sp->bytes,
							   (size_t) m * d * sp->bytes, cudaMemcpyHostToDevice, p->cs));
		if (p->wbuf[b] != NULL)
			KMG_CK(cudaMemcpyAsync(p->wbuf[b], p->hw + off, (size_t) m * sizeof(float),
								   cudaMemcpyHostToDevice, p->cs));
	}
	KMG_CK(cudaEventRecord(p->ready[b], p->cs));
done:
	return st;
}

/*
 * Bring step [off, off + m) of part p to padded floats on its compute
 * stream and return them (X, W): a whole part's rows are there already; a
 * half part's are converted; an out-of-core part's are copied up into
 * buffer b on the copy stream (after the step that last used b), then
 * converted.  prep: the row norms (and cosine's normalisation in place).
 */
static km_status
kmg_step_rows(kmg_split *sp, kmg_part *p, int64_t step, int64_t off, int64_t m, int prep,
			  const float **X, const float **W, km_error *err)
{
	km_status	st = KM_OK;
	const int	d = sp->d,
				dp = sp->dp;
	const int	b = (int) (step & 1);
	const void *src = NULL;

	*X = NULL;
	*W = NULL;
	if (p->whole)
	{
		*X = (const float *) p->rows + (size_t) off * dp;
		*W = p->wres != NULL ? p->wres + off : NULL;
		return KM_OK;
	}
	if (p->resident)
	{
		src = (const char *) p->rows + (size_t) off * d * sp->bytes;
		*W = p->wres != NULL ? p->wres + off : NULL;
	}
	else
	{
		/* buffer b: free once the step two before is done with it */
		if (p->inflight[b] >= 0)
		{
			if ((st = kmg_wait_event(sp, p->freed[b], err)) != KM_OK)
				goto done;
			p->inflight[b] = -1;
		}
		if (p->pre[b] == step)
			p->pre[b] = -1;		/* sent ahead at the end of the last pass */
		else if ((st = kmg_step_send(sp, p, step, err)) != KM_OK)
			goto done;
		KMG_CK(cudaStreamWaitEvent(p->s, p->ready[b], 0));
		src = p->buf[b];
		*W = p->wbuf[b];
	}
	*X = p->xwork;
	/* padded floats, and the norms (l2: in the same read; cosine: normalised as prep.cu does) */
	if (prep && !sp->cosine)
		KMG_CK(kmg_rows_from_storage_norms(src, sp->L.storage, m, d, dp, p->xwork,
										   (float *) p->w.a.xnorm, p->s));
	else
	{
		KMG_CK(kmg_rows_from_storage(src, sp->L.storage, m, d, dp, p->xwork, p->s));
		if (prep)
			KMG_CK(kmg_prep_rows(p->xwork, *W, m, d, dp, sp->cosine, p->xwork,
								 (float *) p->w.a.xnorm, NULL, p->s));
	}
done:
	return st;
}

/* The step's buffer is free again once the compute stream gets here. */
static km_status
kmg_step_end(kmg_part *p, int64_t step, km_error *err)
{
	km_status	st = KM_OK;
	const int	b = (int) (step & 1);

	if (!p->resident)
	{
		KMG_CK(cudaEventRecord(p->freed[b], p->s));
		p->inflight[b] = step;
	}
done:
	return st;
}

/* What a pass over every part's rows does with each step. */
enum
{
	KMG_SPASS_SETUP = 0,		/* bounds of the terms, row statistics */
	KMG_SPASS_ITER = 1,			/* labels, moved, exact sums */
	KMG_SPASS_FINAL = 2,		/* labels (unless settled), counts, inertia words */
	KMG_SPASS_COSTS = 3,		/* every row's exact cost to the host */
	KMG_SPASS_FAR = 4			/* each step's farthest rows to the host */
};

static km_status kmg_step_far(kmg_split *sp, kmg_part *p, const kmg_args *a, int64_t off,
							  km_error *err);

/*
 * One step of a pass on part p, rows [off, off + m) as (X, W).  The
 * iteration's labels land in the step's scratch and are compared with the
 * part's; the final pass labels the part's array directly.
 */
static km_status
kmg_step_work(kmg_split *sp, kmg_part *p, int mode, int relabel, int64_t off, int64_t m,
			  const float *X, const float *W, kmg_row_stats *rst, km_error *err)
{
	km_status	st = KM_OK;
	kmg_args	a = kmg_step_args(p, X, W, m);

	if (mode == KMG_SPASS_SETUP)
	{
		kmg_row_stats one;

		KMG_CK(kmg_row_stats_run(X, W, m, sp->d, sp->dp, 0, p->w.stats_work, NULL, &one, p->s));
		rst->sqsum += one.sqsum;
		rst->xmax2 = fmaxf(rst->xmax2, one.xmax2);
		rst->wmax = fmaxf(rst->wmax, one.wmax);
		rst->xabsmax = fmaxf(rst->xabsmax, one.xabsmax);
		return KM_OK;
	}
	if (mode == KMG_SPASS_FINAL || mode == KMG_SPASS_COSTS || mode == KMG_SPASS_FAR)
		a.labels = p->labels + off;
	if (mode != KMG_SPASS_COSTS && mode != KMG_SPASS_FAR && relabel)
	{
		kmg_assign_plan plan = p->sh.plan;

		if (m != p->chunk)
		{
			/* a shorter last step has a plan of its own */
			plan = kmg_assign_make_plan(m, sp->d, sp->dp, sp->k, KMG_MODE_LABELS, &p->dev);
			KMG_CK(kmg_assign_prepare(&plan, &p->dev));
		}
		KMG_CK(kmg_assign_pass(&a, &plan, KMG_MODE_LABELS, p->w.filter_work, p->s));
	}
	/* an iteration of the filter path reports the filter's estimate: no exact costs */
	if (mode != KMG_SPASS_ITER || kmg_plan_fused(&p->sh.plan))
		KMG_CK(kmg_row_costs(&a, p->s));
	if (mode == KMG_SPASS_FAR)
		return kmg_step_far(sp, p, &a, off, err);
	if (mode == KMG_SPASS_COSTS)
	{
		KMG_CK(cudaMemcpyAsync(sp->costs + p->row0 + off, a.cost, (size_t) m * sizeof(double),
							   cudaMemcpyDeviceToHost, p->s));
		return KM_OK;
	}
	if (mode == KMG_SPASS_ITER)
		KMG_CK(kmg_moved(a.labels, p->labels + off, m, p->acc.moved, p->s));
	KMG_CK(kmg_sort_labels(&a, p->w.iota, p->w.sort_temp, p->sh.sort_bytes, p->s));
	KMG_CK(kmg_xsums(&a, &p->acc, mode == KMG_SPASS_FINAL ? KMG_XSUMS_FINAL :
					 kmg_plan_fused(&p->sh.plan) ? KMG_XSUMS_COST : KMG_XSUMS_ESTIMATE, p->s));
done:
	return st;
}

/* A candidate for re-seeding: farthest first, then the smaller hash, then the row. */
typedef struct kmg_far
{
	double		cost;
	uint64_t	hash;
	int64_t		row;
} kmg_far;

/*
 * Re-seeding's share of one step: its rows by decreasing exact cost (a.cost,
 * ties to the lower row), and the first sp->want of them, with every row
 * tied with the last, onto sp->cand.  Only these can be among the farthest
 * rows of all.
 */
static km_status
kmg_step_far(kmg_split *sp, kmg_part *p, const kmg_args *a, int64_t off, km_error *err)
{
	km_status	st = KM_OK;
	const int64_t m = a->n;
	int64_t		q = sp->want + 32 < m ? sp->want + 32 : m;
	double	   *keys = NULL;
	int32_t    *rows = NULL;

	if (p->rkeys == NULL)
	{
		KMG_CK(cudaMalloc((void **) &p->rkeys, (size_t) p->chunk * sizeof(double)));
		KMG_CK(cudaMalloc((void **) &p->rrows, (size_t) p->chunk * sizeof(int32_t)));
	}
	KMG_CK(kmg_sort_costs_desc(a->cost, p->rkeys, p->w.iota, p->rrows, m, p->w.sort_temp,
							   p->sh.sort_bytes, p->s));
	for (;;)
	{
		keys = (double *) kmg_host_alloc(sp->hooks, (size_t) q * sizeof(double));
		rows = (int32_t *) kmg_host_alloc(sp->hooks, (size_t) q * sizeof(int32_t));
		if (keys == NULL || rows == NULL)
		{
			st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
			goto done;
		}
		KMG_CK(cudaMemcpyAsync(keys, p->rkeys, (size_t) q * sizeof(double), cudaMemcpyDeviceToHost, p->s));
		KMG_CK(cudaMemcpyAsync(rows, p->rrows, (size_t) q * sizeof(int32_t), cudaMemcpyDeviceToHost, p->s));
		KMG_CK(cudaStreamSynchronize(p->s));
		/* ties with the want-th row may go on past what came: fetch more */
		if (q == m || q <= sp->want || keys[q - 1] != keys[sp->want - 1])
			break;
		kmg_host_free(sp->hooks, keys);
		kmg_host_free(sp->hooks, rows);
		keys = NULL;
		rows = NULL;
		q = 2 * q < m ? 2 * q : m;
	}
	for (int64_t i = 0; i < q; i++)
	{
		if (i >= sp->want && keys[i] != keys[sp->want - 1])
			break;
		if (sp->ncand == sp->capcand)
		{
			const int64_t cap = sp->capcand > 0 ? 2 * sp->capcand : 1024;
			kmg_far    *c = (kmg_far *) kmg_host_alloc(sp->hooks, (size_t) cap * sizeof(kmg_far));

			if (c == NULL)
			{
				st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
				goto done;
			}
			if (sp->ncand > 0)
				memcpy(c, sp->cand, (size_t) sp->ncand * sizeof(kmg_far));
			kmg_host_free(sp->hooks, sp->cand);
			sp->cand = c;
			sp->capcand = cap;
		}
		sp->cand[sp->ncand].cost = keys[i];
		sp->cand[sp->ncand].hash = 0;
		sp->cand[sp->ncand].row = p->row0 + off + rows[i];
		sp->ncand++;
	}
done:
	kmg_host_free(sp->hooks, keys);
	kmg_host_free(sp->hooks, rows);
	return st;
}

/* Bytes of the accumulators past the level sums of the rows (from acc.ws on). */
static size_t
kmg_acc_tail(const kmg_split *sp)
{
	return sp->part[0].accbytes - (size_t) sp->xlev.n * sp->k * sp->d * sizeof(double);
}

/*
 * One pass over every part's rows: the parts' steps queued round-robin
 * (so the devices work at once), then, for the iteration and the final
 * pass, each part's accumulators copied to its pinned mirror; returns when
 * all of it is done.  relabel: the final pass labels the rows again.
 */
static km_status
kmg_split_pass(kmg_split *sp, int mode, int relabel, kmg_row_stats *rst, km_error *err)
{
	km_status	st = KM_OK;
	int64_t		step = 0;
	int			more = 1;

	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		if (mode == KMG_SPASS_ITER || mode == KMG_SPASS_FINAL)
			KMG_CK(cudaMemsetAsync(p->accmem, 0, p->accbytes, p->s));
	}
	while (more)
	{
		more = 0;
		for (int i = 0; i < sp->np; i++)
		{
			kmg_part   *p = &sp->part[i];
			const int64_t off = step * p->chunk;
			const int64_t m = p->n - off < p->chunk ? p->n - off : p->chunk;
			const float *X,
					   *W;

			if (m <= 0 || (mode == KMG_SPASS_SETUP && p->whole))
				continue;		/* a whole part's set-up is kmg_split_setup's */
			more = 1;
			KMG_CK(cudaSetDevice(p->ordinal));
			/* a whole part's rows were prepared once; others each step */
			if ((st = kmg_step_rows(sp, p, step, off, m, mode != KMG_SPASS_SETUP, &X, &W,
									err)) != KM_OK)
				goto done;
			if (mode == KMG_SPASS_SETUP && !p->whole)
			{
				/* the raw rows' bounds, then the prepared rows' statistics */
				KMG_CK(kmg_xstats_rows(X, W, m, sp->d, sp->dp, sp->cosine, p->xst, p->s));
				KMG_CK(kmg_prep_rows(p->xwork, W, m, sp->d, sp->dp, sp->cosine, p->xwork,
									 (float *) p->w.a.xnorm, NULL, p->s));
			}
			if ((st = kmg_step_work(sp, p, mode, relabel, off, m, X, W, rst, err)) != KM_OK ||
				(st = kmg_step_end(p, step, err)) != KM_OK)
				goto done;
		}
		step++;
		if (sp->hooks != NULL && sp->hooks->poll != NULL && sp->hooks->poll(sp->hooks->ctx))
		{
			st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			goto done;
		}
	}
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		if (mode == KMG_SPASS_FINAL)
			KMG_CK(cudaMemcpyAsync(p->hacc.ws, p->acc.ws, kmg_acc_tail(sp), cudaMemcpyDeviceToHost,
								   p->s));
		KMG_CK(cudaEventRecord(p->done, p->s));
	}
	/*
	 * Out of core, every pass reads the same rows in the same order: the
	 * next pass's first two steps go up now, behind this pass's last ones,
	 * so that the device does not wait for them while the host decides.
	 */
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		for (int b = 0; b < 2; b++)
			p->inflight[b] = -1;
		if (p->resident)
			continue;
		KMG_CK(cudaSetDevice(p->ordinal));
		for (int64_t step2 = 0; step2 < 2 && step2 * p->chunk < p->n; step2++)
		{
			if ((st = kmg_step_send(sp, p, step2, err)) != KM_OK)
				goto done;
			p->pre[step2] = step2;
		}
	}
	/* an iteration's sums are gathered on the home device (kmg_split_gather) */
	if (mode != KMG_SPASS_ITER)
		for (int i = 0; i < sp->np; i++)
		{
			kmg_part   *p = &sp->part[i];

			KMG_CK(cudaSetDevice(p->ordinal));
			if ((st = kmg_wait_event(sp, p->done, err)) != KM_OK)
				goto done;
		}
done:
	return st;
}

/* ---- setting up ---- */

/*
 * The parts' rows on their devices (resident parts), then one pass that
 * learns the bounds of the exact sums' terms (km_xstats, merged over the
 * parts, then the levels) and the statistics of the final inertia's scale,
 * as the one-device fit takes them (workspace.cu, kmg_rows_setup).  A whole
 * part is prepared here once: its row norms, and cosine's normalisation in
 * place after the bounds were taken on the raw rows.
 */
static km_status
kmg_split_setup(kmg_split *sp, km_error *err)
{
	km_status	st = KM_OK;
	kmg_row_stats rst;
	km_xstats	xs;
	const int	init4[4] = {-100000, 100000, -100000, 100000};
	const unsigned long long nobad = ULLONG_MAX;

	memset(&rst, 0, sizeof(rst));
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaMemcpyAsync(p->xst, init4, sizeof(init4), cudaMemcpyHostToDevice, p->s));
		KMG_CK(cudaMemcpyAsync(p->bad, &nobad, sizeof(nobad), cudaMemcpyHostToDevice, p->s));
		KMG_CK(kmg_fill_int(p->labels, p->n, -1, 0, p->s));
		if (p->whole)
		{
			KMG_CK(cudaMemsetAsync(p->rows, 0, (size_t) p->n * sp->dp * sizeof(float), p->s));
			KMG_CK(kmg_split_upload(sp, p->row0, p->n, (float *) p->rows, 1, p->wres, p->s));
			KMG_CK(kmg_xstats_rows((const float *) p->rows, p->wres, p->n, sp->d, sp->dp,
								   sp->cosine, p->xst, p->s));
			KMG_CK(kmg_prep_rows((float *) p->rows, p->wres, p->n, sp->d, sp->dp, sp->cosine,
								 (float *) p->rows, (float *) p->w.a.xnorm, NULL, p->s));
		}
		else if (p->resident)
		{
			/* up as floats a step at a time, then down to 2 bytes a value */
			for (int64_t off = 0; off < p->n; off += p->chunk)
			{
				const int64_t m = p->n - off < p->chunk ? p->n - off : p->chunk;

				KMG_CK(kmg_split_upload(sp, p->row0 + off, m, p->xwork, 0,
										p->wres != NULL ? p->wres + off : NULL, p->s));
				KMG_CK(kmg_rows_to_storage(p->xwork, m, sp->d, sp->L.storage,
										   (char *) p->rows + (size_t) off * sp->d * sp->bytes,
										   p->bad, p->s));
			}
		}
		else if (sp->L.storage != KM_STORAGE_FLOAT32)
		{
			/* out of core at 2 bytes a value: the pinned copy, converted on the device */
			const size_t vb = (size_t) sp->d * sp->bytes;

			KMG_CK(cudaHostAlloc(&p->hrows, (size_t) p->n * vb > 0 ? (size_t) p->n * vb : 1,
								 cudaHostAllocDefault));
			if (sp->weighted)
				KMG_CK(cudaHostAlloc((void **) &p->hw, (size_t) p->n * sizeof(float),
									 cudaHostAllocDefault));
			for (int64_t off = 0; off < p->n; off += p->chunk)
			{
				const int64_t m = p->n - off < p->chunk ? p->n - off : p->chunk;

				KMG_CK(kmg_split_upload(sp, p->row0 + off, m, p->xwork, 0, p->wbuf[0], p->s));
				KMG_CK(kmg_rows_to_storage(p->xwork, m, sp->d, sp->L.storage, p->buf[0], p->bad,
										   p->s));
				KMG_CK(cudaMemcpyAsync((char *) p->hrows + (size_t) off * vb, p->buf[0], (size_t) m * vb,
									   cudaMemcpyDeviceToHost, p->s));
				if (p->hw != NULL)
					KMG_CK(cudaMemcpyAsync(p->hw + off, p->wbuf[0], (size_t) m * sizeof(float),
										   cudaMemcpyDeviceToHost, p->s));
			}
		}
	}
	/* rows a half storage cannot hold exactly: the caller should have rounded them */
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];
		unsigned long long bad = ULLONG_MAX;

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaMemcpyAsync(&bad, p->bad, sizeof(bad), cudaMemcpyDeviceToHost, p->s));
		KMG_CK(cudaStreamSynchronize(p->s));
		if (bad != ULLONG_MAX)
		{
			st = kmg_set_error(err, KM_ERR_INVALID,
							   "row %lld has a value that %s cannot hold exactly (round the rows first)",
							   (long long) (p->row0 + (int64_t) bad),
							   sp->L.storage == KM_STORAGE_FLOAT16 ? "float16" : "bfloat16");
			goto done;
		}
	}
	/* the whole parts' statistics; the others' in a pass over their steps */
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		if (!p->whole || p->n == 0)
			continue;
		KMG_CK(cudaSetDevice(p->ordinal));
		if ((st = kmg_step_work(sp, p, KMG_SPASS_SETUP, 0, 0, p->n, (const float *) p->rows,
								p->wres, &rst, err)) != KM_OK)
			goto done;
	}
	if ((st = kmg_split_pass(sp, KMG_SPASS_SETUP, 0, &rst, err)) != KM_OK)
		goto done;
	km_xstats_init(&xs);
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];
		int			v[4];
		km_xstats	one;

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaMemcpy(v, p->xst, sizeof(v), cudaMemcpyDeviceToHost));
		one.xmax = v[0];
		one.xmin = v[1];
		one.wmax = v[2];
		one.wmin = v[3];
		km_xstats_merge(&xs, &one);
	}
	km_xlevels_for(&xs, sp->n, sp->weighted, sp->unweighted, &sp->xlev, &sp->wlev);
	/* the one-device fit's scale of the final pass's order-free inertia */
	sp->ishift = km_fix_scale((double) rst.wmax *
							  (sp->cosine ? 2.0 : 4.0 * (double) rst.xmax2) * 1.01 + 1e-300,
							  sp->n).shift;
	for (int i = 0; i < sp->np; i++)
	{
		sp->part[i].w.a.ishift = sp->ishift;
		if ((st = kmg_part_acc(sp, &sp->part[i], err)) != KM_OK)
			goto done;
	}
done:
	return st;
}

/* ---- the host's step (src/engine/cpu_lloyd.c) ---- */

/* The current centroids onto every device, with their norms and filter copies. */
static km_status
kmg_split_centroids(kmg_split *sp, km_error *err)
{
	km_status	st = KM_OK;

	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaMemcpy2DAsync(p->w.a.C, (size_t) sp->dp * sizeof(float), sp->cent,
								 (size_t) sp->d * sizeof(float), (size_t) sp->d * sizeof(float),
								 sp->k, cudaMemcpyHostToDevice, p->s));
		KMG_CK(kmg_finalize(&p->w.a, KMG_FIN_SETUP, p->s));
	}
done:
	return st;
}

static km_status kmg_split_relocate(kmg_split *sp, int *nreloc, km_error *err);
static void kmg_split_update(kmg_split *sp);

/*
 * After an iteration's pass: every part's sums added into the home part's
 * (copies from the other devices, then one kernel: exact), and what the
 * host decides by (the weights' levels, counts, moved rows, cost) brought
 * to the host; *moved and *cost, and sp->counts and sp->wsumr, filled.
 */
static km_status
kmg_split_gather(kmg_split *sp, int64_t *moved, double *cost, km_error *err)
{
	km_status	st = KM_OK;
	kmg_part   *h = &sp->part[0];

	KMG_CK(cudaSetDevice(h->ordinal));
	for (int i = 1; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];
		char	   *dst = (char *) h->peer + (size_t) (i - 1) * h->accbytes;

		KMG_CK(cudaStreamWaitEvent(h->s, p->done, 0));
		KMG_CK(cudaMemcpyPeerAsync(dst, h->ordinal, p->accmem, p->ordinal, h->accbytes, h->s));
		KMG_CK(kmg_xsum_combine(&h->acc, dst, sp->k, sp->d, h->s));
	}
	KMG_CK(cudaMemcpyAsync(h->hacc.ws, h->acc.ws, kmg_acc_tail(sp), cudaMemcpyDeviceToHost, h->s));
	KMG_CK(cudaEventRecord(h->done, h->s));
	if ((st = kmg_wait_event(sp, h->done, err)) != KM_OK)
		goto done;
	*moved = (int64_t) *h->hacc.moved;
	*cost = *h->hacc.cost;
	for (int j = 0; j < sp->k; j++)
	{
		sp->counts[j] = (int64_t) h->hacc.counts[j];
		sp->wsumr[j] = km_xlevels_round(h->hacc.ws + j, sp->wlev.n, (size_t) sp->k);
	}
done:
	return st;
}

/*
 * The centroids' step where the sums are (home device; every cluster has
 * weight and the sums at most two levels), then the new centroids copied
 * to the other devices; each device refreshes their norms and filter
 * copies.
 */
static km_status
kmg_split_step_device(kmg_split *sp, km_error *err)
{
	km_status	st = KM_OK;
	kmg_part   *h = &sp->part[0];
	const size_t cbytes = (size_t) sp->k * sp->dp * sizeof(float);

	KMG_CK(cudaSetDevice(h->ordinal));
	KMG_CK(kmg_xstep(&h->w.a, &h->acc, h->s));
	KMG_CK(kmg_finalize(&h->w.a, KMG_FIN_SETUP, h->s));
	KMG_CK(cudaEventRecord(h->done, h->s));
	for (int i = 1; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaStreamWaitEvent(p->s, h->done, 0));
		KMG_CK(cudaMemcpyPeerAsync(p->w.a.C, p->ordinal, h->w.a.C, h->ordinal, cbytes, p->s));
		KMG_CK(kmg_finalize(&p->w.a, KMG_FIN_SETUP, p->s));
	}
done:
	return st;
}

/* The current centroids from the home device into sp->cent (d of each dp floats). */
static km_status
kmg_split_fetch_centroids(kmg_split *sp, km_error *err)
{
	km_status	st = KM_OK;
	kmg_part   *h = &sp->part[0];

	KMG_CK(cudaSetDevice(h->ordinal));
	KMG_CK(cudaStreamSynchronize(h->s));
	KMG_CK(cudaMemcpy2D(sp->cent, (size_t) sp->d * sizeof(float), h->w.a.C,
						(size_t) sp->dp * sizeof(float), (size_t) sp->d * sizeof(float), sp->k,
						cudaMemcpyDeviceToHost));
done:
	return st;
}

/*
 * The step on the host, as the CPU engine takes it (an iteration that left
 * clusters empty, or sums of more than two levels): the current centroids
 * and the added sums brought over, the empty clusters re-seeded, the
 * others moved, and the centroids sent to every device.
 */
static km_status
kmg_split_step_host(kmg_split *sp, int *relocated, km_error *err)
{
	km_status	st = KM_OK;
	kmg_part   *h = &sp->part[0];

	if ((st = kmg_split_fetch_centroids(sp, err)) != KM_OK)
		return st;
	KMG_CK(cudaSetDevice(h->ordinal));
	KMG_CK(cudaMemcpy(sp->sums, h->acc.xs, (size_t) sp->xlev.n * sp->k * sp->d * sizeof(double),
					  cudaMemcpyDeviceToHost));
	memcpy(sp->wsum, h->hacc.ws, (size_t) sp->wlev.n * sp->k * sizeof(double));
	memset(sp->relocated, 0, sp->k);
	if ((st = kmg_split_relocate(sp, relocated, err)) != KM_OK)
		return st;
	kmg_split_update(sp);
	return kmg_split_centroids(sp, err);
done:
	return st;
}

/* Every row's exact cost (to its label, current centroids) and label on the host. */
static km_status
kmg_split_costs(kmg_split *sp, km_error *err)
{
	km_status	st = KM_OK;

	if (sp->costs == NULL)
		sp->costs = (double *) kmg_host_alloc(sp->hooks, (size_t) sp->n * sizeof(double));
	if (sp->hlabels == NULL)
		sp->hlabels = (int32_t *) kmg_host_alloc(sp->hooks, (size_t) sp->n * sizeof(int32_t));
	if (sp->costs == NULL || sp->hlabels == NULL)
		return kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
	if ((st = kmg_split_pass(sp, KMG_SPASS_COSTS, 0, NULL, err)) != KM_OK)
		return st;
	for (int i = 0; i < sp->np; i++)
	{
		kmg_part   *p = &sp->part[i];

		KMG_CK(cudaSetDevice(p->ordinal));
		KMG_CK(cudaMemcpy(sp->hlabels + p->row0, p->labels, (size_t) p->n * sizeof(int32_t),
						  cudaMemcpyDeviceToHost));
	}
done:
	return st;
}

static bool
kmg_far_before(const kmg_far &x, const kmg_far &y)
{
	if (x.cost != y.cost)
		return x.cost > y.cost;
	if (x.hash != y.hash)
		return x.hash < y.hash;
	return x.row < y.row;
}

/*
 * Re-seed the clusters left without weight as km_cpu_relocate does: the
 * first (lowest id) takes the row farthest from its centroid (exact cost,
 * ties to the smaller km_row_hash), and so on; the row's weighted
 * contribution moves from its old cluster to the new one, whose centroid
 * is the row.  *nreloc: clusters re-seeded.
 */
static km_status
kmg_split_relocate(kmg_split *sp, int *nreloc, km_error *err)
{
	const int	d = sp->d,
				k = sp->k;
	const size_t kd = (size_t) k * d;
	int			nempty = 0,
				nfar;
	km_status	st;
	double		cut;
	kmg_far    *cand;
	int64_t		nc = 0;

	*nreloc = 0;
	for (int j = 0; j < k; j++)
		if (!(sp->wsumr[j] > 0.0))
			sp->empty[nempty++] = j;
	if (nempty == 0)
		return KM_OK;

	/* each step's farthest rows (and ties), then the farthest of all, ties by hash */
	sp->want = nempty;
	sp->ncand = 0;
	if ((st = kmg_split_pass(sp, KMG_SPASS_FAR, 0, NULL, err)) != KM_OK)
		return st;
	cand = sp->cand;
	nc = sp->ncand;
	std::sort(cand, cand + nc, [](const kmg_far &x, const kmg_far &y) { return x.cost > y.cost; });
	cut = nc >= nempty ? cand[nempty - 1].cost : -1.0;
	while (nc > 0 && cand[nc - 1].cost < cut)
		nc--;
	for (int64_t i = 0; i < nc; i++)
	{
		float		w;
		const float *x = kmg_split_row(sp, cand[i].row, &w);

		cand[i].hash = km_row_hash(x, d, w);
	}
	std::sort(cand, cand + nc, kmg_far_before);
	nfar = nc < nempty ? (int) nc : nempty;

	/* the chosen rows' labels */
	for (int e = 0; e < nfar; e++)
	{
		const int64_t r = cand[e].row;

		for (int i = 0; i < sp->np; i++)
		{
			kmg_part   *p = &sp->part[i];
			cudaError_t ce;

			if (r < p->row0 || r >= p->row0 + p->n)
				continue;
			if ((ce = cudaSetDevice(p->ordinal)) != cudaSuccess ||
				(ce = cudaMemcpy(&sp->chosen[e], p->labels + (r - p->row0), sizeof(int32_t),
								 cudaMemcpyDeviceToHost)) != cudaSuccess)
				return kmg_cuda_error(err, ce, "re-seeding: a row's label");
		}
	}

	for (int e = 0; e < nfar; e++)
	{
		const int64_t r = cand[e].row;
		const int	j = sp->empty[e];
		const int	old = sp->chosen[e];
		float		w;
		const float *x = kmg_split_row(sp, r, &w);
		float	   *cj = sp->cent + (size_t) j * d;
		double	   *sold = sp->sums + (size_t) old * d;
		double	   *sj = sp->sums + (size_t) j * d;

		km_centroid_row(x, d, sp->cosine, cj);
		for (int i = 0; i < d; i++)
		{
			double		v = (double) w * cj[i];

			km_xlevels_add(&sp->xlev, sold + i, kd, -v);
			for (int l = 0; l < sp->xlev.n; l++)
				sj[(size_t) l * kd + i] = 0.0;
			km_xlevels_add(&sp->xlev, sj + i, kd, v);
		}
		km_xlevels_add(&sp->wlev, sp->wsum + old, (size_t) k, -(double) w);
		for (int l = 0; l < sp->wlev.n; l++)
			sp->wsum[(size_t) l * k + j] = 0.0;
		km_xlevels_add(&sp->wlev, sp->wsum + j, (size_t) k, (double) w);
		sp->counts[j] = 1;
		if (--sp->counts[old] == 0)
		{
			for (int l = 0; l < sp->xlev.n; l++)
				memset(sold + (size_t) l * kd, 0, sizeof(double) * d);
			for (int l = 0; l < sp->wlev.n; l++)
				sp->wsum[(size_t) l * k + old] = 0.0;
		}
		sp->wsumr[old] = km_xlevels_round(sp->wsum + old, sp->wlev.n, (size_t) k);
		sp->wsumr[j] = km_xlevels_round(sp->wsum + j, sp->wlev.n, (size_t) k);
		sp->relocated[j] = 1;
	}
	*nreloc = nfar;
	return KM_OK;
}

/* Every cluster with weight, not just re-seeded, to its mean (km_cpu_update_centroids). */
static void
kmg_split_update(kmg_split *sp)
{
	const int	d = sp->d;
	const size_t kd = (size_t) sp->k * d;

	for (int j = 0; j < sp->k; j++)
	{
		const double *lev = sp->sums + (size_t) j * d;

		if (sp->relocated[j] || !(sp->wsumr[j] > 0.0))
			continue;
		for (int i = 0; i < d; i++)
			sp->dtmp[i] = km_xlevels_round(lev + i, sp->xlev.n, kd);
		km_centroid_mean(sp->dtmp, sp->wsumr[j], d, sp->cosine, sp->cent + (size_t) j * d);
	}
}

/* Report to the caller; KM_ERR_CANCELLED when it asks to stop. */
static km_status
kmg_split_report(const kmg_split *sp, km_progress *p, km_error *err)
{
	if (sp->hooks == NULL || sp->hooks->report == NULL)
		return KM_OK;
	p->elapsed = kmg_now() - sp->t0;
	if (sp->hooks->report(sp->hooks->ctx, p))
		return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
	return KM_OK;
}

/*
 * Lloyd iterations and the final pass, as km_cpu_lloyd runs them, into
 * result.
 */
static km_status
kmg_split_lloyd(kmg_split *sp, const km_params *params, km_result *result, km_error *err)
{
	km_status	st = KM_OK;
	int			settled = 0,
				t;
	int64_t		moved = 0;
	double		cost = 0.0;
	km_progress pr;

	if ((st = kmg_split_centroids(sp, err)) != KM_OK)
		return st;
	for (t = 1;; t++)
	{
		int			relocated = 0;

		double		t1 = kmg_now();

		if ((st = kmg_split_pass(sp, KMG_SPASS_ITER, 1, NULL, err)) != KM_OK)
			return st;
		if (sp->verbose)
		{
			/* timing the parts: the pass ends when every device is done */
			for (int i = 0; i < sp->np; i++)
				if ((st = kmg_wait_event(sp, sp->part[i].done, err)) != KM_OK)
					return st;
		}
		sp->t_pass += kmg_now() - t1;
		t1 = kmg_now();
		if ((st = kmg_split_gather(sp, &moved, &cost, err)) != KM_OK)
			return st;
		sp->t_gather += kmg_now() - t1;
		t1 = kmg_now();
		if (moved > 0)
		{
			int			empty = sp->xlev.n > 2 || sp->wlev.n > 2;

			for (int j = 0; j < sp->k && !empty; j++)
				empty = !(sp->wsumr[j] > 0.0);
			if (empty)
				st = kmg_split_step_host(sp, &relocated, err);
			else
				st = kmg_split_step_device(sp, err);
			if (st != KM_OK)
				return st;
			result->relocated += relocated;
		}
		sp->t_host += kmg_now() - t1;
		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_ITERATE;
		pr.iteration = t;
		pr.done = t;
		pr.total = params->max_iter;
		pr.inertia = cost;
		pr.moved = (double) moved / (double) sp->n;
		pr.relocated = relocated;
		if ((st = kmg_split_report(sp, &pr, err)) != KM_OK)
			return st;
		if (moved == 0)
		{
			settled = 1;
			result->converged = 1;
			break;
		}
		if ((double) moved / (double) sp->n <= params->tol)
		{
			result->converged = 1;
			break;
		}
		if (t >= params->max_iter)
			break;
	}
	result->iterations = t;

	/* the final pass: labels for the final centroids, sizes, the order-free inertia */
	if ((st = kmg_split_pass(sp, KMG_SPASS_FINAL, !settled, NULL, err)) != KM_OK ||
		(st = kmg_split_fetch_centroids(sp, err)) != KM_OK)
		return st;
	{
		km_fixscale fs;
		int			fallback = 0;

		fs.shift = sp->ishift;
		result->inertia = 0.0;
		for (int j = 0; j < sp->k; j++)
		{
			km_fix		f = {0, 0};
			int64_t		cnt = 0;
			int			sat = 0;
			double		v = 0.0;

			for (int i = 0; i < sp->np; i++)
			{
				const kmg_xsum_acc *h = &sp->part[i].hacc;
				km_fix		g;

				g.lo = h->fix[2 * j];
				g.hi = h->fix[2 * j + 1];
				km_fix_add(&f, g);
				cnt += (int64_t) h->counts[j];
				sat |= h->sat[j] != 0;
			}
			if (sat)
				f.hi = KM_FIX_SATURATED;
			result->sizes[j] = cnt;
			if (!km_fix_value(f, fs, cnt, &v))
			{
				fallback = 1;
				v = NAN;		/* below, from the rows */
			}
			result->cluster_inertia[j] = v;
		}
		if (fallback)
		{
			/*
			 * Declined (terms far below the bound, or one past it): the
			 * double sum over the cluster's rows in row order, as the
			 * one-device fit and the CPU engine keep it.  Rare.
			 */
			if ((st = kmg_split_costs(sp, err)) != KM_OK)
				return st;
			memset(sp->relocated, 0, sp->k);	/* here: which clusters declined */
			for (int j = 0; j < sp->k; j++)
				if (isnan(result->cluster_inertia[j]))
				{
					sp->relocated[j] = 1;
					result->cluster_inertia[j] = 0.0;
				}
			int64_t		r = 0;

			for (int c = 0; c < sp->data->nchunks; c++)
			{
				const km_chunk *ch = &sp->data->chunks[c];

				for (int64_t i = 0; i < ch->n; i++, r++)
				{
					const int	j = sp->hlabels[r];
					const double w = ch->w != NULL ? (double) ch->w[i] : 1.0;

					if (sp->relocated[j])
						result->cluster_inertia[j] = km_dadd(result->cluster_inertia[j],
															 km_dmul(w, sp->costs[r]));
				}
			}
		}
		for (int j = 0; j < sp->k; j++)
			result->inertia += result->cluster_inertia[j];
	}
	memcpy(result->centroids, sp->cent, (size_t) sp->k * sp->d * sizeof(float));
	if (result->labels != NULL)
		for (int i = 0; i < sp->np; i++)
		{
			kmg_part   *p = &sp->part[i];

			KMG_CK(cudaSetDevice(p->ordinal));
			KMG_CK(cudaMemcpy(result->labels + p->row0, p->labels, (size_t) p->n * sizeof(int32_t),
							  cudaMemcpyDeviceToHost));
		}
	memset(&pr, 0, sizeof(pr));
	pr.phase = KM_PHASE_FINISH;
	pr.iteration = t;
	pr.done = sp->n;
	pr.total = sp->n;
	pr.inertia = result->inertia;
	st = kmg_split_report(sp, &pr, err);
done:
	return st;
}

/* ---- the table's entries ---- */

/* Whether any chunk of data carries weights / lacks them. */
static void
kmg_split_weights(const km_data *data, int *weighted, int *unweighted)
{
	*weighted = *unweighted = 0;
	for (int c = 0; c < data->nchunks; c++)
		if (data->chunks[c].n > 0)
		{
			if (data->chunks[c].w != NULL)
				*weighted = 1;
			else
				*unweighted = 1;
		}
}

/* Every device of the layout usable (compute capability 8.0 or later). */
static km_status
kmg_split_devices(const km_gpu_layout *L, km_error *err)
{
	int			count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaGetDeviceCount");
	for (int i = 0; i < L->ndevices; i++)
	{
		kmg_device	lim;

		if (L->devices[i] < 0 || L->devices[i] >= count)
			return kmg_set_error(err, KM_ERR_INVALID, "no CUDA device %d (%d found)",
								 L->devices[i], count);
		if ((e = kmg_device_limits(L->devices[i], &lim)) != cudaSuccess)
			return kmg_cuda_error(err, e, "cudaDeviceGetAttribute");
		if (lim.cc_major < 8)
			return kmg_set_error(err, KM_ERR_UNAVAILABLE,
								 "GPU %d has compute capability %d.%d; 8.0 or later is needed",
								 L->devices[i], lim.cc_major, lim.cc_minor);
	}
	return KM_OK;
}

/* km_gpu_api.split_plan */
km_status
kmg_split_plan(int64_t n, int d, int k, km_metric metric, int weighted,
			   const km_gpu_layout *layout, km_gpu_split *split, km_error *err)
{
	kmg_split	sp;
	int			have = 0;
	km_error	quiet;

	if (layout == NULL || split == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no layout");
	memset(&sp, 0, sizeof(sp));
	memset(&quiet, 0, sizeof(quiet));
	/* the devices when there are some; a plan from the limit alone otherwise */
	memset(split, 0, sizeof(*split));
	if (kmg_begin(&quiet) == KM_OK)
	{
		km_status	st = kmg_split_devices(layout, err);

		if (st != KM_OK)
			return st;
		have = 1;
	}
	else if (layout->memory_limit == 0)
		return kmg_set_error(err, quiet.status == KM_OK ? KM_ERR_UNAVAILABLE : quiet.status,
							 "%s", quiet.message[0] ? quiet.message : "no usable GPU");
	{
		const km_status st = kmg_split_layout(&sp, n, d, k, metric, weighted, layout, have,
											  KMG_SPLIT_PLAN_LEVELS, KMG_SPLIT_PLAN_LEVELS,
											  split, err);

		if (have)
			(void) kmg_begin(&quiet);	/* back on the engine's device */
		return st;
	}
}

/* Free a split's device, pinned and host memory, and unregister the rows. */
static void
kmg_split_free(kmg_split *sp)
{
	for (int i = 0; i < sp->np; i++)
		kmg_part_free(&sp->part[i]);
	kmg_split_unregister(sp);
	kmg_host_free(sp->hooks, sp->sums);
	kmg_host_free(sp->hooks, sp->wsum);
	kmg_host_free(sp->hooks, sp->wsumr);
	kmg_host_free(sp->hooks, sp->dtmp);
	kmg_host_free(sp->hooks, sp->counts);
	kmg_host_free(sp->hooks, sp->relocated);
	kmg_host_free(sp->hooks, sp->empty);
	kmg_host_free(sp->hooks, sp->chosen);
	kmg_host_free(sp->hooks, sp->cand);
	kmg_host_free(sp->hooks, sp->cent);
	kmg_host_free(sp->hooks, sp->costs);
	kmg_host_free(sp->hooks, sp->hlabels);
}

/* km_gpu_api.split_fit (see kmeans_gpu_cuda.h and the file header). */
km_status
kmg_split_fit(const km_data *data, const km_params *params, const km_gpu_layout *layout,
			  const km_hooks *hooks, km_result *result, km_error *err)
{
	kmg_split	sp;
	km_gpu_split plan;
	km_status	st;
	int			weighted,
				unweighted;
	km_error	quiet;

	if ((st = kmg_begin(err)) != KM_OK)
		return st;
	if (data == NULL || data->n < 1 || data->d < 1 || data->nchunks < 1 || params == NULL ||
		layout == NULL || result == NULL || result->centroids == NULL || result->sizes == NULL ||
		result->cluster_inertia == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no rows, parameters or result arrays");
	if (params->init != KM_INIT_EXPLICIT || params->init_centroids == NULL ||
		params->n_init != 1)
		return kmg_set_error(err, KM_ERR_INVALID,
							 "a split fit starts from explicit centroids, one run");
	if (params->k < 1 || params->k > data->n || params->max_iter < 1 || !(params->tol >= 0.0) ||
		(params->metric != KM_METRIC_L2 && params->metric != KM_METRIC_COSINE))
		return kmg_set_error(err, KM_ERR_INVALID, "bad parameters");
	if ((st = kmg_split_devices(layout, err)) != KM_OK)
		return st;

	memset(&sp, 0, sizeof(sp));
	for (int i = 0; i < KM_GPU_MAX_DEVICES; i++)
		sp.part[i].ordinal = -1;
	sp.t0 = kmg_now();
	sp.verbose = kmg_verbose();
	sp.data = data;
	sp.hooks = hooks;
	sp.L = *layout;
	sp.n = data->n;
	sp.d = data->d;
	sp.dp = KMG_ROUND_UP(data->d, KM_FILTER_DPAD);
	sp.k = params->k;
	sp.cosine = params->metric == KM_METRIC_COSINE;
	sp.bytes = kmg_storage_bytes(layout->storage);
	kmg_split_weights(data, &weighted, &unweighted);
	sp.weighted = weighted;
	sp.unweighted = unweighted;
	memset(result->sizes, 0, sizeof(int64_t) * params->k);
	result->relocated = 0;
	result->converged = 0;
	result->best_run = 0;

	if ((st = kmg_split_layout(&sp, sp.n, sp.d, sp.k, params->metric, weighted, layout, 1,
							   KMG_SPLIT_PLAN_LEVELS, KMG_SPLIT_PLAN_LEVELS, &plan, err)) != KM_OK)
		goto done;
	kmg_split_register(&sp);
	for (int i = 0; i < sp.np; i++)
		if ((st = kmg_part_alloc(&sp, &sp.part[i], err)) != KM_OK)
			goto done;
	sp.sums = NULL;
	if ((st = kmg_split_setup(&sp, err)) != KM_OK)
		goto done;
	{
		km_progress pr;

		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_PREPARE;
		pr.done = pr.total = sp.n;
		if ((st = kmg_split_report(&sp, &pr, err)) != KM_OK)
			goto done;
	}
	sp.sums = (double *) kmg_host_alloc(hooks, (size_t) sp.xlev.n * sp.k * sp.d * sizeof(double));
	sp.wsum = (double *) kmg_host_alloc(hooks, (size_t) sp.wlev.n * sp.k * sizeof(double));
	sp.wsumr = (double *) kmg_host_alloc(hooks, (size_t) sp.k * sizeof(double));
	sp.dtmp = (double *) kmg_host_alloc(hooks, (size_t) sp.d * sizeof(double));
	sp.counts = (int64_t *) kmg_host_alloc(hooks, (size_t) sp.k * sizeof(int64_t));
	sp.relocated = (char *) kmg_host_alloc(hooks, (size_t) sp.k);
	sp.empty = (int *) kmg_host_alloc(hooks, (size_t) sp.k * sizeof(int));
	sp.chosen = (int32_t *) kmg_host_alloc(hooks, (size_t) sp.k * sizeof(int32_t));
	sp.cent = (float *) kmg_host_alloc(hooks, (size_t) sp.k * sp.d * sizeof(float));
	if (sp.sums == NULL || sp.wsum == NULL || sp.wsumr == NULL || sp.dtmp == NULL ||
		sp.counts == NULL || sp.relocated == NULL || sp.empty == NULL || sp.chosen == NULL ||
		sp.cent == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
		goto done;
	}
	memcpy(sp.cent, params->init_centroids, (size_t) sp.k * sp.d * sizeof(float));
	if (sp.cosine)
		for (int j = 0; j < sp.k; j++)
		{
			/* the start as the CPU engine takes it (km_cpu_take_row): unit centroids */
			float	   *c = sp.cent + (size_t) j * sp.d;

			if (km_normalize_row(params->init_centroids + (size_t) j * sp.d, c, sp.d) == 0.0)
				memset(c, 0, sizeof(float) * sp.d);
		}
	st = kmg_split_lloyd(&sp, params, result, err);
	if (sp.verbose)
	{
		fprintf(stderr, "kmg: split fit of %lld rows over %d parts (%s, %s, steps of %lld rows), "
				"levels %d/%d: %d iterations, a pass %.3f ms, the sums added %.3f ms, the step %.3f ms, %.3f s in all\n",
				(long long) sp.n, sp.np, layout->out_of_core ? "out of core" : "in memory",
				layout->storage == KM_STORAGE_FLOAT32 ? "float32" : "half",
				(long long) sp.part[0].chunk, sp.xlev.n, sp.wlev.n, result->iterations,
				result->iterations > 0 ? 1e3 * sp.t_pass / result->iterations : 0.0,
				result->iterations > 0 ? 1e3 * sp.t_gather / result->iterations : 0.0,
				result->iterations > 0 ? 1e3 * sp.t_host / result->iterations : 0.0,
				kmg_now() - sp.t0);
	}
done:
	kmg_split_free(&sp);
	memset(&quiet, 0, sizeof(quiet));
	(void) kmg_begin(&quiet);	/* back on the engine's device */
	return st;
}

/* km_gpu_api.split_assign: each part's rows labelled on its device, in batches. */
km_status
kmg_split_assign(const km_data *data, const float *centroids, int k, km_metric metric,
				 const km_gpu_layout *layout, int32_t *labels, double *distances,
				 const km_hooks *hooks, km_error *err)
{
	km_status	st;
	int64_t		given = 0;
	const int	home = kmg_dev()->ordinal;

	if ((st = kmg_begin(err)) != KM_OK)
		return st;
	if (data == NULL || data->n < 1 || layout == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no rows or layout");
	if ((st = kmg_split_devices(layout, err)) != KM_OK)
		return st;
	for (int i = 0; i < layout->ndevices && st == KM_OK; i++)
	{
		const int64_t m = i == layout->ndevices - 1 ? data->n - given :
			data->n / layout->ndevices;
		km_chunk   *chunks = (km_chunk *) kmg_host_alloc(hooks, sizeof(km_chunk) * data->nchunks);
		km_data		slice;
		int64_t		base = 0,
					r0 = given,
					left = m;

		if (chunks == NULL)
			return kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
		memset(&slice, 0, sizeof(slice));
		slice.d = data->d;
		slice.chunks = chunks;
		for (int c = 0; c < data->nchunks && left > 0; c++)
		{
			const km_chunk *ch = &data->chunks[c];
			int64_t		off,
						take;

			if (r0 >= base + ch->n)
			{
				base += ch->n;
				continue;
			}
			off = r0 - base;
			take = ch->n - off < left ? ch->n - off : left;
			chunks[slice.nchunks].x = ch->x + (size_t) off * data->d;
			chunks[slice.nchunks].w = ch->w != NULL ? ch->w + off : NULL;
			chunks[slice.nchunks].n = take;
			slice.nchunks++;
			slice.n += take;
			r0 += take;
			left -= take;
			base += ch->n;
		}
		if (slice.n > 0)
		{
			st = kmg_use_device(layout->devices[i], err);
			if (st == KM_OK)
				st = kmg_engine_batches(&slice, centroids, k, metric,
										labels != NULL ? labels + given : NULL,
										distances != NULL ? distances + given : NULL, NULL,
										hooks, err);
		}
		kmg_host_free(hooks, chunks);
		given += m;
	}
	{
		km_error	quiet;

		memset(&quiet, 0, sizeof(quiet));
		(void) kmg_use_device(home, st == KM_OK ? err : &quiet);
	}
	return st;
}

/*
 * km_gpu_api.copy_rate: bytes per second of a 64 MB copy from pinned host
 * memory to device ordinal, the best of three, measured once per process.
 */
double
kmg_split_copy_rate(int ordinal, km_error *err)
{
	static double rate[64];
	void	   *h = NULL,
			   *dv = NULL;
	const size_t bytes = (size_t) 64 << 20;
	double		best = 0.0;
	cudaError_t e;

	if (ordinal < 0 || ordinal >= 64)
	{
		kmg_set_error(err, KM_ERR_INVALID, "no CUDA device %d", ordinal);
		return 0.0;
	}
	if (rate[ordinal] > 0.0)
		return rate[ordinal];
	if (kmg_begin(err) != KM_OK)
		return 0.0;
	if ((e = cudaSetDevice(ordinal)) != cudaSuccess ||
		(e = cudaHostAlloc(&h, bytes, cudaHostAllocDefault)) != cudaSuccess ||
		(e = cudaMalloc(&dv, bytes)) != cudaSuccess)
		kmg_cuda_error(err, e, "measuring the copy rate");
	else
		for (int rep = 0; rep < 3; rep++)
		{
			const double t0 = kmg_now();

			if ((e = cudaMemcpy(dv, h, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
			{
				kmg_cuda_error(err, e, "measuring the copy rate");
				best = 0.0;
				break;
			}
			if ((double) bytes / (kmg_now() - t0) > best)
				best = (double) bytes / (kmg_now() - t0);
		}
	if (dv != NULL)
		(void) cudaFree(dv);
	if (h != NULL)
		(void) cudaFreeHost(h);
	{
		km_error	quiet;

		memset(&quiet, 0, sizeof(quiet));
		(void) kmg_begin(&quiet);
	}
	rate[ordinal] = best;
	return best;
}
