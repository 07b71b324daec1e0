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

/*
 * Re-seed the clusters left without weight: the first (lowest id) gets the
 * row farthest from its centroid (exact cost, ties to the lowest row), the
 * next the next farthest, and so on.  The row's weighted contribution moves
 * from its old cluster to the new one, whose centroid is the row itself.
 * Returns how many clusters were re-seeded, or -1 when the pass was stopped.
 */
static int
km_cpu_relocate(km_cpu_state *st)
{
	const int	d = st->d;
	int			nempty = 0;
	int			nfar;

	for (int j = 0; j < st->k; j++)
		if (!(st->wsum[j] > 0.0))
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

		if (st->cosine)
		{
			if (km_normalize_row(c->x, cj, d) == 0.0)
				memset(cj, 0, sizeof(float) * d);
		}
		else
			memcpy(cj, c->x, sizeof(float) * d);

		for (int i = 0; i < d; i++)
		{
			double		v = (double) c->w * cj[i];

			sold[i] -= v;
			sj[i] = v;
		}
		st->wsum[old] -= c->w;
		st->wsum[j] = c->w;
		st->counts[j] = 1;
		if (--st->counts[old] == 0)
		{
			/* nothing left: no rounding residue either */
			memset(sold, 0, sizeof(double) * d);
			st->wsum[old] = 0.0;
		}
		st->relocated[j] = 1;
	}
	return nfar;
}

/*
 * Move every centroid with weight to its weighted mean: c_i = (float)
 * (s_i / w), all in double.  Cosine normalises the mean first, in double:
 * m_i = s_i / w, r = sqrt(sum of m_i * m_i in index order), c_i = (float)
 * (m_i / r).  Clusters without weight, and those just re-seeded (their
 * centroid is their row, exactly), keep their place; so does one whose mean
 * would not be finite.
 */
static void
km_cpu_update_centroids(km_cpu_state *st)
{
	const int	d = st->d;
	double	   *m = st->dtmp;

	for (int j = 0; j < st->k; j++)
	{
		const double *s = st->sums + (size_t) j * d;
		float	   *c = st->cent + (size_t) j * d;
		double		w = st->wsum[j];
		double		scale = 1.0;
		int			ok = 1;

		if (st->relocated[j] || !(w > 0.0))
			continue;
		for (int i = 0; i < d; i++)
			m[i] = km_ddiv(s[i], w);
		if (st->cosine)
		{
			double		nrm = 0.0;

			for (int i = 0; i < d; i++)
				nrm = km_dadd(nrm, km_dmul(m[i], m[i]));
			scale = km_dsqrt(nrm);
			ok = scale > 0.0 && isfinite(scale);
			for (int i = 0; i < d && ok; i++)
				m[i] = km_ddiv(m[i], scale);
		}
		for (int i = 0; i < d && ok; i++)
			ok = isfinite((float) m[i]);
		if (!ok)
			continue;
		for (int i = 0; i < d; i++)
			c[i] = (float) m[i];
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
