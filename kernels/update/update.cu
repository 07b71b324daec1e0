/*
 * update.cu
 *	  The M step for any k: rows grouped by label with a stable radix sort,
 *	  per-cluster sums in row order, the centroid update with its decisions
 *	  (settled, tolerance, max_iter, empty clusters), and the re-seeding of
 *	  empty clusters with the farthest rows.
 *
 * Plain C reference: km_ref_lloyd in kernels/bench/ref_kmeans.c (the CPU
 * engine's rules: src/engine/cpu_lloyd.c), compared end to end by
 * bench_engine.cu.
 *
 * Why it is fast, and deterministic.  Floating-point atomics would make the
 * sums depend on timing, so rows are first grouped by label, stably, so each
 * cluster's rows come in increasing row order, whatever the grid: for
 * k <= KMG_CSORT_KMAX a counting sort (per-tile label counts, their prefix
 * over the tiles, the label starts, a stable scatter; four short kernels that
 * also give each label's bounds), otherwise CUB's radix sort of (label, row)
 * pairs over ceil(log2 k) bits.  Each
 * cluster's rows are then cut into pieces of KMG_PIECE rows, one block per
 * piece (so a few big clusters still fill the GPU), summed in row order with
 * eight rows' loads in flight (cp.async), and the pieces are added in order
 * (in an iteration by each cluster's last piece to finish, otherwise by
 * kmg_combine_kernel); the cost is one gathered read of X plus the sort, a
 * few percent of the GEMM for the large-k shapes.  The finalize kernel moves the centroids and its
 * last block (ticket counter, after a fence) takes the decisions for the
 * whole iteration, so the host only reads a few bytes per batch.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "update/update.cuh"
#include "update/finalize_block.cuh"

#include <math.h>
#include <stdlib.h>

#include <cub/cub.cuh>

/* Bits that hold a label < k. */
static int
kmg_label_bits(int k)
{
	int			b = 1;

	while (b < 31 && (1 << b) < k)
		b++;
	return b;
}

/*
 * Counting sort by label (k <= KMG_CSORT_KMAX).  The rows are cut into tiles
 * of kmg_csort_tile rows; cnt[t][j] counts label j in tile t, off[t][j] is
 * its exclusive prefix over the tiles, bounds[j] the label's [start, end).
 * The scatter gives rows of one label in tile order and, within a tile, in
 * row order (one warp walks its tile 32 rows at a time, ranks by
 * __match_any_sync), so the result is CUB's stable order.  Whether it is
 * used depends on (n, k) alone, so that kmg_segment knows whether the
 * bounds and pieces are already there.
 */
#define KMG_CSORT_KMAX 8192
#define KMG_CSORT_TMAX 8192
#define KMG_CSORT_CELLS ((int64_t) 1 << 22)

static int64_t
kmg_csort_tile(int64_t n, int k)
{
	int64_t		t = (n + 1023) / 1024;	/* about 1024 tiles ... */
	const int64_t tk = (n * k + KMG_CSORT_CELLS - 1) / KMG_CSORT_CELLS;

	if (t < tk)
		t = tk;					/* ... at most KMG_CSORT_CELLS counts ... */
	t = (t + 31) / 32 * 32;
	if (t < 1024)
		t = 1024;				/* ... at least 32 steps of the warp ... */
	if (t > KMG_CSORT_TMAX)
		t = KMG_CSORT_TMAX;		/* ... and labels that fit in shared memory */
	return t;
}

static size_t
kmg_csort_bytes(int64_t n, int k)
{
	const int64_t tiles = (n + kmg_csort_tile(n, k) - 1) / kmg_csort_tile(n, k);

	return (size_t) (2 * tiles + 1) * k * sizeof(int32_t);
}

static int
kmg_csort_used(int64_t n, int k)
{
	return k <= KMG_CSORT_KMAX && n < INT32_MAX &&
		(n + kmg_csort_tile(n, k) - 1) / kmg_csort_tile(n, k) * k <= KMG_CSORT_CELLS;
}

size_t
kmg_sort_temp_bytes(int64_t n, int k)
{
	size_t		a = 0,
				b = 0;

	cub::DeviceRadixSort::SortPairs((void *) NULL, a, (const int32_t *) NULL, (int32_t *) NULL,
									(const int32_t *) NULL, (int32_t *) NULL, (int) n, 0,
									kmg_label_bits(k));
	cub::DeviceRadixSort::SortPairsDescending((void *) NULL, b, (const double *) NULL,
											  (double *) NULL, (const int32_t *) NULL,
											  (int32_t *) NULL, (int) n);
	if (b > a)
		a = b;
	cub::DeviceRadixSort::SortPairs((void *) NULL, b, (const double *) NULL, (double *) NULL,
									(const int32_t *) NULL, (int32_t *) NULL, (int) n);
	if (b > a)
		a = b;
	b = kmg_csort_bytes(n, k);
	return a > b ? a : b;
}


/* Rows by decreasing cost, ties to the lower row (the sort is stable). */
cudaError_t
kmg_sort_costs_desc(const double *cost, double *keys_out, const int32_t *iota,
					int32_t *rows_out, int64_t n, void *temp, size_t temp_bytes,
					cudaStream_t stream)
{
	size_t		bytes = temp_bytes;

	return cub::DeviceRadixSort::SortPairsDescending(temp, bytes, cost, keys_out, iota,
													 rows_out, (int) n, 0, 64, stream);
}

/* Rows by increasing key, ties to the lower row (random init). */
cudaError_t
kmg_sort_keys_asc(const double *keys, double *keys_out, const int32_t *iota,
				  int32_t *rows_out, int64_t n, void *temp, size_t temp_bytes,
				  cudaStream_t stream)
{
	size_t		bytes = temp_bytes;

	return cub::DeviceRadixSort::SortPairs(temp, bytes, keys, keys_out, iota, rows_out,
										   (int) n, 0, 64, stream);
}

/* First position in sorted keys[0..n) holding a value >= v. */
__device__ __forceinline__ int64_t
kmg_lower_bound(const int32_t *keys, int64_t n, int v)
{
	int64_t		lo = 0,
				hi = n;

	while (lo < hi)
	{
		int64_t		mid = (lo + hi) >> 1;

		if (keys[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

#define KMG_SEG_NT 128

/* [start, end) of every label present in the sorted keys (absent: 0, 0). */
__global__ void
kmg_bounds_kernel(kmg_args a)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const int32_t *keys = a.skeys;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride)
	{
		const int	key = keys[i];

		if (i == 0 || keys[i - 1] != key)
			a.bounds[key].x = (int) i;
		if (i == a.n - 1 || keys[i + 1] != key)
			a.bounds[key].y = (int) (i + 1);
	}
}

/*
 * Cut every cluster's rows into pieces of at most KMG_PIECE rows (an empty
 * cluster gets one empty piece), numbered cluster by cluster: one block,
 * a running block scan over the clusters.
 */
__global__ void __launch_bounds__(1024)
kmg_pieces_kernel(kmg_args a, const int32_t *count)
{
	typedef cub::BlockScan<int, 1024> Scan;
	__shared__ typename Scan::TempStorage tmp;
	__shared__ int carry,
				rcarry;
	const int	tid = threadIdx.x;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if (tid == 0)
		carry = rcarry = 0;
	__syncthreads();
	for (int j0 = 0; j0 < a.k; j0 += 1024)
	{
		const int	j = j0 + tid;
		int2		se = make_int2(0, 0);
		int			np = 0,
					off,
					tot;

		if (count != NULL)
		{
			/* the counting sort's label counts: the bounds first */
			const int	c = j < a.k ? count[j] : 0;
			int			start,
						all;

			Scan(tmp).ExclusiveSum(c, start, all);
			se = make_int2(rcarry + start, rcarry + start + c);
			if (j < a.k)
				a.bounds[j] = se;
			__syncthreads();
			if (tid == 0)
				rcarry += all;
			__syncthreads();
		}
		if (j < a.k)
		{
			if (count == NULL)
				se = a.bounds[j];
			np = (se.y - se.x + KMG_PIECE - 1) / KMG_PIECE;
			if (np < 1)
				np = 1;
		}
		Scan(tmp).ExclusiveSum(np, off, tot);
		if (j < a.k)
		{
			const int	base = carry + off;

			a.pclus[j] = make_int2(base, np);
			if (a.pdone != NULL)
				a.pdone[j] = 0;	/* for the piece sums' fold of this round */
			for (int p = 0; p < np; p++)
			{
				const int	s0 = se.x + p * KMG_PIECE;
				const int	s1 = s0 + KMG_PIECE < se.y ? s0 + KMG_PIECE : se.y;

				a.ptab[base + p] = make_int4(j, s0, s1 > s0 ? s1 : s0, 0);
			}
		}
		__syncthreads();
		if (tid == 0)
			carry += tot;
		__syncthreads();
	}
	if (tid == 0)
		*a.npieces = carry;
}

/* cnt[t][j]: rows of label j in tile t (every j written). */
__global__ void __launch_bounds__(256)
kmg_csort_count_kernel(kmg_args a, int tile, int32_t *cnt)
{
	extern __shared__ int hist[];
	const int	tid = threadIdx.x;
	const int64_t r0 = (int64_t) blockIdx.x * tile;
	const int64_t r1 = r0 + tile < a.n ? r0 + tile : a.n;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int j = tid; j < a.k; j += 256)
		hist[j] = 0;
	__syncthreads();
	for (int64_t r = r0 + tid; r < r1; r += 256)
		atomicAdd(&hist[a.labels[r]], 1);
	__syncthreads();
	for (int j = tid; j < a.k; j += 256)
		cnt[(size_t) blockIdx.x * a.k + j] = hist[j];
}

/*
 * off[t][j] = rows of label j in tiles before t, tot[j] = all of them: 32
 * labels a block (lanes), the tiles cut into 32 runs (warps), the runs' sums
 * scanned in shared memory.
 */
__global__ void __launch_bounds__(1024)
kmg_csort_prefix_kernel(kmg_args a, int tiles, const int32_t *__restrict__ cnt,
						int32_t *__restrict__ off, int32_t *__restrict__ tot)
{
	__shared__ int part[32][33];
	const int	lane = threadIdx.x & 31,
				w = threadIdx.x >> 5;
	const int	j = blockIdx.x * 32 + lane;
	const int	per = (tiles + 31) / 32;
	const int	t0 = w * per;
	const int	t1 = t0 + per < tiles ? t0 + per : tiles;
	int			sum = 0,
				run = 0;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if (j < a.k)
#pragma unroll 4
		for (int t = t0; t < t1; t++)
			sum += cnt[(size_t) t * a.k + j];
	part[w][lane] = sum;
	__syncthreads();
	for (int i = 0; i < w; i++)
		run += part[i][lane];
	if (j < a.k)
	{
#pragma unroll 4
		for (int t = t0; t < t1; t++)
		{
			off[(size_t) t * a.k + j] = run;
			run += cnt[(size_t) t * a.k + j];
		}
		if (w == 31)
			tot[j] = run;
	}
}

/*
 * The stable scatter: one block per tile, the tile's labels staged in shared
 * memory (16 bits each) and each label's next position, by all four warps;
 * then one warp walks the tile, 32 rows a step, ranked within the step by
 * __match_any_sync (lower lanes first); the lowest lane of each label moves
 * its position on.
 */
#define KMG_CSORT_NT 128

__global__ void __launch_bounds__(KMG_CSORT_NT)
kmg_csort_scatter_kernel(kmg_args a, int tile, const int32_t *off)
{
	extern __shared__ int pos[];
	unsigned short *lab = (unsigned short *) (pos + a.k);
	const int	tid = threadIdx.x;
	const int	lane = tid & 31;
	const int64_t r0 = (int64_t) blockIdx.x * tile;
	const int	m = (int) (r0 + tile < a.n ? tile : a.n - r0);
	const unsigned lt = (1u << lane) - 1u;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	for (int j = tid; j < a.k; j += KMG_CSORT_NT)
		pos[j] = a.bounds[j].x + off[(size_t) blockIdx.x * a.k + j];
	for (int i = tid; i < m; i += KMG_CSORT_NT)
		lab[i] = (unsigned short) a.labels[r0 + i];
	__syncthreads();
	if (tid >= 32)
		return;
	for (int i0 = 0; i0 < m; i0 += 32)
	{
		const int	i = i0 + lane;
		const int	L = i < m ? (int) lab[i] : -1;
		const unsigned same = __match_any_sync(0xffffffffu, L);
		const int	rank = __popc(same & lt);
		const int	base = L >= 0 ? pos[L] : 0;

		__syncwarp();
		if (L >= 0)
		{
			a.svals[base + rank] = (int32_t) (r0 + i);
			if (rank == 0)
				pos[L] = base + __popc(same);
		}
		__syncwarp();
	}
}

/* svals: the rows grouped by label, rows ascending within a label (stable). */
cudaError_t
kmg_sort_labels(const kmg_args *a, const int32_t *iota, void *temp, size_t temp_bytes,
				cudaStream_t stream)
{
	size_t		bytes = temp_bytes;

	if (kmg_csort_used(a->n, a->k))
	{
		const int	tile = (int) kmg_csort_tile(a->n, a->k);
		const int	tiles = (int) ((a->n + tile - 1) / tile);
		int32_t    *cnt = (int32_t *) temp;
		int32_t    *off = cnt + (size_t) tiles * a->k;
		int32_t    *tot = off + (size_t) tiles * a->k;

		if (temp_bytes < kmg_csort_bytes(a->n, a->k))
			return cudaErrorInvalidValue;	/* kmg_sort_temp_bytes counts it */

		/* the bounds and pieces come with it: kmg_segment leaves them */
		kmg_csort_count_kernel<<<tiles, 256, a->k * sizeof(int), stream>>>(*a, tile, cnt);
		kmg_csort_prefix_kernel<<<(a->k + 31) / 32, 1024, 0, stream>>>(*a, tiles, cnt, off, tot);
		kmg_pieces_kernel<<<1, 1024, 0, stream>>>(*a, tot);
		kmg_csort_scatter_kernel<<<tiles, KMG_CSORT_NT, a->k * sizeof(int) + tile * sizeof(short),
			stream>>>(*a, tile, off);
		return cudaGetLastError();
	}
	return cub::DeviceRadixSort::SortPairs(temp, bytes, (const int32_t *) a->labels, a->skeys,
										   iota, a->svals, (int) a->n, 0,
										   kmg_label_bits(a->k), stream);
}

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
		{
			const float xn = a.xnorm[r];
			double		e = (double) a.fbest[r] + (double) (xn * xn);

			ee += w * (e > 0.0 ? (a.cosine ? 0.5 * e : e) : 0.0);
		}
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
	int64_t		blocks = (a->n + 255) / 256;

	if (blocks > 132 * 16)
		blocks = 132 * 16;
	if (!kmg_csort_used(a->n, a->k))
	{
		/* CUB's sort: the bounds from the sorted labels, then the pieces */
		if ((e = cudaMemsetAsync(a->bounds, 0, sizeof(int2) * a->k, stream)) != cudaSuccess)
			return e;
		kmg_bounds_kernel<<<(unsigned) blocks, 256, 0, stream>>>(*a);
		kmg_pieces_kernel<<<1, 1024, 0, stream>>>(*a, NULL);
	}
	/* the iteration's sums: the combine folded into the piece sums */
	const int	fold = mode == KMG_MODE_ITER && with_sums && a->pdone != NULL;

	kmg_piece_sums_kernel<<<a->maxpieces, KMG_SEG_NT, 0, stream>>>(*a, mode, with_sums, fold);
	if (!fold)
		kmg_combine_kernel<<<a->k, KMG_SEG_NT, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/* Upper bound of the pieces of n rows in k clusters. */
int
kmg_max_pieces(int64_t n, int k)
{
	return (int) (n / KMG_PIECE + k + 1);
}

#define KMG_FIN_NT 128

/* Sum of a double over the block, in a fixed tree order (all threads get it). */
__device__ double
kmg_block_sum(double v, double *red)
{
	const int	tid = threadIdx.x;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if ((tid & 31) == 0)
		red[tid >> 5] = v;
	__syncthreads();
	v = red[0];
	for (int wv = 1; wv < (int) (blockDim.x >> 5); wv++)
		v += red[wv];
	return v;
}

/*
 * The end of an iteration (mode KMG_FIN_ITER or KMG_FIN_RESEED) or the
 * set-up of new centroids (KMG_FIN_SETUP).  Block j moves centroid j to its
 * mean, as src/engine/cpu_lloyd.c does (cosine: normalised in double; no
 * weight, a re-seeded cluster, or a mean that is not finite: it stays), then
 * refreshes its filter copy and norms.  The last block to finish records the
 * iteration and decides what the queued iterations do next.
 */
__global__ void __launch_bounds__(KMG_FIN_NT)
kmg_finalize_kernel(kmg_args a, int mode)
{
	__shared__ double red[KMG_FIN_NT / 32];
	__shared__ int s_ok,
				s_last;
	__shared__ double s_scale;
	kmg_ctl    *ctl = a.ctl;
	const int	j = blockIdx.x;
	const int	tid = threadIdx.x;
	const int	d = a.d,
				dp = a.dp;
	const int	cw = KMG_CW(dp);
	int			moved = 0,
				nempty = 0,
				change;

	if (mode == KMG_FIN_ITER && *(volatile int *) &ctl->stop != KMG_RUN)
		return;
	if (mode != KMG_FIN_SETUP)
	{
		moved = *(volatile int *) &ctl->moved;
		nempty = mode == KMG_FIN_ITER ? *(volatile int *) &ctl->nempty : 0;
	}
	/* whether centroids move this time */
	change = mode == KMG_FIN_SETUP || (moved > 0 && nempty == 0);

	if (change && mode != KMG_FIN_SETUP)
	{
		const double *cl = a.clus + (size_t) j * cw;
		const double w = cl[dp];
		float	   *c = a.C + (size_t) j * dp;

		if (!(a.reloc != NULL && a.reloc[j]) && w > 0.0)
		{
			if (tid == 0)
			{
				double		scale = 1.0;
				int			ok = 1;

				if (a.cosine)
				{
					double		nrm = 0.0;

					for (int i = 0; i < d; i++)
					{
						double		m = km_ddiv(cl[i], w);

						nrm = km_dadd(nrm, km_dmul(m, m));
					}
					scale = km_dsqrt(nrm);
					ok = scale > 0.0 && isfinite(scale);
				}
				s_scale = scale;
				s_ok = ok;
			}
			__syncthreads();
			if (s_ok)
			{
				int			bad = 0;

				for (int i = tid; i < d; i += KMG_FIN_NT)
					if (!isfinite((float) km_ddiv(km_ddiv(cl[i], w), s_scale)))
						bad = 1;
				bad = __syncthreads_or(bad);
				if (!bad)
					for (int i = tid; i < d; i += KMG_FIN_NT)
						c[i] = (float) km_ddiv(km_ddiv(cl[i], w), s_scale);
			}
		}
	}
	if (change)
	{
		/* filter copy, |c'|^2, |c'|, and the exact norm for cosine */
		const float *c = a.C + (size_t) j * dp;
		float	   *cf = a.Cf + (size_t) j * dp;
		double		s;

		__syncthreads();
		if (a.cosine)
		{
			if (tid == 0)
			{
				double		nrm = km_normalize_row(c, cf, d);

				if (nrm == 0.0)
					for (int i = 0; i < d; i++)
						cf[i] = 0.0f;
				a.cnorm[j] = km_exact_norm(c, d);
			}
			__syncthreads();
		}
		else if (a.mu != NULL)
		{
			/* centred filter copy: c' = fl(c - mu), zeros past d */
			for (int i = tid; i < d; i += KMG_FIN_NT)
				cf[i] = c[i] - a.mu[i];
			__syncthreads();
		}
		s = 0.0;
		for (int i = tid; i < d; i += KMG_FIN_NT)
			s += (double) cf[i] * (double) cf[i];
		s = kmg_block_sum(s, red);
		if (tid == 0)
		{
			a.cn[j] = (float) s;
			a.cnf[j] = (float) sqrt(s);
		}
	}

	/* the last block decides */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&ctl->ticket, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();

	{
		float		cmax = 0.0f;
		int			allx = 0;
		double		est = 0.0;

		for (int jj = tid; jj < a.k; jj += KMG_FIN_NT)
		{
			const float v = *(volatile float *) &a.cnf[jj];

			cmax = fmaxf(cmax, v);
			if (a.cosine)
			{
				const double cn = *(volatile double *) &a.cnorm[jj];

				allx |= !(cn > 0.0 && isfinite(cn));
			}
			if (mode != KMG_FIN_SETUP)
				est += a.clus[(size_t) jj * cw + dp + 2];
			if (a.reloc != NULL)
				a.reloc[jj] = 0;
		}
		for (int o = 16; o > 0; o >>= 1)
			cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
		allx = __syncthreads_or(allx);
		est = kmg_block_sum(est, red);
		__syncthreads();
		if ((tid & 31) == 0)
			red[tid >> 5] = (double) cmax;
		__syncthreads();
		if (tid != 0)
			return;
		for (int wv = 0; wv < KMG_FIN_NT / 32; wv++)
			cmax = fmaxf(cmax, (float) red[wv]);

		ctl->ticket = 0;
		kmg_fin_decide(a, mode, moved, nempty, change, cmax, allx, est);
	}
}

/* The same for small k in one block (finalize_block.cuh): no ticket, one launch. */
__global__ void __launch_bounds__(256)
kmg_finalize1_kernel(kmg_args a, int mode)
{
	int			moved = 0,
				nempty = 0;

	if (mode == KMG_FIN_ITER && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	if (mode != KMG_FIN_SETUP)
	{
		moved = *(volatile int *) &a.ctl->moved;
		nempty = mode == KMG_FIN_ITER ? *(volatile int *) &a.ctl->nempty : 0;
	}
	kmg_finalize_block(a, mode, moved, nempty);
}

cudaError_t
kmg_finalize(const kmg_args *a, int mode, cudaStream_t stream)
{
	if (a->k <= KMG_FIN1_KMAX)
		kmg_finalize1_kernel<<<1, 256, 0, stream>>>(*a, mode);
	else
		kmg_finalize_kernel<<<a->k, KMG_FIN_NT, 0, stream>>>(*a, mode);
	return cudaGetLastError();
}

/*
 * Re-seed the clusters without weight, as src/engine/cpu_lloyd.c does: the
 * e-th empty cluster (by id) takes far_rows[e] (rows by decreasing exact
 * cost); the row's w x, w and count move from its old cluster, which is
 * cleared when its count drops to zero; the centroid is the row itself.
 * One block; the empties are listed in order with a block scan.
 */
__global__ void __launch_bounds__(256)
kmg_reseed_kernel(kmg_args a, const int32_t *far_rows)
{
	__shared__ int s_base;
	__shared__ int s_clear;
	const int	tid = threadIdx.x;
	const int	dp = a.dp;
	const int	cw = KMG_CW(dp);
	int			nempty;

	if (tid == 0)
		s_base = 0;
	__syncthreads();
	for (int j0 = 0; j0 < a.k; j0 += 256)
	{
		const int	j = j0 + tid;
		const int	e = j < a.k && !(a.clus[(size_t) j * cw + dp] > 0.0);
		typedef cub::BlockScan<int, 256> Scan;
		__shared__ typename Scan::TempStorage tmp;
		int			pos,
					tot;

		Scan(tmp).ExclusiveSum(e, pos, tot);
		if (e)
			a.empties[s_base + pos] = j;
		__syncthreads();
		if (tid == 0)
			s_base += tot;
		__syncthreads();
	}
	nempty = s_base;
	if (nempty > a.n)
		nempty = (int) a.n;

	for (int e = 0; e < nempty; e++)
	{
		const int	j = a.empties[e];
		const int	r = far_rows[e];
		const int	old = a.labels[r];
		const double w = a.W != NULL ? (double) a.W[r] : 1.0;
		const float *x = a.X + (size_t) r * dp;
		float	   *c = a.C + (size_t) j * dp;
		double	   *sold = a.clus + (size_t) old * cw;
		double	   *sj = a.clus + (size_t) j * cw;

		for (int i = tid; i < a.d; i += 256)
		{
			const double v = w * (double) x[i];

			c[i] = x[i];
			sold[i] -= v;
			sj[i] = v;
		}
		__syncthreads();
		if (tid == 0)
		{
			sold[dp] -= w;
			sj[dp] = w;
			sj[dp + 1] = 1.0;
			sold[dp + 1] -= 1.0;
			s_clear = sold[dp + 1] == 0.0;
			if (s_clear)
				sold[dp] = 0.0;
			a.reloc[j] = 1;
		}
		__syncthreads();
		if (s_clear)
			for (int i = tid; i < a.d; i += 256)
				sold[i] = 0.0;
		__syncthreads();
	}
	if (tid == 0)
		a.ctl->relocated = nempty;
}

cudaError_t
kmg_reseed(const kmg_args *a, const int32_t *far_rows, cudaStream_t stream)
{
	kmg_reseed_kernel<<<1, 256, 0, stream>>>(*a, far_rows);
	return cudaGetLastError();
}
