/*
 * km_xsum.h
 *	  Exact sums: centroid sums that do not depend on how the rows were
 *	  ordered, split over threads, or split over servers.
 *
 * A double sum of many rows rounds, and where it rounds depends on the
 * order of the terms; two servers summing halves of the rows would then
 * not reproduce, bit for bit, the sum one server makes.  Here every sum is
 * exact, and only the exact value is ever rounded (once, to nearest even):
 * the same rows give the same double however they were grouped.
 *
 * Two tools, for two places:
 *
 *	- km_xacc, a superaccumulator: 32-bit digits in 64-bit words covering
 *	  the whole range of double, so any finite double adds in exactly (a few
 *	  integer operations).  It holds per-cluster inertia, merges partial sums
 *	  from other servers, and rounds.  km_xacc_emit writes the value as its
 *	  canonical expansion: the rounded value, then the rounded rest, ...;
 *	  that is how exact sums travel (kmeans_partial).
 *
 *	- Levels, for the hot loop of a Lloyd iteration (n * d additions): a
 *	  pass over the rows first bounds every term (|t| < 2^emax, t a multiple
 *	  of 2^emin, km_xstats); a term is then cut at powers of two fixed by
 *	  that bound into nlev pieces, and each piece goes into its own double
 *	  accumulator, where the bound guarantees that no addition rounds
 *	  (km_xlevels).  Cutting is two additions with a "magic" constant,
 *	  vectorised like the plain sum.  Most data need one level (the plain
 *	  double sum is then already exact) or two.
 *
 * Plain C, no PostgreSQL headers; shared by the CPU engine, the SQL layer
 * and the split fits of the GPU engine (kernels/update/xsums.cu cuts terms
 * in levels on the device; kernels/driver/split.cu rounds on the host).
 * Compile with -ffp-contract=off: every step here relies on single IEEE
 * operations.
 */
#ifndef KM_XSUM_H
#define KM_XSUM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* host and device alike under nvcc (the split fits' kernels cut terms in levels) */
#ifndef KM_XS
#ifdef __CUDACC__
#define KM_XS static __host__ __device__ inline
#else
#define KM_XS static inline
#endif
#endif

/* ---- the superaccumulator ---- */

/* value = sum of w[i] * 2^(32 i + KM_XACC_BASE); 2^-1074 sits in word 0 */
#define KM_XACC_BASE	(-1088)
#define KM_XACC_WORDS	72
/* a canonical expansion of any double sum has at most this many terms */
#define KM_XACC_MAXTERMS 48
/* normalise before a word can overflow */
#define KM_XACC_ADDS	((int64_t) 1 << 29)

typedef struct km_xacc
{
	int64_t		w[KM_XACC_WORDS];
	int			lo;				/* words below lo are zero */
	int			hi;				/* words above hi are zero */
	int64_t		adds;			/* additions since the last normalisation */
} km_xacc;

KM_XS void
km_xacc_init(km_xacc *a)
{
	memset(a->w, 0, sizeof(a->w));
	a->lo = KM_XACC_WORDS;
	a->hi = -1;
	a->adds = 0;
}

/* Back to zero, touching only the words in use. */
KM_XS void
km_xacc_clear(km_xacc *a)
{
	if (a->hi >= a->lo)
		memset(a->w + a->lo, 0, sizeof(int64_t) * (size_t) (a->hi - a->lo + 1));
	a->lo = KM_XACC_WORDS;
	a->hi = -1;
	a->adds = 0;
}

KM_XS int
km_xacc_is_zero(const km_xacc *a)
{
	for (int i = a->lo; i <= a->hi; i++)
		if (a->w[i] != 0)
			return 0;
	return 1;
}

/*
 * Carry every word into [0, 2^32) but the top one, which keeps the sign.
 */
KM_XS void
km_xacc_normalize(km_xacc *a)
{
	int			top;

	if (a->hi < a->lo)
		return;
	top = a->hi + 2 < KM_XACC_WORDS - 1 ? a->hi + 2 : KM_XACC_WORDS - 1;
	for (int i = a->lo; i < top; i++)
	{
		int64_t		c = a->w[i] >> 32;	/* arithmetic: floor(w / 2^32) */

		a->w[i] -= c * ((int64_t) 1 << 32);
		a->w[i + 1] += c;
	}
	a->hi = top;
	while (a->hi >= a->lo && a->w[a->hi] == 0)
		a->hi--;
	while (a->lo <= a->hi && a->w[a->lo] == 0)
		a->lo++;
	if (a->hi < a->lo)
	{
		a->lo = KM_XACC_WORDS;
		a->hi = -1;
	}
	a->adds = 0;
}

/*
 * a += x, exactly, for any finite x (the caller checks finiteness; an
 * infinity or NaN adds nothing).
 */
KM_XS void
km_xacc_add(km_xacc *a, double x)
{
	int			e;
	double		f;
	uint64_t	m;
	int			p;
	int			i;
	unsigned __int128 v;
	int64_t		d0,
				d1,
				d2;

	if (x == 0.0 || !isfinite(x))
		return;
	f = frexp(fabs(x), &e);		/* |x| = f 2^e, f in [0.5, 1) */
	m = (uint64_t) ldexp(f, 53);	/* exact: f has at most 53 bits */
	p = e - 53 - KM_XACC_BASE;	/* bit position of m's lowest bit */
	if (p < 0)
	{
		/* subnormal: the bits shifted out are zero */
		m >>= -p;
		p = 0;
	}
	i = p >> 5;
	v = (unsigned __int128) m << (p & 31);
	d0 = (int64_t) (uint32_t) v;
	d1 = (int64_t) (uint32_t) (v >> 32);
	d2 = (int64_t) (v >> 64);
	if (x < 0.0)
	{
		d0 = -d0;
		d1 = -d1;
		d2 = -d2;
	}
	a->w[i] += d0;
	a->w[i + 1] += d1;
	a->w[i + 2] += d2;
	if (i < a->lo)
		a->lo = i;
	if (i + 2 > a->hi)
		a->hi = i + 2;
	if (++a->adds >= KM_XACC_ADDS)
		km_xacc_normalize(a);
}

/* a += b, exactly. */
KM_XS void
km_xacc_merge(km_xacc *a, const km_xacc *b)
{
	if (b->hi < b->lo)
		return;
	if (a->adds + b->adds + 1 >= KM_XACC_ADDS)
		km_xacc_normalize(a);
	for (int i = b->lo; i <= b->hi; i++)
		a->w[i] += b->w[i];
	if (b->lo < a->lo)
		a->lo = b->lo;
	if (b->hi > a->hi)
		a->hi = b->hi;
	a->adds += b->adds + 1;
	if (a->adds >= KM_XACC_ADDS)
		km_xacc_normalize(a);
}

/*
 * The value rounded to the nearest double, ties to even (what one IEEE
 * addition of two doubles gives for their exact sum); +-HUGE_VAL when it is
 * beyond the range of double.  Normalises a.
 */
KM_XS double
km_xacc_round(km_xacc *a)
{
	uint32_t	mag[KM_XACC_WORDS];
	int			neg;
	int			top;
	int			topbit;
	int			r;
	int			base;
	unsigned __int128 v;
	uint64_t	mant;
	int			shift;
	int			roundbit;
	int			sticky;
	double		d;

	km_xacc_normalize(a);
	if (a->hi < a->lo)
		return 0.0;
	neg = a->w[a->hi] < 0;
	/* the magnitude as unsigned digits, words lo .. hi only */
	{
		int64_t		borrow = 0;

		for (int i = a->lo; i <= a->hi; i++)
		{
			int64_t		t = neg ? -a->w[i] - borrow : a->w[i];

			if (neg)
			{
				/* -value: complement digit by digit, from the bottom */
				borrow = t < 0 ? 1 : 0;
				t += borrow << 32;
			}
			mag[i] = (uint32_t) t;
		}
	}
	top = a->hi;
	while (top >= a->lo && mag[top] == 0)
		top--;
	if (top < a->lo)
		return 0.0;
	topbit = 32 * top + 31 - __builtin_clz(mag[top]);

	/* round at bit r: 53 bits, but never below 2^-1074 */
	r = topbit - 52;
	if (r < -1074 - KM_XACC_BASE)
		r = -1074 - KM_XACC_BASE;

	/* the top three words hold every bit from r - 1 up (r >= 32 (top - 2) + 12) */
	base = 32 * (top - 2);
	v = (unsigned __int128) mag[top] << 64;
	if (top - 1 >= a->lo)
		v |= (unsigned __int128) mag[top - 1] << 32;
	if (top - 2 >= a->lo)
		v |= mag[top - 2];
	shift = r - base;
	mant = (uint64_t) (v >> shift);
	roundbit = (int) ((v >> (shift - 1)) & 1);
	sticky = (v & (((unsigned __int128) 1 << (shift - 1)) - 1)) != 0;
	for (int i = a->lo; i <= top - 3 && !sticky; i++)
		sticky = mag[i] != 0;
	if (roundbit && (sticky || (mant & 1)))
		mant++;
	d = ldexp((double) mant, r + KM_XACC_BASE);
	return neg ? -d : d;
}

/*
 * The canonical expansion of a's value: out[0] = the rounded value, out[1]
 * = the rounded rest, and so on while something is left; returns the number
 * of terms (0 for zero).  a ends at zero.  Every exact value has exactly one
 * such expansion, so equal sums are written the same way.
 */
KM_XS int
km_xacc_emit(km_xacc *a, double *out, int max)
{
	int			n = 0;

	while (n < max)
	{
		double		v = km_xacc_round(a);

		if (v == 0.0)
			break;
		if (!isfinite(v))
			return -1;
		out[n++] = v;
		km_xacc_add(a, -v);
	}
	return n;
}

/* ---- levels: exact sums of many bounded terms in plain doubles ---- */

#define KM_XLEV_MAX 6

/*
 * How terms of a sum are cut: level 0 takes t rounded to a multiple of
 * 2^cut[1], level 1 the rest rounded to a multiple of 2^cut[2], ..., the
 * last level what is left, itself a multiple of 2^emin.  magic[l] =
 * 1.5 * 2^(52 + cut[l]) does the rounding: (t + magic) - magic.
 */
typedef struct km_xlevels
{
	int			n;				/* levels, 1 .. KM_XLEV_MAX */
	int			exact;			/* the levels hold every bit (else the last is rounded) */
	double		magic[KM_XLEV_MAX];	/* magic[l] for l >= 1 */
} km_xlevels;

/* Bits of n + 1, at least 3: a sum of n terms below 2^e stays below 2^(e + bits). */
KM_XS int
km_xlevels_nbits(int64_t n)
{
	int			b = 3;

	while (b < 62 && ((int64_t) 1 << b) <= n + 1)
		b++;
	return b;
}

/*
 * Levels for up to n terms, each below 2^emax in magnitude and a multiple
 * of 2^emin.  Each double accumulator holds 53 bits; a level takes the
 * 54 - nbits(n) bits its sum has room for.
 */
KM_XS void
km_xlevels_make(int emax, int emin, int64_t n, km_xlevels *lv)
{
	int			b = km_xlevels_nbits(n);
	int			top = emax + b;	/* every partial sum of level 0 is below 2^top */
	int			cut;

	memset(lv, 0, sizeof(*lv));
	lv->n = 1;
	lv->exact = 1;
	if (emin > emax)
		return;					/* no nonzero term */
	cut = top - 53;
	while (cut > emin)
	{
		/* level n keeps multiples of 2^cut; the rest goes down */
		if (lv->n == KM_XLEV_MAX)
		{
			lv->exact = 0;
			break;
		}
		lv->magic[lv->n] = ldexp(1.5, 52 + cut);
		lv->n++;
		/* the rest is at most 2^(cut - 1): its n-term sums stay below 2^(cut - 1 + b) */
		cut = cut - 1 + b - 53;
	}
}

/* Cut t into the levels' pieces (exact: the pieces add up to t when lv->exact). */
KM_XS void
km_xlevels_split(const km_xlevels *lv, double t, double *piece)
{
	for (int l = 1; l < lv->n; l++)
	{
		double		h = (t + lv->magic[l]) - lv->magic[l];

		piece[l - 1] = h;
		t -= h;
	}
	piece[lv->n - 1] = t;
}

/* t added to a sum kept in the levels of lv, stride doubles apart. */
KM_XS void
km_xlevels_add(const km_xlevels *lv, double *lev, size_t stride, double t)
{
	for (int l = 1; l < lv->n; l++)
	{
		double		h = (t + lv->magic[l]) - lv->magic[l];

		lev[(size_t) (l - 1) * stride] += h;
		t -= h;
	}
	lev[(size_t) (lv->n - 1) * stride] += t;
}

/* The rounded value of a sum held in n levels. */
KM_XS double
km_xlevels_round(const double *lev, int n, size_t stride)
{
	km_xacc		a;

	if (n == 1)
		return lev[0];
	if (n == 2)
		return lev[0] + lev[stride];	/* one IEEE addition: the exact sum, rounded */
	km_xacc_init(&a);
	for (int l = 0; l < n; l++)
		km_xacc_add(&a, lev[(size_t) l * stride]);
	return km_xacc_round(&a);
}

/* ---- bounds on the terms ---- */

/*
 * What a pass learns about the terms of the sums: every value (w * x, or w
 * * unit x for cosine) has magnitude below 2^xmax and is a multiple of
 * 2^xmin; weights likewise with wmax and wmin.  xmin > xmax: no nonzero
 * term yet.
 */
typedef struct km_xstats
{
	int			xmax;
	int			xmin;
	int			wmax;
	int			wmin;
} km_xstats;

KM_XS void
km_xstats_init(km_xstats *s)
{
	s->xmax = -100000;
	s->xmin = 100000;
	s->wmax = -100000;
	s->wmin = 100000;
}

KM_XS void
km_xstats_merge(km_xstats *a, const km_xstats *b)
{
	if (b->xmax > a->xmax)
		a->xmax = b->xmax;
	if (b->xmin < a->xmin)
		a->xmin = b->xmin;
	if (b->wmax > a->wmax)
		a->wmax = b->wmax;
	if (b->wmin < a->wmin)
		a->wmin = b->wmin;
}

/*
 * The biased exponent fields of a row's values, for km_xstats_add: the
 * largest, and the smallest among nonzero values (a subnormal counts as 1,
 * the exponent of its lowest bit); *emin = 255 when every value is zero.
 */
KM_XS void
km_xstats_exponents(const float *x, int d, uint32_t *emax, uint32_t *emin)
{
	uint32_t	hi = 0;
	uint32_t	lo = 255;

	for (int i = 0; i < d; i++)
	{
		uint32_t	bits;
		uint32_t	e;

		memcpy(&bits, &x[i], sizeof(bits));
		bits &= 0x7fffffffu;
		e = bits >> 23;
		if (e > hi)
			hi = e;
		if (bits != 0 && (e > 0 ? e : 1) < lo)
			lo = e > 0 ? e : 1;
	}
	*emax = hi;
	*emin = lo;
}

/*
 * Add one row to s, given its exponent fields (km_xstats_exponents), its
 * weight (when weighted) and, for cosine, its norm.  A float with biased
 * exponent e is below 2^(e - 126) and a multiple of 2^(e - 150).  For
 * cosine the sums hold the unit row (float) (x / norm), below 2^1; since
 * x_i / norm >= 2^(e_i - ne) for |x_i| >= 2^e_i and norm < 2^ne, a unit
 * value's lowest bit is no lower than x_i's minus ne (minus one to spare),
 * and never below 2^-149.  Weighted terms are w * value, exact in double:
 * their bounds are the products of the bounds.
 */
KM_XS void
km_xstats_add(km_xstats *s, uint32_t emax, uint32_t emin, float w, int weighted,
			  int cosine, double norm)
{
	int			hmax = (int) emax - 126;
	int			lmin = (int) emin - 150;

	if (emin == 255)
		return;					/* an all-zero row adds nothing */
	if (cosine)
	{
		int			ne;

		(void) frexp(norm, &ne);	/* norm < 2^ne */
		hmax = 1;
		lmin = lmin - ne - 1;
		if (lmin < -149)
			lmin = -149;
	}
	if (weighted)
	{
		uint32_t	wb;
		uint32_t	we;

		memcpy(&wb, &w, sizeof(wb));
		wb &= 0x7fffffffu;
		if (wb == 0)
			return;				/* weight 0: nothing added */
		we = wb >> 23;
		if ((int) we - 126 > s->wmax)
			s->wmax = (int) we - 126;
		if ((int) (we > 0 ? we : 1) - 150 < s->wmin)
			s->wmin = (int) (we > 0 ? we : 1) - 150;
		hmax += (int) we - 126;
		lmin += (int) (we > 0 ? we : 1) - 150;
	}
	if (hmax > s->xmax)
		s->xmax = hmax;
	if (lmin < s->xmin)
		s->xmin = lmin;
}

/*
 * The levels of a call's sums of rows and of weights, for n rows with term
 * bounds s: weighted says some rows carry weights, unweighted that some do
 * not (they add 1, below 2^1 and a multiple of 2^0, to the weight sums).
 */
KM_XS void
km_xlevels_for(const km_xstats *s, int64_t n, int weighted, int unweighted,
			   km_xlevels *xlev, km_xlevels *wlev)
{
	int			wmax = s->wmax;
	int			wmin = s->wmin;

	km_xlevels_make(s->xmax, s->xmin, n, xlev);
	if (!weighted || unweighted)
	{
		wmax = wmax > 1 ? wmax : 1;
		wmin = wmin < 0 ? wmin : 0;
	}
	km_xlevels_make(wmax, wmin, n, wlev);
}

/* km_xstats_add for one row of d values. */
KM_XS void
km_xstats_row(km_xstats *s, const float *x, int d, float w, int weighted,
			  int cosine, double norm)
{
	uint32_t	emax,
				emin;

	km_xstats_exponents(x, d, &emax, &emin);
	km_xstats_add(s, emax, emin, w, weighted, cosine, norm);
}

#endif							/* KM_XSUM_H */
