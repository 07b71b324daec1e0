/*
 * table_scan.c
 *	  One pass over a table's vector column (kmeans_fit, kmeans_labels).
 *
 * Names given by the caller are resolved through the catalog, never pasted
 * into SQL: the relation comes as an OID (regclass), each column is looked
 * up by name with get_attnum, its type is checked, and the query text is
 * built from the catalog's names through quote_identifier.  The query runs
 * through SPI as the calling user, so the executor checks SELECT privilege
 * and the planner applies row-level security, exactly as for a plain SELECT.
 * Rows reach the caller one at a time through a DestReceiver (no result set
 * is materialised), in a memory context reset after every row.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "tcop/dest.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "kmeans_gpu.h"

typedef struct KmReceiver
{
	DestReceiver pub;
	KmScanRow	callback;
	void	   *arg;
	MemoryContext rowcontext;
} KmReceiver;

static bool
KmReceiveSlot(TupleTableSlot *slot, DestReceiver *self)
{
	KmReceiver *r = (KmReceiver *) self;
	MemoryContext old = MemoryContextSwitchTo(r->rowcontext);

	slot_getallattrs(slot);
	r->callback(r->arg, slot->tts_values, slot->tts_isnull);
	MemoryContextSwitchTo(old);
	MemoryContextReset(r->rowcontext);
	return true;
}

static void
KmReceiverStartup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
KmReceiverShutdown(DestReceiver *self)
{
}

static void
KmReceiverDestroy(DestReceiver *self)
{
}

/*
 * Can values of type source become target by a real cast (not through their
 * text form)?
 */
static bool
HasCast(Oid source, Oid target)
{
	Oid			funcid;
	CoercionPathType path;

	if (source == target)
		return true;
	path = find_coercion_pathway(target, source, COERCION_EXPLICIT, &funcid);
	return path == COERCION_PATH_FUNC || path == COERCION_PATH_RELABELTYPE ||
		path == COERCION_PATH_ARRAYCOERCE;
}

/*
 * The SQL expression for a column of relid: its quoted catalog name, cast to
 * target when it is of another type, after checking that it exists, is a
 * user column, and can be cast.
 */
char *
KmColumnSql(Oid relid, const char *column, const char *role, Oid target,
			const char *target_name, bool keep_float8_arrays)
{
	AttrNumber	attnum = get_attnum(relid, column);
	Oid			type;
	const char *name;

	if (attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						column, get_rel_name(relid))));
	if (attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s column cannot be system column \"%s\"", role, column)));

	type = get_atttype(relid, attnum);
	if (!HasCast(type, target))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s column \"%s\" has type %s, which cannot be cast to %s",
						role, column, format_type_be(type), target_name)));

	name = quote_identifier(get_attname(relid, attnum, false));
	if (type == target || (keep_float8_arrays && type == FLOAT8ARRAYOID))
		return pstrdup(name);
	return psprintf("CAST(%s AS %s)", name, format_type_be_qualified(target));
}

/* The vector column's expression: real[], or float8[] kept as it is. */
char *
KmVectorColumnSql(const KmScanSpec *spec)
{
	return KmColumnSql(spec->relid, spec->vector_column, "vector",
					   FLOAT4ARRAYOID, "real[]", true);
}

/* The weight column's expression (float8), or NULL when there is none. */
char *
KmWeightColumnSql(const KmScanSpec *spec)
{
	if (spec->weight_column == NULL)
		return NULL;
	return KmColumnSql(spec->relid, spec->weight_column, "weight",
					   FLOAT8OID, "double precision", false);
}

/* The relation's schema-qualified, quoted name; an ERROR when it is gone. */
char *
KmRelationSql(Oid relid)
{
	char	   *relname = get_rel_name(relid);

	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), relname);
}

/*
 * Call callback for every row of relid that the caller may see, with the
 * vector (real[] or float8[]), then the weight (float8) and the id (int8)
 * when asked for.
 */
void
KmScanTable(const KmScanSpec *spec, KmScanRow callback, void *arg)
{
	StringInfoData sql;
	/* checked in this order: the relation, the vector, the weight, the id */
	char	   *from = KmRelationSql(spec->relid);
	char	   *vector = KmVectorColumnSql(spec);
	char	   *weight = KmWeightColumnSql(spec);
	KmReceiver	receiver;
	int			ret;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s", vector);
	if (weight != NULL)
		appendStringInfo(&sql, ", %s", weight);
	if (spec->id_column != NULL)
		appendStringInfo(&sql, ", %s",
						 KmColumnSql(spec->relid, spec->id_column, "id",
									 INT8OID, "bigint", false));
	appendStringInfo(&sql, " FROM %s", from);

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = KmReceiveSlot;
	receiver.pub.rStartup = KmReceiverStartup;
	receiver.pub.rShutdown = KmReceiverShutdown;
	receiver.pub.rDestroy = KmReceiverDestroy;
	receiver.pub.mydest = DestNone;
	receiver.callback = callback;
	receiver.arg = arg;
	receiver.rowcontext = AllocSetContextCreate(CurrentMemoryContext, "kmeans row",
												ALLOCSET_SMALL_SIZES);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
#if PG_VERSION_NUM >= 140000
	{
		SPIExecuteOptions options;

		memset(&options, 0, sizeof(options));
		options.read_only = false;
		options.dest = (DestReceiver *) &receiver;
		/* a SELECT into a receiver of ours counts as SPI_OK_UTILITY */
		ret = SPI_execute_extended(sql.data, &options);
		if (ret < 0)
			elog(ERROR, "kmeans scan failed: %s", SPI_result_code_string(ret));
	}
#else
	{
		SPIPlanPtr	plan = SPI_prepare(sql.data, 0, NULL);
		Portal		portal;

		if (plan == NULL)
			elog(ERROR, "kmeans scan failed: %s", SPI_result_code_string(SPI_result));
		portal = SPI_cursor_open(NULL, plan, NULL, NULL, false);
		for (;;)
		{
			SPI_cursor_fetch(portal, true, 1024);
			if (SPI_processed == 0)
				break;
			for (uint64 i = 0; i < SPI_processed; i++)
			{
				Datum		values[3];
				bool		nulls[3];
				MemoryContext old = MemoryContextSwitchTo(receiver.rowcontext);

				heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, values, nulls);
				callback(arg, values, nulls);
				MemoryContextSwitchTo(old);
				MemoryContextReset(receiver.rowcontext);
			}
			SPI_freetuptable(SPI_tuptable);
		}
		SPI_cursor_close(portal);
		ret = SPI_OK_SELECT;
	}
#endif
	SPI_finish();
	MemoryContextDelete(receiver.rowcontext);
	pfree(sql.data);
}

/* Rows the planner's statistics expect in relid (0 when unknown). */
double
KmEstimateRows(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	double		rows = 0;

	if (HeapTupleIsValid(tuple))
	{
		rows = ((Form_pg_class) GETSTRUCT(tuple))->reltuples;
		ReleaseSysCache(tuple);
	}
	return rows > 0 ? rows : 0;
}
