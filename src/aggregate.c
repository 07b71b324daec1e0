/*
 * aggregate.c
 *	  The kmeans(vec, k [, options]) aggregate.
 *
 * The transition function gathers the rows of a group; the final function
 * runs the engine and returns a kmeans_model.  The aggregate is parallel
 * safe: workers gather rows, serialise them for the leader and the leader
 * combines the partial states.  Combining links chunks instead of copying
 * rows when both states live in the leader's aggregate context.  A partial
 * state larger than kmeans_gpu.spill_threshold travels as a temporary file
 * (spill.c), since a bytea is capped at 1 GB.
 *
 * Seeding is independent of row order (src/include/km_hash.h), so a parallel
 * plan, which changes the order in which rows arrive, gives the same model
 * as a serial one for the same seed.
 */
#include "postgres.h"

#include "fmgr.h"
#include "nodes/primnodes.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "kmeans_gpu.h"

typedef struct KmAggState
{
	KmMatrix	matrix;			/* the rows */
	KmGpuSink  *gpu;			/* rows streamed to the GPU too (or only), or NULL */
	KmOptions	opts;			/* from the first row */
	Jsonb	   *options;		/* as given, to compare later rows against */
	int64		n_null;			/* rows skipped: NULL vector */
	bool		gpu_considered; /* streaming to the GPU was decided */
} KmAggState;

/*
 * A group whose rows pass this size starts streaming them to the GPU (when
 * the GPU is to run its fit), so that the upload overlaps the rest of the
 * scan; smaller groups are uploaded when their fit starts.
 */
#define KM_GPU_STREAM_BYTES ((Size) 64 * 1024 * 1024)

/* Serialised partial state: this header, the options, then rows or a path. */
typedef struct KmSerialHeader
{
	uint32		magic;
	uint32		kind;			/* KM_SERIAL_INLINE or KM_SERIAL_FILE */
	int32		k;
	int32		dim;
	int32		options_len;	/* bytes of the options jsonb, 0 if none */
	int32		path_len;		/* KM_SERIAL_FILE: bytes of the path */
	int64		n;
	int64		n_null;
} KmSerialHeader;

#define KM_SERIAL_MAGIC 0x4b4d5331	/* "KMS1" */
#define KM_SERIAL_INLINE 1
#define KM_SERIAL_FILE 2

static MemoryContext
AggContext(FunctionCallInfo fcinfo, const char *func)
{
	MemoryContext aggcontext;

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "%s called in non-aggregate context", func);
	return aggcontext;
}

/*
 * A new state in aggcontext, for k and the options jsonb (NULL: defaults).
 */
static KmAggState *
NewState(MemoryContext aggcontext, int k, Jsonb *options)
{
	MemoryContext old = MemoryContextSwitchTo(aggcontext);
	KmAggState *state = palloc0(sizeof(KmAggState));

	KmOptionsDefaults(&state->opts);
	state->opts.k = k;
	if (options != NULL)
	{
		state->options = palloc(VARSIZE(options));
		memcpy(state->options, options, VARSIZE(options));
		KmOptionsFromJsonb(&state->opts, state->options);
	}
	KmOptionsCheck(&state->opts);
	KmMatrixInit(&state->matrix, aggcontext, false,
				 state->opts.metric == KM_METRIC_COSINE);
	KmMatrixSetStorage(&state->matrix, state->opts.storage);
	MemoryContextSwitchTo(old);
	return state;
}

static bool
SameOptions(Jsonb *a, Jsonb *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE(a) == VARSIZE(b) && memcmp(a, b, VARSIZE(a)) == 0;
}

/* k and options must not change within a group. */
static void
CheckSameCall(const KmAggState *state, int k, Jsonb *options)
{
	if (k != state->opts.k)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be the same for every row of a kmeans group"),
				 errdetail("Got %d after %d.", k, state->opts.k)));
	if (!SameOptions(options, state->options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options must be the same for every row of a kmeans group")));
}

/*
 * Stream the group's rows to the GPU from now on, unless this is a partial
 * aggregate (its rows go to the leader as a serialised state) or the CPU is
 * to run the fit.
 */
static void
ConsiderGpu(FunctionCallInfo fcinfo, KmAggState *state)
{
	Aggref	   *aggref = AggGetAggref(fcinfo);
	KmEngineChoice choice = KmOptionsEngine(&state->opts);

	state->gpu_considered = true;
	if (aggref == NULL || DO_AGGSPLIT_SKIPFINAL(aggref->aggsplit) || choice == KM_ENGINE_CPU)
		return;
	/* the whole group is unknown yet: expect it to double */
	state->gpu = KmGpuSinkStart(&state->matrix, choice, state->opts.k, state->opts.metric,
								state->matrix.n * 2,
								choice != KM_ENGINE_GPU || !KmInitOnGpu(state->opts.init));
}

PG_FUNCTION_INFO_V1(kmeans_accum);

/*
 * kmeans_accum(state, vec real[] | float8[], k [, options]): add one row.
 */
Datum
kmeans_accum(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = AggContext(fcinfo, "kmeans_accum");
	KmAggState *state = PG_ARGISNULL(0) ? NULL : (KmAggState *) PG_GETARG_POINTER(0);
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
		state = NewState(aggcontext, k, options);
	else
		CheckSameCall(state, k, options);

	if (PG_ARGISNULL(1))
	{
		state->n_null++;
		KmMatrixSkipRow(&state->matrix);
	}
	else
	{
		if (state->gpu != NULL)
			KmGpuSinkAppendVector(state->gpu, PG_GETARG_ARRAYTYPE_P(1), 1.0f);
		else
			KmMatrixAppendVector(&state->matrix, PG_GETARG_ARRAYTYPE_P(1), 1.0f);
		if (!state->gpu_considered && state->matrix.bytes >= KM_GPU_STREAM_BYTES)
			ConsiderGpu(fcinfo, state);
	}

	PG_RETURN_POINTER(state);
}

/* The rows of src appended to dst by copy. */
static void
CopyRows(KmMatrix *dst, const KmMatrix *src)
{
	for (int c = 0; c < src->nchunks; c++)
		KmMatrixAppendRows(dst, src->dim, src->chunks[c].x, src->chunks[c].w,
						   src->chunks[c].n);
}

PG_FUNCTION_INFO_V1(kmeans_combine);

/*
 * kmeans_combine(state1, state2): the rows of both.  state2's chunks are
 * taken over when they live in this aggregate's context (states the leader
 * deserialised); otherwise they are copied, since their memory may be reset
 * before ours.
 */
Datum
kmeans_combine(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = AggContext(fcinfo, "kmeans_combine");
	KmAggState *s1 = PG_ARGISNULL(0) ? NULL : (KmAggState *) PG_GETARG_POINTER(0);
	KmAggState *s2 = PG_ARGISNULL(1) ? NULL : (KmAggState *) PG_GETARG_POINTER(1);
	bool		adopt;

	if (s2 == NULL)
		PG_RETURN_POINTER(s1);
	adopt = s2->matrix.context == aggcontext;
	if (s1 == NULL)
	{
		if (adopt)
			PG_RETURN_POINTER(s2);
		s1 = NewState(aggcontext, s2->opts.k, s2->options);
	}
	else
		CheckSameCall(s1, s2->opts.k, s2->options);

	if (s1->matrix.dim != 0 && s2->matrix.dim != 0)
		KmCheckDimension(s1->matrix.dim, s2->matrix.dim);
	if (adopt)
		KmMatrixAdopt(&s1->matrix, &s2->matrix);
	else
		CopyRows(&s1->matrix, &s2->matrix);
	s1->n_null += s2->n_null;
	PG_RETURN_POINTER(s1);
}

PG_FUNCTION_INFO_V1(kmeans_serialize);

/*
 * kmeans_serialize(state) -> bytea: header, options, then the rows, or the
 * path of a file holding them when they exceed kmeans_gpu.spill_threshold.
 */
Datum
kmeans_serialize(PG_FUNCTION_ARGS)
{
	KmAggState *state = (KmAggState *) PG_GETARG_POINTER(0);
	KmMatrix   *m = &state->matrix;
	KmSerialHeader hdr;
	Size		options_len = state->options ? VARSIZE(state->options) : 0;
	Size		rows_bytes = sizeof(float) * (Size) m->dim * (Size) m->n;
	Size		head_bytes = MAXALIGN(sizeof(hdr)) + MAXALIGN(options_len);
	char	   *path = NULL;
	bytea	   *out;
	char	   *p;

	AggContext(fcinfo, "kmeans_serialize");
	memset(&hdr, 0, sizeof(hdr));
	hdr.magic = KM_SERIAL_MAGIC;
	hdr.k = state->opts.k;
	hdr.dim = m->dim;
	hdr.options_len = (int32) options_len;
	hdr.n = m->n;
	hdr.n_null = state->n_null;

	if (rows_bytes > (Size) kmeans_spill_threshold_kb * 1024)
	{
		int			fd;

		path = KmSpillCreate(&fd);
		for (int c = 0; c < m->nchunks; c++)
		{
			CHECK_FOR_INTERRUPTS();
			KmSpillWrite(fd, path, m->chunks[c].x,
						 sizeof(float) * (Size) m->dim * (Size) m->chunks[c].n);
		}
		KmSpillClose(fd, path);
		hdr.kind = KM_SERIAL_FILE;
		hdr.path_len = (int32) strlen(path) + 1;
		rows_bytes = hdr.path_len;
	}
	else
		hdr.kind = KM_SERIAL_INLINE;

	out = palloc_extended(VARHDRSZ + head_bytes + rows_bytes, MCXT_ALLOC_HUGE);
	SET_VARSIZE(out, VARHDRSZ + head_bytes + rows_bytes);
	p = VARDATA(out);
	memset(p, 0, head_bytes);
	memcpy(p, &hdr, sizeof(hdr));
	if (options_len > 0)
		memcpy(p + MAXALIGN(sizeof(hdr)), state->options, options_len);
	p += head_bytes;

	if (path != NULL)
		memcpy(p, path, hdr.path_len);
	else
		for (int c = 0; c < m->nchunks; c++)
		{
			Size		bytes = sizeof(float) * (Size) m->dim * (Size) m->chunks[c].n;

			memcpy(p, m->chunks[c].x, bytes);
			p += bytes;
		}
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(kmeans_deserialize);

/*
 * kmeans_deserialize(bytea, internal) -> state, in the aggregate context so
 * that kmeans_combine can take its rows over without copying.
 */
Datum
kmeans_deserialize(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = AggContext(fcinfo, "kmeans_deserialize");
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	const char *p = VARDATA_ANY(in);
	Size		len = VARSIZE_ANY_EXHDR(in);
	KmSerialHeader hdr;
	KmAggState *state;
	Jsonb	   *options = NULL;
	Size		head_bytes;

	if (len < sizeof(hdr))
		elog(ERROR, "kmeans partial state is truncated");
	memcpy(&hdr, p, sizeof(hdr));
	if (hdr.magic != KM_SERIAL_MAGIC)
		elog(ERROR, "kmeans partial state has a bad header");
	head_bytes = MAXALIGN(sizeof(hdr)) + MAXALIGN(hdr.options_len);
	if (hdr.options_len > 0)
	{
		options = palloc(hdr.options_len);
		memcpy(options, p + MAXALIGN(sizeof(hdr)), hdr.options_len);
	}
	state = NewState(aggcontext, hdr.k, options);
	state->n_null = hdr.n_null;
	p += head_bytes;

	if (hdr.kind == KM_SERIAL_INLINE)
	{
		if (len != head_bytes + sizeof(float) * (Size) hdr.dim * (Size) hdr.n)
			elog(ERROR, "kmeans partial state has the wrong size");
		if (hdr.n > 0)
			KmMatrixAppendRows(&state->matrix, hdr.dim, (const float *) p, NULL, hdr.n);
	}
	else if (hdr.kind == KM_SERIAL_FILE)
	{
		char	   *path = pnstrdup(p, hdr.path_len);
		int			fd = KmSpillOpen(path);
		int64		left = hdr.n;

		/* read straight into chunks: no second copy of the rows */
		while (left > 0)
		{
			int64		got;
			float	   *dst = KmMatrixReserve(&state->matrix, hdr.dim, left, &got);

			CHECK_FOR_INTERRUPTS();
			KmSpillRead(fd, path, dst, sizeof(float) * (Size) hdr.dim * (Size) got);
			left -= got;
		}
		KmSpillRemove(fd, path);
	}
	else
		elog(ERROR, "kmeans partial state has unknown kind %u", hdr.kind);

	PG_RETURN_POINTER(state);
}

PG_FUNCTION_INFO_V1(kmeans_final);

/*
 * kmeans_final(state) -> kmeans_model.  Does not modify the state.
 */
Datum
kmeans_final(PG_FUNCTION_ARGS)
{
	KmAggState *state;
	KmOptions	opts;
	KmFitOutput fit;

	AggContext(fcinfo, "kmeans_final");
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmeans has no vectors to cluster"),
				 errdetail("The aggregate received no rows.")));
	state = (KmAggState *) PG_GETARG_POINTER(0);

	opts = state->opts;
	KmOptionsFixSeed(&opts);
	if (!KmRunFit(&state->matrix, state->gpu, &opts, false, &fit))
		elog(ERROR, "kmeans lost its rows to a GPU failure; please report a bug");
	return KmModelMake(fcinfo, &opts, &fit, state->matrix.dim, fit.n_rows, state->n_null);
}
