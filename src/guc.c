/*
 * guc.c
 *	  The kmeans_gpu.* settings.
 *
 * kmeans_gpu.devices is a list, checked when it is set (a GPU-less machine
 * accepts any well-formed list: ordinals are resolved against the devices a
 * backend sees only when a GPU is used, gpu_plan.c).  kmeans_gpu.device,
 * the one-device setting of 0.1, stays as a deprecated alias: -1 (its new
 * default) leaves kmeans_gpu.devices in charge; any other value means that
 * one device, whatever kmeans_gpu.devices says, so that a postgresql.conf
 * written for 0.1 keeps its meaning.
 */
#include "postgres.h"

#include <ctype.h>
#include <unistd.h>
#include <limits.h>

#include "utils/guc.h"

#include "kmeans_gpu.h"

int			kmeans_engine_choice = KM_ENGINE_AUTO;
int			kmeans_max_memory_kb = 8 * 1024 * 1024;	/* 8 GB */
bool		kmeans_verbose = false;
int			kmeans_cpu_threads = 0;
int			kmeans_spill_threshold_kb = 256 * 1024;	/* 256 MB */
int			kmeans_gpu_device = -1;
char	   *kmeans_gpu_devices_string = NULL;
int			kmeans_gpu_memory_limit_mb = 0;
int			kmeans_gpu_wait_ms = 60000;
int			kmeans_read_workers = -1;

/* The highest CUDA ordinal a setting may name (as kmeans_gpu.device did in 0.1). */
#define KM_GPU_MAX_ORDINAL 255

/* kmeans_gpu.devices as its check hook parsed it (the setting's "extra"). */
static KmDeviceList *devices_parsed = NULL;

static const struct config_enum_entry engine_options[] = {
	{"auto", KM_ENGINE_AUTO, false},
	{"cpu", KM_ENGINE_CPU, false},
	{"gpu", KM_ENGINE_GPU, false},
	{NULL, 0, false}
};

/*
 * Parse a kmeans_gpu.devices value into list: 'all', or a comma-separated
 * list of ordinals (spaces allowed around each; repeats allowed: '0,0' is
 * two logical devices on one GPU).  On a bad value, sets the check hook's
 * message and returns false.
 */
static bool
ParseDevices(const char *value, KmDeviceList *list)
{
	const char *p = value;

	memset(list, 0, sizeof(*list));
	list->setting = "kmeans_gpu.devices";
	while (isspace((unsigned char) *p))
		p++;
	if (pg_strncasecmp(p, "all", 3) == 0)
	{
		const char *q = p + 3;

		while (isspace((unsigned char) *q))
			q++;
		if (*q == '\0')
		{
			list->all = true;
			return true;
		}
	}
	for (;;)
	{
		long		ordinal = 0;
		int			digits = 0;
		const char *start;

		while (isspace((unsigned char) *p))
			p++;
		start = p;
		while (isdigit((unsigned char) *p))
		{
			if (ordinal <= KM_GPU_MAX_ORDINAL)
				ordinal = ordinal * 10 + (*p - '0');
			digits++;
			p++;
		}
		while (isspace((unsigned char) *p))
			p++;
		if (digits == 0 || (*p != ',' && *p != '\0'))
		{
			GUC_check_errmsg("invalid value for kmeans_gpu.devices: \"%s\"", value);
			GUC_check_errdetail("Give 'all', or GPU numbers separated by commas, as in '0' or '0,1,3'.");
			return false;
		}
		if (ordinal > KM_GPU_MAX_ORDINAL)
		{
			GUC_check_errmsg("kmeans_gpu.devices names GPU %.*s, beyond the largest GPU number, %d",
							 digits, start, KM_GPU_MAX_ORDINAL);
			return false;
		}
		if (list->ndevices == KM_GPU_MAX_DEVICES)
		{
			GUC_check_errmsg("kmeans_gpu.devices lists more than %d devices", KM_GPU_MAX_DEVICES);
			GUC_check_errdetail("A fit spreads over at most %d logical devices.", KM_GPU_MAX_DEVICES);
			return false;
		}
		list->devices[list->ndevices++] = (int) ordinal;
		if (*p == '\0')
			return true;
		p++;					/* the comma */
	}
}

/* kmeans_gpu.devices' check hook: parse once, keep the list as extra. */
static bool
CheckDevices(char **newval, void **extra, GucSource source)
{
	KmDeviceList list;
	KmDeviceList *copy;

	if (*newval == NULL || !ParseDevices(*newval, &list))
		return false;
	copy = malloc(sizeof(KmDeviceList));	/* GUC extras are malloc'd */
	if (copy == NULL)
		return false;
	*copy = list;
	*extra = copy;
	return true;
}

static void
AssignDevices(const char *newval, void *extra)
{
	devices_parsed = (KmDeviceList *) extra;
}

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

	DefineCustomStringVariable("kmeans_gpu.devices",
							   "GPUs a fit spreads its rows over: 'all', or numbers as kmeans_gpu_devices() lists them, such as '0,1,3'.",
							   "A number may repeat ('0,0': two logical devices on one GPU).",
							   &kmeans_gpu_devices_string, "0",
							   PGC_USERSET, 0, CheckDevices, AssignDevices, NULL);

	DefineCustomIntVariable("kmeans_gpu.device",
							"Deprecated: the one GPU to use, overriding kmeans_gpu.devices; -1 leaves kmeans_gpu.devices in charge.",
							"Kept so that settings written for kmeans_gpu 0.1 keep working; use kmeans_gpu.devices.",
							&kmeans_gpu_device, -1, -1, KM_GPU_MAX_ORDINAL,
							PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("kmeans_gpu.gpu_memory_limit",
							"Most GPU memory one fit may use on each device (0: the device's free memory).",
							"A fit that needs more keeps its rows in host memory and streams them through the GPU.",
							&kmeans_gpu_memory_limit_mb, 0, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MB, NULL, NULL, NULL);

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

	DefineCustomIntVariable("kmeans_gpu.read_workers",
							"Parallel workers kmeans_fit asks for to read a table (-1: as PostgreSQL plans any query; 0: none).",
							"The workers write the rows into shared memory; they come from max_parallel_workers.",
							&kmeans_read_workers, -1, -1, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);

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

/*
 * The devices the settings name: kmeans_gpu.device when it is set (the
 * deprecated alias wins, as a 0.1 postgresql.conf means it to), else
 * kmeans_gpu.devices.
 */
void
KmDeviceSetting(KmDeviceList *out)
{
	if (kmeans_gpu_device >= 0)
	{
		memset(out, 0, sizeof(*out));
		out->ndevices = 1;
		out->devices[0] = kmeans_gpu_device;
		out->setting = "kmeans_gpu.device";
	}
	else if (devices_parsed != NULL)
		*out = *devices_parsed;
	else if (!ParseDevices("0", out))	/* before the assign hook ran */
		elog(ERROR, "kmeans_gpu.devices has no value. Please report a bug.");
}

/* kmeans_gpu.gpu_memory_limit in bytes; 0: the device's free memory. */
uint64
KmGpuMemoryLimitBytes(void)
{
	return (uint64) kmeans_gpu_memory_limit_mb * 1024 * 1024;
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
