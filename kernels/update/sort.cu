/*
 * sort.cu
 *	  The rows grouped by label, stably (each cluster's rows in increasing
 *	  row order, whatever the grid), with each label's [start, end) and the
 *	  cut of each cluster's rows into pieces of KMG_PIECE rows that sums.cu
 *	  adds; and the sorts by key of the re-seeding and the random init.
 *
 * Plain C reference: the row order km_ref_lloyd (kernels/bench/ref_kmeans.c)
 * sums in; bench_kernels.cu checks every cluster's sums against C loops,
 * bench_engine.cu whole fits.
 *
 * Why it is fast, and deterministic.  Floating-point atomics would make the
 * sums depend on timing, so rows are first grouped by label, stably: for
 * k <= KMG_CSORT_KMAX a counting sort (per-tile label counts, their prefix
 * over the tiles, the label starts, a stable scatter; four short kernels
 * that also give each label's bounds and pieces), otherwise CUB's radix
 * sort of (label, row) pairs over ceil(log2 k) bits, after which
 * kmg_label_pieces finds the bounds and cuts the pieces.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "update/update.cuh"

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
 * cluster gets one empty piece when empty_piece, so that the piece sums see
 * it), numbered cluster by cluster: one block, a running block scan over
 * the clusters.
 */
__global__ void __launch_bounds__(1024)
kmg_pieces_kernel(kmg_args a, const int32_t *count, int empty_piece)
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
			if (np < 1 && empty_piece)
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
		kmg_pieces_kernel<<<1, 1024, 0, stream>>>(*a, tot, 1);
		kmg_csort_scatter_kernel<<<tiles, KMG_CSORT_NT, a->k * sizeof(int) + tile * sizeof(short),
			stream>>>(*a, tile, off);
		return cudaGetLastError();
	}
	return cub::DeviceRadixSort::SortPairs(temp, bytes, (const int32_t *) a->labels, a->skeys,
										   iota, a->svals, (int) a->n, 0,
										   kmg_label_bits(a->k), stream);
}

/*
 * After CUB's sort (kmg_sort_labels without the counting sort): the bounds
 * of every label from the sorted keys, then the pieces.  The counting sort
 * leaves both itself, and this does nothing.
 */
cudaError_t
kmg_label_pieces(const kmg_args *a, cudaStream_t stream)
{
	cudaError_t e;
	int64_t		blocks = (a->n + 255) / 256;

	if (kmg_csort_used(a->n, a->k))
		return cudaSuccess;
	blocks = kmg_stride_grid(blocks, 16);
	if ((e = cudaMemsetAsync(a->bounds, 0, sizeof(int2) * a->k, stream)) != cudaSuccess)
		return e;
	kmg_bounds_kernel<<<(unsigned) blocks, 256, 0, stream>>>(*a);
	kmg_pieces_kernel<<<1, 1024, 0, stream>>>(*a, NULL, 1);
	return cudaGetLastError();
}

/*
 * Bounds and pieces of a->k keys from their counts (count[j] rows of key
 * j, laid out key after key; no piece for a key without rows): running.cu's
 * moved rows.
 */
cudaError_t
kmg_pieces_of_counts(const kmg_args *a, const int32_t *count, cudaStream_t stream)
{
	kmg_pieces_kernel<<<1, 1024, 0, stream>>>(*a, count, 0);
	return cudaGetLastError();
}

/* Upper bound of the pieces of n rows in k clusters. */
int
kmg_max_pieces(int64_t n, int k)
{
	return (int) (n / KMG_PIECE + k + 1);
}
