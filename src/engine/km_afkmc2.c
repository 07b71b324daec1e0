/*
 * km_afkmc2.c
 *	  afk-mc2's proposals, drawn i.i.d. and independently of row order
 *	  (km_afkmc2.h); shared by the k-means and k-medoids CPU engines.
 *
 * q(x) = 1/2 a(x) / sum a + 1/2 b(x) / sum b, with a = w D1^l and b = w.
 * The rows are sorted by hash (an LSD radix sort, four passes of 16 bits);
 * identical rows have equal hashes and equal a and b, so the sequence of
 * (a, b) in that order, hence every prefix sum, is the same whatever the
 * order the rows came in.  A proposal takes two uniforms of the seed's
 * stream: the first picks the half of the mixture, the second the point
 * in that half's prefix sums, found by binary search.
 */
#include <string.h>

#include "km_afkmc2.h"
#include "km_hash.h"

#define KM_RADIX_BITS 16
#define KM_RADIX (1 << KM_RADIX_BITS)

typedef struct km_afk_entry
{
	uint64_t	hash;
	int64_t		row;
} km_afk_entry;

/* Bytes of km_afkmc2_propose's work area for n rows. */
size_t
km_afkmc2_work_bytes(int64_t n)
{
	return (size_t) n * (2 * sizeof(km_afk_entry)) + sizeof(int64_t) * KM_RADIX + 64;
}

/* The first index i of p[0..n) with p[i] > t, or n. */
static int64_t
km_afk_search(const double *p, int64_t n, double t)
{
	int64_t		lo = 0;
	int64_t		hi = n;

	while (lo < hi)
	{
		int64_t		mid = lo + (hi - lo) / 2;

		if (p[mid] > t)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The row where uniform u falls in prefix sums p (total p[n - 1] > 0). */
static int64_t
km_afk_pick(const double *p, const km_afk_entry *e, int64_t n, double u)
{
	int64_t		i = km_afk_search(p, n, u * p[n - 1]);

	/* u * total rounded up to the total: the last row with a share */
	if (i >= n)
	{
		i = n - 1;
		while (i > 0 && p[i - 1] == p[i])
			i--;
	}
	return e[i].row;
}

/*
 * M proposals into out (row indices); totals[0] = sum a, totals[1] = sum b,
 * in hash order.  work: km_afkmc2_work_bytes(n) bytes.  sum b must be > 0.
 */
void
km_afkmc2_propose(int64_t n, const uint64_t *hashes, km_afk_term term, void *ctx,
				  int64_t M, uint64_t stream, int64_t *out, double totals[2], void *work)
{
	km_afk_entry *e = (km_afk_entry *) work;
	km_afk_entry *tmp = e + n;
	int64_t    *count = (int64_t *) (tmp + n);
	double	   *pa = (double *) tmp;	/* after the sort, tmp holds the sums */
	double	   *pb = pa + n;
	double		sa = 0.0;
	double		sb = 0.0;

	for (int64_t i = 0; i < n; i++)
	{
		e[i].hash = hashes[i];
		e[i].row = i;
	}
	/* stable LSD radix sort by hash: an even number of passes ends in e */
	for (int shift = 0; shift < 64; shift += KM_RADIX_BITS)
	{
		km_afk_entry *src = (shift / KM_RADIX_BITS) % 2 == 0 ? e : tmp;
		km_afk_entry *dst = src == e ? tmp : e;
		int64_t		at = 0;

		memset(count, 0, sizeof(int64_t) * KM_RADIX);
		for (int64_t i = 0; i < n; i++)
			count[(src[i].hash >> shift) & (KM_RADIX - 1)]++;
		for (int b = 0; b < KM_RADIX; b++)
		{
			int64_t		c = count[b];

			count[b] = at;
			at += c;
		}
		for (int64_t i = 0; i < n; i++)
			dst[count[(src[i].hash >> shift) & (KM_RADIX - 1)]++] = src[i];
	}

	for (int64_t i = 0; i < n; i++)
	{
		sa += term(ctx, e[i].row, 0);
		sb += term(ctx, e[i].row, 1);
		pa[i] = sa;
		pb[i] = sb;
	}
	totals[0] = sa;
	totals[1] = sb;

	for (int64_t j = 0; j < M; j++)
	{
		double		half = km_uniform(km_mix64(2 * (uint64_t) j), stream);
		double		u = km_uniform(km_mix64(2 * (uint64_t) j + 1), stream);

		if (sa > 0.0 && half < 0.5)
			out[j] = km_afk_pick(pa, e, n, u);
		else
			out[j] = km_afk_pick(pb, e, n, u);
	}
}
