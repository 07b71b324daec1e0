/*
 * gpu_plan.c
 *	  Where a fit runs, and how: on the CPU, on one GPU with its rows
 *	  uploaded, split over several (logical) GPUs, or out of core, its rows
 *	  streamed from host memory every iteration; and kmeans_gpu_plan(),
 *	  the memory side of the same plan as SQL.
 *
 * The rules, in order, for a fit that may use the GPU (KmRouteFit):
 *
 *	1. One GPU, as before split fits existed (the rows streamed to it
 *	   during the scan, or uploaded when the fit starts), when the devices
 *	   setting resolves to one device, storage is float32, and the fit fits
 *	   in that device's free memory and within kmeans_gpu.gpu_memory_limit.
 *	2. Otherwise, when the GPU engine can split fits (KmGpuCanSplit): its
 *	   split_plan in memory; when every logical device has room, split_fit
 *	   with the rows uploaded once.
 *	3. Otherwise split_plan out of core; when it fits, split_fit with the
 *	   rows streamed from host memory every iteration.
 *	4. Otherwise, under 'gpu': rule 1's GPU when the fit would fit it once
 *	   other sessions' fits free their memory (waiting for it up to
 *	   kmeans_gpu.gpu_wait, as before), else an ERROR with the figures.
 *	   Under 'auto': the CPU.
 *
 * Under 'auto' the mode found is then weighed against the CPU engine by
 * the estimated time of one Lloyd iteration (the same number of iterations
 * either way; seeding and reading the rows are left out), and the faster
 * runs.  The estimates, and where their constants come from:
 *
 *	CPU:			2·n·d·k / (threads · KM_CPU_FLOPS_PER_THREAD)
 *	GPU in memory:	per GPU, 2·rows·d·k / KM_GPU_FLOPS; the slowest GPU
 *	out of core:	per GPU, max(rows · row bytes / copy rate,
 *						 2·rows·d·k / KM_GPU_FLOPS); the slowest GPU
 *
 * where rows are the rows a GPU takes (logical devices on one GPU add up:
 * they share its arithmetic and its copy engine), row bytes are d values of
 * the storage (4 bytes, or 2 for float16 and bfloat16) and 4 more for a
 * weight, and the copy rate is what the GPU engine measured for pinned
 * host-to-device copies on that GPU (copy_rate, once per process).  A GPU
 * whose copy rate cannot be measured is not chosen out of core under
 * 'auto'.
 *
 * Every split fit is seeded on the host, run by run, by the CPU engine
 * (KmRunFit), so the modes differ in where the arithmetic happens, never in
 * the model: split_fit's model is the CPU engine's, bit for bit.
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "kmeans_gpu.h"

/*
 * The CPU engine's rate per thread: README, "CPU engine against
 * scikit-learn": (n, d, k) = (100000, 128, 256) took 33.94 ms an iteration
 * on 2 threads of the 2-core AMD EPYC build machine, 2·n·d·k = 6.55e9
 * floating-point operations, so 1.93e11 a second, 9.65e10 a thread.
 */
#define KM_CPU_FLOPS_PER_THREAD 9.65e10

/*
 * The GPU engine's rate with the rows on the device: README, "GPU engine on
 * an NVIDIA H200": (2000000, 128, 1024) took 12735.3 µs an iteration,
 * 2·n·d·k = 5.24e11 operations, so 4.12e13 a second.  Other GPUs differ;
 * the ratio to the CPU, not the figure, decides.
 */
#define KM_GPU_FLOPS 4.12e13

/* The modes' names, as kmeans_gpu_plan and verbose lines say them. */
static const char *
ModeName(KmFitMode mode)
{
	switch (mode)
	{
		case KM_MODE_CPU:
			return "cpu";
		case KM_MODE_GPU:
			return "one gpu";
		case KM_MODE_SPLIT:
			return "in memory";
		case KM_MODE_OUT_OF_CORE:
			return "out of core";
	}
	return "?";
}

/* bytes as pg_size_pretty writes them. */
static const char *
Pretty(uint64 bytes)
{
	return text_to_cstring(DatumGetTextPP(DirectFunctionCall1(pg_size_pretty,
															  Int64GetDatum((int64) Min(bytes, (uint64) PG_INT64_MAX)))));
}

/* The logical devices of layout, as '0,0,1'. */
static char *
DeviceList(const km_gpu_layout *layout)
{
	StringInfoData s;

	initStringInfo(&s);
	for (int i = 0; i < layout->ndevices; i++)
		appendStringInfo(&s, "%s%d", i > 0 ? "," : "", layout->devices[i]);
	return s.data;
}

/* Bytes one row takes in the storage, and its weight. */
static double
RowBytes(int dim, km_storage storage, bool weighted)
{
	return (double) dim * (storage == KM_STORAGE_FLOAT32 ? 4 : 2) + (weighted ? 4 : 0);
}

/* Seconds of one iteration on the CPU engine. */
static double
EstimateCpu(int64 n, int dim, int k, int *threads)
{
	n = Max(n, 1);				/* a scan's first row may come with no estimate */
	*threads = km_cpu_threads(n, dim, k, KmCpuThreads());
	return 2.0 * n * dim * k / (*threads * KM_CPU_FLOPS_PER_THREAD);
}

/*
 * Rows of route's plan on each GPU (ordinal), logical devices on one GPU
 * added up: rows[i] for the i-th distinct ordinal, ordinals[i] its number.
 * Returns how many distinct GPUs.
 */
static int
RowsPerGpu(const KmFitRoute *route, int64 *rows, int *ordinals)
{
	int			ngpus = 0;

	for (int i = 0; i < route->layout.ndevices; i++)
	{
		int			g = 0;

		while (g < ngpus && ordinals[g] != route->layout.devices[i])
			g++;
		if (g == ngpus)
		{
			ordinals[ngpus] = route->layout.devices[i];
			rows[ngpus++] = 0;
		}
		rows[g] += route->split.rows[i];
	}
	return ngpus;
}

/*
 * Seconds of one iteration of route on the GPU (rule 1, or a split plan),
 * or -1 when it cannot be told (a copy rate that was not measured).  The
 * out-of-core figure's parts go to *copy and *compute.
 */
static double
EstimateGpu(const km_gpu_api *api, const KmFitRoute *route, int64 n, int dim, int k,
			km_storage storage, bool weighted, double *copy, double *compute, double *rate)
{
	int64		rows[KM_GPU_MAX_DEVICES];
	int			ordinals[KM_GPU_MAX_DEVICES];
	int			ngpus;
	double		worst = 0;

	*copy = *compute = *rate = 0;
	if (route->mode == KM_MODE_GPU)
	{
		*compute = 2.0 * n * dim * k / KM_GPU_FLOPS;
		return *compute;
	}
	ngpus = RowsPerGpu(route, rows, ordinals);
	for (int g = 0; g < ngpus; g++)
	{
		double		c = 2.0 * rows[g] * dim * k / KM_GPU_FLOPS;
		double		t = c;

		if (route->mode == KM_MODE_OUT_OF_CORE)
		{
			km_error	err;
			double		r;
			double		x;

			memset(&err, 0, sizeof(err));
			r = api->copy_rate(ordinals[g], &err);
			if (!(r > 0))
				return -1;
			x = rows[g] * RowBytes(dim, storage, weighted) / r;
			t = Max(t, x);
			if (t >= worst)
			{
				*copy = x;
				*rate = r;
			}
		}
		if (t >= worst)
			*compute = c;
		worst = Max(worst, t);
	}
	return worst;
}

/* The first logical device of split without room, or -1. */
static int
FirstShort(const km_gpu_layout *layout, const km_gpu_split *split)
{
	for (int i = 0; i < layout->ndevices; i++)
		if (split->device_bytes[i] > split->budget[i])
			return i;
	return -1;
}

/* What a split plan takes, for messages. */
static char *
PlanFigures(const km_gpu_layout *layout, const km_gpu_split *split)
{
	int			i = FirstShort(layout, split);
	uint64		most = 0;

	if (i >= 0)
		return psprintf("%s on logical device %d (GPU %d), over its budget of %s",
						Pretty(split->device_bytes[i]), i, layout->devices[i],
						Pretty(split->budget[i]));
	for (int j = 0; j < layout->ndevices; j++)
		if (split->device_bytes[j] > most)
		{
			most = split->device_bytes[j];
			i = j;
		}
	return psprintf("%s on logical device %d (GPU %d), within its budget of %s",
					Pretty(most), i, layout->devices[i], Pretty(split->budget[i]));
}

/* kmeans_gpu.verbose: the mode chosen and why, with the figures. */
static void
ReportRoute(const KmFitRoute *route, const char *why, double gpu_s, double cpu_s,
			int threads, double copy_s, double compute_s, double rate)
{
	StringInfoData s;

	if (!kmeans_verbose)
		return;
	initStringInfo(&s);
	appendStringInfo(&s, "kmeans: %s", route->mode == KM_MODE_CPU ? "the CPU engine" :
					 route->mode == KM_MODE_GPU ? "one GPU" :
					 route->mode == KM_MODE_SPLIT ? "the GPUs, rows in memory" :
					 "the GPUs, rows streamed from host memory (out of core)");
	if (route->mode == KM_MODE_SPLIT || route->mode == KM_MODE_OUT_OF_CORE)
		appendStringInfo(&s, " over logical devices %s, storage %s",
						 DeviceList(&route->layout), KmStorageName(route->layout.storage));
	appendStringInfo(&s, ": %s", why);
	if (gpu_s >= 0 && cpu_s >= 0)
	{
		appendStringInfo(&s, "; estimated per iteration: GPU %.3g ms", gpu_s * 1e3);
		if (rate > 0)
			appendStringInfo(&s, " (copying %.3g ms at %.3g GB/s, computing %.3g ms)",
							 copy_s * 1e3, rate / 1e9, compute_s * 1e3);
		appendStringInfo(&s, ", CPU %.3g ms (%d thread%s)", cpu_s * 1e3, threads,
						 threads == 1 ? "" : "s");
	}
	ereport(INFO, (errmsg("%s", s.data)));
}

/*
 * Plan route's layout in mode (split or out of core) for the fit; the
 * engine's status: KM_OK, KM_ERR_DEVICE_NOMEM (split filled all the same)
 * or a failure, in err.
 */
static km_status
SplitPlan(const km_gpu_api *api, KmFitRoute *route, KmFitMode mode, int64 n, int dim, int k,
		  km_metric metric, bool weighted, km_error *err)
{
	memset(&route->split, 0, sizeof(route->split));
	memset(err, 0, sizeof(*err));
	route->layout.out_of_core = mode == KM_MODE_OUT_OF_CORE;
	return api->split_plan(n, dim, k, metric, weighted, &route->layout, &route->split, err);
}

/*
 * Where a fit of n rows of dim values into k clusters runs, as the rules
 * at the top of this file say, into route.  Under 'gpu' anything that
 * keeps the fit off the GPU is an ERROR saying why; under 'auto' it is the
 * CPU (and a line under kmeans_gpu.verbose).  The CPU engine's own memory
 * is the caller's to check (KmRunFit), and so are the split modes' pinned
 * host bytes (route->split.pinned_bytes).
 */
void
KmRouteFit(KmEngineChoice choice, int64 n, int dim, int k, km_metric metric,
		   km_storage storage, bool weighted, KmFitRoute *route)
{
	const km_gpu_api *api;
	const char *reason;
	const bool	raise = choice == KM_ENGINE_GPU;
	bool		one_gpu_shape;
	km_error	err;
	km_status	st;
	char	   *why = NULL;
	char	   *in_memory = NULL;	/* the in-memory plan's figures, when it failed */
	double		gpu_s,
				cpu_s,
				copy_s,
				compute_s,
				rate;
	int			threads;

	memset(route, 0, sizeof(*route));
	route->mode = KM_MODE_CPU;
	if (choice == KM_ENGINE_CPU)
		return;
	api = KmGpuStarted(&reason);
	if (api == NULL)
	{
		if (raise)
			KmGpuRefuse(reason);
		return;
	}
	if (!KmGpuLayout(api, storage, true, &route->layout))
	{
		if (raise)
			KmGpuRefuse(reason);
		ReportRoute(route, reason, -1, -1, 0, 0, 0, 0);
		return;
	}
	one_gpu_shape = route->layout.ndevices == 1 && storage == KM_STORAGE_FLOAT32;

	/* 1: one GPU, as ever */
	if (one_gpu_shape && KmGpuFitFitsNow(api, n, dim, k, metric))
	{
		route->mode = KM_MODE_GPU;
		why = psprintf("the fit needs %s of GPU memory, which GPU %d has",
					   Pretty(api->fit_device_bytes(n, dim, k, metric)), route->layout.devices[0]);
	}
	else if (!KmGpuCanSplit(api))
	{
		if (!one_gpu_shape)
		{
			reason = psprintf("This GPU engine (kmeans_gpu_cuda.so) cannot split a fit: it has no split_plan and split_fit, which %s needs.",
							  route->layout.ndevices > 1 ?
							  psprintf("spreading the rows over %d logical devices (%s)",
									   route->layout.ndevices, DeviceList(&route->layout)) :
							  psprintf("storage %s", KmStorageName(storage)));
			if (raise)
				KmGpuRefuse(reason);
			ReportRoute(route, reason, -1, -1, 0, 0, 0, 0);
			return;
		}
	}
	else
	{
		/* 2: split, the rows in memory */
		st = SplitPlan(api, route, KM_MODE_SPLIT, n, dim, k, metric, weighted, &err);
		if (st == KM_OK)
		{
			route->mode = KM_MODE_SPLIT;
			why = psprintf("it needs up to %s",
						   PlanFigures(&route->layout, &route->split));
		}
		else if (st == KM_ERR_DEVICE_NOMEM)
		{
			/* 3: out of core */
			in_memory = PlanFigures(&route->layout, &route->split);
			st = SplitPlan(api, route, KM_MODE_OUT_OF_CORE, n, dim, k, metric, weighted, &err);
			if (st == KM_OK)
			{
				route->mode = KM_MODE_OUT_OF_CORE;
				why = psprintf("in memory it would need %s; out of core up to %s, in chunks of " INT64_FORMAT " rows, with %s of pinned host memory",
							   in_memory, PlanFigures(&route->layout, &route->split),
							   (int64) route->split.chunk_rows,
							   Pretty(route->split.pinned_bytes));
			}
		}
		if (st != KM_OK && st != KM_ERR_DEVICE_NOMEM)
		{
			/* a device that failed is reported; a plan the engine refuses, only under verbose */
			route->mode = KM_MODE_CPU;
			if (raise || st == KM_ERR_DEVICE || st == KM_ERR_DEVICE_FATAL)
				KmGpuFailed(st, err.message, raise);
			else
				ReportRoute(route, psprintf("the GPU engine cannot split this fit: %s", err.message),
							-1, -1, 0, 0, 0, 0);
			return;
		}
	}

	/* 4: nothing fits now */
	if (route->mode == KM_MODE_CPU)
	{
		if (one_gpu_shape)
		{
			/* under 'gpu' this waits for other sessions' memory, or raises */
			if (KmGpuFitWait(api, choice, n, dim, k, metric))
			{
				route->mode = KM_MODE_GPU;
				ReportRoute(route, "the fit fits once other sessions' fits freed their memory",
							-1, -1, 0, 0, 0, 0);
			}
			return;
		}
		reason = psprintf("in memory it needs %s; out of core %s",
						  in_memory != NULL ? in_memory : "?",
						  PlanFigures(&route->layout, &route->split));
		if (raise)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("the fit does not fit in GPU memory"),
					 errdetail("In %s.", reason + 3),
					 errhint("Raise kmeans_gpu.gpu_memory_limit, list more devices in kmeans_gpu.devices, use storage 'float16', or set kmeans_gpu.engine to 'auto' to use the CPU.")));
		ReportRoute(route, reason, -1, -1, 0, 0, 0, 0);
		return;
	}

	/* 'auto': the GPU mode found against the CPU, by estimated time */
	if (choice != KM_ENGINE_AUTO && !kmeans_verbose)
		return;
	gpu_s = EstimateGpu(api, route, n, dim, k, storage, weighted, &copy_s, &compute_s, &rate);
	cpu_s = EstimateCpu(n, dim, k, &threads);
	if (choice == KM_ENGINE_AUTO && (gpu_s < 0 || cpu_s < gpu_s))
	{
		why = psprintf("%s, but %s", why, gpu_s < 0 ?
					   "the host-to-device copy rate could not be measured" :
					   "the CPU is estimated to be faster");
		route->mode = KM_MODE_CPU;
	}
	ReportRoute(route, why, gpu_s, cpu_s, threads, copy_s, compute_s, rate);
}

/*
 * Whether the rows of a fit should stream to the one GPU during the scan
 * (rule 1, and under 'auto' the estimate): the GPU engine if so, else
 * NULL, quietly, leaving the rows in host memory for KmRouteFit to place
 * after the scan.  Under 'gpu' a backend that cannot use a GPU at all, or
 * a devices setting naming a GPU it does not see, is an ERROR at once.
 * With kmeans_gpu.gpu_memory_limit set the rows never stream: the count
 * the decision would rest on is only the table's estimate (none at all for
 * a table not yet analysed), and rows streaming past the limit could not be
 * taken back; after the scan KmRouteFit places them by their real count.
 */
const km_gpu_api *
KmRouteStream(KmEngineChoice choice, int64 n, int dim, int k, km_metric metric,
			  km_storage storage, bool weighted)
{
	const km_gpu_api *api;
	const char *reason;
	km_gpu_layout layout;
	int			threads;

	if (choice == KM_ENGINE_CPU || storage != KM_STORAGE_FLOAT32)
		return NULL;
	if (KmGpuMemoryLimitBytes() > 0)
		return NULL;
	api = KmGpuStarted(&reason);
	if (api == NULL)
	{
		if (choice == KM_ENGINE_GPU)
			KmGpuRefuse(reason);
		return NULL;
	}
	if (!KmGpuLayout(api, storage, true, &layout))
	{
		if (choice == KM_ENGINE_GPU)
			KmGpuRefuse(reason);	/* before the scan, rather than after it */
		return NULL;
	}
	if (layout.ndevices != 1 || !KmGpuFitFitsNow(api, n, dim, k, metric))
		return NULL;
	if (choice == KM_ENGINE_AUTO &&
		EstimateCpu(n, dim, k, &threads) < 2.0 * n * dim * k / KM_GPU_FLOPS)
		return NULL;
	return api;
}

/*
 * How kmeans_labels labels its batches: split over the logical devices
 * (KM_MODE_SPLIT, with layout) when the settings list more than one, on
 * the one GPU as ever (KM_MODE_GPU: KmGpuForAssign decides), or on the CPU.
 * A GPU engine that cannot split refuses several devices under 'gpu'.
 */
KmFitMode
KmRouteAssign(KmEngineChoice choice, km_gpu_layout *layout)
{
	const km_gpu_api *api;
	const char *reason;

	if (choice == KM_ENGINE_CPU)
		return KM_MODE_CPU;
	api = KmGpuStarted(&reason);
	if (api == NULL)
		return KM_MODE_GPU;		/* which refuses, or falls to the CPU, as ever */
	if (!KmGpuLayout(api, KM_STORAGE_FLOAT32, true, layout))
	{
		if (choice == KM_ENGINE_GPU)
			KmGpuRefuse(reason);
		return KM_MODE_CPU;
	}
	if (layout->ndevices == 1)
		return KM_MODE_GPU;
	if (!KmGpuCanSplit(api))
	{
		if (choice == KM_ENGINE_GPU)
			KmGpuRefuse(psprintf("This GPU engine (kmeans_gpu_cuda.so) cannot split work: it has no split_assign, which labelling over %d logical devices (%s) needs.",
								 layout->ndevices, DeviceList(layout)));
		return KM_MODE_CPU;
	}
	return KM_MODE_SPLIT;
}

/* An ERROR for a kmeans_gpu_plan argument out of range. */
static void
PlanArgCheck(bool ok, const char *fmt, int64 value)
{
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(fmt, value)));
}

PG_FUNCTION_INFO_V1(kmeans_gpu_plan);

/*
 * kmeans_gpu_plan(n, dim, k, metric, storage, weighted) -> (mode, device,
 * ordinal, rows, device_bytes, budget, chunk_rows, pinned_bytes, fits):
 * the GPU engine's split_plan for such a fit under the current settings,
 * one row per logical device, in memory and out of core.  fits: whether
 * the device has room for its part (false on every device when the plan
 * fails as a whole).  With kmeans_gpu.gpu_memory_limit set it plans for
 * that budget without starting CUDA, so it works on a machine without a
 * GPU; without it, it asks the devices.
 */
Datum
kmeans_gpu_plan(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo;
	const km_gpu_api *api;
	const char *reason;
	KmOptions	opts;
	KmFitRoute	route;
	int64		n;
	int			dim;
	bool		weighted;
	static const KmFitMode modes[2] = {KM_MODE_SPLIT, KM_MODE_OUT_OF_CORE};

	KmArgNotNull(fcinfo, 0, "n");
	KmArgNotNull(fcinfo, 1, "dim");
	KmArgNotNull(fcinfo, 2, "k");
	KmArgNotNull(fcinfo, 3, "metric");
	KmArgNotNull(fcinfo, 4, "storage");
	KmArgNotNull(fcinfo, 5, "weighted");
	KmOptionsDefaults(&opts);
	n = PG_GETARG_INT64(0);
	dim = PG_GETARG_INT32(1);
	opts.k = PG_GETARG_INT32(2);
	KmOptionsSetMetric(&opts, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	KmOptionsSetStorage(&opts, text_to_cstring(PG_GETARG_TEXT_PP(4)));
	weighted = PG_GETARG_BOOL(5);
	PlanArgCheck(n >= 1, "n must be at least 1, not " INT64_FORMAT, n);
	PlanArgCheck(dim >= 1, "dim must be at least 1, not " INT64_FORMAT, dim);
	PlanArgCheck(opts.k >= 1, "k must be at least 1, not " INT64_FORMAT, opts.k);
	PlanArgCheck(opts.k <= n, "k (" INT64_FORMAT ") is larger than n", opts.k);

	api = KmGpuLoaded(&reason);
	if (api == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("kmeans_gpu_plan needs the GPU engine"),
				 errdetail("%s", reason)));
	if (!KmGpuCanSplit(api))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this GPU engine cannot plan split fits"),
				 errdetail("kmeans_gpu_cuda.so has no split_plan: it was built before split fits were written.")));
	memset(&route, 0, sizeof(route));
	if (KmGpuMemoryLimitBytes() == 0)
	{
		/* the budget is the devices' free memory: ask them */
		if (KmGpuStarted(&reason) == NULL ||
			!KmGpuLayout(api, opts.storage, true, &route.layout))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("kmeans_gpu_plan cannot plan without a GPU or kmeans_gpu.gpu_memory_limit"),
					 errdetail("%s", reason),
					 errhint("Set kmeans_gpu.gpu_memory_limit to plan for that much memory on each device.")));
	}
	else if (!KmGpuLayout(api, opts.storage, false, &route.layout))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("kmeans_gpu_plan cannot plan without a GPU or kmeans_gpu.gpu_memory_limit"),
				 errdetail("%s", reason)));

	rsinfo = KmMaterialize(fcinfo);
	for (int m = 0; m < 2; m++)
	{
		km_error	err;
		km_status	st = SplitPlan(api, &route, modes[m], n, dim, opts.k, opts.metric,
								   weighted, &err);
		bool		whole = st == KM_OK || FirstShort(&route.layout, &route.split) >= 0;

		if (st != KM_OK && st != KM_ERR_DEVICE_NOMEM)
			KmGpuFailed(st, err.message, true);
		for (int i = 0; i < route.layout.ndevices; i++)
		{
			Datum		values[9];
			bool		nulls[9] = {false, false, false, false, false, false, false, false, false};

			values[0] = CStringGetTextDatum(ModeName(modes[m]));
			values[1] = Int32GetDatum(i);
			values[2] = Int32GetDatum(route.layout.devices[i]);
			values[3] = Int64GetDatum(route.split.rows[i]);
			values[4] = Int64GetDatum((int64) Min(route.split.device_bytes[i], (uint64) PG_INT64_MAX));
			values[5] = Int64GetDatum((int64) Min(route.split.budget[i], (uint64) PG_INT64_MAX));
			values[6] = Int64GetDatum(route.split.chunk_rows);
			values[7] = Int64GetDatum((int64) Min(route.split.pinned_bytes, (uint64) PG_INT64_MAX));
			values[8] = BoolGetDatum(whole && route.split.device_bytes[i] <= route.split.budget[i]);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
