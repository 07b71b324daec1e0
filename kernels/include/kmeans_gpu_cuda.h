/*
 * kmeans_gpu_cuda.h
 *	  The C interface of kmeans_gpu_cuda.so, the CUDA engine.
 *
 * kmeans_gpu.so never links CUDA: the SQL layer dlopen()s this object the
 * first time a backend wants a GPU, looks up km_gpu_get_api() and talks to it
 * only through the table below.  Nothing here touches CUDA until a function
 * of the table is called, so loading the object is harmless anywhere, and
 * CUDA is initialised in the backend that first calls it, never in the
 * postmaster.
 *
 * Every function returns or fills a km_error; none aborts or prints.  A
 * status of KM_ERR_DEVICE_FATAL means the CUDA context is broken (a sticky
 * error); the caller stops using the device for the rest of the process.
 * Device memory is released before a call returns, whatever it returns,
 * except what a live km_gpu_dataset or km_gpu_kmd holds; release_all()
 * frees those too.
 */
#ifndef KMEANS_GPU_CUDA_H
#define KMEANS_GPU_CUDA_H

#include "kmeans_engine.h"
#include "kmedoids_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KM_GPU_ABI 4

/* Logical devices a split fit spreads its rows over, at most. */
#define KM_GPU_MAX_DEVICES 16

/* How rows are kept on the devices, and streamed to them. */
typedef enum km_storage
{
	KM_STORAGE_FLOAT32 = 0,
	KM_STORAGE_FLOAT16 = 1,		/* IEEE binary16: the values must be exactly representable */
	KM_STORAGE_BFLOAT16 = 2		/* bfloat16: likewise */
} km_storage;

/*
 * Where the rows of a split fit go.  Logical devices are CUDA ordinals; one
 * may be listed twice ('0,0': two logical devices on one GPU, so that the
 * split and combine run on a one-GPU machine).  memory_limit caps what one
 * logical device may take (0: the device's free memory, shared equally by
 * the logical devices on it).  out_of_core: the rows stay in host memory and
 * are streamed through the devices every iteration; otherwise they are
 * uploaded once and must fit.
 */
typedef struct km_gpu_layout
{
	int			ndevices;
	int			devices[KM_GPU_MAX_DEVICES];
	uint64_t	memory_limit;
	km_storage	storage;
	int			out_of_core;
} km_gpu_layout;

/* How a split fit of a given shape would be laid out (split_plan). */
typedef struct km_gpu_split
{
	int64_t		rows[KM_GPU_MAX_DEVICES];	/* rows each logical device takes */
	uint64_t	device_bytes[KM_GPU_MAX_DEVICES];	/* device memory each needs */
	uint64_t	budget[KM_GPU_MAX_DEVICES]; /* what each may use (limit or free memory) */
	int64_t		chunk_rows;		/* rows per step of work on a device (out of core: per copy) */
	uint64_t	pinned_bytes;	/* host memory the fit pins or allocates pinned */
} km_gpu_split;

typedef struct km_gpu_device
{
	int			ordinal;
	char		name[128];
	uint64_t	total_bytes;
	uint64_t	free_bytes;
	int			cc_major;
	int			cc_minor;
	int			multiprocessors;
} km_gpu_device;

/* Rows being streamed to the device, in the order they were staged. */
typedef struct km_gpu_dataset km_gpu_dataset;

/*
 * A ring of host blocks that other processes fill with rows while a dataset
 * drains them to the device (kmeans_fit's parallel read, parallel_read.c).
 * The ring lies in memory those processes share: block b begins at
 * base + first + b * block_bytes with a km_ring_block, its rows (up to
 * block_rows rows of d floats) at rows_offset from there and, for a weighted
 * dataset, their weights at weights_offset.  A writer takes a FREE block
 * by compare-and-swap (FILLING), writes rows and counts them in n, and once
 * the block is full stores FULL with release order; the drain copies FULL
 * blocks to the device and hands them back FREE, n 0.  Blocks still FILLING
 * when every writer is done are drained by dataset_drain_finish.  When the
 * drain stops on an error it sets *failed, and writers stop writing.
 */
#define KM_RING_FREE 0u
#define KM_RING_FILLING 1u
#define KM_RING_FULL 2u
#define KM_RING_COPYING 3u			/* the drain's own: its copy is in flight */

typedef struct km_ring_block
{
	uint32_t	state;			/* KM_RING_*, read and written atomically */
	uint32_t	positive_weight;	/* a row of the block weighs more than 0 */
	int64_t		n;				/* rows written */
} km_ring_block;

typedef struct km_ring
{
	char	   *base;			/* the shared mapping (registered with CUDA for the copies) */
	size_t		bytes;
	size_t		first;			/* offset of block 0 */
	size_t		block_bytes;
	size_t		rows_offset;
	size_t		weights_offset;
	int64_t		block_rows;
	uint32_t	nblocks;
	uint32_t   *failed;			/* in the shared memory: the drain stopped */
} km_ring;

/* The rows of a k-medoids fit on the device (kmd_open). */
typedef struct km_gpu_kmd km_gpu_kmd;

typedef struct km_gpu_api
{
	int			abi;			/* KM_GPU_ABI */

	/* Devices this process can use; 0 and an error when none. */
	int			(*device_count) (km_error *error);
	km_status	(*device_info) (int ordinal, km_gpu_device *out, km_error *error);

	/* The device later calls from this process use. */
	km_status	(*set_device) (int ordinal, km_error *error);

	/*
	 * Device bytes a fit of n rows needs (data included), so that callers can
	 * check before allocating.  assign_device_bytes likewise for assign/map
	 * over batches of batch_rows rows.
	 */
	uint64_t	(*fit_device_bytes) (int64_t n, int d, int k, km_metric metric);
	uint64_t	(*assign_device_bytes) (int64_t batch_rows, int d, int k);

	/* fit, assign and map on host rows (uploaded per call). */
	const km_engine *engine;

	/*
	 * Streaming load.  dataset_create reserves device room for about
	 * expected_rows rows (it grows when more come).  dataset_stage returns a
	 * pinned host buffer with room for *room rows of d floats (and, when the
	 * dataset is weighted, *weights for as many weights); the caller writes
	 * rows there and hands them over with dataset_commit, which starts an
	 * asynchronous copy and returns while it runs, so the scan goes on while
	 * the data moves.  dataset_fit runs a fit on everything committed.
	 */
	km_gpu_dataset *(*dataset_create) (int d, int weighted, int64_t expected_rows,
									   km_error *error);
	float	   *(*dataset_stage) (km_gpu_dataset *ds, int64_t *room,
								  float **weights, km_error *error);
	km_status	(*dataset_commit) (km_gpu_dataset *ds, int64_t rows, km_error *error);
	int64_t		(*dataset_rows) (const km_gpu_dataset *ds);
	km_status	(*dataset_fit) (km_gpu_dataset *ds, const km_params *params,
								const km_hooks *hooks, km_result *result,
								km_error *error);
	void		(*dataset_free) (km_gpu_dataset *ds);

	/* Free every device and pinned allocation this process holds. */
	void		(*release_all) (void);

	/*
	 * k-medoids (kmedoids_engine.h).  kmd_open uploads the rows of data once
	 * (and computes what each row contributes on its own), with room for k
	 * medoids; kmd_steps_of gives the two steps of the alternating method on
	 * them, for kmd_alternate(): labels, distances and scores bit for bit
	 * the CPU engine's.  The steps poll hooks->poll between launches and
	 * report their errors into the km_error given to kmd_open (which must
	 * outlive the handle).  kmd_close frees the handle's device and host
	 * memory.  kmd_device_bytes and kmd_host_bytes are what a handle (or a
	 * silhouette) on data takes, for the caller's checks; 0 for data the
	 * engine does not take.  kmd_silhouette is kmd_engine.silhouette on the
	 * device (the rows uploaded for the call).
	 */
	uint64_t	(*kmd_device_bytes) (const kmd_data *data, int k, kmd_metric metric);
	size_t		(*kmd_host_bytes) (const kmd_data *data, int k, kmd_metric metric);
	km_gpu_kmd *(*kmd_open) (const kmd_data *data, kmd_metric metric, double alpha, int k,
							 const km_hooks *hooks, km_error *error);
	void		(*kmd_steps_of) (km_gpu_kmd *kmd, kmd_steps *steps);
	void		(*kmd_close) (km_gpu_kmd *kmd);
	km_status	(*kmd_silhouette) (const kmd_data *data, const int32_t *labels, int k,
								   kmd_metric metric, double alpha, double *mean,
								   const km_hooks *hooks, km_error *error);

	/*
	 * Split fits: rows spread over several (logical) devices, streamed from
	 * host memory every iteration, or kept in half precision (driver/split.cu).
	 *
	 * split_plan lays n rows of d values (weighted or not) out as layout
	 * says and fills split; KM_ERR_DEVICE_NOMEM (split filled all the same)
	 * when some device lacks the memory: in memory, for its rows and its
	 * working set; out of core, for the working set of a chunk of at least
	 * 4096 rows.  Without a usable device it plans for the memory_limit of
	 * layout (KM_ERR_UNAVAILABLE when that is 0).
	 *
	 * split_fit fits host rows from explicit start centroids
	 * (params->init == KM_INIT_EXPLICIT, n_init == 1): each device labels
	 * its rows exactly and sums them exactly (km_xsum.h levels), the sums
	 * of all devices are added (exactly), and the host moves the centroids
	 * and re-seeds empty clusters by the CPU engine's rules.  So the model
	 * is the CPU engine's, bit for bit, for the same rows and start, on any
	 * number of devices, in memory or out of core.  With storage float16 or
	 * bfloat16 every value of data must be exactly representable in it (the
	 * SQL layer rounds them when it reads them); KM_ERR_INVALID otherwise.
	 *
	 * split_assign labels host rows (and their distances) with the rows
	 * spread over the devices of layout, as engine->assign does on one.
	 *
	 * copy_rate is the host-to-device rate from pinned memory, in bytes per
	 * second, measured once per process on device ordinal (0 on failure).
	 */
	km_status	(*split_plan) (int64_t n, int d, int k, km_metric metric, int weighted,
							   const km_gpu_layout *layout, km_gpu_split *split,
							   km_error *error);
	km_status	(*split_fit) (const km_data *data, const km_params *params,
							  const km_gpu_layout *layout, const km_hooks *hooks,
							  km_result *result, km_error *error);
	km_status	(*split_assign) (const km_data *data, const float *centroids, int k,
								 km_metric metric, const km_gpu_layout *layout,
								 int32_t *labels, double *distances, const km_hooks *hooks,
								 km_error *error);
	double		(*copy_rate) (int ordinal, km_error *error);

	/*
	 * Draining a ring into a dataset (km_ring above).  dataset_drain_start
	 * registers the ring's memory with CUDA and starts a thread of this
	 * process (every signal blocked, no call but CUDA's) that copies each
	 * FULL block to the end of the dataset's rows as soon as it is full;
	 * the caller's thread is free meanwhile, and the caller must not stage
	 * or commit rows of its own until the drain ends.  Once every writer
	 * is done, dataset_drain_finish copies what is left (blocks FILLING
	 * with rows too), waits for the copies, stops the thread and releases
	 * the registration; *positive_weight says whether a drained row
	 * weighed more than 0.  dataset_drain_stop ends a drain without waiting
	 * for its rows (on an error, before the ring's memory goes away); it
	 * does nothing when no drain runs, and dataset_free calls it too.
	 * dataset_drain_start fails with KM_ERR_UNAVAILABLE, the dataset
	 * untouched, when CUDA cannot register the ring's memory.
	 */
	km_status	(*dataset_drain_start) (km_gpu_dataset *ds, const km_ring *ring,
										km_error *error);
	km_status	(*dataset_drain_finish) (km_gpu_dataset *ds, int *positive_weight,
										 km_error *error);
	void		(*dataset_drain_stop) (km_gpu_dataset *ds);
} km_gpu_api;

/* The one symbol kmeans_gpu_cuda.so exports. */
const km_gpu_api *km_gpu_get_api(void);

#ifdef __cplusplus
}
#endif

#endif							/* KMEANS_GPU_CUDA_H */
