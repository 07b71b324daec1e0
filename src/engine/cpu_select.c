/*
 * cpu_select.c
 *	  Keeping the rows with the smallest keys, across threads.
 *
 * Seeding draws rows by their sampling keys and relocation takes the rows
 * farthest from their centroids; both are "the m smallest (key, row)"
 * selections.  Each worker keeps its own bounded heap while it scans its
 * rows, and the caller merges the heaps after the pass.  Ordering ties by
 * global row index makes the result independent of how rows were split.
 */
#include "cpu_internal.h"

#include <string.h>

/*
 * Restore the max-heap order below position i of a[0..n).
 */
static void
km_cpu_sift(km_cpu_cand *a, int64_t n, int64_t i)
{
	km_cpu_cand v = a[i];

	for (;;)
	{
		int64_t		l = 2 * i + 1;
		int64_t		m = l;

		if (l >= n)
			break;
		if (l + 1 < n && km_cpu_before(&a[l], &a[l + 1]))
			m = l + 1;
		if (!km_cpu_before(&v, &a[m]))
			break;
		a[i] = a[m];
		i = m;
	}
	a[i] = v;
}

/*
 * Offer c to a heap that keeps the cap smallest entries seen (the largest
 * of them at the root, ready to be evicted).
 */
void
km_cpu_heap_push(km_cpu_cand *heap, int *len, int cap, const km_cpu_cand *c)
{
	int			i;

	if (cap <= 0)
		return;
	if (*len < cap)
	{
		/* room left: sift the new entry up */
		i = (*len)++;
		while (i > 0)
		{
			int			p = (i - 1) / 2;

			if (!km_cpu_before(&heap[p], c))
				break;
			heap[i] = heap[p];
			i = p;
		}
		heap[i] = *c;
		return;
	}
	if (!km_cpu_before(c, &heap[0]))
		return;

	/* full: c replaces the largest entry and sifts down */
	heap[0] = *c;
	km_cpu_sift(heap, cap, 0);
}

/*
 * Sort a[0..n) by (key, row), in place and without allocating (heapsort:
 * qsort may call malloc).
 */
static void
km_cpu_sort(km_cpu_cand *a, int64_t n)
{
	for (int64_t i = n / 2 - 1; i >= 0; i--)
		km_cpu_sift(a, n, i);
	for (int64_t end = n - 1; end > 0; end--)
	{
		km_cpu_cand t = a[0];

		a[0] = a[end];
		a[end] = t;
		km_cpu_sift(a, end, 0);
	}
}

/*
 * Gather one heap from every worker into st->merge and sort it; returns
 * how many entries there are.  which < 0: the workers' main heaps;
 * 0 <= which <= L: their k-means++ heap number which.
 */
int
km_cpu_merge(km_cpu_state *st, int which)
{
	int			total = 0;

	for (int t = 0; t < st->nthreads; t++)
	{
		const km_cpu_worker *wk = &st->workers[t];
		const km_cpu_cand *src;
		int			len;

		if (which < 0)
		{
			src = wk->heap;
			len = wk->nheap;
		}
		else
		{
			src = wk->ppheap + (size_t) which * st->L;
			len = wk->ppn[which];
		}
		memcpy(st->merge + total, src, sizeof(km_cpu_cand) * len);
		total += len;
	}
	km_cpu_sort(st->merge, total);
	return total;
}
