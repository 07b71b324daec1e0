/*
 * kmedoids_fit.c
 *	  kmedoids_fit(source, column_name, k, ...) and the kmedoids(vec, k [,
 *	  options]) aggregate; their options; running the k-medoids engine.
 *
 * Both gather the rows (kmedoids_input.c), put them in canonical order and
 * hand them to an engine through the same hooks as k-means (engine_call.c):
 * memory in a context of the call, cancel through the poll, progress and
 * interrupts through the report.  The alternating method runs on the GPU
 * like a k-means fit (kmeans_gpu.engine or the engine option: 'auto' when a
 * GPU is usable and the fit fits in its free memory, 'gpu' or an ERROR that
 * says why): the CPU engine seeds, then kmd_alternate() runs the loop with
 * the CUDA engine's steps on rows uploaded once, which gives the CPU
 * engine's model bit for bit; a GPU failure under 'auto' hands the fit to
 * the CPU from the same seeds.  FasterPAM runs on the CPU engine only
 * ('gpu' refuses it).  The silhouette of kmeans_score runs on the GPU the
 * same way (kmeans_gpu.engine); kmedoids_assign and kmedoids_labels on the
 * CPU.
 */
#include "postgres.h"

#include <math.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "kmedoids.h"
#include "kmeans_gpu_cuda.h"
#include "km_afkmc2.h"

/* ---------------------------------------------------------------------- */
/* options */

static const char *const metric_names[] = {"l2", "sqeuclidean", "l1", "cosine", "sqfd"};

const char *
KmdMetricName(kmd_metric metric)
{
	return metric >= KMD_METRIC_L2 && metric <= KMD_METRIC_SQFD ? metric_names[metric] : "?";
}

kmd_metric
KmdMetricByName(const char *name, bool *found)
{
	for (int m = KMD_METRIC_L2; m <= KMD_METRIC_SQFD; m++)
		if (strcmp(name, metric_names[m]) == 0)
		{
			*found = true;
			return (kmd_metric) m;
		}
	*found = false;
	return KMD_METRIC_L2;
}

const char *
KmdMethodName(kmd_method method)
{
	return method == KMD_FASTERPAM ? "fasterpam" : "alternate";
}

/* Defaults, documented in README and in kmedoids_fit's signature. */
void
KmdOptionsDefaults(KmdOptions *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->metric = KMD_METRIC_L2;
	opts->method = KMD_ALTERNATE;
	opts->max_iter = 100;
	opts->init = KM_INIT_KMEANSPP;
	opts->alpha = 1.0;
	opts->chain_length = KM_AFKMC2_CHAIN_LENGTH;
	opts->engine = -1;
}

void
KmdSetMetric(KmdOptions *opts, const char *metric)
{
	bool		found;

	opts->metric = KmdMetricByName(metric, &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown metric \"%s\"", metric),
				 errhint("Use 'l2', 'sqeuclidean', 'l1', 'cosine' or 'sqfd'.")));
}

void
KmdSetMethod(KmdOptions *opts, const char *method)
{
	if (strcmp(method, "alternate") == 0)
		opts->method = KMD_ALTERNATE;
	else if (strcmp(method, "fasterpam") == 0)
		opts->method = KMD_FASTERPAM;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown k-medoids method \"%s\"", method),
				 errhint("Use 'alternate' or 'fasterpam'.")));
}

void
KmdSetInit(KmdOptions *opts, const char *init)
{
	if (strcmp(init, "k-means++") == 0)
		opts->init = KM_INIT_KMEANSPP;
	else if (strcmp(init, "random") == 0)
		opts->init = KM_INIT_RANDOM;
	else if (strcmp(init, "afk-mc2") == 0)
		opts->init = KM_INIT_AFKMC2;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown init method \"%s\" for k-medoids", init),
				 errhint("Use 'k-means++', 'random' or 'afk-mc2'.")));
}

/* One key of a kmedoids options object; null means the default. */
static void
KmdSetOption(KmdOptions *opts, const char *key, const JsonbValue *v)
{
	static const char *const keys[] = {"metric", "method", "max_iter", "init", "seed",
	"alpha", "chain_length", "engine"};
	bool		known = false;

	for (int i = 0; i < lengthof(keys); i++)
		known |= strcmp(key, keys[i]) == 0;
	if (!known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown kmedoids option \"%s\"", key),
				 errhint("Valid options are metric, method, max_iter, init, seed, alpha, chain_length, engine.")));
	if (v->type == jbvNull)
		return;

	if (strcmp(key, "metric") == 0)
		KmdSetMetric(opts, KmJsonString(key, v));
	else if (strcmp(key, "method") == 0)
		KmdSetMethod(opts, KmJsonString(key, v));
	else if (strcmp(key, "max_iter") == 0)
		opts->max_iter = (int) KmJsonInteger(key, v, 1, PG_INT32_MAX);
	else if (strcmp(key, "init") == 0)
		KmdSetInit(opts, KmJsonString(key, v));
	else if (strcmp(key, "seed") == 0)
	{
		opts->seed = KmJsonInteger(key, v, PG_INT64_MIN, PG_INT64_MAX);
		opts->seed_given = true;
	}
	else if (strcmp(key, "alpha") == 0)
		opts->alpha = KmJsonNumber(key, v);
	else if (strcmp(key, "chain_length") == 0)
		opts->chain_length = (int) KmJsonInteger(key, v, 1, PG_INT32_MAX);
	else
	{
		KmOptions	tmp;

		KmOptionsSetEngine(&tmp, KmJsonString(key, v));
		opts->engine = tmp.engine;
	}
}

static void
KmdSetOptionCallback(void *opts, const char *key, const JsonbValue *v)
{
	KmdSetOption((KmdOptions *) opts, key, v);
}

void
KmdOptionsFromJsonb(KmdOptions *opts, Jsonb *options)
{
	KmJsonbOptions(options, "kmedoids", "{\"metric\": \"l1\", \"seed\": 1}", KmdSetOptionCallback, opts);
}

/* Checks that need no data. */
void
KmdOptionsCheck(const KmdOptions *opts)
{
	if (opts->k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", opts->k)));
	if (opts->max_iter < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_iter must be at least 1, not %d", opts->max_iter)));
	if (!(opts->alpha > 0.0) || isinf(opts->alpha))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("alpha must be a finite number > 0, not %g", opts->alpha),
				 errdetail("sqfd's similarity of two features is exp(-alpha d^2).")));
	if (opts->chain_length < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chain_length must be at least 1, not %d", opts->chain_length)));
	KmdEngineCheck(opts);
}

/*
 * The engine asked for (the engine option, else kmeans_gpu.engine); what
 * the GPU does not run is refused under 'gpu': FasterPAM, whose swaps are
 * the CPU engine's.
 */
KmEngineChoice
KmdEngineCheck(const KmdOptions *opts)
{
	KmEngineChoice choice = opts->engine >= 0 ? (KmEngineChoice) opts->engine : KmEngineSetting();

	if (choice == KM_ENGINE_GPU && opts->method == KMD_FASTERPAM)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the GPU engine does not run k-medoids method \"fasterpam\""),
				 errdetail("FasterPAM runs on the CPU engine; the GPU runs method 'alternate'."),
				 errhint("Use engine 'cpu' or 'auto' (or set kmeans_gpu.engine so), or method 'alternate'.")));
	return choice;
}

/* A seed when none was given, so that the model says which one it used. */
static void
KmdFixSeed(KmdOptions *opts)
{
	uint64		seed;

	if (opts->seed_given)
		return;
	if (!pg_strong_random(&seed, sizeof(seed)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random seed")));
	opts->seed = (int64) seed;
	opts->seed_given = true;
}

/* ---------------------------------------------------------------------- */
/* running the engine */

/*
 * After the engine returned: free its memory, then raise what went wrong
 * (an error caught in a callback first).
 */
static void
KmdCallEnd(KmCall *call, km_status status, const km_error *err)
{
	KmCallAbandon(call);
	switch (status)
	{
		case KM_OK:
			return;
		case KM_ERR_CANCELLED:
			CHECK_FOR_INTERRUPTS();
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling k-medoids due to user request")));
			break;
		case KM_ERR_NOMEM:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory in the k-medoids engine"),
					 errdetail("%s", err->message)));
			break;
		case KM_ERR_INVALID:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("k-medoids engine rejected the input: %s", err->message)));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("k-medoids engine failed: %s", err->message)));
	}
}

static void
KmdParams(const KmdOptions *opts, kmd_params *p)
{
	memset(p, 0, sizeof(*p));
	p->k = opts->k;
	p->metric = opts->metric;
	p->method = opts->method;
	p->max_iter = opts->max_iter;
	p->init = opts->init;
	p->seed = (uint64) opts->seed;
	p->alpha = opts->alpha;
	p->chain_length = opts->chain_length;
}

/* Failures of the device, which the CPU engine takes over under 'auto'. */
static bool
KmdDeviceFailure(km_status status)
{
	return status == KM_ERR_DEVICE || status == KM_ERR_DEVICE_FATAL ||
		status == KM_ERR_DEVICE_NOMEM || status == KM_ERR_UNAVAILABLE;
}

/*
 * A k-medoids handle of the CUDA engine, closed with the memory context of
 * its call whatever happens (an ERROR that skips the close included); it
 * lives in that context, so the callback never outlives it.
 */
typedef struct KmdGpuHandle
{
	const km_gpu_api *api;
	km_gpu_kmd *kmd;
	MemoryContextCallback cb;
} KmdGpuHandle;

static void
KmdGpuHandleFree(void *arg)
{
	KmdGpuHandle *h = (KmdGpuHandle *) arg;

	if (h->kmd != NULL)
		h->api->kmd_close(h->kmd);
	h->kmd = NULL;
}

static KmdGpuHandle *
KmdGpuHandleNew(const km_gpu_api *api, KmCall *call)
{
	KmdGpuHandle *h = MemoryContextAllocZero(call->context, sizeof(KmdGpuHandle));

	h->api = api;
	h->cb.func = KmdGpuHandleFree;
	h->cb.arg = h;
	MemoryContextRegisterResetCallback(call->context, &h->cb);
	return h;
}

/*
 * The GPU for a k-medoids job on data (what names it in messages), or NULL
 * for the CPU: as for a k-means fit, under 'auto' when a GPU is usable and
 * the job fits in its free memory; under 'gpu' those are errors.
 */
static const km_gpu_api *
KmdGpuFor(KmEngineChoice choice, const kmd_data *data, int k, kmd_metric metric,
		  const char *what)
{
	const km_gpu_api *api;
	uint64		need;

	if (choice == KM_ENGINE_CPU || (api = KmGpuChoose(choice)) == NULL)
		return NULL;
	need = api->kmd_device_bytes(data, k, metric);
	if (need == 0)
	{
		if (choice == KM_ENGINE_GPU)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the GPU engine cannot run this fit"),
					 errdetail("The GPU engine takes fewer than 2^31 rows per call."),
					 errhint("Set kmeans_gpu.engine (or the option engine) to 'auto' or 'cpu'.")));
		return NULL;
	}
	if (!KmGpuHasRoom(api, choice, need, what))
		return NULL;
	return api;
}

/*
 * The alternating method with the GPU's steps: seeds from the CPU engine
 * (into seeds; *seeded once they are there), the rows uploaded once, then
 * kmd_alternate() on the device's steps.  Returns false when the GPU failed
 * under 'auto' (with a WARNING), for the CPU to take over from the seeds;
 * every other failure is raised.
 */
static bool
KmdFitGpu(const km_gpu_api *api, KmEngineChoice choice, const kmd_data *data,
		  const kmd_params *params, kmd_result *result, int64 *seeds, bool *seeded)
{
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;
	KmdGpuHandle *h;
	TimestampTz since = 0;

	KmCallBegin(&call, &hooks, 0);
	memset(&err, 0, sizeof(err));
	status = kmd_cpu_engine.seed(data, params, &hooks, seeds, &err);
	if (status != KM_OK)
		KmdCallEnd(&call, status, &err);	/* raises */
	*seeded = true;

	h = KmdGpuHandleNew(api, &call);
	for (;;)
	{
		memset(&err, 0, sizeof(err));
		h->kmd = api->kmd_open(data, params->metric, params->alpha, params->k, &hooks, &err);
		/* under 'gpu', wait for memory that another session's fit holds */
		if (h->kmd != NULL || err.status != KM_ERR_DEVICE_NOMEM ||
			choice != KM_ENGINE_GPU || !KmGpuRetryAfterNomem(&since))
			break;
	}
	if (h->kmd == NULL)
		status = err.status;
	else
	{
		kmd_steps	steps;

		api->kmd_steps_of(h->kmd, &steps);
		status = kmd_alternate(&steps, data, params, &hooks, seeds, result, &err);
		KmdGpuHandleFree(h);
	}
	if (KmdDeviceFailure(status))
	{
		KmCallAbandon(&call);
		KmGpuFailed(status, err.message, choice == KM_ENGINE_GPU);
		return false;
	}
	KmdCallEnd(&call, status, &err);
	return true;
}

/*
 * Fit the ordered rows; out's arrays are allocated in the current context.
 */
void
KmdRunFit(const KmdOrdered *rows, const KmdOptions *opts, KmdFitOutput *out)
{
	const kmd_data *data = &rows->data;
	kmd_params	params;
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;
	int			k = opts->k;
	KmEngineChoice choice;
	const km_gpu_api *api = NULL;
	int64	   *seeds;
	bool		seeded = false;
	Size		need;

	if (data->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmedoids has no vectors to cluster"),
				 errdetail("Every input row was NULL, or there were no rows.")));
	if (k > data->n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k (%d) is larger than the number of rows (" INT64_FORMAT ")", k, data->n)));
	KmdParams(opts, &params);
	choice = KmdEngineCheck(opts);
	if (opts->method == KMD_ALTERNATE)
		api = KmdGpuFor(choice, data, k, opts->metric, "The k-medoids fit");
	need = add_size(kmd_cpu_engine.fit_workspace(data->n, data->d, &params, KmCpuThreads()),
					mul_size((Size) k, 4 * sizeof(int64)));
	if (api != NULL)
		need = add_size(need, api->kmd_host_bytes(data, k, opts->metric));
	KmCheckMemory(need, "kmedoids");

	memset(out, 0, sizeof(*out));
	out->result.medoids = palloc(sizeof(int64) * k);
	out->result.sizes = palloc(sizeof(int64) * k);
	out->result.cluster_cost = palloc(sizeof(double) * k);
	seeds = palloc(sizeof(int64) * k);

	if (kmeans_verbose)
		ereport(INFO,
				(errmsg("kmedoids: " INT64_FORMAT " rows of %d values into %d clusters, metric %s, method %s, init %s, engine %s",
						data->n, data->d, k, KmdMetricName(opts->metric),
						KmdMethodName(opts->method), KmInitName(opts->init),
						api != NULL ? "gpu (seeded on the CPU)" :
						psprintf("cpu (%d threads)", KmCpuThreads()))));

	if (api != NULL &&
		KmdFitGpu(api, choice, data, &params, &out->result, seeds, &seeded))
	{
		out->engine = "gpu";
		return;
	}

	/* the CPU engine, from the GPU's seeds when it got that far */
	if (seeded)
	{
		params.init = KM_INIT_EXPLICIT;
		params.init_medoids = seeds;
	}
	out->engine = kmd_cpu_engine.name;
	KmCallBegin(&call, &hooks, 0);
	memset(&err, 0, sizeof(err));
	status = kmd_cpu_engine.fit(data, &params, &hooks, &out->result, &err);
	KmdCallEnd(&call, status, &err);
}

/* Nearest medoid and distance for every row of data (kmedoids_labels). */
void
KmdRunAssign(const kmd_data *data, const KmdModel *model, int32 *labels, double *distances)
{
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;

	KmCallBegin(&call, &hooks, 0);
	hooks.report = NULL;
	memset(&err, 0, sizeof(err));
	status = kmd_cpu_engine.assign(data, &model->data, model->metric, model->alpha, labels,
								   distances, &hooks, &err);
	KmdCallEnd(&call, status, &err);
}

/*
 * The silhouette of labelled rows; *ok false (and 0 returned) when fewer
 * than two clusters have rows.  On the GPU when kmeans_gpu.engine says so
 * (as kmeans_labels), with the same bits.
 */
double
KmdRunSilhouette(const kmd_data *data, const int32 *labels, int k, kmd_metric metric,
				 double alpha, bool *ok)
{
	KmEngineChoice choice = KmEngineSetting();
	const km_gpu_api *api;
	km_hooks	hooks;
	km_error	err;
	KmCall		call;
	km_status	status;
	double		mean = 0.0;
	int			nonempty = 0;
	bool	   *seen = palloc0(sizeof(bool) * k);

	for (int64 i = 0; i < data->n; i++)
		if (!seen[labels[i]])
		{
			seen[labels[i]] = true;
			nonempty++;
		}
	pfree(seen);
	*ok = nonempty >= 2 && nonempty < data->n;
	if (!*ok)
		return 0.0;
	api = KmdGpuFor(choice, data, k, metric, "The silhouette");
	if (api != NULL)
	{
		KmCheckMemory(api->kmd_host_bytes(data, k, metric), "the silhouette");
		KmCallBegin(&call, &hooks, 0);
		hooks.report = NULL;
		memset(&err, 0, sizeof(err));
		status = api->kmd_silhouette(data, labels, k, metric, alpha, &mean, &hooks, &err);
		if (!KmdDeviceFailure(status))
		{
			KmdCallEnd(&call, status, &err);
			return mean;
		}
		KmCallAbandon(&call);
		KmGpuFailed(status, err.message, choice == KM_ENGINE_GPU);
	}
	KmCheckMemory(mul_size(mul_size((Size) k, (Size) KmCpuThreads()), 64 * sizeof(double) + 1024),
				  "the silhouette");
	KmCallBegin(&call, &hooks, 0);
	hooks.report = NULL;
	memset(&err, 0, sizeof(err));
	status = kmd_cpu_engine.silhouette(data, labels, k, metric, alpha, &mean, &hooks, &err);
	KmdCallEnd(&call, status, &err);
	return mean;
}

/* ---------------------------------------------------------------------- */
/* kmedoids_fit */

typedef struct KmdFitScan
{
	KmdRows		rows;
	int64		n_skipped;
	const char *id_column;
	double		estimated_rows;
	const KmdOptions *opts;
	bool		first_row_seen;
} KmdFitScan;

static void
KmdFitRow(void *arg, Datum *values, bool *nulls)
{
	KmdFitScan *scan = (KmdFitScan *) arg;
	int64		id = 0;

	if (scan->id_column != NULL)
	{
		if (nulls[1])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("id column \"%s\" has NULL values", scan->id_column),
					 errdetail("Medoids are named by their ids, which must not be NULL.")));
		id = DatumGetInt64(values[1]);
	}
	if (nulls[0])
	{
		scan->n_skipped++;
		return;
	}
	KmdRowsAdd(&scan->rows, DatumGetArrayTypeP(values[0]), id);

	/* the first row tells the length: check what the whole table will need */
	if (!scan->first_row_seen && scan->estimated_rows > 0)
	{
		int64		rows = (int64) Min(scan->estimated_rows, (double) PG_INT64_MAX / 2);
		int			dim = KmdRowDim(&scan->rows);
		kmd_params	p;

		KmdParams(scan->opts, &p);
		p.k = Min(p.k, Max(rows, 1));
		KmCheckMemory(add_size(add_size(mul_size((Size) rows, sizeof(float) * (Size) dim),
										KmdOrderBytes(rows)),
							   kmd_cpu_engine.fit_workspace(rows, dim, &p, KmCpuThreads())),
					  "kmedoids_fit (estimated from the table's statistics)");
	}
	scan->first_row_seen = true;
}

PG_FUNCTION_INFO_V1(kmedoids_fit);

/*
 * kmedoids_fit(source regclass, column_name text, k int, metric text,
 * max_iter int, init text, seed bigint, id_column text, method text, engine
 * text, alpha float8, chain_length int) -> kmedoids_model
 */
Datum
kmedoids_fit(PG_FUNCTION_ARGS)
{
	KmdOptions	opts;
	KmScanSpec	spec;
	KmdFitScan	scan;
	KmdOrdered	ordered;
	KmdFitOutput fit;
	MemoryContext rows_context;
	Datum		model;

	KmArgNotNull(fcinfo, 0, "source");
	KmArgNotNull(fcinfo, 1, "column_name");
	KmArgNotNull(fcinfo, 2, "k");
	KmArgNotNull(fcinfo, 3, "metric");
	KmArgNotNull(fcinfo, 4, "max_iter");
	KmArgNotNull(fcinfo, 5, "init");
	KmArgNotNull(fcinfo, 8, "method");
	KmArgNotNull(fcinfo, 10, "alpha");
	KmArgNotNull(fcinfo, 11, "chain_length");

	KmdOptionsDefaults(&opts);
	opts.k = PG_GETARG_INT32(2);
	KmdSetMetric(&opts, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	opts.max_iter = PG_GETARG_INT32(4);
	KmdSetInit(&opts, text_to_cstring(PG_GETARG_TEXT_PP(5)));
	if (!PG_ARGISNULL(6))
	{
		opts.seed = PG_GETARG_INT64(6);
		opts.seed_given = true;
	}
	KmdSetMethod(&opts, text_to_cstring(PG_GETARG_TEXT_PP(8)));
	if (!PG_ARGISNULL(9))
	{
		KmOptions	tmp;

		KmOptionsSetEngine(&tmp, text_to_cstring(PG_GETARG_TEXT_PP(9)));
		opts.engine = tmp.engine;
	}
	opts.alpha = PG_GETARG_FLOAT8(10);
	opts.chain_length = PG_GETARG_INT32(11);
	KmdOptionsCheck(&opts);
	KmdFixSeed(&opts);

	memset(&spec, 0, sizeof(spec));
	spec.relid = PG_GETARG_OID(0);
	spec.vector_column = text_to_cstring(PG_GETARG_TEXT_PP(1));
	spec.id_column = PG_ARGISNULL(7) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(7));

	rows_context = AllocSetContextCreate(CurrentMemoryContext, "kmedoids_fit rows",
										 ALLOCSET_DEFAULT_SIZES);
	memset(&scan, 0, sizeof(scan));
	scan.id_column = spec.id_column;
	scan.opts = &opts;
	scan.estimated_rows = KmEstimateRows(spec.relid);
	KmdRowsInit(&scan.rows, rows_context, opts.metric, spec.id_column != NULL);
	KmScanTable(&spec, KmdFitRow, &scan);

	KmCheckMemory(add_size(add_size(scan.rows.bytes, scan.rows.dense.bytes),
						   KmdOrderBytes(scan.rows.n)), "kmedoids_fit");
	KmdOrder(&scan.rows, spec.id_column != NULL, false, 0, &ordered);
	KmdRunFit(&ordered, &opts, &fit);
	model = KmdModelMake(fcinfo, &opts, &ordered, &fit, KmdRowDim(&scan.rows), scan.n_skipped);
	MemoryContextDelete(rows_context);
	return model;
}

/* ---------------------------------------------------------------------- */
/* the aggregate */

typedef struct KmdAggState
{
	KmdRows		rows;
	KmdOptions	opts;
	Jsonb	   *options;		/* as given, to compare later rows against */
	int64		n_null;
} KmdAggState;

static MemoryContext
AggContext(FunctionCallInfo fcinfo, const char *func)
{
	MemoryContext aggcontext;

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "%s called in non-aggregate context", func);
	return aggcontext;
}

PG_FUNCTION_INFO_V1(kmedoids_accum);

/*
 * kmedoids_accum(state, vec real[] | float8[], k [, options]): add one row.
 */
Datum
kmedoids_accum(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = AggContext(fcinfo, "kmedoids_accum");
	KmdAggState *state = PG_ARGISNULL(0) ? NULL : (KmdAggState *) PG_GETARG_POINTER(0);
	Jsonb	   *options = NULL;
	int			k;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("k must not be NULL")));
	k = PG_GETARG_INT32(2);
	if (PG_NARGS() > 3 && !PG_ARGISNULL(3))
		options = PG_GETARG_JSONB_P(3);

	if (state == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(aggcontext);

		state = palloc0(sizeof(KmdAggState));
		KmdOptionsDefaults(&state->opts);
		state->opts.k = k;
		if (options != NULL)
		{
			state->options = palloc(VARSIZE(options));
			memcpy(state->options, options, VARSIZE(options));
			KmdOptionsFromJsonb(&state->opts, state->options);
		}
		KmdOptionsCheck(&state->opts);
		KmdRowsInit(&state->rows, aggcontext, state->opts.metric, false);
		MemoryContextSwitchTo(old);
	}
	else
	{
		if (k != state->opts.k)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("k must be the same for every row of a kmedoids group"),
					 errdetail("Got %d after %d.", k, state->opts.k)));
		if ((options == NULL) != (state->options == NULL) ||
			(options != NULL && (VARSIZE(options) != VARSIZE(state->options) ||
								 memcmp(options, state->options, VARSIZE(options)) != 0)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("options must be the same for every row of a kmedoids group")));
	}

	if (PG_ARGISNULL(1))
		state->n_null++;
	else
		KmdRowsAdd(&state->rows, PG_GETARG_ARRAYTYPE_P(1), 0);
	PG_RETURN_POINTER(state);
}

PG_FUNCTION_INFO_V1(kmedoids_final);

/*
 * kmedoids_final(state) -> kmedoids_model.  Does not modify the state.
 */
Datum
kmedoids_final(PG_FUNCTION_ARGS)
{
	KmdAggState *state;
	KmdOptions	opts;
	KmdOrdered	ordered;
	KmdFitOutput fit;

	AggContext(fcinfo, "kmedoids_final");
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmedoids has no vectors to cluster"),
				 errdetail("The aggregate received no rows.")));
	state = (KmdAggState *) PG_GETARG_POINTER(0);
	opts = state->opts;
	KmdFixSeed(&opts);
	KmCheckMemory(add_size(add_size(state->rows.bytes, state->rows.dense.bytes),
						   KmdOrderBytes(state->rows.n)), "kmedoids");
	KmdOrder(&state->rows, false, false, 0, &ordered);
	KmdRunFit(&ordered, &opts, &fit);
	return KmdModelMake(fcinfo, &opts, &ordered, &fit, KmdRowDim(&state->rows), state->n_null);
}
