/*
 * thread_pool.c
 *	  Worker threads for one CPU engine call.
 *
 * Jobs are rare (one per pass over the rows) and large, so a mutex and two
 * condition variables are all the synchronisation there is.  Nothing here
 * allocates: the caller hands in room for the thread handles.
 */
#include "thread_pool.h"

#include <signal.h>
#include <string.h>

/*
 * A worker: take an id, then run every job until told to quit.
 */
static void *
km_pool_main(void *p)
{
	km_pool    *pool = (km_pool *) p;
	unsigned	seen;
	int			id;

	/* jobs are counted from 0: a job may be posted before this thread runs */
	seen = 0;
	pthread_mutex_lock(&pool->lock);
	id = ++pool->next_id;
	for (;;)
	{
		km_pool_fn	fn;
		void	   *arg;

		while (pool->generation == seen && !pool->quit)
			pthread_cond_wait(&pool->wake, &pool->lock);
		if (pool->quit)
			break;
		seen = pool->generation;
		fn = pool->fn;
		arg = pool->arg;
		pthread_mutex_unlock(&pool->lock);

		fn(arg, id);

		pthread_mutex_lock(&pool->lock);
		if (--pool->busy == 0)
			pthread_cond_signal(&pool->idle);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

/*
 * Start up to want - 1 workers (the caller is the first of the team) and
 * return the team size actually running.  Every signal is blocked while the
 * threads are created, so they inherit a full mask; the caller's mask is
 * restored afterwards.  A failure to create a thread is not an error: the
 * team is just smaller, down to the caller alone.
 */
int
km_pool_start(km_pool *pool, pthread_t *threads, int want)
{
	sigset_t	all;
	sigset_t	old;

	memset(pool, 0, sizeof(*pool));
	pool->threads = threads;
	if (want <= 1)
		return 1;
	if (pthread_mutex_init(&pool->lock, NULL) != 0)
		return 1;
	if (pthread_cond_init(&pool->wake, NULL) != 0)
	{
		pthread_mutex_destroy(&pool->lock);
		return 1;
	}
	if (pthread_cond_init(&pool->idle, NULL) != 0)
	{
		pthread_cond_destroy(&pool->wake);
		pthread_mutex_destroy(&pool->lock);
		return 1;
	}
	pool->sync_ok = 1;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int i = 0; i < want - 1; i++)
	{
		if (pthread_create(&threads[i], NULL, km_pool_main, pool) != 0)
			break;
		pool->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	return pool->started + 1;
}

/*
 * Run fn on every member of the team and return when all have finished.
 * The caller runs its share as worker 0 meanwhile.
 */
void
km_pool_run(km_pool *pool, km_pool_fn fn, void *arg)
{
	if (pool->started == 0)
	{
		fn(arg, 0);
		return;
	}

	pthread_mutex_lock(&pool->lock);
	pool->fn = fn;
	pool->arg = arg;
	pool->busy = pool->started;
	pool->generation++;
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);

	fn(arg, 0);

	pthread_mutex_lock(&pool->lock);
	while (pool->busy > 0)
		pthread_cond_wait(&pool->idle, &pool->lock);
	pthread_mutex_unlock(&pool->lock);
}

/*
 * Tell the workers to quit, join them all and release the lock and
 * conditions.  Safe on a pool that started no thread.
 */
void
km_pool_stop(km_pool *pool)
{
	if (!pool->sync_ok)
		return;

	pthread_mutex_lock(&pool->lock);
	pool->quit = 1;
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);

	for (int i = 0; i < pool->started; i++)
		pthread_join(pool->threads[i], NULL);
	pool->started = 0;

	pthread_cond_destroy(&pool->idle);
	pthread_cond_destroy(&pool->wake);
	pthread_mutex_destroy(&pool->lock);
	pool->sync_ok = 0;
}
