/*
 * kmedoids.h
 *	  What the SQL-layer files of k-medoids and of the scores share.
 *
 * k-medoids reads rows like k-means (vector_input.c, table_scan.c) but keeps
 * them in a KmdRows: dense vectors in a KmMatrix, or sqfd signatures
 * (real[][] of features, weight then coordinates) of varying lengths.
 * Before an engine sees them the rows are put in a canonical order
 * (kmedoids_input.c): by id when an id column is given, else by content, so
 * that ties, which go to the lowest row, and FasterPAM's visiting order do
 * not depend on the order of the scan.  kmedoids_fit.c has kmedoids_fit and
 * the aggregate, kmedoids_model.c the kmedoids_model composite,
 * kmedoids_labels.c kmedoids_assign and kmedoids_labels; score.c the
 * scores of both model types and sweep.c kmeans_sweep.
 */
#ifndef KMEDOIDS_H
#define KMEDOIDS_H

#include "kmeans_gpu.h"
#include "kmedoids_engine.h"

/* kmedoids_fit.c: what a k-medoids fit is asked to do */
typedef struct KmdOptions
{
	int			k;
	kmd_metric	metric;
	kmd_method	method;
	int			max_iter;
	km_init		init;
	bool		seed_given;
	int64		seed;
	double		alpha;
	int			chain_length;
	int			engine;			/* a KmEngineChoice, or -1: kmeans_gpu.engine */
} KmdOptions;

extern void KmdOptionsDefaults(KmdOptions *opts);
extern void KmdOptionsFromJsonb(KmdOptions *opts, Jsonb *options);
extern void KmdSetMetric(KmdOptions *opts, const char *metric);
extern void KmdSetMethod(KmdOptions *opts, const char *method);
extern void KmdSetInit(KmdOptions *opts, const char *init);
extern void KmdOptionsCheck(const KmdOptions *opts);
extern const char *KmdMetricName(kmd_metric metric);
extern const char *KmdMethodName(kmd_method method);
extern kmd_metric KmdMetricByName(const char *name, bool *found);

/* kmedoids_input.c: rows of a k-medoids fit, and their canonical order */
typedef struct KmdRows
{
	MemoryContext context;
	bool		sqfd;
	KmMatrix	dense;			/* dense metrics: the vectors */
	int			fdim;			/* sqfd: values per feature, 0 before the first row */
	float	   *chunk;			/* sqfd: the chunk being filled */
	Size		chunk_left;		/* floats left in it */
	const float **sig;			/* sqfd: each row's first value */
	int32	   *nfeat;			/* sqfd: features per row */
	int64	   *ids;			/* per row, when ids are kept */
	bool		with_ids;
	int64		n;				/* rows */
	int64		cap;			/* room in sig, nfeat, ids */
	Size		bytes;			/* allocated for signatures and per-row arrays */
} KmdRows;

/* The rows in the order an engine gets them. */
typedef struct KmdOrdered
{
	kmd_data	data;
	const float **rows;
	int32	   *nfeat;
	int64	   *ids;			/* when with_ids */
	uint64	   *keys;			/* the sort keys */
	int64	   *perm;			/* each row's position before the sort */
} KmdOrdered;

extern void KmdRowsInit(KmdRows *r, MemoryContext context, kmd_metric metric, bool with_ids);
extern void KmdRowsAdd(KmdRows *r, ArrayType *vec, int64 id);
extern int	KmdRowDim(const KmdRows *r);
extern Size KmdOrderBytes(int64 n);
extern void KmdOrder(const KmdRows *r, bool by_id, bool have_key_seed, uint64 key_seed,
					 KmdOrdered *out);
extern int	KmdSignatureRead(ArrayType *arr, int fdim, float **out, bool allow_any_fdim,
							 int *fdim_out);
extern uint64 KmdScoreStream(uint64 seed);

/* kmedoids_model.c */
typedef struct KmdModel
{
	int			k;
	int			dim;			/* sqfd: values per feature */
	kmd_metric	metric;
	double		alpha;
	const float **medoids;		/* k rows */
	int32	   *nfeat;			/* sqfd: features of each medoid; else NULL */
	double	   *aux;			/* kmd_aux of each medoid */
	kmd_data	data;			/* the medoids as engine rows */
	int64		seed;
	bool		seed_null;
} KmdModel;

typedef struct KmdFitOutput
{
	kmd_result	result;
	const char *engine;
} KmdFitOutput;

extern Datum KmdModelMake(FunctionCallInfo fcinfo, const KmdOptions *opts,
						  const KmdOrdered *rows, const KmdFitOutput *fit,
						  int dim, int64 n_skipped);
extern void KmdModelRead(HeapTupleHeader model, KmdModel *out);
extern int	KmdModelNearest(const KmdModel *model, const float *row, int m, double *distance);

/* kmedoids_fit.c: running the engine */
extern void KmdRunFit(const KmdOrdered *rows, const KmdOptions *opts, KmdFitOutput *out);
extern void KmdRunAssign(const kmd_data *data, const KmdModel *model, int32 *labels,
						 double *distances);
extern double KmdRunSilhouette(const kmd_data *data, const int32 *labels, int k,
							   kmd_metric metric, double alpha, bool *ok);
extern KmEngineChoice KmdEngineCheck(const KmdOptions *opts);

/* score.c: the figures of kmeans_score, for any labelled rows */
typedef struct KmScoreFigures
{
	double		inertia;
	double		silhouette;
	bool		silhouette_null;
	double		davies_bouldin;
	bool		davies_bouldin_null;
	double		calinski_harabasz;
	bool		calinski_harabasz_null;
	int64		n_scored;
} KmScoreFigures;

extern void KmScoreRows(const kmd_data *data, const int32 *labels, int k, kmd_metric metric,
						double alpha, bool normalize, int sample, KmScoreFigures *out);
extern void KmCheckSample(FunctionCallInfo fcinfo, int argno);

#endif							/* KMEDOIDS_H */
