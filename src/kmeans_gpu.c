/*
 * kmeans_gpu.c
 *	  Module entry point: k-means clustering inside PostgreSQL.
 *
 * Loading the module only defines settings and a transaction callback.  No
 * engine runs and no GPU is touched until a function is called, so loading
 * it in the postmaster (shared_preload_libraries) is harmless.
 */
#include "postgres.h"

#include "fmgr.h"

#include "kmeans_gpu.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Set up each module's share of the extension.
 */
void
_PG_init(void)
{
	KmGucInit();
	KmSpillInit();
	KmParallelReadInit();
}
