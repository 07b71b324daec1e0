/*
 * sums.cu
 *	  Per-cluster sums of the rows grouped by label (sort.cu): sum of w x,
 *	  of w, the count, and the inertia column (the filter's estimate in an
 *	  iteration, the exact costs in the final pass, order-free there).
 *
 * Plain C reference: the sums of km_ref_lloyd (kernels/bench/ref_kmeans.c)
 * and the CPU engine's order-free inertia (km_fixsum.h); bench_kernels.cu
 * checks both.
 *
 * Why it is fast.  Each cluster's rows are cut into pieces of KMG_PIECE
 * rows, one block per piece (so a few big clusters still fill the GPU),
 * summed in row order with eight rows' loads in flight (cp.async), and the
 * pieces are added in order (in an iteration by each cluster's last piece
 * to finish, otherwise by kmg_combine_kernel); the cost is one gathered
 * read of X plus the sort, a few percent of the GEMM for the large-k shapes.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "update/update.cuh"

#define KMG_SEG_NT 128

/*
 * One block per piece: sum of w x over its rows (when with_sums), sum of w,
 * count, and the last column: the filter's inertia estimate (iteration) or
 * sum w * exact cost (final pass; order-free km_fixsum.h words when a.ishift
 * is set, as the CPU engine sums it).  The piece's rows and weights are
 * staged in shared memory first, so the gathered row loads depend on
 * nothing but shared memory; G groups of threads take every G-th row, eight
 * rows' loads in flight at a time, and the groups are added in order.  The
 * three extra columns are spread over all threads and reduced in a fixed
 * tree (run 2 had one thread walk them row by row: 49 to 256 dependent
 * gathered loads per piece, most of the segment's time).
 */
__global__ void __launch_bounds__(KMG_SEG_NT)
kmg_piece_sums_kernel(kmg_args a, int mode, int with_sums, int fold)
{
	__shared__ double sacc[KMG_SEG_NT * 4];
	__shared__ int srow[KMG_PIECE];
	__shared__ double sred[3][KMG_SEG_NT / 32];
	__shared__ km_fix sfix[KMG_SEG_NT / 32];
	__shared__ float4 sx[8][KMG_SEG_NT];	/* each thread's staged loads */
	__shared__ double sdw[KMG_PIECE];	/* the weights, converted once */
	__shared__ int slast;
	const int	tid = threadIdx.x;
	const int	dp = a.dp;
	const int	q4 = dp / 4;
	const int	cw = KMG_CW(dp);
	const int	tpg = q4 < KMG_SEG_NT ? q4 : KMG_SEG_NT;
	const int	G = KMG_SEG_NT / tpg;
	const int	gi = tid / tpg;
	const int	ti = tid - gi * tpg;
	const int	fix = mode == KMG_MODE_LABELS && a.ishift != KM_FIX_UNSET;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if ((int) blockIdx.x >= *(volatile int *) a.npieces)
		return;

	const int4	t = a.ptab[blockIdx.x];
	const int	lo = t.y,
				m = t.z - t.y;	/* <= KMG_PIECE */
	double	   *out = a.ppart + (size_t) blockIdx.x * cw;
	double		ew = 0.0,
				ee = 0.0;
	int			en = 0;
	km_fix		ef = {0, 0};
	km_fixscale fs;

	fs.shift = a.ishift;
	for (int p = tid; p < m; p += KMG_SEG_NT)
	{
		const int	r = a.svals[lo + p];
		const float wf = a.W != NULL ? a.W[r] : 1.0f;
		const double w = (double) wf;

		srow[p] = r;
		sdw[p] = w;
		ew += w;
		en++;
		if (mode == KMG_MODE_ITER)
			ee += w * kmg_row_estimate(a, r);
		else if (fix)
			km_fix_add(&ef, km_fix_term(w * a.cost[r], fs));
		else
			ee += w * a.cost[r];
	}
	__syncthreads();

	if (with_sums && gi < G)
		for (int q = ti; q < q4; q += tpg)
		{
			double		s0 = 0.0,
						s1 = 0.0,
						s2 = 0.0,
						s3 = 0.0;
			int			p = gi;

			/* eight rows at a time: their loads overlap, the adds keep row order */
			for (; p < m; p += 8 * G)	/* the last batch may be short */
			{
				/*
				 * the eight loads as cp.async into this thread's own
				 * slots: as plain loads ptxas issued each just before its
				 * use, one 16-byte load in flight per thread (round 5's
				 * 82 us at 100000 x 256 x 1024, 3x the bandwidth floor)
				 */
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
					const double w = sdw[p + u * G];

					/* w * x + s in one rounding: the DFMA round 5's loop compiled to */
					s0 = __fma_rn(w, (double) x.x, s0);
					s1 = __fma_rn(w, (double) x.y, s1);
					s2 = __fma_rn(w, (double) x.z, s2);
					s3 = __fma_rn(w, (double) x.w, s3);
				}
			}
			if (G == 1)
			{
				out[4 * q] = s0;
				out[4 * q + 1] = s1;
				out[4 * q + 2] = s2;
				out[4 * q + 3] = s3;
			}
			else
			{
				sacc[(gi * tpg + ti) * 4] = s0;
				sacc[(gi * tpg + ti) * 4 + 1] = s1;
				sacc[(gi * tpg + ti) * 4 + 2] = s2;
				sacc[(gi * tpg + ti) * 4 + 3] = s3;
			}
		}

	/* the extra columns: a fixed tree over the threads */
	for (int o = 16; o > 0; o >>= 1)
	{
		ew += __shfl_xor_sync(0xffffffffu, ew, o);
		ee += __shfl_xor_sync(0xffffffffu, ee, o);
		en += __shfl_xor_sync(0xffffffffu, en, o);
	}
	if (fix)
		ef = kmg_fix_warp_sum(ef);
	if ((tid & 31) == 0)
	{
		sred[0][tid >> 5] = ew;
		sred[1][tid >> 5] = (double) en;
		sred[2][tid >> 5] = ee;
		sfix[tid >> 5] = ef;
	}
	__syncthreads();

	/* groups added in order */
	if (with_sums && G > 1)
		for (int c = tid; c < dp; c += KMG_SEG_NT)
		{
			const int	q = c >> 2,
						l = c & 3;
			double		s = sacc[q * 4 + l];

			for (int g = 1; g < G; g++)
				s += sacc[(g * tpg + q) * 4 + l];
			out[c] = s;
		}
	if (!with_sums)
		for (int c = tid; c < dp; c += KMG_SEG_NT)
			out[c] = 0.0;
	if (tid == 0)
	{
		double		w = sred[0][0],
					cnt = sred[1][0],
					e = sred[2][0];
		km_fix		f = sfix[0];

		for (int wv = 1; wv < KMG_SEG_NT / 32; wv++)
		{
			w += sred[0][wv];
			cnt += sred[1][wv];
			e += sred[2][wv];
			km_fix_add(&f, sfix[wv]);
		}
		out[dp] = w;
		out[dp + 1] = cnt;
		if (fix)
		{
			out[dp + 2] = __longlong_as_double((long long) f.lo);
			out[dp + 3] = __longlong_as_double((long long) f.hi);
		}
		else
		{
			out[dp + 2] = e;
			out[dp + 3] = 0.0;
		}
	}

	/*
	 * fold (iteration): the cluster's last piece to finish adds its pieces
	 * in order into clus, as kmg_combine_kernel does, so that launch is
	 * gone (threadFenceReduction: every thread's writes fenced, then one
	 * ticket a block; a single piece is the sum itself)
	 */
	if (fold)
	{
		const int	j = t.x;
		const int2	pc = a.pclus[j];

		__threadfence();
		__syncthreads();
		if (tid == 0)
			slast = pc.y == 1 || atomicAdd(&a.pdone[j], 1) == pc.y - 1;
		__syncthreads();
		if (slast)
		{
			__threadfence();
			for (int c = tid; c < cw; c += KMG_SEG_NT)
			{
				const double *pp = a.ppart + (size_t) pc.x * cw + c;
				double		s = __ldcg(pp);

				for (int i = 1; i < pc.y; i++)
					s += __ldcg(pp + (size_t) i * cw);
				a.clus[(size_t) j * cw + c] = s;
				if (c == dp && !(s > 0.0))
					atomicAdd(&a.ctl->nempty, 1);
			}
		}
	}
}

/*
 * Each cluster's pieces added in order into clus; clusters without weight
 * counted (an iteration's sums do this in kmg_piece_sums_kernel instead).  The order-free cost words become the cost as km_fix_value
 * gives it (the CPU engine's number); where it declines, the double sum in
 * row order (the CPU engine's fallback, up to the order of its terms).
 */
__global__ void __launch_bounds__(KMG_SEG_NT)
kmg_combine_kernel(kmg_args a, int mode)
{
	const int	j = blockIdx.x;
	const int	cw = KMG_CW(a.dp);
	const int	fix = mode == KMG_MODE_LABELS && a.ishift != KM_FIX_UNSET;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const int2	pc = a.pclus[j];

	for (int c = threadIdx.x; c < (fix ? a.dp + 2 : cw); c += KMG_SEG_NT)
	{
		const double *p = a.ppart + (size_t) pc.x * cw + c;
		double		s = p[0];

		for (int i = 1; i < pc.y; i++)
			s += p[(size_t) i * cw];
		a.clus[(size_t) j * cw + c] = s;
		if (mode == KMG_MODE_ITER && c == a.dp && !(s > 0.0))
			atomicAdd(&a.ctl->nempty, 1);
	}
	if (fix && threadIdx.x == 0)
	{
		const double *p = a.ppart + (size_t) pc.x * cw + a.dp;
		km_fix		f = {0, 0};
		km_fixscale fs;
		double		cnt = 0.0,
					v;

		fs.shift = a.ishift;
		for (int i = 0; i < pc.y; i++)
		{
			km_fix		g;

			cnt += p[(size_t) i * cw + 1];
			g.lo = (uint64_t) __double_as_longlong(p[(size_t) i * cw + 2]);
			g.hi = (uint64_t) __double_as_longlong(p[(size_t) i * cw + 3]);
			km_fix_add(&f, g);
		}
		if (!km_fix_value(f, fs, (int64_t) cnt, &v))
		{
			/*
			 * Declined (terms far below the bound, or one past it): the
			 * ordinary double sum, as the CPU engine keeps; the cluster's
			 * rows in (sorted) row order, so still the same bits every run.
			 * Rare: costs all zero (duplicates, k == n) or a broken bound.
			 */
			v = 0.0;
			for (int i = 0; i < pc.y; i++)
			{
				const int4	t = a.ptab[pc.x + i];

				for (int q = t.y; q < t.z; q++)
				{
					const int	r = a.svals[q];

					/* one rounding each, no FMA: the CPU engine's arithmetic */
					v = km_dadd(v, km_dmul(a.W != NULL ? (double) a.W[r] : 1.0, a.cost[r]));
				}
			}
		}
		a.clus[(size_t) j * cw + a.dp + 2] = v;
		a.clus[(size_t) j * cw + a.dp + 3] = 0.0;
	}
}

/*
 * Per-cluster sums of the labelled rows (sorted by kmg_sort_labels) into
 * clus: bounds of each label, pieces, sums per piece, pieces added in order
 * (in an iteration folded into the piece sums: one launch fewer).
 */
cudaError_t
kmg_segment(const kmg_args *a, int mode, int with_sums, cudaStream_t stream)
{
	cudaError_t e;

	/* CUB's sort: the bounds from the sorted labels, then the pieces */
	if ((e = kmg_label_pieces(a, stream)) != cudaSuccess)
		return e;
	/* the iteration's sums: the combine folded into the piece sums */
	const int	fold = mode == KMG_MODE_ITER && with_sums && a->pdone != NULL;

	kmg_piece_sums_kernel<<<a->maxpieces, KMG_SEG_NT, 0, stream>>>(*a, mode, with_sums, fold);
	if (!fold)
		kmg_combine_kernel<<<a->k, KMG_SEG_NT, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}
