/*
 * guc.c
 *	  The kmeans_gpu.* settings.
 */
#include "postgres.h"

#include <unistd.h>
#include <limits.h>

#include "utils/guc.h"

#include "kmeans_gpu.h"

int			kmeans_engine_choice = KM_ENGINE_AUTO;
int			kmeans_max_memory_kb = 8 * 1024 * 1024;	/* 8 GB */
bool		kmeans_verbose = false;
int			kmeans_cpu_threads = 0;
int			kmeans_spill_threshold_kb = 256 * 1024;	/* 256 MB */
int			kmeans_gpu_device = 0;
int			kmeans_gpu_wait_ms = 60000;

static const struct config_enum_entry engine_options[] = {
	{"auto", KM_ENGINE_AUTO, false},
	{"cpu", KM_ENGINE_CPU, false},
	{"gpu", KM_ENGINE_GPU, false},
	{NULL, 0, false}
};

/*
 * Define the settings.  Memory is in kB like work_mem; the spill threshold
 * stays below the 1 GB limit of a bytea.
 */
void
KmGucInit(void)
{
	DefineCustomEnumVariable("kmeans_gpu.engine",
							 "Engine that runs k-means: auto, cpu or gpu.",
							 "auto uses the GPU when one is usable and the data fits, else the CPU.",
							 &kmeans_engine_choice, KM_ENGINE_AUTO, engine_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.max_memory",
							"Largest amount of memory one k-means call may use.",
							"Covers the rows, the engine's working memory and the result; checked before allocating.",
							&kmeans_max_memory_kb, 8 * 1024 * 1024, 1024, MAX_KILOBYTES,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);

	DefineCustomBoolVariable("kmeans_gpu.verbose",
							 "Reports the progress of each k-means run as INFO messages.",
							 NULL,
							 &kmeans_verbose, false,
							 PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.cpu_threads",
							"Threads of the CPU engine (0: one per processor).",
							NULL,
							&kmeans_cpu_threads, 0, 0, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.spill_threshold",
							"Partial aggregate states larger than this pass between parallel processes through temporary files.",
							"A bytea holds at most 1 GB, so larger states must go through files.",
							&kmeans_spill_threshold_kb, 256 * 1024, 0, 1024 * 1024 - 1024,
							PGC_USERSET, GUC_UNIT_KB | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.device",
							"GPU the GPU engine uses, numbered as kmeans_gpu_devices() lists them.",
							NULL,
							&kmeans_gpu_device, 0, 0, 255,
							PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.gpu_wait",
							"Longest wait for GPU memory under kmeans_gpu.engine 'gpu' while other sessions' fits hold it.",
							"0 fails at once when the GPU lacks the memory.",
							&kmeans_gpu_wait_ms, 60000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.shard_retries",
							"Times kmeans_fit_sharded tries a failed call on the shards again.",
							"Each try uses fresh connections, which with a multi-host conninfo reach a standby.",
							&kmeans_shard_retries, 3, 0, 100,
							PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.shard_idle_timeout",
							"How long a shard keeps the rows of a fit whose coordinator stopped calling.",
							"Closes the idle connection holding them (idle_session_timeout); 0 keeps them until it closes.",
							&kmeans_shard_idle_timeout_ms, 5 * 60 * 1000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);

#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("kmeans_gpu");
#else
	EmitWarningsOnPlaceholders("kmeans_gpu");
#endif
}

/* kmeans_gpu.engine */
KmEngineChoice
KmEngineSetting(void)
{
	return (KmEngineChoice) kmeans_engine_choice;
}

/*
 * The engine called name in kmeans_gpu.engine's list (any case, as the
 * setting itself), or -1.
 */
int
KmEngineByName(const char *name)
{
	for (const struct config_enum_entry *e = engine_options; e->name != NULL; e++)
		if (pg_strcasecmp(e->name, name) == 0)
			return e->val;
	return -1;
}

/* kmeans_gpu.max_memory in bytes. */
Size
KmMaxMemoryBytes(void)
{
	return (Size) kmeans_max_memory_kb * 1024;
}

/* Threads for the CPU engine: the setting, or one per online processor. */
int
KmCpuThreads(void)
{
	long		ncpu;

	if (kmeans_cpu_threads > 0)
		return kmeans_cpu_threads;
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 1)
		return 1;
	return (int) Min(ncpu, 1024);
}
