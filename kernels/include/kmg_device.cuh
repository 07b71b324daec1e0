/*
 * kmg_device.cuh
 *	  The device helpers every kernel family of the CUDA engine shares, each
 *	  under one name.
 *
 *	- the exact distance on the device: km_exact_cost's steps over padded
 *	  rows (kmg_exact_step, kmg_exact_finish) and the chain with its loads
 *	  ahead of the dependent adds (kmg_chain4; kmg_chain4_xd, the row
 *	  already in double);
 *	- cp.async copies global -> shared (kmg_cp16, kmg_cp16_zfill,
 *	  kmg_cp16_zfill_at, kmg_cp4_at, kmg_cp16_commit, kmg_cp16_wait),
 *	  prefetches into L2 (kmg_prefetch_l2), and sm_90's bulk copies that
 *	  signal a shared-memory barrier (kmg_mbar_init, kmg_mbar_expect,
 *	  kmg_bulk_copy, kmg_mbar_wait, kmg_fence_proxy_async; kmg_smem_addr);
 *	- tensor-core fragments from shared memory (kmg_ldsm4) and the integer
 *	  mma (kmg_mma_u8, kmg_mma_s8);
 *	- argmin in one order everywhere: the smaller cost, ties to the lower
 *	  index (KMG_BEFORE, kmg_warp_argmin, kmg_argmin_strided);
 *	- order-free sums: 128-bit fixed-point atomics (kmg_fix_atomic,
 *	  kmg_fix_decode, kmg_fix_warp_sum; kmg_i128_atomic, and
 *	  kmg_i128_round, which rounds an exact integer sum once), integer
 *	  reductions that return nothing (kmg_red_add) and integer block counts
 *	  (kmg_block_add_int, and with a block's estimate kmg_block_counts);
 *	- distances rounded outwards, for bounds (kmg_sqrt_ru, kmg_sqrt_rd);
 *	- kernels that overlap the one before them in the stream (programmatic
 *	  dependent launch: kmg_launch_overlapped on the host, kmg_grid_wait and
 *	  kmg_grid_release in the kernels).
 *
 * The functions shared with host code and the C references (km_exact.h,
 * km_fixsum.h, km_hash.h) are declared with KM_HD (src/include/km_hd.h); what
 * is here exists on the device only.
 */
#ifndef KMG_DEVICE_CUH
#define KMG_DEVICE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "km_exact.h"
#include "km_fixsum.h"

/* ---- the exact distance ---- */

/*
 * One step of km_exact_cost's chain (kmg_exact_step; kmg_exact_step_xd
 * with x already in double, for threads that share a row's conversions)
 * and its end (kmg_exact_finish), for rows padded with zeros to dp columns
 * and read 16 bytes at a time: the steps past d add (0 - 0)^2 or 0 * 0 to
 * the running sum, which leaves every bit as it was (cosine: a -0 sum may
 * turn +0, and 1 - 0 / |c| is 1 either way), so the result is
 * km_exact_cost's exactly.
 */
__device__ __forceinline__ void
kmg_exact_step_xd(double &s, double x, float c, int cosine)
{
	if (cosine)
		s = km_dadd(s, km_dmul(x, (double) c));
	else
	{
		const double t = km_dadd(x, -(double) c);

		s = km_dadd(s, km_dmul(t, t));
	}
}

/* (double) x is exact, so this is the same step, bit for bit */
__device__ __forceinline__ void
kmg_exact_step(double &s, float x, float c, int cosine)
{
	kmg_exact_step_xd(s, (double) x, c, cosine);
}

__device__ __forceinline__ double
kmg_exact_finish(double s, double cnorm, int cosine)
{
	if (cosine)
	{
		const double cost = km_dadd(1.0, -km_ddiv(s, cnorm));

		return cost > 0.0 ? cost : 0.0;
	}
	return s;
}

/* v[u] = p[q + u] for u < 4, zeros from q4 on: the chains' loads ahead */
__device__ __forceinline__ void
kmg_load4_ahead(float4 (&v)[4], const float4 *p, int q, int q4)
{
	const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

#pragma unroll
	for (int u = 0; u < 4; u++)
		v[u] = q + u < q4 ? p[q + u] : z;
}

/*
 * The same chain with the loads of the next 4 x 16 bytes in flight while the
 * current ones are summed (the chain is a run of dependent double adds; the
 * loads are not, and in a plain loop each one would wait on its own load).
 * x and c may be global or shared; q4 float4 steps.
 */
__device__ __forceinline__ double
kmg_chain4(const float4 *x4, const float4 *c4, int q4, double cnorm, int cosine)
{
	float4		xa[4],
				ca[4],
				xb[4],
				cb[4];
	double		s = 0.0;

	kmg_load4_ahead(xa, x4, 0, q4);
	kmg_load4_ahead(ca, c4, 0, q4);
	for (int q0 = 0; q0 < q4; q0 += 4)
	{
		kmg_load4_ahead(xb, x4, q0 + 4, q4);
		kmg_load4_ahead(cb, c4, q0 + 4, q4);
		/* zero padding past q4 leaves the sum as it is (see kmg_exact_step) */
#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			kmg_exact_step(s, xa[u].x, ca[u].x, cosine);
			kmg_exact_step(s, xa[u].y, ca[u].y, cosine);
			kmg_exact_step(s, xa[u].z, ca[u].z, cosine);
			kmg_exact_step(s, xa[u].w, ca[u].w, cosine);
		}
#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			xa[u] = xb[u];
			ca[u] = cb[u];
		}
	}
	return kmg_exact_finish(s, cnorm, cosine);
}

/*
 * kmg_chain4's steps over q4 float4 of a centroid, its row already in
 * double (xd: 4 q4 values, 16-byte aligned, in shared memory, where threads
 * reading one row share its conversions): the same steps in the same
 * order, so the same bits; s runs on across calls (kmg_exact_finish after
 * the last).  The centroid's loads of the next 4 x 16 bytes are in flight
 * while the current ones are summed.
 */
__device__ __forceinline__ void
kmg_chain4_xd(double &s, const double *xd, const float4 *c4, int q4, int cosine)
{
	float4		ca[4],
				cb[4];

	kmg_load4_ahead(ca, c4, 0, q4);
	for (int q0 = 0; q0 < q4; q0 += 4)
	{
		kmg_load4_ahead(cb, c4, q0 + 4, q4);
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (q0 + u < q4)
			{
				const double2 x01 = *reinterpret_cast<const double2 *>(xd + 4 * (q0 + u)),
							x23 = *reinterpret_cast<const double2 *>(xd + 4 * (q0 + u) + 2);

				kmg_exact_step_xd(s, x01.x, ca[u].x, cosine);
				kmg_exact_step_xd(s, x01.y, ca[u].y, cosine);
				kmg_exact_step_xd(s, x23.x, ca[u].z, cosine);
				kmg_exact_step_xd(s, x23.y, ca[u].w, cosine);
			}
#pragma unroll
		for (int u = 0; u < 4; u++)
			ca[u] = cb[u];
	}
}

/* ---- cp.async ---- */

/*
 * 16 bytes global -> shared without passing through registers (cp.async, L2
 * only): the copies cannot be sunk to their first use as plain loads can,
 * so a batch of them is really in flight together.  kmg_cp16_wait(n): wait
 * until at most n committed groups of this thread are still in flight (the
 * data is then visible to this thread; others need a barrier).
 */
__device__ __forceinline__ void
kmg_cp16(void *smem, const void *gmem)
{
	const unsigned s = (unsigned) __cvta_generic_to_shared(smem);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"::"r"(s), "l"(gmem):"memory");
}

__device__ __forceinline__ void
kmg_cp16_commit()
{
	asm volatile("cp.async.commit_group;\n"::);
}

template <int N>
__device__ __forceinline__ void
kmg_cp16_wait()
{
	asm volatile("cp.async.wait_group %0;\n"::"n"(N):"memory");
}

/*
 * kmg_cp16 that copies src_bytes (16 or 0) and fills the rest of the 16
 * bytes with zeros: rows past the end of a tile land as zeros, with no
 * branch around the copy (gmem must still be a valid address).  _at: to a
 * shared-window address (kernels that keep their stages' addresses as
 * 32-bit offsets).
 */
__device__ __forceinline__ void
kmg_cp16_zfill_at(unsigned smem, const void *gmem, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
				 ::"r"(smem), "l"(gmem), "r"(src_bytes):"memory");
}

/* The same at a generic pointer into shared memory. */
__device__ __forceinline__ void
kmg_cp16_zfill(void *smem, const void *gmem, int src_bytes)
{
	kmg_cp16_zfill_at((unsigned) __cvta_generic_to_shared(smem), gmem, src_bytes);
}

/* 4 bytes global -> shared (cp.async through L1), in the same groups as kmg_cp16's */
__device__ __forceinline__ void
kmg_cp4_at(unsigned smem, const void *gmem)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"::"r"(smem), "l"(gmem):"memory");
}

/*
 * bytes (a multiple of 16) from gmem (16-byte aligned) on their way into L2,
 * with no destination and nothing to wait for (sm_90's bulk prefetch; a
 * no-op on older devices): later copies or loads of them find them there.
 */
__device__ __forceinline__ void
kmg_prefetch_l2(const void *gmem, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n"::"l"(gmem), "r"(bytes):"memory");
#endif
}

/*
 * Bulk copies global -> shared by the copy engine, one thread issuing a
 * whole slice or tile (a block's 16-byte cp.async, each thread's operands
 * held until the copy reads them, stalls the issuing warps), counted on a
 * shared-memory barrier (mbarrier) whose readers wait for the phase of
 * their use (0 for its first use, then 1, 0, ...).  Shared-window
 * addresses (kmg_smem_addr).  kmg_mbar_init: one thread, then a block
 * barrier before any other thread waits; kmg_mbar_expect arms the phase
 * for the bytes the copies will bring (with its one arrival), then
 * kmg_bulk_copy (both ends 16-byte aligned, a multiple of 16 bytes).
 * kmg_fence_proxy_async: a thread's ordinary accesses to shared memory,
 * ordered before later bulk copies or tensor-core reads of it (then a
 * block barrier).  sm_90 and later: on older devices these trap, and the
 * dispatch does not plan their kernels there.  Used by assign/screen.cu
 * and assign/bytes.cu.
 */
__device__ __forceinline__ unsigned
kmg_smem_addr(const void *p)
{
	return (unsigned) __cvta_generic_to_shared(p);
}

__device__ __forceinline__ void
kmg_mbar_init(unsigned mb)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
				 "fence.mbarrier_init.release.cluster;\n"
				 "fence.proxy.async.shared::cta;\n"::"r"(mb):"memory");
#else
	__trap();
#endif
}

__device__ __forceinline__ void
kmg_mbar_expect(unsigned mb, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"::"r"(mb), "r"(bytes):"memory");
#else
	__trap();
#endif
}

__device__ __forceinline__ void
kmg_bulk_copy(unsigned dst, const void *src, unsigned bytes, unsigned mb)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
				 ::"r"(dst), "l"(src), "r"(bytes), "r"(mb):"memory");
#else
	__trap();
#endif
}

__device__ __forceinline__ void
kmg_mbar_wait(unsigned mb, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
				 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
				 "@!p bra WAIT_%=;\n}\n"::"r"(mb), "r"(parity):"memory");
#else
	__trap();
#endif
}

__device__ __forceinline__ void
kmg_fence_proxy_async()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("fence.proxy.async.shared::cta;\n":::"memory");
#endif
}

/* kmg_cp16_wait for a count known only at run time (n = 1, 2, or 3 and more). */
__device__ __forceinline__ void
kmg_cp16_wait_n(int n)
{
	if (n <= 1)
		kmg_cp16_wait<1>();
	else if (n == 2)
		kmg_cp16_wait<2>();
	else
		kmg_cp16_wait<3>();
}

/* ---- tensor-core fragments ---- */

/*
 * Four 8 x 8 matrices of 16-bit values at shared address a (lane l gives
 * row l % 8 of matrix l / 8); also four 8 x 16 byte matrices, as the
 * integer mma's fragments take them.
 */
__device__ __forceinline__ void
kmg_ldsm4(uint32_t *r, unsigned a)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
				 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* c += a b: m16n8k32, unsigned bytes, int32 accumulators (exact) */
__device__ __forceinline__ void
kmg_mma_u8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
				 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a b: m16n8k32, signed bytes, int32 accumulators (exact) */
__device__ __forceinline__ void
kmg_mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
				 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---- argmin: the smaller cost, ties to the lower index ---- */

/*
 * (c, j) comes before (c2, j2): the smaller cost, and on equal costs the
 * lower index.  Every argmin of the engine (labels, exact settling, the
 * k-means++ keys with their rows) uses this order, so the answer does not
 * depend on which thread or block saw a candidate first.  A macro, so that
 * in an if it stays the plain short-circuit condition; as a function
 * returning bool it cost kmg_direct_kernel<12,4> 28 bytes of spills and
 * kmg_exact_kernel<8> 22 registers (ptxas -v, sm_90).
 */
#define KMG_BEFORE(c, j, c2, j2) ((c) < (c2) || ((c) == (c2) && (j) < (j2)))

/*
 * KMG_BEFORE for (key, row) pairs of k-means++, as the function the unit
 * was tuned with: its operands are often entries of the thread's candidate
 * list in local memory, which a function reads once where the macro names
 * them twice.  With the macro, kmg_pp_unit_kernel<24> grew by 6.5 KB of
 * code and <8> changed its spills (sm_90, against the flat layout's
 * seed.cu); with the function, the unit keeps its spills and its code size
 * within about 1 %.
 */
__device__ __forceinline__ bool
kmg_before(double key, int row, double key2, int row2)
{
	return KMG_BEFORE(key, row, key2, row2);
}

/*
 * The least (c, j) over W lanes of a warp (the lanes of mask, W = 32 or a
 * power-of-two group of them), in KMG_BEFORE's order: a butterfly, so every
 * lane of the group ends with the same answer.
 */
template <int W = 32>
__device__ __forceinline__ void
kmg_warp_argmin(double &c, int &j, unsigned mask = 0xffffffffu)
{
#pragma unroll
	for (int o = W / 2; o > 0; o >>= 1)
	{
		const double oc = __shfl_xor_sync(mask, c, o);
		const int	oj = __shfl_xor_sync(mask, j, o);

		if (KMG_BEFORE(oc, oj, c, j))
		{
			c = oc;
			j = oj;
		}
	}
}

/*
 * The least of n pairs (cs[i * stride], js[i * stride]) in KMG_BEFORE's
 * order, by one thread: the per-warp answers a block left in shared memory
 * (stride: the rows each warp answered for), or a row's per-chunk answers.
 */
__device__ __forceinline__ void
kmg_argmin_strided(const double *cs, const int *js, int n, int stride, double &c, int &j)
{
	c = cs[0];
	j = js[0];
	for (int i = 1; i < n; i++)
		if (KMG_BEFORE(cs[i * stride], js[i * stride], c, j))
		{
			c = cs[i * stride];
			j = js[i * stride];
		}
}

/* ---- order-free sums ---- */

/*
 * *p += v in global memory as a reduction: no value comes back (atomicAdd
 * with its result unused compiled to an atomic that returns, ATOMG, in the
 * narrow pass; this is REDG).
 */
__device__ __forceinline__ void
kmg_red_add(unsigned long long *p, unsigned long long v)
{
	asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;"::"l"(__cvta_generic_to_global(p)), "l"(v):"memory");
}

/*
 * acc (two words, low first) += the 128-bit two's-complement integer (lo,
 * hi), with two integer atomics: the carry out of the low word is the one
 * this addition makes, whatever came before it, so the total is exact and
 * does not depend on the order of the additions.
 */
__device__ __forceinline__ void
kmg_i128_atomic(unsigned long long *acc, unsigned long long lo, unsigned long long hi)
{
	const unsigned long long old = atomicAdd(&acc[0], lo);

	atomicAdd(&acc[1], hi + (old + lo < lo ? 1ull : 0ull));
}

/*
 * The 128-bit two's-complement integer (lo, hi) times 2^e0, rounded once to
 * the nearest double, ties to even: what the CPU engine's exact sums give
 * (km_xlevels_round) for the same exact value.  The result must be a
 * normal double (the narrow pass's sums of floats are: nonzero ones are at
 * least 2^-149).
 */
__device__ __forceinline__ double
kmg_i128_round(unsigned long long lo, unsigned long long hi, int e0)
{
	const int	neg = (long long) hi < 0;
	unsigned __int128 v = ((unsigned __int128) hi << 64) | lo;
	unsigned long long q;
	int			sh = 0;

	if (neg)
		v = ~v + 1;
	if ((v >> 53) == 0)
		q = (unsigned long long) v;	/* exact */
	else
	{
		const unsigned long long top = (unsigned long long) (v >> 64);
		const int	bits = top != 0 ? 128 - __clzll((long long) top) : 64 - __clzll((long long) (unsigned long long) v);
		unsigned __int128 rest,
					half;

		sh = bits - 53;
		q = (unsigned long long) (v >> sh);
		rest = v - ((unsigned __int128) q << sh);
		half = (unsigned __int128) 1 << (sh - 1);
		if (rest > half || (rest == half && (q & 1ull)))
			q++;				/* 2^53 at most: still exact as a double */
	}

	const double r = ldexp((double) q, sh + e0);

	return neg ? -r : r;
}

/*
 * A double as a 128-bit two's-complement fixed-point integer (its magnitude
 * times 2^shift, truncated, then the sign), added with two integer atomics
 * (the carry of the low word into the high one is exact whatever the
 * order), so sums of such terms do not depend on the order of the
 * additions.  |v| 2^shift must stay below 2^124.  (The magnitude first:
 * splitting a small negative t as h 2^64 + l would need 64 bits of l.)
 */
__device__ __forceinline__ void
kmg_fix_atomic(unsigned long long *acc, double v, int shift)
{
	if (v == 0.0)
		return;

	const double t = floor(ldexp(fabs(v), shift));
	const double h = floor(ldexp(t, -64));
	const double l = t - ldexp(h, 64);	/* exact: t's low bits, in [0, 2^64) */
	unsigned long long lo = (unsigned long long) l;
	unsigned long long hi = (unsigned long long) h;

	if (v < 0.0)
	{
		lo = ~lo + 1ull;
		hi = ~hi + (lo == 0ull ? 1ull : 0ull);
	}
	kmg_i128_atomic(acc, lo, hi);
}

/* The double of such a sum (two roundings, the same bits every time). */
__device__ __forceinline__ double
kmg_fix_decode(unsigned long long lo, unsigned long long hi, int shift)
{
	int			neg = (long long) hi < 0;
	double		v;

	if (neg)
	{
		/* two's complement: the magnitude */
		lo = ~lo + 1ull;
		hi = ~hi + (lo == 0ull ? 1ull : 0ull);
	}
	v = ldexp((double) hi, 64) + (double) lo;
	v = ldexp(v, -shift);
	return neg ? -v : v;
}

/* 128-bit integer (km_fix) sums across a warp: integer adds, any order. */
__device__ __forceinline__ km_fix
kmg_fix_warp_sum(km_fix f)
{
	for (int o = 16; o > 0; o >>= 1)
	{
		km_fix		g;

		g.hi = __shfl_xor_sync(0xffffffffu, f.hi, o);
		g.lo = __shfl_xor_sync(0xffffffffu, f.lo, o);
		km_fix_add(&f, g);
	}
	return f;
}

/* Sum of an int over the block into *out with one atomic per warp (order-free). */
__device__ __forceinline__ void
kmg_block_add_int(int v, int *out)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if ((threadIdx.x & 31) == 0 && v != 0)
		atomicAdd(out, v);
}

/*
 * A fused pass's block end: its moved and exactly settled rows into the
 * control block's counters (kmg_block_add_int: order-free), and its
 * estimate summed in a fixed order, the warps' sums in warp order through
 * red (a double a warp, shared memory); every thread gets the block's sum.
 */
__device__ __forceinline__ double
kmg_block_counts(double est, int moved, int nexact, int *moved_out, int *exact_out, double *red)
{
	for (int o = 16; o > 0; o >>= 1)
		est += __shfl_xor_sync(0xffffffffu, est, o);
	kmg_block_add_int(moved, moved_out);
	kmg_block_add_int(nexact, exact_out);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = est;
	__syncthreads();
	est = red[0];
	for (int w = 1; w < (int) (blockDim.x >> 5); w++)
		est += red[w];
	return est;
}

/* ---- distances as bounds ---- */

/*
 * sqrt(c) rounded to a float above (ru) or below (rd) the true distance,
 * for a double c within 2^-32 (relatively) of the true squared distance
 * (an exact cost km_exact_cost computes, or a sum of up to 2^20 terms that
 * are exact in double): 2^-30 of room covers that and sqrt's own rounding.
 * The bounds of assign/bounds.cu.
 */
__device__ __forceinline__ float
kmg_sqrt_ru(double c)
{
	return __double2float_ru(sqrt(c) * (1.0 + 0x1p-30));
}

__device__ __forceinline__ float
kmg_sqrt_rd(double c)
{
	return __double2float_rd(sqrt(c) * (1.0 - 0x1p-30));
}

/* ---- kernels that overlap the one before them ---- */

/*
 * Programmatic dependent launch (sm_90): a kernel launched by
 * kmg_launch_overlapped may start while the kernel before it in the stream
 * (or graph) still runs, as soon as that one's blocks have all called
 * kmg_grid_release (or ended); it must call kmg_grid_wait before it reads or
 * writes anything that kernel, or one before it, writes or reads: the wait
 * returns once the earlier kernel has ended and its writes are visible.
 * What comes before the wait is the launch's latency hidden, plus any work
 * on data nothing in flight touches.  A kernel launched plainly, or built
 * for an older device, passes through both.
 */
__device__ __forceinline__ void
kmg_grid_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;\n"::: "memory");
#endif
}

__device__ __forceinline__ void
kmg_grid_release()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;\n"::: "memory");
#endif
}

/*
 * Launch kernel(args) on grid x block with smem bytes of dynamic shared
 * memory, overlapping the kernel before it (see above) where overlap is
 * nonzero (a device of compute capability 9 or above), plainly otherwise.
 */
template <typename... P, typename... A>
static cudaError_t
kmg_launch_overlapped(int overlap, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
					  cudaStream_t stream, A... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];

	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = stream;
	cfg.attrs = at;
	cfg.numAttrs = overlap ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, kernel, args...);
}

#endif							/* KMG_DEVICE_CUH */
