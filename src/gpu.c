/*
 * gpu.c
 *	  The GPU engine seen from a backend: loading kmeans_gpu_cuda.so on first
 *	  use, choosing the device, the logical devices of kmeans_gpu.devices,
 *	  whether the device has room, streaming rows to it during a scan,
 *	  kmeans_gpu_devices(), and the session-wide "GPU broken" state after a
 *	  sticky CUDA error.  Which mode a fit runs in (one GPU, split over
 *	  several, out of core, or the CPU) is gpu_plan.c's decision.
 *
 * kmeans_gpu.so never links CUDA.  The CUDA object is opened with dlopen()
 * the first time a backend wants a GPU; opening it initialises nothing, and
 * CUDA itself starts in the first call of its table, always in a backend
 * (never the postmaster, which never runs a kmeans function).  Everything
 * here runs in the backend's one thread; the engine calls back into the SQL
 * layer only through km_hooks (engine_call.c).
 *
 * Device memory is freed by the CUDA engine before each call returns; a
 * dataset being streamed is owned by a memory context callback, so it is
 * freed when its context goes away, on success, ERROR or cancel alike.
 *
 * Rows streamed during a scan go through a KmGpuSink: the caller starts it
 * on its KmMatrix (KmGpuSinkStart) and from then on appends every vector to
 * the sink instead of the matrix.  Either the host keeps every row too (the
 * sink appends to the matrix and copies the row on), so that the CPU can
 * take over should the GPU give up; or the rows go to the GPU only, and a
 * GPU that gives up leaves the caller to read the rows again (KmRunFit says
 * so).  Vectors are read and checked by vector_input.c, which knows nothing
 * of the GPU.
 *
 * Work on one GPU (streamed fits, k-medoids, labels) runs on the first
 * device kmeans_gpu.devices lists; split fits (gpu_plan.c) use them all.
 * kmeans_gpu.gpu_memory_limit caps what any of them may take on a device.
 */
#include "postgres.h"

#include <dlfcn.h>
#include <unistd.h>

#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "kmeans_gpu.h"
#include "kmeans_gpu_cuda.h"

#ifndef DLSUFFIX
#define DLSUFFIX ".so"
#endif

/*
 * Rows streamed to the GPU: staged rows are committed (copied on the
 * dataset's stream) while the scan goes on.  ds is NULL once the GPU gave
 * up (only under 'auto': under 'gpu' a failure is an ERROR).
 */
struct KmGpuSink
{
	const km_gpu_api *api;
	km_gpu_dataset *ds;
	float	   *stage;			/* pinned rows being filled */
	float	   *stage_w;		/* their weights, when weighted */
	int64		room;
	int64		used;
	bool		weighted;
	bool		cosine;			/* reject zero vectors */
	bool		raise;			/* a GPU failure is an ERROR (engine 'gpu') */
	int			dim;
	KmMatrix   *host;			/* keeps every row too, or NULL: the GPU only */
	int64		n;				/* rows, when the GPU only has them */
	float	   *scratch;		/* one row, once the GPU only gave up */
	MemoryContextCallback cb;	/* frees ds with its memory context */
};

static bool gpu_loaded = false; /* dlopen tried */
static const km_gpu_api *gpu_api = NULL;
static bool gpu_unusable = false;	/* no device, or broken: for the session */
static char gpu_reason[384] = "";
static int	gpu_device = -1;	/* device set in the CUDA engine */

static void GpuRefuse(const char *reason) pg_attribute_noreturn();

/* Process exit: give the device back, whatever state it is in. */
static void
GpuAtExit(int code, Datum arg)
{
	if (gpu_api != NULL)
		gpu_api->release_all();
}

/* This backend cannot use a GPU for the rest of the session; why, in gpu_reason. */
static void
GpuUnusable(const char *fmt, const char *detail)
{
	gpu_unusable = true;
	snprintf(gpu_reason, sizeof(gpu_reason), fmt, detail);
}

/*
 * Open the CUDA object and its table once per process.
 */
static void
GpuLoadLibrary(void)
{
	char		path[MAXPGPATH];
	void	   *handle;
	const km_gpu_api *(*get) (void);
	const km_gpu_api *api;

	gpu_loaded = true;
	snprintf(path, sizeof(path), "%s/kmeans_gpu_cuda" DLSUFFIX, pkglib_path);
	if (access(path, R_OK) != 0)
	{
		GpuUnusable("this installation has no GPU engine (%s was not built)", path);
		return;
	}
	handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL)
	{
		GpuUnusable("could not load the GPU engine: %s", dlerror());
		return;
	}
	get = (const km_gpu_api *(*) (void)) dlsym(handle, "km_gpu_get_api");
	api = get != NULL ? get() : NULL;
	if (api == NULL || api->abi != KM_GPU_ABI || api->engine->abi != KM_ENGINE_ABI)
	{
		GpuUnusable("the GPU engine in %s does not match this version of kmeans_gpu", path);
		dlclose(handle);
		return;
	}
	gpu_api = api;
	on_proc_exit(GpuAtExit, (Datum) 0);
}

/*
 * Whether ordinal names a device of the count this backend sees; if not,
 * the reason in gpu_reason.
 */
static bool
GpuOrdinalSeen(const KmDeviceList *list, int ordinal, int count)
{
	if (ordinal < count)
		return true;
	snprintf(gpu_reason, sizeof(gpu_reason),
			 "%s names GPU %d, but this backend sees %d GPU%s",
			 list->setting, ordinal, count, count == 1 ? "" : "s");
	return false;
}

/*
 * The GPU engine with the first device of kmeans_gpu.devices selected, or
 * NULL (and the reason in gpu_reason) when this backend cannot use a GPU.
 */
static const km_gpu_api *
GpuGet(void)
{
	km_error	err;
	int			count;
	int			device;
	KmDeviceList list;

	if (!IsUnderPostmaster)
	{
		snprintf(gpu_reason, sizeof(gpu_reason),
				 "the GPU engine runs only in server backends, not in single-user mode");
		return NULL;
	}
	if (!gpu_loaded)
		GpuLoadLibrary();
	if (gpu_api == NULL || gpu_unusable)
		return NULL;

	memset(&err, 0, sizeof(err));
	count = gpu_api->device_count(&err);
	if (count <= 0)
	{
		if (err.status == KM_ERR_DEVICE_FATAL)
			GpuUnusable("%s", err.message);
		else
			GpuUnusable("no usable GPU: %s", err.message[0] ? err.message : "no CUDA device");
		return NULL;
	}
	KmDeviceSetting(&list);
	device = list.all ? 0 : list.devices[0];
	if (!GpuOrdinalSeen(&list, device, count))
		return NULL;
	if (gpu_device != device)
	{
		km_status	st = gpu_api->set_device(device, &err);

		if (st != KM_OK)
		{
			if (st == KM_ERR_DEVICE_FATAL)
				GpuUnusable("%s", err.message);
			else
				snprintf(gpu_reason, sizeof(gpu_reason), "%s", err.message);
			return NULL;
		}
		gpu_device = device;
	}
	return gpu_api;
}

/*
 * The GPU engine's table, loaded but not started (no CUDA call is made:
 * kmeans_gpu_plan plans without a device), or NULL with the reason.
 */
const km_gpu_api *
KmGpuLoaded(const char **reason)
{
	if (!gpu_loaded)
		GpuLoadLibrary();
	*reason = gpu_reason;
	return gpu_api;
}

/*
 * Whether this GPU engine can split fits: the four functions of ABI 3 that
 * do it.  An engine built before they were written leaves them NULL.
 */
bool
KmGpuCanSplit(const km_gpu_api *api)
{
	return api != NULL && api->split_plan != NULL && api->split_fit != NULL &&
		api->split_assign != NULL && api->copy_rate != NULL;
}

/*
 * The logical devices of kmeans_gpu.devices (or kmeans_gpu.device) for
 * work split over them, with storage and kmeans_gpu.gpu_memory_limit:
 * 'all' becomes every device this backend sees (it asks the engine api how
 * many, which starts CUDA), and each ordinal is checked against them;
 * count < 0: do not ask, and take the ordinals as they are (planning
 * without a device).  Returns false, with the reason in gpu_reason, when
 * an ordinal is not there or 'all' finds none.
 */
bool
KmGpuLayout(const km_gpu_api *api, km_storage storage, bool ask, km_gpu_layout *layout)
{
	KmDeviceList list;
	km_error	err;
	int			count = -1;

	memset(layout, 0, sizeof(*layout));
	memset(&err, 0, sizeof(err));
	KmDeviceSetting(&list);
	if (ask || list.all)
		count = Max(api->device_count(&err), 0);
	if (list.all)
	{
		layout->ndevices = Min(count, KM_GPU_MAX_DEVICES);
		for (int i = 0; i < layout->ndevices; i++)
			layout->devices[i] = i;
		if (count == 0)
			snprintf(gpu_reason, sizeof(gpu_reason),
					 "%s is 'all', but this backend sees no GPU%s%s", list.setting,
					 err.message[0] ? ": " : "", err.message);
	}
	else
	{
		layout->ndevices = list.ndevices;
		for (int i = 0; i < list.ndevices; i++)
		{
			if (count >= 0 && !GpuOrdinalSeen(&list, list.devices[i], count))
				return false;
			layout->devices[i] = list.devices[i];
		}
	}
	layout->memory_limit = KmGpuMemoryLimitBytes();
	layout->storage = storage;
	layout->out_of_core = 0;
	return layout->ndevices > 0;
}

/*
 * The GPU engine, started, for work on the GPUs, or NULL with the reason
 * (under 'gpu' the caller refuses with it: KmGpuRefuse).
 */
const km_gpu_api *
KmGpuStarted(const char **reason)
{
	const km_gpu_api *api = GpuGet();

	*reason = gpu_reason;
	return api;
}


/* Fail a gpu-only request with the reason the GPU cannot serve it. */
static void
GpuRefuse(const char *reason)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the GPU engine cannot run this fit"),
			 errdetail("%s", reason),
			 errhint("Set kmeans_gpu.engine (or the option engine) to 'auto' or 'cpu'.")));
}

/* GpuRefuse, for gpu_plan.c. */
void
KmGpuRefuse(const char *reason)
{
	GpuRefuse(reason);
}

/* bytes as pg_size_pretty writes them. */
static const char *
Pretty(uint64 bytes)
{
	return text_to_cstring(DatumGetTextPP(DirectFunctionCall1(pg_size_pretty,
															  Int64GetDatum((int64) Min(bytes, (uint64) PG_INT64_MAX)))));
}

/*
 * The GPU engine if choice allows it and this backend can use a GPU; NULL
 * for the CPU.  Under 'gpu', a GPU that cannot be used is an ERROR.
 */
static const km_gpu_api *
GpuChosen(KmEngineChoice choice)
{
	const km_gpu_api *api;

	if (choice == KM_ENGINE_CPU)
		return NULL;
	api = GpuGet();
	if (api == NULL && choice == KM_ENGINE_GPU)
		GpuRefuse(gpu_reason);
	return api;
}

/*
 * Wait, for at most kmeans_gpu.gpu_wait, until the device has need bytes
 * free: other backends' fits hold memory only while they run, so under
 * kmeans_gpu.engine 'gpu' a fit that fits the device queues behind them
 * instead of failing.  Interrupts (cancel, statement_timeout) are served
 * while waiting.  Returns whether the memory is there; info is refreshed.
 */
static bool
GpuWaitForMemory(uint64 need, km_gpu_device *info)
{
	TimestampTz start = GetCurrentTimestamp();
	km_error	err;

	for (;;)
	{
		if (need <= info->free_bytes)
			return true;
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), kmeans_gpu_wait_ms))
			return false;
		CHECK_FOR_INTERRUPTS();
		pg_usleep(20000L);
		memset(&err, 0, sizeof(err));
		if (gpu_api->device_info(gpu_device, info, &err) != KM_OK)
			return false;
	}
}

/*
 * Whether the device has need bytes free for what, within
 * kmeans_gpu.gpu_memory_limit.  Under 'gpu' a need that fits the device
 * (and the limit) waits for other sessions to free memory, and a need that
 * does not fit is an ERROR; under 'auto' the answer is simply no.  With
 * quiet, the answer is a plain yes or no now: no waiting, no message.
 */
static bool
GpuRoom(const km_gpu_api *api, KmEngineChoice choice, uint64 need, const char *what,
		bool quiet)
{
	km_gpu_device info;
	km_error	err;
	char		reason[320];
	uint64		limit = KmGpuMemoryLimitBytes();

	memset(&err, 0, sizeof(err));
	if (api->device_info(gpu_device, &info, &err) != KM_OK)
	{
		KmGpuFailed(err.status, err.message, choice == KM_ENGINE_GPU && !quiet);
		return false;
	}
	if (limit > 0 && need > limit)
		snprintf(reason, sizeof(reason),
				 "%s needs %s of GPU memory, more than kmeans_gpu.gpu_memory_limit (%s).",
				 what, Pretty(need), Pretty(limit));
	else
	{
		if (need > info.free_bytes && choice == KM_ENGINE_GPU && !quiet &&
			need <= info.total_bytes - info.total_bytes / 16)
			(void) GpuWaitForMemory(need, &info);
		if (need <= info.free_bytes)
			return true;
		snprintf(reason, sizeof(reason),
				 "%s needs %s of GPU memory; GPU %d (%s) has %s free of %s.",
				 what, Pretty(need), gpu_device, info.name, Pretty(info.free_bytes),
				 Pretty(info.total_bytes));
	}
	if (quiet)
		return false;
	if (choice == KM_ENGINE_GPU)
		GpuRefuse(reason);
	if (kmeans_verbose)
		ereport(INFO, (errmsg("kmeans: using the CPU engine: %s", reason)));
	return false;
}

static bool
GpuHasRoom(const km_gpu_api *api, KmEngineChoice choice, uint64 need, const char *what)
{
	return GpuRoom(api, choice, need, what, false);
}

/*
 * Whether a fit of n rows fits on the one GPU now, in its free memory and
 * within kmeans_gpu.gpu_memory_limit: no waiting, no message (gpu_plan.c
 * decides what else to try).
 */
bool
KmGpuFitFitsNow(const km_gpu_api *api, int64 n, int dim, int k, km_metric metric)
{
	return GpuRoom(api, KM_ENGINE_AUTO, api->fit_device_bytes(n, dim, k, metric), "The fit",
				   true);
}

/*
 * The one GPU for a fit of n rows when nothing else can take it (gpu_plan.c
 * tried the rest): under 'gpu' waiting for memory, and an ERROR when it
 * does not come; false under 'auto' (with a line under verbose).
 */
bool
KmGpuFitWait(const km_gpu_api *api, KmEngineChoice choice, int64 n, int dim, int k,
			 km_metric metric)
{
	return GpuHasRoom(api, choice, api->fit_device_bytes(n, dim, k, metric), "The fit");
}

/*
 * For other jobs (k-medoids): the GPU engine if choice allows it and this
 * backend can use a GPU, else NULL for the CPU (under 'gpu' an ERROR).
 */
const km_gpu_api *
KmGpuChoose(KmEngineChoice choice)
{
	return GpuChosen(choice);
}

/*
 * For other jobs: whether the device has need bytes free for what (under
 * 'gpu' waiting for them, or an ERROR; under 'auto' a plain answer).
 */
bool
KmGpuHasRoom(const km_gpu_api *api, KmEngineChoice choice, uint64 need, const char *what)
{
	return GpuHasRoom(api, choice, need, what);
}

/*
 * After a GPU allocation failed under 'gpu' (another session took the memory
 * between our check and our cudaMalloc): wait a little and say whether to
 * try again, within kmeans_gpu.gpu_wait counted from *since (0: now).
 */
bool
KmGpuRetryAfterNomem(TimestampTz *since)
{
	if (*since == 0)
		*since = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(*since, GetCurrentTimestamp(), kmeans_gpu_wait_ms))
		return false;
	CHECK_FOR_INTERRUPTS();
	pg_usleep(50000L);
	return true;
}

/*
 * A GPU call failed with status: a broken device disables the GPU for the
 * session.  Raises the error when raise is true (engine 'gpu'), else lets
 * the caller fall back to the CPU (with a WARNING when the device failed).
 */
void
KmGpuFailed(km_status status, const char *message, bool raise)
{
	if (status == KM_ERR_DEVICE_FATAL)
		GpuUnusable("the GPU engine was disabled for this session after a CUDA error: %s",
					message);
	if (raise)
	{
		if (status == KM_ERR_DEVICE_NOMEM)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("the fit does not fit in GPU memory"),
					 errdetail("%s", message),
					 errhint("Set kmeans_gpu.engine to 'auto' to use the CPU instead.")));
		ereport(ERROR,
				(errcode(status == KM_ERR_DEVICE_FATAL ? ERRCODE_SYSTEM_ERROR : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("the GPU engine failed: %s", message),
				 status == KM_ERR_DEVICE_FATAL ?
				 errdetail("The GPU engine is disabled for the rest of this session.") : 0));
	}
	if (status != KM_ERR_DEVICE_NOMEM)
		ereport(WARNING,
				(errmsg("the GPU engine failed, running on the CPU instead: %s", message)));
	else if (kmeans_verbose)
		ereport(INFO, (errmsg("kmeans: the GPU ran out of memory, using the CPU engine: %s", message)));
}

/* Memory context callback: the dataset goes with the rows' context. */
static void
SinkFree(void *arg)
{
	KmGpuSink  *sink = (KmGpuSink *) arg;

	if (sink->ds != NULL)
	{
		sink->api->dataset_free(sink->ds);
		sink->ds = NULL;
	}
}

/*
 * The GPU gave up on the sink's rows: free its dataset, then say so
 * (KmGpuFailed: an ERROR when the sink raises, else a warning).
 */
static void
SinkGiveUp(KmGpuSink *sink, km_status status, const char *message)
{
	SinkFree(sink);
	KmGpuFailed(status, message, sink->raise);
}

/*
 * A sink for rows of dim values, expecting about expected_rows.  Returns
 * NULL, having said nothing, when the dataset cannot be created and raise is
 * false.
 */
static KmGpuSink *
SinkCreate(const km_gpu_api *api, MemoryContext context, int dim, bool weighted,
		   int64 expected_rows, bool raise)
{
	KmGpuSink  *sink = MemoryContextAllocZero(context, sizeof(KmGpuSink));
	km_error	err;
	TimestampTz since = 0;		/* the wait counts from the first failure */

	memset(&err, 0, sizeof(err));
	sink->api = api;
	sink->weighted = weighted;
	sink->raise = raise;
	sink->dim = dim;
	sink->cb.func = SinkFree;
	sink->cb.arg = sink;
	MemoryContextRegisterResetCallback(context, &sink->cb);
	for (;;)
	{
		sink->ds = api->dataset_create(dim, weighted, Max(expected_rows, 1), &err);
		if (sink->ds != NULL)
			return sink;
		if (!(err.status == KM_ERR_DEVICE_NOMEM && raise && KmGpuRetryAfterNomem(&since)))
			break;
	}
	KmGpuFailed(err.status, err.message, raise);
	return NULL;
}

/* Hand the staged rows to the copy stream; false when the GPU gave up. */
static bool
SinkCommit(KmGpuSink *sink)
{
	km_error	err;
	km_status	st;

	if (sink->stage == NULL)
		return true;
	KmStoreFence();				/* rows were streamed in (vector_input.c) */
	memset(&err, 0, sizeof(err));
	st = sink->api->dataset_commit(sink->ds, sink->used, &err);
	sink->stage = NULL;
	sink->used = 0;
	if (st != KM_OK)
	{
		SinkGiveUp(sink, st, err.message);
		return false;
	}
	return true;
}

/*
 * Where the next row goes in the staging buffer (full buffers are committed
 * first), so that the caller can read a vector straight into pinned memory;
 * SinkTake then counts it.  NULL when the GPU gave up (only when raise is
 * false).
 */
static float *
SinkNext(KmGpuSink *sink)
{
	if (sink->ds == NULL)
		return NULL;
	if (sink->stage != NULL && sink->used == sink->room && !SinkCommit(sink))
		return NULL;
	if (sink->stage == NULL)
	{
		km_error	err;

		memset(&err, 0, sizeof(err));
		sink->stage = sink->api->dataset_stage(sink->ds, &sink->room, &sink->stage_w, &err);
		if (sink->stage == NULL)
		{
			SinkGiveUp(sink, err.status, err.message);
			return NULL;
		}
		sink->used = 0;
	}
	return sink->stage + (Size) sink->used * sink->dim;
}

/* The row at SinkNext is written: count it, with its weight. */
static void
SinkTake(KmGpuSink *sink, float weight)
{
	if (sink->weighted)
		sink->stage_w[sink->used] = weight;
	sink->used++;
}

/*
 * Copy one row (and its weight) into the staging buffer.  Returns false
 * when the GPU gave up (only when raise is false).
 */
static bool
SinkPush(KmGpuSink *sink, const float *row, float weight)
{
	float	   *slot = SinkNext(sink);

	if (slot == NULL)
		return false;
	memcpy(slot, row, sizeof(float) * sink->dim);
	SinkTake(sink, weight);
	return true;
}

/*
 * From now on, stream the rows of m to the GPU, starting with those already
 * gathered; the caller then appends every vector with KmGpuSinkAppendVector
 * and hands the sink to KmRunFit.  With keep_host the rows stay in m too,
 * so that the CPU can take over if the GPU cannot finish; without it m's
 * rows are freed and later rows go to the GPU only (under 'auto' the caller
 * must then be able to read the rows again for the CPU: KmRunFit says
 * when).  NULL when the GPU will not take the fit (under 'gpu' that is an
 * ERROR, as is any later GPU failure).
 */
KmGpuSink *
KmGpuSinkStart(KmMatrix *m, KmEngineChoice choice, int k, km_metric metric,
			   int64 expected_rows, bool keep_host)
{
	const km_gpu_api *api;
	KmGpuSink  *sink;
	const bool	raise = choice == KM_ENGINE_GPU;

	Assert(m->dim > 0);
	/* only the one-GPU float32 path streams; the others keep the host rows */
	api = KmRouteStream(choice, Max(expected_rows, m->n), m->dim,
						Min(k, Max(expected_rows, 1)), metric, m->storage, m->weighted);
	if (api == NULL)
		return NULL;
	sink = SinkCreate(api, m->context, m->dim, m->weighted, Max(expected_rows, m->n), raise);
	if (sink == NULL)
		return NULL;
	sink->cosine = m->cosine;

	for (int c = 0; c < m->nchunks; c++)
		for (int64 i = 0; i < m->chunks[c].n; i++)
			if (!SinkPush(sink, m->chunks[c].x + (Size) i * m->dim,
						  m->chunks[c].w != NULL ? m->chunks[c].w[i] : 1.0f))
				return NULL;

	if (keep_host)
		sink->host = m;
	else
	{
		sink->n = m->n;
		KmMatrixReleaseRows(m);
		sink->scratch = MemoryContextAlloc(m->context, sizeof(float) * m->dim);
	}
	return sink;
}

/*
 * Append a vector, with its weight, after checking it: into the host rows
 * and copied on to the GPU, or straight into pinned memory when the GPU
 * only has the rows (once it gave up: nowhere, counted still).
 */
void
KmGpuSinkAppendVector(KmGpuSink *sink, ArrayType *vec, float weight)
{
	int			dim;
	float	   *row;

	if (sink->host != NULL)
	{
		if (sink->ds == NULL)
			KmMatrixAppendVector(sink->host, vec, weight);
		else
		{
			/* false: the GPU gave up; the rows are on the host for the CPU */
			(void) SinkPush(sink, KmMatrixAppendVectorRow(sink->host, vec, weight), weight);
		}
		return;
	}
	dim = KmVectorDim(vec);
	KmCheckDimension(sink->dim, dim);
	row = SinkNext(sink);
	sink->n++;
	/* stream the row into pinned memory (SinkCommit fences), not into scratch */
	KmVectorReadRow(vec, dim, row != NULL ? row : sink->scratch, row != NULL, sink->cosine);
	if (row != NULL)
		SinkTake(sink, weight);
}

/* The rows appended so far, those gathered before the start included. */
int64
KmGpuSinkRows(const KmGpuSink *sink)
{
	return sink->host != NULL ? sink->host->n : sink->n;
}

/* Whether the GPU still takes the rows (it did not give up). */
bool
KmGpuSinkLive(const KmGpuSink *sink)
{
	return sink->ds != NULL;
}

/* Whether the host keeps every row too (KmGpuSinkStart's keep_host). */
bool
KmGpuSinkHostRows(const KmGpuSink *sink)
{
	return sink->host != NULL;
}

/* Commit what is staged; false when the GPU gave up. */
bool
KmGpuSinkFinish(KmGpuSink *sink)
{
	if (sink->ds == NULL)
		return false;
	return SinkCommit(sink);
}

/*
 * Feed the sink from ring, which other processes fill (the parallel read's
 * ring, parallel_read.c): a thread of the dataset drains it (dataset.cu)
 * until KmGpuSinkDrainFinish.  The sink must hold no host rows and nothing
 * staged.  false when CUDA cannot register the ring's memory (the sink is
 * as it was: the caller reads the rows otherwise) or the GPU gave up (an
 * ERROR when raise; else the sink is dead).
 */
bool
KmGpuSinkDrainStart(KmGpuSink *sink, const km_ring *ring)
{
	km_error	err;
	km_status	st;

	Assert(sink->host == NULL && sink->stage == NULL);
	if (sink->ds == NULL)
		return false;
	memset(&err, 0, sizeof(err));
	st = sink->api->dataset_drain_start(sink->ds, ring, &err);
	if (st == KM_ERR_UNAVAILABLE)
	{
		if (kmeans_verbose)
			ereport(INFO, (errmsg("kmeans_fit: reading in one process: %s", err.message)));
		return false;
	}
	if (st != KM_OK)
	{
		SinkGiveUp(sink, st, err.message);
		return false;
	}
	return true;
}

/*
 * The ring's writers are done: the rest of the ring goes to the GPU, and
 * the drain ends.  The sink then counts the rows drained, and
 * *positive_weight says whether one weighs more than 0.  false when the
 * GPU gave up (as KmGpuSinkDrainStart).
 */
bool
KmGpuSinkDrainFinish(KmGpuSink *sink, bool *positive_weight)
{
	km_error	err;
	km_status	st;
	int			positive = 0;

	memset(&err, 0, sizeof(err));
	st = sink->api->dataset_drain_finish(sink->ds, &positive, &err);
	if (st != KM_OK)
	{
		SinkGiveUp(sink, st, err.message);
		return false;
	}
	sink->n = sink->api->dataset_rows(sink->ds);
	*positive_weight = positive != 0;
	return true;
}

/* End a drain at once (an error, before the ring's memory goes). */
void
KmGpuSinkDrainStop(KmGpuSink *sink)
{
	if (sink->ds != NULL)
		sink->api->dataset_drain_stop(sink->ds);
}

/*
 * A fit on the GPU: on the rows streamed to sink (finished), or, with sink
 * NULL, on the host rows of data as route says (gpu_plan.c): on the one
 * GPU, or split over its layout's logical devices, in memory or out of
 * core (from explicit centroids: KmRunFit seeds on the host).
 */
km_status
KmGpuFit(const KmFitRoute *route, KmGpuSink *sink, const km_data *data,
		 const km_params *params, const km_hooks *hooks, km_result *result, km_error *err)
{
	if (sink != NULL)
		return sink->api->dataset_fit(sink->ds, params, hooks, result, err);
	Assert(gpu_api != NULL);
	if (route->mode == KM_MODE_SPLIT || route->mode == KM_MODE_OUT_OF_CORE)
	{
		Assert(params->init == KM_INIT_EXPLICIT && params->n_init == 1);
		return gpu_api->split_fit(data, params, &route->layout, hooks, result, err);
	}
	return gpu_api->engine->fit(data, params, hooks, result, err);
}

/*
 * The GPU for kmeans_labels batches, or NULL for the CPU.
 */
const km_engine *
KmGpuForAssign(KmEngineChoice choice, int64 batch_rows, int dim, int k)
{
	const km_gpu_api *api = GpuChosen(choice);

	if (api == NULL ||
		!GpuHasRoom(api, choice, api->assign_device_bytes(batch_rows, dim, k),
					"Labelling a batch of rows"))
		return NULL;
	return api->engine;
}

PG_FUNCTION_INFO_V1(kmeans_gpu_devices);

/*
 * kmeans_gpu_devices() -> the GPUs this backend sees: (device, name,
 * total_memory, free_memory, compute_capability, multiprocessors).  No rows
 * when there is none (the engine setting's error says why).
 */
Datum
kmeans_gpu_devices(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);
	const km_gpu_api *api = GpuGet();
	km_error	err;
	int			count;

	if (api == NULL)
		return (Datum) 0;
	memset(&err, 0, sizeof(err));
	count = api->device_count(&err);
	for (int i = 0; i < count; i++)
	{
		km_gpu_device info;
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		if (api->device_info(i, &info, &err) != KM_OK)
			KmGpuFailed(err.status, err.message, true);
		values[0] = Int32GetDatum(i);
		values[1] = CStringGetTextDatum(info.name);
		values[2] = Int64GetDatum((int64) info.total_bytes);
		values[3] = Int64GetDatum((int64) info.free_bytes);
		values[4] = CStringGetTextDatum(psprintf("%d.%d", info.cc_major, info.cc_minor));
		values[5] = Int32GetDatum(info.multiprocessors);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
