/*
 * options.c
 *	  Options of a fit, from jsonb (aggregate, window function) or from
 *	  named arguments (kmeans_fit), and their validation.
 *
 * The jsonb keys are the names of kmeans_fit's arguments, so the two forms
 * read the same.  Every check happens here, before any row is read or any
 * memory is taken, except those that need the data (k against the number of
 * rows, explicit centroids against the vector length).
 */
#include "postgres.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "common/int.h"
#include "catalog/pg_type.h"
#include "utils/memutils.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "kmeans_gpu.h"
#include "km_afkmc2.h"

#define KM_OPTION_NAMES "max_iter, tol, init, init_centroids, metric, seed, n_init, engine, chain_length, storage"

/* Defaults, documented in README and in kmeans_fit's signature. */
void
KmOptionsDefaults(KmOptions *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->max_iter = 300;
	opts->tol = 1e-4;
	opts->init = KM_INIT_KMEANSPP;
	opts->metric = KM_METRIC_L2;
	opts->n_init = 1;
	opts->engine = -1;
	opts->chain_length = KM_AFKMC2_CHAIN_LENGTH;
	opts->storage = KM_STORAGE_FLOAT32;
}

/*
 * The names users may give for metrics and init methods: case does not
 * matter, and common spellings are accepted; the first name of each value
 * is the canonical one, which models store and messages use.
 */
typedef struct KmName
{
	const char *name;
	int			value;
} KmName;

static const KmName metric_names[] = {
	{"l2", KM_METRIC_L2},
	{"euclidean", KM_METRIC_L2},
	{"cosine", KM_METRIC_COSINE},
	{NULL, 0}
};

static const KmName init_names[] = {
	{"k-means++", KM_INIT_KMEANSPP},
	{"kmeans++", KM_INIT_KMEANSPP},
	{"kmeanspp", KM_INIT_KMEANSPP},
	{"random", KM_INIT_RANDOM},
	{"explicit", KM_INIT_EXPLICIT},
	{"k-means||", KM_INIT_KMEANS_PARALLEL},
	{"kmeans||", KM_INIT_KMEANS_PARALLEL},
	{"afk-mc2", KM_INIT_AFKMC2},
	{"afkmc2", KM_INIT_AFKMC2},
	{NULL, 0}
};

/* How rows are kept: the names of the formats and their usual spellings. */
static const KmName storage_names[] = {
	{"float32", KM_STORAGE_FLOAT32},
	{"float4", KM_STORAGE_FLOAT32},
	{"real", KM_STORAGE_FLOAT32},
	{"fp32", KM_STORAGE_FLOAT32},
	{"float16", KM_STORAGE_FLOAT16},
	{"half", KM_STORAGE_FLOAT16},
	{"fp16", KM_STORAGE_FLOAT16},
	{"binary16", KM_STORAGE_FLOAT16},
	{"bfloat16", KM_STORAGE_BFLOAT16},
	{"bf16", KM_STORAGE_BFLOAT16},
	{NULL, 0}
};

/* The value of name in table (any case), or -1. */
static int
KmLookupName(const KmName *table, const char *name)
{
	for (const KmName *e = table; e->name != NULL; e++)
		if (pg_strcasecmp(e->name, name) == 0)
			return e->value;
	return -1;
}

/* The canonical name of value in table. */
static const char *
KmCanonicalName(const KmName *table, int value)
{
	for (const KmName *e = table; e->name != NULL; e++)
		if (e->value == value)
			return e->name;
	elog(ERROR, "no name for value %d. Please report a bug.", value);
	return NULL;
}

const char *
KmMetricName(km_metric metric)
{
	return KmCanonicalName(metric_names, metric);
}

const char *
KmInitName(km_init init)
{
	return KmCanonicalName(init_names, init);
}

const char *
KmStorageName(km_storage storage)
{
	return KmCanonicalName(storage_names, storage);
}

/* The storage called name ('float32', 'float16', 'bfloat16', ...: any case), or -1. */
int
KmStorageByName(const char *name)
{
	return KmLookupName(storage_names, name);
}

/* The metric called name ('l2', 'euclidean', 'cosine', any case), or -1. */
int
KmMetricByName(const char *name)
{
	return KmLookupName(metric_names, name);
}

void
KmOptionsSetInit(KmOptions *opts, const char *init)
{
	int			value = KmLookupName(init_names, init);

	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown init method \"%s\"", init),
				 errhint("Use 'k-means++', 'k-means||', 'afk-mc2', 'random', or 'explicit' with init_centroids.")));
	opts->init = (km_init) value;
	opts->init_given = true;
}

void
KmOptionsSetMetric(KmOptions *opts, const char *metric)
{
	int			value = KmMetricByName(metric);

	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown metric \"%s\"", metric),
				 errhint("Use 'l2' (also 'euclidean') or 'cosine'.")));
	opts->metric = (km_metric) value;
}

void
KmOptionsSetStorage(KmOptions *opts, const char *storage)
{
	int			value = KmStorageByName(storage);

	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown storage \"%s\"", storage),
				 errhint("Use 'float32' (also 'float4', 'real'), 'float16' (also 'half', 'fp16') or 'bfloat16' (also 'bf16').")));
	opts->storage = (km_storage) value;
}

void
KmOptionsSetEngine(KmOptions *opts, const char *engine)
{
	opts->engine = KmEngineByName(engine);
	if (opts->engine < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown engine \"%s\"", engine),
				 errhint("Use 'auto', 'cpu' or 'gpu'.")));
}

/*
 * An ERROR when argument argno (called name) of a function that is CALLED ON
 * NULL INPUT is NULL.
 */
void
KmArgNotNull(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name)));
}

/* The engine asked for: the option, else kmeans_gpu.engine. */
KmEngineChoice
KmOptionsEngine(const KmOptions *opts)
{
	return opts->engine >= 0 ? (KmEngineChoice) opts->engine : KmEngineSetting();
}

/*
 * Explicit start centroids from a two-dimensional real[] (k rows).
 */
void
KmOptionsSetInitCentroids(KmOptions *opts, ArrayType *centroids)
{
	int			nitems;
	float	   *values;

	if (ARR_NDIM(centroids) != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("init_centroids must be a two-dimensional array"),
				 errdetail("It has %d dimension%s; give one row of dim values per cluster, as in '{{0,0},{1,1}}'.",
						   ARR_NDIM(centroids), ARR_NDIM(centroids) == 1 ? "" : "s")));
	if (array_contains_nulls(centroids))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("init_centroids must not contain NULL values")));
	if (ARR_ELEMTYPE(centroids) != FLOAT4OID)
		elog(ERROR, "init_centroids has element type %u, expected real",
			 ARR_ELEMTYPE(centroids));

	nitems = ArrayGetNItems(ARR_NDIM(centroids), ARR_DIMS(centroids));
	values = palloc(sizeof(float) * Max(nitems, 1));
	memcpy(values, ARR_DATA_PTR(centroids), sizeof(float) * nitems);
	for (int i = 0; i < nitems; i++)
		if (!isfinite(values[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("init_centroids must not contain NaN or infinite values")));

	opts->init_centroids = values;
	opts->init_rows = ARR_DIMS(centroids)[0];
	opts->init_dim = ARR_DIMS(centroids)[1];
	if (!opts->init_given)
		opts->init = KM_INIT_EXPLICIT;
}

/* The name of a jsonb value's type, for messages. */
static const char *
JsonTypeName(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "array" : "object";
		default:
			return "value";
	}
}

static void
ExpectType(const char *key, const JsonbValue *v, enum jbvType type, const char *wanted)
{
	if (v->type != type)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be %s, not %s", key, wanted, JsonTypeName(v))));
}

/* An integral JSON number within [min, max]. */
static int64
JsonInteger(const char *key, const JsonbValue *v, int64 min, int64 max)
{
	Numeric		num;
	Datum		truncated;

	ExpectType(key, v, jbvNumeric, "an integer");
	num = v->val.numeric;
	truncated = DirectFunctionCall2(numeric_trunc, NumericGetDatum(num), Int32GetDatum(0));
	if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(num), truncated)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be an integer, not %s", key,
						DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(num))))));

	/* compare as numeric so that huge values give our message, not an overflow */
	if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(num),
										  DirectFunctionCall1(int8_numeric, Int64GetDatum(min)))) < 0 ||
		DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(num),
										  DirectFunctionCall1(int8_numeric, Int64GetDatum(max)))) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" is out of range: %s", key,
						DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(num)))),
				 errdetail("It must be between " INT64_FORMAT " and " INT64_FORMAT ".", min, max)));
	return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(num)));
}

/*
 * A JSON number as a double, with our message when it is beyond the range
 * of float8 (numeric_float8 would print all 400 digits of 1e400).
 */
static double
NumericToDouble(const char *key, Numeric num)
{
	char	   *text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(num)));
	double		x;

	errno = 0;
	x = strtod(text, NULL);
	if (errno == ERANGE && isinf(x))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("option \"%s\" has a value out of range for double precision", key)));
	return x;
}

static double
JsonNumber(const char *key, const JsonbValue *v)
{
	ExpectType(key, v, jbvNumeric, "a number");
	return NumericToDouble(key, v->val.numeric);
}

static char *
JsonString(const char *key, const JsonbValue *v)
{
	ExpectType(key, v, jbvString, "a string");
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * init_centroids given as a JSON array of k arrays of dim numbers.
 */
static void
JsonInitCentroids(KmOptions *opts, const JsonbValue *v)
{
	JsonbIterator *it;
	JsonbValue	item;
	JsonbIteratorToken tok;
	int			rows = 0;
	int			dim = -1;
	int			cur = 0;
	int			depth = 0;
	int			cap = 64;
	int			count = 0;
	float	   *values;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"init_centroids\" must be an array of arrays of numbers, not %s",
						JsonTypeName(v))));

	values = palloc(sizeof(float) * cap);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &item, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_ARRAY)
		{
			if (++depth == 2)
				cur = 0;
			else if (depth > 2)
				goto bad_shape;
		}
		else if (tok == WJB_END_ARRAY)
		{
			if (depth-- == 2)
			{
				if (dim >= 0 && cur != dim)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("option \"init_centroids\" has rows of different lengths: %d and %d",
									dim, cur)));
				if (cur == 0)
					goto bad_shape;
				dim = cur;
				rows++;
			}
		}
		else if (tok == WJB_ELEM)
		{
			double		x;

			if (depth != 2 || item.type != jbvNumeric)
				goto bad_shape;
			x = NumericToDouble("init_centroids", item.val.numeric);
			if (!isfinite((float) x))
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("option \"init_centroids\" has a value out of range for real: %g", x)));
			if (count == cap)
			{
				if (cap > MaxAllocSize / sizeof(float) / 2)
					ereport(ERROR,
							(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
							 errmsg("option \"init_centroids\" is too large")));
				cap *= 2;
				values = repalloc(values, sizeof(float) * cap);
			}
			values[count++] = (float) x;
			cur++;
		}
		else
			goto bad_shape;
	}
	if (rows == 0)
		goto bad_shape;

	opts->init_centroids = values;
	opts->init_rows = rows;
	opts->init_dim = dim;
	if (!opts->init_given)
		opts->init = KM_INIT_EXPLICIT;
	return;

bad_shape:
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("option \"init_centroids\" must be an array of arrays of numbers"),
			 errdetail("Give one array of dim numbers per cluster, as in [[0, 0], [1, 1]].")));
}

/* One key of the options object. */
static void
SetOption(KmOptions *opts, const char *key, const JsonbValue *v)
{
	/* null means "the default" for every option */
	if (v->type == jbvNull)
	{
		if (strcmp(key, "max_iter") != 0 && strcmp(key, "tol") != 0 &&
			strcmp(key, "init") != 0 && strcmp(key, "init_centroids") != 0 &&
			strcmp(key, "metric") != 0 && strcmp(key, "seed") != 0 &&
			strcmp(key, "n_init") != 0 && strcmp(key, "engine") != 0 &&
			strcmp(key, "chain_length") != 0 && strcmp(key, "storage") != 0)
			goto unknown;
		return;
	}

	if (strcmp(key, "max_iter") == 0)
		opts->max_iter = (int) JsonInteger(key, v, 1, PG_INT32_MAX);
	else if (strcmp(key, "tol") == 0)
		opts->tol = JsonNumber(key, v);
	else if (strcmp(key, "init") == 0)
		KmOptionsSetInit(opts, JsonString(key, v));
	else if (strcmp(key, "init_centroids") == 0)
		JsonInitCentroids(opts, v);
	else if (strcmp(key, "metric") == 0)
		KmOptionsSetMetric(opts, JsonString(key, v));
	else if (strcmp(key, "seed") == 0)
	{
		opts->seed = JsonInteger(key, v, PG_INT64_MIN, PG_INT64_MAX);
		opts->seed_given = true;
	}
	else if (strcmp(key, "n_init") == 0)
		opts->n_init = (int) JsonInteger(key, v, 1, PG_INT32_MAX);
	else if (strcmp(key, "engine") == 0)
		KmOptionsSetEngine(opts, JsonString(key, v));
	else if (strcmp(key, "chain_length") == 0)
		opts->chain_length = (int) JsonInteger(key, v, 1, PG_INT32_MAX);
	else if (strcmp(key, "storage") == 0)
		KmOptionsSetStorage(opts, JsonString(key, v));
	else
		goto unknown;
	return;

unknown:
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown kmeans option \"%s\"", key),
			 errhint("Valid options are " KM_OPTION_NAMES ".")));
}

/*
 * Call set(opts, key, value) for every key of options, a jsonb object; what
 * and example name the options in the error raised for anything else.
 */
void
KmJsonbOptions(Jsonb *options, const char *what, const char *example,
			   void (*set) (void *opts, const char *key, const JsonbValue *v), void *opts)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s options must be a jsonb object", what),
				 errhint("For example '%s'.", example)));

	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
			set(opts, key, &v);
	}
}

static void
SetOptionCallback(void *opts, const char *key, const JsonbValue *v)
{
	SetOption((KmOptions *) opts, key, v);
}

/*
 * Apply a jsonb object of options over opts.
 */
void
KmOptionsFromJsonb(KmOptions *opts, Jsonb *options)
{
	KmJsonbOptions(options, "kmeans", "{\"max_iter\": 50, \"seed\": 1}", SetOptionCallback, opts);
}

/*
 * Draw a seed when none was given, so that the model can say which one it
 * used and a caller can reproduce it.
 */
void
KmOptionsFixSeed(KmOptions *opts)
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

/*
 * Checks that need no data.
 */
void
KmOptionsCheck(const KmOptions *opts)
{
	if (opts->k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", opts->k)));
	if (opts->max_iter < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_iter must be at least 1, not %d", opts->max_iter)));
	if (!(opts->tol >= 0) || isinf(opts->tol))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tol must be a finite number >= 0, not %g", opts->tol),
				 errdetail("tol is the fraction of rows allowed to change cluster in the last iteration.")));
	if (opts->n_init < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n_init must be at least 1, not %d", opts->n_init)));
	if (opts->chain_length < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chain_length must be at least 1, not %d", opts->chain_length)));
	if (opts->init == KM_INIT_EXPLICIT && opts->init_centroids == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("init 'explicit' needs init_centroids")));
	if (opts->init_centroids != NULL && opts->init != KM_INIT_EXPLICIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("init_centroids cannot be combined with init '%s'", KmInitName(opts->init)),
				 errhint("Leave init out, or set it to 'explicit'.")));
	if (opts->init == KM_INIT_EXPLICIT && opts->n_init != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n_init must be 1 with explicit init_centroids"),
				 errdetail("Every run would start from the same centroids.")));
	if (opts->init_centroids != NULL && opts->init_rows != opts->k)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg_plural("init_centroids has %d row, but k is %d",
							   "init_centroids has %d rows, but k is %d",
							   opts->init_rows, opts->init_rows, opts->k)));
}

/*
 * Checks against the data: its size and the vector length.
 */
void
KmOptionsCheckData(const KmOptions *opts, int64 n, int dim)
{
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmeans has no vectors to cluster"),
				 errdetail("Every input row was NULL, or there were no rows.")));
	if (opts->k > n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k (%d) is larger than the number of vectors (" INT64_FORMAT ")",
						opts->k, n)));
	if (opts->init_centroids != NULL)
	{
		if (opts->init_dim != dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("init_centroids have %d values per row, but the vectors have %d",
							opts->init_dim, dim)));
		if (opts->metric == KM_METRIC_COSINE)
			for (int j = 0; j < opts->init_rows; j++)
			{
				bool		zero = true;

				for (int i = 0; i < dim && zero; i++)
					zero = opts->init_centroids[(int64) j * dim + i] == 0.0f;
				if (zero)
					ereport(ERROR,
							(errcode(ERRCODE_DATA_EXCEPTION),
							 errmsg("init_centroids row %d is a zero vector, which has no direction for metric cosine",
									j + 1)));
			}
	}
}

/*
 * The jsonb readers above, for the options of other functions (k-medoids):
 * the same types, ranges and messages.
 */
int64
KmJsonInteger(const char *key, const JsonbValue *v, int64 min, int64 max)
{
	return JsonInteger(key, v, min, max);
}

double
KmJsonNumber(const char *key, const JsonbValue *v)
{
	return JsonNumber(key, v);
}

char *
KmJsonString(const char *key, const JsonbValue *v)
{
	return JsonString(key, v);
}
