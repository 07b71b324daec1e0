/*
 * thread_pool.h
 *	  A fixed team of worker threads for the length of one engine call.
 *
 * The calling thread is worker 0 and takes its share of every job; the
 * other workers are started once, run each job the caller hands out and are
 * joined before the call returns.  They block every signal, so PostgreSQL's
 * handlers only ever run in the caller's thread.  Private to the CPU engine.
 */
#ifndef KM_THREAD_POOL_H
#define KM_THREAD_POOL_H

#include <pthread.h>

/* Private to the engine: not exported from the shared object. */
#pragma GCC visibility push(hidden)

/* One job: called once on every worker, worker 0 being the caller. */
typedef void (*km_pool_fn) (void *arg, int worker);

typedef struct km_pool
{
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* workers wait here for the next job */
	pthread_cond_t idle;		/* the caller waits here for a job to end */
	pthread_t  *threads;		/* started workers (caller's memory) */
	int			started;		/* worker threads running, caller excluded */
	int			next_id;		/* ids handed to workers as they start */
	unsigned	generation;		/* bumped for every job */
	int			busy;			/* workers still running the current job */
	int			quit;
	int			sync_ok;		/* lock and conditions initialised */
	km_pool_fn	fn;
	void	   *arg;
} km_pool;

extern int	km_pool_start(km_pool *pool, pthread_t *threads, int want);
extern void km_pool_run(km_pool *pool, km_pool_fn fn, void *arg);
extern void km_pool_stop(km_pool *pool);

#pragma GCC visibility pop

#endif							/* KM_THREAD_POOL_H */
