/*
 * kmeanspp.cu
 *	  Greedy k-means++ on the device, by the order-free sampling keys of
 *	  km_hash.h (random.cu: the random init, by the same keys).
 *
 * Plain C reference: ref_seed in kernels/bench/ref_kmeans.c (the rules of
 * src/engine/cpu_seed.c, the arithmetic of seed_pp.h), compared bit for bit
 * by bench_engine.cu.
 *
 * k-means++ (greedy, L = 2 + (int) ln k candidates a step):
 *	step 0:  the row with the smallest key under w;
 *	step s:  the L smallest finite keys under w D2 (stream s) are the
 *	         candidates (none finite: the smallest key under w); the one
 *	         leaving the lowest potential sum w min(D2, d) wins (ties: the
 *	         smaller key); D2 = min(D2, d to the winner).
 * D2 and the potentials are seed_pp.h's: float chains (equal rows give 0),
 * integer sums (order-free), so the seeds depend neither on the row order
 * nor on how the rows are split over blocks.
 *
 * How a step runs: one launch of kmg_pp_unit_kernel ("a unit") per step,
 * all state on the device.  A unit reads the state the previous one left,
 * makes one pass over the rows and its last block decides the next state,
 * so the host only queues units (in CUDA graphs) and reads a few bytes
 * between batches, for progress and cancellation.  Unit kinds:
 *	EVAL s:  candidates of step s known.  Per row: D2 <- min(D2, d(prev))
 *	         (prev = the winner of step s - 1), d to each candidate, the
 *	         potentials, and for each candidate l the keys the row would have
 *	         at step s + 1 had l won (w min(D2, d_l), stream s + 1); rows
 *	         with a key under the threshold tau = 16 L / potential go to a
 *	         list per candidate (about 16 L rows expected, 1024 kept).  The
 *	         last block picks the winner; the L smallest keys of its list are
 *	         the next candidates when all L are under tau (then no row
 *	         outside the list can beat them), else the next unit is a
 *	         SELECT.  One pass a step, and no n x L distance buffer.
 *	SELECT s: D2 <- min(D2, d(prev)), then the exact L smallest keys (per
 *	         block, merged by the last block).  Runs at step 0 (keys under w),
 *	         at step 1, and when a threshold missed (the potential dropped
 *	         more than ~8x in one step, or fewer than L rows are left).
 * Distances are exact in the float arithmetic above, but most need not be
 * computed: only min(D2, d) matters, and d >= D2 is often certain from an
 * int8 copy of the rows (the "shadow": fl(x - c0) * S rounded, S = 127 /
 * max |x - c0|, built once per run after step 1).  With q = the shadow rows
 * and r_x >= |S (x - c0) - q_x| (per row, stored), S |x - c| >=
 * |q_x - q_c| - r_x - r_c, and |q_x - q_c|^2 is an exact integer (the
 * int8 dots on the tensor cores, int32 sums); when that bound puts d above
 * D2 with a margin for the float rounding of d, min(D2, d) = D2 without
 * computing d.  The rest (pairs of row and column) are computed exactly
 * from the float rows.  Pruning never changes a result, only the work: a
 * unit whose pairs were mostly unpruned makes the next 16 units dense
 * (every distance, rows streamed once).  In a filtered unit each warp
 * works through its own 32 rows of each tile with no block barrier.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "seed/seed.cuh"
#include "seed/seed_pp.h"

#include <limits.h>
#include <math.h>

#define KMG_PP_NT 128			/* threads of a unit = rows of a tile */
#define KMG_PP_CAP 1024			/* entries of a candidate's key list */
#define KMG_PP_CT 16.0			/* threshold tau = CT * L / potential */
#define KMG_PP_DENSE_FRAC 0.06	/* unpruned share above which units go dense */
#define KMG_PP_DENSE_UNITS 16
#define KMG_PP_RS 36			/* floats per row of a dense stage (32 + pad) */
#define KMG_PP_EB 4				/* list entries a lane of the last block asks for at once */
#ifndef KMG_PP_XB
#define KMG_PP_XB 2			/* filter: float4 loads a lane issues at once for the pairs */
#endif

/* ---- k-means++: state ---- */

/* What a unit reads; only the last block of a unit writes it. */
typedef struct kmg_pp_state
{
	kmg_pp_head h;
	uint64_t	seed;
	int			run;
	int			shift;			/* potentials: terms times 2^shift (seed_pp.h) */
	double		pscale;			/* 2^shift when a double holds it, else 0 */
	float		fac;			/* filter: margin on D2 for the rounding of d */
	int			has_prev;		/* fold column 0 (prev) into D2 first */
	int			first;			/* prev is c0 and D2 is not set yet */
	int			nod2;			/* step 0: keys under w alone */
	int			ncand;
	int			prev;			/* row of column 0 */
	int			c0;
	int			filter;			/* the shadow is built */
	int			dense_left;		/* units to run dense before trying the filter */
	float		qscale;			/* S */
	float		qmax;			/* max |fl(x - c0)| (from the first SELECT) */
	int			pad;
	double		tau;			/* keys under this go to the lists */
	int			cand[KMG_PP_LMAX];
	double		ckey[KMG_PP_LMAX];
} kmg_pp_state;

/* What the blocks of a unit add up; the last block reads and clears it. */
typedef struct kmg_pp_acc
{
	unsigned long long pot[KMG_PP_LMAX + 1];	/* [0]: sum w D2; [1 + l]: candidate l's change from it */
	unsigned long long pairs;	/* exact distances of a filtered unit */
	int			lcount[KMG_PP_LMAX];
	unsigned int ticket;
	unsigned int qmax_bits;
} kmg_pp_acc;

/* What the last block reads of kmg_pp_acc, asked for at once by its threads, in shared memory. */
typedef struct kmg_pp_accv
{
	unsigned long long pot[KMG_PP_LMAX + 1];
	unsigned long long pairs;
	int			lcount[KMG_PP_LMAX];
	unsigned int qmax_bits;
} kmg_pp_accv;

static_assert(2 * KMG_PP_LMAX + 3 <= KMG_PP_NT, "a thread for each word of kmg_pp_accv");

/* A block's smallest keys (SELECT units). */
typedef struct kmg_pp_part
{
	double		key[KMG_PP_LMAX];
	int			row[KMG_PP_LMAX];
	double		fkey;			/* smallest key under w alone */
	int			frow;
	int			pad;
} kmg_pp_part;

typedef struct kmg_pp_args
{
	const float *X;				/* n x dp filter rows */
	const float *W;
	const uint64_t *hashes;
	float	   *d2;
	signed char *q8;			/* n x dq */
	int		   *qn;
	float	   *qr;
	float	   *C;
	double	   *lkey;
	int		   *lrow;
	kmg_pp_part *part;
	kmg_pp_state *state;
	kmg_pp_acc *acc;
	int64_t		n;
	int			d;
	int			dp;
	int			dq;				/* 0: no filter */
	int			k;
	int			L;
} kmg_pp_args;

int
kmg_pp_dq(int dp)
{
	const int	dq = KMG_ROUND_UP(dp, 32);

	return dq <= KMG_PP_QMAX ? dq : 0;
}

/* Device bytes of the small buffers (lists, parts, state, accumulators). */
size_t
kmg_pp_fixed_bytes(int nblocks, int L)
{
	return (size_t) L * KMG_PP_CAP * (sizeof(double) + sizeof(int)) +
		(size_t) nblocks * sizeof(kmg_pp_part) + sizeof(kmg_pp_state) + sizeof(kmg_pp_acc) + 1024;
}

void
kmg_pp_carve(kmg_seed_bufs *sb, char *base, int nblocks, int L)
{
	size_t		o = 0;

	sb->lkey = (double *) (base + o);
	o += (size_t) L * KMG_PP_CAP * sizeof(double);
	sb->lrow = (int *) (base + o);
	o += KMG_ROUND_UP((size_t) L * KMG_PP_CAP * sizeof(int), 256);
	sb->part = base + o;
	o += KMG_ROUND_UP((size_t) nblocks * sizeof(kmg_pp_part), 256);
	sb->state = base + o;
	o += KMG_ROUND_UP(sizeof(kmg_pp_state), 256);
	sb->acc = base + o;
	sb->nblocks = nblocks;
	sb->L = L;
}

/* ---- k-means++: device helpers ---- */

/* Block-wide minimum of (key, row) over the KMG_PP_NT threads; all get it. */
__device__ void
kmg_pp_block_min(double &key, int &row, double *skey, int *srow)
{
	const int	tid = threadIdx.x;

	kmg_warp_argmin(key, row);
	__syncthreads();
	if ((tid & 31) == 0)
	{
		skey[tid >> 5] = key;
		srow[tid >> 5] = row;
	}
	__syncthreads();
	kmg_argmin_strided(skey, srow, KMG_PP_NT / 32, 1, key, row);
}

/* A potential term (seed_pp.h's kmg_pp_term, with the scale precomputed). */
__device__ __forceinline__ unsigned long long
kmg_pp_term_dev(float w, float m, const kmg_pp_state &st)
{
	if (st.pscale > 0.0)
	{
		/* w * m is exact; times a power of two, exact unless it leaves the range */
		double		v = __dmul_rn(__dmul_rn((double) w, (double) m), st.pscale);

		if (!(v >= 1.0))
			return 0ull;
		if (v > 0x1p62)
			v = 0x1p62;
		return __double2ull_rz(v);
	}
	return kmg_pp_term(w, m, st.shift);
}

/* What each thread of a unit carries over its rows. */
template <int LB>
struct kmg_pp_thr
{
	unsigned long long pot[LB + 1];
	double		fk;
	int			fr;
	int			cnt;			/* SELECT: keys held */
	float		amax;			/* first SELECT: max |x - c0| */
	unsigned int pairs;
};

/*
 * The end of one row (both pipelines): dist[0] = d to prev, dist[1 + l] = d
 * to candidate l (+inf where the filter proved d >= D2, which gives the same
 * minima, and for inactive columns).  w, d2o (D2 before this unit) and h
 * (the row's hash, needed at step 0, in SELECT units and for the next keys)
 * come from the caller, which can load them early.
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_row(const kmg_pp_args &a, const kmg_pp_state &st, int select, int keys_next,
		   uint64_t stream, int64_t r, float w, float d2o, uint64_t h,
		   const float (&dist)[LB + 1], kmg_pp_thr<LB> &t, double *lk, int *lr)
{
	if (!(w > 0.0f))
		return;
	if (st.nod2)
	{
		const double fk = km_sample_key(h, stream, (double) w);

		if (kmg_before(fk, (int) r, t.fk, t.fr))
		{
			t.fk = fk;
			t.fr = (int) r;
		}
		return;
	}

	float		d2n = d2o;

	if (st.has_prev)
	{
		d2n = dist[0] < d2o ? dist[0] : d2o;
		if (d2n != d2o)
			a.d2[r] = d2n;
	}
	const unsigned long long term0 = kmg_pp_term_dev(w, d2n, st);

	t.pot[0] += term0;
	if (select)
	{
		const double key = km_sample_key(h, stream, (double) w * (double) d2n);
		const double fk = km_sample_key(h, stream, (double) w);
		const int	L = a.L;

		if (isfinite(key) && (t.cnt < L || kmg_before(key, (int) r, lk[L - 1], lr[L - 1])))
		{
			int			p = t.cnt < L ? t.cnt++ : L - 1;

			while (p > 0 && kmg_before(key, (int) r, lk[p - 1], lr[p - 1]))
			{
				lk[p] = lk[p - 1];
				lr[p] = lr[p - 1];
				p--;
			}
			lk[p] = key;
			lr[p] = (int) r;
		}
		if (kmg_before(fk, (int) r, t.fk, t.fr))
		{
			t.fk = fk;
			t.fr = (int) r;
		}
		return;
	}

	{
		/*
		 * Candidate l's potential is pot[0] plus the row's change where d
		 * to l is below D2 (rare once a few seeds are in): only those
		 * terms are computed, their differences added modulo 2^64 (exact,
		 * the total is below 2^62), and the last block adds pot[0].
		 * Candidates past ncand have d = +inf.
		 */
		unsigned int low = 0;	/* candidates closer than D2 */

#pragma unroll
		for (int l = 0; l < LB; l++)
			low |= (dist[1 + l] < d2n ? 1u : 0u) << l;
		if (low != 0u)
#pragma unroll
			for (int l = 0; l < LB; l++)
				if ((low >> l) & 1u)
					t.pot[1 + l] += kmg_pp_term_dev(w, dist[1 + l], st) - term0;
		if (keys_next)
		{
			const double u = km_uniform(h, stream);
			const double xd = st.tau * (double) w * (double) d2n;

			/*
			 * Every key of this row is at least -ln(u) / (w D2); when u <=
			 * exp(-1.01 tau w D2) (less a margin for the float exp), none is
			 * under tau.  Only ~16 L rows a candidate get past this.
			 */
			if (xd > 0.0 && u > (double) (__expf((float) (-1.01 * xd)) * 0.9999f))
			{
#pragma unroll
				for (int l = 0; l < LB; l++)
					if (l < st.ncand)
					{
						const float m = (low >> l) & 1u ? dist[1 + l] : d2n;
						const double key = km_sample_key(h, stream, (double) w * (double) m);

						if (key < st.tau)
						{
							const int	i = atomicAdd(&a.acc->lcount[l], 1);

							if (i < KMG_PP_CAP)
							{
								a.lkey[(size_t) l * KMG_PP_CAP + i] = key;
								a.lrow[(size_t) l * KMG_PP_CAP + i] = (int) r;
							}
						}
					}
			}
		}
	}
}

/* kmg_pp_row with the row's own values loaded here (step 0, dense units). */
template <int LB>
__device__ __forceinline__ void
kmg_pp_row_ld(const kmg_pp_args &a, const kmg_pp_state &st, int select, int keys_next,
			  uint64_t stream, int64_t r, const float (&dist)[LB + 1], kmg_pp_thr<LB> &t,
			  double *lk, int *lr)
{
	const float w = a.W != NULL ? __ldg(a.W + r) : 1.0f;

	if (!(w > 0.0f))
		return;

	const uint64_t h = st.nod2 || select || keys_next ? __ldg(a.hashes + r) : 0ull;
	const float d2o = st.nod2 || st.first ? INFINITY : __ldcg(a.d2 + r);

	kmg_pp_row<LB>(a, st, select, keys_next, stream, r, w, d2o, h, dist, t, lk, lr);
}

/* Floats of a chain in the pairs' chain-major rows: dp / 4 rounded up to 4 mod 8. */
static __host__ __device__ __forceinline__ int
kmg_pp_seg(int dp)
{
	return dp / 4 + ((12 - (dp / 4) % 8) % 8);
}

/* Shared memory of a unit (dynamic part), bytes. */
static size_t
kmg_pp_smem_bytes(int lb, int dp, int dq)
{
	const int	nc = lb + 1;
	const size_t dense = 2 * (size_t) (KMG_PP_NT * KMG_PP_RS + nc * 32) * sizeof(float);
	size_t		filt = 0;

	if (dq > 0)
		filt = 2 * (size_t) KMG_PP_NT * (dq + 16) + (size_t) nc * 4 * kmg_pp_seg(dp) * sizeof(float) +
			(size_t) nc * (dq + 16) + 2 * (size_t) KMG_PP_NT * nc * sizeof(int) + 64;
	/* the last block reuses it for the merge's heads (one int a block: kmg_pp_prepare) */
	return KMG_ROUND_UP((dense > filt ? dense : filt), 16) + 64;
}

/* ---- k-means++: the unit's stages ---- */

/*
 * Step 0 (no D2 yet): every row of this block's tiles offers its key under
 * w alone (kmg_pp_row: the smallest is kept).
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_rows_nod2(int tid, const kmg_pp_args &a, const kmg_pp_state &st, int select,
				 uint64_t stream, int64_t mine, int64_t n, kmg_pp_thr<LB> &t, double *lk, int *lr)
{
	constexpr int NC = LB + 1;

	const float dist[NC] = {};

	for (int64_t ti = 0; ti < mine; ti++)
	{
		const int64_t r = (blockIdx.x + ti * gridDim.x) * KMG_PP_NT + tid;

		if (r < n)
			kmg_pp_row_ld<LB>(a, st, select, 0, stream, r, dist, t, lk, lr);
	}
}

/*
 * Dense rows: slabs of 32 floats of 128 rows (and of the columns), two
 * stages of cp.async; a thread owns a row and carries its NC x 4 chains
 * across the slabs, then ends the row (kmg_pp_row_ld).  The first SELECT
 * also measures max |x - c0| for the shadow's scale.  Every column is
 * computed, inactive ones from the zeros their slabs were filled with
 * (their distances are dropped at the row's end): behind a branch per
 * column each column's shared-memory loads waited in turn, without it
 * they are issued together and the chains interleave.  The loops run over
 * tiles, then slabs, and a stage's addresses move by a constant stride:
 * no 64-bit division or product per load (the copies were a quarter of a
 * dense unit's instructions).
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_rows_dense(int tid, const kmg_pp_args &a, const kmg_pp_state &st, unsigned char *smem,
				  const int *colrow, unsigned int cmask, int select, int keys_next,
				  uint64_t stream, int64_t mine, int64_t n, int dp, kmg_pp_thr<LB> &t,
				  double *lk, int *lr)
{
	constexpr int NC = LB + 1;
	const int	nslab = (dp + 31) >> 5;
	const int	SLOT = KMG_PP_NT * KMG_PP_RS + NC * 32;
	float	   *ring = reinterpret_cast<float *>(smem);
	float		acc[NC][4];
	/* this thread's share of a stage: rows i0 + 16 u of the tile, floats q4 .. q4 + 3 of the slab */
	const int	i0 = tid >> 3,
				q4 = 4 * (tid & 7);
	const size_t s16 = (size_t) 16 * dp;
	/* and of the columns' slabs: entries tid + KMG_PP_NT v of NC x 8 (offsets into X, slab 0) */
	constexpr int CV = (NC * 8 + KMG_PP_NT - 1) / KMG_PP_NT;
	size_t		coff[CV];
	bool		con[CV];

#pragma unroll
	for (int v = 0; v < CV; v++)
	{
		const int	c = tid + KMG_PP_NT * v;

		con[v] = c < NC * 8 && ((cmask >> (c >> 3)) & 1u);
		coff[v] = con[v] ? (size_t) colrow[c >> 3] * dp + 4 * (c & 7) : 0;
	}

	auto stage = [&](int64_t ti, int j, int par) {
		const int64_t r0 = (blockIdx.x + ti * gridDim.x) * KMG_PP_NT + i0;
		const int	col = 32 * j + q4;
		const int64_t left = n - r0;
		/* rows i0 + 16 u with 16 u < rl are copied, the rest zero-filled */
		const int	rl = col < dp ? (left > KMG_PP_NT ? KMG_PP_NT : (int) left) : 0;
		size_t		off = (size_t) r0 * dp + col;
		float	   *dst = ring + par * SLOT + i0 * KMG_PP_RS + q4;

#pragma unroll
		for (int u = 0; u < 8; u++)
		{
			const bool	ok = 16 * u < rl;

			kmg_cp16_zfill(dst + 16 * u * KMG_PP_RS, ok ? a.X + off : a.X, ok ? 16 : 0);
			off += s16;
		}
#pragma unroll
		for (int v = 0; v < CV; v++)
		{
			const int	c = tid + KMG_PP_NT * v;

			if (c < NC * 8)
			{
				const bool	ok = con[v] && 32 * j + 4 * (c & 7) < dp;

				kmg_cp16_zfill(ring + par * SLOT + KMG_PP_NT * KMG_PP_RS + (c >> 3) * 32 + 4 * (c & 7),
							ok ? a.X + coff[v] + 32 * j : a.X, ok ? 16 : 0);
			}
		}
	};

	if (mine > 0)
		stage(0, 0, 0);
	kmg_cp16_commit();
	int			par = 0;

	for (int64_t ti = 0; ti < mine; ti++)
	{
		const int64_t r = (blockIdx.x + ti * gridDim.x) * KMG_PP_NT + tid;
		const float *xr0 = ring + tid * KMG_PP_RS;
		const bool	amax_on = st.first && r < n;

#pragma unroll
		for (int c = 0; c < NC; c++)
			acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f;
		for (int j = 0; j < nslab; j++)
		{
			const float *xr = xr0 + par * SLOT;
			const float *cs = ring + par * SLOT + KMG_PP_NT * KMG_PP_RS;
			const int	gn = dp / 4 - 8 * j < 8 ? dp / 4 - 8 * j : 8;

			if (j + 1 < nslab)
				stage(ti, j + 1, par ^ 1);
			else if (ti + 1 < mine)
				stage(ti + 1, 0, par ^ 1);
			kmg_cp16_commit();
			kmg_cp16_wait<1>();
			__syncthreads();
#pragma unroll
			for (int q = 0; q < 8; q++)
				if (q < gn)
				{
					const float4 x = *reinterpret_cast<const float4 *>(xr + 4 * q);

#pragma unroll
					for (int c = 0; c < NC; c++)
					{
						const float4 cv = *reinterpret_cast<const float4 *>(cs + c * 32 + 4 * q);

						acc[c][0] = kmg_pp_step(acc[c][0], x.x, cv.x);
						acc[c][1] = kmg_pp_step(acc[c][1], x.y, cv.y);
						acc[c][2] = kmg_pp_step(acc[c][2], x.z, cv.z);
						acc[c][3] = kmg_pp_step(acc[c][3], x.w, cv.w);
						if (c == 0 && amax_on && (cmask & 1u))
							t.amax = fmaxf(t.amax,
										   fmaxf(fmaxf(fabsf(__fsub_rn(x.x, cv.x)),
													   fabsf(__fsub_rn(x.y, cv.y))),
												 fmaxf(fabsf(__fsub_rn(x.z, cv.z)),
													   fabsf(__fsub_rn(x.w, cv.w)))));
					}
				}
			__syncthreads();
			par ^= 1;
		}
		if (r < n)
		{
			float		dist[NC];

#pragma unroll
			for (int c = 0; c < NC; c++)
				dist[c] = ((cmask >> c) & 1u) ? kmg_pp_join(acc[c][0], acc[c][1], acc[c][2], acc[c][3])
					: INFINITY;
			kmg_pp_row_ld<LB>(a, st, select, keys_next, stream, r, dist, t, lk, lr);
		}
	}
	kmg_cp16_wait<0>();
}

/*
 * The int8 dot products of a warp's 32 staged rows (wq, qs bytes apart)
 * with every column's shadow row (colq, rows qs bytes apart), on the
 * tensor cores: m16n8k32, two m-tiles of rows by the column n-tiles,
 * int32 accumulators (exact: |dot| <= 127^2 dq).  Row i's dot with
 * column c goes to wd[i DS + c] (DS odd: a row's reads are conflict-free);
 * the warp syncs before it returns.  Columns past NC (an n-tile's tail)
 * read column NC - 1 again and are dropped; inactive columns are zeros and
 * tested by no one.
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_tile_dots(int lane, const signed char *wq, const signed char *colq, int qs, int dq,
				 int *wd)
{
	constexpr int NC = LB + 1;
	constexpr int NN = (NC + 7) / 8;	/* n-tiles of columns */
	constexpr int DS = NC | 1;
	int			acc[2][NN][4];
	/* ldmatrix: lane l gives row l % 8 of matrix l / 8 */
	const int	q = lane >> 3,
				rr = lane & 7;
	const unsigned xa = kmg_smem_addr(wq + (size_t) (rr + 8 * (q & 1)) * qs + 16 * (q >> 1));
	unsigned	cb[(NN + 1) / 2];	/* n-tiles 2 p, 2 p + 1: matrices (lo, hi bytes) of each */

#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int j = 0; j < NN; j++)
			acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0;
#pragma unroll
	for (int pj = 0; pj < (NN + 1) / 2; pj++)
	{
		const int	c = 8 * (2 * pj + (q >> 1)) + rr;

		cb[pj] = kmg_smem_addr(colq + (size_t) (c < NC ? c : NC - 1) * qs + 16 * (q & 1));
	}
#pragma unroll 2
	for (int ks = 0; ks < (dq >> 5); ks++)
	{
		uint32_t	a0[4],
					a1[4];

		kmg_ldsm4(a0, xa + 32 * ks);
		kmg_ldsm4(a1, xa + 16 * qs + 32 * ks);
#pragma unroll
		for (int pj = 0; pj < (NN + 1) / 2; pj++)
		{
			uint32_t	bf[4];

			kmg_ldsm4(bf, cb[pj] + 32 * ks);
			kmg_mma_s8(acc[0][2 * pj], a0, bf[0], bf[1]);
			kmg_mma_s8(acc[1][2 * pj], a1, bf[0], bf[1]);
			if (2 * pj + 1 < NN)
			{
				kmg_mma_s8(acc[0][2 * pj + 1], a0, bf[2], bf[3]);
				kmg_mma_s8(acc[1][2 * pj + 1], a1, bf[2], bf[3]);
			}
		}
	}
	/* fragment e of (m, j): row 16 m + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2 */
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int j = 0; j < NN; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
			{
				const int	row = 16 * m + (lane >> 2) + 8 * (e >> 1),
							col = 8 * j + 2 * (lane & 3) + (e & 1);

				if (col < NC)
					wd[row * DS + col] = acc[m][j][e];
			}
	__syncwarp();
}

/*
 * The filter's bound for one row of a tile against every column, from
 * the row's int8 dot products with the columns' shadow rows (dot, from
 * kmg_pp_tile_dots): the columns where S |x - c| >= sqrt(Dq) - (r_x +
 * r_c) cannot put d above D2; returns the mask of those (the pairs that
 * must be computed exactly).
 */
template <int LB>
__device__ __forceinline__ unsigned int
kmg_pp_tile_bounds(const kmg_pp_state &st, const int *dot, const int2 *cq, unsigned int cmask,
				   float S, bool live, float wt, float d2o, int qx, float rx)
{
	constexpr int NC = LB + 1;
	unsigned int mask = 0;

	if (live && wt > 0.0f)
	{
		/*
		 * S |x - c| >= sqrt(Dq) - (r_x + r_c); d >= |x - c|^2 (1 - eps)
		 * (fac covers 1 / (1 - eps)); prune when that puts d at or
		 * above D2 with room for the float steps of this test.
		 */
		const float A = S * sqrtf(d2o * st.fac);

		/* every column (an inactive one is zeros), no branch: masked at the end */
#pragma unroll
		for (int c = 0; c < NC; c++)
		{
			const int2	q = cq[c];	/* |q_c|^2, r_c (bits) */
			const float th = A + (rx + __int_as_float(q.y));
			const int	dq2 = qx + q.x - 2 * dot[c];

			mask |= ((float) dq2 > th * th * 1.00001f ? 0u : 1u) << c;
		}
	}
	return mask & cmask;
}

/*
 * A warp's unpruned (row, column) pairs of a tile, listed row-major (a
 * scan of the lanes' masks) in ids, then computed exactly, 8 pairs at a
 * time: their float rows staged in xs (the warp's part of the tile's
 * stage, free once its dots are taken), chain j of pair p on lane 4 p + j
 * (seed_pp.h's order), joined by lane 4 p into res.  Returns this lane's
 * first slot in res; *total: the warp's pairs.  Only the warp takes part.
 */
template <int LB>
__device__ __forceinline__ int
kmg_pp_warp_pairs(int lane, const kmg_pp_args &a, int64_t row0, unsigned int mask, int *ids,
				  float *res, float *xs, const float *colf, int cs, int seg, int dp, int p_0,
				  int g_0, int p_step, int g_step, int &total_out)
{
	const int	cnt = __popc(mask);
	const int	g4 = dp >> 2;
	int			incl = cnt;

	if (__ballot_sync(0xffffffffu, mask != 0u) == 0u)
	{
		total_out = 0;			/* (about a third of a warp's tiles) */
		return 0;
	}
	for (int o = 1; o < 32; o <<= 1)
	{
		const int	v = __shfl_up_sync(0xffffffffu, incl, o);

		if (lane >= o)
			incl += v;
	}

	const int	total = __shfl_sync(0xffffffffu, incl, 31);

	{
		int			o = incl - cnt;

		for (unsigned int m = mask; m != 0u; m &= m - 1u)
			ids[o++] = (lane << 5) | (__ffs(m) - 1);
	}
	__syncwarp();
	for (int p0 = 0; p0 < total; p0 += 8)
	{
		const int	np = total - p0 < 8 ? total - p0 : 8;
		const int	items = np * g4;

		/*
		 * the pairs' float rows, KMG_PP_XB 16-byte loads a lane in flight;
		 * item it = b + 32 u + lane is float4 ig of pair ip, it = ip g4 + ig,
		 * stepped without a division (p_0, g_0: the lane's; 32 = p_step g4 + g_step)
		 */
		int			ip = p_0,
					ig = g_0;

		for (int b = 0; b < items; b += KMG_PP_XB * 32)
		{
			float4		v[KMG_PP_XB];
			int			at[KMG_PP_XB];

#pragma unroll
			for (int u = 0; u < KMG_PP_XB; u++)
			{
				at[u] = -1;
				if (b + 32 * u + lane < items)
				{
					const int64_t r2 = row0 + (ids[p0 + ip] >> 5);

					v[u] = __ldg(reinterpret_cast<const float4 *>(a.X + (size_t) r2 * dp) + ig);
					at[u] = ip * cs + ig;
				}
				ip += p_step;
				ig += g_step;
				if (ig >= g4)
				{
					ig -= g4;
					ip++;
				}
			}
#pragma unroll
			for (int u = 0; u < KMG_PP_XB; u++)
				if (at[u] >= 0)
				{
					xs[at[u]] = v[u].x;
					xs[at[u] + seg] = v[u].y;
					xs[at[u] + 2 * seg] = v[u].z;
					xs[at[u] + 3 * seg] = v[u].w;
				}
		}
		__syncwarp();

		/* chain j of pair p on lane 4 p + j (seed_pp.h's order), joined by lane 4 p */
		{
			const int	p = lane >> 2,
						j = lane & 3;
			float		acc = 0.0f;

			if (p < np)
			{
				const float *xr = xs + p * cs + j * seg;
				const float *cr = colf + (ids[p0 + p] & 31) * cs + j * seg;
				int			e = 0;

#pragma unroll 2
				for (; e + 4 <= g4; e += 4)
				{
					const float4 xv = *reinterpret_cast<const float4 *>(xr + e);
					const float4 cv = *reinterpret_cast<const float4 *>(cr + e);

					acc = kmg_pp_step(acc, xv.x, cv.x);
					acc = kmg_pp_step(acc, xv.y, cv.y);
					acc = kmg_pp_step(acc, xv.z, cv.z);
					acc = kmg_pp_step(acc, xv.w, cv.w);
				}
				for (; e < g4; e++)
					acc = kmg_pp_step(acc, xr[e], cr[e]);
			}

			const float a1 = __shfl_down_sync(0xffffffffu, acc, 1);
			const float a2 = __shfl_down_sync(0xffffffffu, acc, 2);
			const float a3 = __shfl_down_sync(0xffffffffu, acc, 3);

			if (j == 0 && p < np)
				res[p0 + p] = kmg_pp_join(acc, a1, a2, a3);
		}
		__syncwarp();
	}
	total_out = total;
	return incl - cnt;
}

/*
 * Filtered rows, each warp on its own 32 rows of a tile, with no block
 * barrier past the columns: the warp's shadow rows come in two stages
 * (16-byte cp.async), their int8 dots with the columns' shadow rows on
 * the tensor cores, the bound test, then the warp's unpruned (row,
 * column) pairs exactly.  Each wait on memory overlaps other work: a
 * row's own values (D2, |q|^2, r_x, w) are loaded before the wait for its
 * tile and arrive under the dots, its hash before the pairs; the pairs'
 * float rows are loaded together, 8 pairs at a time, into the warp's part
 * of the stage, and four lanes a pair run the four chains from shared
 * memory.
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_rows_filtered(int tid, int lane, int warp, const kmg_pp_args &a, const kmg_pp_state &st,
					 unsigned char *smem, const int *colrow, int2 *cq, unsigned int cmask,
					 int select, int keys_next, uint64_t stream, int64_t mine, int64_t n, int dp,
					 kmg_pp_thr<LB> &t, double *lk, int *lr)
{
	constexpr int NC = LB + 1;
	const int	dq = a.dq;
	const int	qs = dq + 16;
	/*
	 * The columns' and the pairs' float rows, chain-major: element i at
	 * (i % 4) seg + i / 4, so that chain j (seed_pp.h) is contiguous and a
	 * lane reads it 16 bytes at a time; seg = dp / 4 rounded to 4 mod 8
	 * puts a warp's 8 rows x 4 chains on distinct banks.
	 */
	const int	seg = kmg_pp_seg(dp);
	const int	cs = 4 * seg;
	signed char *qring = reinterpret_cast<signed char *>(smem);
	float	   *colf = reinterpret_cast<float *>(smem + 2 * KMG_PP_NT * qs);
	signed char *colq = reinterpret_cast<signed char *>(colf + NC * cs);	/* rows qs bytes apart */
	/* the warp's scratch: the tile's dots (32 x (NC | 1)), then its pairs' ids and results */
	int		   *wdots = reinterpret_cast<int *>(colq + NC * qs) + warp * 64 * NC;
	int		   *wids = wdots;
	float	   *wres = reinterpret_cast<float *>(wdots + 32 * NC);
	const float S = st.qscale;
	/* the pairs' float4 items (kmg_pp_warp_pairs): the lane's first, and the step by 32 */
	const int	g4 = dp >> 2;
	const int	x_p0 = lane / g4,
				x_g0 = lane - x_p0 * g4,
				x_pstep = 32 / g4,
				x_gstep = 32 - x_pstep * g4;
	/*
	 * The warp's 32 shadow rows of a tile are contiguous: chunk c (16
	 * bytes) is row c / nq's chunk c % nq, staged at 16 (c + c / nq).  A
	 * lane copies chunks lane + 32 j (coalesced), c / nq stepped without
	 * a division; where nq divides 32 a lane's chunks keep their column.
	 * (One bulk copy a row, on sm_90, cost more: the copy takes its
	 * operands in uniform registers, so a warp issues its 32 one lane at
	 * a time.)
	 */
	const int	nq = dq >> 4;
	const int	c_i0 = lane / nq,
				c_q0 = lane - c_i0 * nq,
				c_di = 32 / nq,
				c_dq = 32 - c_di * nq;

	/* the warp's rows of tile ti into its part of stage ti % 2 */
	auto issue = [&](int64_t ti) {
		const int64_t r0 = (blockIdx.x + ti * gridDim.x) * KMG_PP_NT + 32 * warp;
		const int	nr = n - r0 >= 32 ? 32 : (n > r0 ? (int) (n - r0) : 0);
		signed char *dst = qring + (ti & 1) * (KMG_PP_NT * qs) + 32 * warp * qs;
		const signed char *src = a.q8 + (size_t) r0 * dq + 16 * lane;

		if (c_dq == 0)
		{
			signed char *d = dst + c_i0 * qs + 16 * c_q0;

			for (int j = 0, i = c_i0; j < nq; j++, i += c_di)
				if (i < nr)
					kmg_cp16(d + (size_t) (j * c_di) * qs, src + 512 * (size_t) j);
		}
		else
		{
			int			i = c_i0,
						q = c_q0;

			for (int c = lane; c < 32 * nq; c += 32)
			{
				if (i < nr)
					kmg_cp16(dst + 16 * (c + i), src + 16 * (size_t) (c - lane));
				i += c_di;
				q += c_dq;
				if (q >= nq)
				{
					q -= nq;
					i++;
				}
			}
		}
	};

	/* the columns (float rows, shadow rows); inactive ones zero */
	for (int i = tid; i < NC * dp; i += KMG_PP_NT)
	{
		const int	c = i / dp,
					e = i - c * dp;

		colf[c * cs + (e & 3) * seg + (e >> 2)] = ((cmask >> c) & 1u)
			? __ldg(a.X + (size_t) colrow[c] * dp + e) : 0.0f;
	}
	for (int i = tid; i < NC * (dq / 16); i += KMG_PP_NT)
	{
		const int	c = i / (dq / 16),
					g = i - c * (dq / 16);
		const bool	ok = (cmask >> c) & 1u;

		kmg_cp16_zfill(colq + c * qs + 16 * g, ok ? a.q8 + (size_t) colrow[c] * dq + 16 * g : a.q8,
					ok ? 16 : 0);
	}
	if (tid < NC)
	{
		const bool	ok = (cmask >> tid) & 1u;

		cq[tid] = make_int2(ok ? __ldcg(a.qn + colrow[tid]) : 0,
							__float_as_int(ok ? __ldcg(a.qr + colrow[tid]) : 0.0f));
	}
	kmg_cp16_commit();
	kmg_cp16_wait<0>();
	__syncthreads();			/* the columns in place */

	if (mine > 0)
		issue(0);
	kmg_cp16_commit();
	for (int64_t ti = 0; ti < mine; ti++)
	{
		const int64_t tile = blockIdx.x + ti * gridDim.x;
		const int64_t row0 = tile * KMG_PP_NT + 32 * warp;
		const int64_t r = row0 + lane;
		const bool	live = r < n;
		signed char *wq = qring + (ti & 1) * (KMG_PP_NT * qs) + 32 * warp * qs;
		float		wt = 0.0f,
					d2o = 0.0f,
					rx = 0.0f;
		int			qx = 0;
		uint64_t	h = 0;
		unsigned int mask;

		if (live)
		{
			wt = a.W != NULL ? __ldg(a.W + r) : 1.0f;
			d2o = __ldcg(a.d2 + r);
			qx = __ldcg(a.qn + r);
			rx = __ldcg(a.qr + r);
		}
		/* the other stage's part held tile ti - 1 (its dots, then its pairs' rows): read by now */
		if (ti + 1 < mine)
			issue(ti + 1);
		kmg_cp16_commit();
		kmg_cp16_wait<1>();
		__syncwarp();			/* every lane's copies of tile ti in place */
		kmg_pp_tile_dots<LB>(lane, wq, colq, qs, dq, wdots);
		mask = kmg_pp_tile_bounds<LB>(st, wdots + lane * (NC | 1), cq, cmask, S, live, wt,
									  d2o, qx, rx);
		if (live && (select || keys_next))
			h = __ldg(a.hashes + r);	/* arrives under the pairs */
		__syncwarp();			/* the dots read: the scratch takes the pairs */

		/* the warp's unpruned pairs, exactly */
		{
			int			total;
			const int	o0 = kmg_pp_warp_pairs<LB>(lane, a, row0, mask, wids, wres,
												   reinterpret_cast<float *>(wq), colf, cs, seg, dp,
												   x_p0, x_g0, x_pstep, x_gstep, total);

			t.pairs += lane == 0 ? (unsigned int) total : 0u;
			if (live)
			{
				float		dist[NC];
				int			o = o0;

#pragma unroll
				for (int c = 0; c < NC; c++)
					if ((mask >> c) & 1u)
						dist[c] = wres[o++];
					else
						dist[c] = INFINITY;
				kmg_pp_row<LB>(a, st, select, keys_next, stream, r, wt, d2o, h, dist, t, lk, lr);
			}
			__syncwarp();		/* the results read before the next tile's dots */
		}
	}
	kmg_cp16_wait<0>();
}

/*
 * The block's sums (potentials, added as integers), the first SELECT's max
 * |x - c0| and the filtered pairs, into the unit's accumulators.
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_block_sums(int tid, int lane, int warp, const kmg_pp_args &a, const kmg_pp_state &st,
				  unsigned long long (*sred)[LB + 1], float *samax, unsigned int *spairs,
				  const kmg_pp_thr<LB> &t)
{
	constexpr int NC = LB + 1;

#pragma unroll
	for (int c = 0; c < NC; c++)
	{
		unsigned long long v = t.pot[c];

		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, o);
		if (lane == 0)
			sred[warp][c] = v;
	}
	{
		float		m = t.amax;
		unsigned int pc = t.pairs;

		for (int o = 16; o > 0; o >>= 1)
		{
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
			pc += __shfl_xor_sync(0xffffffffu, pc, o);
		}
		if (lane == 0)
		{
			samax[warp] = m;
			spairs[warp] = pc;
		}
	}
	__syncthreads();
	if (tid < NC)
	{
		unsigned long long v = 0;

		for (int w = 0; w < KMG_PP_NT / 32; w++)
			v += sred[w][tid];
		if (v != 0ull)
			atomicAdd(&a.acc->pot[tid], v);
	}
	if (tid == 0)
	{
		float		m = 0.0f;
		unsigned long long pc = 0;

		for (int w = 0; w < KMG_PP_NT / 32; w++)
		{
			m = fmaxf(m, samax[w]);
			pc += spairs[w];
		}
		if (st.first && m > 0.0f)
			atomicMax(&a.acc->qmax_bits, __float_as_uint(m));
		if (pc != 0ull)
			atomicAdd(&a.acc->pairs, pc);
	}
}

/*
 * A SELECT unit's block: its L smallest keys under w D2 (the heads of the
 * threads' sorted lists popped L times) and its smallest key under w, into
 * its kmg_pp_part.
 */
template <int LB>
__device__ __forceinline__ void
kmg_pp_block_select(int tid, const kmg_pp_args &a, const kmg_pp_state &st, double *skey,
					int *srow, const kmg_pp_thr<LB> &t, const double *lk, const int *lr)
{
	/* the block's L smallest keys: pop the heads L times; then under w */
	kmg_pp_part *out = a.part + blockIdx.x;
	int			head = 0;
	const int	Ls = st.nod2 ? 0 : a.L;

	for (int l = 0; l < Ls; l++)
	{
		double		key = head < t.cnt ? lk[head] : INFINITY;
		int			row = head < t.cnt ? lr[head] : INT_MAX;
		const int	me = row;

		kmg_pp_block_min(key, row, skey, srow);
		if (row == me && head < t.cnt && row != INT_MAX)
			head++;
		if (tid == 0)
		{
			out->key[l] = key;
			out->row[l] = row;
		}
	}
	{
		double		key = t.fk;
		int			row = t.fr;

		kmg_pp_block_min(key, row, skey, srow);
		if (tid == 0)
		{
			out->fkey = key;
			out->frow = row;
		}
	}
}

/* The last block of step 0: the row with the smallest key under w (none with w > 0: row 0). */
__device__ __forceinline__ void
kmg_pp_first_row(int tid, const kmg_pp_args &a, int &s_row)
{
	/* step 0: the smallest key under w (no row with w > 0: row 0) */
	if (tid == 0)
	{
		double		key = INFINITY;
		int			row = INT_MAX;

		for (int b = 0; b < (int) gridDim.x; b++)
		{
			const double fk = __ldcg(&a.part[b].fkey);
			const int	fr = __ldcg(&a.part[b].frow);

			if (kmg_before(fk, fr, key, row))
			{
				key = fk;
				row = fr;
			}
		}
		s_row = row == INT_MAX ? 0 : row;
	}
}

/*
 * The last block of a SELECT unit: the L smallest finite keys over the
 * blocks' sorted lists (none: the smallest key under w) into newkey and
 * newrow; returns how many (in thread 0).
 */
__device__ __forceinline__ int
kmg_pp_merge_select(int tid, int lane, int warp, const kmg_pp_args &a, int L, unsigned char *smem,
					double *skey, int *srow, int *wsum, double *newkey, int *newrow)
{
	int		   *heads = reinterpret_cast<int *>(smem);
	int			nnew = 0;

	/* the L smallest over the blocks' sorted lists (finite keys only) */
	for (int b = tid; b < (int) gridDim.x; b += KMG_PP_NT)
		heads[b] = 0;
	__syncthreads();
	for (int l = 0; l < L; l++)
	{
		double		key = INFINITY;
		int			row = INT_MAX;
		int			blk = -1;

		for (int b = tid; b < (int) gridDim.x; b += KMG_PP_NT)
		{
			const int	h = heads[b];

			if (h < L)
			{
				const double kb = __ldcg(&a.part[b].key[h]);
				const int	rb = __ldcg(&a.part[b].row[h]);

				if (kmg_before(kb, rb, key, row))
				{
					key = kb;
					row = rb;
					blk = b;
				}
			}
		}
		for (int o = 16; o > 0; o >>= 1)
		{
			const double ok = __shfl_xor_sync(0xffffffffu, key, o);
			const int	orow = __shfl_xor_sync(0xffffffffu, row, o);
			const int	ob = __shfl_xor_sync(0xffffffffu, blk, o);

			if (kmg_before(ok, orow, key, row))
			{
				key = ok;
				row = orow;
				blk = ob;
			}
		}
		if (lane == 0)
		{
			skey[warp] = key;
			srow[warp] = row;
			wsum[warp] = blk;
		}
		__syncthreads();
		if (tid == 0)
		{
			key = skey[0];
			row = srow[0];
			blk = wsum[0];
			for (int w = 1; w < KMG_PP_NT / 32; w++)
				if (kmg_before(skey[w], srow[w], key, row))
				{
					key = skey[w];
					row = srow[w];
					blk = wsum[w];
				}
			if (blk >= 0)
				heads[blk]++;
			if (row != INT_MAX && isfinite(key))
			{
				newkey[nnew] = key;
				newrow[nnew] = row;
				nnew++;
			}
		}
		__syncthreads();
	}
	if (tid == 0 && nnew == 0)
	{
		/* no finite key: the smallest key under w (none: row 0) */
		double		key = INFINITY;
		int			row = INT_MAX;

		for (int b = 0; b < (int) gridDim.x; b++)
		{
			const double fk = __ldcg(&a.part[b].fkey);
			const int	fr = __ldcg(&a.part[b].frow);

			if (kmg_before(fk, fr, key, row))
			{
				key = fk;
				row = fr;
			}
		}
		newkey[0] = key;
		newrow[0] = row == INT_MAX ? 0 : row;
		nnew = 1;
	}
	return nnew;
}

/*
 * The last block of an EVAL unit: the candidate with the lowest potential
 * wins (ties: the earlier), and when all L smallest keys of the winner's
 * list are under tau (no row outside it can beat them), they are the next
 * step's candidates; returns L then, else 0 (the next unit is a SELECT).
 */
__device__ __forceinline__ int
kmg_pp_eval(int tid, int lane, int warp, const kmg_pp_args &a, const kmg_pp_state &st, int s,
			int L, const kmg_pp_accv &av, int &s_row, int &s_win, int &s_ok, double *newkey, int *newrow)
{
	int			nnew = 0;

	/* EVAL: the lowest potential wins (ties: the earlier candidate); av holds them all */
	if (warp == 0)
	{
		unsigned long long bp = lane < st.ncand ? av.pot[1 + lane] : ~0ull;
		int			best = lane < st.ncand ? lane : INT_MAX;

		for (int o = 16; o > 0; o >>= 1)
		{
			const unsigned long long op = __shfl_xor_sync(0xffffffffu, bp, o);
			const int	ob = __shfl_xor_sync(0xffffffffu, best, o);

			if (op < bp || (op == bp && ob < best))
			{
				bp = op;
				best = ob;
			}
		}
		if (lane == 0)
		{
			s_win = best;
			s_row = st.cand[best];
			s_ok = 0;
		}
	}
	__syncthreads();
	if (s + 1 < a.k && warp == 0)
	{
		/* the next candidates: the L smallest of the winner's list, all under tau */
		const int	win = s_win;
		const int	cnt = av.lcount[win];

		if (cnt <= KMG_PP_CAP && cnt >= L)
		{
			double		mk[KMG_PP_LMAX];
			int			mr[KMG_PP_LMAX];
			int			mc = 0,
						head = 0;
			int			good = 1;

			/* KMG_PP_EB entries a lane asked for at once (a list of 16 L rows expected: one round trip) */
			for (int j0 = 0; j0 < cnt; j0 += 32 * KMG_PP_EB)
			{
				double		kb[KMG_PP_EB];
				int			rb[KMG_PP_EB];

#pragma unroll
				for (int u = 0; u < KMG_PP_EB; u++)
				{
					const int	j = j0 + 32 * u + lane;

					kb[u] = j < cnt ? __ldcg(a.lkey + (size_t) win * KMG_PP_CAP + j) : INFINITY;
					rb[u] = j < cnt ? __ldcg(a.lrow + (size_t) win * KMG_PP_CAP + j) : INT_MAX;
				}
#pragma unroll
				for (int u = 0; u < KMG_PP_EB; u++)
				{
					const double key = kb[u];
					const int	row = rb[u];

					if (row == INT_MAX)
						continue;
					if (mc < L || kmg_before(key, row, mk[L - 1], mr[L - 1]))
					{
						int			p = mc < L ? mc++ : L - 1;

						while (p > 0 && kmg_before(key, row, mk[p - 1], mr[p - 1]))
						{
							mk[p] = mk[p - 1];
							mr[p] = mr[p - 1];
							p--;
						}
						mk[p] = key;
						mr[p] = row;
					}
				}
			}
			for (int l = 0; l < L; l++)
			{
				double		key = head < mc ? mk[head] : INFINITY;
				int			row = head < mc ? mr[head] : INT_MAX;
				const int	me = row;

				kmg_warp_argmin(key, row);
				if (row == me && head < mc && row != INT_MAX)
					head++;
				if (!(key < st.tau) || row == INT_MAX)
					good = 0;
				if (lane == 0)
				{
					newkey[l] = key;
					newrow[l] = row;
				}
			}
			if (lane == 0)
				s_ok = good;
		}
	}
	else if (warp > 0)
	{
		/* meanwhile the other warps: the winner's row becomes centroid s */
		const float *x = a.X + (size_t) s_row * a.dp;
		float	   *c = a.C + (size_t) s * a.dp;

		for (int i = tid - 32; i < a.dp; i += KMG_PP_NT - 32)
			c[i] = __ldg(x + i);
	}
	__syncthreads();
	nnew = s_ok ? L : 0;
	return nnew;
}

/*
 * The next state, by thread 0 of the last block: the filter's bookkeeping,
 * the step and phase that follow (a new centroid, candidates, or a SELECT),
 * and the unit's accumulators cleared.
 */
__device__ __forceinline__ void
kmg_pp_next_state(const kmg_pp_args &a, kmg_pp_state &st, int select, int use_filter,
				  unsigned int cmask, int64_t n, int s, int L, int nnew, int s_row, int s_win,
				  const double *newkey, const int *newrow, const kmg_pp_accv &av)
{
	kmg_pp_state *o = &st;
	const unsigned long long pairs = av.pairs;

	/* the filter's bookkeeping (does not change any result) */
	if (use_filter)
	{
		const int	ncol = __popc(cmask);

		o->h.filtered++;
		o->h.pairs_lo += (unsigned int) pairs;
		if ((double) pairs > KMG_PP_DENSE_FRAC * (double) n * (double) (ncol > 0 ? ncol : 1))
			o->dense_left = KMG_PP_DENSE_UNITS;
	}
	else if (!st.nod2)
	{
		o->h.dense++;
		if (o->dense_left > 0)
			o->dense_left--;
	}
	o->h.units++;

	if (st.nod2)
	{
		o->c0 = s_row;
		o->h.s = 1;
		o->nod2 = 0;
		o->has_prev = 1;
		o->first = 1;
		o->prev = s_row;
		o->h.phase = KMG_PP_SELECT;
		if (a.k == 1)
			o->h.s = a.k;
	}
	else if (select)
	{
		const unsigned long long p0 = av.pot[0];

		if (st.first)
			o->qmax = __uint_as_float(av.qmax_bits);
		else
			o->h.selects++;
		o->first = 0;
		o->has_prev = 0;
		o->ncand = nnew;
		for (int l = 0; l < nnew; l++)
		{
			o->cand[l] = newrow[l];
			o->ckey[l] = newkey[l];
		}
		o->h.phi = kmg_pp_value(p0, st.shift);
		o->tau = p0 > 0ull ? KMG_PP_CT * (double) L / o->h.phi : 0.0;
		o->h.phase = KMG_PP_EVAL;
	}
	else
	{
		const unsigned long long pw = av.pot[1 + s_win];

		o->h.s = s + 1;
		o->prev = s_row;
		o->has_prev = 1;
		o->h.phi = kmg_pp_value(pw, st.shift);
		if (s + 1 >= a.k)
			o->h.s = a.k;
		else if (nnew == L)
		{
			o->ncand = L;
			for (int l = 0; l < L; l++)
			{
				o->cand[l] = newrow[l];
				o->ckey[l] = newkey[l];
			}
			o->tau = pw > 0ull ? KMG_PP_CT * (double) L / o->h.phi : 0.0;
			o->h.phase = KMG_PP_EVAL;
		}
		else
		{
			o->ncand = 0;
			o->h.phase = KMG_PP_SELECT;
		}
	}

	/* clear what the blocks add up */
	for (int c = 0; c <= KMG_PP_LMAX; c++)
		a.acc->pot[c] = 0ull;
	for (int l = 0; l < KMG_PP_LMAX; l++)
		a.acc->lcount[l] = 0;
	a.acc->pairs = 0ull;
	a.acc->qmax_bits = 0u;
	a.acc->ticket = 0u;
}

/* ---- k-means++: the unit ---- */

/*
 * One unit (see the file header): the state in; this block's tiles of rows
 * (step 0, dense or filtered); the block's sums and, in a SELECT, its
 * smallest keys; then in the unit's last block the decision (step 0's
 * row, the SELECT's merge of the blocks' keys, or the EVAL's winner and
 * next candidates), the chosen row into the centroids, and the next state.
 */
template <int LB>
__global__ void __launch_bounds__(KMG_PP_NT, LB <= 8 ? 4 : 2)
kmg_pp_unit_kernel(kmg_pp_args a)
{
	extern __shared__ __align__(16) unsigned char smem[];
	__shared__ kmg_pp_state st;
	__shared__ int colrow[LB + 1];
	__shared__ int2 cq[LB + 1];	/* filtered rows: the columns' |q|^2 and r (bits) */
	__shared__ unsigned long long sred[KMG_PP_NT / 32][LB + 1];
	__shared__ double skey[KMG_PP_NT / 32];
	__shared__ int srow[KMG_PP_NT / 32];
	__shared__ int wsum[KMG_PP_NT / 32];
	__shared__ float samax[KMG_PP_NT / 32];
	__shared__ unsigned int spairs[KMG_PP_NT / 32];
	__shared__ int s_last;
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int	warp = tid >> 5;
	constexpr int NC = LB + 1;

	/* the state the previous unit left (only ever written by a last block) */
	for (int i = tid; i < (int) (sizeof(kmg_pp_state) / sizeof(int)); i += KMG_PP_NT)
		reinterpret_cast<int *>(&st)[i] = __ldcg(reinterpret_cast<const int *>(a.state) + i);
	__syncthreads();
	if (st.h.s >= a.k)
		return;

	const int64_t n = a.n;
	const int	dp = a.dp;
	const int	select = st.h.phase == KMG_PP_SELECT;
	const int	keys_next = !select && st.h.s + 1 < a.k;
	const uint64_t stream = km_stream(st.seed, st.run, select ? st.h.s : st.h.s + 1);
	const int	use_filter = st.filter && st.dense_left == 0 && !st.first && !st.nod2 &&
		a.dq > 0;
	unsigned int cmask = 0;		/* active columns */

	if (!st.nod2)
	{
		if (st.has_prev)
			cmask |= 1u;
		if (!select)
			for (int l = 0; l < st.ncand && l < LB; l++)
				cmask |= 2u << l;
	}
	if (tid < NC)
		colrow[tid] = tid == 0 ? st.prev : (tid - 1 < st.ncand ? st.cand[tid - 1] : 0);

	kmg_pp_thr<LB> t;
	double		lk[KMG_PP_LMAX];
	int			lr[KMG_PP_LMAX];

#pragma unroll
	for (int c = 0; c < NC; c++)
		t.pot[c] = 0ull;
	t.fk = INFINITY;
	t.fr = INT_MAX;
	t.cnt = 0;
	t.amax = 0.0f;
	t.pairs = 0;
	__syncthreads();

	const int64_t ntiles = (n + KMG_PP_NT - 1) / KMG_PP_NT;
	const int64_t mine = (int64_t) blockIdx.x < ntiles
		? (ntiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;

	if (st.nod2)
		kmg_pp_rows_nod2<LB>(tid, a, st, select, stream, mine, n, t, lk, lr);
	else if (!use_filter)
		kmg_pp_rows_dense<LB>(tid, a, st, smem, colrow, cmask, select, keys_next, stream, mine, n,
							  dp, t, lk, lr);
	else
		kmg_pp_rows_filtered<LB>(tid, lane, warp, a, st, smem, colrow, cq, cmask,
								 select, keys_next, stream, mine, n, dp, t, lk, lr);

	kmg_pp_block_sums<LB>(tid, lane, warp, a, st, sred, samax, spairs, t);
	if (select)
		kmg_pp_block_select<LB>(tid, a, st, skey, srow, t, lk, lr);

	/* ---- the last block decides the next state ---- */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&a.acc->ticket, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();

	{
		__shared__ int s_row;
		__shared__ int s_win;
		__shared__ int s_ok;
		__shared__ int newrow[KMG_PP_LMAX];
		__shared__ double newkey[KMG_PP_LMAX];
		__shared__ kmg_pp_accv av;
		const int	s = st.h.s;
		const int	L = a.L;
		int			nnew = 0;

		/* what the blocks added up, every word asked for at once */
		if (tid == 0)
			av.pot[0] = __ldcg(&a.acc->pot[0]);
		else if (tid <= KMG_PP_LMAX)	/* candidate tid - 1: pot[0] and its change (kmg_pp_row) */
			av.pot[tid] = __ldcg(&a.acc->pot[0]) + __ldcg(&a.acc->pot[tid]);
		else if (tid < 2 * KMG_PP_LMAX + 1)
			av.lcount[tid - KMG_PP_LMAX - 1] = __ldcg(&a.acc->lcount[tid - KMG_PP_LMAX - 1]);
		else if (tid == 2 * KMG_PP_LMAX + 1)
			av.pairs = __ldcg(&a.acc->pairs);
		else if (tid == 2 * KMG_PP_LMAX + 2)
			av.qmax_bits = __ldcg(&a.acc->qmax_bits);
		__syncthreads();
		if (st.nod2)
			kmg_pp_first_row(tid, a, s_row);
		else if (select)
			nnew = kmg_pp_merge_select(tid, lane, warp, a, L, smem, skey, srow, wsum, newkey,
									   newrow);
		else
			nnew = kmg_pp_eval(tid, lane, warp, a, st, s, L, av, s_row, s_win, s_ok, newkey, newrow);
		__syncthreads();

		/* the chosen row becomes centroid s (step 0; EVAL units copied it in kmg_pp_eval) */
		if (st.nod2)
		{
			const float *x = a.X + (size_t) s_row * dp;
			float	   *c = a.C + (size_t) s * dp;

			for (int i = tid; i < dp; i += KMG_PP_NT)
				c[i] = __ldg(x + i);
		}

		if (tid == 0)
			kmg_pp_next_state(a, st, select, use_filter, cmask, n, s, L, nnew, s_row, s_win,
							  newkey, newrow, av);
		__syncthreads();
		for (int i = tid; i < (int) (sizeof(kmg_pp_state) / sizeof(int)); i += KMG_PP_NT)
			reinterpret_cast<int *>(a.state)[i] = reinterpret_cast<const int *>(&st)[i];
	}
}

/*
 * The int8 shadow of the rows, centred on c0 (order-free: c0 is a row chosen
 * by keys), S = 127 / max |fl(x - c0)|; per row |q|^2 and a bound on
 * |S (x - c0) - q| (the rounding to int8 measured, plus the float steps:
 * per value at most 2^-24 (|z| + S |x - c0|) <= 2^-24 * 255).  A warp per row.
 */
__global__ void
kmg_pp_shadow_kernel(kmg_pp_args a)
{
	const int	lane = threadIdx.x & 31;
	const int64_t warp0 = ((int64_t) blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int64_t nwarps = ((int64_t) gridDim.x * blockDim.x) >> 5;
	const kmg_pp_state *st = a.state;
	const float M = __ldcg(&st->qmax);
	const float S = M > 0.0f ? 127.0f / M : 1.0f;
	const int	c0 = __ldcg(&st->c0);
	const int	dp = a.dp,
				dq = a.dq;
	const float *c = a.X + (size_t) c0 * dp;

	if (__ldcg(&st->h.s) >= a.k || !isfinite(S) || !(S > 0.0f))
		return;
	if (blockIdx.x == 0 && threadIdx.x == 0)
	{
		a.state->qscale = S;
		a.state->filter = 1;
	}
	for (int64_t r = warp0; r < a.n; r += nwarps)
	{
		const float *x = a.X + (size_t) r * dp;
		int			qn = 0;
		double		R = 0.0;

		for (int g = lane; g < dq / 4; g += 32)
		{
			int			q[4] = {0, 0, 0, 0};

			if (4 * g < dp)
			{
				const float4 xv = __ldg(reinterpret_cast<const float4 *>(x) + g);
				const float4 cv = __ldg(reinterpret_cast<const float4 *>(c) + g);
				const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
				const float cs[4] = {cv.x, cv.y, cv.z, cv.w};

#pragma unroll
				for (int j = 0; j < 4; j++)
				{
					const float z = __fmul_rn(__fsub_rn(xs[j], cs[j]), S);
					float		v = rintf(z);

					v = fminf(fmaxf(v, -127.0f), 127.0f);
					q[j] = (int) v;
					qn += q[j] * q[j];
					R += (double) (z - v) * (double) (z - v);
				}
			}
			reinterpret_cast<char4 *>(a.q8 + (size_t) r * dq)[g] =
				make_char4((signed char) q[0], (signed char) q[1], (signed char) q[2], (signed char) q[3]);
		}
		for (int o = 16; o > 0; o >>= 1)
		{
			qn += __shfl_xor_sync(0xffffffffu, qn, o);
			R += __shfl_xor_sync(0xffffffffu, R, o);
		}
		if (lane == 0)
		{
			a.qn[r] = qn;
			a.qr[r] = __double2float_ru((sqrt(R) + 2e-5 * sqrt((double) a.d) + 1e-6) * (1.0 + 1e-6));
		}
	}
}

/* ---- k-means++: host side ---- */

static kmg_pp_args
kmg_pp_make_args(const kmg_args *a, const kmg_seed_bufs *sb)
{
	kmg_pp_args p;

	p.X = a->X;
	p.W = a->W;
	p.hashes = sb->hashes;
	p.d2 = sb->d2;
	p.q8 = sb->q8;
	p.qn = sb->qn;
	p.qr = sb->qr;
	p.C = a->C;
	p.lkey = sb->lkey;
	p.lrow = sb->lrow;
	p.part = (kmg_pp_part *) sb->part;
	p.state = (kmg_pp_state *) sb->state;
	p.acc = (kmg_pp_acc *) sb->acc;
	p.n = a->n;
	p.d = a->d;
	p.dp = a->dp;
	p.dq = sb->q8 != NULL ? sb->dq : 0;
	p.k = a->k;
	p.L = sb->L;
	return p;
}

typedef void (*kmg_pp_unit_fn) (kmg_pp_args);

static kmg_pp_unit_fn
kmg_pp_kernel_of(int lb)
{
	switch (lb)
	{
		case 4:
			return kmg_pp_unit_kernel<4>;
		case 8:
			return kmg_pp_unit_kernel<8>;
		case 12:
			return kmg_pp_unit_kernel<12>;
		case 16:
			return kmg_pp_unit_kernel<16>;
		default:
			return kmg_pp_unit_kernel<KMG_PP_LMAX>;
	}
}

/*
 * The unit kernel's candidate bound LB for L candidates a step: the
 * smallest instance >= L.  KMG_PP_LB=16 or 24 (a development switch) takes
 * that instance when L needs a smaller one, so that the instances a user
 * meets only from k ~ 60 000 (16) or 3.3 million (24), whose dense stage
 * loads its columns in two rounds, run on small data against the C
 * reference (bench_engine seed).
 */
static int
kmg_pp_instance(int L)
{
	const int	lb = L <= 4 ? 4 : L <= 8 ? 8 : L <= 12 ? 12 : L <= 16 ? 16 : KMG_PP_LMAX;
	const char *env = getenv("KMG_PP_LB");
	const int	want = env != NULL ? atoi(env) : 0;

	return (want == 16 || want == KMG_PP_LMAX) && want > lb ? want : lb;
}

/*
 * Once per fit: the candidate tile, shared memory and grid of the unit
 * kernel, and the bytes of shadow rows its L2 window covers: n dq, up to the
 * device's largest window (sb->L, sb->dq, sb->q8 and sb->nblocks set; n
 * rows).  KMG_PP_WINDOW=0: no window.
 */
cudaError_t
kmg_pp_prepare(kmg_seed_bufs *sb, int64_t n, int dp, const kmg_device *dev)
{
	const int	L = sb->L;
	const size_t qbytes = sb->q8 != NULL ? (size_t) n * (size_t) sb->dq : 0;
	int			per_sm = 0;
	const void *fn;
	cudaError_t e;

	sb->qwindow = kmg_env_off("KMG_PP_WINDOW") ? 0 : qbytes < dev->max_window ? qbytes : dev->max_window;

	sb->lb = kmg_pp_instance(L);
	sb->smem = kmg_pp_smem_bytes(sb->lb, dp, sb->q8 != NULL ? sb->dq : 0);
	fn = (const void *) kmg_pp_kernel_of(sb->lb);
	if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
								  (int) sb->smem)) != cudaSuccess)
		return e;
	if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, KMG_PP_NT,
														   sb->smem)) != cudaSuccess)
		return e;
	if (per_sm < 1)
		per_sm = 1;
	sb->grid = per_sm * dev->sms;
	if (sb->grid > sb->nblocks)
		sb->grid = sb->nblocks;
	if ((size_t) sb->grid * sizeof(int) > sb->smem)
		sb->grid = (int) (sb->smem / sizeof(int));	/* the last block's heads fit */
	if (sb->grid < 1)
		sb->grid = 1;
	return cudaSuccess;
}

/*
 * The start of a run's k-means++: the state, step 0, the first SELECT (D2
 * to c0, the candidates of step 1) and the shadow.  shift: the potentials'
 * scale (seed_pp.h's kmg_pp_shift of the rows' max w and max |x|^2).
 */
cudaError_t
kmg_pp_begin(const kmg_args *a, const kmg_seed_bufs *sb, uint64_t seed, int run, int shift,
			 cudaStream_t stream)
{
	kmg_pp_state st;
	kmg_pp_args p = kmg_pp_make_args(a, sb);
	const double eps = (double) (a->dp + 16) * 0x1p-24;
	cudaError_t e;

	memset(&st, 0, sizeof(st));
	st.h.s = 0;
	st.h.phase = KMG_PP_SELECT;
	st.seed = seed;
	st.run = run;
	st.shift = shift;
	st.pscale = shift >= -1000 && shift <= 1000 ? ldexp(1.0, shift) : 0.0;
	st.fac = (float) (1.0 + 2.0 * eps + 1e-6);
	st.nod2 = 1;
	st.c0 = -1;
	st.prev = 0;
	if ((e = cudaMemcpyAsync(sb->state, &st, sizeof(st), cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
		(e = cudaMemsetAsync(sb->acc, 0, sizeof(kmg_pp_acc), stream)) != cudaSuccess ||
		(e = kmg_pp_units(a, sb, 2, stream)) != cudaSuccess)
		return e;
	if (p.dq > 0)
	{
		kmg_pp_shadow_kernel<<<kmg_stride_grid((a->n + 7) / 8, 64), 256, 0, stream>>>(p);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/*
 * count units, queued (graph capture friendly: stream launches).  Where
 * sb->qwindow, each unit reads the shadow rows under an L2 access-policy
 * window that marks them streaming: a filtered unit reads all n dq bytes of
 * them once (128 MB at (1M, 128)), and without the mark they push out of L2
 * what the unit reads again: the rows' D2, |q|^2, r and hashes, the lists,
 * the state and the last block's code.
 */
cudaError_t
kmg_pp_units(const kmg_args *a, const kmg_seed_bufs *sb, int count, cudaStream_t stream)
{
	const kmg_pp_args p = kmg_pp_make_args(a, sb);
	const kmg_pp_unit_fn fn = kmg_pp_kernel_of(sb->lb);
	cudaLaunchAttribute at[1];
	cudaLaunchConfig_t cfg = {};

	memset(at, 0, sizeof(at));
	at[0].id = cudaLaunchAttributeAccessPolicyWindow;
	at[0].val.accessPolicyWindow.base_ptr = (void *) p.q8;
	at[0].val.accessPolicyWindow.num_bytes = sb->qwindow;
	at[0].val.accessPolicyWindow.hitRatio = 1.0f;
	at[0].val.accessPolicyWindow.hitProp = cudaAccessPropertyStreaming;
	at[0].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
	cfg.gridDim = dim3(sb->grid);
	cfg.blockDim = dim3(KMG_PP_NT);
	cfg.dynamicSmemBytes = sb->smem;
	cfg.stream = stream;
	cfg.attrs = at;
	cfg.numAttrs = sb->qwindow > 0 ? 1 : 0;
	for (int i = 0; i < count; i++)
	{
		cudaError_t e;

		if ((e = cudaLaunchKernelEx(&cfg, fn, p)) != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}
