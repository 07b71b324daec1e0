/*
 * driver.cuh
 *	  The host side of the CUDA engine: the API table, lazy CUDA start and
 *	  error mapping (api.cu), rows streamed to the device (dataset.cu), the
 *	  memory of a call (workspace.cu), and the drivers of a fit (fit.cu), of
 *	  a fit split over devices, streamed or in half precision (split.cu), of
 *	  assign and map (labels.cu), and of k-medoids (kmedoids.cu).
 */
#ifndef KMG_DRIVER_CUH
#define KMG_DRIVER_CUH

#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "seed/seed.cuh"
#include "update/update.cuh"

/* ---- api.cu: state, errors, host memory ---- */
/* Every API entry: refuse after a sticky error, start CUDA lazily. */
km_status	kmg_begin(km_error *err);
const kmg_device *kmg_dev(void);
/* The device of later calls (as set_device); the caller restores its own. */
km_status	kmg_use_device(int ordinal, km_error *err);
/* assign or map on host rows, in batches that fit the device in use */
km_status	kmg_engine_batches(const km_data *data, const float *centroids, int k,
							   km_metric metric, int32_t *labels, double *distances,
							   km_partial *partial, const km_hooks *hooks, km_error *err);
cudaError_t kmg_device_limits(int ordinal, kmg_device *dev);
double		kmg_now(void);			/* seconds, monotonic */

/* Fill err from a failed CUDA call (sticky errors mark the device broken). */
km_status	kmg_cuda_error(km_error *err, cudaError_t e, const char *what);
km_status	kmg_set_error(km_error *err, km_status status, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* Host memory through the caller's hooks when given. */
void	   *kmg_host_alloc(const km_hooks *hooks, size_t size);
void		kmg_host_free(const km_hooks *hooks, void *p);

/* Checks a CUDA call inside a driver with a km_status st and a done: label. */
#define KMG_CK(call) \
	do { \
		cudaError_t kmg_e_ = (call); \
		if (kmg_e_ != cudaSuccess) \
		{ \
			st = kmg_cuda_error(err, kmg_e_, #call); \
			goto done; \
		} \
	} while (0)

/* ---- dataset.cu ---- */
km_gpu_dataset *kmg_ds_create(int d, int weighted, int64_t expected_rows, int internal,
							  km_error *err);
float	   *kmg_ds_stage(km_gpu_dataset *ds, int64_t *room, float **weights, km_error *err);
km_status	kmg_ds_commit(km_gpu_dataset *ds, int64_t rows, km_error *err);
km_status	kmg_ds_sync(km_gpu_dataset *ds, km_error *err);
km_status	kmg_ds_load(km_gpu_dataset *ds, const km_data *data, int64_t row0, int64_t rows,
						km_error *err);
void		kmg_ds_reset(km_gpu_dataset *ds);
km_status	kmg_ds_drain_start(km_gpu_dataset *ds, const km_ring *ring, km_error *err);
km_status	kmg_ds_drain_finish(km_gpu_dataset *ds, int *positive_weight, km_error *err);
void		kmg_ds_drain_stop(km_gpu_dataset *ds);
void		kmg_ds_free(km_gpu_dataset *ds);
void		kmg_ds_free_all(void);
int64_t		kmg_ds_rows(const km_gpu_dataset *ds);
uint64_t	kmg_ds_bytes(int64_t rows, int d, int weighted);

/* Rows on the device as the drivers see them. */
typedef struct kmg_rows
{
	float	   *X;				/* n x dp raw rows */
	const float *W;
	int64_t		n;
	int			d;
	int			dp;
	int			in_place;		/* cosine may normalise X itself */
} kmg_rows;
void		kmg_ds_rows_view(km_gpu_dataset *ds, kmg_rows *rows);

/* ---- workspace.cu: the memory of a call ---- */
/* The shape of a call and the buffers it needs. */
typedef struct kmg_shape
{
	int64_t		n;
	int			d;
	int			dp;
	int			k;
	int			kp;
	int			cosine;
	int			fit;			/* fit (else assign/map) */
	int			copy_rows;		/* cosine into a separate copy */
	int			hashes;			/* random or k-means++ seeding */
	int			pp;				/* k-means++ */
	int			L;				/* k-means++ candidates per step */
	int			sums;			/* map: per-cluster sums */
	int			max_iter;
	kmg_assign_plan plan;		/* the assignment kernels (assign/dispatch.cu) */
	int			centrable;		/* l2 on a fused pass that centres (narrow, wide) */
	int			bounds;			/* a fit's iterations skip rows by bounds (assign/bounds.cu) */
	int			running;		/* a fit's iterations keep running sums (update/running.cu) */
	size_t		sort_bytes;
	int			seed_blocks;
	int			dq;				/* k-means++ int8 shadow row bytes; 0: none */
} kmg_shape;

typedef struct kmg_work
{
	kmg_args	a;
	float	   *Xn;				/* cosine copy, or NULL */
	int32_t    *iota;
	double	   *keys_out;
	int32_t    *rows_out;
	void	   *sort_temp;
	void	   *filter_work;
	float	   *xscratch;		/* k floats */
	float	   *mu;				/* dp floats: the centring, when centrable */
	unsigned short *xh;			/* the float16 screen's copy of the rows (a.Xh once made), or NULL */
	uint8_t    *xb;				/* the byte copy of the rows (a.Xb once found exact), or NULL */
	void	   *stats_work;
	kmg_seed_bufs sb;
	kmg_running rs;				/* a bounded fit's running sums (rs.on: in use) */
	int			pp_shift;		/* scale of the k-means++ potentials (seed_pp.h) */
} kmg_work;

void		kmg_make_shape(kmg_shape *sh, int64_t n, int d, int k, int cosine, int fit,
						   int copy_rows, const km_params *params, int sums, const kmg_device *dev);
void		kmg_shape_without_rows16(kmg_shape *sh);
size_t		kmg_layout(const kmg_shape *sh, char *base, kmg_work *w);
cudaError_t kmg_rows_setup(const kmg_shape *sh, kmg_work *w, int fit, cudaStream_t s);
km_status	kmg_alloc_arena(void **arena, size_t bytes, const char *what, km_error *err);
uint64_t	kmg_fit_bytes(int64_t n, int d, int k, km_metric metric, int copy_rows);
uint64_t	kmg_assign_bytes(int64_t batch_rows, int d, int k);

/* ---- fit.cu ---- */
km_status	kmg_fit_rows(const kmg_rows *rows, const km_params *params, const km_hooks *hooks,
						 km_result *result, km_error *err);

/* ---- split.cu: fits spread over devices, out of core, in half precision ---- */
km_status	kmg_split_plan(int64_t n, int d, int k, km_metric metric, int weighted,
						   const km_gpu_layout *layout, km_gpu_split *split, km_error *err);
km_status	kmg_split_fit(const km_data *data, const km_params *params,
						  const km_gpu_layout *layout, const km_hooks *hooks, km_result *result,
						  km_error *err);
km_status	kmg_split_assign(const km_data *data, const float *centroids, int k,
							 km_metric metric, const km_gpu_layout *layout, int32_t *labels,
							 double *distances, const km_hooks *hooks, km_error *err);
double		kmg_split_copy_rate(int ordinal, km_error *err);

/* ---- labels.cu ---- */
cudaError_t kmg_enqueue_labels(const kmg_shape *sh, const kmg_work *w, cudaStream_t s);
km_status	kmg_assign_rows(const kmg_rows *rows, const float *centroids, int k,
							km_metric metric, int32_t *labels, double *distances,
							km_partial *partial, const km_hooks *hooks, km_error *err);

/* ---- kmedoids.cu: k-medoids rows on the device, the steps, the silhouette ---- */
uint64_t	kmg_kmd_device_bytes(const kmd_data *data, int k, kmd_metric metric);
size_t		kmg_kmd_host_bytes(const kmd_data *data, int k, kmd_metric metric);
km_gpu_kmd *kmg_kmd_open(const kmd_data *data, kmd_metric metric, double alpha, int k,
						 const km_hooks *hooks, km_error *err);
void		kmg_kmd_steps(km_gpu_kmd *h, kmd_steps *steps);
void		kmg_kmd_close(km_gpu_kmd *h);
void		kmg_kmd_free_all(void);
km_status	kmg_kmd_silhouette_rows(const kmd_data *data, const int32_t *labels, int k,
									kmd_metric metric, double alpha, double *mean,
									const km_hooks *hooks, km_error *err);

#endif							/* KMG_DRIVER_CUH */
