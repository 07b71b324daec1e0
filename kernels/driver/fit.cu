/*
 * fit.cu
 *	  The driver of a fit: prepare the rows, seed (the given centroids,
 *	  random rows, or k-means++ of seed/kmeanspp.cu), Lloyd iterations, the
 *	  final pass, and the best of n_init runs.  The memory of a call is laid
 *	  out by workspace.cu; assign and map are driven by labels.cu.
 *
 * All the work of a run stays on the device.  The host queues Lloyd
 * iterations in batches; every kernel of an iteration first looks at the
 * run's control block and returns at once once the run has stopped, so a
 * batch that runs past convergence costs only launch overhead.  Between
 * batches the host reads the control block and the per-iteration
 * statistics (a few hundred bytes), reports each finished iteration, polls
 * for cancellation, and re-seeds empty clusters when an iteration paused
 * for that (rare).  Two batches are in flight so the device never waits for
 * the host; batches are sized to last well under 0.2 s.  The small-k path
 * (one fused kernel, a reduction and a finalize) is captured once into a
 * CUDA graph of several iterations, which cuts the launch gaps.
 *
 * Per iteration (the kernels of kmg_assign_pass are those of the plan
 * assign/dispatch.cu made for the shape; with the tensor-core screen, l2,
 * assign/bounds.cu first lists the rows whose label may change and the
 * screen decides only those):
 *	small k:      kmg_assign_pass: the narrow kernel alone (its last block
 *	              ends the iteration, or at dp <= 16 the next pass's blocks
 *	              do, and a run queues one pass more: kmg_lloyd_state's
 *	              passes); on rows that are all bytes the byte
 *	              kernel -> kmg_bytes_end_kernel (the sums, the means, the
 *	              decisions); or the wide or direct kernel ->
 *	              kmg_reduce_finalize (whose last block ends the iteration)
 *	otherwise:    kmg_assign_pass: km_filter_prepare -> km_filter_top2
 *	              (skipped when the run has stopped) -> kmg_classify ->
 *	              kmg_exact_refine; then kmg_sort_labels -> kmg_segment ->
 *	              kmg_finalize; on the tensor-core screen (l2), the
 *	              running sums of update/running.cu in place of the sort
 *	              and the segment (moved by the rows whose label changed)
 * Once per call, kmg_rows_setup (workspace.cu) decides the l2 centring of
 * the narrow and wide passes and the scales of the order-free sums.
 * KMG_VERBOSE=1 in the environment traces every batch and iteration on
 * stderr.
 *
 * Device memory is computed first (kmg_fit_bytes, the same layout the
 * allocation uses), checked against cudaMemGetInfo, and taken in one
 * cudaMalloc that every exit path frees.
 */
#include "kmg_common.cuh"
#include "assign/assign.cuh"
#include "driver/driver.cuh"
#include "prep/prep.cuh"
#include "seed/seed.cuh"
#include "seed/seed_pp.h"
#include "update/update.cuh"

#include <cuda_profiler_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything a fit keeps between its steps. */
typedef struct kmg_fit
{
	kmg_shape	sh;
	kmg_work	w;
	cudaStream_t s;
	cudaEvent_t ev[2];
	cudaGraphExec_t graph;		/* graph_iters iterations, or NULL */
	int			graph_iters;
	cudaGraphExec_t ppgraph;	/* KMG_PP_GRAPH k-means++ units, or NULL */
	int			rs_rebuild;		/* the next iteration rebuilds the running sums */
	void	   *arena;
	char	   *pin;			/* pinned snapshots: 2 x (ctl + stats) */
	size_t		snap_bytes;
	const km_hooks *hooks;
	const km_params *params;
	double		t0;
} kmg_fit;

#define KMG_GRAPH_ITERS 4

/* k-means++ units per captured graph */
#define KMG_PP_GRAPH 16

/*
 * The kernels of one Lloyd iteration.  With running sums (update/running.cu)
 * the iteration moves them by its moved rows, or, when rebuild (a run's
 * first), sums every row afresh; without bounds the labels before the pass
 * are kept first (a->bold), which is how the update finds the moved rows.
 */
static cudaError_t
kmg_enqueue_iteration(kmg_fit *f, int rebuild)
{
	const kmg_args *a = &f->w.a;
	cudaError_t e;

	if (f->w.rs.on && !a->bounded && !rebuild &&
		(e = kmg_running_keep_labels(a, f->s)) != cudaSuccess)
		return e;
	if ((e = kmg_assign_pass(a, &f->sh.plan, KMG_MODE_ITER, f->w.filter_work, f->s)) != cudaSuccess ||
		kmg_plan_fused(&f->sh.plan))
		return e;				/* a fused pass ends the iteration itself */
	if (f->w.rs.on)
		e = rebuild ? kmg_running_rebuild(a, &f->w.rs, f->w.iota, f->w.sort_temp, f->sh.sort_bytes,
										  f->s)
			: kmg_running_update(a, &f->w.rs, f->s);
	else if ((e = kmg_sort_labels(a, f->w.iota, f->w.sort_temp, f->sh.sort_bytes, f->s)) == cudaSuccess)
		e = kmg_segment(a, KMG_MODE_ITER, 1, f->s);
	if (e != cudaSuccess)
		return e;
	return kmg_finalize(a, KMG_FIN_ITER, f->s);
}

/* Re-seed the empty clusters of the paused iteration, then finish it. */
static cudaError_t
kmg_enqueue_reseed(kmg_fit *f)
{
	kmg_args	a = f->w.a;
	cudaError_t e;

	a.lloyd = 0;
	if ((e = kmg_row_costs(&a, f->s)) != cudaSuccess ||
		(e = kmg_sort_costs_desc(a.cost, f->w.keys_out, f->w.iota, f->w.rows_out, a.n,
								 f->w.sort_temp, f->sh.sort_bytes, f->s)) != cudaSuccess ||
		(e = kmg_reseed(&a, f->w.rows_out, f->s)) != cudaSuccess)
		return e;
	/* the parallel end's passes start afresh: no sums pending (the re-seed's end resets the count) */
	if (a.parallel_end &&
		(e = cudaMemsetAsync(a.nfix, 0, kmg_narrow_fix_bytes(a.k, a.d), f->s)) != cudaSuccess)
		return e;
	return kmg_finalize(&a, KMG_FIN_RESEED, f->s);
}

/*
 * Report progress p to the caller's hook, stamped with the time since the
 * fit began; nonzero when the caller asks to stop.
 */
static int
kmg_report(const kmg_fit *f, km_progress *p)
{
	if (f->hooks == NULL || f->hooks->report == NULL)
		return 0;
	p->elapsed = kmg_now() - f->t0;
	return f->hooks->report(f->hooks->ctx, p);
}

/*
 * Report a phase's step (PREPARE, SEED, FINISH) with KM_ERR_CANCELLED in
 * err when the caller asks to stop.
 */
static km_status
kmg_report_step(const kmg_fit *f, km_phase phase, int run, int iteration, int64_t done,
				int64_t total, double inertia, km_error *err)
{
	km_progress pr;

	memset(&pr, 0, sizeof(pr));
	pr.phase = phase;
	pr.run = run;
	pr.iteration = iteration;
	pr.done = done;
	pr.total = total;
	pr.inertia = inertia;
	if (kmg_report(f, &pr))
		return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
	return KM_OK;
}

/* Ask the caller's poll hook whether to stop (cancellation); 0 without one. */
static int
kmg_poll(const km_hooks *hooks)
{
	return hooks != NULL && hooks->poll != NULL && hooks->poll(hooks->ctx) != 0;
}

static_assert(sizeof(kmg_pp_head) <= sizeof(kmg_ctl), "a k-means++ snapshot fits a slot of f->pin");

/*
 * Seconds between two of k-means++'s progress reports before its last:
 * 0.5.  KMG_REPORT_INTERVAL=s (a development switch) sets it; 0 reports
 * after every batch, so that bench_engine seed compares every report's
 * potential with the reference's on fits that seed in milliseconds.
 */
static double
kmg_seed_report_interval(void)
{
	const char *env = getenv("KMG_REPORT_INTERVAL");
	const double s = env != NULL ? atof(env) : -1.0;

	return s >= 0.0 ? s : 0.5;
}

/*
 * k-means++ of one run (seed/kmeanspp.cu): units are queued in batches, two
 * in flight; after each batch the head of the device state (a few bytes)
 * says how far the seeding got, so the host reports, polls, sizes the next
 * batch to about 50 ms, and queues exactly the units still needed (one a
 * step, plus a SELECT where a threshold missed).
 */
static km_status
kmg_seed_kmeanspp(kmg_fit *f, int run, km_error *err)
{
	const km_params *p = f->params;
	const kmg_args *a = &f->w.a;
	km_status	st = KM_OK;
	const int	k = a->k;
	const kmg_seed_bufs *sb = &f->w.sb;
	const int	verbose = kmg_verbose();
	const double t0 = kmg_now();
	const double every = kmg_seed_report_interval();
	double		last = t0,
				last_done = 0.0;
	int64_t		queued = 0,		/* units queued after kmg_pp_begin */
				known = 0,		/* of which the last snapshot has seen */
				need = k - 1;	/* units still needed after those */
	int64_t		bq[2] = {0, 0};
	int			bm[2] = {0, 0};
	double		bt[2] = {0, 0};
	int			inflight = 0,
				head = 0,
				batch = 32;
	kmg_pp_head h;

	memset(&h, 0, sizeof(h));
	KMG_CK(kmg_pp_begin(a, sb, p->seed, run, f->w.pp_shift, f->s));
	for (;;)
	{
		while (inflight < 2)
		{
			const int64_t want = known + need - queued;
			const int	slot = (head + inflight) % 2;
			int			m,
						i = 0;

			if (want <= 0)
				break;
			m = (int) (want < batch ? want : batch);
			while (i < m)
			{
				if (f->ppgraph != NULL && m - i >= KMG_PP_GRAPH)
				{
					KMG_CK(cudaGraphLaunch(f->ppgraph, f->s));
					i += KMG_PP_GRAPH;
				}
				else
				{
					KMG_CK(kmg_pp_units(a, sb, 1, f->s));
					i++;
				}
			}
			queued += m;
			KMG_CK(cudaMemcpyAsync(f->pin + slot * f->snap_bytes, sb->state, sizeof(kmg_pp_head),
								   cudaMemcpyDeviceToHost, f->s));
			KMG_CK(cudaEventRecord(f->ev[slot], f->s));
			bq[slot] = queued;
			bm[slot] = m;
			bt[slot] = kmg_now();
			inflight++;
		}
		if (inflight == 0)
			break;
		KMG_CK(cudaEventSynchronize(f->ev[head]));
		memcpy(&h, f->pin + head * f->snap_bytes, sizeof(h));
		known = bq[head];
		need = h.s >= k ? 0 : (int64_t) (k - h.s) + (h.phase == KMG_PP_SELECT ? 1 : 0);
		{
			/* the queue was kept full: a batch took the time since the last one */
			const double now = kmg_now();
			const double dt = now - (last_done > 0.0 ? last_done : bt[head]);

			if (bm[head] >= 16 && dt > 0.0)
			{
				int			want = (int) (0.05 * bm[head] / dt);

				want = want / KMG_PP_GRAPH * KMG_PP_GRAPH;
				batch = want < 32 ? 32 : want > 8192 ? 8192 : want;
			}
			last_done = now;
		}
		head = (head + 1) % 2;
		inflight--;
		if (h.s < k && kmg_now() - last >= every)
		{
			last = kmg_now();
			if ((st = kmg_report_step(f, KM_PHASE_SEED, run, 0, h.s, k, h.phi, err)) != KM_OK)
				return st;
		}
		if (kmg_poll(f->hooks))
			return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
	}
	if (verbose)
		fprintf(stderr, "kmg: k-means++ run %d: %d centroids in %.3f ms, %d units (%d SELECT after a missed threshold, "
				"%d filtered, %d dense, %u exact pairs in the filtered ones), grid %d x %d, L %d, dq %d\n",
				run, k, 1e3 * (kmg_now() - t0), h.units, h.selects, h.filtered, h.dense,
				h.pairs_lo, sb->grid, 128, sb->L, sb->q8 != NULL ? sb->dq : 0);
	st = kmg_report_step(f, KM_PHASE_SEED, run, 0, k, k, h.phi, err);
done:
	return st;
}

/*
 * Initial centroids of a run into C (filter rows: cosine normalised): the
 * given ones, k rows by their random keys, or k-means++.
 */
static km_status
kmg_seed(kmg_fit *f, int run, km_error *err)
{
	const km_params *p = f->params;
	const kmg_args *a = &f->w.a;
	km_status	st = KM_OK;
	const int	k = a->k;

	KMG_CK(cudaMemsetAsync(a->C, 0, (size_t) a->kp * a->dp * sizeof(float), f->s));
	if (a->Cf != a->C)
		KMG_CK(cudaMemsetAsync(a->Cf, 0, (size_t) a->kp * a->dp * sizeof(float), f->s));
	if (p->init == KM_INIT_EXPLICIT)
	{
		KMG_CK(cudaMemcpy2DAsync(a->C, (size_t) a->dp * sizeof(float), p->init_centroids,
								 (size_t) a->d * sizeof(float), (size_t) a->d * sizeof(float),
								 k, cudaMemcpyHostToDevice, f->s));
		if (a->cosine)
			KMG_CK(kmg_prep_rows(a->C, NULL, k, a->d, a->dp, 1, a->C, f->w.xscratch, NULL, f->s));
	}
	else if (p->init == KM_INIT_RANDOM)
	{
		KMG_CK(kmg_seed_random_keys(a, f->w.sb.hashes, km_stream(p->seed, run, 0), a->cost, f->s));
		KMG_CK(kmg_sort_keys_asc(a->cost, f->w.keys_out, f->w.iota, f->w.rows_out, a->n,
								 f->w.sort_temp, f->sh.sort_bytes, f->s));
		KMG_CK(kmg_take_rows(a, f->w.rows_out, k, 0, f->s));
	}
	else
		st = kmg_seed_kmeanspp(f, run, err);
done:
	return st;
}

/*
 * Capture iterations into a graph (KMG_GRAPH_ITERS for the small-k path, one
 * for the filter path, whose kernels are long); f->graph stays NULL if the
 * capture fails, and the iterations are then launched one by one.  Relaxed
 * mode: the filter's launcher sets a function attribute as it goes.
 */
static void
kmg_make_graph(kmg_fit *f)
{
	cudaGraph_t g = NULL;
	cudaError_t e;

	f->graph = NULL;
	f->graph_iters = kmg_plan_fused(&f->sh.plan) ? KMG_GRAPH_ITERS : 1;
	if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return;
	}
	e = cudaSuccess;
	for (int i = 0; i < f->graph_iters && e == cudaSuccess; i++)
		e = kmg_enqueue_iteration(f, 0);
	if (cudaStreamEndCapture(f->s, &g) != cudaSuccess || e != cudaSuccess || g == NULL ||
		cudaGraphInstantiate(&f->graph, g, 0) != cudaSuccess)
	{
		f->graph = NULL;
		(void) cudaGetLastError();
	}
	if (g != NULL)
		(void) cudaGraphDestroy(g);
}

/* Capture KMG_PP_GRAPH k-means++ units (NULL on failure: units go one by one). */
static void
kmg_make_pp_graph(kmg_fit *f)
{
	cudaGraph_t g = NULL;
	cudaError_t e;

	f->ppgraph = NULL;
	if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return;
	}
	e = kmg_pp_units(&f->w.a, &f->w.sb, KMG_PP_GRAPH, f->s);
	if (cudaStreamEndCapture(f->s, &g) != cudaSuccess || e != cudaSuccess || g == NULL ||
		cudaGraphInstantiate(&f->ppgraph, g, 0) != cudaSuccess)
	{
		f->ppgraph = NULL;
		(void) cudaGetLastError();
	}
	if (g != NULL)
		(void) cudaGraphDestroy(g);
}

/* The host's side of one Lloyd run: what is queued, what was reported. */
typedef struct kmg_lloyd_state
{
	int			run;
	int			max_iter;
	int			passes;			/* iteration slots of a run: max_iter, and one more
								 * where a pass ends the iteration before it
								 * (the narrow pass's parallel end) */
	int			enq;			/* iteration slots queued since the last sync */
	int			done_iters;		/* as of the last snapshot */
	int			reported;		/* iterations reported to the caller */
	int			inflight;		/* batches in flight, at most 2 */
	int			head;			/* oldest snapshot slot in flight */
	int			batch;			/* iterations of the next batch */
	int			batch_sz[2];	/* iterations of the batch in each slot */
	double		batch_t[2];		/* when it was queued */
	double		last_done;		/* when the last batch was seen done */
	int			relocated;		/* clusters re-seeded in the run */
	int			verbose;		/* KMG_VERBOSE=1: every batch on stderr */
	double		give_way;		/* kmg_screen_give_way's fraction of the rows */
	int			profile_iter;	/* KMG_PROFILE_ITER=i: iteration i's launches
								 * between cudaProfilerStart and Stop (ncu
								 * --profile-from-start off), else 0 */
	double		vlast;
} kmg_lloyd_state;

/*
 * Keep two batches of iterations in flight, each as graph launches (or
 * single iterations for a remainder) followed by a copy of the control
 * block and the statistics into its pinned slot and an event.
 */
static km_status
kmg_lloyd_queue(kmg_fit *f, kmg_lloyd_state *ls, km_error *err)
{
	km_status	st = KM_OK;

	while (ls->inflight < 2 && ls->done_iters + ls->enq < ls->passes)
	{
		const int	slot = (ls->head + ls->inflight) % 2;
		int			m = ls->batch;
		kmg_ctl    *snap = (kmg_ctl *) (f->pin + slot * f->snap_bytes);

		if (m > ls->passes - ls->done_iters - ls->enq)
			m = ls->passes - ls->done_iters - ls->enq;
		for (int i = 0; i < m;)
		{
			const int	profiled = ls->profile_iter == ls->done_iters + ls->enq + i + 1;

			if (profiled)
				KMG_CK(cudaProfilerStart());
			if (f->rs_rebuild)
			{
				/* the first iteration of a run */
				KMG_CK(kmg_enqueue_iteration(f, 1));
				f->rs_rebuild = 0;
				i++;
			}
			else if (f->graph != NULL && m - i >= f->graph_iters)
			{
				KMG_CK(cudaGraphLaunch(f->graph, f->s));
				i += f->graph_iters;
			}
			else
			{
				KMG_CK(kmg_enqueue_iteration(f, 0));
				i++;
			}
			if (profiled)
				KMG_CK(cudaProfilerStop());
		}
		KMG_CK(cudaMemcpyAsync(snap, f->w.a.ctl, sizeof(kmg_ctl), cudaMemcpyDeviceToHost, f->s));
		KMG_CK(cudaMemcpyAsync((char *) snap + sizeof(kmg_ctl), f->w.a.stats,
							   (size_t) ls->max_iter * sizeof(kmg_stat), cudaMemcpyDeviceToHost,
							   f->s));
		KMG_CK(cudaEventRecord(f->ev[slot], f->s));
		ls->batch_sz[slot] = m;
		ls->batch_t[slot] = kmg_now();
		ls->enq += m;
		ls->inflight++;
	}
done:
	return st;
}

/* KMG_VERBOSE=1: the batch just seen done and its iterations, on stderr. */
static void
kmg_lloyd_trace(kmg_lloyd_state *ls, int slot, const kmg_ctl *snap, const kmg_stat *stats)
{
	const double now = kmg_now();

	fprintf(stderr, "kmg: batch of %d done, %.3f ms since the last, ctl iter %d stop %d\n",
			ls->batch_sz[slot], 1e3 * (now - ls->vlast), snap->iter, snap->stop);
	for (int t = ls->reported; t < snap->iter; t++)
		fprintf(stderr, "kmg:   iter %d moved %d exact %d screen candidates %d screened %d relocated %d stop %d\n",
				t + 1, stats[t].moved, stats[t].ambiguous, stats[t].candidates,
				stats[t].screened, stats[t].relocated, stats[t].stop);
	ls->vlast = now;
}

/*
 * Size later batches of a fused plan to about 50 ms of work: the queue is
 * kept full, so the time between two completions is one batch.  Batches
 * only grow, by whole graphs, to at most 64 iterations.
 */
static void
kmg_lloyd_resize(const kmg_fit *f, kmg_lloyd_state *ls, int slot)
{
	const double now = kmg_now();
	const double since = ls->last_done > 0.0 ? ls->last_done : ls->batch_t[slot];

	if (kmg_plan_fused(&f->sh.plan) && ls->batch_sz[slot] > 0)
	{
		double		per = (now - since) / ls->batch_sz[slot];
		int			want = per > 0.0 ? (int) (0.05 / per) : 64;

		want = want / KMG_GRAPH_ITERS * KMG_GRAPH_ITERS;
		if (want > 64)
			want = 64;
		if (want > ls->batch)
			ls->batch = want;
	}
	ls->last_done = now;
}

/*
 * The tensor-core screen pays off while most rows have one or a few
 * centroids near their best; a row with more than KMG_SCREEN_CANDS goes to
 * the full settling, which recomputes all k distances, and rows with no
 * cluster structure around them (uniform data) send a large share there:
 * 1M x 128 uniform rows, k 1024, took 12.7 ms an iteration on the screen
 * against 6.2 ms for the SGEMM of the float32 filter (H200, README).  So
 * once an iteration sends more than this fraction of the rows to the full
 * settling, the fit goes on with the float32 filter (labels and model the
 * same either way: both settle close calls exactly).
 * KMG_SCREEN_GIVE_WAY=fraction in the environment overrides it ("off":
 * never; "always": after the first iteration), for the benchmarks and the
 * tests of the switch.
 */
#define KMG_SCREEN_FULL_MAX 0.05

static double
kmg_screen_give_way_fraction(void)
{
	const char *env = getenv("KMG_SCREEN_GIVE_WAY");

	if (env == NULL)
		return KMG_SCREEN_FULL_MAX;
	if (strcmp(env, "off") == 0)
		return INFINITY;
	if (strcmp(env, "always") == 0)
		return -1.0;
	return atof(env);
}

/*
 * After iteration `iters` (its statistics in stats): leave the screen for
 * the float32 filter when it sent too many rows to the full settling.  The
 * iterations already queued keep the screen (the stream drains them before
 * their graph goes); the plan and the kernels' arguments of the next ones
 * (the bounds, which only the screen keeps, go with it) are the float32
 * filter's, whose buffers every filter plan has, captured in a new graph.
 */
static km_status
kmg_screen_give_way(kmg_fit *f, const kmg_lloyd_state *ls, const kmg_stat *stats, int iters,
					km_error *err)
{
	km_status	st = KM_OK;

	/* (a fused plan has no screen: its plan says KMG_SCREEN_FP32) */
	if (f->sh.plan.screen == KMG_SCREEN_FP32 || iters < 1 ||
		(double) stats[iters - 1].ambiguous <= ls->give_way * (double) f->sh.n)
		return KM_OK;
	KMG_CK(cudaStreamSynchronize(f->s));
	if (f->graph != NULL)
		KMG_CK(cudaGraphExecDestroy(f->graph));
	f->graph = NULL;
	f->sh.plan.screen = KMG_SCREEN_FP32;
	f->sh.plan.wgmma = 0;
	f->w.a.screen = 0;
	f->w.a.bounded = 0;
	kmg_make_graph(f);
	if (ls->verbose)
		fprintf(stderr, "kmg: iteration %d sent %d of %lld rows to the full settling: "
				"the float32 filter from now on\n", iters, stats[iters - 1].ambiguous,
				(long long) f->sh.n);
done:
	return st;
}

/*
 * Report iterations [reported, upto) to the caller from their statistics;
 * KM_ERR_CANCELLED when it asks to stop.
 */
static km_status
kmg_lloyd_report(const kmg_fit *f, kmg_lloyd_state *ls, const kmg_stat *stats, int upto,
				 km_error *err)
{
	for (; ls->reported < upto; ls->reported++)
	{
		km_progress pr;

		memset(&pr, 0, sizeof(pr));
		pr.phase = KM_PHASE_ITERATE;
		pr.run = ls->run;
		pr.iteration = ls->reported + 1;
		pr.done = ls->reported + 1;
		pr.total = ls->max_iter;
		pr.inertia = stats[ls->reported].inertia;
		pr.moved = stats[ls->reported].moved_frac;
		pr.relocated = stats[ls->reported].relocated;
		ls->relocated += stats[ls->reported].relocated;
		if (kmg_report(f, &pr))
			return kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
	}
	return KM_OK;
}

/*
 * An iteration paused for empty clusters: drain the queue (the iterations
 * in it are no-ops now), re-seed the empty clusters, finish the iteration,
 * and report it.  *stop: the run's state after it.
 */
static km_status
kmg_lloyd_reseed(kmg_fit *f, kmg_lloyd_state *ls, int *stop, km_error *err)
{
	km_status	st = KM_OK;
	kmg_ctl		c;
	const kmg_stat *stats;
	double		vt0 = kmg_now();

	KMG_CK(cudaStreamSynchronize(f->s));
	ls->inflight = 0;
	ls->head = 0;
	KMG_CK(kmg_enqueue_reseed(f));
	KMG_CK(cudaMemcpyAsync(f->pin, f->w.a.ctl, sizeof(kmg_ctl), cudaMemcpyDeviceToHost, f->s));
	KMG_CK(cudaMemcpyAsync(f->pin + sizeof(kmg_ctl), f->w.a.stats,
						   (size_t) ls->max_iter * sizeof(kmg_stat), cudaMemcpyDeviceToHost,
						   f->s));
	KMG_CK(cudaStreamSynchronize(f->s));
	memcpy(&c, f->pin, sizeof(c));
	stats = (const kmg_stat *) (f->pin + sizeof(kmg_ctl));
	if (ls->verbose)
	{
		fprintf(stderr, "kmg: re-seed of %d empty clusters after iteration %d: %.3f ms\n",
				stats[c.iter > 0 ? c.iter - 1 : 0].relocated, c.iter, 1e3 * (kmg_now() - vt0));
		ls->vlast = kmg_now();
	}
	if ((st = kmg_lloyd_report(f, ls, stats, c.iter, err)) != KM_OK)
		goto done;
	ls->done_iters = c.iter;
	ls->enq = 0;
	*stop = c.stop;
done:
	return st;
}

/*
 * Lloyd iterations of one run (see the file header): batches queued ahead
 * (kmg_lloyd_queue), and as each one is done its iterations reported, the
 * caller polled, a pause for empty clusters served (kmg_lloyd_reseed), the
 * next batches sized (kmg_lloyd_resize), until the run stops.  On return
 * *stop says why it ended, *iters how many iterations ran, *relocated how
 * many clusters were re-seeded.
 */
static km_status
kmg_lloyd(kmg_fit *f, int run, int *stop_out, int *iters_out, int *relocated, km_error *err)
{
	km_status	st = KM_OK;
	kmg_lloyd_state ls;

	memset(&ls, 0, sizeof(ls));
	ls.run = run;
	ls.max_iter = f->params->max_iter;
	ls.passes = ls.max_iter + (f->w.a.parallel_end ? 1 : 0);
	ls.batch = kmg_plan_fused(&f->sh.plan) ? KMG_GRAPH_ITERS : 1;
	ls.verbose = kmg_verbose();
	ls.give_way = kmg_screen_give_way_fraction();
	ls.profile_iter = getenv("KMG_PROFILE_ITER") != NULL ? atoi(getenv("KMG_PROFILE_ITER")) : 0;
	ls.vlast = kmg_now();
	*stop_out = KMG_RUN;
	*iters_out = 0;
	for (;;)
	{
		int			slot,
					stop;
		const kmg_ctl *snap;
		const kmg_stat *stats;

		if ((st = kmg_lloyd_queue(f, &ls, err)) != KM_OK)
			goto done;
		if (ls.inflight == 0)
			break;

		/* the oldest batch */
		slot = ls.head;
		snap = (const kmg_ctl *) (f->pin + slot * f->snap_bytes);
		stats = (const kmg_stat *) ((const char *) snap + sizeof(kmg_ctl));
		KMG_CK(cudaEventSynchronize(f->ev[slot]));
		ls.head = (ls.head + 1) % 2;
		ls.inflight--;
		stop = snap->stop;
		if (ls.verbose)
			kmg_lloyd_trace(&ls, slot, snap, stats);
		kmg_lloyd_resize(f, &ls, slot);
		if ((st = kmg_lloyd_report(f, &ls, stats, snap->iter, err)) != KM_OK)
			goto done;
		if ((st = kmg_screen_give_way(f, &ls, stats, snap->iter, err)) != KM_OK)
			goto done;
		if (kmg_poll(f->hooks))
		{
			st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			goto done;
		}
		if (stop == KMG_PAUSE_EMPTY)
		{
			if ((st = kmg_lloyd_reseed(f, &ls, &stop, err)) != KM_OK)
				goto done;
			if (stop == KMG_RUN)
				continue;
			*stop_out = stop;
			break;
		}
		if (stop != KMG_RUN)
		{
			/* queued iterations are no-ops: let them drain */
			*stop_out = stop;
			KMG_CK(cudaStreamSynchronize(f->s));
			break;
		}
		/* the batch ran all its iterations */
		ls.done_iters += ls.batch_sz[slot];
		ls.enq -= ls.batch_sz[slot];
	}
	if (*stop_out == KMG_RUN)
		*stop_out = KMG_STOP_MAXITER;
	*iters_out = ls.reported;
done:
	*relocated += ls.relocated;
	return st;
}

/*
 * The start of a run: its control block (nothing queued runs until it says
 * so), cleared re-seed counts, fixed-point sums and statistics, the seeds,
 * the setup finalize (norms, filter copies of the centroids) and no labels.
 * Returns once all of it ran.
 */
static km_status
kmg_run_start(kmg_fit *f, int run, km_error *err)
{
	const km_params *params = f->params;
	const int	k = params->k;
	km_status	st = KM_OK;
	kmg_ctl		c;

	memset(&c, 0, sizeof(c));
	c.stop = KMG_RUN;
	c.max_iter = params->max_iter;
	c.tol = params->tol;
	KMG_CK(cudaMemcpyAsync(f->w.a.ctl, &c, sizeof(c), cudaMemcpyHostToDevice, f->s));
	KMG_CK(cudaMemsetAsync(f->w.a.reloc, 0, (size_t) k * sizeof(int), f->s));
	if (f->w.a.nfix != NULL)
		KMG_CK(cudaMemsetAsync(f->w.a.nfix, 0, kmg_narrow_fix_bytes(k, f->w.a.d), f->s));
	KMG_CK(cudaMemsetAsync(f->w.a.stats, 0, (size_t) (params->max_iter + 1) * sizeof(kmg_stat), f->s));
	if (f->w.a.bounded)
	{
		/* no row has bounds yet (not a number: the first screen decides every row) */
		KMG_CK(cudaMemsetAsync(f->w.a.ub, 0xff, (size_t) f->w.a.n * sizeof(float), f->s));
		KMG_CK(cudaMemsetAsync(f->w.a.bs, 0, sizeof(kmg_bstate), f->s));
		KMG_CK(cudaMemsetAsync(f->w.a.stick, 0, (size_t) kmg_screen_tail_tickets() * sizeof(int), f->s));
	}
	f->rs_rebuild = f->w.rs.on;
	if ((st = kmg_seed(f, run, err)) != KM_OK)
		goto done;
	KMG_CK(kmg_finalize(&f->w.a, KMG_FIN_SETUP, f->s));
	KMG_CK(kmg_fill_int(f->w.a.labels, f->w.a.n, -1, 0, f->s));
	KMG_CK(cudaStreamSynchronize(f->s));
done:
	return st;
}

/*
 * The final pass of a run: labels for the final centroids (unless the run
 * settled, whose labels are those of its centroids already), the exact
 * cost of every row, and the per-cluster sizes and costs; the centroids
 * (k x dp) into hC and (weight, count, cost) of each cluster into hcl.
 */
static km_status
kmg_final_pass(kmg_fit *f, int stop, float *hC, double *hcl, km_error *err)
{
	km_status	st = KM_OK;
	kmg_args	a = f->w.a;
	const int	k = a.k;
	const int	cw = KMG_CW(f->sh.dp);

	a.lloyd = 0;
	if (stop != KMG_STOP_SETTLED)
		KMG_CK(kmg_enqueue_labels(&f->sh, &f->w, f->s));
	KMG_CK(kmg_row_costs(&a, f->s));
	KMG_CK(kmg_sort_labels(&a, f->w.iota, f->w.sort_temp, f->sh.sort_bytes, f->s));
	KMG_CK(kmg_segment(&a, KMG_MODE_LABELS, 0, f->s));
	KMG_CK(cudaMemcpyAsync(hC, a.C, (size_t) k * f->sh.dp * sizeof(float),
						   cudaMemcpyDeviceToHost, f->s));
	KMG_CK(cudaMemcpy2DAsync(hcl, 3 * sizeof(double), a.clus + f->sh.dp,
							 (size_t) cw * sizeof(double), 3 * sizeof(double), k,
							 cudaMemcpyDeviceToHost, f->s));
	KMG_CK(cudaStreamSynchronize(f->s));
done:
	return st;
}

/* A run's centroids (d of each dp floats), sizes and costs into result. */
static void
kmg_keep_run(const kmg_fit *f, int d, const float *hC, const double *hcl, km_result *result)
{
	for (int j = 0; j < f->w.a.k; j++)
	{
		memcpy(result->centroids + (size_t) j * d, hC + (size_t) j * f->sh.dp,
			   (size_t) d * sizeof(float));
		result->sizes[j] = (int64_t) hcl[j * 3 + 1];
		result->cluster_inertia[j] = hcl[j * 3 + 2];
	}
}

/* Validate the parameters of a fit against the rows. */
static km_status
kmg_check_params(const kmg_rows *rows, const km_params *p, km_error *err)
{
	if (p == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no parameters");
	if (p->k < 1 || p->k > rows->n)
		return kmg_set_error(err, KM_ERR_INVALID, "k = %d must be between 1 and the %lld rows",
							 p->k, (long long) rows->n);
	if (p->max_iter < 1 || p->n_init < 1)
		return kmg_set_error(err, KM_ERR_INVALID, "max_iter and n_init must be at least 1");
	if (!(p->tol >= 0.0))
		return kmg_set_error(err, KM_ERR_INVALID, "tol must be >= 0");
	if (p->metric != KM_METRIC_L2 && p->metric != KM_METRIC_COSINE)
		return kmg_set_error(err, KM_ERR_INVALID, "unknown metric");
	if (p->init != KM_INIT_KMEANSPP && p->init != KM_INIT_RANDOM && p->init != KM_INIT_EXPLICIT)
		return kmg_set_error(err, KM_ERR_INVALID, "unknown init");
	if (p->init == KM_INIT_EXPLICIT && p->init_centroids == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "explicit init without centroids");
	return KM_OK;
}

/*
 * A whole fit on rows already on the device (kmg_engine_fit and
 * kmg_api_dataset_fit of api.cu): check, lay out and allocate the memory,
 * prepare the rows, capture the graphs, then per run seed, iterate
 * (kmg_lloyd), run the final pass for exact labels and costs, and keep the
 * best run's centroids, sizes, costs and labels in result.  Every exit path
 * frees what it took.
 */
km_status
kmg_fit_rows(const kmg_rows *rows, const km_params *params, const km_hooks *hooks,
			 km_result *result, km_error *err)
{
	kmg_fit		f;
	km_status	st;
	const kmg_device *dev = kmg_dev();
	float	   *hC = NULL;
	double	   *hcl = NULL;
	double		best_inertia = 0.0;
	size_t		bytes;
	const char *seed_env = getenv("KMG_SEED_ONLY");
	const int	seed_only = seed_env != NULL && seed_env[0] == '1';

	memset(&f, 0, sizeof(f));
	f.t0 = kmg_now();
	f.hooks = hooks;
	f.params = params;
	if ((st = kmg_check_params(rows, params, err)) != KM_OK)
		return st;
	if (result == NULL || result->centroids == NULL || result->sizes == NULL ||
		result->cluster_inertia == NULL)
		return kmg_set_error(err, KM_ERR_INVALID, "no result arrays");

	kmg_make_shape(&f.sh, rows->n, rows->d, params->k, params->metric == KM_METRIC_COSINE, 1,
				   !rows->in_place, params, 0, dev);
	KMG_CK(kmg_assign_prepare(&f.sh.plan, dev));
	bytes = kmg_layout(&f.sh, NULL, NULL);
	if ((st = kmg_alloc_arena(&f.arena, bytes, "the fit", err)) != KM_OK)
		goto done;
	kmg_layout(&f.sh, (char *) f.arena, &f.w);

	/* the rows as the kernels see them */
	f.w.a.X = f.sh.cosine ? (f.sh.copy_rows ? f.w.Xn : rows->X) : rows->X;
	f.w.a.W = rows->W;
	f.w.a.n = rows->n;
	f.w.a.d = rows->d;
	f.w.a.dp = rows->dp;
	f.w.a.cosine = f.sh.cosine;
	f.w.a.lloyd = 1;
	f.w.a.parallel_end = f.sh.plan.parallel_end;
	f.w.a.k = params->k;
	f.w.a.kp = f.sh.kp;

	KMG_CK(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking));
	KMG_CK(cudaEventCreateWithFlags(&f.ev[0], cudaEventDisableTiming));
	KMG_CK(cudaEventCreateWithFlags(&f.ev[1], cudaEventDisableTiming));
	f.snap_bytes = KMG_ROUND_UP(sizeof(kmg_ctl) + (size_t) params->max_iter * sizeof(kmg_stat), 64);
	KMG_CK(cudaHostAlloc((void **) &f.pin, 2 * f.snap_bytes, cudaHostAllocDefault));
	hC = (float *) kmg_host_alloc(hooks, (size_t) params->k * f.sh.dp * sizeof(float));
	hcl = (double *) kmg_host_alloc(hooks, (size_t) params->k * 3 * sizeof(double));
	if (hC == NULL || hcl == NULL)
	{
		st = kmg_set_error(err, KM_ERR_NOMEM, "out of host memory");
		goto done;
	}

	/* prepare: hashes of the raw rows, the cosine copy, row norms */
	KMG_CK(kmg_prep_rows(rows->X, rows->W, rows->n, rows->d, rows->dp, f.sh.cosine,
						 f.sh.cosine ? (float *) f.w.a.X : NULL, (float *) f.w.a.xnorm,
						 f.w.sb.hashes, f.s));
	KMG_CK(kmg_fill_int(f.w.iota, rows->n, 0, 1, f.s));
	KMG_CK(kmg_rows_setup(&f.sh, &f.w, 1, f.s));
	KMG_CK(cudaStreamSynchronize(f.s));
	if (kmg_verbose())
		fprintf(stderr, "kmg: plan path %d, rows as bytes %s\n", f.sh.plan.path,
				f.w.a.Xb == NULL ? (f.sh.plan.bytes ? "no (not all bytes, or weighted)" : "no") :
				f.sh.plan.overlap ? "yes, launches overlapped" : "yes");
	if ((st = kmg_report_step(&f, KM_PHASE_PREPARE, 0, 0, rows->n, rows->n, 0.0, err)) != KM_OK)
		goto done;
	kmg_make_graph(&f);
	if (kmg_verbose())
		fprintf(stderr, "kmg: iterations %s\n", f.graph != NULL ? "in graphs" : "launched one by one");
	if (f.sh.pp)
	{
		KMG_CK(kmg_pp_prepare(&f.w.sb, rows->n, f.sh.dp, dev));
		kmg_make_pp_graph(&f);
		if (kmg_verbose())
			fprintf(stderr, "kmg: k-means++ units %s (%d candidates a step, instance %d), shadow rows' L2 window %zu bytes\n",
					f.ppgraph != NULL ? "in graphs" : "launched one by one", f.w.sb.L, f.w.sb.lb, f.w.sb.qwindow);
	}

	for (int run = 0; run < params->n_init; run++)
	{
		int			stop = KMG_RUN,
					iters = 0,
					relocated = 0;
		double		inertia = 0.0;

		if ((st = kmg_run_start(&f, run, err)) != KM_OK)
			goto done;
		/* KMG_SEED_ONLY=1 (tests): the seeds themselves, with their labels */
		if (seed_only)
			stop = KMG_STOP_MAXITER;
		else if ((st = kmg_lloyd(&f, run, &stop, &iters, &relocated, err)) != KM_OK)
			goto done;
		if ((st = kmg_final_pass(&f, stop, hC, hcl, err)) != KM_OK)
			goto done;
		for (int j = 0; j < params->k; j++)
			inertia += hcl[j * 3 + 2];
		if ((st = kmg_report_step(&f, KM_PHASE_FINISH, run, iters, rows->n, rows->n, inertia,
								  err)) != KM_OK)
			goto done;

		/* keep the best run (ties: the earlier) */
		if (run == 0 || inertia < best_inertia)
		{
			best_inertia = inertia;
			kmg_keep_run(&f, rows->d, hC, hcl, result);
			result->inertia = inertia;
			result->iterations = iters;
			result->converged = stop == KMG_STOP_SETTLED || stop == KMG_STOP_TOL;
			result->best_run = run;
			result->relocated = relocated;
			if (result->labels != NULL)
				KMG_CK(cudaMemcpy(result->labels, f.w.a.labels, (size_t) rows->n * sizeof(int32_t),
								  cudaMemcpyDeviceToHost));
		}
		if (kmg_poll(hooks))
		{
			st = kmg_set_error(err, KM_ERR_CANCELLED, "cancelled");
			goto done;
		}
	}

done:
	/* nothing may still run on what we free */
	if (f.s != NULL)
		(void) cudaStreamSynchronize(f.s);
	if (f.graph != NULL)
		(void) cudaGraphExecDestroy(f.graph);
	if (f.ppgraph != NULL)
		(void) cudaGraphExecDestroy(f.ppgraph);
	if (f.ev[0] != NULL)
		(void) cudaEventDestroy(f.ev[0]);
	if (f.ev[1] != NULL)
		(void) cudaEventDestroy(f.ev[1]);
	if (f.s != NULL)
		(void) cudaStreamDestroy(f.s);
	if (f.pin != NULL)
		(void) cudaFreeHost(f.pin);
	if (f.arena != NULL)
		(void) cudaFree(f.arena);
	kmg_host_free(hooks, hC);
	kmg_host_free(hooks, hcl);
	return st;
}
