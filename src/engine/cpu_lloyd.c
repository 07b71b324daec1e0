/*
 * cpu_lloyd.c
 *	  One k-means run from seeded centroids: Lloyd iterations, re-seeding of
 *	  empty clusters, and the final exact pass.
 *
 * Each iteration is one pass that labels every row exactly, counts moves and
 * accumulates per-cluster sums in double; the caller then re-seeds empty
 * clusters and moves every centroid to its weighted mean.  The rules are
 * those of kmeans_engine.h, so that other engines reach the same model.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "km_exact.h"
#include "km_step.h"

/*
 * Re-seed the clusters left without weight: the first (lowest id) gets the
 * row farthest from its centroid (exact cost, ties to the smaller row
 * hash), the next the next farthest, and so on.  The row's weighted
 * contribution moves from its old cluster to the new one, whose centroid is
 * the row itself; the sums stay exact (km_xlevels_add).  Returns how many
 * clusters were re-seeded, or -1 when the pass was stopped.
 */
static int
km_cpu_relocate(km_cpu_state *st)
{
	const int	d = st->d;
	const size_t kd = (size_t) st->k * d;
	const size_t k = (size_t) st->k;
	int			nempty = 0;
	int			nfar;

	for (int j = 0; j < st->k; j++)
		if (!(st->wsumr[j] > 0.0))
			st->empty[nempty++] = j;
	if (nempty == 0)
		return 0;

	st->nsel = nempty;
	st->labels_out = NULL;
	km_cpu_pass(st, KM_CPU_FARTHEST);
	if (km_cpu_stopped(st))
		return -1;
	nfar = km_cpu_merge(st, -1);
	if (nfar > nempty)
		nfar = nempty;

	for (int e = 0; e < nfar; e++)
	{
		const km_cpu_cand *c = &st->merge[e];
		int			j = st->empty[e];
		int			old = st->labels[c->row];
		float	   *cj = st->cent + (size_t) j * d;
		double	   *sold = st->sums + (size_t) old * d;
		double	   *sj = st->sums + (size_t) j * d;

		km_centroid_row(c->x, d, st->cosine, cj);
		for (int i = 0; i < d; i++)
		{
			double		v = (double) c->w * cj[i];

			km_xlevels_add(&st->xlev, sold + i, kd, -v);
			for (int l = 0; l < st->xlev.n; l++)
				sj[(size_t) l * kd + i] = 0.0;
			km_xlevels_add(&st->xlev, sj + i, kd, v);
		}
		km_xlevels_add(&st->wlev, st->wsum + old, k, -(double) c->w);
		for (int l = 0; l < st->wlev.n; l++)
			st->wsum[(size_t) l * k + j] = 0.0;
		km_xlevels_add(&st->wlev, st->wsum + j, k, (double) c->w);
		st->counts[j] = 1;
		if (--st->counts[old] == 0)
		{
			/* nothing left: no residue either */
			for (int l = 0; l < st->xlev.n; l++)
				memset(sold + (size_t) l * kd, 0, sizeof(double) * d);
			for (int l = 0; l < st->wlev.n; l++)
				st->wsum[(size_t) l * k + old] = 0.0;
		}
		st->wsumr[old] = km_xlevels_round(st->wsum + old, st->wlev.n, k);
		st->wsumr[j] = km_xlevels_round(st->wsum + j, st->wlev.n, k);
		st->relocated[j] = 1;
	}
	return nfar;
}

/*
 * Move every centroid with weight to its weighted mean: c_i = (float)
 * (s_i / w), s_i and w the exact sums rounded to double.  Cosine normalises
 * the mean first, in double: m_i = s_i / w, r = sqrt(sum of m_i * m_i in
 * index order), c_i = (float) (m_i / r).  Clusters without weight, and those
 * just re-seeded (their centroid is their row, exactly), keep their place;
 * so does one whose mean would not be finite.  km_centroid_mean does the
 * arithmetic, for kmeans_step too.
 */
static void
km_cpu_update_centroids(km_cpu_state *st)
{
	const int	d = st->d;
	const size_t kd = (size_t) st->k * d;
	double	   *s = st->dtmp;

	for (int j = 0; j < st->k; j++)
	{
		const double *lev = st->sums + (size_t) j * d;

		if (st->relocated[j] || !(st->wsumr[j] > 0.0))
			continue;
		for (int i = 0; i < d; i++)
			s[i] = km_xlevels_round(lev + i, st->xlev.n, kd);
		km_centroid_mean(s, st->wsumr[j], d, st->cosine, st->cent + (size_t) j * d);
	}
}

/*
 * Lloyd iterations from st->cent, then the final pass; st->labels, st->cent,
 * st->counts (sizes) and st->csum (per-cluster inertia) hold the model on
 * success.
 */
km_status
km_cpu_lloyd(km_cpu_state *st, const km_params *params, int run, km_cpu_run *out)
{
	const int64_t n = st->n;
	int			settled = 0;	/* no row moved: labels already final */
	int			t;

	memset(out, 0, sizeof(*out));
	memset(st->labels, 0xff, sizeof(int32_t) * n);

	for (t = 1;; t++)
	{
		int64_t		moved = 0;
		double		inertia = 0.0;
		int			relocated = 0;
		km_progress p;

		km_cpu_set_centroids(st, st->cent);
		st->labels_out = st->labels;
		km_cpu_pass(st, KM_CPU_LLOYD);
		if (km_cpu_stopped(st))
			return KM_ERR_CANCELLED;
		km_cpu_reduce(st, KM_CPU_SUMS);
		for (int w = 0; w < st->nthreads; w++)
		{
			moved += st->workers[w].moved;
			inertia += st->workers[w].inertia;
		}

		if (moved > 0)
		{
			memset(st->relocated, 0, st->k);
			relocated = km_cpu_relocate(st);
			if (relocated < 0)
				return KM_ERR_CANCELLED;
			km_cpu_update_centroids(st);
			out->relocated += relocated;
		}

		memset(&p, 0, sizeof(p));
		p.phase = KM_PHASE_ITERATE;
		p.run = run;
		p.iteration = t;
		p.done = t;
		p.total = params->max_iter;
		p.inertia = inertia;
		p.moved = (double) moved / (double) n;
		p.relocated = relocated;
		if (km_cpu_report(st, &p))
			return KM_ERR_CANCELLED;

		if (moved == 0)
		{
			settled = 1;
			out->converged = 1;
			break;
		}
		if ((double) moved / (double) n <= params->tol)
		{
			out->converged = 1;
			break;
		}
		if (t >= params->max_iter)
			break;
	}
	out->iterations = t;

	/* the final pass: exact costs, and labels for the final centroids */
	if (settled)
	{
		st->labels_out = NULL;
		km_cpu_pass(st, KM_CPU_COST);
	}
	else
	{
		km_cpu_set_centroids(st, st->cent);
		st->labels_out = st->labels;
		km_cpu_pass(st, KM_CPU_ASSIGN | KM_CPU_COST);
	}
	if (km_cpu_stopped(st))
		return KM_ERR_CANCELLED;
	km_cpu_reduce(st, KM_CPU_COST);
	for (int j = 0; j < st->k; j++)
		out->inertia += st->csum[j];

	{
		km_progress p;

		memset(&p, 0, sizeof(p));
		p.phase = KM_PHASE_FINISH;
		p.run = run;
		p.iteration = t;
		p.done = n;
		p.total = n;
		p.inertia = out->inertia;
		if (km_cpu_report(st, &p))
			return KM_ERR_CANCELLED;
	}
	return KM_OK;
}
