/*
 * ref_kmeans.h
 *	  Plain C reference of a fit (see ref_kmeans.c), for bench_engine.cu.
 */
#ifndef REF_KMEANS_H
#define REF_KMEANS_H

#include <stdint.h>

#include "kmeans_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ref_result
{
	float	   *centroids;		/* k * d */
	int64_t    *sizes;
	double	   *cluster_inertia;
	int32_t    *labels;			/* n, or NULL */
	double		inertia;
	int			iterations;
	int			converged;
	int			best_run;
	int			relocated;
} ref_result;

int			ref_fit(const float *x, const float *w, int64_t n, int d, const km_params *p,
					ref_result *out);
void		ref_assign(const float *xf, int64_t n, int d, const float *C, int k, int cosine,
					   int32_t *labels, double *cost);
float	   *ref_rows(const float *x, int64_t n, int d, int cosine);
void		ref_seeds(const float *x, const float *w, int64_t n, int d, const km_params *p,
					  int run, float *C, double *phis);

#ifdef __cplusplus
}
#endif

#endif
