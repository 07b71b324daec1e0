/*
 * kmeans_gpu.h
 *	  What the SQL-layer files of kmeans_gpu share.
 *
 * The SQL layer reads options (options.c) and rows (vector_input.c: host
 * chunks that make a km_data; gpu.c: rows streamed to the GPU during a
 * scan), turns the options into km_params and runs an engine on the rows
 * (engine_call.c; where a fit runs, one GPU, several or the CPU, is
 * gpu_plan.c's decision), and turns the result into a kmeans_model
 * (model.c).  Each SQL concept has its file: aggregate.c,
 * fit.c, labels.c (kmeans_assign, kmeans_labels), window.c, guc.c; spill.c
 * moves large partial aggregate states between parallel workers.
 */
#ifndef KMEANS_GPU_H
#define KMEANS_GPU_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "kmeans_engine.h"
#include "kmeans_gpu_cuda.h"		/* km_storage, km_gpu_layout: plain C */

/* guc.c */
typedef enum KmEngineChoice
{
	KM_ENGINE_AUTO,
	KM_ENGINE_CPU,
	KM_ENGINE_GPU
} KmEngineChoice;

extern int	kmeans_engine_choice;
extern int	kmeans_max_memory_kb;
extern bool kmeans_verbose;
extern int	kmeans_cpu_threads;
extern int	kmeans_spill_threshold_kb;
extern int	kmeans_gpu_device;	/* deprecated alias: -1 unset, else the one device */
extern char *kmeans_gpu_devices_string;
extern int	kmeans_gpu_memory_limit_mb;
extern int	kmeans_gpu_wait_ms;
extern int	kmeans_shard_retries;	/* sharded.c */
extern int	kmeans_shard_idle_timeout_ms;	/* shard.c */
extern int	kmeans_read_workers;

extern void KmGucInit(void);
extern Size KmMaxMemoryBytes(void);
extern int	KmCpuThreads(void);
extern KmEngineChoice KmEngineSetting(void);
extern int	KmEngineByName(const char *name);

/*
 * kmeans_gpu.devices (or the kmeans_gpu.device alias) as parsed: 'all', or
 * a list of CUDA ordinals, repeats allowed; resolved against the devices a
 * backend sees only when a GPU is used (KmGpuLayout).
 */
typedef struct KmDeviceList
{
	bool		all;
	int			ndevices;
	int			devices[KM_GPU_MAX_DEVICES];
	const char *setting;		/* which setting said so, for messages */
} KmDeviceList;

extern void KmDeviceSetting(KmDeviceList *out);
extern uint64 KmGpuMemoryLimitBytes(void);

/* options.c: what a fit is asked to do */
typedef struct KmOptions
{
	int			k;
	int			max_iter;
	double		tol;
	km_init		init;
	bool		init_given;		/* init was named explicitly */
	float	   *init_centroids; /* init_rows x init_dim, or NULL */
	int			init_rows;
	int			init_dim;
	km_metric	metric;
	bool		seed_given;
	int64		seed;
	int			n_init;
	int			engine;			/* a KmEngineChoice, or -1: kmeans_gpu.engine */
	int			chain_length;	/* afk-mc2 */
	km_storage	storage;		/* rows rounded to this as they are read */
} KmOptions;

extern void KmOptionsDefaults(KmOptions *opts);
extern void KmOptionsFromJsonb(KmOptions *opts, Jsonb *options);
extern void KmJsonbOptions(Jsonb *options, const char *what, const char *example,
						   void (*set) (void *opts, const char *key, const JsonbValue *v),
						   void *opts);
extern void KmOptionsSetInit(KmOptions *opts, const char *init);
extern void KmOptionsSetMetric(KmOptions *opts, const char *metric);
extern void KmOptionsSetInitCentroids(KmOptions *opts, ArrayType *centroids);
extern void KmOptionsFixSeed(KmOptions *opts);
extern void KmOptionsCheck(const KmOptions *opts);
extern void KmOptionsCheckData(const KmOptions *opts, int64 n, int dim);
extern void KmOptionsSetEngine(KmOptions *opts, const char *engine);
extern KmEngineChoice KmOptionsEngine(const KmOptions *opts);
extern void KmArgNotNull(FunctionCallInfo fcinfo, int argno, const char *name);
extern const char *KmMetricName(km_metric metric);
extern int	KmMetricByName(const char *name);
extern const char *KmInitName(km_init init);
extern void KmOptionsSetStorage(KmOptions *opts, const char *storage);
extern const char *KmStorageName(km_storage storage);
extern int	KmStorageByName(const char *name);
extern int64 KmJsonInteger(const char *key, const JsonbValue *v, int64 min, int64 max);
extern double KmJsonNumber(const char *key, const JsonbValue *v);
extern char *KmJsonString(const char *key, const JsonbValue *v);

/* vector_input.c: checked vectors, and rows gathered into chunks */
extern int	KmVectorDim(ArrayType *vec);
extern void KmVectorRead(ArrayType *vec, int dim, float *out);
extern void KmVectorReadRow(ArrayType *vec, int dim, float *out, bool stream, bool cosine);
extern void KmStoreFence(void);
extern void KmCheckDimension(int expected, int got);
extern void KmCheckWeight(double w);
extern void KmVectorRound(float *x, int dim, km_storage storage, bool cosine, int64 row,
						  const int64 *id);

/* Rows being gathered in chunks of host memory. */
typedef struct KmMatrix
{
	MemoryContext context;		/* where chunks live */
	int			dim;			/* 0 until the first row */
	int64		n;				/* rows */
	int			nchunks;
	int			maxchunks;
	km_chunk   *chunks;
	float	   *weights_next;	/* weight slot of the last row, if weighted */
	int64		last_capacity;	/* rows the last chunk can hold */
	bool		weighted;
	bool		cosine;			/* reject zero vectors as they arrive */
	km_storage	storage;		/* round every value to this as it arrives */
	int64		input_rows;		/* rows offered, NULL vectors included: for messages */
	Size		bytes;			/* allocated for rows and weights */
	bool		borrowed;		/* the chunks are another's (KmMatrixBorrow) */
} KmMatrix;

extern void KmMatrixInit(KmMatrix *m, MemoryContext context, bool weighted, bool cosine);
extern void KmMatrixSetStorage(KmMatrix *m, km_storage storage);
extern void KmMatrixSkipRow(KmMatrix *m);
extern float *KmMatrixReserve(KmMatrix *m, int dim, int64 want, int64 *got);
extern void KmMatrixAppendRows(KmMatrix *m, int dim, const float *x, const float *w, int64 n);
extern void KmMatrixAppendVector(KmMatrix *m, ArrayType *vec, float weight);
extern const float *KmMatrixAppendVectorRow(KmMatrix *m, ArrayType *vec, float weight);
extern void KmMatrixReleaseRows(KmMatrix *m);
extern void KmMatrixAdopt(KmMatrix *dst, KmMatrix *src);
extern void KmMatrixBorrow(KmMatrix *m, int dim, const km_chunk *chunks, int nchunks,
						   int64 skipped, Size bytes);
extern km_data KmMatrixData(const KmMatrix *m);
extern void KmCheckMemory(Size needed, const char *what);

/* gpu.c: rows streamed to the GPU during a scan (see KmGpuSinkStart) */
typedef struct KmGpuSink KmGpuSink;

/* engine_call.c: run an engine from a backend */
typedef struct KmFitOutput
{
	float	   *centroids;		/* k x dim */
	int64	   *sizes;
	double	   *cluster_inertia;
	int32	   *labels;			/* n, when asked for */
	int64		n_rows;			/* n: the rows fitted */
	double		inertia;
	int			iterations;
	bool		converged;
	int			relocated;
	int64		seed;			/* the seed used */
	const char *engine;
} KmFitOutput;

/* One engine call: its memory and an error raised inside a callback. */
typedef struct KmCall
{
	MemoryContext context;		/* the engine's allocations */
	ErrorData  *error;			/* raised inside a callback, re-thrown later */
	MemoryContext error_context;	/* where to copy it */
	int			n_init;			/* 0: a k-medoids call */
	bool		kmeanspp;		/* seeded by k-means++: its reports carry the potential */
} KmCall;

extern void KmCallBegin(KmCall *call, km_hooks *hooks, int n_init);
extern void KmCallAbandon(KmCall *call);
extern Size KmFitMemory(int64 n, int dim, int k, Size data_bytes, bool want_labels);
extern bool KmInitOnGpu(km_init init);
extern bool KmRunFit(const KmMatrix *m, KmGpuSink *gpu, const KmOptions *opts,
					 bool want_labels, KmFitOutput *out);
extern void KmRunAssign(const km_data *data, const float *centroids, int k,
						km_metric metric, int32 *labels, double *distances);
extern void KmRunMap(const km_data *data, const float *centroids, int k,
					 km_metric metric, km_partial *partial);
struct km_kmpar_draw;
extern void KmRunKmparKeys(const km_data *data, const uint64 *hashes, const double *cost,
						   uint64 stream, int m, struct km_kmpar_draw *out, int *nout);
extern void KmRunKmparFold(const km_data *data, km_metric metric, const float *cands,
						   int first, int count, double *cost, int32 *label);

/* model.c: the kmeans_model composite */
typedef struct KmModel
{
	int			k;
	int			dim;
	km_metric	metric;
	float	   *centroids;		/* k x dim */
	double	   *cnorms;			/* k norms, for cosine */
	int64	   *sizes;			/* k, or NULL */
	double	   *cluster_inertia;	/* k, or NULL */
	km_storage	storage;		/* how its rows were rounded: rows to label are too */
} KmModel;

extern Datum KmModelMake(FunctionCallInfo fcinfo, const KmOptions *opts,
						 const KmFitOutput *fit, int dim, int64 n_rows,
						 int64 n_skipped);
extern Datum KmModelMakeTuple(TupleDesc tupdesc, const KmOptions *opts,
							  const KmFitOutput *fit, int dim, int64 n_rows,
							  int64 n_skipped);
extern void KmModelRead(HeapTupleHeader model, KmModel *out);

/* partial.c: kmeans_partial, kmeans_merge, kmeans_step */
typedef struct KmPartialData KmPartialData;
struct km_xstats;

extern uint64 KmModelHash(const KmModel *model);
extern KmPartialData *KmPartialFromRows(const KmModel *model, uint64 model_hash,
										const km_data *data, const struct km_xstats *xs,
										bool weighted, int64 n_skipped, int32 *labels);
extern KmPartialData *KmPartialMerge(const KmPartialData *a, const KmPartialData *b);
extern void KmPartialCheck(const KmPartialData *p, Size len);
extern int	KmPartialStep(const KmPartialData *p, const KmModel *model, float *centroids);
extern int64 KmPartialRows(const KmPartialData *p);
extern double KmPartialStats(const KmPartialData *p, int64 *sizes, double *cluster_inertia);

/* table_scan.c: one pass over a table's column */
typedef struct KmScanSpec
{
	Oid			relid;
	const char *vector_column;
	const char *weight_column;	/* or NULL */
	const char *id_column;		/* or NULL */
} KmScanSpec;

/* values: the vector, then the weight and the id when the spec names them */
typedef void (*KmScanRow) (void *arg, Datum *values, bool *nulls);

extern void KmScanTable(const KmScanSpec *spec, KmScanRow callback, void *arg);
extern double KmEstimateRows(Oid relid);
extern char *KmColumnSql(Oid relid, const char *column, const char *role, Oid target,
						 const char *target_name, bool keep_float8_arrays);
extern char *KmVectorColumnSql(const KmScanSpec *spec);
extern char *KmWeightColumnSql(const KmScanSpec *spec);
extern char *KmRelationSql(Oid relid);

/*
 * parallel_read.c: kmeans_fit's read of a large table by parallel workers
 * into shared memory
 */
typedef struct KmParallelRead KmParallelRead;

extern void KmParallelReadInit(void);
extern KmParallelRead *KmParallelReadPlan(const KmScanSpec *spec, Oid func_namespace,
										  const KmMatrix *m);
extern int	KmParallelReadDim(const KmParallelRead *read);
extern double KmParallelReadEstimate(const KmParallelRead *read);
extern bool KmParallelReadRun(KmParallelRead *read, KmMatrix *m, int64 *n_skipped,
							  bool *positive_weight);
extern bool KmParallelReadHasRoom(const KmParallelRead *read);
extern bool KmParallelReadStream(KmParallelRead *read, KmGpuSink *sink, MemoryContext context,
								 int64 *n_skipped, bool *positive_weight);
extern char *KmParallelReadReport(const KmParallelRead *read);
extern void KmParallelReadRelease(KmParallelRead *read);

/* labels.c */
extern void KmLabelsArgs(FunctionCallInfo fcinfo, KmScanSpec *spec);

/* gpu_plan.c: where a fit runs, and how */
typedef enum KmFitMode
{
	KM_MODE_CPU,				/* the CPU engine */
	KM_MODE_GPU,				/* one GPU, the rows uploaded (streamed during the scan, or at the fit) */
	KM_MODE_SPLIT,				/* split_fit: the rows uploaded once over the logical devices */
	KM_MODE_OUT_OF_CORE			/* split_fit: the rows streamed from host memory every iteration */
} KmFitMode;

typedef struct KmFitRoute
{
	KmFitMode	mode;
	km_gpu_layout layout;		/* split modes: the logical devices */
	km_gpu_split split;			/* split modes: what split_plan said */
} KmFitRoute;

extern void KmRouteFit(KmEngineChoice choice, int64 n, int dim, int k, km_metric metric,
					   km_storage storage, bool weighted, KmFitRoute *route);
extern const km_gpu_api *KmRouteStream(KmEngineChoice choice, int64 n, int dim, int k,
									   km_metric metric, km_storage storage, bool weighted);
extern KmFitMode KmRouteAssign(KmEngineChoice choice, km_gpu_layout *layout);

/* gpu.c: the CUDA engine, loaded on first use */
extern const km_engine *KmGpuForAssign(KmEngineChoice choice, int64 batch_rows, int dim, int k);
extern const km_gpu_api *KmGpuChoose(KmEngineChoice choice);
extern bool KmGpuHasRoom(const km_gpu_api *api, KmEngineChoice choice, uint64 need,
						 const char *what);
extern bool KmGpuFitFitsNow(const km_gpu_api *api, int64 n, int dim, int k, km_metric metric);
extern bool KmGpuFitWait(const km_gpu_api *api, KmEngineChoice choice, int64 n, int dim, int k,
						 km_metric metric);
extern const km_gpu_api *KmGpuLoaded(const char **reason);
extern const km_gpu_api *KmGpuStarted(const char **reason);
extern bool KmGpuCanSplit(const km_gpu_api *api);
extern bool KmGpuLayout(const km_gpu_api *api, km_storage storage, bool ask,
						km_gpu_layout *layout);
extern void KmGpuRefuse(const char *reason) pg_attribute_noreturn();
extern void KmGpuFailed(km_status status, const char *message, bool raise);
extern bool KmGpuRetryAfterNomem(TimestampTz *since);
extern KmGpuSink *KmGpuSinkStart(KmMatrix *m, KmEngineChoice choice, int k, km_metric metric,
								 int64 expected_rows, bool keep_host);
extern void KmGpuSinkAppendVector(KmGpuSink *sink, ArrayType *vec, float weight);
extern int64 KmGpuSinkRows(const KmGpuSink *sink);
extern bool KmGpuSinkLive(const KmGpuSink *sink);
extern bool KmGpuSinkHostRows(const KmGpuSink *sink);
extern bool KmGpuSinkFinish(KmGpuSink *sink);
extern bool KmGpuSinkDrainStart(KmGpuSink *sink, const km_ring *ring);
extern bool KmGpuSinkDrainFinish(KmGpuSink *sink, bool *positive_weight);
extern void KmGpuSinkDrainStop(KmGpuSink *sink);
extern km_status KmGpuFit(const KmFitRoute *route, KmGpuSink *sink, const km_data *data,
						  const km_params *params, const km_hooks *hooks, km_result *result,
						  km_error *err);

/* srf.c */
struct ReturnSetInfo;
extern struct ReturnSetInfo *KmMaterialize(FunctionCallInfo fcinfo);

/* spill.c: partial aggregate states passed through files */
extern void KmSpillInit(void);
extern char *KmSpillCreate(int *fd);
extern void KmSpillWrite(int fd, const char *path, const void *data, Size len);
extern void KmSpillClose(int fd, const char *path);
extern int	KmSpillOpen(const char *path);
extern void KmSpillRead(int fd, const char *path, void *data, Size len);
extern void KmSpillRemove(int fd, const char *path);

#endif							/* KMEANS_GPU_H */
