/*
 * partial.c
 *	  kmeans_partial: what one part of the rows contributes to one Lloyd
 *	  step for given centroids, its text and binary forms, the aggregates
 *	  kmeans_partial(vec, model) and kmeans_merge(partial), and
 *	  kmeans_step(model, partial), which turns merged partials into the
 *	  next model.
 *
 * A partial holds, per cluster, the rows assigned to it, the exact sums of
 * their weights, of their weighted values (cosine: of their unit vectors)
 * and of their weighted costs, each written as its canonical expansion
 * (km_xsum.h: the rounded value, the rounded rest, ...), so that merging
 * partials is exact and two partials of the same rows are the same bytes.
 * For clusters that got no weight it also keeps the rows farthest from
 * their centroids, which is what re-seeding needs (kmeans_engine.h: a
 * cluster empty over all partials is empty in each).  kmeans_step does
 * what the CPU engine does after an assignment, with the same arithmetic
 * (km_step.h), so a model stepped from merged partials of any split of
 * the rows is, bit for bit, the engine's next model.
 *
 * Partials come from outside (text, binary, a shard): every field is
 * checked before use, and a partial must have been made for the model it
 * steps (a hash of the model's centroids).
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "kmeans_gpu.h"
#include "km_exact.h"
#include "km_hash.h"
#include "km_step.h"
#include "km_xsum.h"

#define KM_PARTIAL_VERSION 1
/* cells (k weights, k inertias, k * dim sums) of one partial, at most */
#define KM_PARTIAL_MAX_CELLS ((int64) 1 << 26)
/* rows an aggregate gathers before mapping them */
#define KM_PARTIAL_BATCH_BYTES ((Size) 64 * 1024 * 1024)

/* The flat form (the Datum): this header, then the arrays of KmPartialLayout. */
typedef struct KmPartialData
{
	int32		vl_len_;
	uint8		version;
	uint8		metric;
	uint16		reserved;
	int32		k;
	int32		dim;
	int32		nfar;
	int32		pad;
	uint64		model_hash;
	int64		n_rows;
	int64		n_skipped;
	int64		nterms;			/* terms of all expansions */
} KmPartialData;

/* A kept row of the flat form: this, then dim floats, padded to 8. */
typedef struct KmFarData
{
	int32		label;
	float		w;
	double		cost;
	uint64		hash;
} KmFarData;

typedef struct KmPartialLayout
{
	int64		ncells;
	Size		counts;			/* offsets from the start */
	Size		nt;
	Size		terms;
	Size		far;
	Size		farsize;
	Size		total;
} KmPartialLayout;

#define PartialCountsOf(p, l)	((int64 *) ((char *) (p) + (l)->counts))
#define PartialNtOf(p, l)		((uint8 *) ((char *) (p) + (l)->nt))
#define PartialTermsOf(p, l)	((double *) ((char *) (p) + (l)->terms))
#define PartialFarOf(p, l, e)	((KmFarData *) ((char *) (p) + (l)->far + (Size) (e) * (l)->farsize))
#define FarVector(f)			((float *) ((char *) (f) + sizeof(KmFarData)))

/* cells: weights 0 .. k-1, inertia k .. 2k-1, sums 2k + j * dim + i */
#define CELL_WEIGHT(k, j)		(j)
#define CELL_INERTIA(k, j)		((k) + (j))
#define CELL_SUM(k, d, j, i)	(2 * (int64) (k) + (int64) (j) * (d) + (i))

static void
PartialLayout(int k, int dim, int nfar, int64 nterms, KmPartialLayout *l)
{
	l->ncells = 2 * (int64) k + (int64) k * dim;
	l->counts = MAXALIGN(sizeof(KmPartialData));
	l->nt = l->counts + sizeof(int64) * (Size) k;
	l->terms = l->nt + TYPEALIGN(8, (Size) l->ncells);
	l->far = l->terms + sizeof(double) * (Size) nterms;
	l->farsize = sizeof(KmFarData) + TYPEALIGN(8, sizeof(float) * (Size) dim);
	l->total = l->far + l->farsize * (Size) nfar;
}

/* ---- errors ---- */

static void
BadPartial(const char *fmt,...) pg_attribute_printf(1, 2) pg_attribute_noreturn();

static void
BadPartial(const char *fmt,...)
{
	va_list		ap;
	char		buf[512];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid kmeans_partial: %s", buf)));
}

/* Shape limits, checked before anything is allocated. */
static void
CheckShape(int64 k, int64 dim, int64 nfar, int64 nterms)
{
	if (k < 1 || k > PG_INT32_MAX)
		BadPartial("k must be at least 1, not " INT64_FORMAT, k);
	if (dim < 1 || dim > PG_INT32_MAX)
		BadPartial("dim must be at least 1, not " INT64_FORMAT, dim);
	if (k * (dim + 2) > KM_PARTIAL_MAX_CELLS)
		BadPartial("k * (dim + 2) must be at most " INT64_FORMAT ", not " INT64_FORMAT,
				   KM_PARTIAL_MAX_CELLS, k * (dim + 2));
	if (nfar < 0 || nfar > k)
		BadPartial("it keeps " INT64_FORMAT " rows for re-seeding, more than k (" INT64_FORMAT ")",
				   nfar, k);
	if (nterms < 0 || nterms > (int64) KM_XACC_MAXTERMS * k * (dim + 2))
		BadPartial("it has " INT64_FORMAT " terms of sums", nterms);
}

/* ---- building a partial ---- */

typedef struct KmFarRow
{
	int32		label;
	float		w;
	double		cost;
	uint64		hash;
	float	   *x;				/* dim values */
} KmFarRow;

typedef struct KmPartialBuild
{
	int			k;
	int			dim;
	km_metric	metric;
	uint64		model_hash;
	int64		n_rows;
	int64		n_skipped;
	int64	   *counts;
	int64		ncells;
	int64		cell;			/* next cell to emit */
	uint8	   *nt;
	double	   *terms;
	int64		nterms;
	int64		cap;
	int			nfar;
	KmFarRow   *far;			/* room for k */
} KmPartialBuild;

static void
BuildInit(KmPartialBuild *b, int k, int dim, km_metric metric, uint64 model_hash)
{
	CheckShape(k, dim, 0, 0);
	memset(b, 0, sizeof(*b));
	b->k = k;
	b->dim = dim;
	b->metric = metric;
	b->model_hash = model_hash;
	b->ncells = 2 * (int64) k + (int64) k * dim;
	b->counts = palloc0(sizeof(int64) * k);
	b->nt = palloc_extended((Size) b->ncells, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	b->cap = Max(b->ncells, 16);
	b->terms = palloc_extended(sizeof(double) * (Size) b->cap, MCXT_ALLOC_HUGE);
	b->far = palloc0(sizeof(KmFarRow) * k);
}

/* The next cell: the canonical expansion of acc's value (acc ends at zero). */
static void
BuildCell(KmPartialBuild *b, km_xacc *acc)
{
	double		out[KM_XACC_MAXTERMS];
	int			n;

	Assert(b->cell < b->ncells);
	n = km_xacc_emit(acc, out, KM_XACC_MAXTERMS);
	if (n < 0)
		BadPartial("a sum is beyond the range of double precision");
	if (b->nterms + n > b->cap)
	{
		b->cap = Max(b->cap * 2, b->nterms + n);
		b->terms = repalloc_huge(b->terms, sizeof(double) * (Size) b->cap);
	}
	memcpy(b->terms + b->nterms, out, sizeof(double) * n);
	b->nterms += n;
	b->nt[b->cell++] = (uint8) n;
	km_xacc_clear(acc);
}

static void
BuildFar(KmPartialBuild *b, int32 label, float w, double cost, uint64 hash, const float *x)
{
	KmFarRow   *f = &b->far[b->nfar++];

	Assert(b->nfar <= b->k);
	f->label = label;
	f->w = w;
	f->cost = cost;
	f->hash = hash;
	f->x = palloc(sizeof(float) * b->dim);
	memcpy(f->x, x, sizeof(float) * b->dim);
}

static KmPartialData *
BuildFinish(KmPartialBuild *b)
{
	KmPartialLayout l;
	KmPartialData *p;

	Assert(b->cell == b->ncells);
	PartialLayout(b->k, b->dim, b->nfar, b->nterms, &l);
	if (l.total > MaxAllocSize)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a kmeans_partial of %d clusters of %d values exceeds the 1 GB limit of a value",
						b->k, b->dim)));
	p = palloc0(l.total);
	SET_VARSIZE(p, l.total);
	p->version = KM_PARTIAL_VERSION;
	p->metric = (uint8) b->metric;
	p->k = b->k;
	p->dim = b->dim;
	p->nfar = b->nfar;
	p->model_hash = b->model_hash;
	p->n_rows = b->n_rows;
	p->n_skipped = b->n_skipped;
	p->nterms = b->nterms;
	memcpy(PartialCountsOf(p, &l), b->counts, sizeof(int64) * b->k);
	memcpy(PartialNtOf(p, &l), b->nt, (Size) b->ncells);
	memcpy(PartialTermsOf(p, &l), b->terms, sizeof(double) * (Size) b->nterms);
	for (int e = 0; e < b->nfar; e++)
	{
		KmFarData  *f = PartialFarOf(p, &l, e);

		f->label = b->far[e].label;
		f->w = b->far[e].w;
		f->cost = b->far[e].cost;
		f->hash = b->far[e].hash;
		memcpy(FarVector(f), b->far[e].x, sizeof(float) * b->dim);
	}
	return p;
}

/* Far rows in the order re-seeding takes them: farthest first, ties to the smaller hash. */
static int
FarCompare(const void *a, const void *b)
{
	const KmFarRow *x = (const KmFarRow *) a;
	const KmFarRow *y = (const KmFarRow *) b;

	if (x->cost != y->cost)
		return x->cost > y->cost ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return 0;
}

/* ---- the model a partial belongs to ---- */

/*
 * A hash of what assignment depends on: k, dim, metric and the centroids'
 * bits.  A partial carries its model's, and kmeans_step and kmeans_merge
 * refuse partials of other models.
 */
uint64
KmModelHash(const KmModel *model)
{
	uint64		h = km_row_hash(model->centroids, model->k * model->dim, 0.0f);

	return km_mix64(h ^ ((uint64) model->k << 40) ^ ((uint64) model->dim << 8) ^
					(uint64) model->metric);
}

/* ---- checking a flat partial ---- */

/*
 * Every field of p (len bytes, from outside): the layout, each expansion
 * canonical and finite, counts that add up, sums that match the counts,
 * weights and inertia not negative, the kept rows consistent.
 */
void
KmPartialCheck(const KmPartialData *p, Size len)
{
	KmPartialLayout l;
	const int64 *counts;
	const uint8 *nt;
	const double *terms;
	int64		total = 0;
	int64		at = 0;
	int			k,
				dim;
	int			nempty = 0;
	km_xacc		acc;
	double	   *weight;
	bool	   *empty;

	if (len < sizeof(KmPartialData))
		BadPartial("it is truncated");
	if (p->version != KM_PARTIAL_VERSION)
		BadPartial("unknown version %d", p->version);
	if (p->metric != KM_METRIC_L2 && p->metric != KM_METRIC_COSINE)
		BadPartial("unknown metric %d", p->metric);
	CheckShape(p->k, p->dim, p->nfar, p->nterms);
	k = p->k;
	dim = p->dim;
	PartialLayout(k, dim, p->nfar, p->nterms, &l);
	if (l.total != len)
		BadPartial("it has %zu bytes, its fields say %zu", len, l.total);
	if (p->n_rows < 0 || p->n_skipped < 0)
		BadPartial("negative row count");

	counts = PartialCountsOf(p, &l);
	nt = PartialNtOf(p, &l);
	terms = PartialTermsOf(p, &l);
	for (int j = 0; j < k; j++)
	{
		if (counts[j] < 0)
			BadPartial("cluster %d has a negative row count", j);
		if (pg_add_s64_overflow(total, counts[j], &total))
			BadPartial("the row counts overflow");
	}
	if (total != p->n_rows)
		BadPartial("the clusters' row counts add up to " INT64_FORMAT ", not to the " INT64_FORMAT " rows",
				   total, p->n_rows);

	/* every expansion canonical: what the exact sum of its terms emits */
	weight = palloc(sizeof(double) * k);
	empty = palloc(sizeof(bool) * k);
	km_xacc_init(&acc);
	for (int64 c = 0; c < l.ncells; c++)
	{
		double		out[KM_XACC_MAXTERMS];
		int			n = nt[c];
		int			m;

		if (n > KM_XACC_MAXTERMS || at + n > p->nterms)
			BadPartial("sum %ld has %d terms", (long) c, n);
		for (int t = 0; t < n; t++)
		{
			if (!isfinite(terms[at + t]) || terms[at + t] == 0.0)
				BadPartial("sum %ld has a term that is zero, NaN or infinite", (long) c);
			km_xacc_add(&acc, terms[at + t]);
		}
		m = km_xacc_emit(&acc, out, KM_XACC_MAXTERMS);
		km_xacc_clear(&acc);
		if (m != n || memcmp(out, terms + at, sizeof(double) * n) != 0)
			BadPartial("sum %ld is not written as its canonical expansion", (long) c);

		if (c < 2 * k)
		{
			int			j = (int) (c < k ? c : c - k);

			if (n > 0 && terms[at] < 0.0)
				BadPartial("cluster %d has a negative %s", j, c < k ? "weight" : "inertia");
			if (n > 0 && counts[j] == 0)
				BadPartial("cluster %d has no rows but a %s", j, c < k ? "weight" : "inertia");
			if (c < k)
			{
				weight[j] = n > 0 ? terms[at] : 0.0;
				empty[j] = n == 0;
				nempty += n == 0;
			}
		}
		else
		{
			int			j = (int) ((c - 2 * k) / dim);

			if (n > 0 && counts[j] == 0)
				BadPartial("cluster %d has no rows but nonzero sums", j);
			/* unit vectors: no sum exceeds the weight */
			if (p->metric == KM_METRIC_COSINE && n > 0 && fabs(terms[at]) > weight[j])
				BadPartial("cluster %d has a sum larger than its weight, impossible for metric cosine",
						   j);
		}
		at += n;
	}
	if (at != p->nterms)
		BadPartial("it has " INT64_FORMAT " terms, its sums use " INT64_FORMAT, p->nterms, at);

	/* the kept rows */
	if (p->nfar > nempty || p->nfar > p->n_rows)
		BadPartial("it keeps %d rows for re-seeding, but only %d clusters are empty",
				   p->nfar, nempty);
	for (int e = 0; e < p->nfar; e++)
	{
		const KmFarData *f = PartialFarOf(p, &l, e);
		const float *x = FarVector(f);
		bool		zero = true;

		if (f->label < 0 || f->label >= k || counts[f->label] == 0)
			BadPartial("kept row %d belongs to cluster %d, which has no rows", e, f->label);
		if (!isfinite(f->w) || f->w < 0.0f || !isfinite(f->cost) || f->cost < 0.0)
			BadPartial("kept row %d has an invalid weight or cost", e);
		for (int i = 0; i < dim; i++)
		{
			if (!isfinite(x[i]))
				BadPartial("kept row %d has NaN or infinite values", e);
			zero = zero && x[i] == 0.0f;
		}
		if (zero && p->metric == KM_METRIC_COSINE)
			BadPartial("kept row %d is a zero vector, which metric cosine rejects", e);
		if (f->hash != km_row_hash(x, dim, f->w))
			BadPartial("kept row %d has the wrong hash", e);
		if (e > 0)
		{
			const KmFarData *g = PartialFarOf(p, &l, e - 1);

			if (g->cost < f->cost || (g->cost == f->cost && g->hash > f->hash))
				BadPartial("kept rows are not farthest first");
		}
	}
	pfree(weight);
	pfree(empty);
}

/* Rows a partial summed. */
int64
KmPartialRows(const KmPartialData *p)
{
	return p->n_rows;
}

/* A partial argument, detoasted (aligned) and checked. */
static KmPartialData *
PartialArg(FunctionCallInfo fcinfo, int argno)
{
	KmPartialData *p = (KmPartialData *) PG_DETOAST_DATUM(PG_GETARG_DATUM(argno));

	KmPartialCheck(p, VARSIZE(p));
	return p;
}

/* ---- merging ---- */

/*
 * a + b, exactly: counts and sums add, the kept rows are the union's
 * farthest, as many as clusters are left empty.  Both must belong to the
 * same model.
 */
KmPartialData *
KmPartialMerge(const KmPartialData *a, const KmPartialData *b)
{
	KmPartialLayout la,
				lb;
	KmPartialBuild bd;
	const double *ta,
			   *tb;
	const uint8 *na,
			   *nb;
	int64		ia = 0,
				ib = 0;
	km_xacc		acc;
	int			nempty = 0;
	KmFarRow   *all;
	int			nall = 0;

	if (a->k != b->k || a->dim != b->dim || a->metric != b->metric ||
		a->model_hash != b->model_hash)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot merge kmeans_partial values computed for different models"),
				 errdetail("One has %d clusters of %d values, the other %d of %d, or other centroids.",
						   a->k, a->dim, b->k, b->dim)));
	PartialLayout(a->k, a->dim, a->nfar, a->nterms, &la);
	PartialLayout(b->k, b->dim, b->nfar, b->nterms, &lb);
	BuildInit(&bd, a->k, a->dim, (km_metric) a->metric, a->model_hash);
	bd.n_rows = a->n_rows + b->n_rows;
	bd.n_skipped = a->n_skipped + b->n_skipped;
	for (int j = 0; j < a->k; j++)
		bd.counts[j] = PartialCountsOf(a, &la)[j] + PartialCountsOf(b, &lb)[j];

	ta = PartialTermsOf(a, &la);
	tb = PartialTermsOf(b, &lb);
	na = PartialNtOf(a, &la);
	nb = PartialNtOf(b, &lb);
	km_xacc_init(&acc);
	for (int64 c = 0; c < la.ncells; c++)
	{
		for (int t = 0; t < na[c]; t++)
			km_xacc_add(&acc, ta[ia++]);
		for (int t = 0; t < nb[c]; t++)
			km_xacc_add(&acc, tb[ib++]);
		if (c < a->k && km_xacc_is_zero(&acc))
			nempty++;
		BuildCell(&bd, &acc);
		if ((c & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
	}

	/* the farthest rows of both, as many as clusters are still empty */
	all = palloc(sizeof(KmFarRow) * (a->nfar + b->nfar + 1));
	for (int e = 0; e < a->nfar; e++, nall++)
	{
		const KmFarData *f = PartialFarOf(a, &la, e);

		all[nall] = (KmFarRow) {f->label, f->w, f->cost, f->hash, FarVector((KmFarData *) f)};
	}
	for (int e = 0; e < b->nfar; e++, nall++)
	{
		const KmFarData *f = PartialFarOf(b, &lb, e);

		all[nall] = (KmFarRow) {f->label, f->w, f->cost, f->hash, FarVector((KmFarData *) f)};
	}
	qsort(all, nall, sizeof(KmFarRow), FarCompare);
	for (int e = 0; e < nall && e < nempty; e++)
		BuildFar(&bd, all[e].label, all[e].w, all[e].cost, all[e].hash, all[e].x);
	return BuildFinish(&bd);
}

/* ---- a partial from rows ---- */

/*
 * The partial of the rows of data (their bounds xs) for model: the CPU
 * engine's map step in exact mode, its level sums turned into canonical
 * expansions.  labels (n, or NULL) receives each row's cluster.
 */
KmPartialData *
KmPartialFromRows(const KmModel *model, uint64 model_hash, const km_data *data,
				  const km_xstats *xs, bool weighted, int64 n_skipped, int32 *labels)
{
	int			k = model->k;
	int			dim = model->dim;
	Size		kd = (Size) k * dim;
	km_xlevels	xl,
				wl;
	km_partial	part;
	km_xacc		acc;
	KmPartialBuild bd;
	int64		nrows = data->n;

	BuildInit(&bd, k, dim, model->metric, model_hash);
	bd.n_skipped = n_skipped;
	bd.n_rows = nrows;
	if (nrows == 0)
	{
		km_xacc_init(&acc);
		for (int64 c = 0; c < bd.ncells; c++)
			BuildCell(&bd, &acc);
		return BuildFinish(&bd);
	}

	km_xlevels_for(xs, nrows, weighted, !weighted, &xl, &wl);
	memset(&part, 0, sizeof(part));
	part.sums = palloc_extended(sizeof(double) * kd, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	part.weights = palloc0(sizeof(double) * k);
	part.counts = palloc0(sizeof(int64) * k);
	part.inertia = palloc0(sizeof(double) * k);
	part.stats = xs;
	part.xsums = palloc_extended(sizeof(double) * kd * xl.n, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	part.xweights = palloc0(sizeof(double) * k * wl.n);
	part.xinertia = palloc_extended(sizeof(km_xacc) * k, MCXT_ALLOC_HUGE);
	for (int j = 0; j < k; j++)
		km_xacc_init(&part.xinertia[j]);
	part.labels = labels;
	part.far = palloc(sizeof(km_far_row) * k);
	KmRunMap(data, model->centroids, k, model->metric, &part);

	memcpy(bd.counts, part.counts, sizeof(int64) * k);
	km_xacc_init(&acc);
	for (int j = 0; j < k; j++)
	{
		for (int l = 0; l < wl.n; l++)
			km_xacc_add(&acc, part.xweights[(Size) l * k + j]);
		BuildCell(&bd, &acc);
	}
	for (int j = 0; j < k; j++)
		BuildCell(&bd, &part.xinertia[j]);
	for (Size i = 0; i < kd; i++)
	{
		for (int l = 0; l < xl.n; l++)
			km_xacc_add(&acc, part.xsums[(Size) l * kd + i]);
		BuildCell(&bd, &acc);
	}
	for (int e = 0; e < part.nfar; e++)
	{
		const km_far_row *f = &part.far[e];
		int64		row = f->row;
		const float *x = NULL;

		for (int c = 0; c < data->nchunks; c++)
		{
			if (row < data->chunks[c].n)
			{
				x = data->chunks[c].x + (Size) row * dim;
				break;
			}
			row -= data->chunks[c].n;
		}
		Assert(x != NULL);
		BuildFar(&bd, f->label, f->w, f->cost, f->hash, x);
	}
	pfree(part.sums);
	pfree(part.xsums);
	pfree(part.xinertia);
	return BuildFinish(&bd);
}

/* ---- text form ---- */

static void
AppendDouble(StringInfo s, double v)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];

	double_to_shortest_decimal_buf(v, buf);
	appendStringInfoString(s, buf);
}

static void
AppendFloat(StringInfo s, float v)
{
	char		buf[FLOAT_SHORTEST_DECIMAL_LEN];

	float_to_shortest_decimal_buf(v, buf);
	appendStringInfoString(s, buf);
}

/* One expansion as a JSON array; *at advances over its terms. */
static void
AppendCell(StringInfo s, const double *terms, int n, int64 *at)
{
	appendStringInfoChar(s, '[');
	for (int t = 0; t < n; t++)
	{
		if (t > 0)
			appendStringInfoChar(s, ',');
		AppendDouble(s, terms[(*at)++]);
	}
	appendStringInfoChar(s, ']');
}

PG_FUNCTION_INFO_V1(kmeans_partial_out);

/*
 * kmeans_partial_out: a JSON object.  Sums are written as arrays of their
 * canonical expansion's terms, each in the shortest decimal form that
 * reads back to the same double, so the text form loses nothing.
 */
Datum
kmeans_partial_out(PG_FUNCTION_ARGS)
{
	KmPartialData *p = PartialArg(fcinfo, 0);
	KmPartialLayout l;
	StringInfoData s;
	const int64 *counts;
	const uint8 *nt;
	const double *terms;
	int64		at;
	int64		c;

	PartialLayout(p->k, p->dim, p->nfar, p->nterms, &l);
	counts = PartialCountsOf(p, &l);
	nt = PartialNtOf(p, &l);
	terms = PartialTermsOf(p, &l);

	initStringInfo(&s);
	appendStringInfo(&s, "{\"version\": %d, \"k\": %d, \"dim\": %d, \"metric\": \"%s\", "
					 "\"model\": \"%016llx\", \"rows\": " INT64_FORMAT ", \"skipped\": " INT64_FORMAT
					 ", \"counts\": [",
					 p->version, p->k, p->dim, KmMetricName((km_metric) p->metric),
					 (unsigned long long) p->model_hash, p->n_rows, p->n_skipped);
	for (int j = 0; j < p->k; j++)
		appendStringInfo(&s, "%s" INT64_FORMAT, j > 0 ? ", " : "", counts[j]);

	at = 0;
	c = 0;
	appendStringInfoString(&s, "], \"weights\": [");
	for (int j = 0; j < p->k; j++, c++)
	{
		if (j > 0)
			appendStringInfoString(&s, ", ");
		AppendCell(&s, terms, nt[c], &at);
	}
	appendStringInfoString(&s, "], \"inertia\": [");
	for (int j = 0; j < p->k; j++, c++)
	{
		if (j > 0)
			appendStringInfoString(&s, ", ");
		AppendCell(&s, terms, nt[c], &at);
	}
	appendStringInfoString(&s, "], \"sums\": [");
	for (int j = 0; j < p->k; j++)
	{
		appendStringInfoString(&s, j > 0 ? ", [" : "[");
		for (int i = 0; i < p->dim; i++, c++)
		{
			if (i > 0)
				appendStringInfoChar(&s, ',');
			AppendCell(&s, terms, nt[c], &at);
		}
		appendStringInfoChar(&s, ']');
	}
	appendStringInfoString(&s, "], \"far\": [");
	for (int e = 0; e < p->nfar; e++)
	{
		const KmFarData *f = PartialFarOf(p, &l, e);

		appendStringInfo(&s, "%s{\"cluster\": %d, \"weight\": ", e > 0 ? ", " : "", f->label);
		AppendFloat(&s, f->w);
		appendStringInfoString(&s, ", \"cost\": ");
		AppendDouble(&s, f->cost);
		appendStringInfo(&s, ", \"hash\": \"%016llx\", \"vector\": [",
						 (unsigned long long) f->hash);
		for (int i = 0; i < p->dim; i++)
		{
			if (i > 0)
				appendStringInfoChar(&s, ',');
			AppendFloat(&s, FarVector(f)[i]);
		}
		appendStringInfoString(&s, "]}");
	}
	appendStringInfoString(&s, "]}");
	PG_RETURN_CSTRING(s.data);
}

static void
BadText(const char *fmt,...) pg_attribute_printf(1, 2) pg_attribute_noreturn();

static void
BadText(const char *fmt,...)
{
	va_list		ap;
	char		buf[512];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type kmeans_partial: %s", buf)));
}

/* The value of key in object obj, which must be there. */
static JsonbValue *
JsonField(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;
	JsonbValue *v;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	v = findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
	if (v == NULL)
		BadText("key \"%s\" is missing", key);
	return v;
}

/* An array's container and length (len < 0: any length). */
static JsonbContainer *
JsonArray(JsonbValue *v, const char *what, int64 len)
{
	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
		JsonContainerIsScalar(v->val.binary.data))
		BadText("%s must be an array", what);
	if (len >= 0 && JsonContainerSize(v->val.binary.data) != len)
		BadText("%s must have " INT64_FORMAT " elements, not %d", what, len,
				(int) JsonContainerSize(v->val.binary.data));
	return v->val.binary.data;
}

static double
JsonDouble(JsonbValue *v, const char *what)
{
	char	   *text;
	char	   *end;
	double		x;

	if (v->type != jbvNumeric)
		BadText("%s must be a number", what);
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	errno = 0;
	x = strtod(text, &end);
	if (*end != '\0' || !isfinite(x))
		BadText("%s has a value out of range for double precision", what);
	return x;
}

static int64
JsonInt(JsonbValue *v, const char *what, int64 min, int64 max)
{
	char	   *text;
	char	   *end;
	long long	x;

	if (v->type != jbvNumeric)
		BadText("%s must be an integer", what);
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	errno = 0;
	x = strtoll(text, &end, 10);
	if (*end != '\0' || errno != 0 || x < min || x > max)
		BadText("%s must be an integer between " INT64_FORMAT " and " INT64_FORMAT ", not %s",
				what, min, max, text);
	return (int64) x;
}

static uint64
JsonHex(JsonbValue *v, const char *what)
{
	char		buf[17];
	char	   *end;
	uint64		x;

	if (v->type != jbvString || v->val.string.len != 16)
		BadText("%s must be a string of 16 hexadecimal digits", what);
	memcpy(buf, v->val.string.val, 16);
	buf[16] = '\0';
	for (int i = 0; i < 16; i++)
		if (!isxdigit((unsigned char) buf[i]))
			BadText("%s must be a string of 16 hexadecimal digits", what);
	x = strtoull(buf, &end, 16);
	return x;
}

/* One expansion from a JSON array of numbers: its exact sum into acc. */
static void
JsonCell(JsonbValue *v, const char *what, km_xacc *acc)
{
	JsonbContainer *arr = JsonArray(v, what, -1);
	int			n = JsonContainerSize(arr);

	if (n > KM_XACC_MAXTERMS)
		BadText("%s has more than %d terms", what, KM_XACC_MAXTERMS);
	for (int t = 0; t < n; t++)
		km_xacc_add(acc, JsonDouble(getIthJsonbValueFromContainer(arr, t), what));
}

PG_FUNCTION_INFO_V1(kmeans_partial_in);

/*
 * kmeans_partial_in: the JSON kmeans_partial_out writes.  The sums' terms
 * may be any finite numbers (they are added exactly and written back in
 * canonical form); everything is then checked as for any partial.
 */
Datum
kmeans_partial_in(PG_FUNCTION_ARGS)
{
	char	   *str = PG_GETARG_CSTRING(0);
	Jsonb	   *jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(str)));
	JsonbContainer *obj = &jb->root;
	JsonbContainer *arr;
	JsonbValue *v;
	KmPartialBuild bd;
	km_xacc		acc;
	char	   *metric;
	int64		k,
				dim,
				nfar;
	static const char *const keys[] = {"version", "k", "dim", "metric", "model", "rows",
	"skipped", "counts", "weights", "inertia", "sums", "far"};
	KmPartialData *p;

	if (!JB_ROOT_IS_OBJECT(jb))
		BadText("it must be a JSON object");
	if (JsonContainerSize(obj) != lengthof(keys))
		BadText("it must have exactly the keys version, k, dim, metric, model, rows, skipped, counts, weights, inertia, sums and far");
	for (int i = 0; i < lengthof(keys); i++)
		(void) JsonField(obj, keys[i]);

	if (JsonInt(JsonField(obj, "version"), "version", 0, 255) != KM_PARTIAL_VERSION)
		BadText("unknown version");
	k = JsonInt(JsonField(obj, "k"), "k", 1, PG_INT32_MAX);
	dim = JsonInt(JsonField(obj, "dim"), "dim", 1, PG_INT32_MAX);
	v = JsonField(obj, "far");
	arr = JsonArray(v, "far", -1);
	nfar = JsonContainerSize(arr);
	CheckShape(k, dim, nfar, 0);
	v = JsonField(obj, "metric");
	if (v->type != jbvString)
		BadText("metric must be a string");
	metric = pnstrdup(v->val.string.val, v->val.string.len);
	if (strcmp(metric, "l2") != 0 && strcmp(metric, "cosine") != 0)
		BadText("unknown metric \"%s\"", metric);

	BuildInit(&bd, (int) k, (int) dim,
			  strcmp(metric, "cosine") == 0 ? KM_METRIC_COSINE : KM_METRIC_L2,
			  JsonHex(JsonField(obj, "model"), "model"));
	bd.n_rows = JsonInt(JsonField(obj, "rows"), "rows", 0, PG_INT64_MAX);
	bd.n_skipped = JsonInt(JsonField(obj, "skipped"), "skipped", 0, PG_INT64_MAX);
	arr = JsonArray(JsonField(obj, "counts"), "counts", k);
	for (int j = 0; j < k; j++)
		bd.counts[j] = JsonInt(getIthJsonbValueFromContainer(arr, j), "counts", 0, PG_INT64_MAX);

	km_xacc_init(&acc);
	arr = JsonArray(JsonField(obj, "weights"), "weights", k);
	for (int j = 0; j < k; j++)
	{
		JsonCell(getIthJsonbValueFromContainer(arr, j), "weights", &acc);
		BuildCell(&bd, &acc);
	}
	arr = JsonArray(JsonField(obj, "inertia"), "inertia", k);
	for (int j = 0; j < k; j++)
	{
		JsonCell(getIthJsonbValueFromContainer(arr, j), "inertia", &acc);
		BuildCell(&bd, &acc);
	}
	arr = JsonArray(JsonField(obj, "sums"), "sums", k);
	for (int j = 0; j < k; j++)
	{
		JsonbContainer *row = JsonArray(getIthJsonbValueFromContainer(arr, j), "sums", dim);

		for (int i = 0; i < dim; i++)
		{
			JsonCell(getIthJsonbValueFromContainer(row, i), "sums", &acc);
			BuildCell(&bd, &acc);
		}
		CHECK_FOR_INTERRUPTS();
	}
	arr = JsonArray(JsonField(obj, "far"), "far", nfar);
	for (int e = 0; e < nfar; e++)
	{
		JsonbValue *row = getIthJsonbValueFromContainer(arr, e);
		JsonbContainer *vec;
		float	   *x = palloc(sizeof(float) * dim);
		double		w;

		if (row->type != jbvBinary || !JsonContainerIsObject(row->val.binary.data) ||
			JsonContainerSize(row->val.binary.data) != 5)
			BadText("far must hold objects with the keys cluster, weight, cost, hash and vector");
		vec = JsonArray(JsonField(row->val.binary.data, "vector"), "vector", dim);
		for (int i = 0; i < dim; i++)
		{
			double		xi = JsonDouble(getIthJsonbValueFromContainer(vec, i), "vector");

			x[i] = (float) xi;
			if (!isfinite(x[i]))
				BadText("vector value %g is out of range for type real", xi);
		}
		w = JsonDouble(JsonField(row->val.binary.data, "weight"), "weight");
		if (!isfinite((float) w))
			BadText("weight %g is out of range for type real", w);
		BuildFar(&bd,
				 (int32) JsonInt(JsonField(row->val.binary.data, "cluster"), "cluster", 0, k - 1),
				 (float) w, JsonDouble(JsonField(row->val.binary.data, "cost"), "cost"),
				 JsonHex(JsonField(row->val.binary.data, "hash"), "hash"), x);
	}
	p = BuildFinish(&bd);
	KmPartialCheck(p, VARSIZE(p));
	PG_RETURN_POINTER(p);
}

/* ---- binary form ---- */

PG_FUNCTION_INFO_V1(kmeans_partial_send);

/*
 * kmeans_partial_send: version, metric, k, dim, model hash, rows, skipped,
 * counts, then every cell as a term count and its terms, then the kept
 * rows; doubles and floats bit for bit.
 */
Datum
kmeans_partial_send(PG_FUNCTION_ARGS)
{
	KmPartialData *p = PartialArg(fcinfo, 0);
	KmPartialLayout l;
	StringInfoData buf;
	const uint8 *nt;
	const double *terms;
	int64		at = 0;

	PartialLayout(p->k, p->dim, p->nfar, p->nterms, &l);
	nt = PartialNtOf(p, &l);
	terms = PartialTermsOf(p, &l);
	pq_begintypsend(&buf);
	pq_sendbyte(&buf, p->version);
	pq_sendbyte(&buf, p->metric);
	pq_sendint32(&buf, p->k);
	pq_sendint32(&buf, p->dim);
	pq_sendint64(&buf, (int64) p->model_hash);
	pq_sendint64(&buf, p->n_rows);
	pq_sendint64(&buf, p->n_skipped);
	for (int j = 0; j < p->k; j++)
		pq_sendint64(&buf, PartialCountsOf(p, &l)[j]);
	for (int64 c = 0; c < l.ncells; c++)
	{
		pq_sendbyte(&buf, nt[c]);
		for (int t = 0; t < nt[c]; t++)
			pq_sendfloat8(&buf, terms[at++]);
	}
	pq_sendint32(&buf, p->nfar);
	for (int e = 0; e < p->nfar; e++)
	{
		const KmFarData *f = PartialFarOf(p, &l, e);

		pq_sendint32(&buf, f->label);
		pq_sendfloat4(&buf, f->w);
		pq_sendfloat8(&buf, f->cost);
		pq_sendint64(&buf, (int64) f->hash);
		for (int i = 0; i < p->dim; i++)
			pq_sendfloat4(&buf, FarVector(f)[i]);
	}
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

PG_FUNCTION_INFO_V1(kmeans_partial_recv);

/* kmeans_partial_recv: what kmeans_partial_send writes, checked. */
Datum
kmeans_partial_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	KmPartialBuild bd;
	km_xacc		acc;
	int			version,
				metric;
	int64		k,
				dim,
				nfar;
	uint64		hash;
	KmPartialData *p;

	version = pq_getmsgbyte(buf);
	metric = pq_getmsgbyte(buf);
	k = (int32) pq_getmsgint(buf, 4);
	dim = (int32) pq_getmsgint(buf, 4);
	if (version != KM_PARTIAL_VERSION)
		BadPartial("unknown version %d", version);
	if (metric != KM_METRIC_L2 && metric != KM_METRIC_COSINE)
		BadPartial("unknown metric %d", metric);
	CheckShape(k, dim, 0, 0);
	/* no more cells than the message could describe (one byte each) */
	if (2 * k + k * dim > buf->len - buf->cursor)
		BadPartial("the message is too short for %ld clusters of %ld values", (long) k, (long) dim);
	hash = (uint64) pq_getmsgint64(buf);
	BuildInit(&bd, (int) k, (int) dim, (km_metric) metric, hash);
	bd.n_rows = pq_getmsgint64(buf);
	bd.n_skipped = pq_getmsgint64(buf);
	for (int j = 0; j < k; j++)
		bd.counts[j] = pq_getmsgint64(buf);
	km_xacc_init(&acc);
	for (int64 c = 0; c < bd.ncells; c++)
	{
		int			n = pq_getmsgbyte(buf);

		if (n > KM_XACC_MAXTERMS)
			BadPartial("sum %ld has %d terms", (long) c, n);
		for (int t = 0; t < n; t++)
		{
			double		x = pq_getmsgfloat8(buf);

			if (!isfinite(x))
				BadPartial("sum %ld has a NaN or infinite term", (long) c);
			km_xacc_add(&acc, x);
		}
		BuildCell(&bd, &acc);
	}
	nfar = (int32) pq_getmsgint(buf, 4);
	CheckShape(k, dim, nfar, 0);
	for (int e = 0; e < nfar; e++)
	{
		int32		label = (int32) pq_getmsgint(buf, 4);
		float		w = pq_getmsgfloat4(buf);
		double		cost = pq_getmsgfloat8(buf);
		uint64		h = (uint64) pq_getmsgint64(buf);
		float	   *x = palloc(sizeof(float) * dim);

		for (int i = 0; i < dim; i++)
			x[i] = pq_getmsgfloat4(buf);
		if (label < 0 || label >= k)
			BadPartial("kept row %d belongs to cluster %d, not one of the %ld", e, label, (long) k);
		BuildFar(&bd, label, w, cost, h, x);
	}
	if (buf->cursor != buf->len)
		BadPartial("%d bytes are left over", buf->len - buf->cursor);
	p = BuildFinish(&bd);
	KmPartialCheck(p, VARSIZE(p));
	PG_RETURN_POINTER(p);
}

/* ---- the aggregate kmeans_partial(vec, model) ---- */

typedef struct KmPartialState
{
	MemoryContext aggcontext;
	MemoryContext rowcontext;	/* pending rows, reset after each batch */
	bool		have_model;
	KmModel		model;
	uint64		model_hash;
	Pointer		model_seen;		/* the last model argument checked */
	KmMatrix	rows;			/* rows not mapped yet */
	km_xstats	xs;				/* their bounds */
	int64		n_skipped;		/* NULL vectors not counted in acc yet */
	KmPartialData *acc;			/* what was mapped so far */
} KmPartialState;

static MemoryContext
PartialAggContext(FunctionCallInfo fcinfo, const char *func)
{
	MemoryContext aggcontext;

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "%s called in non-aggregate context", func);
	return aggcontext;
}

static KmPartialState *
NewPartialState(MemoryContext aggcontext)
{
	KmPartialState *st = MemoryContextAllocZero(aggcontext, sizeof(KmPartialState));

	st->aggcontext = aggcontext;
	st->rowcontext = AllocSetContextCreate(aggcontext, "kmeans_partial rows",
										   ALLOCSET_DEFAULT_SIZES);
	km_xstats_init(&st->xs);
	return st;
}

/* Map the pending rows into st->acc. */
static void
FlushRows(KmPartialState *st)
{
	MemoryContext old;
	km_data		data;
	KmPartialData *p;

	if (st->rows.n == 0 && st->acc != NULL && st->n_skipped == 0)
		return;
	old = MemoryContextSwitchTo(st->aggcontext);
	data = KmMatrixData(&st->rows);
	p = KmPartialFromRows(&st->model, st->model_hash, &data, &st->xs, false,
						  st->n_skipped, NULL);
	if (st->acc != NULL)
	{
		KmPartialData *merged = KmPartialMerge(st->acc, p);

		pfree(st->acc);
		pfree(p);
		p = merged;
	}
	st->acc = p;
	st->n_skipped = 0;
	MemoryContextSwitchTo(old);
	MemoryContextReset(st->rowcontext);
	KmMatrixInit(&st->rows, st->rowcontext, false, st->model.metric == KM_METRIC_COSINE);
	KmMatrixSetStorage(&st->rows, st->model.storage);
	km_xstats_init(&st->xs);
}

PG_FUNCTION_INFO_V1(kmeans_partial_accum);

/*
 * kmeans_partial_accum(state, vec real[] | float8[], model): add one row;
 * every row of a group must come with the same model.
 */
Datum
kmeans_partial_accum(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_partial_accum");
	KmPartialState *st = PG_ARGISNULL(0) ? NULL : (KmPartialState *) PG_GETARG_POINTER(0);
	Pointer		model_arg;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("model must not be NULL")));
	model_arg = PG_GETARG_POINTER(2);
	if (st == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(aggcontext);

		st = NewPartialState(aggcontext);
		KmModelRead(PG_GETARG_HEAPTUPLEHEADER(2), &st->model);
		st->have_model = true;
		st->model_hash = KmModelHash(&st->model);
		st->model_seen = model_arg;
		KmMatrixInit(&st->rows, st->rowcontext, false, st->model.metric == KM_METRIC_COSINE);
		KmMatrixSetStorage(&st->rows, st->model.storage);
		MemoryContextSwitchTo(old);
	}
	else if (model_arg != st->model_seen)
	{
		KmModel		m;

		KmModelRead(PG_GETARG_HEAPTUPLEHEADER(2), &m);
		if (!st->have_model || KmModelHash(&m) != st->model_hash)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("model must be the same for every row of a kmeans_partial group")));
		st->model_seen = model_arg;
	}

	if (PG_ARGISNULL(1))
		st->n_skipped++;
	else
	{
		ArrayType  *vec = PG_GETARG_ARRAYTYPE_P(1);
		int			dim = KmVectorDim(vec);
		const float *x;

		if (dim != st->model.dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("vector has %d values, but the model's centroids have %d",
							dim, st->model.dim)));
		KmMatrixAppendVector(&st->rows, vec, 1.0f);
		x = st->rows.chunks[st->rows.nchunks - 1].x +
			(Size) (st->rows.chunks[st->rows.nchunks - 1].n - 1) * dim;
		KmStoreFence();
		km_xstats_row(&st->xs, x, dim, 1.0f, 0, st->model.metric == KM_METRIC_COSINE,
					  st->model.metric == KM_METRIC_COSINE ? km_exact_norm(x, dim) : 0.0);
		if (st->rows.bytes >= KM_PARTIAL_BATCH_BYTES)
			FlushRows(st);
	}
	PG_RETURN_POINTER(st);
}

/* The state's partial so far (rows mapped), or an empty one. */
static KmPartialData *
StatePartial(KmPartialState *st)
{
	if (st->have_model)
		FlushRows(st);
	return st->acc;
}

PG_FUNCTION_INFO_V1(kmeans_partial_combine);

/* kmeans_partial_combine(state, state): both states' partials merged. */
Datum
kmeans_partial_combine(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_partial_combine");
	KmPartialState *a = PG_ARGISNULL(0) ? NULL : (KmPartialState *) PG_GETARG_POINTER(0);
	KmPartialState *b = PG_ARGISNULL(1) ? NULL : (KmPartialState *) PG_GETARG_POINTER(1);
	KmPartialData *pb;
	MemoryContext old;

	if (b == NULL)
	{
		if (a == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(a);
	}
	pb = StatePartial(b);
	old = MemoryContextSwitchTo(aggcontext);
	if (a == NULL)
	{
		a = NewPartialState(aggcontext);
		a->acc = (KmPartialData *) PG_DETOAST_DATUM_COPY(PointerGetDatum(pb));
	}
	else
	{
		KmPartialData *pa = StatePartial(a);

		a->acc = KmPartialMerge(pa, pb);
		pfree(pa);
	}
	MemoryContextSwitchTo(old);
	PG_RETURN_POINTER(a);
}

PG_FUNCTION_INFO_V1(kmeans_partial_serialize);

/* kmeans_partial_serialize(state) -> bytea: the partial's flat form. */
Datum
kmeans_partial_serialize(PG_FUNCTION_ARGS)
{
	KmPartialState *st = (KmPartialState *) PG_GETARG_POINTER(0);
	KmPartialData *p;
	bytea	   *out;

	PartialAggContext(fcinfo, "kmeans_partial_serialize");
	p = StatePartial(st);
	out = palloc(VARSIZE(p));
	memcpy(out, p, VARSIZE(p));
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(kmeans_partial_deserialize);

/* kmeans_partial_deserialize(bytea, internal) -> state, checked. */
Datum
kmeans_partial_deserialize(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_partial_deserialize");
	bytea	   *in = PG_GETARG_BYTEA_P(0);
	KmPartialState *st = NewPartialState(aggcontext);
	KmPartialData *p = MemoryContextAlloc(aggcontext, VARSIZE(in));

	memcpy(p, in, VARSIZE(in));
	KmPartialCheck(p, VARSIZE(p));
	st->acc = p;
	PG_RETURN_POINTER(st);
}

PG_FUNCTION_INFO_V1(kmeans_partial_final);

/* kmeans_partial_final(state) -> kmeans_partial (maps pending rows). */
Datum
kmeans_partial_final(PG_FUNCTION_ARGS)
{
	KmPartialState *st;

	PartialAggContext(fcinfo, "kmeans_partial_final");
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	st = (KmPartialState *) PG_GETARG_POINTER(0);
	PG_RETURN_POINTER(StatePartial(st));
}

/* ---- the aggregate kmeans_merge(partial) ---- */

PG_FUNCTION_INFO_V1(kmeans_merge_accum);

/* kmeans_merge_accum(state, partial): state + partial, exactly. */
Datum
kmeans_merge_accum(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_merge_accum");
	KmPartialData *acc = PG_ARGISNULL(0) ? NULL : (KmPartialData *) PG_GETARG_POINTER(0);
	KmPartialData *p;
	KmPartialData *merged;
	MemoryContext old;

	if (PG_ARGISNULL(1))
	{
		if (acc == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(acc);
	}
	p = PartialArg(fcinfo, 1);
	old = MemoryContextSwitchTo(aggcontext);
	if (acc == NULL)
	{
		merged = palloc(VARSIZE(p));
		memcpy(merged, p, VARSIZE(p));
	}
	else
	{
		merged = KmPartialMerge(acc, p);
		pfree(acc);
	}
	MemoryContextSwitchTo(old);
	PG_RETURN_POINTER(merged);
}

PG_FUNCTION_INFO_V1(kmeans_merge_combine);

Datum
kmeans_merge_combine(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_merge_combine");
	KmPartialData *a = PG_ARGISNULL(0) ? NULL : (KmPartialData *) PG_GETARG_POINTER(0);
	KmPartialData *b = PG_ARGISNULL(1) ? NULL : (KmPartialData *) PG_GETARG_POINTER(1);
	KmPartialData *merged;
	MemoryContext old;

	if (b == NULL)
	{
		if (a == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(a);
	}
	old = MemoryContextSwitchTo(aggcontext);
	if (a == NULL)
	{
		merged = palloc(VARSIZE(b));
		memcpy(merged, b, VARSIZE(b));
	}
	else
		merged = KmPartialMerge(a, b);
	MemoryContextSwitchTo(old);
	PG_RETURN_POINTER(merged);
}

PG_FUNCTION_INFO_V1(kmeans_merge_serialize);

Datum
kmeans_merge_serialize(PG_FUNCTION_ARGS)
{
	KmPartialData *p = (KmPartialData *) PG_GETARG_POINTER(0);
	bytea	   *out = palloc(VARSIZE(p));

	memcpy(out, p, VARSIZE(p));
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(kmeans_merge_deserialize);

Datum
kmeans_merge_deserialize(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = PartialAggContext(fcinfo, "kmeans_merge_deserialize");
	bytea	   *in = PG_GETARG_BYTEA_P(0);
	KmPartialData *p = MemoryContextAlloc(aggcontext, VARSIZE(in));

	memcpy(p, in, VARSIZE(in));
	KmPartialCheck(p, VARSIZE(p));
	PG_RETURN_POINTER(p);
}

PG_FUNCTION_INFO_V1(kmeans_merge_final);

Datum
kmeans_merge_final(PG_FUNCTION_ARGS)
{
	PartialAggContext(fcinfo, "kmeans_merge_final");
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	PG_RETURN_POINTER(PG_GETARG_POINTER(0));
}

/* ---- kmeans_step ---- */

/*
 * The next centroids from a partial for model (see kmeans_engine.h):
 * clusters without weight are re-seeded with the kept rows, farthest
 * first, each row's weighted contribution moving from its cluster to the
 * new one (exactly), then every other cluster with weight moves to its
 * mean (km_centroid_mean).  centroids: k * dim, the model's on entry.
 * Returns the number of clusters re-seeded.
 */
int
KmPartialStep(const KmPartialData *p, const KmModel *model, float *centroids)
{
	KmPartialLayout l;
	const int	k = p->k;
	const int	dim = p->dim;
	const int	cosine = p->metric == KM_METRIC_COSINE;
	const uint8 *nt;
	const double *terms;
	int64	   *counts = palloc(sizeof(int64) * k);
	double	   *wrn = palloc(sizeof(double) * k);
	double	   *srn = palloc_extended(sizeof(double) * (Size) k * dim, MCXT_ALLOC_HUGE);
	int64	   *first = palloc_extended(sizeof(int64) * (2 * (Size) k + (Size) k * dim),
										MCXT_ALLOC_HUGE);
	km_xacc   **touched = palloc0(sizeof(km_xacc *) * k);	/* dim + 1 accumulators */
	bool	   *relocated = palloc0(sizeof(bool) * k);
	int		   *empty = palloc(sizeof(int) * k);
	int			nempty = 0;
	int			nreloc = 0;
	int64		at = 0;
	double	   *m = palloc(sizeof(double) * dim);

	PartialLayout(k, dim, p->nfar, p->nterms, &l);
	nt = PartialNtOf(p, &l);
	terms = PartialTermsOf(p, &l);
	memcpy(counts, PartialCountsOf(p, &l), sizeof(int64) * k);
	for (int64 c = 0; c < l.ncells; c++)
	{
		first[c] = at;
		at += nt[c];
	}
	/* a canonical expansion's first term is its rounded value */
	for (int j = 0; j < k; j++)
		wrn[j] = nt[CELL_WEIGHT(k, j)] > 0 ? terms[first[CELL_WEIGHT(k, j)]] : 0.0;
	for (int j = 0; j < k; j++)
		for (int i = 0; i < dim; i++)
		{
			int64		c = CELL_SUM(k, dim, j, i);

			srn[(Size) j * dim + i] = nt[c] > 0 ? terms[first[c]] : 0.0;
		}

	/* re-seed the clusters left without weight, as km_cpu_relocate does */
	for (int j = 0; j < k; j++)
		if (!(wrn[j] > 0.0))
			empty[nempty++] = j;
	for (int e = 0; e < nempty && e < p->nfar; e++)
	{
		const KmFarData *f = PartialFarOf(p, &l, e);
		int			j = empty[e];
		int			old = f->label;
		float	   *cj = centroids + (Size) j * dim;

		km_centroid_row(FarVector((KmFarData *) f), dim, cosine, cj);
		if (touched[old] == NULL)
		{
			/* the old cluster's exact sums, to take the row out of */
			touched[old] = palloc(sizeof(km_xacc) * (dim + 1));
			for (int i = 0; i <= dim; i++)
			{
				int64		c = i < dim ? CELL_SUM(k, dim, old, i) : CELL_WEIGHT(k, old);

				km_xacc_init(&touched[old][i]);
				for (int t = 0; t < nt[c]; t++)
					km_xacc_add(&touched[old][i], terms[first[c] + t]);
			}
		}
		for (int i = 0; i < dim; i++)
		{
			double		v = (double) f->w * cj[i];

			km_xacc_add(&touched[old][i], -v);
			srn[(Size) j * dim + i] = v;
		}
		km_xacc_add(&touched[old][dim], -(double) f->w);
		wrn[j] = f->w;
		counts[j] = 1;
		if (--counts[old] == 0)
		{
			/* nothing left: no residue either */
			for (int i = 0; i <= dim; i++)
				km_xacc_clear(&touched[old][i]);
		}
		relocated[j] = true;
		nreloc++;
	}
	for (int j = 0; j < k; j++)
		if (touched[j] != NULL)
		{
			if (!relocated[j])
			{
				for (int i = 0; i < dim; i++)
					srn[(Size) j * dim + i] = km_xacc_round(&touched[j][i]);
				wrn[j] = km_xacc_round(&touched[j][dim]);
			}
			pfree(touched[j]);
		}

	/* every other cluster with weight moves to its mean */
	for (int j = 0; j < k; j++)
	{
		if (relocated[j] || !(wrn[j] > 0.0))
			continue;
		memcpy(m, srn + (Size) j * dim, sizeof(double) * dim);
		km_centroid_mean(m, wrn[j], dim, cosine, centroids + (Size) j * dim);
	}
	pfree(counts);
	pfree(wrn);
	pfree(srn);
	pfree(first);
	pfree(touched);
	pfree(relocated);
	pfree(empty);
	pfree(m);
	return nreloc;
}

/* The partial's per-cluster rows and rounded inertia, and their total as the engine adds it. */
double
KmPartialStats(const KmPartialData *p, int64 *sizes, double *cluster_inertia)
{
	KmPartialLayout l;
	const uint8 *nt;
	const double *terms;
	int64		at = 0;
	double		total = 0.0;

	PartialLayout(p->k, p->dim, p->nfar, p->nterms, &l);
	nt = PartialNtOf(p, &l);
	terms = PartialTermsOf(p, &l);
	memcpy(sizes, PartialCountsOf(p, &l), sizeof(int64) * p->k);
	for (int j = 0; j < p->k; j++)
		at += nt[CELL_WEIGHT(p->k, j)];
	for (int j = 0; j < p->k; j++)
	{
		cluster_inertia[j] = nt[CELL_INERTIA(p->k, j)] > 0 ? terms[at] : 0.0;
		at += nt[CELL_INERTIA(p->k, j)];
		total += cluster_inertia[j];
	}
	return total;
}

/*
 * Whether every kept row is where the partial says: its label is its
 * nearest centroid of the model, at its cost (a partial made for the model).
 */
static void
CheckFarRows(const KmPartialData *p, const KmModel *model)
{
	KmPartialLayout l;
	float	   *unit = palloc(sizeof(float) * p->dim);

	PartialLayout(p->k, p->dim, p->nfar, p->nterms, &l);
	for (int e = 0; e < p->nfar; e++)
	{
		const KmFarData *f = PartialFarOf(p, &l, e);
		const float *x = FarVector((KmFarData *) f);
		double		cost;
		int			label;

		if (model->metric == KM_METRIC_COSINE)
		{
			if (km_normalize_row(x, unit, p->dim) == 0.0)
				BadPartial("kept row %d is a zero vector", e);
			x = unit;
		}
		label = km_exact_nearest(x, model->centroids, model->cnorms, model->k, model->dim,
								 model->metric == KM_METRIC_COSINE, &cost);
		if (label != f->label || cost != f->cost)
			BadPartial("kept row %d is not in cluster %d at the cost it gives for this model",
					   e, f->label);
	}
	pfree(unit);
}

/* A field of a model, or def when it is NULL. */
static Datum
ModelField(HeapTupleHeader model, const char *name, Datum def)
{
	bool		isnull;
	Datum		v = GetAttributeByName(model, name, &isnull);

	return isnull ? def : v;
}

/* The init a model names, or explicit when it names none we know. */
static km_init
ModelInit(HeapTupleHeader model)
{
	bool		isnull;
	Datum		v = GetAttributeByName(model, "init", &isnull);
	static const km_init known[] = {KM_INIT_KMEANSPP, KM_INIT_RANDOM, KM_INIT_EXPLICIT,
	KM_INIT_KMEANS_PARALLEL};

	if (!isnull)
	{
		char	   *name = TextDatumGetCString(v);

		for (int i = 0; i < lengthof(known); i++)
			if (strcmp(name, KmInitName(known[i])) == 0)
				return known[i];
	}
	return KM_INIT_EXPLICIT;
}

PG_FUNCTION_INFO_V1(kmeans_step);

/*
 * kmeans_step(model, partial) -> kmeans_model: the next centroids from the
 * partial (merged over all rows) of the model's centroids, as one Lloyd
 * step of the CPU engine computes them.  sizes, cluster_inertia and
 * inertia describe the assignment the partial summed (to the model's
 * centroids); iterations counts one more; converged says that no centroid
 * moved and none was re-seeded.
 */
Datum
kmeans_step(PG_FUNCTION_ARGS)
{
	HeapTupleHeader mt;
	KmModel		model;
	KmPartialData *p;
	KmOptions	opts;
	KmFitOutput fit;
	float	   *next;
	int			nreloc;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("model must not be NULL")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partial must not be NULL"),
				 errdetail("kmeans_partial returns NULL when it saw no rows.")));
	mt = PG_GETARG_HEAPTUPLEHEADER(0);
	KmModelRead(mt, &model);
	p = PartialArg(fcinfo, 1);
	if (p->k != model.k || p->dim != model.dim || p->metric != (uint8) model.metric ||
		p->model_hash != KmModelHash(&model))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the kmeans_partial was not computed for this model"),
				 errdetail("A partial belongs to the centroids it was computed from; compute it with kmeans_partial(vec, model) for this model.")));
	if (p->n_rows == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("kmeans has no vectors to cluster"),
				 errdetail("The partial saw no rows, or only NULL vectors.")));
	CheckFarRows(p, &model);

	next = palloc_extended(sizeof(float) * (Size) model.k * model.dim, MCXT_ALLOC_HUGE);
	memcpy(next, model.centroids, sizeof(float) * (Size) model.k * model.dim);
	nreloc = KmPartialStep(p, &model, next);

	/* the options the model was fitted with carry over */
	KmOptionsDefaults(&opts);
	opts.k = model.k;
	opts.metric = model.metric;
	opts.storage = model.storage;
	opts.init = ModelInit(mt);
	opts.n_init = DatumGetInt32(ModelField(mt, "n_init", Int32GetDatum(1)));
	opts.max_iter = DatumGetInt32(ModelField(mt, "max_iter", Int32GetDatum(opts.max_iter)));
	opts.tol = DatumGetFloat8(ModelField(mt, "tol", Float8GetDatum(opts.tol)));

	memset(&fit, 0, sizeof(fit));
	fit.centroids = next;
	fit.sizes = palloc(sizeof(int64) * model.k);
	fit.cluster_inertia = palloc(sizeof(double) * model.k);
	fit.inertia = KmPartialStats(p, fit.sizes, fit.cluster_inertia);
	fit.iterations = DatumGetInt32(ModelField(mt, "iterations", Int32GetDatum(0))) + 1;
	fit.converged = nreloc == 0 &&
		memcmp(next, model.centroids, sizeof(float) * (Size) model.k * model.dim) == 0;
	fit.relocated = nreloc;
	fit.seed = DatumGetInt64(ModelField(mt, "seed", Int64GetDatum(0)));
	fit.engine = "cpu";
	return KmModelMake(fcinfo, &opts, &fit, model.dim, p->n_rows, p->n_skipped);
}
