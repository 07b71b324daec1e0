/*
 * labels.cu
 *	  Labels for given centroids: the final pass of a fit, and assign and
 *	  map on rows already on the device.
 *
 * A labels pass is one kmg_assign_pass in MODE_LABELS with the call's
 * plan; the exact cost of every row to its label follows, then, for map,
 * the per-cluster sums by the same sort and pieces as an iteration's.
 */
#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "update/update.cuh"

#include <string.h>

/*
 * Queue exact labels for the current centroids on stream s: the plan's
 * labels pass, with none of the Lloyd run's bookkeeping (the stop flag is
 * ignored).
 */
cudaError_t
kmg_enqueue_labels(const kmg_shape *sh, const kmg_work *w, cudaStream_t s)
{
	kmg_args	a = w->a;

	a.lloyd = 0;
	return kmg_assign_pass(&a, &sh->plan, KMG_MODE_LABELS, w->filter_work, s);
}

/*
 * Labels, distances and/or the map step's partial sums for rows on the
 * device and k given centroids (host memory, d floats each): the call's
 * workspace, the rows prepared (the cosine copy, norms, centring), the
 * centroids' norms and filter copies, one labels pass, the exact costs,
 * then what was asked copied back (distances as km_cost_to_distance gives
 * them; partial sums added to what partial holds).
 */
km_status
kmg_assign_rows(const kmg_rows *rows, const float *centroids, int k, km_metric metric,
				int32_t *labels, double *distances, km_partial *partial,
				const km_hooks *hooks, km_error *err)
{
	const kmg_device *dev = kmg_dev();
	kmg_shape	sh;
	kmg_work	w;
	km_status	st = KM_OK;
	void	   *arena = NULL;
	cudaStream_t s = NULL;
	double	   *hcl = NULL;
	const int	cosine = metric == KM_METRIC_COSINE;
	size_t		bytes;

	memset(&w, 0, sizeof(w));
	kmg_make_shape(&sh, rows->n, rows->d, k, cosine, 0, !rows->in_place, NULL,
				   partial != NULL, dev);
	KMG_CK(kmg_assign_prepare(&sh.plan, dev));
	bytes = kmg_layout(&sh, NULL, NULL);
	if ((st = kmg_alloc_arena(&arena, bytes, "the assignment", err)) != KM_OK)
		goto done;
	kmg_layout(&sh, (char *) arena, &w);
	w.a.X = cosine && sh.copy_rows ? w.Xn : rows->X;
	w.a.W = rows->W;
	w.a.n = rows->n;
	w.a.d = rows->d;
	w.a.dp = rows->dp;
	w.a.cosine = cosine;
	w.a.lloyd = 0;
	w.a.k = k;
	w.a.kp = sh.kp;
	KMG_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	/* centroids as given (exact costs use them as they are) */
	KMG_CK(cudaMemsetAsync(w.a.C, 0, (size_t) sh.kp * sh.dp * sizeof(float), s));
	if (w.a.Cf != w.a.C)
		KMG_CK(cudaMemsetAsync(w.a.Cf, 0, (size_t) sh.kp * sh.dp * sizeof(float), s));
	KMG_CK(cudaMemcpy2DAsync(w.a.C, (size_t) sh.dp * sizeof(float), centroids,
							 (size_t) rows->d * sizeof(float), (size_t) rows->d * sizeof(float),
							 k, cudaMemcpyHostToDevice, s));
	KMG_CK(cudaMemsetAsync(w.a.ctl, 0, sizeof(kmg_ctl), s));
	KMG_CK(cudaMemsetAsync(w.a.reloc, 0, (size_t) k * sizeof(int), s));
	KMG_CK(kmg_prep_rows(rows->X, rows->W, rows->n, rows->d, rows->dp, cosine,
						 cosine ? (float *) w.a.X : NULL, (float *) w.a.xnorm, NULL, s));
	KMG_CK(kmg_rows_setup(&sh, &w, 0, s));
	KMG_CK(kmg_finalize(&w.a, KMG_FIN_SETUP, s));
	KMG_CK(kmg_enqueue_labels(&sh, &w, s));
	KMG_CK(kmg_row_costs(&w.a, s));
	if (labels != NULL)
		KMG_CK(cudaMemcpyAsync(labels, w.a.labels, (size_t) rows->n * sizeof(int32_t),
							   cudaMemcpyDeviceToHost, s));
	if (distances != NULL)
		KMG_CK(cudaMemcpyAsync(distances, w.a.cost, (size_t) rows->n * sizeof(double),
							   cudaMemcpyDeviceToHost, s));
	if (partial != NULL)
	{
		const int	cw = KMG_CW(sh.dp);

		hcl = (double *) kmg_host_alloc(hooks, (size_t) k * cw * sizeof(double));
		if (hcl == NULL)
		{
			st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
			goto done;
		}
		KMG_CK(kmg_fill_int(w.iota, rows->n, 0, 1, s));
		KMG_CK(kmg_sort_labels(&w.a, w.iota, w.sort_temp, sh.sort_bytes, s));
		KMG_CK(kmg_segment(&w.a, KMG_MODE_LABELS, 1, s));
		KMG_CK(cudaMemcpyAsync(hcl, w.a.clus, (size_t) k * cw * sizeof(double),
							   cudaMemcpyDeviceToHost, s));
	}
	KMG_CK(cudaStreamSynchronize(s));
	if (distances != NULL)
		for (int64_t i = 0; i < rows->n; i++)
			distances[i] = km_cost_to_distance(distances[i], cosine);
	if (partial != NULL)
	{
		const int	cw = KMG_CW(sh.dp);

		for (int j = 0; j < k; j++)
		{
			const double *cl = hcl + (size_t) j * cw;

			if (partial->sums != NULL)
				for (int i = 0; i < rows->d; i++)
					partial->sums[(size_t) j * rows->d + i] += cl[i];
			if (partial->weights != NULL)
				partial->weights[j] += cl[sh.dp];
			if (partial->counts != NULL)
				partial->counts[j] += (int64_t) cl[sh.dp + 1];
			if (partial->inertia != NULL)
				partial->inertia[j] += cl[sh.dp + 2];
		}
	}
done:
	if (s != NULL)
	{
		(void) cudaStreamSynchronize(s);
		(void) cudaStreamDestroy(s);
	}
	if (arena != NULL)
		(void) cudaFree(arena);
	kmg_host_free(hooks, hcl);
	return st;
}
