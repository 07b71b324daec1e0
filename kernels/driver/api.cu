/*
 * api.cu
 *	  The km_gpu_api table of kmeans_gpu_cuda.so: lazy CUDA start, device
 *	  choice and limits, error mapping and the sticky "device is broken"
 *	  state, and the km_engine entry points that take rows from host memory.
 *
 * Nothing here runs when the object is loaded: the first table call that
 * needs the device starts CUDA (kmg_begin).  Every CUDA failure becomes a
 * km_error whose message names the call and cudaGetErrorString; errors that
 * leave the context unusable (illegal address, launch failure, ECC, ...)
 * set a process-wide flag after which every entry point answers
 * KM_ERR_DEVICE_FATAL at once.  A failed allocation is KM_ERR_DEVICE_NOMEM
 * and the error is cleared, so the device stays usable.
 *
 * One thread at a time: the SQL layer calls from its backend's thread.
 */
#include "kmg_common.cuh"
#include "driver/driver.cuh"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The process's CUDA state: one device at a time, one thread at a time. */
static struct
{
	int			started;		/* CUDA initialised by this process */
	int			fatal;			/* a sticky error was seen */
	char		fatal_msg[200];
	int			ordinal;		/* device of later calls */
	kmg_device	dev;
} kmg_g = {0, 0, "", 0, {0, 0, 0, 0, 0, 0, 0}};

/* Errors after which the CUDA context cannot be used again. */
static int
kmg_sticky(cudaError_t e)
{
	switch (e)
	{
		case cudaErrorIllegalAddress:
		case cudaErrorLaunchFailure:
		case cudaErrorIllegalInstruction:
		case cudaErrorMisalignedAddress:
		case cudaErrorHardwareStackError:
		case cudaErrorInvalidPc:
		case cudaErrorECCUncorrectable:
		case cudaErrorAssert:
		case cudaErrorLaunchTimeout:
		case cudaErrorInvalidAddressSpace:
		case cudaErrorNvlinkUncorrectable:
		case cudaErrorContextIsDestroyed:
		case cudaErrorIllegalState:
		case cudaErrorUnknown:
			return 1;
		default:
			return 0;
	}
}

/*
 * Fill err (when given) with status and a printf-style message; returns
 * status so that a caller can return it at once.
 */
km_status
kmg_set_error(km_error *err, km_status status, const char *fmt,...)
{
	if (err != NULL)
	{
		va_list		ap;

		err->status = status;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return status;
}

/*
 * Map a failed CUDA call (what names it) to a km_status and message: sticky
 * errors make the device unusable for the rest of the process
 * (KM_ERR_DEVICE_FATAL), a failed allocation is KM_ERR_DEVICE_NOMEM, a
 * missing or unsupported device KM_ERR_UNAVAILABLE, the rest KM_ERR_DEVICE.
 * Non-sticky errors are cleared so that later calls start clean.
 */
km_status
kmg_cuda_error(km_error *err, cudaError_t e, const char *what)
{
	km_status	status;

	if (kmg_sticky(e))
	{
		status = KM_ERR_DEVICE_FATAL;
		if (!kmg_g.fatal)
		{
			kmg_g.fatal = 1;
			snprintf(kmg_g.fatal_msg, sizeof(kmg_g.fatal_msg), "%s: %s",
					 what, cudaGetErrorString(e));
		}
	}
	else if (e == cudaErrorMemoryAllocation)
		status = KM_ERR_DEVICE_NOMEM;
	else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
			 e == cudaErrorDevicesUnavailable || e == cudaErrorInitializationError ||
			 e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorSystemDriverMismatch ||
			 e == cudaErrorUnsupportedPtxVersion || e == cudaErrorNoKernelImageForDevice)
		status = KM_ERR_UNAVAILABLE;
	else
		status = KM_ERR_DEVICE;
	/* clear a non-sticky error so that later calls start clean */
	if (status != KM_ERR_DEVICE_FATAL)
		(void) cudaGetLastError();
	return kmg_set_error(err, status, "CUDA error in %s: %s (%s)", what,
						 cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Refuse at once after a sticky error. */
static km_status
kmg_check_fatal(km_error *err)
{
	if (kmg_g.fatal)
		return kmg_set_error(err, KM_ERR_DEVICE_FATAL,
							 "the GPU is unusable after an earlier error: %s",
							 kmg_g.fatal_msg);
	return KM_OK;
}

/*
 * The limits of device ordinal that the kernels are sized by (multiprocessors,
 * shared memory per block and per multiprocessor, and what the hardware
 * reserves of it per block), its compute capability, and its largest L2
 * access-policy window.
 */
cudaError_t
kmg_device_limits(int ordinal, kmg_device *dev)
{
	int			v[7] = {0, 0, 0, 0, 0, 0, 0};
	const cudaDeviceAttr attr[7] = {
		cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin,
		cudaDevAttrMaxSharedMemoryPerMultiprocessor, cudaDevAttrReservedSharedMemoryPerBlock,
		cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
		cudaDevAttrMaxAccessPolicyWindowSize
	};

	for (int i = 0; i < 7; i++)
	{
		cudaError_t e = cudaDeviceGetAttribute(&v[i], attr[i], ordinal);

		if (e != cudaSuccess)
			return e;
	}
	memset(dev, 0, sizeof(*dev));
	dev->ordinal = ordinal;
	dev->sms = v[0];
	dev->smem_optin = (size_t) v[1];
	dev->smem_per_sm = (size_t) v[2];
	dev->smem_reserved = (size_t) v[3];
	dev->cc_major = v[4];
	dev->cc_minor = v[5];
	dev->max_window = v[6] > 0 ? (size_t) v[6] : 0;
	return cudaSuccess;
}

/*
 * The start of every entry point that needs the device: refuse after a
 * sticky error; on the first call start CUDA on the chosen device, create
 * its context, read its limits and refuse devices older than compute
 * capability 8.0; later calls only make the device current.
 */
km_status
kmg_begin(km_error *err)
{
	cudaError_t e;
	int			count = 0;

	if (kmg_check_fatal(err) != KM_OK)
		return KM_ERR_DEVICE_FATAL;
	if (kmg_g.started)
	{
		e = cudaSetDevice(kmg_g.ordinal);
		return e == cudaSuccess ? KM_OK : kmg_cuda_error(err, e, "cudaSetDevice");
	}
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaGetDeviceCount");
	if (count <= 0 || kmg_g.ordinal >= count)
		return kmg_set_error(err, KM_ERR_UNAVAILABLE, "no CUDA device %d (%d found)",
							 kmg_g.ordinal, count);
	e = cudaSetDevice(kmg_g.ordinal);
	if (e == cudaSuccess)
		e = cudaFree(0);		/* create the context now, not in a kernel launch */
	if (e != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaSetDevice");
	if ((e = kmg_device_limits(kmg_g.ordinal, &kmg_g.dev)) != cudaSuccess)
		return kmg_cuda_error(err, e, "cudaDeviceGetAttribute");
	if (kmg_g.dev.cc_major < 8)
		return kmg_set_error(err, KM_ERR_UNAVAILABLE,
							 "GPU %d has compute capability %d.%d; 8.0 or later is needed",
							 kmg_g.ordinal, kmg_g.dev.cc_major, kmg_g.dev.cc_minor);
	kmg_g.started = 1;
	return KM_OK;
}

/* The limits of the device in use (kmg_begin has run). */
const kmg_device *
kmg_dev(void)
{
	return &kmg_g.dev;
}

/* Seconds on the monotonic clock: progress reports and the batches' timing. */
double
kmg_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/*
 * Host memory of a call: through the caller's alloc hook when it gives one
 * (the SQL layer's memory context), else malloc.  Never asks for 0 bytes.
 */
void *
kmg_host_alloc(const km_hooks *hooks, size_t size)
{
	if (size == 0)
		size = 1;
	if (hooks != NULL && hooks->alloc != NULL)
		return hooks->alloc(hooks->ctx, size);
	return malloc(size);
}

/*
 * Give back what kmg_host_alloc gave: through the free hook (none: the
 * caller's context frees it later), or free.  NULL is ignored.
 */
void
kmg_host_free(const km_hooks *hooks, void *p)
{
	if (p == NULL)
		return;
	if (hooks != NULL && hooks->alloc != NULL)
	{
		if (hooks->free != NULL)
			hooks->free(hooks->ctx, p);
	}
	else
		free(p);
}

/* ---- the table ---- */

/* km_gpu_api.device_count: CUDA devices visible; 0 with error filled if none. */
static int
kmg_device_count(km_error *error)
{
	int			count = 0;
	cudaError_t e;

	if (kmg_check_fatal(error) != KM_OK)
		return 0;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess)
	{
		kmg_cuda_error(error, e, "cudaGetDeviceCount");
		return 0;
	}
	if (count == 0)
		kmg_set_error(error, KM_ERR_UNAVAILABLE, "no CUDA device found");
	return count;
}

/*
 * km_gpu_api.device_info: name, memory (total and free now), compute
 * capability and multiprocessors of device ordinal.  Free memory is per
 * context, so it is asked on that device, and the current device restored.
 */
static km_status
kmg_device_info(int ordinal, km_gpu_device *out, km_error *error)
{
	cudaDeviceProp prop;
	cudaError_t e;
	size_t		freeb = 0,
				total = 0;
	int			cur = 0;

	if (kmg_check_fatal(error) != KM_OK)
		return KM_ERR_DEVICE_FATAL;
	e = cudaGetDeviceProperties(&prop, ordinal);
	if (e != cudaSuccess)
		return kmg_cuda_error(error, e, "cudaGetDeviceProperties");
	memset(out, 0, sizeof(*out));
	out->ordinal = ordinal;
	{
		size_t		len = strnlen(prop.name, sizeof(prop.name));

		if (len > sizeof(out->name) - 1)
			len = sizeof(out->name) - 1;
		memcpy(out->name, prop.name, len);
		out->name[len] = '\0';
	}
	out->total_bytes = prop.totalGlobalMem;
	out->cc_major = prop.major;
	out->cc_minor = prop.minor;
	out->multiprocessors = prop.multiProcessorCount;
	/* free memory is per context: ask on that device, then come back */
	if ((e = cudaGetDevice(&cur)) != cudaSuccess ||
		(e = cudaSetDevice(ordinal)) != cudaSuccess ||
		(e = cudaMemGetInfo(&freeb, &total)) != cudaSuccess ||
		(e = cudaSetDevice(cur)) != cudaSuccess)
		return kmg_cuda_error(error, e, "cudaMemGetInfo");
	out->free_bytes = freeb;
	return KM_OK;
}

/*
 * The device of later calls (km_gpu_api.set_device, and the split fits'
 * labels on each of their devices); its limits are read again when it
 * changes.  Starts CUDA on it.
 */
km_status
kmg_use_device(int ordinal, km_error *error)
{
	int			count = 0;
	cudaError_t e;

	if (kmg_check_fatal(error) != KM_OK)
		return KM_ERR_DEVICE_FATAL;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess)
		return kmg_cuda_error(error, e, "cudaGetDeviceCount");
	if (ordinal < 0 || ordinal >= count)
		return kmg_set_error(error, KM_ERR_INVALID, "no CUDA device %d (%d found)",
							 ordinal, count);
	if (kmg_g.started && ordinal != kmg_g.ordinal)
		kmg_g.started = 0;		/* re-read the attributes of the new device */
	kmg_g.ordinal = ordinal;
	return kmg_begin(error);
}

/* km_gpu_api.set_device */
static km_status
kmg_set_device(int ordinal, km_error *error)
{
	return kmg_use_device(ordinal, error);
}

/*
 * km_gpu_api.fit_device_bytes: device memory a fit of that shape takes,
 * the rows (weighted, to be safe) and the fit's arena; 0 for a bad shape.
 */
static uint64_t
kmg_fit_device_bytes(int64_t n, int d, int k, km_metric metric)
{
	if (n < 1 || d < 1 || k < 1)
		return 0;
	return kmg_ds_bytes(n, d, 1) + kmg_fit_bytes(n, d, k, metric, 1);
}

/* km_gpu_api.assign_device_bytes: the same for assign of one batch. */
static uint64_t
kmg_assign_device_bytes(int64_t batch_rows, int d, int k)
{
	if (batch_rows < 1 || d < 1 || k < 1)
		return 0;
	return kmg_ds_bytes(batch_rows, d, 1) + kmg_assign_bytes(batch_rows, d, k);
}

/* ---- km_engine on host rows ---- */

/* Whether any chunk of data carries weights. */
static int
kmg_data_weighted(const km_data *data)
{
	for (int c = 0; c < data->nchunks; c++)
		if (data->chunks[c].w != NULL)
			return 1;
	return 0;
}

/* The limits of the engine on host rows: some rows, fewer than 2^31, d <= 32768. */
static km_status
kmg_check_data(const km_data *data, km_error *error)
{
	if (data == NULL || data->d < 1 || data->n < 1 || data->nchunks < 1 || data->chunks == NULL)
		return kmg_set_error(error, KM_ERR_INVALID, "no rows");
	if (data->n >= INT32_MAX)
		return kmg_set_error(error, KM_ERR_INVALID,
							 "the GPU engine takes fewer than 2^31 rows per call");
	if (data->d > 32768)
		return kmg_set_error(error, KM_ERR_INVALID,
							 "the GPU engine takes at most 32768 dimensions");
	return KM_OK;
}

/*
 * km_engine.fit on host rows: all of them go up into one internal dataset
 * (dataset.cu), then the fit runs on the device (fit.cu).
 */
static km_status
kmg_engine_fit(const km_data *data, const km_params *params, const km_hooks *hooks,
			   km_result *result, km_error *error)
{
	km_gpu_dataset *ds = NULL;
	km_status	st;
	kmg_rows	rows;

	if ((st = kmg_begin(error)) != KM_OK)
		return st;
	if ((st = kmg_check_data(data, error)) != KM_OK)
		return st;
	ds = kmg_ds_create(data->d, kmg_data_weighted(data), data->n, 1, error);
	if (ds == NULL)
		return error->status;
	st = kmg_ds_load(ds, data, 0, data->n, error);
	if (st == KM_OK)
		st = kmg_ds_sync(ds, error);
	if (st == KM_OK)
	{
		kmg_ds_rows_view(ds, &rows);
		st = kmg_fit_rows(&rows, params, hooks, result, error);
	}
	kmg_ds_free(ds);
	return st;
}

/*
 * assign and map: rows go up in batches that fit the device, each batch
 * through the same upload path as a fit.
 */
km_status
kmg_engine_batches(const km_data *data, const float *centroids, int k, km_metric metric,
				   int32_t *labels, double *distances, km_partial *partial,
				   const km_hooks *hooks, km_error *error)
{
	km_gpu_dataset *ds = NULL;
	km_status	st;
	const int	dp = KMG_ROUND_UP(data->d, KM_FILTER_DPAD);
	int64_t		batch = ((int64_t) 512 << 20) / ((int64_t) dp * 4);

	if ((st = kmg_begin(error)) != KM_OK)
		return st;
	if ((st = kmg_check_data(data, error)) != KM_OK)
		return st;
	if (k < 1 || centroids == NULL)
		return kmg_set_error(error, KM_ERR_INVALID, "no centroids");
	if (batch < 65536)
		batch = 65536;
	if (batch > data->n)
		batch = data->n;
	ds = kmg_ds_create(data->d, kmg_data_weighted(data), batch, 1, error);
	if (ds == NULL)
		return error->status;
	st = KM_OK;
	for (int64_t r0 = 0; r0 < data->n && st == KM_OK; r0 += batch)
	{
		const int64_t m = data->n - r0 < batch ? data->n - r0 : batch;
		kmg_rows	rows;

		kmg_ds_reset(ds);
		st = kmg_ds_load(ds, data, r0, m, error);
		if (st == KM_OK)
			st = kmg_ds_sync(ds, error);
		if (st != KM_OK)
			break;
		kmg_ds_rows_view(ds, &rows);
		st = kmg_assign_rows(&rows, centroids, k, metric,
							 labels != NULL ? labels + r0 : NULL,
							 distances != NULL ? distances + r0 : NULL,
							 partial, hooks, error);
		if (st == KM_OK && hooks != NULL && hooks->poll != NULL && hooks->poll(hooks->ctx))
			st = kmg_set_error(error, KM_ERR_CANCELLED, "cancelled");
	}
	kmg_ds_free(ds);
	return st;
}

/* km_engine.assign: labels and distances of host rows, in batches. */
static km_status
kmg_engine_assign(const km_data *data, const float *centroids, int k, km_metric metric,
				  int32_t *labels, double *distances, const km_hooks *hooks, km_error *error)
{
	return kmg_engine_batches(data, centroids, k, metric, labels, distances, NULL, hooks, error);
}

/* km_engine.map: per-cluster sums of host rows into partial, in batches. */
static km_status
kmg_engine_map(const km_data *data, const float *centroids, int k, km_metric metric,
			   km_partial *partial, const km_hooks *hooks, km_error *error)
{
	if (partial == NULL)
		return kmg_set_error(error, KM_ERR_INVALID, "no partial to fill");
	return kmg_engine_batches(data, centroids, k, metric, NULL, NULL, partial, hooks, error);
}

/*
 * The GPU engine on host rows.  No fit_workspace: the host memory of a GPU
 * fit is a few k-sized arrays, and nothing asks (KmFitMemory sizes the CPU
 * engine's fits only).
 */
static const km_engine kmg_engine = {
	KM_ENGINE_ABI,
	"gpu",
	NULL,
	kmg_engine_fit,
	kmg_engine_assign,
	kmg_engine_map,
	NULL						/* seed: the SQL layer seeds other inits with the CPU engine */
};

/* ---- streaming datasets ---- */

/* km_gpu_api.dataset_create: an empty dataset of d floats a row on the device. */
static km_gpu_dataset *
kmg_api_dataset_create(int d, int weighted, int64_t expected_rows, km_error *error)
{
	if (kmg_begin(error) != KM_OK)
		return NULL;
	if (d < 1 || d > 32768)
	{
		kmg_set_error(error, KM_ERR_INVALID, "dimension %d out of range", d);
		return NULL;
	}
	return kmg_ds_create(d, weighted, expected_rows, 0, error);
}

/* km_gpu_api.dataset_stage: pinned room for the next rows (dataset.cu). */
static float *
kmg_api_dataset_stage(km_gpu_dataset *ds, int64_t *room, float **weights, km_error *error)
{
	if (kmg_begin(error) != KM_OK)
		return NULL;
	return kmg_ds_stage(ds, room, weights, error);
}

/* km_gpu_api.dataset_commit: send the rows written into the staged room. */
static km_status
kmg_api_dataset_commit(km_gpu_dataset *ds, int64_t rows, km_error *error)
{
	km_status	st;

	if ((st = kmg_begin(error)) != KM_OK)
		return st;
	return kmg_ds_commit(ds, rows, error);
}

/* km_gpu_api.dataset_rows: rows committed so far (0 for NULL). */
static int64_t
kmg_api_dataset_rows(const km_gpu_dataset *ds)
{
	return ds != NULL ? kmg_ds_rows(ds) : 0;
}

/*
 * km_gpu_api.dataset_fit: wait for the uploads, then fit on the dataset's
 * rows where they are.
 */
static km_status
kmg_api_dataset_fit(km_gpu_dataset *ds, const km_params *params, const km_hooks *hooks,
					km_result *result, km_error *error)
{
	km_status	st;
	kmg_rows	rows;

	if ((st = kmg_begin(error)) != KM_OK)
		return st;
	if (ds == NULL || kmg_ds_rows(ds) < 1)
		return kmg_set_error(error, KM_ERR_INVALID, "the dataset holds no rows");
	if ((st = kmg_ds_sync(ds, error)) != KM_OK)
		return st;
	kmg_ds_rows_view(ds, &rows);
	return kmg_fit_rows(&rows, params, hooks, result, error);
}

/* km_gpu_api.dataset_free: the dataset and its device and pinned memory. */
static void
kmg_api_dataset_free(km_gpu_dataset *ds)
{
	if (ds != NULL)
		kmg_ds_free(ds);
}

/* km_gpu_api.dataset_drain_start: feed the dataset from a ring (dataset.cu). */
static km_status
kmg_api_dataset_drain_start(km_gpu_dataset *ds, const km_ring *ring, km_error *error)
{
	km_status	st;

	if ((st = kmg_begin(error)) != KM_OK)
		return st;
	return kmg_ds_drain_start(ds, ring, error);
}

/* km_gpu_api.dataset_drain_finish: the writers are done; the rest of the ring, then the end. */
static km_status
kmg_api_dataset_drain_finish(km_gpu_dataset *ds, int *positive_weight, km_error *error)
{
	return kmg_ds_drain_finish(ds, positive_weight, error);
}

/* km_gpu_api.dataset_drain_stop: end a drain now. */
static void
kmg_api_dataset_drain_stop(km_gpu_dataset *ds)
{
	kmg_ds_drain_stop(ds);
}

/*
 * km_gpu_api.release_all (end of a transaction or backend): free every
 * dataset and k-medoids handle still alive; after a sticky error also
 * reset the device, the only way to give back a broken context's memory.
 */
static void
kmg_release_all(void)
{
	kmg_ds_free_all();
	kmg_kmd_free_all();
	if (kmg_g.fatal && kmg_g.started)
		(void) cudaDeviceReset();	/* the only way to give back a broken context's memory */
}

/* The table kmeans_gpu_cuda.so exports. */
static const km_gpu_api kmg_api = {
	KM_GPU_ABI,
	kmg_device_count,
	kmg_device_info,
	kmg_set_device,
	kmg_fit_device_bytes,
	kmg_assign_device_bytes,
	&kmg_engine,
	kmg_api_dataset_create,
	kmg_api_dataset_stage,
	kmg_api_dataset_commit,
	kmg_api_dataset_rows,
	kmg_api_dataset_fit,
	kmg_api_dataset_free,
	kmg_release_all,
	kmg_kmd_device_bytes,
	kmg_kmd_host_bytes,
	kmg_kmd_open,
	kmg_kmd_steps,
	kmg_kmd_close,
	kmg_kmd_silhouette_rows,
	kmg_split_plan,
	kmg_split_fit,
	kmg_split_assign,
	kmg_split_copy_rate,
	kmg_api_dataset_drain_start,
	kmg_api_dataset_drain_finish,
	kmg_api_dataset_drain_stop
};

/* The one symbol of kmeans_gpu_cuda.so the SQL layer looks up (dlsym). */
extern "C" __attribute__((visibility("default"))) const km_gpu_api *
km_gpu_get_api(void)
{
	return &kmg_api;
}
