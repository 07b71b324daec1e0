/*
 * medoids.cuh
 *	  The k-medoids kernels of the CUDA engine: what they take and their
 *	  launchers (the .cu files of kernels/medoids/), for the driver
 *	  (driver/kmedoids.cu) and the harness (bench/bench_medoids.cu).
 *
 * Every distance is kmd_pair() of src/include/kmd_metric.h, bit for bit:
 * the same double operations in the same order, each one correctly
 * rounded (__dadd_rn, __dmul_rn, __fma_rn where the CPU's own kernel fuses,
 * see tile.cuh), so that labels, scores, the chosen medoids, costs and the
 * silhouette are the CPU engine's to the last bit.  Every sum is taken in
 * the CPU engine's order: a row's sum over other rows in row order, by one
 * thread; no floating-point atomics.
 *
 * The families, each a grid of 64 x 64 distance tiles (tile.cuh) followed by
 * a walk of each tile row in column order by one thread:
 *	- rows.cu: each row's aux (kmd_aux: |x|^2, or Q(X, X) for sqfd);
 *	- assign.cu: each row's nearest medoid and its distance, ties to the
 *	  lowest cluster id; the medoids may be split over blocks when rows are
 *	  few, the blocks' answers then merged (an argmin: any order);
 *	- sums.cu: the score (each member's sum of distances to the other
 *	  members of its cluster, by items of up to 64 members against their
 *	  whole cluster, all clusters in one launch, heaviest items first), and
 *	  the silhouette (each row against every row, grouped by cluster, then
 *	  its s_i).
 */
#ifndef KMG_MEDOIDS_CUH
#define KMG_MEDOIDS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kmedoids_engine.h"

/* Rows (and columns) of a distance tile; threads of every k-medoids kernel. */
#define KMG_KMD_T	64
#define KMG_KMD_NT	256

/* The k-medoids rows on the device. */
typedef struct kmg_kmd_rows
{
	const float *X;				/* dense: n x d; sqfd: every row's features, in row order */
	const int64_t *off;			/* sqfd: n offsets (floats) into X; else NULL */
	const int32_t *m;			/* sqfd: n feature counts; else NULL */
	const double *aux;			/* n: kmd_aux of each row (0 for l1) */
	int64_t		n;
	int			d;				/* values per row, or per feature (sqfd) */
	int			metric;			/* KMD_L2 ... KMD_SQFD */
	double		alpha;			/* sqfd */
} kmg_kmd_rows;

/*
 * A score item: the members at positions [a0, a0 + na) of the member list
 * (na <= KMG_KMD_T), each summed over positions [b0, b1), its cluster.
 */
typedef struct kmg_kmd_item
{
	int32_t		a0;
	int32_t		na;
	int32_t		b0;
	int32_t		b1;
} kmg_kmd_item;

/* rows.cu: aux[i] = kmd_aux of row i, every row (R.aux is ignored). */
cudaError_t kmg_kmd_aux(const kmg_kmd_rows *R, double *aux, cudaStream_t s);

/*
 * assign.cu: rows [row0, row0 + nrows) against the k medoids (row indices):
 * labels[i] and dist[i] for absolute row i.  splits > 1 cuts the medoids
 * into that many ranges (blocks of KMG_KMD_T medoids each), their answers
 * merged through part_d / part_j (splits x nrows entries).
 */
cudaError_t kmg_kmd_assign(const kmg_kmd_rows *R, const int32_t *medoids, int k,
						   int64_t row0, int64_t nrows, int splits, double *part_d,
						   int32_t *part_j, int32_t *labels, double *dist, cudaStream_t s);

/* How many medoid ranges a launch of nrows rows should take (assign.cu). */
int			kmg_kmd_assign_splits(int64_t nrows, int k, int sms, int64_t part_cap);

/*
 * sums.cu, the score: for every item, sums[p] for its members' positions p
 * (members: row indices, cluster after cluster, each in row order).
 */
cudaError_t kmg_kmd_score(const kmg_kmd_rows *R, const int32_t *members,
						  const kmg_kmd_item *items, int nitems, double *sums,
						  cudaStream_t s);

/*
 * sums.cu, the silhouette of rows [row0, row0 + nrows): sil[i] = s_i, from
 * every row's distance to every member (members: all n rows, cluster after
 * cluster, each in row order; labels and sizes per row and per cluster).
 */
cudaError_t kmg_kmd_silhouette(const kmg_kmd_rows *R, const int32_t *members,
							   const int32_t *labels, const int64_t *sizes,
							   int64_t row0, int64_t nrows, double *sil, cudaStream_t s);

#endif							/* KMG_MEDOIDS_CUH */
