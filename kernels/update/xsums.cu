/*
 * xsums.cu
 *	  Exact per-cluster sums for the split fits (driver/split.cu): the rows
 *	  of one step of work, grouped by label (sort.cu), are summed piece by
 *	  piece in the levels of km_xsum.h and added into the device's
 *	  accumulators, where no addition rounds.  The sums of any split of the
 *	  rows, over steps and devices, therefore add up to the same exact
 *	  values, which are rounded once, as the CPU engine rounds them.  Also:
 *	  the moved count of a step, the final pass's order-free inertia words,
 *	  the devices' sums added on one of them, and the centroids' step there
 *	  (km_step.h's arithmetic, on the device).
 *
 * Plain C reference: the CPU engine's sums (km_xlevels_add over the rows,
 * src/engine/cpu_assign.c) and its order-free inertia (km_fixsum.h, as
 * sums.cu); bench_engine.cu's split cases compare whole fits with the CPU
 * engine bit for bit.
 *
 * Why it is fast enough.  One block per piece of at most KMG_PIECE rows of
 * one cluster (the pieces of sort.cu; a smaller grid's blocks take every
 * gridDim-th piece), the piece's rows and weights staged
 * in shared memory, threads over 16-byte column chunks (groups of threads
 * over the rows when d is small), eight rows' loads in flight as cp.async
 * copies, as sums.cu reads them; the groups' sums added in shared memory,
 * then each level of a piece added to the accumulator with one atomic per
 * column.
 * Exact level sums make the atomics' order irrelevant.  The cost is a
 * gathered read of the rows plus two additions per value and level, a few
 * percent of the filter GEMM at large k.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "km_step.h"
#include "update/update.cuh"

#define KMG_XS_NT 128

/* What the accumulators of kmg_xsum_acc take, carved by kmg_xsum_acc_carve. */
size_t
kmg_xsum_acc_bytes(int k, int d, int nlx, int nlw)
{
	return sizeof(double) * ((size_t) nlx * k * d + (size_t) nlw * k + 1) +
		sizeof(unsigned long long) * ((size_t) k * 4 + 1);
}

/* Lay the accumulators out in base (device or pinned host memory alike). */
void
kmg_xsum_acc_carve(kmg_xsum_acc *acc, void *base, int k, int d, int nlx, int nlw)
{
	double	   *p = (double *) base;
	unsigned long long *q;

	acc->xs = p;
	p += (size_t) nlx * k * d;
	acc->ws = p;
	p += (size_t) nlw * k;
	acc->cost = p;
	p += 1;
	q = (unsigned long long *) p;
	acc->counts = q;
	q += k;
	acc->fix = q;
	q += (size_t) 2 * k;
	acc->sat = q;
	q += k;
	acc->moved = q;
}

/*
 * An iteration's level sums of w x over a piece's m rows (srow, weights
 * sw), NL levels: as sums.cu reads rows, 16 bytes a load, eight rows' loads
 * in flight as cp.async copies into each thread's own slots of sx; groups
 * of tpg threads over the row's float4 columns, G groups over the rows;
 * the groups added in shared memory (exact: levels), then one atomic per
 * column and level.
 */
template <int NL>
__device__ __forceinline__ void
kmg_xsums_rows4(const kmg_args &a, const kmg_xsum_acc &acc, int j, int m, const int *srow,
				const double *sw, float4 (*sx)[KMG_XS_NT], double *sacc)
{
	const int	tid = threadIdx.x;
	const int	dp = a.dp,
				d = a.d;
	const int	q4 = dp / 4;
	const int	tpg = q4 < KMG_XS_NT ? q4 : KMG_XS_NT;
	const int	G = KMG_XS_NT / tpg;
	const int	gi = tid / tpg;
	const int	ti = tid - gi * tpg;

	for (int q0 = 0; q0 < q4; q0 += tpg)
	{
		const int	q = q0 + ti;
		double		s[4][NL];

#pragma unroll
		for (int c = 0; c < 4; c++)
#pragma unroll
			for (int l = 0; l < NL; l++)
				s[c][l] = 0.0;
		if (gi < G && q < q4)
			for (int p = gi; p < m; p += 8 * G)
			{
#pragma unroll
				for (int u = 0; u < 8; u++)
					if (p + u * G < m)
						kmg_cp16(&sx[u][tid], a.X + (size_t) srow[p + u * G] * dp + 4 * q);
				kmg_cp16_commit();
				kmg_cp16_wait<0>();
#pragma unroll
				for (int u = 0; u < 8; u++)
				{
					if (p + u * G >= m)
						break;

					const float4 x = sx[u][tid];
					const double w = sw[p + u * G];
					double		v[4];

					v[0] = __dmul_rn(w, (double) x.x);	/* exact in double */
					v[1] = __dmul_rn(w, (double) x.y);
					v[2] = __dmul_rn(w, (double) x.z);
					v[3] = __dmul_rn(w, (double) x.w);
#pragma unroll
					for (int c = 0; c < 4; c++)
					{
#pragma unroll
						for (int l = 1; l < NL; l++)
						{
							const double h = __dsub_rn(__dadd_rn(v[c], acc.xlev.magic[l]),
													   acc.xlev.magic[l]);

							s[c][l - 1] = __dadd_rn(s[c][l - 1], h);
							v[c] = __dsub_rn(v[c], h);
						}
						s[c][NL - 1] = __dadd_rn(s[c][NL - 1], v[c]);
					}
				}
			}
		if (G > 1)
		{
			__syncthreads();	/* sacc's readers of the last column block are done */
			if (gi < G)
#pragma unroll
				for (int c = 0; c < 4; c++)
#pragma unroll
					for (int l = 0; l < NL; l++)
						sacc[((gi * tpg + ti) * 4 + c) * NL + l] = s[c][l];
			__syncthreads();
			if (gi == 0)
				for (int g = 1; g < G; g++)
#pragma unroll
					for (int c = 0; c < 4; c++)
#pragma unroll
						for (int l = 0; l < NL; l++)
							s[c][l] = __dadd_rn(s[c][l], sacc[((g * tpg + ti) * 4 + c) * NL + l]);
		}
		if (gi == 0 && q < q4)
#pragma unroll
			for (int c = 0; c < 4; c++)
				if (4 * q + c < d)
#pragma unroll
					for (int l = 0; l < NL; l++)
						if (s[c][l] != 0.0)
							atomicAdd(&acc.xs[((size_t) l * a.k + j) * d + 4 * q + c], s[c][l]);
	}
}

/*
 * One block per piece.  Iteration (KMG_XSUMS_COST, _ESTIMATE): per level,
 * the sums of w x over the piece's rows and of w; the count; sum w * cost
 * for progress, from the exact costs or from the filter's estimate (fbest
 * + |x|^2, as sums.cu takes it).  KMG_XSUMS_MOVED: the same without the
 * cost, and a piece of key k + j (running.cu's rows that left cluster j)
 * is taken away from cluster j: -w x, -w and -count, cut into the same
 * levels (the cut of -t is the negated cut of t), so that the accumulators
 * hold exactly what the rows now in each cluster add up to.  Final pass:
 * the count and the order-free words of sum w * cost, as sums.cu's pieces
 * make them (km_fix_term of w * cost at a.ishift), added with carries; a
 * piece that met a term past the bound marks its cluster.
 */
static __device__ __forceinline__ void
kmg_xsums_piece(const kmg_args &a, const kmg_xsum_acc &acc, int mode, int piece)
{
	const int	final = mode == KMG_XSUMS_FINAL;
	__shared__ int srow[KMG_PIECE];
	__shared__ double sw[KMG_PIECE];
	__shared__ double sred[KMG_XS_NT / 32][KM_XLEV_MAX + 1];
	__shared__ km_fix sfix[KMG_XS_NT / 32];
	__shared__ float4 sx[8][KMG_XS_NT];	/* each thread's staged loads */
	__shared__ double sacc[KMG_XS_NT * 4 * 2];	/* the row groups' level sums */
	const int	tid = threadIdx.x;
	const int4	t = a.ptab[piece];
	const int	leave = t.x >= a.k;	/* a piece of rows leaving cluster t.x - k */
	const int	j = leave ? t.x - a.k : t.x,
				lo = t.y,
				m = t.z - t.y;
	const int	d = a.d;
	const int	nlx = acc.xlev.n,
				nlw = acc.wlev.n;
	double		wl[KM_XLEV_MAX];
	double		ec = 0.0;
	km_fix		ef = {0, 0};
	km_fixscale fs;

	fs.shift = a.ishift;
	for (int l = 0; l < KM_XLEV_MAX; l++)
		wl[l] = 0.0;
	for (int p = tid; p < m; p += KMG_XS_NT)
	{
		const int	r = a.svals[lo + p];
		const double w0 = a.W != NULL ? (double) a.W[r] : 1.0;
		const double w = leave ? -w0 : w0;

		srow[p] = r;
		sw[p] = w;
		if (final)
			km_fix_add(&ef, km_fix_term(w * a.cost[r], fs));
		else
		{
			double		v = w;

			if (mode == KMG_XSUMS_COST)
				ec += w * a.cost[r];
			else if (mode == KMG_XSUMS_ESTIMATE)
				ec += w * kmg_row_estimate(a, r);
			for (int l = 1; l < nlw; l++)
			{
				const double h = (v + acc.wlev.magic[l]) - acc.wlev.magic[l];

				wl[l - 1] += h;
				v -= h;
			}
			wl[nlw - 1] += v;
		}
	}
	__syncthreads();

	if (!final && nlx <= 2)
	{
		if (nlx == 1)
			kmg_xsums_rows4<1>(a, acc, j, m, srow, sw, sx, sacc);
		else
			kmg_xsums_rows4<2>(a, acc, j, m, srow, sw, sx, sacc);
	}
	else if (!final)
	{
		/* more levels (data spanning many orders of magnitude): scalar loads */
		/* groups of tpg threads over the columns, G groups over the rows */
		const int	tpg = d < KMG_XS_NT ? d : KMG_XS_NT;
		const int	G = KMG_XS_NT / tpg;
		const int	gi = tid / tpg;
		const int	ti = tid - gi * tpg;

		if (gi < G)
			for (int i = ti; i < d; i += tpg)
			{
				double		s[KM_XLEV_MAX];

				for (int l = 0; l < KM_XLEV_MAX; l++)
					s[l] = 0.0;
				for (int p0 = gi; p0 < m; p0 += 8 * G)
				{
					float		x[8];

					/* the eight loads first, then their adds */
#pragma unroll
					for (int u = 0; u < 8; u++)
						x[u] = p0 + u * G < m ? a.X[(size_t) srow[p0 + u * G] * a.dp + i] : 0.0f;
#pragma unroll
					for (int u = 0; u < 8; u++)
					{
						if (p0 + u * G >= m)
							break;

						/* w x is exact in double; cut it into the levels */
						double		v = __dmul_rn(sw[p0 + u * G], (double) x[u]);

						for (int l = 1; l < nlx; l++)
						{
							const double h = __dsub_rn(__dadd_rn(v, acc.xlev.magic[l]),
													   acc.xlev.magic[l]);

							s[l - 1] = __dadd_rn(s[l - 1], h);
							v = __dsub_rn(v, h);
						}
						s[nlx - 1] = __dadd_rn(s[nlx - 1], v);
					}
				}
				for (int l = 0; l < nlx; l++)
					if (s[l] != 0.0)
						atomicAdd(&acc.xs[((size_t) l * a.k + j) * d + i], s[l]);
			}
	}

	/* the per-row columns: warp sums, then one thread per block */
	for (int o = 16; o > 0; o >>= 1)
	{
		ec += __shfl_xor_sync(0xffffffffu, ec, o);
		for (int l = 0; l < KM_XLEV_MAX; l++)
			wl[l] += __shfl_xor_sync(0xffffffffu, wl[l], o);
	}
	if (final)
		ef = kmg_fix_warp_sum(ef);
	if ((tid & 31) == 0)
	{
		for (int l = 0; l < KM_XLEV_MAX; l++)
			sred[tid >> 5][l] = wl[l];
		sred[tid >> 5][KM_XLEV_MAX] = ec;
		sfix[tid >> 5] = ef;
	}
	__syncthreads();
	if (tid != 0)
		return;
	for (int wv = 1; wv < KMG_XS_NT / 32; wv++)
	{
		for (int l = 0; l < KM_XLEV_MAX; l++)
			sred[0][l] += sred[wv][l];
		sred[0][KM_XLEV_MAX] += sred[wv][KM_XLEV_MAX];
		km_fix_add(&sfix[0], sfix[wv]);
	}
	atomicAdd(&acc.counts[j], leave ? (unsigned long long) -(long long) m : (unsigned long long) m);
	if (final)
	{
		const km_fix f = sfix[0];

		if (f.hi >= KM_FIX_SATURATED)
			atomicOr(&acc.sat[j], 1ull);
		else
		{
			/* 128-bit add: the low word's carry goes into the high word */
			const unsigned long long old = atomicAdd(&acc.fix[2 * j], (unsigned long long) f.lo);
			const unsigned long long carry = old + (unsigned long long) f.lo < old ? 1ull : 0ull;

			if (f.hi + carry != 0)
				atomicAdd(&acc.fix[2 * j + 1], (unsigned long long) f.hi + carry);
		}
		return;
	}
	for (int l = 0; l < nlw; l++)
		if (sred[0][l] != 0.0)
			atomicAdd(&acc.ws[(size_t) l * a.k + j], sred[0][l]);
	if (mode != KMG_XSUMS_MOVED)
		atomicAdd(acc.cost, sred[0][KM_XLEV_MAX]);
}

/*
 * The pieces a block takes: its own, and every gridDim.x-th after it (a
 * grid smaller than the pieces: running.cu's moved rows, whose pieces the
 * host cannot count).
 */
__global__ void __launch_bounds__(KMG_XS_NT)
kmg_xsums_kernel(kmg_args a, kmg_xsum_acc acc, int mode)
{
	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int	np = *(volatile int *) a.npieces;

	for (int p = blockIdx.x; p < np; p += gridDim.x)
	{
		kmg_xsums_piece(a, acc, mode, p);
		__syncthreads();		/* the shared arrays serve the next piece */
	}
}

/*
 * Exact sums of the labelled rows of a (a.labels, sorted by kmg_sort_labels
 * with the iota of a.n rows) into acc: the pieces, then the sums kernel
 * (KMG_XSUMS_FINAL: the final pass's counts and inertia words instead).
 * a.cost must hold every row's exact cost (kmg_row_costs), but for
 * KMG_XSUMS_ESTIMATE (a.fbest and a.xnorm of the filter path).
 */
cudaError_t
kmg_xsums(const kmg_args *a, const kmg_xsum_acc *acc, int mode, cudaStream_t stream)
{
	cudaError_t e;

	if (a->n == 0)
		return cudaSuccess;
	if ((e = kmg_label_pieces(a, stream)) != cudaSuccess)
		return e;
	kmg_xsums_kernel<<<a->maxpieces, KMG_XS_NT, 0, stream>>>(*a, *acc, mode);
	return cudaGetLastError();
}

/*
 * The same kernel over pieces already cut (a.ptab, *a.npieces of them,
 * keys below 2k), grid blocks each taking every grid-th piece: running.cu's
 * moved rows.
 */
cudaError_t
kmg_xsums_pieces(const kmg_args *a, const kmg_xsum_acc *acc, int mode, int grid,
				 cudaStream_t stream)
{
	kmg_xsums_kernel<<<grid, KMG_XS_NT, 0, stream>>>(*a, *acc, mode);
	return cudaGetLastError();
}

/*
 * The step's fresh labels against the ones kept for its rows: moved rows
 * counted (an integer sum, order-free), and the fresh labels kept.
 */
__global__ void __launch_bounds__(256)
kmg_moved_kernel(const int32_t *__restrict__ fresh, int32_t *__restrict__ kept, int64_t n,
				 unsigned long long *moved)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	int			cnt = 0;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
	{
		const int32_t f = fresh[i];

		cnt += f != kept[i];
		kept[i] = f;
	}
	for (int o = 16; o > 0; o >>= 1)
		cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
	if ((threadIdx.x & 31) == 0 && cnt != 0)
		atomicAdd(moved, (unsigned long long) cnt);
}

cudaError_t
kmg_moved(const int32_t *fresh, int32_t *kept, int64_t n, unsigned long long *moved,
		  cudaStream_t stream)
{
	int64_t		blocks = (n + 255) / 256;

	if (n == 0)
		return cudaSuccess;
	blocks = kmg_stride_grid(blocks, 8);
	kmg_moved_kernel<<<(unsigned) blocks, 256, 0, stream>>>(fresh, kept, n, moved);
	return cudaGetLastError();
}

/*
 * Another device's accumulators (a copy, in peer) added into acc: the level
 * sums, the cost and the counts of an iteration (the final pass's words are
 * added on the host, with their carries).  Exact: the levels leave room.
 */
__global__ void
kmg_xsum_combine_kernel(kmg_xsum_acc acc, const double *__restrict__ peer, int k, int d)
{
	const size_t nd = (size_t) acc.xlev.n * k * d + (size_t) acc.wlev.n * k + 1;
	const unsigned long long *pq = (const unsigned long long *) (peer + nd);
	const size_t stride = (size_t) gridDim.x * blockDim.x;

	for (size_t c = (size_t) blockIdx.x * blockDim.x + threadIdx.x; c < nd + k + 1; c += stride)
	{
		if (c < nd)
			acc.xs[c] += peer[c];	/* xs, ws and cost lie in a row */
		else if (c < nd + k)
			acc.counts[c - nd] += pq[c - nd];
		else
			*acc.moved += pq[(size_t) 4 * k];
	}
}

cudaError_t
kmg_xsum_combine(const kmg_xsum_acc *acc, const void *peer, int k, int d, cudaStream_t stream)
{
	const size_t n = (size_t) acc->xlev.n * k * d + (size_t) acc->wlev.n * k + k + 2;
	int64_t		blocks = (int64_t) ((n + 255) / 256);

	blocks = kmg_stride_grid(blocks, 8);
	kmg_xsum_combine_kernel<<<(unsigned) blocks, 256, 0, stream>>>(*acc, (const double *) peer, k, d);
	return cudaGetLastError();
}

/*
 * The centroids' step on the device, one thread per cluster, as
 * km_cpu_update_centroids does on the host: each sum rounded once from its
 * levels (at most two: one IEEE addition), then km_centroid_mean into
 * a.C (its level-0 row is the scratch).  Only for iterations without an
 * empty cluster (the host re-seeds those) and with at most two levels.
 */
__global__ void
kmg_xstep_kernel(kmg_args a, kmg_xsum_acc acc)
{
	const int	j = blockIdx.x * blockDim.x + threadIdx.x;
	const int	d = a.d;
	const size_t kd = (size_t) a.k * d;

	if (j >= a.k)
		return;

	double	   *s = acc.xs + (size_t) j * d;
	const double w = acc.wlev.n == 1 ? acc.ws[j] : __dadd_rn(acc.ws[j], acc.ws[a.k + j]);

	if (!(w > 0.0))
		return;
	if (acc.xlev.n == 2)
		for (int i = 0; i < d; i++)
			s[i] = __dadd_rn(s[i], s[kd + i]);
	km_centroid_mean(s, w, d, a.cosine, a.C + (size_t) j * a.dp);
}

cudaError_t
kmg_xstep(const kmg_args *a, const kmg_xsum_acc *acc, cudaStream_t stream)
{
	if (acc->xlev.n > 2 || acc->wlev.n > 2)
		return cudaErrorInvalidValue;	/* the host's step takes these */
	kmg_xstep_kernel<<<(a->k + 127) / 128, 128, 0, stream>>>(*a, *acc);
	return cudaGetLastError();
}
