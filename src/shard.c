/*
 * shard.c
 *	  The shard side of kmeans_fit_sharded: a shard's rows, loaded once per
 *	  fit and kept in this backend between the coordinator's calls, and the
 *	  calls that run on them (the map step, k-means|| draws and weights).
 *
 * The coordinator (sharded.c) reaches every shard through PL/Proxy, which
 * keeps one connection per shard for the coordinator's session: the rows
 * stay in the memory of the backend serving that connection, keyed by the
 * fit's id, until the coordinator ends the fit, a call fails, the fit is
 * replaced by the next, or the connection closes.  A connection left idle
 * with rows loaded is closed after kmeans_gpu.shard_idle_timeout (through
 * idle_session_timeout, where the server has it), which frees them.
 *
 * Every call carries what a new backend needs to load the rows itself: the
 * table and columns (values, resolved through this shard's catalog, read as
 * the connecting user, so privileges and row-level security apply) and the
 * fingerprint the shard's rows had when first loaded (row count and an
 * order-free hash of the rows).  A call that lands on a replacement (a
 * standby after a failover) loads its copy and refuses it when the
 * fingerprint differs, naming the shard.  Calls of the Lloyd loop also
 * carry the previous centroids, from which a replacement rebuilds the
 * labels that "rows moved" counts against.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "kmeans_gpu.h"
#include "km_exact.h"
#include "km_hash.h"
#include "km_kmpar.h"
#include "km_xsum.h"

/* The rows of one fit, as this shard loaded them. */
typedef struct KmShardFit
{
	int64		fit_id;
	Oid			role;			/* who loaded them */
	char	   *spec;			/* source, columns, metric and storage, as given */
	km_metric	metric;
	km_storage	storage;		/* the rows were rounded to it as they loaded */
	MemoryContext context;
	KmMatrix	rows;
	int			dim;
	int64		n_skipped;
	uint64		fingerprint;
	km_xstats	xs;
	uint64	   *hashes;			/* per row */
	bool		weighted;
	bool		weight_positive;
	Size		bytes;

	/* Lloyd */
	int32	   *labels;			/* assignment to labels_model's centroids */
	uint64		labels_model;	/* 0: none yet */
	uint64		last_model;		/* the step answered last, and its answer */
	uint64		last_previous;
	KmPartialData *last_partial;
	int64		last_moved;

	/* k-means|| of run kmpar_run */
	int			kmpar_run;
	uint64		kmpar_seed;
	int			kmpar_folded;	/* candidates folded into cost and clabel */
	uint64		kmpar_prefix;	/* hash of those candidates */
	double	   *cost;
	int32	   *clabel;
} KmShardFit;

static KmShardFit *shard_fit = NULL;
static char *saved_idle_timeout = NULL;

int			kmeans_shard_idle_timeout_ms = 5 * 60 * 1000;

/* What identifies a fit's rows: the same for every call of one fit. */
static char *
ShardSpec(const char *source, const char *column, const char *weight, km_metric metric,
		  km_storage storage)
{
	return psprintf("%s\x1f%s\x1f%s\x1f%d\x1f%d", source, column, weight ? weight : "",
					(int) metric, (int) storage);
}

/*
 * While a fit's rows are loaded, an idle connection is closed after
 * kmeans_gpu.shard_idle_timeout (the coordinator is gone or stuck);
 * afterwards the session's own idle_session_timeout is back.
 */
static void
HoldIdleTimeout(bool holding)
{
	const char *cur = GetConfigOption("idle_session_timeout", true, false);

	if (cur == NULL || kmeans_shard_idle_timeout_ms <= 0)
		return;					/* before PostgreSQL 14, or switched off */
	if (holding)
	{
		if (saved_idle_timeout == NULL)
			saved_idle_timeout = MemoryContextStrdup(TopMemoryContext, cur);
		SetConfigOption("idle_session_timeout",
						psprintf("%d", kmeans_shard_idle_timeout_ms), PGC_USERSET, PGC_S_SESSION);
	}
	else if (saved_idle_timeout != NULL)
	{
		SetConfigOption("idle_session_timeout", saved_idle_timeout, PGC_USERSET, PGC_S_SESSION);
		pfree(saved_idle_timeout);
		saved_idle_timeout = NULL;
	}
}

/* Free the fit's rows, if any; returns the bytes they held. */
static Size
ShardFree(void)
{
	Size		freed = 0;

	if (shard_fit != NULL)
	{
		freed = shard_fit->bytes;
		MemoryContextDelete(shard_fit->context);
		shard_fit = NULL;
	}
	HoldIdleTimeout(false);
	return freed;
}

/* The shard's partition number: the one element PL/Proxy left in parts. */
static int
ShardPart(FunctionCallInfo fcinfo)
{
	ArrayType  *parts;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(0))
		elog(ERROR, "kmeans shard call without a partition number");
	parts = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_ELEMTYPE(parts) != INT4OID)
		elog(ERROR, "kmeans shard call with partition numbers of type %u", ARR_ELEMTYPE(parts));
	deconstruct_array(parts, INT4OID, 4, true, TYPALIGN_INT, &elems, &nulls, &n);
	if (n != 1 || nulls[0])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a kmeans shard call takes exactly one partition number, not %d", n),
				 errhint("Call it through kmeans_fit_sharded.")));
	return DatumGetInt32(elems[0]);
}

/* One row of the scan into the fit's rows. */
typedef struct ShardLoad
{
	KmShardFit *fit;
	int64		n_skipped;
	bool		first;
} ShardLoad;

static void
ShardLoadRow(void *arg, Datum *values, bool *nulls)
{
	ShardLoad  *ld = (ShardLoad *) arg;
	KmShardFit *fit = ld->fit;
	double		w = 1.0;

	if (nulls[0] || (fit->weighted && nulls[1]))
	{
		ld->n_skipped++;
		KmMatrixSkipRow(&fit->rows);
		return;
	}
	if (fit->weighted)
	{
		w = DatumGetFloat8(values[1]);
		KmCheckWeight(w);
		if (w > 0)
			fit->weight_positive = true;
	}
	else
		fit->weight_positive = true;
	KmMatrixAppendVector(&fit->rows, DatumGetArrayTypeP(values[0]), (float) w);
}

/*
 * The rows of fit_id, loaded now if this backend does not hold them: the
 * table's column (and weights) as the current user sees them, their
 * bounds and hashes, and the fingerprint, which must be expected when one
 * is given.  *reloaded says whether a load happened.
 */
static KmShardFit *
ShardRows(int part, int64 fit_id, const char *source, const char *column,
		  const char *weight, const char *metric_name, const char *storage_name,
		  ArrayType *fingerprints, bool *reloaded)
{
	KmOptions	mopts;
	char	   *spec;
	KmShardFit *fit;
	MemoryContext old;
	KmScanSpec scan;
	ShardLoad	ld;
	km_data		data;
	uint64		sum = 0;
	int64		g = 0;
	RangeVar   *rv;

	KmOptionsDefaults(&mopts);
	KmOptionsSetMetric(&mopts, metric_name);
	KmOptionsSetStorage(&mopts, storage_name);
	spec = ShardSpec(source, column, weight, mopts.metric, mopts.storage);
	*reloaded = false;
	if (shard_fit != NULL && shard_fit->fit_id == fit_id)
	{
		if (shard_fit->role != GetUserId() || strcmp(shard_fit->spec, spec) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("fit " INT64_FORMAT " was loaded by another role, or for other columns, metric or storage",
							fit_id)));
		return shard_fit;
	}

	/* one fit per backend: whatever was loaded before was abandoned */
	(void) ShardFree();

	rv = makeRangeVarFromNameList(textToQualifiedNameList(cstring_to_text(source)));
	memset(&scan, 0, sizeof(scan));
	scan.relid = RangeVarGetRelid(rv, NoLock, false);
	scan.vector_column = column;
	scan.weight_column = weight;

	fit = MemoryContextAllocZero(TopMemoryContext, sizeof(KmShardFit));
	fit->context = AllocSetContextCreate(TopMemoryContext, "kmeans shard rows",
										 ALLOCSET_DEFAULT_SIZES);
	PG_TRY();
	{
		old = MemoryContextSwitchTo(fit->context);
		fit->fit_id = fit_id;
		fit->role = GetUserId();
		fit->spec = pstrdup(spec);
		fit->metric = mopts.metric;
		fit->storage = mopts.storage;
		fit->weighted = weight != NULL;
		fit->kmpar_run = -1;
		KmMatrixInit(&fit->rows, fit->context, fit->weighted, fit->metric == KM_METRIC_COSINE);
		/* rounded as kmeans_fit rounds them, so that the models agree */
		KmMatrixSetStorage(&fit->rows, fit->storage);
		MemoryContextSwitchTo(old);

		memset(&ld, 0, sizeof(ld));
		ld.fit = fit;
		KmScanTable(&scan, ShardLoadRow, &ld);
		fit->n_skipped = ld.n_skipped;
		fit->dim = fit->rows.dim;

		/* hashes, bounds and the fingerprint */
		KmCheckMemory(add_size(fit->rows.bytes,
							   mul_size((Size) Max(fit->rows.n, 1), 2 * sizeof(uint64) + 3 * sizeof(int32))),
					  "kmeans_fit_sharded (the rows of this shard)");
		old = MemoryContextSwitchTo(fit->context);
		fit->hashes = MemoryContextAllocHuge(fit->context, sizeof(uint64) * Max(fit->rows.n, 1));
		fit->labels = MemoryContextAllocHuge(fit->context, sizeof(int32) * Max(fit->rows.n, 1));
		MemoryContextSwitchTo(old);
		km_xstats_init(&fit->xs);
		data = KmMatrixData(&fit->rows);
		for (int c = 0; c < data.nchunks; c++)
		{
			const km_chunk *ch = &data.chunks[c];

			CHECK_FOR_INTERRUPTS();
			for (int64 i = 0; i < ch->n; i++, g++)
			{
				const float *x = ch->x + (Size) i * data.d;
				float		w = ch->w != NULL ? ch->w[i] : 1.0f;

				fit->hashes[g] = km_row_hash(x, data.d, w);
				sum += fit->hashes[g];
				km_xstats_row(&fit->xs, x, data.d, w, ch->w != NULL,
							  fit->metric == KM_METRIC_COSINE,
							  fit->metric == KM_METRIC_COSINE ? km_exact_norm(x, data.d) : 0.0);
			}
		}
		fit->fingerprint = km_mix64(sum ^ km_mix64((uint64) fit->rows.n) ^
									km_mix64((uint64) fit->n_skipped + 0x9e3779b97f4a7c15ULL));
		fit->bytes = fit->rows.bytes + sizeof(uint64) * fit->rows.n + sizeof(int32) * fit->rows.n;
	}
	PG_CATCH();
	{
		MemoryContextDelete(fit->context);
		pfree(fit);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* a replacement must hold the rows the fit started with */
	if (fingerprints != NULL)
	{
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		deconstruct_array(fingerprints, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
						  &elems, &nulls, &n);
		if (part < n && !nulls[part] && (uint64) DatumGetInt64(elems[part]) != fit->fingerprint)
		{
			int64		n_rows = fit->rows.n;

			MemoryContextDelete(fit->context);
			pfree(fit);
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("the rows differ from those the fit started with"),
					 errdetail("This server holds " INT64_FORMAT " rows with fingerprint %016llx; the fit loaded rows with fingerprint %016llx.",
							   n_rows, (unsigned long long) fit->fingerprint,
							   (unsigned long long) DatumGetInt64(elems[part])),
					 errhint("A standby that has not replayed the same changes cannot take over; wait for it to catch up and run the fit again.")));
		}
	}
	shard_fit = fit;
	HoldIdleTimeout(true);
	*reloaded = true;
	return fit;
}

/* Text argument argno, or NULL. */
static char *
TextArg(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The fit's rows for a call with the usual leading arguments: (parts,
 * fit_id, source, column_name, weight_column, metric, storage,
 * fingerprints).
 */
static KmShardFit *
ShardRowsFromArgs(FunctionCallInfo fcinfo, int part, bool *reloaded)
{
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3) || PG_ARGISNULL(5) ||
		PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fit_id, source, column_name, metric and storage must not be NULL")));
	return ShardRows(part, PG_GETARG_INT64(1), TextArg(fcinfo, 2), TextArg(fcinfo, 3),
					 TextArg(fcinfo, 4), TextArg(fcinfo, 5), TextArg(fcinfo, 6),
					 PG_ARGISNULL(7) ? NULL : PG_GETARG_ARRAYTYPE_P(7), reloaded);
}

/*
 * Errors of a shard call name the shard; a failed call frees the rows (the
 * coordinator gives up or retries, and a retry loads them again).
 */
#define SHARD_CALL_BEGIN(part) \
	do { \
		MemoryContext shard_caller = CurrentMemoryContext; \
		int			shard_part = (part); \
		PG_TRY(); \
		{

#define SHARD_CALL_END() \
		} \
		PG_CATCH(); \
		{ \
			ErrorData  *edata; \
			MemoryContextSwitchTo(shard_caller); \
			edata = CopyErrorData(); \
			FlushErrorState(); \
			(void) ShardFree(); \
			edata->message = psprintf("shard %d: %s", shard_part, edata->message); \
			ReThrowError(edata); \
		} \
		PG_END_TRY(); \
	} while (0)

/* Milliseconds since start. */
static double
MsSince(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000.0;
}

/* centroids (k x dim real[][]) as a model for the fit's rows. */
static void
ShardModel(ArrayType *arr, const KmShardFit *fit, KmModel *model)
{
	KmOptions	o;

	KmOptionsDefaults(&o);
	KmOptionsSetInitCentroids(&o, arr);
	if (o.init_dim != fit->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("centroids have %d values per row, but the vectors of this shard have %d",
						o.init_dim, fit->dim)));
	memset(model, 0, sizeof(*model));
	model->k = o.init_rows;
	model->dim = o.init_dim;
	model->metric = fit->metric;
	model->centroids = o.init_centroids;
	if (fit->metric == KM_METRIC_COSINE)
	{
		model->cnorms = palloc(sizeof(double) * model->k);
		for (int j = 0; j < model->k; j++)
		{
			model->cnorms[j] = km_exact_norm(model->centroids + (Size) j * model->dim, model->dim);
			if (!(model->cnorms[j] > 0))
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("centroid %d is a zero vector, which metric cosine cannot use", j)));
		}
	}
}

static void
ReturnRow(ReturnSetInfo *rsinfo, Datum *values, bool *nulls)
{
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

PG_FUNCTION_INFO_V1(kmeans_shard_load);

/*
 * kmeans_shard_load(parts, fit_id, source, column_name, weight_column,
 * metric, storage, fingerprints) -> (part, n_rows, n_skipped, dim, fingerprint,
 * weight_positive, ms, reloaded)
 */
Datum
kmeans_shard_load(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);

	SHARD_CALL_BEGIN(part);
	{
		TimestampTz start = GetCurrentTimestamp();
		bool		reloaded;
		KmShardFit *fit = ShardRowsFromArgs(fcinfo, part, &reloaded);
		Datum		values[8];
		bool		nulls[8] = {false, false, false, false, false, false, false, false};

		values[0] = Int32GetDatum(part);
		values[1] = Int64GetDatum(fit->rows.n);
		values[2] = Int64GetDatum(fit->n_skipped);
		values[3] = Int32GetDatum(fit->dim);
		values[4] = Int64GetDatum((int64) fit->fingerprint);
		values[5] = BoolGetDatum(fit->weight_positive);
		values[6] = Float8GetDatum(MsSince(start));
		values[7] = BoolGetDatum(reloaded);
		ReturnRow(rsinfo, values, nulls);
	}
	SHARD_CALL_END();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(kmeans_shard_step);

/*
 * kmeans_shard_step(parts, fit_id, source, column_name, weight_column,
 * metric, storage, fingerprints, previous, centroids) -> (part, partial, moved, ms,
 * reloaded): the partial of this shard's rows for centroids, and how many
 * rows changed cluster since the assignment to previous (NULL: the first
 * iteration, when every row moves).  Asked twice for the same centroids
 * (a retry), it answers from memory.
 */
Datum
kmeans_shard_step(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);

	SHARD_CALL_BEGIN(part);
	{
		TimestampTz start = GetCurrentTimestamp();
		bool		reloaded;
		KmShardFit *fit = ShardRowsFromArgs(fcinfo, part, &reloaded);
		KmModel		model;
		KmModel		prev;
		uint64		hash,
					prev_hash = 0;
		km_data		data = KmMatrixData(&fit->rows);
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		if (PG_ARGISNULL(9))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("centroids must not be NULL")));
		ShardModel(PG_GETARG_ARRAYTYPE_P(9), fit, &model);
		hash = KmModelHash(&model);
		if (!PG_ARGISNULL(8))
		{
			ShardModel(PG_GETARG_ARRAYTYPE_P(8), fit, &prev);
			prev_hash = KmModelHash(&prev);
		}

		if (fit->last_partial == NULL || fit->last_model != hash ||
			fit->last_previous != prev_hash)
		{
			MemoryContext old;
			int32	   *labels;
			int64		moved = 0;

			/* the labels "moved" counts against: none, or the assignment to previous */
			if (prev_hash == 0)
			{
				for (int64 i = 0; i < fit->rows.n; i++)
					fit->labels[i] = -1;
			}
			else if (fit->labels_model != prev_hash && fit->rows.n > 0)
				KmRunAssign(&data, prev.centroids, prev.k, prev.metric, fit->labels, NULL);
			fit->labels_model = prev_hash;

			labels = palloc_extended(sizeof(int32) * Max(fit->rows.n, 1), MCXT_ALLOC_HUGE);
			old = MemoryContextSwitchTo(fit->context);
			if (fit->last_partial != NULL)
				pfree(fit->last_partial);
			fit->last_partial = KmPartialFromRows(&model, hash, &data, &fit->xs, fit->weighted,
												  fit->n_skipped, labels);
			MemoryContextSwitchTo(old);
			for (int64 i = 0; i < fit->rows.n; i++)
				moved += labels[i] != fit->labels[i];
			memcpy(fit->labels, labels, sizeof(int32) * fit->rows.n);
			pfree(labels);
			fit->labels_model = hash;
			fit->last_model = hash;
			fit->last_previous = prev_hash;
			fit->last_moved = moved;
		}
		values[0] = Int32GetDatum(part);
		values[1] = PointerGetDatum(fit->last_partial);
		values[2] = Int64GetDatum(fit->last_moved);
		values[3] = Float8GetDatum(MsSince(start));
		values[4] = BoolGetDatum(reloaded);
		ReturnRow(rsinfo, values, nulls);
	}
	SHARD_CALL_END();
	return (Datum) 0;
}

/*
 * k-means|| state for run and seed, with every candidate of cands (ncand x
 * dim) folded in: candidates fold once each, in order, and the fold starts
 * over when the run, the seed or the candidates folded so far change.
 */
static void
ShardFold(KmShardFit *fit, int run, uint64 seed, ArrayType *cands)
{
	int			ncand = 0;
	const float *c = NULL;
	uint64		prefix;
	km_data		data = KmMatrixData(&fit->rows);

	if (cands != NULL)
	{
		KmOptions	o;

		KmOptionsDefaults(&o);
		KmOptionsSetInitCentroids(&o, cands);
		if (o.init_dim != fit->dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("candidates have %d values per row, but the vectors of this shard have %d",
							o.init_dim, fit->dim)));
		ncand = o.init_rows;
		c = o.init_centroids;
	}
	if (fit->cost == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fit->context);

		KmCheckMemory(fit->bytes + (sizeof(double) + sizeof(int32)) * fit->rows.n,
					  "kmeans_fit_sharded (k-means|| on this shard)");
		fit->cost = MemoryContextAllocHuge(fit->context, sizeof(double) * Max(fit->rows.n, 1));
		fit->clabel = MemoryContextAllocHuge(fit->context, sizeof(int32) * Max(fit->rows.n, 1));
		fit->bytes += (sizeof(double) + sizeof(int32)) * fit->rows.n;
		MemoryContextSwitchTo(old);
	}
	prefix = fit->kmpar_folded > 0 && fit->kmpar_folded <= ncand ?
		km_row_hash(c, fit->kmpar_folded * fit->dim, 0.0f) : 0;
	if (fit->kmpar_run != run || fit->kmpar_seed != seed || fit->kmpar_folded > ncand ||
		prefix != fit->kmpar_prefix)
	{
		for (int64 i = 0; i < fit->rows.n; i++)
		{
			fit->cost[i] = INFINITY;
			fit->clabel[i] = -1;
		}
		fit->kmpar_run = run;
		fit->kmpar_seed = seed;
		fit->kmpar_folded = 0;
		fit->kmpar_prefix = 0;
	}
	if (ncand > fit->kmpar_folded && fit->rows.n > 0)
		KmRunKmparFold(&data, fit->metric, c + (Size) fit->kmpar_folded * fit->dim,
					   fit->kmpar_folded, ncand - fit->kmpar_folded, fit->cost, fit->clabel);
	fit->kmpar_folded = ncand;
	fit->kmpar_prefix = ncand > 0 ? km_row_hash(c, ncand * fit->dim, 0.0f) : 0;
}

PG_FUNCTION_INFO_V1(kmeans_shard_draw);

/*
 * kmeans_shard_draw(parts, fit_id, source, column_name, weight_column,
 * metric, storage, fingerprints, seed, run, candidates, stream, use_cost, m) ->
 * (part, keys, hashes, weights, rows, ms, reloaded): the candidates folded
 * in (k-means||), then this shard's m rows with the smallest sampling keys
 * in stream, under the row's weight or its weight times its cost to the
 * nearest candidate.
 */
Datum
kmeans_shard_draw(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);

	SHARD_CALL_BEGIN(part);
	{
		TimestampTz start = GetCurrentTimestamp();
		bool		reloaded;
		KmShardFit *fit = ShardRowsFromArgs(fcinfo, part, &reloaded);
		int			run = PG_GETARG_INT32(9);
		uint64		seed = (uint64) PG_GETARG_INT64(8);
		uint64		stream = (uint64) PG_GETARG_INT64(11);
		bool		use_cost = PG_GETARG_BOOL(12);
		int			m = PG_GETARG_INT32(13);
		km_data		data = KmMatrixData(&fit->rows);
		km_kmpar_draw *draws;
		int			nout = 0;
		Datum	   *keys,
				   *hashes,
				   *weights,
				   *vals;
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};
		int			dims[2];
		int			lbs[2] = {1, 1};

		if (m < 1 || m > 1 << 24)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("m must be between 1 and %d, not %d", 1 << 24, m)));
		ShardFold(fit, run, seed, PG_ARGISNULL(10) ? NULL : PG_GETARG_ARRAYTYPE_P(10));
		draws = palloc(sizeof(km_kmpar_draw) * m);
		if (fit->rows.n > 0)
			KmRunKmparKeys(&data, fit->hashes, use_cost ? fit->cost : NULL, stream, m,
						   draws, &nout);
		keys = palloc(sizeof(Datum) * Max(nout, 1));
		hashes = palloc(sizeof(Datum) * Max(nout, 1));
		weights = palloc(sizeof(Datum) * Max(nout, 1));
		vals = palloc(sizeof(Datum) * Max((Size) nout * fit->dim, 1));
		for (int i = 0; i < nout; i++)
		{
			int64		row = draws[i].row;
			const float *x = NULL;

			for (int c = 0; c < data.nchunks; c++)
			{
				if (row < data.chunks[c].n)
				{
					x = data.chunks[c].x + (Size) row * data.d;
					break;
				}
				row -= data.chunks[c].n;
			}
			keys[i] = Float8GetDatum(draws[i].key);
			hashes[i] = Int64GetDatum((int64) draws[i].hash);
			weights[i] = Float4GetDatum(draws[i].w);
			for (int j = 0; j < fit->dim; j++)
				vals[(Size) i * fit->dim + j] = Float4GetDatum(x[j]);
		}
		values[0] = Int32GetDatum(part);
		values[1] = PointerGetDatum(construct_array(keys, nout, FLOAT8OID, 8, FLOAT8PASSBYVAL,
													TYPALIGN_DOUBLE));
		values[2] = PointerGetDatum(construct_array(hashes, nout, INT8OID, 8, FLOAT8PASSBYVAL,
													TYPALIGN_DOUBLE));
		values[3] = PointerGetDatum(construct_array(weights, nout, FLOAT4OID, 4, true,
													TYPALIGN_INT));
		dims[0] = nout;
		dims[1] = fit->dim;
		values[4] = nout > 0 ?
			PointerGetDatum(construct_md_array(vals, NULL, 2, dims, lbs, FLOAT4OID, 4, true,
											   TYPALIGN_INT)) :
			PointerGetDatum(construct_empty_array(FLOAT4OID));
		values[5] = Float8GetDatum(MsSince(start));
		values[6] = BoolGetDatum(reloaded);
		ReturnRow(rsinfo, values, nulls);
	}
	SHARD_CALL_END();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(kmeans_shard_weigh);

/*
 * kmeans_shard_weigh(parts, fit_id, source, column_name, weight_column,
 * metric, storage, fingerprints, seed, run, candidates) -> (part, terms, nterms, ms,
 * reloaded): the candidates folded in, then each candidate's weight here:
 * the exact sum of the weights of the rows nearest to it, as its
 * canonical expansion (nterms[c] terms of terms for candidate c).
 */
Datum
kmeans_shard_weigh(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);

	SHARD_CALL_BEGIN(part);
	{
		TimestampTz start = GetCurrentTimestamp();
		bool		reloaded;
		KmShardFit *fit = ShardRowsFromArgs(fcinfo, part, &reloaded);
		km_data		data = KmMatrixData(&fit->rows);
		double	   *lev;
		km_xlevels	lv;
		km_xacc		acc;
		Datum	   *terms;
		Datum	   *counts;
		int			nterms = 0;
		int			ncand;
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		if (PG_ARGISNULL(10))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("candidates must not be NULL")));
		ShardFold(fit, PG_GETARG_INT32(9), (uint64) PG_GETARG_INT64(8), PG_GETARG_ARRAYTYPE_P(10));
		ncand = fit->kmpar_folded;
		lev = palloc_extended(sizeof(double) * KM_XLEV_MAX * Max(ncand, 1),
							  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		km_cpu_kmpar_weights(&data, fit->clabel, ncand, lev, &lv);
		km_xacc_init(&acc);
		terms = palloc(sizeof(Datum) * Max(ncand, 1) * 4);
		counts = palloc(sizeof(Datum) * Max(ncand, 1));
		for (int c = 0; c < ncand; c++)
		{
			double		out[KM_XACC_MAXTERMS];
			int			n;

			for (int l = 0; l < lv.n; l++)
				km_xacc_add(&acc, lev[(Size) l * ncand + c]);
			n = km_xacc_emit(&acc, out, KM_XACC_MAXTERMS);

			if (nterms + n > Max(ncand, 1) * 4)
				terms = repalloc(terms, sizeof(Datum) * (nterms + n) * 2);
			for (int t = 0; t < n; t++)
				terms[nterms++] = Float8GetDatum(out[t]);
			counts[c] = Int32GetDatum(n);
		}
		values[0] = Int32GetDatum(part);
		values[1] = PointerGetDatum(construct_array(terms, nterms, FLOAT8OID, 8, FLOAT8PASSBYVAL,
													TYPALIGN_DOUBLE));
		values[2] = PointerGetDatum(construct_array(counts, ncand, INT4OID, 4, true,
													TYPALIGN_INT));
		values[3] = Float8GetDatum(MsSince(start));
		values[4] = BoolGetDatum(reloaded);
		ReturnRow(rsinfo, values, nulls);
	}
	SHARD_CALL_END();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(kmeans_shard_end);

/* kmeans_shard_end(parts, fit_id) -> (part, freed): the fit's rows freed. */
Datum
kmeans_shard_end(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);
	Datum		values[2];
	bool		nulls[2] = {false, false};
	Size		freed = 0;

	if (shard_fit != NULL && !PG_ARGISNULL(1) && shard_fit->fit_id == PG_GETARG_INT64(1))
		freed = ShardFree();
	values[0] = Int32GetDatum(part);
	values[1] = Int64GetDatum((int64) freed);
	ReturnRow(rsinfo, values, nulls);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(kmeans_shard_status);

/*
 * kmeans_shard_status(parts) -> (part, fit_id, n_rows, bytes): the fit
 * whose rows this backend holds, if any.
 */
Datum
kmeans_shard_status(PG_FUNCTION_ARGS)
{
	int			part = ShardPart(fcinfo);
	ReturnSetInfo *rsinfo = KmMaterialize(fcinfo);
	Datum		values[4];
	bool		nulls[4] = {false, true, true, false};

	values[0] = Int32GetDatum(part);
	values[3] = Int64GetDatum(0);
	if (shard_fit != NULL)
	{
		values[1] = Int64GetDatum(shard_fit->fit_id);
		values[2] = Int64GetDatum(shard_fit->rows.n);
		values[3] = Int64GetDatum((int64) shard_fit->bytes);
		nulls[1] = nulls[2] = false;
	}
	ReturnRow(rsinfo, values, nulls);
	return (Datum) 0;
}
