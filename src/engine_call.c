/*
 * engine_call.c
 *	  Running an engine from a backend: choosing it, checking memory,
 *	  wiring its hooks to PostgreSQL, and turning its failures into ERRORs.
 *
 * The engine is plain C and may run worker threads.  It allocates through
 * hooks that use a memory context of its own (so an ERROR anywhere frees
 * everything), it polls QueryCancelPending and ProcDiePending from the
 * calling thread between tiles, and its progress callback, the only place
 * where PostgreSQL code runs during a fit, catches any error it raises and
 * asks the engine to stop; the error is re-thrown once the engine has
 * joined its threads and returned.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "kmeans_gpu.h"
#include "km_kmpar.h"

/* hooks->alloc: huge allocations allowed, NULL instead of an ERROR */
static void *
KmHookAlloc(void *ctx, size_t size)
{
	KmCall	   *call = (KmCall *) ctx;

	if (size > MaxAllocHugeSize)
		return NULL;
	return MemoryContextAllocExtended(call->context, Max(size, 1),
									  MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

static void
KmHookFree(void *ctx, void *ptr)
{
	if (ptr != NULL)
		pfree(ptr);
}

/*
 * hooks->poll, called often and possibly while worker threads run: it only
 * reads the flags that will make CHECK_FOR_INTERRUPTS() throw.
 */
static int
KmHookPoll(void *ctx)
{
	return QueryCancelPending || ProcDiePending;
}

/*
 * The progress line of a report in call.  A call seeded by k-means++ has its
 * potential in the reports once it is known, from two centroids on
 * (km_progress.inertia; 0 is then a potential, on rows that the seeds cover
 * exactly, not its absence).
 */
static const char *
PhaseLine(const km_progress *p, const KmCall *call, char *buf, size_t len)
{
	const int	n_init = call->n_init;

	switch (p->phase)
	{
		case KM_PHASE_PREPARE:
			snprintf(buf, len, "prepared the rows");
			break;
		case KM_PHASE_SEED:
			if (n_init == 0)	/* k-medoids */
				snprintf(buf, len, "seeded " INT64_FORMAT "/" INT64_FORMAT " medoids",
						 p->done, p->total);
			else if (call->kmeanspp && p->done >= 2)
				snprintf(buf, len, "run %d/%d: seeded " INT64_FORMAT "/" INT64_FORMAT
						 " centroids, potential %.6g",
						 p->run + 1, n_init, p->done, p->total, p->inertia);
			else
				snprintf(buf, len, "run %d/%d: seeded " INT64_FORMAT "/" INT64_FORMAT " centroids",
						 p->run + 1, n_init, p->done, p->total);
			break;
		case KM_PHASE_ITERATE:
			if (n_init == 0 && p->moved < 0)	/* k-medoids, FasterPAM */
				snprintf(buf, len, "pass %d: cost %.10g, swaps %d",
						 p->iteration, p->inertia, p->relocated);
			else if (n_init == 0)	/* k-medoids, alternating */
				snprintf(buf, len, "round %d: cost %.10g, moved %.6f, medoids changed %d",
						 p->iteration, p->inertia, p->moved, p->relocated);
			else
				snprintf(buf, len, "run %d/%d, iteration %d: inertia %.6g, moved %.6f%s",
						 p->run + 1, n_init, p->iteration, p->inertia, p->moved,
						 p->relocated > 0 ? ", re-seeded empty clusters" : "");
			break;
		case KM_PHASE_FINISH:
			snprintf(buf, len, "final assignment done");
			break;
	}
	return buf;
}

/*
 * hooks->report: between iterations, no worker busy.  Processes interrupts
 * and prints progress when kmeans_gpu.verbose is on; an ERROR raised here is
 * kept and the engine is asked to stop.
 */
static int
KmHookReport(void *ctx, const km_progress *progress)
{
	KmCall	   *call = (KmCall *) ctx;
	MemoryContext oldcontext = CurrentMemoryContext;
	int			stop = 0;

	PG_TRY();
	{
		CHECK_FOR_INTERRUPTS();
		if (kmeans_verbose)
		{
			char		line[256];

			ereport(INFO,
					(errmsg("%s: %s, %.3f s", call->n_init == 0 ? "kmedoids" : "kmeans",
							PhaseLine(progress, call, line, sizeof(line)),
							progress->elapsed)));
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(call->error_context);
		call->error = CopyErrorData();
		FlushErrorState();
		MemoryContextSwitchTo(oldcontext);
		stop = 1;
	}
	PG_END_TRY();
	return stop;
}

/* Failures that the CPU engine can recover from under 'auto'. */
static bool
IsDeviceFailure(km_status status)
{
	return status == KM_ERR_DEVICE || status == KM_ERR_DEVICE_FATAL ||
		status == KM_ERR_DEVICE_NOMEM || status == KM_ERR_UNAVAILABLE;
}

/*
 * Start an engine call: its memory context and the hooks that wire the
 * engine to this backend.  n_init 0 marks a k-medoids call (for progress
 * lines).
 */
void
KmCallBegin(KmCall *call, km_hooks *hooks, int n_init)
{
	memset(call, 0, sizeof(*call));
	call->context = AllocSetContextCreate(CurrentMemoryContext, "kmeans engine",
										  ALLOCSET_DEFAULT_SIZES);
	call->error_context = CurrentMemoryContext;
	call->n_init = n_init;

	memset(hooks, 0, sizeof(*hooks));
	hooks->ctx = call;
	hooks->alloc = KmHookAlloc;
	hooks->free = KmHookFree;
	hooks->poll = KmHookPoll;
	hooks->report = KmHookReport;
	hooks->n_threads = KmCpuThreads();
}

/*
 * Drop an engine call that returned (or is to be tried again): free its
 * memory, and raise an error caught in a callback, if any.
 */
void
KmCallAbandon(KmCall *call)
{
	MemoryContextDelete(call->context);
	if (call->error != NULL)
		ReThrowError(call->error);
}

/*
 * After the engine returned: free its memory, then raise whatever went
 * wrong, first an error caught in a callback, then the engine's own.
 * recoverable: a device failure is not raised but returned (true), so that
 * the caller can run the CPU engine instead.
 */
static bool
KmCallEnd(KmCall *call, km_status status, const km_error *err, bool recoverable)
{
	KmCallAbandon(call);
	if (IsDeviceFailure(status))
	{
		/* raises unless recoverable */
		KmGpuFailed(status, err->message, !recoverable);
		return true;
	}

	switch (status)
	{
		case KM_OK:
			return false;
		case KM_ERR_CANCELLED:
			CHECK_FOR_INTERRUPTS();
			/* the flag was cleared under us; still, the work did not finish */
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling k-means due to user request")));
			break;
		case KM_ERR_NOMEM:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory in the k-means engine"),
					 errdetail("%s", err->message)));
			break;
		case KM_ERR_INVALID:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("k-means engine rejected the input: %s", err->message)));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("k-means engine failed: %s", err->message)));
	}
	return false;
}

/*
 * Memory a fit needs: the rows (data_bytes, already held or about to be),
 * the engine's working memory and the result.
 */
Size
KmFitMemory(int64 n, int dim, int k, Size data_bytes, bool want_labels)
{
	const km_engine *engine = &km_cpu_engine;
	Size		need;

	need = add_size(data_bytes, engine->fit_workspace(n, dim, k, KmCpuThreads()));
	need = add_size(need, mul_size(mul_size((Size) k, (Size) dim), sizeof(float)));
	need = add_size(need, mul_size((Size) k, sizeof(int64) + sizeof(double)));
	if (want_labels)
		need = add_size(need, mul_size((Size) n, sizeof(int32)));
	return need;
}

/*
 * Whether the GPU engine seeds with init itself (on one GPU: split fits are
 * always seeded on the host).  For the others (k-means||, afk-mc2) the CPU
 * engine seeds on the host (KmFitHostSeeded), so the rows must stay in
 * host memory too (callers of KmGpuSinkStart keep them).
 */
bool
KmInitOnGpu(km_init init)
{
	return init == KM_INIT_KMEANSPP || init == KM_INIT_RANDOM || init == KM_INIT_EXPLICIT;
}

/*
 * A GPU fit seeded on the host: with an init the GPU does not implement,
 * or split over several devices or out of core (route), whose split_fit
 * fits from explicit centroids only.  Each of the n_init runs is seeded on
 * the host by the CPU engine's seed, as the CPU engine would seed it, and
 * fitted on the GPU from those explicit centroids; the run with the lowest
 * inertia wins, ties to the first, as in the CPU engine.
 */
static km_status
KmFitHostSeeded(const KmFitRoute *route, KmGpuSink *sink, const km_data *data,
				const km_params *params, const km_hooks *hooks, km_result *result,
				km_error *err)
{
	km_params	one = *params;
	km_result	rr;
	Size		kd = (Size) params->k * data->d;
	float	   *start = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);

	memset(&rr, 0, sizeof(rr));
	rr.centroids = palloc_extended(sizeof(float) * kd, MCXT_ALLOC_HUGE);
	rr.sizes = palloc(sizeof(int64) * params->k);
	rr.cluster_inertia = palloc(sizeof(double) * params->k);
	if (result->labels != NULL)
		rr.labels = palloc_extended(sizeof(int32) * (Size) data->n, MCXT_ALLOC_HUGE);
	one.init = KM_INIT_EXPLICIT;
	one.init_centroids = start;
	one.n_init = 1;
	for (int run = 0; run < params->n_init; run++)
	{
		km_status	status = km_cpu_engine.seed(data, params, run, hooks, start, err);

		if (status == KM_OK)
			status = KmGpuFit(route, sink, data, &one, hooks, &rr, err);
		if (status != KM_OK)
			return status;
		if (run > 0 && !(rr.inertia < result->inertia))
			continue;
		memcpy(result->centroids, rr.centroids, sizeof(float) * kd);
		memcpy(result->sizes, rr.sizes, sizeof(int64) * params->k);
		memcpy(result->cluster_inertia, rr.cluster_inertia, sizeof(double) * params->k);
		if (result->labels != NULL)
			memcpy(result->labels, rr.labels, sizeof(int32) * (Size) data->n);
		result->inertia = rr.inertia;
		result->iterations = rr.iterations;
		result->converged = rr.converged;
		result->relocated = rr.relocated;
		result->best_run = run;
	}
	return KM_OK;
}

/*
 * One fit, where route says: by the GPU (on the rows streamed to sink or,
 * with sink NULL, on the host rows of data, on one GPU or split) or by the
 * CPU on data; the GPU is tried again while it lacks memory under 'gpu'
 * (another session's fit holds it).  The call is left for KmCallEnd.
 */
static km_status
KmFitOnce(KmCall *call, km_hooks *hooks, const KmFitRoute *route, KmGpuSink *sink,
		  const km_data *data, const km_params *params, km_result *result, km_error *err,
		  KmEngineChoice choice, int n_init)
{
	TimestampTz since = 0;
	const bool	use_gpu = route->mode != KM_MODE_CPU;
	const bool	split = route->mode == KM_MODE_SPLIT || route->mode == KM_MODE_OUT_OF_CORE;

	for (;;)
	{
		km_status	status;

		KmCallBegin(call, hooks, n_init);
		call->kmeanspp = params->init == KM_INIT_KMEANSPP;
		memset(err, 0, sizeof(*err));
		if (use_gpu && (split || !KmInitOnGpu(params->init)))
			status = KmFitHostSeeded(route, sink, data, params, hooks, result, err);
		else if (use_gpu)
			status = KmGpuFit(route, sink, data, params, hooks, result, err);
		else
			status = km_cpu_engine.fit(data, params, hooks, result, err);
		if (!(status == KM_ERR_DEVICE_NOMEM && choice == KM_ENGINE_GPU && use_gpu &&
			  KmGpuRetryAfterNomem(&since)))
			return status;
		KmCallAbandon(call);
	}
}

/* kmeans_gpu.verbose: what is about to be fitted and by which engine. */
static void
ReportFit(int64 n, int dim, const KmOptions *opts, const KmFitRoute *route, bool streamed)
{
	const char *name;

	if (!kmeans_verbose)
		return;
	if (streamed)
		name = "gpu (rows streamed during the scan)";
	else if (route->mode == KM_MODE_CPU)
	{
		int			threads = km_cpu_threads(n, dim, opts->k, KmCpuThreads());

		name = psprintf("cpu (%d thread%s)", threads, threads == 1 ? "" : "s");
	}
	else if (route->mode == KM_MODE_GPU)
		name = "gpu";
	else
		name = psprintf("gpu (%s over %d logical device%s, seeded on the host)",
						route->mode == KM_MODE_SPLIT ? "in memory" : "out of core",
						route->layout.ndevices, route->layout.ndevices == 1 ? "" : "s");
	ereport(INFO,
			(errmsg("kmeans: " INT64_FORMAT " vectors of %d values into %d clusters, metric %s, init %s, storage %s, engine %s",
					n, dim, opts->k, KmMetricName(opts->metric),
					KmInitName(opts->init), KmStorageName(opts->storage), name)));
}

/*
 * Fit the rows of m, or those streamed to gpu (gpu.c; NULL: none), as opts
 * says; the arrays of out are allocated in the current memory context.  The
 * GPU runs the fit when the rows were streamed to it, or when
 * kmeans_gpu.engine (or the engine option) and the free GPU memory say so;
 * under 'auto' the CPU takes over whenever the GPU cannot.  Returns false
 * when the GPU gave up on rows that went to it only: the caller then reads
 * them again and fits them on the CPU.
 */
bool
KmRunFit(const KmMatrix *m, KmGpuSink *gpu, const KmOptions *opts, bool want_labels,
		 KmFitOutput *out)
{
	km_data		data = KmMatrixData(m);
	KmEngineChoice choice = KmOptionsEngine(opts);
	const int64 n = gpu != NULL ? KmGpuSinkRows(gpu) : m->n;
	const bool	host_rows = gpu == NULL || KmGpuSinkHostRows(gpu);
	km_params	params;
	km_result	result;
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;
	Size		kd;
	Size		need;
	bool		streamed;
	KmFitRoute	route;

	Assert(opts->seed_given);
	KmOptionsCheckData(opts, n, m->dim);

	kd = mul_size((Size) opts->k, (Size) m->dim);
	if (mul_size(kd, sizeof(float)) > MaxAllocSize - 1024)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a model of %d centroids of %d values exceeds the 1 GB limit of an array",
						opts->k, m->dim)));
	need = KmFitMemory(n, m->dim, opts->k, m->bytes, want_labels);
	/* k-means|| and afk-mc2 take memory of their own while they seed */
	if (opts->init == KM_INIT_KMEANS_PARALLEL)
		need = add_size(need, km_cpu_kmpar_workspace(n, m->dim, opts->k, KmCpuThreads()));
	if (opts->init == KM_INIT_AFKMC2)
		need = add_size(need, km_afkmc2_bytes(n, opts->k, opts->chain_length,
											  KmCpuThreads(), m->dim));
	KmCheckMemory(need, "kmeans");

	memset(out, 0, sizeof(*out));
	out->centroids = palloc_extended(kd * sizeof(float), MCXT_ALLOC_HUGE);
	out->sizes = palloc(sizeof(int64) * opts->k);
	out->cluster_inertia = palloc(sizeof(double) * opts->k);
	if (want_labels)
		out->labels = palloc_extended(sizeof(int32) * (Size) n, MCXT_ALLOC_HUGE);

	memset(&params, 0, sizeof(params));
	params.k = opts->k;
	params.max_iter = opts->max_iter;
	params.tol = opts->tol;
	params.init = opts->init;
	params.init_centroids = opts->init_centroids;
	params.metric = opts->metric;
	params.seed = (uint64) opts->seed;
	params.n_init = opts->n_init;
	params.chain_length = opts->chain_length;

	memset(&result, 0, sizeof(result));
	result.centroids = out->centroids;
	result.sizes = out->sizes;
	result.cluster_inertia = out->cluster_inertia;
	result.labels = out->labels;

	/*
	 * The GPU first: on the rows streamed to it, else on the host rows where
	 * gpu_plan.c places them (one GPU, split, out of core, or the CPU).
	 * Should the GPU fail under 'auto', the CPU runs next, on the host rows.
	 */
	memset(&route, 0, sizeof(route));
	route.mode = KM_MODE_CPU;
	streamed = gpu != NULL && KmGpuSinkFinish(gpu);
	if (streamed)
		route.mode = KM_MODE_GPU;
	else if (host_rows)
		KmRouteFit(choice, n, m->dim, opts->k, opts->metric, opts->storage, m->weighted,
				   &route);
	if (route.mode == KM_MODE_SPLIT || route.mode == KM_MODE_OUT_OF_CORE)
	{
		/* the pinned host memory of a split fit counts against max_memory too */
		Size		split_need = add_size(need, (Size) route.split.pinned_bytes);

		if (choice == KM_ENGINE_GPU)
			KmCheckMemory(split_need, "kmeans (on the GPUs)");
		else if (split_need > KmMaxMemoryBytes())
		{
			if (kmeans_verbose)
				ereport(INFO,
						(errmsg("kmeans: using the CPU engine: with the split fit's " UINT64_FORMAT " bytes of pinned host memory, it would need more than kmeans_gpu.max_memory",
								(uint64) route.split.pinned_bytes)));
			route.mode = KM_MODE_CPU;
		}
	}
	for (;;)
	{
		const bool	use_gpu = route.mode != KM_MODE_CPU;

		if (!use_gpu && !host_rows)
			return false;		/* the GPU gave up on rows it alone had */
		ReportFit(n, m->dim, opts, &route, streamed);
		status = KmFitOnce(&call, &hooks, &route, streamed ? gpu : NULL, &data, &params,
						   &result, &err, choice, opts->n_init);
		if (!KmCallEnd(&call, status, &err, use_gpu && choice != KM_ENGINE_GPU))
			break;
		route.mode = KM_MODE_CPU;
		streamed = false;
	}

	out->engine = route.mode != KM_MODE_CPU ? "gpu" : km_cpu_engine.name;
	out->n_rows = n;
	out->inertia = result.inertia;
	out->iterations = result.iterations;
	out->converged = result.converged != 0;
	out->relocated = result.relocated;
	out->seed = opts->seed;
	return true;
}

/*
 * Nearest centroid and distance for every row of data (kmeans_labels), on
 * the GPU when kmeans_gpu.engine and the free GPU memory say so: split over
 * the logical devices when kmeans_gpu.devices lists more than one
 * (split_assign), else on the one GPU as ever.
 */
void
KmRunAssign(const km_data *data, const float *centroids, int k, km_metric metric,
			int32 *labels, double *distances)
{
	KmEngineChoice choice = KmEngineSetting();
	km_gpu_layout layout;
	KmFitMode	mode = KmRouteAssign(choice, &layout);
	const km_gpu_api *api = NULL;
	const km_engine *engine = NULL;
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;

	if (mode == KM_MODE_SPLIT)
	{
		const char *reason;

		api = KmGpuStarted(&reason);
	}
	else if (mode == KM_MODE_GPU)
		engine = KmGpuForAssign(choice, data->n, data->d, k);
	if (api == NULL && engine == NULL)
		engine = &km_cpu_engine;
	for (;;)
	{
		KmCallBegin(&call, &hooks, 1);
		hooks.report = NULL;	/* batches are short; the caller checks interrupts */
		memset(&err, 0, sizeof(err));
		if (api != NULL)
			status = api->split_assign(data, centroids, k, metric, &layout, labels, distances,
									   &hooks, &err);
		else
			status = engine->assign(data, centroids, k, metric, labels, distances, &hooks, &err);
		if (!KmCallEnd(&call, status, &err,
					   engine != &km_cpu_engine && choice != KM_ENGINE_GPU))
			break;
		api = NULL;
		engine = &km_cpu_engine;
	}
}

/*
 * The CPU engine's map step over data (exact mode when partial->stats is
 * set: kmeans_partial and the shards of kmeans_fit_sharded), with the hooks
 * of every engine call: interruptible, its memory freed, failures raised.
 */
void
KmRunMap(const km_data *data, const float *centroids, int k, km_metric metric,
		 km_partial *partial)
{
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;

	KmCallBegin(&call, &hooks, 1);
	hooks.report = NULL;
	memset(&err, 0, sizeof(err));
	status = km_cpu_engine.map(data, centroids, k, metric, partial, &hooks, &err);
	(void) KmCallEnd(&call, status, &err, false);
}

/* k-means|| on this part's rows: the m smallest keys (km_kmpar.h). */
void
KmRunKmparKeys(const km_data *data, const uint64 *hashes, const double *cost,
			   uint64 stream, int m, km_kmpar_draw *out, int *nout)
{
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;

	KmCallBegin(&call, &hooks, 1);
	hooks.report = NULL;
	memset(&err, 0, sizeof(err));
	status = km_cpu_kmpar_keys(data, hashes, cost, stream, m, &hooks, out, nout, &err);
	(void) KmCallEnd(&call, status, &err, false);
}

/* k-means|| on this part's rows: fold candidates into cost and label. */
void
KmRunKmparFold(const km_data *data, km_metric metric, const float *cands, int first,
			   int count, double *cost, int32 *label)
{
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;

	KmCallBegin(&call, &hooks, 1);
	hooks.report = NULL;
	memset(&err, 0, sizeof(err));
	status = km_cpu_kmpar_fold(data, metric, cands, first, count, cost, label, &hooks, &err);
	(void) KmCallEnd(&call, status, &err, false);
}
