/*
 * bounds.cu
 *	  Skipping the rows whose label cannot change (Hamerly's bounds), for a
 *	  fit's iterations on the tensor-core screen (l2): which rows the next
 *	  screen must decide.
 *
 * Each row keeps an upper bound ub on its distance to its centroid and a
 * lower bound lb on its distance to every other centroid (the screen sets
 * them where it decides a row: screen.cu, kmg_screen_ub / kmg_screen_lb and
 * the certify kernel).  When the centroids move, centroid j by drift_j =
 * |C_j - Cprev_j|, the triangle inequality keeps them bounds after
 *		ub += drift_label,   lb -= max over j != label of drift_j
 * and while ub < lb the label is the one centroid nearer than every other,
 * by a margin far above the rounding of the exact cost (ub and lb are
 * floats, so ub < lb means at least 2^-24 apart): km_exact_nearest would
 * give the same label, so the row is not screened and its label stays.  A
 * row whose bounds cross by less than twice its centroid's drift first has
 * ub tightened to its distance (the sum of its exact terms); only rows
 * that still cross are listed (a->brow), and the screen decides those as
 * it decides every row without bounds.  So every iteration's labels are
 * the exact nearest centroids of its centroids, as without bounds.
 * Every bound is rounded outwards (drifts and ub up, lb down) with 2^-30 of
 * room over the double sums it comes from.
 *
 * Per iteration, before the screen: kmg_bounds_drift_kernel (drift_j, then
 * Cprev = C; its last block takes the largest two drifts), then
 * kmg_bounds_rows_kernel (the test, the tightening, the list).  Rows without
 * bounds (ub not finite: the first iteration, rows settled against every
 * centroid) are always listed.
 *
 * The far centroids (a->frow set: k >= KMG_FAR_MIN_K on the mma.sync
 * screen, k >= KMG_FAR_MIN_K_WG on the wgmma one, there only in the
 * iterations where it pays: kmg_bounds_far_now).  The drifts are
 * heavy-tailed, and lb falls by the largest.  So
 * the drift kernel also takes the KMG_FAR_C centroids that moved farthest
 * and tau, a bound on the others' drifts; a crossing row whose ub is below
 * lb - tau (every other centroid that is not far lies past that) is listed
 * on a->frow instead, and screen.cu's kmg_screen_far screens it against
 * the far centroids alone: its label stays where they all (its own aside,
 * where it is far) lie past ub, else it joins a->brow.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"

#include <math.h>

#define KMG_BD_NT 256			/* threads of both kernels */
#define KMG_BD_LANE_ROWS 8		/* crossing rows in a warp from which each lane measures its own */

/*
 * The drift kernel's last block reads all k drifts several times (the
 * largest two, the far select's rounds): KMG_BD_BATCH loads in flight a
 * thread, from L2 (the other blocks wrote them; their ticket orders it),
 * -1 past k.
 */
#define KMG_BD_BATCH 8

__device__ __forceinline__ void
kmg_bounds_drift_batch(const kmg_args &a, int base, float *v)
{
#pragma unroll
	for (int u = 0; u < KMG_BD_BATCH; u++)
	{
		const int	j = base + u * KMG_BD_NT + (int) threadIdx.x;

		v[u] = j < a.k ? __ldcg(&a.drift[j]) : -1.0f;
	}
}

/*
 * The far centroids (a->frow set; the drift kernel's last block, every
 * thread): tau, the largest float whose top 16 bits are those of the
 * (KMG_FAR_C + 1)-th largest drift (ties counted), by two rounds of a
 * radix select on the drifts' bits (drifts are not negative, so their bits
 * order as they do); so tau is at least that drift and within 2^-7 of it,
 * and the centroids whose drift exceeds it, at most KMG_FAR_C, go to
 * a->farc.  Every other centroid moved at most tau.  The test runs from k =
 * KMG_FAR_MIN_K (KMG_FAR_MIN_K_WG), so there are more than KMG_FAR_C
 * centroids.
 */
static_assert(KMG_FAR_MIN_K > KMG_FAR_C && KMG_FAR_MIN_K_WG > KMG_FAR_C, "more centroids than far ones");

__device__ __forceinline__ void
kmg_bounds_far_select(const kmg_args &a, unsigned *hist, unsigned *prefix, int *need, int *nfc)
{
	const int	lane = threadIdx.x & 31;
	unsigned	mask = 0;

	if (threadIdx.x == 0)
	{
		*prefix = 0;
		*need = KMG_FAR_C + 1;	/* the rank sought, from the largest */
		*nfc = 0;
	}
	for (int shift = 24; shift >= 16; shift -= 8)
	{
		__syncthreads();
		for (int b = threadIdx.x; b < 256; b += blockDim.x)
			hist[b] = 0;
		__syncthreads();

		const unsigned pre = *prefix;

		for (int base = 0; base < a.k; base += KMG_BD_NT * KMG_BD_BATCH)
		{
			float		v[KMG_BD_BATCH];

			kmg_bounds_drift_batch(a, base, v);
#pragma unroll
			for (int u = 0; u < KMG_BD_BATCH; u++)
			{
				const unsigned key = __float_as_uint(v[u]);
				const bool	in = base + u * KMG_BD_NT + (int) threadIdx.x < a.k && (key & mask) == pre;
				/* one add a bin a warp: the drifts share their high bits */
				const unsigned bin = in ? (key >> shift) & 255u : 256u + lane;
				const unsigned peers = __match_any_sync(0xffffffffu, bin);

				if (in && lane == __ffs(peers) - 1)
					atomicAdd(&hist[bin], (unsigned) __popc(peers));
			}
		}
		__syncthreads();
		if (threadIdx.x < 32)
		{
			/* the bin holding the need-th largest: lane l counts bins 8 l .. 8 l + 7 */
			unsigned	c[8],
						sum = 0;

#pragma unroll
			for (int q = 0; q < 8; q++)
				sum += c[q] = hist[8 * lane + q];

			unsigned	incl = sum;	/* bins of lanes lane .. 31 */

			for (int o = 1; o < 32; o <<= 1)
			{
				const unsigned t = __shfl_down_sync(0xffffffffu, incl, o);

				if (lane + o < 32)
					incl += t;
			}

			const unsigned above = incl - sum;
			const unsigned nd = (unsigned) *need;

			if (above < nd && (nd <= incl || lane == 0))
			{
				unsigned	cum = above;
				int			q = 7;

				for (; q > 0; q--)
				{
					if (cum + c[q] >= nd)
						break;
					cum += c[q];
				}
				*need = (int) (nd - cum);
				*prefix = pre | (unsigned) (8 * lane + q) << shift;
			}
		}
		mask |= 255u << shift;
	}
	__syncthreads();

	/* the bin's largest float (+INF's bin holds +INF alone) */
	const unsigned top = *prefix;
	const float tau = top >= 0x7f800000u ? INFINITY : __uint_as_float(top | 0xffffu);

	for (int base = 0; base < a.k; base += KMG_BD_NT * KMG_BD_BATCH)
	{
		float		v[KMG_BD_BATCH];

		kmg_bounds_drift_batch(a, base, v);
#pragma unroll
		for (int u = 0; u < KMG_BD_BATCH; u++)
			if (v[u] > tau)		/* past k: -1 */
				a.farc[atomicAdd(nfc, 1)] = base + u * KMG_BD_NT + (int) threadIdx.x;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		a.bs->tau = tau;
		a.bs->nfc = *nfc;
	}
}

/*
 * Whether this iteration runs the far test (thread 0 of the drift
 * kernel's last block, before the far select, which runs only where this
 * says so, and before the list and the largest drift are reset; dmax1
 * this iteration's largest drift).  Off, neither the select nor the far
 * operand's prepare does any work (the test's kernel finds no rows).  On
 * the mma.sync screen (B: k >= 5000, a listed row costs k / KMG_FAR_C
 * tested ones) always.  On the wgmma one (C: k >= 1024, only eight
 * times a tested row) it pays where many rows would be listed, and costs
 * more than it saves late in a fit, where few centroids move and most
 * rows, failing Hamerly's bound by the one largest drift, would be tested
 * every iteration while few would be listed (round 19 of
 * kernels/bench/NOTES.md): so while the last iteration listed more than a
 * fifth of the rows (the first iterations), and where the largest drift
 * is more than twice the last one (a few centroids jumped: the iterations
 * where Hamerly's bounds list a fifth to two fifths of the rows again).
 * At a run's first iteration the last values are another run's (no row
 * has bounds yet).  A choice of work only: either way every label is
 * exact.
 */
static __device__ __forceinline__ int
kmg_bounds_far_now(const kmg_args &a, float dmax1)
{
	if (!a.xhwg)
		return 1;
	return (int64_t) a.bs->nlist * 5 > a.n || dmax1 > 2.0f * a.bs->dmax1;
}

/*
 * drift_j = |C_j - Cprev_j| rounded up (a warp a centroid: the differences
 * of floats and their squares are exact in double, their sum within dp
 * 2^-53 of the true one), then Cprev_j = C_j.  The last block to finish
 * finds the largest drift, its centroid and the second largest, and resets
 * the list.
 */
__global__ void __launch_bounds__(KMG_BD_NT)
kmg_bounds_drift_kernel(kmg_args a)
{
	__shared__ float s1[KMG_BD_NT / 32],
				s2[KMG_BD_NT / 32];
	__shared__ int sj[KMG_BD_NT / 32];
	__shared__ int s_last;
	__shared__ unsigned s_hist[256];
	__shared__ unsigned s_prefix;
	__shared__ int s_need,
				s_nfc,
				s_faron;
	const int	lane = threadIdx.x & 31;
	const int	warp = threadIdx.x >> 5;
	const int	gw = (int) ((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	const int	nw = (int) ((gridDim.x * blockDim.x) >> 5);

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int j = gw; j < a.k; j += nw)
	{
		float	   *c = a.C + (size_t) j * a.dp;
		float	   *cp = a.Cprev + (size_t) j * a.dp;
		double		s = 0.0;

		for (int i = lane; i < a.dp; i += 32)
		{
			const double t = (double) c[i] - (double) cp[i];

			s += t * t;
			cp[i] = c[i];
		}
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		/* not finite (no earlier centroids): every bound is lost */
		if (lane == 0)
			a.drift[j] = isfinite(s) ? kmg_sqrt_ru(s) : INFINITY;
	}

	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0)
		s_last = atomicAdd(&a.bs->ticket, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();

	/* the largest two drifts (ties: the lower centroid first) */
	float		m1 = -1.0f,
				m2 = -1.0f;
	int			j1 = -1;

	for (int base = 0; base < a.k; base += KMG_BD_NT * KMG_BD_BATCH)
	{
		float		v[KMG_BD_BATCH];

		kmg_bounds_drift_batch(a, base, v);
#pragma unroll
		for (int u = 0; u < KMG_BD_BATCH; u++)
		{
			/* past k: -1, below every drift and m1's start; j ascends */
			if (v[u] > m1)
			{
				m2 = m1;
				m1 = v[u];
				j1 = base + u * KMG_BD_NT + (int) threadIdx.x;
			}
			else if (v[u] > m2)
				m2 = v[u];
		}
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		const float o1 = __shfl_xor_sync(0xffffffffu, m1, o),
					o2 = __shfl_xor_sync(0xffffffffu, m2, o);
		const int	oj = __shfl_xor_sync(0xffffffffu, j1, o);

		if (o1 > m1 || (o1 == m1 && oj < j1))
		{
			m2 = fmaxf(m1, o2);
			m1 = o1;
			j1 = oj;
		}
		else
			m2 = fmaxf(m2, o1);
	}
	if (lane == 0)
	{
		s1[warp] = m1;
		s2[warp] = m2;
		sj[warp] = j1;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		m1 = s1[0];
		m2 = s2[0];
		j1 = sj[0];
		for (int w = 1; w < KMG_BD_NT / 32; w++)
		{
			if (s1[w] > m1 || (s1[w] == m1 && sj[w] < j1))
			{
				m2 = fmaxf(m1, s2[w]);
				m1 = s1[w];
				j1 = sj[w];
			}
			else
				m2 = fmaxf(m2, s1[w]);
		}
		s_faron = a.frow != NULL && kmg_bounds_far_now(a, m1);
	}
	__syncthreads();
	/* the far set only where the test runs (off, nothing reads tau, nfc or farc) */
	if (s_faron)
		kmg_bounds_far_select(a, s_hist, &s_prefix, &s_need, &s_nfc);
	if (threadIdx.x != 0)
		return;
	a.bs->faron = s_faron;
	a.bs->dmax1 = m1 >= 0.0f ? m1 : 0.0f;
	a.bs->dmax2 = m2 >= 0.0f ? m2 : 0.0f;	/* k = 1: no other centroid */
	a.bs->jmax = j1;
	a.bs->nlist = 0;
	a.bs->nfar = 0;
	a.bs->ticket = 0;
}

/*
 * Per row: the bounds moved by the drifts; where they cross by less than
 * twice the centroid's drift, ub tightened to the distance to the row's
 * centroid; the rows that still cross (or have no bounds) appended to
 * a->brow, a warp's rows with one atomic, with their label so far on
 * a->bold when the fit keeps running sums.
 */
__global__ void __launch_bounds__(KMG_BD_NT)
kmg_bounds_rows_kernel(kmg_args a)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int64_t nup = (a.n + 31) / 32 * 32;	/* whole warps take the ballot */
	const int	lane = threadIdx.x & 31;
	const int	q4 = a.dp / 4;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;

	const float dmax1 = a.bs->dmax1,
				dmax2 = a.bs->dmax2;
	const int	jmax = a.bs->jmax;
	const bool	far = a.frow != NULL && a.bs->faron;
	const float tau = far ? a.bs->tau : 0.0f;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < nup; i += stride)
	{
		int			need = 0,
					has = 0,	/* the row has bounds */
					cross = 0,
					fartest = 0,	/* for the far centroids' test */
					j = -1;
		float		u = 0.0f,
					l = 0.0f,
					lrest = 0.0f;	/* far: the bound on the distance to the centroids not far */

		if (i < a.n)
		{
			j = a.labels[i];
			u = a.ub[i];
			l = a.lb[i];
			need = 1;
			if (j >= 0 && isfinite(u))
			{
				const float dj = a.drift[j];

				if (far)
					lrest = __fsub_rd(l, tau);
				l = __fsub_rd(l, j == jmax ? dmax2 : dmax1);
				/*
				 * Measured only where that may pass, against the bound it
				 * is judged by (far: lrest, the far test's): the distance
				 * now is at least about ub - drift_j when ub was measured
				 * at the last iteration, so a row that crosses by more goes
				 * to the screen unread (early iterations: most rows).  A
				 * choice of work only; every label is decided exactly
				 * either way.
				 */
				cross = !(__fadd_ru(u, dj) < l) && u - dj < (far ? lrest : l);
				u = __fadd_ru(u, dj);
				has = 1;
			}
		}

		/*
		 * The crossing rows' distance to their centroid: each term (x - c)^2
		 * is exact in double, so their sum in any order is what kmg_sqrt_ru
		 * rounds outwards.  Many crossing rows in the warp: a lane a row
		 * (kmg_chain4, the loads of many rows in flight); few: the warp on
		 * one row at a time (a lane a 16-byte chunk).
		 */
		const unsigned cm0 = __ballot_sync(0xffffffffu, cross);

		if (__popc(cm0) >= KMG_BD_LANE_ROWS)
		{
			if (cross)
				u = kmg_sqrt_ru(kmg_chain4(reinterpret_cast<const float4 *>(a.X + (size_t) i * a.dp),
										   reinterpret_cast<const float4 *>(a.C + (size_t) j * a.dp),
										   q4, 0.0, 0));
		}
		else
		{
			for (unsigned cm = cm0; cm != 0; cm &= cm - 1)
			{
				const int	src = __ffs(cm) - 1;
				const int64_t ri = __shfl_sync(0xffffffffu, (long long) i, src);
				const int	rj = __shfl_sync(0xffffffffu, j, src);
				const float4 *x4 = reinterpret_cast<const float4 *>(a.X + (size_t) ri * a.dp);
				const float4 *c4 = reinterpret_cast<const float4 *>(a.C + (size_t) rj * a.dp);
				double		s = 0.0;

				for (int q = lane; q < q4; q += 32)
				{
					const float4 x = x4[q],
								c = c4[q];
					const double t0 = (double) x.x - (double) c.x,
								t1 = (double) x.y - (double) c.y,
								t2 = (double) x.z - (double) c.z,
								t3 = (double) x.w - (double) c.w;

					s += t0 * t0 + t1 * t1 + t2 * t2 + t3 * t3;
				}
				for (int o = 16; o > 0; o >>= 1)
					s += __shfl_xor_sync(0xffffffffu, s, o);
				if (lane == src)
					u = kmg_sqrt_ru(s);
			}
		}
		if (has)
		{
			need = !(u < l);
			/*
			 * Far: only the far centroids may be nearer than ub (the row's
			 * own may be one of them); kmg_screen_far decides it with lb
			 * the others' bound, and lists it here if they may be.
			 */
			fartest = far && need && lrest > 0.0f && u < lrest;
			a.ub[i] = u;
			a.lb[i] = fartest ? lrest : l;
			need = need && !fartest;
		}
		if (far)
		{
			const unsigned fb = __ballot_sync(0xffffffffu, fartest);

			if (fb != 0)
			{
				int			fbase = 0;

				if (lane == 0)
					fbase = atomicAdd(&a.bs->nfar, __popc(fb));
				fbase = __shfl_sync(0xffffffffu, fbase, 0);
				if (fartest)
					a.frow[fbase + __popc(fb & ((1u << lane) - 1u))] = (int32_t) i;
			}
		}

		const unsigned ball = __ballot_sync(0xffffffffu, need);
		int			base = 0;

		if (ball == 0)
			continue;
		if (lane == 0)
			base = atomicAdd(&a.bs->nlist, __popc(ball));
		base = __shfl_sync(0xffffffffu, base, 0);
		if (need)
		{
			const int	at = base + __popc(ball & ((1u << lane) - 1u));

			a.brow[at] = (int32_t) i;
			if (a.bold != NULL)
				a.bold[at] = j;
		}
	}
}

/*
 * The rows the next screen must decide, on a->brow (a->bs->nlist of them):
 * the drifts since the last assignment, then each row's test.
 */
cudaError_t
kmg_bounds_list(const kmg_args *a, int sms, cudaStream_t stream)
{
	int			gd = (a->k + KMG_BD_NT / 32 - 1) / (KMG_BD_NT / 32);
	int64_t		gr = (a->n + KMG_BD_NT - 1) / KMG_BD_NT;

	if (gd > sms * 4)
		gd = sms * 4;
	if (gr > (int64_t) sms * 8)
		gr = (int64_t) sms * 8;
	kmg_bounds_drift_kernel<<<gd, KMG_BD_NT, 0, stream>>>(*a);
	kmg_bounds_rows_kernel<<<(unsigned) (gr > 0 ? gr : 1), KMG_BD_NT, 0, stream>>>(*a);
	if (a->frow == NULL)
		return cudaGetLastError();
	return kmg_screen_far(a, sms, stream);
}
