/*
 * parallel_read.c
 *	  kmeans_fit's read of a large table by PostgreSQL's parallel workers.
 *
 * A table read by one backend is bound by that backend: it deforms every
 * tuple, checks every value and copies it.  For a large table kmeans_fit
 * instead creates a dynamic shared memory segment sized from the table's
 * statistics and runs, through SPI,
 *
 *     SELECT count(*) FROM rel WHERE NOT kmeans_read_row(handle, token, vec, weight)
 *
 * which the planner is free to run as a parallel plan.  Every process of the
 * plan (the workers, and the leader when it takes part) calls
 * kmeans_read_row for its share of the rows: it checks each vector as the
 * serial read does (vector_input.c) and writes it into a block of the
 * segment that it claimed for itself, so that processes never share a cache
 * line.  The count is that of the rows skipped (NULL vector or weight).
 * The blocks then become the chunks of the fit's KmMatrix without a copy.
 * Privileges, row-level security and the plan stay PostgreSQL's: the query
 * is an ordinary query of the calling role.
 *
 * The rows land in the blocks in any order; a model does not depend on the
 * order of its rows (README, "Seeds").  When the segment proves too small
 * (statistics far out of date), every process stops writing, the segment is
 * dropped, and kmeans_fit reads the table again in its own backend.
 *
 * Rows bound for one GPU (gpu.c's stream) need not stay in host memory:
 * there the segment is a ring of small blocks (KmParallelReadStream), each
 * handed back to the writers once the GPU has it.  A writer takes a free
 * block, fills it and marks it full; a thread of the backend (dataset.cu's
 * drain) copies full blocks to the device by DMA from the segment itself,
 * registered with CUDA, while the query runs.  So no process copies the
 * rows a second time, and the segment is a few MB per process whatever the
 * table's size: a segment for every row would cost its fresh pages (69 ms
 * for 576 MB on an H200 host) and then 100-133 ms more to register or copy
 * (kernels/bench/bench_upload.cu).  The ring never overflows: a writer that
 * finds every block taken waits for one.
 *
 * kmeans_read_row writes only into a segment whose header carries the
 * random token given in the query and whose owner is the caller's own
 * backend or the leader of its parallel group: called by hand, with any
 * handle, it raises an ERROR and writes nothing.
 */
#include "postgres.h"

#include <sys/mman.h>
#include <sys/statvfs.h>

#include <math.h>

#include "access/htup_details.h"
#include "access/parallel.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "optimizer/cost.h"
#include "optimizer/paths.h"
#include "optimizer/plancat.h"
#include "parser/parse_func.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/dsm.h"
#include "storage/dsm_impl.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "kmeans_gpu.h"

#define KM_READ_MAGIC	UINT64CONST(0x6b6d6770755f7264)
#define KM_READ_ALIGN	64		/* a cache line, as KmMatrix aligns its rows */
#define KM_READ_BLOCK_BYTES ((Size) 4 * 1024 * 1024)
#define KM_READ_RING_BLOCK_BYTES ((Size) 1024 * 1024)
#define KM_READ_RING_BLOCKS_PER_PROCESS 4
#define KM_READ_HEADER_BYTES TYPEALIGN(KM_READ_ALIGN, sizeof(KmReadShared))

/* Rows the estimate is raised by (statistics lag behind the table). */
#define KM_READ_SLACK	1.1

/* The segment's header: what every process needs to write rows. */
typedef struct KmReadShared
{
	uint64		magic;			/* KM_READ_MAGIC */
	uint64		token;			/* random, given in the query: proves the caller */
	int			owner_pid;		/* the backend running kmeans_fit */
	int			dim;
	bool		weighted;
	bool		cosine;
	bool		ring;			/* the blocks are a ring drained to the GPU */
	km_storage	storage;
	int64		block_rows;		/* rows a block holds */
	Size		block_bytes;
	uint32		nblocks;
	pg_atomic_uint32 next_block;	/* the next block to claim (ring: where to look first) */
	pg_atomic_uint32 overflow;	/* a process found no block left */
	pg_atomic_uint32 processes; /* processes that called kmeans_read_row */
	uint32		ring_failed;	/* the drain stopped on an error (km_ring.failed) */
} KmReadShared;

/*
 * At the start of each block, on a cache line of its own; one process
 * writes the block at a time.  Its rows follow (block_rows x dim floats),
 * then their weights when the fit is weighted, each part aligned to a cache
 * line.  The header is the GPU drain's (km_ring_block): rows written, one of
 * them weighing more than 0, and, in a ring, the block's state.
 */
typedef km_ring_block KmReadBlock;

/* What kmeans_fit's backend keeps about its read. */
struct KmParallelRead
{
	char	   *from;			/* the relation, quoted */
	char	   *vector;			/* the vector column's expression */
	char	   *weight;			/* the weight column's, or NULL */
	char	   *function;		/* kmeans_read_row, schema-qualified */
	Oid			relid;
	int			dim;
	double		estimated_rows;
	bool		weighted;
	bool		cosine;
	km_storage	storage;
	int			planned_workers;
	int64		block_rows;		/* rows a block holds */
	uint32		nblocks;
	Size		bytes;			/* of the segment */
	bool		has_room;		/* a segment for every row fits memory and /dev/shm */
	bool		ring;			/* the segment is a ring drained to the GPU */
	KmGpuSink  *drain;			/* the sink draining the ring, until it is done */
	dsm_segment *seg;			/* NULL once detached */
	int			processes;		/* that took part in the read */
	int64		create_us;		/* creating the segment */
	int64		query_us;		/* the query that wrote the rows */
	MemoryContextCallback cb;
};

/* This process's writer: the segment it writes into, and its block. */
static struct
{
	dsm_segment *seg;			/* NULL: none */
	KmReadShared *shared;
	KmReadBlock *block;			/* the block being filled, or NULL */
} writer;

/* The read being planned: the relation whose scan gets read_workers. */
static Oid	planning_relid = InvalidOid;
static int	planning_workers = 0;
static get_relation_info_hook_type prev_get_relation_info = NULL;

static inline Size
BlockBytes(int64 rows, int dim, bool weighted)
{
	return KM_READ_ALIGN +
		TYPEALIGN(KM_READ_ALIGN, sizeof(float) * (Size) dim * rows) +
		(weighted ? TYPEALIGN(KM_READ_ALIGN, sizeof(float) * rows) : 0);
}

/* Rows a block of about bytes holds (at least one). */
static inline int64
BlockRowsFor(Size bytes, int dim, bool weighted)
{
	return Max(1, (int64) ((bytes - 3 * KM_READ_ALIGN) /
						   (sizeof(float) * ((Size) dim + weighted))));
}

static inline KmReadBlock *
BlockAt(KmReadShared *shared, uint32 b)
{
	return (KmReadBlock *) ((char *) shared + KM_READ_HEADER_BYTES + shared->block_bytes * b);
}

static inline float *
BlockRows(KmReadBlock *block)
{
	return (float *) ((char *) block + KM_READ_ALIGN);
}

/* Where a block's weights begin, from the block's start. */
static inline Size
WeightsOffset(int64 block_rows, int dim)
{
	return KM_READ_ALIGN + TYPEALIGN(KM_READ_ALIGN, sizeof(float) * (Size) dim * block_rows);
}

static inline float *
BlockWeights(const KmReadShared *shared, KmReadBlock *block)
{
	return (float *) ((char *) block + WeightsOffset(shared->block_rows, shared->dim));
}

/*
 * planner hook: the read's scan gets the workers kmeans_gpu.read_workers
 * asks for, as the table's parallel_workers option would give them.
 */
static void
ReadRelationInfo(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	if (prev_get_relation_info)
		prev_get_relation_info(root, relid, inhparent, rel);
	if (OidIsValid(planning_relid) && relid == planning_relid && planning_workers > 0)
		rel->rel_parallel_workers = planning_workers;
}

/* Set up the module (from _PG_init). */
void
KmParallelReadInit(void)
{
	prev_get_relation_info = get_relation_info_hook;
	get_relation_info_hook = ReadRelationInfo;
}

/*
 * Map the pages of [start, start + bytes) into this process at once, with
 * one call, not one page fault at a time (a 4 MB block is 1024 faults).
 * Only advice: a kernel without MADV_POPULATE_* (before Linux 5.14) faults
 * them in as they are touched.
 */
static void
Prefault(void *start, Size bytes, bool write)
{
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
	uintptr_t	first = TYPEALIGN_DOWN(4096, (uintptr_t) start);

	(void) madvise((void *) first, (uintptr_t) start + bytes - first,
				   write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#endif
}

/* on_dsm_detach: this process no longer writes into the segment. */
static void
WriterForget(dsm_segment *seg, Datum arg)
{
	if (writer.seg == seg)
		memset(&writer, 0, sizeof(writer));
}

/* Whether pid is this backend or the leader of its parallel group. */
static bool
SameBackendGroup(int pid)
{
	return pid == MyProcPid ||
		(MyProc->lockGroupLeader != NULL && MyProc->lockGroupLeader->pid == pid);
}

/*
 * Make the segment handle this process's writer, after checking that it is
 * the read of this backend's (or its leader's) kmeans_fit, with token.
 */
static void
WriterAttach(dsm_handle handle, uint64 token)
{
	dsm_segment *seg;
	bool		attached = false;
	KmReadShared *shared;

	if (writer.seg != NULL && dsm_segment_handle(writer.seg) == handle &&
		writer.shared->token == token)
		return;

	seg = dsm_find_mapping(handle);
	if (seg == NULL)
	{
		seg = dsm_attach(handle);
		attached = seg != NULL;
	}
	shared = seg != NULL ? (KmReadShared *) dsm_segment_address(seg) : NULL;
	if (shared == NULL || dsm_segment_map_length(seg) < sizeof(KmReadShared) ||
		shared->magic != KM_READ_MAGIC || shared->token != token ||
		!SameBackendGroup(shared->owner_pid))
	{
		if (attached)
			dsm_detach(seg);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kmeans_read_row is only for the read that kmeans_fit runs")));
	}
	/*
	 * A worker keeps its mapping until it exits, which is soon after the
	 * query: a mapping left in a resource owner at commit would be reported
	 * as a leak.
	 */
	if (attached)
		dsm_pin_mapping(seg);
	if (writer.seg != seg)
	{
		on_dsm_detach(seg, WriterForget, (Datum) 0);
		pg_atomic_fetch_add_u32(&shared->processes, 1);
	}
	writer.seg = seg;
	writer.shared = shared;
	writer.block = NULL;
}

/* A block of its own for this process; false when none is left. */
static bool
WriterClaimBlock(KmReadShared *shared)
{
	uint32		b;

	if (pg_atomic_read_u32(&shared->overflow) != 0)
		return false;
	b = pg_atomic_fetch_add_u32(&shared->next_block, 1);
	if (b >= shared->nblocks)
	{
		pg_atomic_write_u32(&shared->overflow, 1);
		return false;
	}
	writer.block = BlockAt(shared, b);
	Prefault(writer.block, shared->block_bytes, true);
	return true;
}

/*
 * A free block of the ring for this process, waiting while every block is
 * taken (the drain hands them back as the GPU takes their rows); false when
 * the drain stopped on an error, after which nothing is written.
 */
static bool
WriterClaimRingBlock(KmReadShared *shared)
{
	uint32		start = pg_atomic_fetch_add_u32(&shared->next_block, 1);

	for (;;)
	{
		for (uint32 i = 0; i < shared->nblocks; i++)
		{
			KmReadBlock *block = BlockAt(shared, (start + i) % shared->nblocks);
			uint32		expected = KM_RING_FREE;

			/* acquire: the drain's reset of the block comes before its FREE */
			if (__atomic_load_n(&block->state, __ATOMIC_RELAXED) == KM_RING_FREE &&
				__atomic_compare_exchange_n(&block->state, &expected, KM_RING_FILLING, false,
											__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			{
				writer.block = block;
				Prefault(block, shared->block_bytes, true);
				return true;
			}
		}
		if (__atomic_load_n(&shared->ring_failed, __ATOMIC_ACQUIRE) != 0)
			return false;
		CHECK_FOR_INTERRUPTS();
		pg_usleep(50);
	}
}

PG_FUNCTION_INFO_V1(kmeans_read_row);

/*
 * kmeans_read_row(handle bigint, token bigint, vec real[] or float8[],
 * weight float8) -> boolean: writes the row into the read's shared memory
 * after the checks of a serial read; false for a row skipped (NULL vector,
 * or NULL weight in a weighted fit).  Once the segment is full it writes
 * nothing more (kmeans_fit then reads the table again in one backend).
 */
Datum
kmeans_read_row(PG_FUNCTION_ARGS)
{
	KmReadShared *shared;
	KmReadBlock *block;
	ArrayType  *vec;
	double		w = 1.0;
	float	   *row;
	int			dim;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kmeans_read_row is only for the read that kmeans_fit runs")));
	WriterAttach((dsm_handle) PG_GETARG_INT64(0), (uint64) PG_GETARG_INT64(1));
	shared = writer.shared;

	if (PG_ARGISNULL(2) || (shared->weighted && PG_ARGISNULL(3)))
		PG_RETURN_BOOL(false);
	vec = PG_GETARG_ARRAYTYPE_P(2);
	if (shared->weighted)
	{
		w = PG_GETARG_FLOAT8(3);
		KmCheckWeight(w);
	}
	dim = KmVectorDim(vec);
	KmCheckDimension(shared->dim, dim);

	if ((writer.block == NULL || writer.block->n == shared->block_rows) &&
		!(shared->ring ? WriterClaimRingBlock(shared) : WriterClaimBlock(shared)))
		PG_RETURN_BOOL(true);	/* no room, or the GPU failed: the fit says so */
	block = writer.block;
	row = BlockRows(block) + (Size) dim * block->n;
	if (shared->storage == KM_STORAGE_FLOAT32)
		KmVectorReadRow(vec, dim, row, true, shared->cosine);
	else
	{
		/* ordinary stores: the rounding reads the row back at once */
		KmVectorReadRow(vec, dim, row, false, shared->cosine);
		KmVectorRound(row, dim, shared->storage, shared->cosine, 0, NULL);
	}
	if (shared->weighted)
	{
		BlockWeights(shared, block)[block->n] = (float) w;
		if (w > 0)
			block->positive_weight = 1;
	}
	/* the row, streamed, is in memory before the count that makes it visible */
	KmStoreFence();
	block->n++;
	if (shared->ring && block->n == shared->block_rows)
	{
		/* full: the drain's to copy; release, after the rows and the count */
		__atomic_store_n(&block->state, KM_RING_FULL, __ATOMIC_RELEASE);
		writer.block = NULL;
	}
	PG_RETURN_BOOL(true);
}

/* on_dsm_detach: the read's segment is gone (detached, or on abort). */
static void
ReadForget(dsm_segment *seg, Datum arg)
{
	KmParallelRead *read = (KmParallelRead *) DatumGetPointer(arg);

	if (read->seg == seg)
	{
		/* a drain still running must end before the ring's memory goes */
		if (read->drain != NULL)
			KmGpuSinkDrainStop(read->drain);
		read->drain = NULL;
		read->seg = NULL;
	}
}

/* Memory context callback: the rows' context goes, and the segment with it. */
static void
ReadContextGone(void *arg)
{
	KmParallelReadRelease((KmParallelRead *) arg);
}

/*
 * The first vector a serial read would keep: its length, and its size as
 * stored (for tables that were never analysed); false when the relation has
 * no such row.  The checks of a serial read apply to it.
 */
static bool
PeekFirstVector(const KmParallelRead *read, int *dim, int32 *stored_bytes)
{
	char	   *sql;
	int			ret;
	bool		found = false;

	sql = psprintf("SELECT %s, pg_column_size(%s) FROM %s WHERE %s IS NOT NULL%s%s%s LIMIT 1",
				   read->vector, read->vector, read->from, read->vector,
				   read->weight != NULL ? " AND " : "",
				   read->weight != NULL ? read->weight : "",
				   read->weight != NULL ? " IS NOT NULL" : "");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute(sql, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "kmeans scan failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		vec = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		Datum		size = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);

		*dim = KmVectorDim(DatumGetArrayTypeP(vec));
		*stored_bytes = DatumGetInt32(size);
		found = true;
	}
	SPI_finish();
	pfree(sql);
	return found;
}

/*
 * Rows a relation of pages pages holds now, from its statistics (reltuples
 * in relpages) scaled to its current size as the planner scales them; for a
 * relation never analysed, as many rows as its pages could hold if each
 * were no larger than its vector as stored (stored_bytes).
 */
static double
EstimateRows(BlockNumber pages, double reltuples, BlockNumber relpages, int32 stored_bytes)
{
	Size		tuple_bytes;

	if (pages == 0)
		return 0;
	if (reltuples > 0 && relpages > 0)
		return ceil(reltuples / relpages * pages);
	tuple_bytes = MAXALIGN(SizeofHeapTupleHeader + Max(stored_bytes, 1)) + sizeof(ItemIdData);
	return floor((double) pages * (BLCKSZ - SizeOfPageHeaderData) / tuple_bytes);
}

/*
 * Whether the extension's SQL has kmeans_read_row: a database still at 0.1
 * (before ALTER EXTENSION kmeans_gpu UPDATE) runs this library without it.
 */
static bool
ReadFunctionExists(Oid func_namespace)
{
	Oid			argtypes[4] = {INT8OID, INT8OID, FLOAT4ARRAYOID, FLOAT8OID};
	List	   *name = list_make2(makeString(get_namespace_name(func_namespace)),
								  makeString("kmeans_read_row"));

	return OidIsValid(LookupFuncName(name, 4, argtypes, true));
}

/*
 * Whether the dynamic shared memory of this server can give bytes: with
 * POSIX segments (the default on Linux) they are files in /dev/shm, which
 * containers often make small; asking for more than it has is an ERROR, so
 * the read is done in one backend instead.
 */
static bool
SharedMemoryHasRoom(Size bytes)
{
#ifdef __linux__
	struct statvfs fs;

	if (dynamic_shared_memory_type == DSM_IMPL_POSIX && statvfs("/dev/shm", &fs) == 0)
		return (double) fs.f_bavail * fs.f_frsize >= (double) bytes * 1.125;
#endif
	return true;
}

/*
 * Whether kmeans_fit should read spec's relation with parallel workers into
 * shared memory, for rows gathered as m (empty) would gather them: NULL when
 * not (the relation is not a table, is too small for a parallel plan, the
 * shared memory would not hold the rows, kmeans_gpu.read_workers is 0, ...);
 * the caller then reads it in its own backend.  Otherwise the read is
 * planned, its memory living in m's context: the length of the vectors is
 * known (KmParallelReadDim) and the rows the statistics promise
 * (KmParallelReadEstimate).  The functions of func_namespace are the
 * extension's.
 */
KmParallelRead *
KmParallelReadPlan(const KmScanSpec *spec, Oid func_namespace, const KmMatrix *m)
{
	KmParallelRead *read;
	int			planned_workers = kmeans_read_workers > 0 ? kmeans_read_workers :
		max_parallel_workers_per_gather;
	int32		stored_bytes = 0;
	Relation	rel;
	BlockNumber pages;
	BlockNumber relpages;
	double		reltuples;
	char		relkind;
	double		blocks;

	if (kmeans_read_workers == 0 || planned_workers == 0 || IsInParallelMode())
		return NULL;

	read = MemoryContextAllocZero(m->context, sizeof(KmParallelRead));
	/* the errors of a serial read, in its order: relation, vector, weight */
	read->from = KmRelationSql(spec->relid);
	read->vector = KmVectorColumnSql(spec);
	read->weight = KmWeightColumnSql(spec);
	read->relid = spec->relid;
	read->weighted = m->weighted;
	read->cosine = m->cosine;
	read->storage = m->storage;
	relkind = get_rel_relkind(spec->relid);
	if (relkind != RELKIND_RELATION && relkind != RELKIND_MATVIEW)
		return NULL;
	/* without SELECT on the table, the read in one backend says what is missing */
	if (pg_class_aclcheck(spec->relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK ||
		!ReadFunctionExists(func_namespace))
		return NULL;

	/* the query of a serial read would take the same lock */
	rel = table_open(spec->relid, AccessShareLock);
	pages = RelationGetNumberOfBlocks(rel);
	reltuples = rel->rd_rel->reltuples;
	relpages = rel->rd_rel->relpages;
	table_close(rel, AccessShareLock);
	/* a table PostgreSQL would scan in one process anyway */
	if (pages == 0 ||
		(kmeans_read_workers < 0 && pages < (BlockNumber) min_parallel_table_scan_size))
		return NULL;

	if (!PeekFirstVector(read, &read->dim, &stored_bytes))
		return NULL;
	read->estimated_rows = EstimateRows(pages, reltuples, relpages, stored_bytes);

	read->planned_workers = planned_workers;
	/* blocks of about KM_READ_BLOCK_BYTES, at least a row each */
	read->block_rows = BlockRowsFor(KM_READ_BLOCK_BYTES, read->dim, read->weighted);
	/* each process may leave one block partly filled */
	blocks = ceil(read->estimated_rows * KM_READ_SLACK / read->block_rows) + planned_workers + 1;
	if (blocks <= PG_UINT32_MAX / 2 &&
		blocks * BlockBytes(read->block_rows, read->dim, read->weighted) <= (double) KmMaxMemoryBytes())
	{
		read->nblocks = (uint32) blocks;
		read->bytes = KM_READ_HEADER_BYTES +
			(Size) read->nblocks * BlockBytes(read->block_rows, read->dim, read->weighted);
		read->has_room = SharedMemoryHasRoom(read->bytes);
	}

	read->function = psprintf("%s.kmeans_read_row",
							  quote_identifier(get_namespace_name(func_namespace)));
	return read;
}

/* The length of the vectors (known once the read is planned). */
int
KmParallelReadDim(const KmParallelRead *read)
{
	return read->dim;
}

/* The rows the table's statistics promise. */
double
KmParallelReadEstimate(const KmParallelRead *read)
{
	return read->estimated_rows;
}

/*
 * Whether a segment for every row (KmParallelReadRun) fits kmeans_gpu.max_memory
 * and /dev/shm; a ring (KmParallelReadStream) needs only a few MB.
 */
bool
KmParallelReadHasRoom(const KmParallelRead *read)
{
	return read->has_room;
}

/* Fill in the segment's header and its blocks' (the memory may be reused). */
static KmReadShared *
ReadSharedInit(KmParallelRead *read)
{
	KmReadShared *shared = (KmReadShared *) dsm_segment_address(read->seg);
	uint64		token;

	if (!pg_strong_random(&token, sizeof(token)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random token for kmeans_fit's parallel read")));
	memset(shared, 0, sizeof(*shared));
	shared->magic = KM_READ_MAGIC;
	shared->token = token & PG_INT64_MAX;	/* a bigint literal in the query */
	shared->owner_pid = MyProcPid;
	shared->dim = read->dim;
	shared->weighted = read->weighted;
	shared->cosine = read->cosine;
	shared->ring = read->ring;
	shared->storage = read->storage;
	shared->block_rows = read->block_rows;
	shared->block_bytes = BlockBytes(read->block_rows, read->dim, read->weighted);
	shared->nblocks = read->nblocks;
	pg_atomic_init_u32(&shared->next_block, 0);
	pg_atomic_init_u32(&shared->overflow, 0);
	pg_atomic_init_u32(&shared->processes, 0);
	for (uint32 b = 0; b < shared->nblocks; b++)
		memset(BlockAt(shared, b), 0, sizeof(KmReadBlock));
	return shared;
}

/*
 * Create the read's segment (read->bytes), gone with context or at the
 * latest when the transaction ends, and fill in its header; NULL when the
 * server has no segment left.
 */
static KmReadShared *
ReadSegmentCreate(KmParallelRead *read, MemoryContext context)
{
	TimestampTz start = GetCurrentTimestamp();
	KmReadShared *shared;

	read->seg = dsm_create(read->bytes, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (read->seg == NULL)
		return NULL;
	on_dsm_detach(read->seg, ReadForget, PointerGetDatum(read));
	read->cb.func = ReadContextGone;
	read->cb.arg = read;
	MemoryContextRegisterResetCallback(context, &read->cb);
	shared = ReadSharedInit(read);
	read->create_us = GetCurrentTimestamp() - start;
	return shared;
}

/*
 * Run the read's query: every row of the relation that the calling role may
 * see goes to kmeans_read_row, in as many processes as the plan has.
 * Returns the rows skipped; the processes that wrote are done when it
 * returns.
 */
static int64
ReadQueryRun(KmParallelRead *read, KmReadShared *shared)
{
	TimestampTz start = GetCurrentTimestamp();
	char	   *sql;
	int			nestlevel = -1;
	volatile int ret = 0;
	bool		isnull;
	int64		skipped;

	sql = psprintf("SELECT count(*) FROM %s WHERE NOT %s(%u::bigint, " INT64_FORMAT "::bigint, %s, %s)",
				   read->from, read->function, dsm_segment_handle(read->seg),
				   (int64) shared->token, read->vector,
				   read->weighted ? read->weight : "NULL::double precision");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (kmeans_read_workers > 0)
	{
		/* as a function's SET clause: undone at the end, or by the abort */
		nestlevel = NewGUCNestLevel();
		(void) set_config_option("max_parallel_workers_per_gather",
								 psprintf("%d", kmeans_read_workers),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
	planning_relid = read->relid;
	planning_workers = kmeans_read_workers;
	PG_TRY();
	{
		ret = SPI_execute(sql, false, 0);
	}
	PG_FINALLY();
	{
		planning_relid = InvalidOid;
	}
	PG_END_TRY();
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "kmeans scan failed: %s", SPI_result_code_string(ret));
	skipped = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (nestlevel >= 0)
		AtEOXact_GUC(true, nestlevel);
	SPI_finish();
	pfree(sql);

	/* the workers are done (the plan waited for them): read what they wrote */
	pg_memory_barrier();
	read->query_us = GetCurrentTimestamp() - start;
	read->processes = (int) pg_atomic_read_u32(&shared->processes);
	return skipped;
}

/*
 * Run the read: every row of the relation that the calling role may see
 * goes into the segment, by as many processes as the plan has; the rows
 * skipped are counted in *n_skipped.  The blocks become m's chunks (m must
 * be empty; KmMatrixBorrow), and *positive_weight says whether a row weighs
 * more than 0.  false, with neither set, when the segment could not be
 * created or proved too small: m is untouched, and the caller reads the
 * relation in its own backend.  Only for a read with room
 * (KmParallelReadHasRoom).
 */
bool
KmParallelReadRun(KmParallelRead *read, KmMatrix *m, int64 *n_skipped, bool *positive_weight)
{
	bool		weighted = read->weighted;
	KmReadShared *shared;
	uint32		claimed;
	km_chunk   *chunks;
	int			nchunks = 0;
	int64		skipped;

	Assert(m->n == 0 && m->weighted == weighted && read->has_room);
	shared = ReadSegmentCreate(read, m->context);
	if (shared == NULL)
		return false;
	skipped = ReadQueryRun(read, shared);
	if (pg_atomic_read_u32(&shared->overflow) != 0)
	{
		KmParallelReadRelease(read);
		return false;
	}

	claimed = Min(pg_atomic_read_u32(&shared->next_block), shared->nblocks);
	chunks = palloc(sizeof(km_chunk) * Max(claimed, 1));
	*positive_weight = false;
	for (uint32 b = 0; b < claimed; b++)
	{
		KmReadBlock *block = BlockAt(shared, b);

		if (block->n == 0)
			continue;
		chunks[nchunks].x = BlockRows(block);
		chunks[nchunks].w = weighted ? BlockWeights(shared, block) : NULL;
		chunks[nchunks].n = block->n;
		nchunks++;
		*positive_weight = *positive_weight || block->positive_weight;
	}
	KmMatrixBorrow(m, read->dim, chunks, nchunks, skipped, read->bytes);
	*n_skipped = skipped;
	pfree(chunks);
	/* the workers' pages, mapped here at once: the fit reads every one */
	Prefault(BlockAt(shared, 0), (Size) claimed * shared->block_bytes, false);
	return true;
}

/*
 * Run the read into sink (started for the GPU without host rows, nothing
 * in it yet) through a ring: the processes of the query fill the ring's
 * blocks, and the sink's drain copies them to the GPU as they fill.  The
 * ring is a few blocks per planned process, living in context until the
 * read ends.  Returns true when the rows are on the GPU (*n_skipped and
 * *positive_weight set, and the sink counts the rows); false when the read
 * did not run (no room in /dev/shm, no segment left: the sink is as it
 * was) or the GPU gave up, which is an ERROR under engine 'gpu' (under
 * 'auto' the sink is then dead, KmGpuSinkLive, and the caller reads the
 * rows again for the CPU).
 */
bool
KmParallelReadStream(KmParallelRead *read, KmGpuSink *sink, MemoryContext context,
					 int64 *n_skipped, bool *positive_weight)
{
	KmReadShared *shared;
	km_ring		ring;
	int64		skipped;
	bool		ok;

	read->ring = true;
	read->block_rows = BlockRowsFor(KM_READ_RING_BLOCK_BYTES, read->dim, read->weighted);
	read->nblocks = KM_READ_RING_BLOCKS_PER_PROCESS * (read->planned_workers + 1);
	read->bytes = KM_READ_HEADER_BYTES +
		(Size) read->nblocks * BlockBytes(read->block_rows, read->dim, read->weighted);
	if (!SharedMemoryHasRoom(read->bytes))
		return false;
	shared = ReadSegmentCreate(read, context);
	if (shared == NULL)
		return false;

	memset(&ring, 0, sizeof(ring));
	ring.base = (char *) shared;
	ring.bytes = read->bytes;
	ring.first = KM_READ_HEADER_BYTES;
	ring.block_bytes = shared->block_bytes;
	ring.rows_offset = KM_READ_ALIGN;
	ring.weights_offset = WeightsOffset(read->block_rows, read->dim);
	ring.block_rows = read->block_rows;
	ring.nblocks = read->nblocks;
	ring.failed = &shared->ring_failed;
	if (!KmGpuSinkDrainStart(sink, &ring))
	{
		KmParallelReadRelease(read);
		return false;
	}
	read->drain = sink;

	skipped = ReadQueryRun(read, shared);
	read->drain = NULL;
	ok = KmGpuSinkDrainFinish(sink, positive_weight);
	KmParallelReadRelease(read);
	if (ok)
		*n_skipped = skipped;
	return ok;
}

/*
 * What the read took, for kmeans_gpu.verbose: the processes (the leader
 * included when it read rows), the shared memory's size, the time to create
 * it and the time of the query.
 */
char *
KmParallelReadReport(const KmParallelRead *read)
{
	return psprintf("%d processes, %.0f MB of shared memory made in %.3f s%s, the query %.3f s",
					read->processes, (double) read->bytes / (1024.0 * 1024.0),
					(double) read->create_us / 1e6,
					read->ring ? " (a ring drained to the GPU during the query)" : "",
					(double) read->query_us / 1e6);
}

/*
 * Give the segment back: the rows gathered from it must no longer be used
 * (a matrix that borrowed them forgets them with KmMatrixReleaseRows).
 */
void
KmParallelReadRelease(KmParallelRead *read)
{
	if (read->seg != NULL)
		dsm_detach(read->seg);	/* ReadForget clears read->seg */
}
