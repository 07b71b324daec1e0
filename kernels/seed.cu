/*
 * seed.cu
 *	  Initial centroids on the device: random rows and greedy k-means++,
 *	  both by the order-free sampling keys of km_hash.h.
 *
 * Plain C reference: km_ref_seed in kernels/bench/ref_kmeans.c (the rules
 * of src/engine/cpu_seed.c), compared by bench_engine.cu.
 *
 * Random: key_i = km_sample_key(h_i, stream(seed, run, 0), w_i); a stable
 * radix sort of (key, row) gives the k smallest keys, ties to the lower row.
 *
 * k-means++, step s (0-based; L = 1 at step 0, else 2 + (int) ln k):
 *	select:    D2_i = min(D2_i, dist_i to the last winner) (s >= 2; at s = 1
 *	           D2 is the distance to the first centroid), keys under w D2
 *	           (w alone at s = 0), each block's L smallest (key, row), and
 *	           the smallest key under w for the no-candidate fallback;
 *	merge:     one block: the L smallest over the blocks, those with a
 *	           finite key are the candidates (else the fallback row);
 *	potential: dist_i to every candidate (kept for the next select), and
 *	           per block sum w min(D2, dist) per candidate;
 *	choose:    one block: potentials added in block order, lowest wins (ties:
 *	           the smaller key, i.e. the earlier candidate); the row becomes
 *	           centroid s.
 * D2 and dist are float sums of (x - c)^2 in index order, no FMA (the CPU
 * engine's filter arithmetic differs in rounding, so a near-tie between two
 * candidates' potentials may go another way there; labels stay exact).
 *
 * Why it is fast enough: a step reads X once (the potential pass), keeps
 * the per-row state in D2 and dist (4 (L + 1) bytes a row), and all four
 * kernels are queued without a host round trip; the host only syncs between
 * batches of steps to report progress and poll.
 */
#include "gpu_internal.cuh"

#include <limits.h>
#include <math.h>

#define KMG_SEED_NT 256

typedef struct kmg_pp_state
{
	int			ncand;
	int			chosen;			/* index of the last winner among its candidates */
	int			pad[2];
	double		key[KMG_PP_LMAX];
	int			row[KMG_PP_LMAX];
} kmg_pp_state;

/* (key, row) order: smaller key first, ties to the lower row. */
__device__ __forceinline__ bool
kmg_before(double ka, int ra, double kb, int rb)
{
	return ka < kb || (ka == kb && ra < rb);
}

/* Block-wide minimum of (key, row); every thread gets it. */
__device__ void
kmg_block_min(double &key, int &row, double *skey, int *srow)
{
	const int	tid = threadIdx.x;

	for (int o = 16; o > 0; o >>= 1)
	{
		double		ok = __shfl_xor_sync(0xffffffffu, key, o);
		int			orow = __shfl_xor_sync(0xffffffffu, row, o);

		if (kmg_before(ok, orow, key, row))
		{
			key = ok;
			row = orow;
		}
	}
	__syncthreads();
	if ((tid & 31) == 0)
	{
		skey[tid >> 5] = key;
		srow[tid >> 5] = row;
	}
	__syncthreads();
	key = skey[0];
	row = srow[0];
	for (int w = 1; w < (int) (blockDim.x >> 5); w++)
		if (kmg_before(skey[w], srow[w], key, row))
		{
			key = skey[w];
			row = srow[w];
		}
}

/* Random init: every row's key under w. */
__global__ void
kmg_random_keys_kernel(const uint64_t *__restrict__ hashes, const float *__restrict__ W,
					   int64_t n, uint64_t stream_key, double *__restrict__ keys)
{
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		keys[i] = km_sample_key(hashes[i], stream_key, W != NULL ? (double) W[i] : 1.0);
}

cudaError_t
kmg_seed_random_keys(const kmg_args *a, const uint64_t *hashes, uint64_t stream_key,
					 double *keys, cudaStream_t stream)
{
	int64_t		blocks = (a->n + 255) / 256;

	if (blocks > 65535 * 8)
		blocks = 65535 * 8;
	kmg_random_keys_kernel<<<(unsigned) blocks, 256, 0, stream>>>(hashes, a->W, a->n,
																   stream_key, keys);
	return cudaGetLastError();
}

/* Centroids c0 .. c0 + count - 1 become the given rows (filter rows of X). */
__global__ void
kmg_take_rows_kernel(kmg_args a, const int32_t *rows, int c0)
{
	const int	t = blockIdx.x;
	const int	r = rows[t];
	const float *x = a.X + (size_t) r * a.dp;
	float	   *c = a.C + (size_t) (c0 + t) * a.dp;

	for (int i = threadIdx.x; i < a.dp; i += blockDim.x)
		c[i] = x[i];
}

cudaError_t
kmg_take_rows(const kmg_args *a, const int32_t *rows, int count, int c0, cudaStream_t stream)
{
	if (count <= 0)
		return cudaSuccess;
	kmg_take_rows_kernel<<<count, 128, 0, stream>>>(*a, rows, c0);
	return cudaGetLastError();
}

/* Per-block outputs of select and potential. */
typedef struct kmg_pp_part
{
	double		key[KMG_PP_LMAX];
	int			row[KMG_PP_LMAX];
	double		fkey;			/* fallback */
	int			frow;
	int			pad;
	double		pot[KMG_PP_LMAX];
} kmg_pp_part;

size_t
kmg_pp_part_bytes(int nblocks)
{
	return (size_t) nblocks * sizeof(kmg_pp_part) + sizeof(kmg_pp_state);
}

/*
 * Select (see the file header).  Each thread keeps its L smallest keys
 * sorted in a small local array (an insertion is rare once it is full);
 * the block then pops the overall smallest L times.
 */
__global__ void __launch_bounds__(KMG_SEED_NT)
kmg_pp_select_kernel(kmg_args a, const uint64_t *__restrict__ hashes, float *__restrict__ d2,
					 const float *__restrict__ dist, kmg_pp_part *part,
					 const kmg_pp_state *state, int step, int L, uint64_t stream_key)
{
	__shared__ double skey[KMG_SEED_NT / 32];
	__shared__ int srow[KMG_SEED_NT / 32];
	double		lk[KMG_PP_LMAX];
	int			lr[KMG_PP_LMAX];
	int			cnt = 0;
	double		fk = INFINITY;
	int			fr = INT_MAX;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	const float *dprev = NULL;

	if (step >= 1)
		dprev = dist + (size_t) (step == 1 ? 0 : state->chosen) * a.n;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride)
	{
		const double w = a.W != NULL ? (double) a.W[i] : 1.0;
		double		key;

		if (step == 0)
			key = km_sample_key(hashes[i], stream_key, w);
		else
		{
			float		v = dprev[i];

			if (step >= 2)
			{
				float		o = d2[i];

				v = v < o ? v : o;
			}
			d2[i] = v;
			if (!(w > 0.0))
				continue;
			key = km_sample_key(hashes[i], stream_key, w * (double) v);
			{
				double		kf = km_sample_key(hashes[i], stream_key, w);

				if (kmg_before(kf, (int) i, fk, fr))
				{
					fk = kf;
					fr = (int) i;
				}
			}
		}
		if (cnt == L && !kmg_before(key, (int) i, lk[L - 1], lr[L - 1]))
			continue;
		{
			int			p = cnt < L ? cnt++ : L - 1;

			while (p > 0 && kmg_before(key, (int) i, lk[p - 1], lr[p - 1]))
			{
				lk[p] = lk[p - 1];
				lr[p] = lr[p - 1];
				p--;
			}
			lk[p] = key;
			lr[p] = (int) i;
		}
	}

	/* the block's L smallest: pop the head L times */
	{
		int			head = 0;
		kmg_pp_part *out = part + blockIdx.x;

		for (int l = 0; l < L; l++)
		{
			double		key = head < cnt ? lk[head] : INFINITY;
			int			row = head < cnt ? lr[head] : INT_MAX;
			const int	mine = row;

			kmg_block_min(key, row, skey, srow);
			if (row == mine && head < cnt && row != INT_MAX)
				head++;
			if (threadIdx.x == 0)
			{
				out->key[l] = key;
				out->row[l] = row;
			}
		}
		kmg_block_min(fk, fr, skey, srow);
		if (threadIdx.x == 0)
		{
			out->fkey = fk;
			out->frow = fr;
		}
	}
}

/* Merge (one block): the candidates of this step. */
__global__ void __launch_bounds__(KMG_SEED_NT)
kmg_pp_merge_kernel(const kmg_pp_part *part, int nblocks, kmg_pp_state *state, int step, int L)
{
	__shared__ double skey[KMG_SEED_NT / 32];
	__shared__ int srow[KMG_SEED_NT / 32];
	__shared__ int sblk[KMG_SEED_NT / 32];
	__shared__ int heads[1024];
	const int	tid = threadIdx.x;
	int			ncand = 0;

	/* nblocks <= 1024 (the launcher caps the grid) */
	for (int b = tid; b < nblocks; b += blockDim.x)
		heads[b] = 0;
	__syncthreads();
	for (int l = 0; l < L; l++)
	{
		double		key = INFINITY;
		int			row = INT_MAX;
		int			blk = -1;

		for (int b = tid; b < nblocks; b += blockDim.x)
		{
			const int	h = heads[b];

			if (h < L && kmg_before(part[b].key[h], part[b].row[h], key, row))
			{
				key = part[b].key[h];
				row = part[b].row[h];
				blk = b;
			}
		}
		/* block min carrying the source block */
		for (int o = 16; o > 0; o >>= 1)
		{
			double		ok = __shfl_xor_sync(0xffffffffu, key, o);
			int			orow = __shfl_xor_sync(0xffffffffu, row, o);
			int			ob = __shfl_xor_sync(0xffffffffu, blk, o);

			if (kmg_before(ok, orow, key, row))
			{
				key = ok;
				row = orow;
				blk = ob;
			}
		}
		if ((tid & 31) == 0)
		{
			skey[tid >> 5] = key;
			srow[tid >> 5] = row;
			sblk[tid >> 5] = blk;
		}
		__syncthreads();
		if (tid == 0)
		{
			key = skey[0];
			row = srow[0];
			blk = sblk[0];
			for (int w = 1; w < KMG_SEED_NT / 32; w++)
				if (kmg_before(skey[w], srow[w], key, row))
				{
					key = skey[w];
					row = srow[w];
					blk = sblk[w];
				}
			if (blk >= 0)
				heads[blk]++;
			/* step 0 takes its single draw whatever its key */
			if (row != INT_MAX && (step == 0 || isfinite(key)))
			{
				state->key[ncand] = key;
				state->row[ncand] = row;
				ncand++;
			}
		}
		__syncthreads();
	}
	if (tid == 0)
	{
		if (ncand == 0)
		{
			/* fewer distinct rows than k: the smallest key under w */
			double		key = INFINITY;
			int			row = INT_MAX;

			for (int b = 0; b < nblocks; b++)
				if (kmg_before(part[b].fkey, part[b].frow, key, row))
				{
					key = part[b].fkey;
					row = part[b].frow;
				}
			if (row == INT_MAX)
				row = 0;
			state->key[0] = key;
			state->row[0] = row;
			ncand = 1;
		}
		state->ncand = ncand;
	}
}

/*
 * Potential: distances to the candidates (stored for the next select) and
 * each block's sum of w min(D2, dist) per candidate, in a fixed tree order.
 * LB >= ncand: the register tile of candidates.
 */
template <int LB>
__global__ void __launch_bounds__(KMG_SEED_NT)
kmg_pp_potential_kernel(kmg_args a, const float *__restrict__ d2, float *__restrict__ dist,
						kmg_pp_part *part, const kmg_pp_state *state, int step)
{
	__shared__ double red[KMG_SEED_NT / 32][LB];
	__shared__ int srow[LB];
	const int	ncand = state->ncand;
	const int	q4 = a.dp / 4;
	const int64_t stride = (int64_t) gridDim.x * blockDim.x;
	double		pot[LB];

	if (threadIdx.x < LB)
		srow[threadIdx.x] = state->row[threadIdx.x < ncand ? threadIdx.x : 0];
	__syncthreads();
#pragma unroll
	for (int l = 0; l < LB; l++)
		pot[l] = 0.0;
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride)
	{
		const float4 *x4 = reinterpret_cast<const float4 *>(a.X + (size_t) i * a.dp);
		float		acc[LB];

#pragma unroll
		for (int l = 0; l < LB; l++)
			acc[l] = 0.0f;
		for (int q = 0; q < q4; q++)
		{
			const float4 x = x4[q];

#pragma unroll
			for (int l = 0; l < LB; l++)
				if (l < ncand)
				{
					const float4 c = reinterpret_cast<const float4 *>(a.X + (size_t) srow[l] * a.dp)[q];
					float		t;

					t = __fsub_rn(x.x, c.x);
					acc[l] = __fadd_rn(acc[l], __fmul_rn(t, t));
					t = __fsub_rn(x.y, c.y);
					acc[l] = __fadd_rn(acc[l], __fmul_rn(t, t));
					t = __fsub_rn(x.z, c.z);
					acc[l] = __fadd_rn(acc[l], __fmul_rn(t, t));
					t = __fsub_rn(x.w, c.w);
					acc[l] = __fadd_rn(acc[l], __fmul_rn(t, t));
				}
		}
		{
			const double w = a.W != NULL ? (double) a.W[i] : 1.0;
			const float dcur = step >= 1 ? d2[i] : INFINITY;

#pragma unroll
			for (int l = 0; l < LB; l++)
				if (l < ncand)
				{
					dist[(size_t) l * a.n + i] = acc[l];
					if (step >= 1)
						pot[l] += w * (double) (acc[l] < dcur ? acc[l] : dcur);
				}
		}
	}
	if (step < 1)
		return;
	/* block sums per candidate: warps, then warps in order */
#pragma unroll
	for (int l = 0; l < LB; l++)
		if (l < ncand)
		{
			double		v = pot[l];

			for (int o = 16; o > 0; o >>= 1)
				v += __shfl_xor_sync(0xffffffffu, v, o);
			if ((threadIdx.x & 31) == 0)
				red[threadIdx.x >> 5][l] = v;
		}
	__syncthreads();
	if (threadIdx.x < ncand)
	{
		double		v = red[0][threadIdx.x];

		for (int w = 1; w < KMG_SEED_NT / 32; w++)
			v += red[w][threadIdx.x];
		part[blockIdx.x].pot[threadIdx.x] = v;
	}
}

/* Choose (one block): the candidate with the lowest potential becomes centroid s. */
__global__ void
kmg_pp_choose_kernel(kmg_args a, const kmg_pp_part *part, int nblocks, kmg_pp_state *state,
					 int step)
{
	__shared__ int s_best;
	const int	tid = threadIdx.x;
	const int	ncand = state->ncand;
	__shared__ double spot[KMG_PP_LMAX];

	if (tid < ncand)
	{
		double		p = 0.0;

		if (step >= 1)
			for (int b = 0; b < nblocks; b++)
				p += part[b].pot[tid];
		spot[tid] = p;
	}
	__syncthreads();
	if (tid == 0)
	{
		int			best = 0;

		for (int l = 1; l < ncand; l++)
			if (spot[l] < spot[best])
				best = l;
		s_best = best;
		state->chosen = best;
	}
	__syncthreads();
	{
		const float *x = a.X + (size_t) state->row[s_best] * a.dp;
		float	   *c = a.C + (size_t) step * a.dp;

		for (int i = tid; i < a.dp; i += blockDim.x)
			c[i] = x[i];
	}
}

/*
 * One k-means++ step (all four kernels, queued).  sb->part must hold
 * sb->nblocks kmg_pp_part and sb->state one kmg_pp_state.
 */
cudaError_t
kmg_pp_step(const kmg_args *a, const kmg_seed_bufs *sb, int step, int L,
			uint64_t stream_key, cudaStream_t stream)
{
	kmg_pp_part *part = (kmg_pp_part *) sb->part;
	kmg_pp_state *state = (kmg_pp_state *) sb->state;
	const int	Ls = step == 0 ? 1 : L;
	cudaError_t e;

	kmg_pp_select_kernel<<<sb->nblocks, KMG_SEED_NT, 0, stream>>>(*a, sb->hashes, sb->d2,
																   sb->dist, part, state,
																   step, Ls, stream_key);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	kmg_pp_merge_kernel<<<1, KMG_SEED_NT, 0, stream>>>(part, sb->nblocks, state, step, Ls);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	if (Ls <= 4)
		kmg_pp_potential_kernel<4><<<sb->nblocks, KMG_SEED_NT, 0, stream>>>(*a, sb->d2, sb->dist,
																			 part, state, step);
	else if (Ls <= 8)
		kmg_pp_potential_kernel<8><<<sb->nblocks, KMG_SEED_NT, 0, stream>>>(*a, sb->d2, sb->dist,
																			 part, state, step);
	else if (Ls <= 16)
		kmg_pp_potential_kernel<16><<<sb->nblocks, KMG_SEED_NT, 0, stream>>>(*a, sb->d2, sb->dist,
																			  part, state, step);
	else
		kmg_pp_potential_kernel<KMG_PP_LMAX><<<sb->nblocks, KMG_SEED_NT, 0, stream>>>(*a, sb->d2,
																				   sb->dist, part,
																				   state, step);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	kmg_pp_choose_kernel<<<1, 32, 0, stream>>>(*a, part, sb->nblocks, state, step);
	return cudaGetLastError();
}
