/*
 * bytes.cu
 *	  A fit's Lloyd iteration over rows whose every value is a byte (an
 *	  integer in 0..255: images, quantised features), for unweighted l2 and
 *	  k <= 15: the rows are kept a second time as bytes (kmg_bytes_rows, a
 *	  quarter of their floats), the dots run on the integer tensor cores and
 *	  the sums are integers, so the iteration reads a quarter of the bytes
 *	  the wide pass does and adds nothing in floating point.
 *
 * Plain C reference: km_ref_assign and the sums of km_ref_lloyd
 * (kernels/bench/ref_kmeans.c); bench_engine.cu's cases (Fashion-MNIST, and
 * byte rows built to sit on and near the bisectors of close centroids)
 * check whole fits against it and against the CPU engine bit for bit.
 *
 * Why the labels are exact.  A centroid c (floats in [0, 255]) is cut into
 * two byte pieces, q = rint(256 c) = 256 hi + lo, so x.c is (256 x.hi +
 * x.lo) / 256 within |x|_1 e_j (x >= 0), e_j = max |c - q / 256| <= 2^-9;
 * the dots are exact int32 (m16n8k32 u8 mma).  A 16th centroid slot of
 * ones gives each row's |x|_1.  A row takes its screened best where its
 * best two lie more than 4 |x|_1 max e_j apart (plus a 1e-12 relative
 * margin for the float64 evaluations, |x|^2 <= 255 |x|_1 standing for |x|^2).
 * Any other row is listed, and after the block's tiles decided by a
 * finer bound (four byte pieces, on the integer pipes) or, for ties and
 * near-ties, by km_exact_cost's chains (kmg_exact_step_xd, ties to the
 * lowest id): how every engine decides a close call
 * (kmg_bytes_bound_listed, kmg_bytes_chain_listed).  A centroid outside
 * [0, 255] (explicit starts) makes e_j infinite: every row is listed and
 * chained.
 *
 * Why the sums are exact and order-free: a tile's clusters' 0/1 indicator
 * times its rows on the same u8 mma gives int32 sums; each block writes
 * its partial (plain stores), kmg_bytes_end_kernel adds them as integers;
 * the means are then km_ddiv(sum, count) as in the CPU engine, so any row
 * order or split gives the same bits.
 *
 * Why it is fast (Fashion-MNIST, 70000 x 784 x 10: 55 MB of bytes against
 * 220 MB of floats; kernels/bench/NOTES.md, "Rows as bytes in the engine"):
 *	- a block an SM, each n / blocks contiguous rows (to a row: whole tiles
 *	  dealt out in turn left some blocks a tile more than the average),
 *	  in tiles of 128 rows double-buffered, each tile one bulk copy that a
 *	  shared-memory barrier signals (the block's 16-byte cp.async had its
 *	  warps waiting 5-7 us of the tiles' 24-31, the bulk copies 1.9 of 25);
 *	  a warp's 16 rows against 16 centroid slots x 2 pieces, fragments by
 *	  ldmatrix;
 *	- the sums' operand transposed 4 x 4 bytes at a time with prmt, in
 *	  registers for the whole pass, then written once through shared memory;
 *	- close calls (tens of rows an iteration on Fashion-MNIST) listed by
 *	  their block and decided after its last tile, the whole block on a
 *	  row's bound (on integer pipes), a warp a row only for the chains of
 *	  ties and near-ties: on the H200 measured, one row's 784-step float64
 *	  chain takes about 15-30 us, its costs in parallel in float64 12.5 us,
 *	  one warp's bound 10.5-16 us and the block's 5-7 us (with the
 *	  centroids copied during the last tile);
 *	- the tile after next prefetched into L2, and with launches overlapped
 *	  (kmg_launch_overlapped) the first tile on its way before the kernel
 *	  before has ended: the pass's blocks start about 15 us before the
 *	  end kernel of the iteration before ends;
 *	- the end of the iteration in one more launch spread over (d / 32) x k
 *	  blocks (one block's finalize took 30-38 us at d = 784; a reduction
 *	  and a finalize on k blocks 6 + 10 us), which also lays out the next
 *	  pass's centroid pieces: that pass's prologue is one bulk copy instead
 *	  of every block converting the centroids' floats (E's median 2-5 us
 *	  lower).
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"
#include "update/update.cuh"
#include "update/finalize_block.cuh"

#include <math.h>

#define KMG_BYTES_NT 256
#define KMG_BYTES_TR 128		/* rows a tile: 8 warps x 16 */
#define KMG_BYTES_SLOTS 16		/* centroid slots; slot 15 is ones (|x|_1) */

static_assert(KMG_BYTES_KMAX < KMG_BYTES_SLOTS, "slot 15 holds the ones");
static_assert(KMG_BYTES_DPMAX % 16 == 0 && KMG_BYTES_DPMAX <= 32 * 32,
			  "the sums' column chunks: 8 warps x 4 of 32 columns");

/* ---- small device pieces ---- */

/* Shared memory of one block (bytes from the start), for row stride xbs. */
typedef struct kmg_bytes_layout
{
	size_t		buf0;			/* TR x xbs + 32: a tile (+ the last ldmatrix's overrun) */
	size_t		buf1;
	size_t		cp;				/* 2 pieces x 16 slots x xbs + 32: hi, then lo */
	size_t		lab;			/* TR ints: the tile's labels (-1: no row) */
	size_t		cnt;			/* 16 ints */
	size_t		cn;				/* 16 doubles: |c|^2, +INF past k */
	size_t		total;
} kmg_bytes_layout;

static __host__ __device__ kmg_bytes_layout
kmg_bytes_layout_of(int xbs)
{
	kmg_bytes_layout L;
	size_t		o = 0;

	L.buf0 = o;
	o += (size_t) KMG_BYTES_TR * xbs + 32;
	L.buf1 = o;
	o += (size_t) KMG_BYTES_TR * xbs + 32;
	L.cp = o;
	o += (size_t) 2 * KMG_BYTES_SLOTS * xbs + 32;
	L.lab = KMG_ROUND_UP(o, 16);
	o = L.lab + KMG_BYTES_TR * sizeof(int);
	L.cnt = o;
	o += KMG_BYTES_SLOTS * sizeof(int);
	L.cn = KMG_ROUND_UP(o, 16);
	o = L.cn + KMG_BYTES_SLOTS * sizeof(double);
	L.total = o;
	return L;
}

/*
 * Block b's partial in a.part (the wide plan's room, read as ints): k x xbs
 * column sums, then k counts; after all blocks' partials, their estimates
 * (doubles).  Each sum is at most 255 x the block's rows (< 2^31: the plan's
 * limit on n).
 */
static __device__ __forceinline__ int *
kmg_bytes_part(const kmg_args &a, int b)
{
	return reinterpret_cast<int *>(a.part) + (size_t) b * ((size_t) a.k * a.xbs + a.k);
}

static __device__ __forceinline__ double *
kmg_bytes_est(const kmg_args &a, int nblocks)
{
	const size_t ints = (size_t) nblocks * ((size_t) a.k * a.xbs + a.k);

	return reinterpret_cast<double *>(reinterpret_cast<int *>(a.part) + KMG_ROUND_UP(ints, 2));
}

/*
 * a.xbend, the end of the iteration's room (kmg_bytes_end_kernel): each of
 * its blocks' part of |c_j|^2 and largest piece error (k x 32 slots each),
 * the largest piece error over the clusters, and the centroids' pieces as
 * the pass's prologue lays them out in shared memory (the layout's cp), so
 * that the next pass takes them in one bulk copy.
 */
typedef struct kmg_bytes_end_layout
{
	size_t		norms;			/* k x 32 doubles */
	size_t		errs;			/* k x 32 floats */
	size_t		emax;			/* a float */
	size_t		pieces;			/* 2 x 16 x xbs + 32 bytes, 16-byte aligned */
	size_t		total;
} kmg_bytes_end_layout;

static __host__ __device__ kmg_bytes_end_layout
kmg_bytes_end_layout_of(int xbs, int k)
{
	kmg_bytes_end_layout E;

	E.norms = 0;
	E.errs = E.norms + (size_t) k * 32 * sizeof(double);
	E.emax = E.errs + (size_t) k * 32 * sizeof(float);
	E.pieces = KMG_ROUND_UP(E.emax + sizeof(float), 16);
	E.total = E.pieces + (size_t) 2 * KMG_BYTES_SLOTS * xbs + 32;
	return E;
}

/*
 * A centroid's value as the pass uses it: q = rint(256 c) (hi and lo byte
 * pieces), its error |c - q / 256| into err; outside [0, 255] (NaN too)
 * q = 0 and err infinite: no certificate, every row is settled.
 */
static __device__ __forceinline__ uint32_t
kmg_bytes_piece(float c, float &err)
{
	if (c >= 0.0f && c <= 255.0f)
	{
		const uint32_t q = (uint32_t) rintf(c * 256.0f);	/* c * 256: exact */

		err = fmaxf(err, fabsf(c - (float) q * (1.0f / 256.0f)));
		return q;
	}
	err = INFINITY;
	return 0;
}

/* ---- the copy of the rows ---- */

/*
 * Rows as bytes: Xb (n x xbs, zeros past d) from X (n x dp floats), a warp a
 * row; out[0] counts the values that are not an integer in 0..255 (NaN and
 * -0 included), out[1] adds sum |x|^2 over the rows (integers: order-free).
 * out must be zero first.
 */
__global__ void __launch_bounds__(256)
kmg_bytes_rows_kernel(const float *X, int64_t n, int d, int dp, uint8_t *Xb, int xbs,
					  unsigned long long *out)
{
	const int	lane = threadIdx.x & 31;
	const int64_t warps = (int64_t) gridDim.x * (blockDim.x >> 5);
	unsigned long long bad = 0,
				sq = 0;

	for (int64_t r = (int64_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < n; r += warps)
	{
		const float *x = X + (size_t) r * dp;
		uint8_t    *xb = Xb + (size_t) r * xbs;

		for (int c = lane; c < xbs; c += 32)
		{
			const float v = c < d ? x[c] : 0.0f;
			/* -0 is not a byte: its sums may keep the sign the integers would lose */
			const bool	ok = !signbit(v) && v <= 255.0f && v == rintf(v);
			const unsigned b = ok ? (unsigned) v : 0u;

			bad += !ok;
			sq += b * b;
			xb[c] = (uint8_t) b;
		}
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		bad += __shfl_xor_sync(0xffffffffu, bad, o);
		sq += __shfl_xor_sync(0xffffffffu, sq, o);
	}
	if (lane == 0 && (bad != 0 || sq != 0))
	{
		atomicAdd(out, bad);
		atomicAdd(out + 1, sq);
	}
}

/* ---- the pass's stages ---- */

/* The centroids' floats (k x dp) into shared memory, rows cs floats apart: one cp.async group. */
static __device__ __forceinline__ void
kmg_bytes_centroids_load(int tid, const kmg_args &a, float *sc, int cs)
{
	const int	q4 = a.dp / 4;

	for (int i = tid; i < a.k * q4; i += KMG_BYTES_NT)
	{
		const int	j = i / q4;
		const int	q = i - j * q4;

		kmg_cp16(sc + (size_t) j * cs + 4 * q, a.C + (size_t) j * a.dp + 4 * q);
	}
	kmg_cp16_commit();
}

/*
 * The centroids as the block uses them, from their floats (read once, from
 * L2, four at a time: no copy through shared memory first): the two byte
 * pieces of each value, four columns a thread (slot 15: ones in the hi
 * piece), the largest piece error over the clusters
 * (infinite where a value is outside [0, 255]), and |c|^2 in double as
 * the end of the last iteration left it in a.cnorm (the fit is not
 * centred).  built: kmg_bytes_end_kernel laid the pieces and their error
 * out for this iteration (a.xbend), taken in one bulk copy that mbar
 * signals; else (a run's first iteration, the one after a re-seed) the
 * floats are converted here.
 */
static __device__ __forceinline__ void
kmg_bytes_prologue(int tid, const kmg_args &a, int xbs, uint8_t *cp, int *scnt, double *scn,
				   float *s_emax, bool built, uint64_t *mbar)
{
	const int	d = a.d,
				dp = a.dp,
				k = a.k;
	const int	lane = tid & 31;
	const int	xq = xbs / 4;
	float		err = 0.0f;

	if (tid < KMG_BYTES_SLOTS)
	{
		scnt[tid] = 0;
		/* |c|^2 as the end of the last iteration left it (kmg_bytes_end_kernel, finalize.cu) */
		scn[tid] = tid < k ? a.cnorm[tid] : INFINITY;
	}
	if (built)
	{
		/* the end of the last iteration laid them out (kmg_bytes_end_kernel): one bulk copy */
		if (tid == 0)
		{
			const kmg_bytes_end_layout E = kmg_bytes_end_layout_of(xbs, k);
			const unsigned bytes = (unsigned) (2 * KMG_BYTES_SLOTS * xbs + 32);

			kmg_mbar_expect(kmg_smem_addr(mbar), bytes);
			kmg_bulk_copy(kmg_smem_addr(cp), a.xbend + E.pieces, bytes, kmg_smem_addr(mbar));
			*s_emax = *(const volatile float *) (a.xbend + E.emax);
		}
		__syncthreads();
		kmg_mbar_wait(kmg_smem_addr(mbar), 0);
		return;
	}
#pragma unroll 4
	for (int i = tid; i < KMG_BYTES_SLOTS * xq; i += KMG_BYTES_NT)
	{
		const int	j = i / xq;
		const int	col0 = 4 * (i - j * xq);
		uint32_t	hi = 0,
					lo = 0;

		if (j == KMG_BYTES_SLOTS - 1)
			hi = 0x01010101u;
		else if (j < k && col0 < d)
		{
			/* dp is a multiple of 4: the four stay in the row */
			const float4 c4 = __ldg(reinterpret_cast<const float4 *>(a.C + (size_t) j * dp + col0));
			const float cv[4] = {c4.x, c4.y, c4.z, c4.w};

#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				const int	col = col0 + u;

				if (col < d)
				{
					const uint32_t q = kmg_bytes_piece(cv[u], err);

					hi |= (q >> 8) << (8 * u);
					lo |= (q & 255u) << (8 * u);
				}
			}
		}
		reinterpret_cast<uint32_t *>(cp)[i] = hi;
		reinterpret_cast<uint32_t *>(cp + KMG_BYTES_SLOTS * xbs)[i] = lo;
	}
	if (tid < 32)
		cp[2 * KMG_BYTES_SLOTS * xbs + tid] = 0;
	if (tid == 0)
		*s_emax = 0.0f;
	__syncthreads();
	/* the errors are >= 0 (or +INF): their bits order as they do */
	for (int o = 16; o > 0; o >>= 1)
		err = fmaxf(err, __shfl_xor_sync(0xffffffffu, err, o));
	if (lane == 0)
		atomicMax((int *) s_emax, __float_as_int(err));
	__syncthreads();
}

/*
 * Block b's rows: [b per, (b + 1) per) within n, per = ceil(n / blocks), so
 * that no block has more than one partial tile beyond the average's (whole
 * tiles dealt out in turn left 19 of 132 blocks a fifth tile of 128 rows
 * on Fashion-MNIST, against 4.14 on average).
 */
static __device__ __forceinline__ int64_t
kmg_bytes_block_rows(int64_t n, int nblocks)
{
	return (n + nblocks - 1) / nblocks;
}

/*
 * Rows r0 .. r0 + rows - 1 into a buffer: one bulk copy (contiguous, rows x
 * xbs bytes) that completes a phase of the buffer's barrier (thread 0; the
 * readers wait with kmg_mbar_wait).  A block's 16-byte cp.async for a tile
 * stalled its warps for 8 % of the pass (Nsight Compute, one H200).
 */
static __device__ __forceinline__ void
kmg_bytes_tile_load(const kmg_args &a, int xbs, uint8_t *buf, int64_t r0, int rows, uint64_t *mbar)
{
	if (threadIdx.x == 0)
	{
		const unsigned bytes = (unsigned) rows * (unsigned) xbs;

		kmg_mbar_expect(kmg_smem_addr(mbar), bytes);
		kmg_bulk_copy(kmg_smem_addr(buf), a.Xb + (size_t) r0 * xbs, bytes, kmg_smem_addr(mbar));
	}
}

/*
 * Rows r0 .. up to a tile, within rend, on their way into L2 (one thread):
 * the tile after next, so that the tile buffers' copies find their rows
 * there (a block an SM holds two tiles in shared memory).  Alone, with the
 * tiles still copied 16 bytes a thread, it did not shorten them (24-31 us
 * for 531 rows on an H200); it was kept with the bulk copies, not measured
 * without them.
 */
static __device__ __forceinline__ void
kmg_bytes_tile_prefetch(const kmg_args &a, int xbs, int64_t r0, int64_t rend)
{
	if (threadIdx.x == 0 && r0 < rend)
		kmg_prefetch_l2(a.Xb + (size_t) r0 * xbs,
						(unsigned) ((rend - r0 < KMG_BYTES_TR ? rend - r0 : KMG_BYTES_TR) * xbs));
}

/*
 * Lane j's part of a close call: km_exact_cost's chain of the row (bytes)
 * against centroid j (floats, stride cs), both in shared memory, the next
 * 16 values loaded ahead of the dependent adds; +INF where the lane has no
 * candidate.
 */
static __device__ __forceinline__ double
kmg_bytes_chain(const uint8_t *xrow, const float *sc, int cs, int dp, bool cand, int j)
{
	double		s = INFINITY;

	if (cand)
	{
		const float4 *c4 = reinterpret_cast<const float4 *>(sc + (size_t) j * cs);
		const int	q4 = dp / 4;
		float4		ca[4],
					cb[4];

		s = 0.0;
		kmg_load4_ahead(ca, c4, 0, q4);
		/* columns past dp: zeros on both sides, which leave the sum as it is */
		for (int q0 = 0; q0 < q4; q0 += 4)
		{
			const uint4 xb = *reinterpret_cast<const uint4 *>(xrow + 4 * q0);
			const uint32_t xw[4] = {xb.x, xb.y, xb.z, xb.w};

			kmg_load4_ahead(cb, c4, q0 + 4, q4);
#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				kmg_exact_step_xd(s, (double) (xw[u] & 255u), ca[u].x, 0);
				kmg_exact_step_xd(s, (double) ((xw[u] >> 8) & 255u), ca[u].y, 0);
				kmg_exact_step_xd(s, (double) ((xw[u] >> 16) & 255u), ca[u].z, 0);
				kmg_exact_step_xd(s, (double) (xw[u] >> 24), ca[u].w, 0);
			}
#pragma unroll
			for (int u = 0; u < 4; u++)
				ca[u] = cb[u];
		}
	}
	return s;
}

/*
 * The close calls' bound, on the integer pipes.  With c in [0, 255],
 * q = rint(2^24 c) < 2^32 is c's value to 2^-25 (exactly where c >= 1/2),
 * and x.q is exact as four byte planes of q (dp4a, int32, then int64); so
 * v_j = |x|^2 + |c_j|^2 - 2 x.q_j / 2^24 is within B = |x|_1 2^-24 + 2 10^-13
 * (|x|^2 + |c_j|^2 + 2 x.c_j) of the exact cost (|c|^2 a double sum of d
 * exact squares, d <= 800; v's own two roundings), and km_exact_cost's
 * chain within g = (d + 2) u 1.01 of it (terms >= 0, u = 2^-53).  Where the
 * best two v are more than 2 B + g (v1 + v2 + 2 B) apart, the chain picks
 * the same best.  Otherwise (ties, near-ties), or where a centroid lies
 * outside [0, 255] (no pieces), the chains run for the centroids within
 * that margin of the best (all of them), one a lane, the least with ties to
 * the lowest id.  (Double arithmetic for the bound's values would cost
 * more: one row's parallel double costs took 12.5 us on an H200.)
 *
 * kmg_bytes_xq: one word of the row (columns 4 q .. 4 q + 3) into x.q_j of
 * every centroid (floats in shared memory, stride cs), |x|^2 and |x|_1.
 */
static __device__ __forceinline__ void
kmg_bytes_xq(unsigned xw, const float *sc, int cs, int q, int k, long long (&xq)[KMG_BYTES_KMAX],
			 unsigned &xx, unsigned &l1)
{
	xx = __dp4a(xw, xw, xx);
	l1 = __dp4a(xw, 0x01010101u, l1);
#pragma unroll
	for (int j = 0; j < KMG_BYTES_KMAX; j++)
		if (j < k)
		{
			const float4 c = *reinterpret_cast<const float4 *>(sc + j * cs + 4 * q);
			const unsigned q0 = (unsigned) rintf(c.x * 16777216.0f),	/* 2^24 c: exact scaling */
						q1 = (unsigned) rintf(c.y * 16777216.0f),
						q2 = (unsigned) rintf(c.z * 16777216.0f),
						q3 = (unsigned) rintf(c.w * 16777216.0f);
			long long	v = 0;

#pragma unroll
			for (int m = 3; m >= 0; m--)
			{
				const unsigned sel = (unsigned) m | (unsigned) (4 + m) << 4;
				const unsigned plane = __byte_perm(__byte_perm(q0, q1, sel), __byte_perm(q2, q3, sel), 0x5410);

				v = v * 256 + (long long) __dp4a(xw, plane, 0u);
			}
			xq[j] += v;
		}
}

/* kmg_bytes_xq's integers summed over the warp (every lane gets them) */
static __device__ __forceinline__ void
kmg_bytes_xq_warp_sum(int k, long long (&xq)[KMG_BYTES_KMAX], unsigned &xx, unsigned &l1)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
	{
		xx += __shfl_xor_sync(0xffffffffu, xx, o);
		l1 += __shfl_xor_sync(0xffffffffu, l1, o);
#pragma unroll
		for (int j = 0; j < KMG_BYTES_KMAX; j++)
			if (j < k)
				xq[j] += __shfl_xor_sync(0xffffffffu, xq[j], o);
	}
}

/* v_j and its bound B_j (above) from the row's integers */
static __device__ __forceinline__ double
kmg_bytes_bound_cost(long long xq, unsigned xx, unsigned l1, double cn, double *b)
{
	const double xc = (double) xq * (1.0 / 16777216.0);	/* exact: < 2^53 */

	*b = (double) l1 * (1.0 / 16777216.0) + 2e-13 * ((double) xx + cn + 2.0 * xc);
	return (double) xx + cn - 2.0 * xc;
}

/* whether the best two costs (v1 <= v2) are apart by more than the margin (above) */
static __device__ __forceinline__ bool
kmg_bytes_bound_apart(double v1, double v2, double bmax, double g)
{
	return v2 - v1 > 2.0 * bmax + g * (v1 + v2 + 2.0 * bmax) + 1e-9;
}

/* the g of the chains' error (above) */
static __device__ __forceinline__ double
kmg_bytes_chain_err(int d)
{
	return (double) (d + 2) * 1.1102230246251565e-16 * 1.01;
}

/* A listed row's label (old: the one before), written and counted. */
static __device__ __forceinline__ void
kmg_bytes_label_listed(const kmg_args &a, int32_t row, int lab, int old, int *scnt, int &moved,
					   int &nexact)
{
	if (old != lab)
	{
		moved++;
		a.labels[row] = lab;
	}
	atomicAdd(&scnt[lab], 1);
	nexact++;
}

/*
 * The block's listed rows (close calls), after its last tile, first the
 * whole block on each row in turn: thread t takes the row's columns 4 t ..
 * 4 t + 3 (dp / 4 <= 200 threads), the block adds the integers, warp 0
 * takes the best two and the bound; a row it decides is labelled, counted
 * and its bytes added into the block's partial (ssum, k x xbs ints: each
 * thread its own columns).  The rows left (ties, near-ties) are moved to
 * the front of the list (swapped: the list keeps every row) and their
 * number returned, for kmg_bytes_chain_listed.  Where a centroid lies
 * outside [0, 255] (no pieces), all are left.  A block's listed rows are
 * usually one or two (Fashion-MNIST: 10 to 30 an iteration over 132
 * blocks): a warp on each alone took 10.5-16 us (one H200).  What a row
 * needs from global memory (its index, its word a thread, its label before)
 * is read a row ahead; kmg_bytes_listed_read reads the first, before the
 * caller's last barrier.
 */
typedef struct kmg_bytes_listed_row
{
	int32_t		row;
	unsigned	xw;				/* columns 4 t .. 4 t + 3 (thread t < dp / 4) */
	int			old;			/* the label before (thread 0) */
} kmg_bytes_listed_row;

static __device__ __forceinline__ kmg_bytes_listed_row
kmg_bytes_listed_read(const kmg_args &a, const int32_t *list, int p)
{
	kmg_bytes_listed_row r;

	r.row = list[p];
	r.xw = threadIdx.x < (unsigned) (a.dp / 4) ?
		*reinterpret_cast<const unsigned *>(a.Xb + (size_t) r.row * a.xbs + 4 * threadIdx.x) : 0u;
	r.old = threadIdx.x == 0 ? a.labels[r.row] : 0;
	return r;
}

static __device__ __forceinline__ int
kmg_bytes_bound_listed(int tid, int lane, int warp, const kmg_args &a, int32_t *list, int nl,
					   kmg_bytes_listed_row next, const float *sc, int cs, const double *scn, int *ssum,
					   int *scnt, int &moved, int &nexact)
{
	__shared__ long long s_part[KMG_BYTES_NT / 32][KMG_BYTES_KMAX + 2];
	__shared__ int s_lab,
				s_left;
	const int	dp = a.dp,
				k = a.k,
				xbs = a.xbs;
	const double g = kmg_bytes_chain_err(a.d);
	int			left = 0;		/* thread 0's */

	for (int p = 0; p < nl; p++)
	{
		const kmg_bytes_listed_row cur = next;
		const int32_t row = cur.row;
		const unsigned xw = cur.xw;
		long long	xq[KMG_BYTES_KMAX];
		unsigned	xx = 0,
					l1 = 0;

		if (p + 1 < nl)
			next = kmg_bytes_listed_read(a, list, p + 1);	/* the swap below writes list[<= p] only */
#pragma unroll
		for (int j = 0; j < KMG_BYTES_KMAX; j++)
			xq[j] = 0;
		if (tid < dp / 4)
			kmg_bytes_xq(xw, sc, cs, tid, k, xq, xx, l1);
		kmg_bytes_xq_warp_sum(k, xq, xx, l1);
		if (lane == 0)
		{
#pragma unroll
			for (int j = 0; j < KMG_BYTES_KMAX; j++)
				if (j < k)
					s_part[warp][j] = xq[j];
			s_part[warp][KMG_BYTES_KMAX] = xx;
			s_part[warp][KMG_BYTES_KMAX + 1] = l1;
		}
		__syncthreads();
		if (warp == 0)
		{
			/* lane j: centroid j's cost and bound (the warps' integers in a fixed order: exact anyway) */
			long long	tq = 0,
						txx = 0,
						tl1 = 0;
			double		v = INFINITY,
						b = 0.0;
			int			i1 = lane;

			for (int w = 0; w < KMG_BYTES_NT / 32; w++)
			{
				txx += s_part[w][KMG_BYTES_KMAX];
				tl1 += s_part[w][KMG_BYTES_KMAX + 1];
				if (lane < k)
					tq += s_part[w][lane];
			}
			if (lane < k)
				v = kmg_bytes_bound_cost(tq, (unsigned) txx, (unsigned) tl1, scn[lane], &b);

			double		v1 = v,
						v2,
						bmax = b;

			kmg_warp_argmin<32>(v1, i1);
			v2 = lane == i1 ? INFINITY : v;
#pragma unroll
			for (int o = 16; o > 0; o >>= 1)
			{
				v2 = fmin(v2, __shfl_xor_sync(0xffffffffu, v2, o));
				bmax = fmax(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
			}
			if (lane == 0)
			{
				const bool	apart = kmg_bytes_bound_apart(v1, v2, bmax, g);

				s_lab = apart ? i1 : -1;
				if (apart)
					kmg_bytes_label_listed(a, row, i1, cur.old, scnt, moved, nexact);
				else
				{
					list[p] = list[left];	/* the undecided to the front */
					list[left++] = row;
				}
			}
		}
		__syncthreads();
		{
			const int	lab = s_lab;

			if (lab >= 0 && tid < dp / 4)
#pragma unroll
				for (int u = 0; u < 4; u++)
					ssum[lab * xbs + 4 * tid + u] += (int) ((xw >> (8 * u)) & 255u);
		}
	}
	if (tid == 0)
		s_left = left;
	__syncthreads();
	return s_left;
}

/*
 * The listed rows that the bound left (list[0 .. nl - 1]), a warp a row:
 * the bound again in the warp (its values pick the chains' candidates), then
 * km_exact_cost's chains (kmg_bytes_chain), one a lane; the label written
 * and counted and the row's bytes added into the block's partial (ssum,
 * shared-memory integer atomics: exact in any order).  sc: the centroids'
 * floats (stride cs); room: xbs bytes a warp for its row; pieces: the
 * bound holds (no centroid outside [0, 255]).
 */
static __device__ __forceinline__ void
kmg_bytes_chain_listed(int lane, int warp, const kmg_args &a, const int32_t *list, int nl, const float *sc,
					   int cs, uint8_t *room, const double *scn, bool pieces, int *ssum, int *scnt,
					   int &moved, int &nexact)
{
	const int	d = a.d,
				dp = a.dp,
				k = a.k,
				xbs = a.xbs;
	uint8_t    *sx = room + (size_t) warp * xbs;	/* a row a warp */
	const double g = kmg_bytes_chain_err(d);

	for (int p = warp; p < nl; p += KMG_BYTES_NT / 32)
	{
		const int32_t row = list[p];

		for (int c = 16 * lane; c < xbs; c += 16 * 32)
			*reinterpret_cast<uint4 *>(sx + c) = *reinterpret_cast<const uint4 *>(a.Xb + (size_t) row * xbs + c);
		__syncwarp();

		long long	xq[KMG_BYTES_KMAX];
		unsigned	xx = 0,
					l1 = 0;

#pragma unroll
		for (int j = 0; j < KMG_BYTES_KMAX; j++)
			xq[j] = 0;
		if (pieces)
			for (int q = lane; q < dp / 4; q += 32)
				kmg_bytes_xq(*reinterpret_cast<const unsigned *>(sx + 4 * q), sc, cs, q, k, xq, xx, l1);
		kmg_bytes_xq_warp_sum(k, xq, xx, l1);

		/* the best cost, the bound, and the lane's own cost */
		double		v1 = INFINITY,
					bmax = 0.0,
					mine = INFINITY;

#pragma unroll
		for (int j = 0; j < KMG_BYTES_KMAX; j++)
			if (j < k)
			{
				double		b;
				const double v = kmg_bytes_bound_cost(xq[j], xx, l1, scn[j], &b);

				bmax = fmax(bmax, b);
				v1 = fmin(v1, v);
				if (j == lane)
					mine = v;
			}

		/* the chains of the centroids within the margin of the best */
		const bool	cand = lane < k && (!pieces || !kmg_bytes_bound_apart(v1, mine, bmax, g));
		double		cost = kmg_bytes_chain(sx, sc, cs, dp, cand, lane);
		int			lab = lane;

		kmg_warp_argmin<32>(cost, lab);
		if (lane == 0)
			kmg_bytes_label_listed(a, row, lab, a.labels[row], scnt, moved, nexact);
		for (int c = lane; c < d; c += 32)
			atomicAdd(&ssum[lab * xbs + c], (int) sx[c]);
		__syncwarp();			/* the row's room is free again */
	}
}

/*
 * The pass (see the file header); MODE_ITER only (a fit's labels-only
 * passes run the wide pass on the floats).  Per tile: the dots and each
 * row's screened best two, the certificate (the close calls listed), then
 * the indicator-times-rows sums; after the last tile the close calls
 * settled, and the block's sums, counts and estimate out for
 * kmg_bytes_end_kernel, the iteration's end.
 */
__global__ void __launch_bounds__(KMG_BYTES_NT, 1)
kmg_bytes_kernel(kmg_args a)
{
	extern __shared__ __align__(16) uint8_t kmg_bsmem[];
	const int	xbs = a.xbs;
	const kmg_bytes_layout L = kmg_bytes_layout_of(xbs);
	uint8_t    *const buf0 = kmg_bsmem + L.buf0,	/* two names, not an array: no local memory */
			   *const buf1 = kmg_bsmem + L.buf1;
	uint8_t    *const cp = kmg_bsmem + L.cp;
	int		   *const slab = (int *) (kmg_bsmem + L.lab);
	int		   *const scnt = (int *) (kmg_bsmem + L.cnt);
	double	   *const scn = (double *) (kmg_bsmem + L.cn);
	__shared__ float s_emax;
	__shared__ double s_est[KMG_BYTES_NT / 32];
	__shared__ int s_nl;
	__shared__ uint64_t s_mbar[3];	/* the tile buffers' barriers, the centroids' pieces' */
	const int	tid = threadIdx.x,
				lane = tid & 31,
				warp = tid >> 5,
				g = lane >> 2,
				t = lane & 3;
	const int	k = a.k;
	const int	nch = (xbs + 31) / 32;	/* chunks of 32 columns: the dots' k-steps, the sums' chunks */
	const bool	half_last = xbs % 32 != 0;	/* the last one has 16 */
	const int64_t per = kmg_bytes_block_rows(a.n, gridDim.x);
	const int64_t rbeg = (int64_t) blockIdx.x * per;
	const int64_t rend = rbeg + per < a.n ? rbeg + per : a.n;

	/* the block's close calls: a slot for each row it reads */
	int32_t    *const list = a.xblist + (size_t) blockIdx.x * (size_t) per;

	/*
	 * The first tile is on its way before the wait for the kernel before
	 * (launched overlapped: kmg_bytes_launch): the byte rows do not change
	 * during a fit.
	 */
	if (tid == 0)
	{
		kmg_mbar_init(kmg_smem_addr(&s_mbar[0]));
		kmg_mbar_init(kmg_smem_addr(&s_mbar[1]));
		kmg_mbar_init(kmg_smem_addr(&s_mbar[2]));
	}
	if (rbeg < rend)
		kmg_bytes_tile_load(a, xbs, buf0, rbeg, (int) (rend - rbeg < KMG_BYTES_TR ? rend - rbeg : KMG_BYTES_TR),
							&s_mbar[0]);
	kmg_bytes_tile_prefetch(a, xbs, rbeg + KMG_BYTES_TR, rend);
	kmg_grid_wait();
	kmg_grid_release();
	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
	{
		if (rbeg < rend)
			kmg_mbar_wait(kmg_smem_addr(&s_mbar[0]), 0);	/* no copy outlives the block */
		return;
	}
	if (tid == 0)
		s_nl = 0;				/* before the prologue's barriers */
	kmg_bytes_prologue(tid, a, xbs, cp, scnt, scn, &s_emax,
					   *(volatile int *) &a.ctl->pieces == *(volatile int *) &a.ctl->iter + 1, &s_mbar[2]);

	const double emax4 = 4.0 * (double) s_emax * (1.0 + 1e-6);
	int			acc2[4][4][4] = {};	/* sums: chunk slot, n-tile, fragment */
	uint8_t    *last = buf0;	/* the last tile's buffer (then the other holds the centroids) */
	int			moved = 0,
				nexact = 0;
	double		est = 0.0;

	for (int64_t r0 = rbeg, it = 0; r0 < rend; r0 += KMG_BYTES_TR, it++)
	{
		uint8_t    *cur = (it & 1) ? buf1 : buf0;
		const int	rows = (int) (rend - r0 < KMG_BYTES_TR ? rend - r0 : KMG_BYTES_TR);
		const int64_t r1 = r0 + KMG_BYTES_TR;	/* the next tile */
		int			pold[2] = {-1, -1};

		/* the labels before, read while the tile lands */
		if (t == 0)
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				const int	rl = 16 * warp + g + 8 * h;

				if (rl < rows)
					pold[h] = a.labels[r0 + rl];
			}
		kmg_fence_proxy_async();	/* this thread's reads of the other buffer, before its copy */
		__syncthreads();		/* the other buffer's tile is done with */
		if (r1 < rend)
		{
			kmg_bytes_tile_load(a, xbs, (it & 1) ? buf0 : buf1, r1,
								(int) (rend - r1 < KMG_BYTES_TR ? rend - r1 : KMG_BYTES_TR),
								&s_mbar[(it + 1) & 1]);
			kmg_bytes_tile_prefetch(a, xbs, r1 + KMG_BYTES_TR, rend);
		}
		else
			/* the last tile: the close calls' centroids into the other buffer meanwhile */
			kmg_bytes_centroids_load(tid, a, (float *) ((it & 1) ? buf0 : buf1), a.dp + 4);
		kmg_mbar_wait(kmg_smem_addr(&s_mbar[it & 1]), (unsigned) (it >> 1) & 1u);	/* this tile is in place */
		last = cur;

		/* the dots: warp w, rows 16 w .. 16 w + 15 x 2 n-tiles of slots x 2 pieces */
		{
			int			acc[2][2][4] = {};	/* n-tile, piece, fragment */
			/* ldmatrix: lane i gives row i % 8 of matrix i / 8 */
			const int	q = lane >> 3,
						rr = lane & 7;
			const unsigned xa = kmg_smem_addr(cur + (size_t) (16 * warp + rr + 8 * (q & 1)) * xbs + 16 * (q >> 1));
			const unsigned cb0 = kmg_smem_addr(cp + (size_t) (8 * (q >> 1) + rr) * xbs + 16 * (q & 1));
			const unsigned cb1 = cb0 + KMG_BYTES_SLOTS * xbs;
			const int	wsteps = 16 * warp < rows ? nch : 0;	/* a partial tile's warps past it: none */

#pragma unroll 4
			for (int ks = 0; ks < wsteps; ks++)
			{
				uint32_t	af[4],
							b0[4],
							b1[4];

				kmg_ldsm4(af, xa + 32 * ks);
				kmg_ldsm4(b0, cb0 + 32 * ks);
				kmg_ldsm4(b1, cb1 + 32 * ks);
				if (half_last && ks == nch - 1)
					af[2] = af[3] = 0u;	/* columns xbs .. xbs + 15: none */
				kmg_mma_u8(acc[0][0], af, b0[0], b0[1]);
				kmg_mma_u8(acc[1][0], af, b0[2], b0[3]);
				kmg_mma_u8(acc[0][1], af, b1[0], b1[1]);
				kmg_mma_u8(acc[1][1], af, b1[2], b1[3]);
			}

			/* rows g (h 0) and g + 8 (h 1) x slots 8 n + 2 t + e */
#pragma unroll
			for (int h = 0; h < 2; h++)
			{
				double		b1 = INFINITY,
							b2 = INFINITY;
				int			i1 = 1 << 30;
				/* slot 15 (n 1, t 3, e 1): the hi piece is ones, so its dot is |x|_1 */
				const int	l1 = __shfl_sync(0xffffffffu, acc[1][0][2 * h + 1], (lane & ~3) | 3);

#pragma unroll
				for (int n = 0; n < 2; n++)
#pragma unroll
					for (int e = 0; e < 2; e++)
					{
						const int	j = 8 * n + 2 * t + e;
						/* 256 x.c ~ 256 x.hi + x.lo: an exact integer in double */
						const double dot = 256.0 * (double) acc[n][0][2 * h + e] + (double) acc[n][1][2 * h + e];
						const double v = scn[j] - dot * (1.0 / 128.0);

						if (j < k)
						{
							if (KMG_BEFORE(v, j, b1, i1))
							{
								b2 = b1;
								b1 = v;
								i1 = j;
							}
							else
								b2 = fmin(b2, v);
						}
					}
#pragma unroll
				for (int o = 1; o <= 2; o <<= 1)
				{
					const double ob1 = __shfl_xor_sync(0xffffffffu, b1, o),
								ob2 = __shfl_xor_sync(0xffffffffu, b2, o);
					const int	oi1 = __shfl_xor_sync(0xffffffffu, i1, o);

					if (KMG_BEFORE(ob1, oi1, b1, i1))
					{
						b2 = fmin(b1, ob2);
						b1 = ob1;
						i1 = oi1;
					}
					else
						b2 = fmin(b2, ob1);
				}

				const int	rl = 16 * warp + g + 8 * h;

				if (t == 0)
				{
					int			lab = -1;

					if (rl < rows)
					{
						/*
						 * each screened value is within 2 |x|_1 e_j of the true
						 * |c|^2 - 2 x.c, a pair within 4 |x|_1 emax; the float64
						 * evaluations (here and km_exact_cost's) add a relative
						 * 1e-12 of the costs (|x|^2 <= 255 |x|_1)
						 */
						const double xxb = 255.0 * (double) l1;
						const double slack = emax4 * (double) l1 +
							1e-12 * (fabs(b1) + fabs(b2) + 2.0 * xxb) + 1e-9;

						est += b1;
						if (b2 - b1 > slack)
						{
							lab = i1;
							if (pold[h] != lab)
							{
								moved++;
								a.labels[r0 + rl] = lab;
							}
							atomicAdd(&scnt[lab], 1);
						}
						else
							list[atomicAdd(&s_nl, 1)] = (int32_t) (r0 + rl);	/* settled after the tiles */
					}
					slab[rl] = lab;	/* -1: in no cluster's sums yet */
				}
			}
		}

		__syncthreads();		/* the tile's labels are in place */

		/*
		 * The sums: clusters (M 16) x rows (K 32) indicator times rows x columns
		 * (N 8): warp w takes the column chunks w, w + 8, w + 16, w + 24 (32
		 * columns each: lane g's four columns 4 g .. 4 g + 3 are n-tiles 0..3);
		 * lane t's K elements 4 t + r are the rows 2 t + 8 r, its K elements
		 * 16 + 4 t + r the rows 2 t + 8 r + 1 (at 784 bytes a row, no bank
		 * conflicts).  Columns past xbs read the next row's bytes (or the
		 * buffer's last 32) and are never written out.
		 */
#pragma unroll
		for (int kk = 0; kk < KMG_BYTES_TR / 32; kk++)
		{
			if (32 * kk >= rows)
				break;			/* a partial tile's rows are all in: the same for the block */

			uint32_t	af[4];
			int			lb0[4],
						lb1[4];

#pragma unroll
			for (int r = 0; r < 4; r++)
			{
				lb0[r] = slab[32 * kk + 2 * t + 8 * r];
				lb1[r] = slab[32 * kk + 2 * t + 8 * r + 1];
			}
			af[0] = af[1] = af[2] = af[3] = 0u;
#pragma unroll
			for (int r = 0; r < 4; r++)
			{
				af[0] |= (uint32_t) (lb0[r] == g) << (8 * r);
				af[1] |= (uint32_t) (lb0[r] == g + 8) << (8 * r);
				af[2] |= (uint32_t) (lb1[r] == g) << (8 * r);
				af[3] |= (uint32_t) (lb1[r] == g + 8) << (8 * r);
			}
#pragma unroll
			for (int s = 0; s < 4; s++)
			{
				const int	ch = warp + 8 * s;

				if (ch >= nch)
					continue;

				const uint8_t *xb = cur + (size_t) (32 * kk + 2 * t) * xbs + 32 * ch + 4 * g;
				uint32_t	w0[4],
							w1[4];

#pragma unroll
				for (int r = 0; r < 4; r++)
				{
					w0[r] = *(const uint32_t *) (xb + (size_t) (8 * r) * xbs);
					w1[r] = *(const uint32_t *) (xb + (size_t) (8 * r + 1) * xbs);
				}

				/* 4 x 4 byte transposes: column 4 g + j of the four rows */
				const uint32_t lo01 = __byte_perm(w0[0], w0[1], 0x5140),
							lo23 = __byte_perm(w0[2], w0[3], 0x5140),
							hi01 = __byte_perm(w0[0], w0[1], 0x7362),
							hi23 = __byte_perm(w0[2], w0[3], 0x7362);
				const uint32_t mlo01 = __byte_perm(w1[0], w1[1], 0x5140),
							mlo23 = __byte_perm(w1[2], w1[3], 0x5140),
							mhi01 = __byte_perm(w1[0], w1[1], 0x7362),
							mhi23 = __byte_perm(w1[2], w1[3], 0x7362);

				kmg_mma_u8(acc2[s][0], af, __byte_perm(lo01, lo23, 0x5410), __byte_perm(mlo01, mlo23, 0x5410));
				kmg_mma_u8(acc2[s][1], af, __byte_perm(lo01, lo23, 0x7632), __byte_perm(mlo01, mlo23, 0x7632));
				kmg_mma_u8(acc2[s][2], af, __byte_perm(hi01, hi23, 0x5410), __byte_perm(mhi01, mhi23, 0x5410));
				kmg_mma_u8(acc2[s][3], af, __byte_perm(hi01, hi23, 0x7632), __byte_perm(mhi01, mhi23, 0x7632));
			}
		}
	}

	/*
	 * The block's partial: the warps' accumulators to shared memory (the
	 * last tile's buffer: every copy has landed and been used), C[m][nn] of
	 * chunk ch, n-tile j being cluster m, column 32 ch + 4 nn + j; the listed
	 * rows settled and their bytes added there; then out with plain
	 * coalesced stores (integers: the end kernel may add them in any order).
	 */
	kmg_cp16_wait<0>();
	__syncthreads();

	const int	nl = s_nl;
	const bool	pieces = s_emax < INFINITY;
	int		   *const ssum = (int *) last;	/* k x xbs */
	uint8_t    *const room = last == buf0 ? buf1 : buf0;
	int		   *const out = kmg_bytes_part(a, blockIdx.x);
	kmg_bytes_listed_row first = {0, 0u, 0};

	if (nl > 0 && pieces)
		first = kmg_bytes_listed_read(a, list, 0);	/* on its way during the partial's write */

#pragma unroll
	for (int s = 0; s < 4; s++)
	{
		const int	ch = warp + 8 * s;

		if (ch >= nch)
			continue;
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
			{
				const int	m = g + 8 * (e >> 1);
				const int	col = 32 * ch + 4 * (2 * t + (e & 1)) + j;

				if (m < k && col < xbs)
					ssum[m * xbs + col] = acc2[s][j][e];
			}
	}
	__syncthreads();
	if (nl > 0)
	{
		/* the close calls, with the centroids' floats in the other buffer (16-byte rows of cs) */
		const int	cs = a.dp + 4;	/* the chains' lanes j and j + 8 on other banks */
		const float *const sc = (const float *) room;
		const int	left = pieces ? kmg_bytes_bound_listed(tid, lane, warp, a, list, nl, first, sc, cs, scn,
														   ssum, scnt, moved, nexact) : nl;

		if (left > 0)
			kmg_bytes_chain_listed(lane, warp, a, list, left, sc, cs, room + (size_t) k * cs * sizeof(float),
								   scn, pieces, ssum, scnt, moved, nexact);
	}
	__syncthreads();
	for (int c = tid; c < k * xbs; c += KMG_BYTES_NT)
		out[c] = ssum[c];
	if (tid < k)
		out[k * xbs + tid] = scnt[tid];

	/* the block's estimate into its slot (warps in order), its counts into the control block */
	est = kmg_block_counts(est, moved, nexact, &a.ctl->moved, &a.ctl->namb, s_est);
	if (tid == 0)
		kmg_bytes_est(a, gridDim.x)[blockIdx.x] = est;
}

#define KMG_BYTES_END_NT 256

/*
 * The end of the iteration in one launch, from the blocks' partials: block
 * (x, j) adds columns 32 x .. 32 x + 31 of cluster j over the pass's
 * blocks (integers, exact in any order; the warps take slices of blocks,
 * about 17 loads a thread, all in flight) and every cluster's count, so
 * that each block knows whether the centroids move (rows moved, no
 * cluster empty) and moves its columns of centroid j to their means itself
 * (kmg_fin_mean, as every finalize does; an integer sum over a positive
 * count is always finite).  It also lays out those columns' byte pieces as
 * the next pass's prologue wants them (a.xbend, kmg_bytes_end_layout: that
 * prologue is then one bulk copy), and puts its part of |c_j|^2 and its
 * largest piece error in slots.  The last block (ticket after a fence)
 * adds each cluster's slots in column order into |c_j|^2 and |c_j|, the
 * blocks' estimates in a fixed tree, and takes the iteration's decisions
 * (kmg_fin_decide); ctl->pieces says for which iteration the pieces stand.
 * Before, a reduction and kmg_finalize_kernel on k blocks (two launches,
 * two waits for the kernel before) and the pieces built by every block of
 * the pass (kernels/bench/NOTES.md, round 11).
 */
__global__ void __launch_bounds__(KMG_BYTES_END_NT)
kmg_bytes_end_kernel(kmg_args a, int nblocks)
{
	__shared__ long long sred[KMG_BYTES_END_NT / 32][32];
	__shared__ int s_cnt[KMG_BYTES_KMAX];
	__shared__ double s_est[KMG_BYTES_END_NT / 32];
	__shared__ float s_emax[KMG_BYTES_END_NT / 32];
	__shared__ int s_last;
	kmg_ctl    *ctl = a.ctl;
	const int	j = blockIdx.y;
	const int	tid = threadIdx.x,
				lane = tid & 31,
				slice = tid >> 5;
	const int	col = blockIdx.x * 32 + lane;
	const int	d = a.d,
				dp = a.dp,
				k = a.k,
				xbs = a.xbs;
	const int	cw = KMG_CW(dp);
	const size_t stride = (size_t) k * xbs + k;
	const int  *p0 = kmg_bytes_part(a, 0);
	const kmg_bytes_end_layout E = kmg_bytes_end_layout_of(xbs, k);
	double	   *const norms = reinterpret_cast<double *>(a.xbend + E.norms);
	float	   *const errs = reinterpret_cast<float *>(a.xbend + E.errs);
	uint8_t    *const pieces = a.xbend + E.pieces;

	kmg_grid_wait();			/* launched overlapped: the partials are in after it */
	kmg_grid_release();
	if (*(volatile int *) &ctl->stop != KMG_RUN)
		return;
	{
		long long	s = 0;

		if (col < dp)
#pragma unroll 8
			for (int b = slice; b < nblocks; b += KMG_BYTES_END_NT / 32)
				s += p0[(size_t) b * stride + (size_t) j * xbs + col];
		sred[slice][lane] = s;
	}
	/* every cluster's count, warp w clusters w, w + 8 (a count is at most n: an int) */
	for (int jj = slice; jj < k; jj += KMG_BYTES_END_NT / 32)
	{
		int			c = 0;

		for (int b = lane; b < nblocks; b += 32)
			c += p0[(size_t) b * stride + (size_t) k * xbs + jj];
		for (int o = 16; o > 0; o >>= 1)
			c += __shfl_xor_sync(0xffffffffu, c, o);
		if (lane == 0)
			s_cnt[jj] = c;
	}
	__syncthreads();

	const int	moved = *(volatile int *) &ctl->moved;
	int			nempty = 0;

	for (int jj = 0; jj < k; jj++)
		nempty += s_cnt[jj] == 0;

	const int	change = moved > 0 && nempty == 0;

	if (slice == 0)
	{
		long long	s = sred[0][lane];
		double	   *cl = a.clus + (size_t) j * cw;
		const double w = (double) s_cnt[j];

		for (int sl = 1; sl < KMG_BYTES_END_NT / 32; sl++)
			s += sred[sl][lane];
		if (col < dp)
			cl[col] = (double) s;
		if (blockIdx.x == 0 && lane == 0)
		{
			cl[dp] = w;			/* w and count */
			cl[dp + 1] = w;
			cl[dp + 3] = 0.0;
		}
		if (change)
		{
			/*
			 * The mean (Cf is C: the fit is neither centred nor cosine), its
			 * pieces as the prologue lays them out (cluster 0's blocks also
			 * the slots past k: zeros, and ones in slot 15's hi piece), and
			 * the columns' |c'|^2 and largest piece error.
			 */
			float	   *c = a.C + (size_t) j * dp;
			double		sq = 0.0;
			float		err = 0.0f;
			uint32_t	q = 0;

			if (col < d)
			{
				float		v = c[col];

				if (!(a.reloc != NULL && a.reloc[j]) && w > 0.0)
				{
					v = kmg_fin_mean((double) s, w, 1.0);
					c[col] = v;
				}
				sq = (double) v * (double) v;
				q = kmg_bytes_piece(v, err);
			}
			if (col < xbs)
			{
				pieces[(size_t) j * xbs + col] = (uint8_t) (q >> 8);
				pieces[(size_t) (KMG_BYTES_SLOTS + j) * xbs + col] = (uint8_t) (q & 255u);
				if (j == 0)
					for (int sl = k; sl < KMG_BYTES_SLOTS; sl++)
					{
						pieces[(size_t) sl * xbs + col] = sl == KMG_BYTES_SLOTS - 1;
						pieces[(size_t) (KMG_BYTES_SLOTS + sl) * xbs + col] = 0;
					}
			}
			if (j == 0 && blockIdx.x == 0)
				pieces[(size_t) 2 * KMG_BYTES_SLOTS * xbs + lane] = 0;
			for (int o = 16; o > 0; o >>= 1)
			{
				sq += __shfl_xor_sync(0xffffffffu, sq, o);
				err = fmaxf(err, __shfl_xor_sync(0xffffffffu, err, o));
			}
			if (lane == 0)
			{
				norms[(size_t) j * 32 + blockIdx.x] = sq;
				errs[(size_t) j * 32 + blockIdx.x] = err;
			}
		}
	}

	/* the last block decides */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&ctl->ticket, 1u) == gridDim.x * gridDim.y - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();
	{
		/* the estimate: a stride of blocks a lane, a fixed tree, plus sum |x|^2; cluster 0's slot */
		const double *e = kmg_bytes_est(a, nblocks);
		double		est = 0.0;
		float		cmax = 0.0f,
					emax = 0.0f;

		for (int b = tid; b < nblocks; b += KMG_BYTES_END_NT)
			est += e[b];
		for (int o = 16; o > 0; o >>= 1)
			est += __shfl_xor_sync(0xffffffffu, est, o);
		if (lane == 0)
			s_est[slice] = est;
		if (tid < k)
		{
			if (change)
			{
				/* |c'|^2 from the blocks' slots in column order; k <= 15: one warp */
				const volatile double *nv = norms + (size_t) tid * 32;
				double		sq = 0.0;

				for (int x = 0; x < (int) gridDim.x; x++)
					sq += nv[x];
				a.cnorm[tid] = sq;	/* |c|^2 in double (the next pass's prologue) */
				a.cn[tid] = (float) sq;
				cmax = (float) sqrt(sq);
				a.cnf[tid] = cmax;
			}
			if (a.reloc != NULL)
				a.reloc[tid] = 0;
		}
		if (change)
			/* the largest piece error: the errors are >= 0 (or +INF), so any order */
			for (int i = tid; i < k * (int) gridDim.x; i += KMG_BYTES_END_NT)
			{
				const int	jj = i / gridDim.x;

				emax = fmaxf(emax, *(const volatile float *) &errs[(size_t) jj * 32 + (i - jj * gridDim.x)]);
			}
		for (int o = 16; o > 0; o >>= 1)
		{
			cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
			emax = fmaxf(emax, __shfl_xor_sync(0xffffffffu, emax, o));
		}
		if (lane == 0)
			s_emax[slice] = emax;
		__syncthreads();
		if (tid != 0)
			return;
		for (int wv = 1; wv < KMG_BYTES_END_NT / 32; wv++)
			emax = fmaxf(emax, s_emax[wv]);
		est = s_est[0];
		for (int wv = 1; wv < KMG_BYTES_END_NT / 32; wv++)
			est += s_est[wv];
		est += a.xbsq;
		for (int jj = 0; jj < k; jj++)
			a.clus[(size_t) jj * cw + dp + 2] = jj == 0 ? est : 0.0;
		{
			const kmg_ctl snap = kmg_ctl_snapshot(ctl);

			ctl->nempty = nempty;	/* a pause for empty clusters leaves it for the re-seed */
			ctl->ticket = 0;
			/* the pieces are the next pass's where the centroids moved here (decide: iter + 1) */
			if (change)
				*reinterpret_cast<float *>(a.xbend + E.emax) = emax;
			ctl->pieces = change ? snap.iter + 2 : 0;
			kmg_fin_decide(a, KMG_FIN_ITER, moved, nempty, change, cmax, 0, est, snap,
						   a.bounded ? *(volatile int *) &a.bs->nlist : -1);
		}
	}
}

/* ---- host ---- */

/* Bytes of a row of the byte copy (16-byte aligned rows), and the shared memory of the pass. */
int
kmg_bytes_stride(int d)
{
	return KMG_ROUND_UP(d, 16);
}

size_t
kmg_bytes_smem(int d)
{
	return kmg_bytes_layout_of(kmg_bytes_stride(d)).total;
}

/*
 * Slots of a->xblist for n rows on at most nblocks blocks: block b lists
 * from b x ceil(n / blocks) (kmg_bytes_block_rows), so the last block's
 * slots may reach past n by fewer than blocks.
 */
size_t
kmg_bytes_list_len(int64_t n, int nblocks)
{
	return (size_t) n + (size_t) nblocks;
}

/*
 * The byte copy of n rows and whether it is exact: returns the count of
 * values that are not bytes in *nbad and sum |x|^2 in *sumsq (synchronises
 * the stream).  scratch: 2 words of device memory.
 */
cudaError_t
kmg_bytes_rows(const float *X, int64_t n, int d, int dp, uint8_t *Xb, unsigned long long *scratch,
			   int sms, unsigned long long *nbad, double *sumsq, cudaStream_t stream)
{
	unsigned long long h[2];
	const int64_t want = (n + 7) / 8;
	const int	blocks = (int) (want < (int64_t) sms * 8 ? (want > 0 ? want : 1) : (int64_t) sms * 8);
	cudaError_t e;

	if ((e = cudaMemsetAsync(scratch, 0, 2 * sizeof(unsigned long long), stream)) != cudaSuccess)
		return e;
	kmg_bytes_rows_kernel<<<blocks, 256, 0, stream>>>(X, n, d, dp, Xb, kmg_bytes_stride(d), scratch);
	if ((e = cudaGetLastError()) != cudaSuccess ||
		(e = cudaMemcpyAsync(h, scratch, sizeof(h), cudaMemcpyDeviceToHost, stream)) != cudaSuccess ||
		(e = cudaStreamSynchronize(stream)) != cudaSuccess)
		return e;
	*nbad = h[0];
	*sumsq = (double) h[1];		/* < 2^53 for any n a device holds: exact */
	return cudaSuccess;
}

/* Bytes of a->xbend, the end of the iterations' room (kmg_bytes_end_kernel), for d and k. */
size_t
kmg_bytes_end_bytes(int d, int k)
{
	return kmg_bytes_end_layout_of(kmg_bytes_stride(d), k).total;
}

/* Once per call: the pass's shared memory limit (its grid is one block an SM). */
cudaError_t
kmg_bytes_prepare(int d)
{
	return cudaFuncSetAttribute((const void *) kmg_bytes_kernel,
								cudaFuncAttributeMaxDynamicSharedMemorySize, (int) kmg_bytes_smem(d));
}

/* The pass's rows a block at most: its integer sums stay below 2^31 (255 x rows). */
int64_t
kmg_bytes_nmax(int sms)
{
	return ((int64_t) INT32_MAX / 255 / KMG_BYTES_TR - 1) * KMG_BYTES_TR * sms;
}

/*
 * One Lloyd iteration on the byte rows, two launches: the pass (labels,
 * the blocks' partials) and the end of the iteration (kmg_bytes_end_kernel:
 * the partials' sums into a->clus, the means, the next pass's pieces, the
 * decisions).  a->Xb, a->xbs, a->xbsq, a->xblist and a->xbend set; nblocks
 * at most a->nblocks (the partials and estimates fit a->part, laid out for
 * the wide pass's doubles).  overlap: each launch overlaps the one before
 * it (kmg_launch_overlapped): a launch's latency and the pass's first tile
 * hide under the kernel before.
 */
cudaError_t
kmg_bytes_launch(const kmg_args *a, int nblocks, int overlap, cudaStream_t stream)
{
	const size_t part_bytes = (size_t) a->nblocks * a->k * KMG_CW(a->dp) * sizeof(double);
	const int	ncb = (a->dp + 31) / 32;
	const size_t need = KMG_ROUND_UP((size_t) nblocks * ((size_t) a->k * a->xbs + a->k), 2) * sizeof(int) +
		(size_t) nblocks * sizeof(double);
	cudaError_t e;

	if (a->Xb == NULL || a->xblist == NULL || a->xbend == NULL || a->W != NULL || a->cosine ||
		a->k > KMG_BYTES_KMAX || a->xbs != kmg_bytes_stride(a->d) || ncb > 32 || nblocks < 1 ||
		nblocks > a->nblocks || need > part_bytes || a->n > kmg_bytes_nmax(nblocks))
		return cudaErrorInvalidValue;
	if ((e = kmg_launch_overlapped(overlap, kmg_bytes_kernel, dim3(nblocks), dim3(KMG_BYTES_NT),
								   kmg_bytes_smem(a->d), stream, *a)) != cudaSuccess)
		return e;
	return kmg_launch_overlapped(overlap, kmg_bytes_end_kernel, dim3(ncb, a->k), dim3(KMG_BYTES_END_NT), 0,
								 stream, *a, nblocks);
}
