/*
 * reduce.cu
 *	  The end of a wide or direct fused pass in an iteration: the blocks'
 *	  partial sums added in block order into the cluster sums, and, in the
 *	  reduction's last block, the end of the iteration.
 *
 * Plain C reference: the sums of km_ref_lloyd (kernels/bench/ref_kmeans.c);
 * bench_kernels.cu checks the sums of every fused pass against C loops.
 *
 * Why it is cheap enough: the partials are nblocks x k x (dp + 4) doubles
 * (16.6 MB for 70000 x 784 x 10 on 264 blocks), read once, coalesced, by
 * k x ceil((dp + 4) / 32) blocks; the finalize that follows needs no launch
 * of its own.
 */
#include "kmg_common.cuh"
#include "kmg_device.cuh"
#include "assign/assign.cuh"
#include "update/finalize_block.cuh"

/*
 * Cluster sums from the per-block partials, in block order: 32 columns of
 * cluster blockIdx.y per block, each column's blocks split into 8 slices
 * (b = slice, slice + 8, ...) summed by 8 warps, the slices then added in
 * order.  The last block to finish counts the moved rows and the clusters
 * without weight and ends the iteration (finalize_block.cuh), which one
 * block can do: every fused plan has k <= KMG_FIN1_KMAX (dispatch.cu).
 */
__global__ void __launch_bounds__(256)
kmg_reduce_finalize_kernel(const __grid_constant__ kmg_args a)
{
	__shared__ double sred[8][32];
	const int	cw = KMG_CW(a.dp);
	const int	j = blockIdx.y;
	const int	slice = threadIdx.x >> 5;
	const int	c = blockIdx.x * 32 + (threadIdx.x & 31);
	const size_t cells = (size_t) a.k * cw;

	if (a.lloyd && *(volatile int *) &a.ctl->stop != KMG_RUN)
		return;
	{
		double		s = 0.0;

		if (c < cw)
		{
			const double *p = a.part + (size_t) j * cw + c;

#pragma unroll 4
			for (int b = slice; b < a.nblocks; b += 8)
				s += p[(size_t) b * cells];
		}
		sred[slice][threadIdx.x & 31] = s;
	}
	__syncthreads();
	if (slice == 0 && c < cw)
	{
		double		s = sred[0][threadIdx.x];

		for (int sl = 1; sl < 8; sl++)
			s += sred[sl][threadIdx.x];
		a.clus[(size_t) j * cw + c] = s;
	}
	{
		/* the last block counts, then finishes the iteration */
		__shared__ int s_last,
					s_red[2][8];
		int			moved = 0,
					nempty = 0;

		__threadfence();
		__syncthreads();
		if (threadIdx.x == 0)
			s_last = atomicAdd(&a.ctl->ticket2, 1u) == gridDim.x * gridDim.y - 1;
		__syncthreads();
		if (!s_last)
			return;
		__threadfence();
		for (int b = threadIdx.x; b < a.nblocks; b += blockDim.x)
			moved += *(volatile int *) &a.part_moved[b];
		for (int jj = threadIdx.x; jj < a.k; jj += blockDim.x)
			nempty += !(*(volatile double *) &a.clus[(size_t) jj * cw + a.dp] > 0.0);
		for (int o = 16; o > 0; o >>= 1)
		{
			moved += __shfl_xor_sync(0xffffffffu, moved, o);
			nempty += __shfl_xor_sync(0xffffffffu, nempty, o);
		}
		if ((threadIdx.x & 31) == 0)
		{
			s_red[0][threadIdx.x >> 5] = moved;
			s_red[1][threadIdx.x >> 5] = nempty;
		}
		__syncthreads();
		moved = 0;
		nempty = 0;
		for (int w = 0; w < 8; w++)
		{
			moved += s_red[0][w];
			nempty += s_red[1][w];
		}
		if (threadIdx.x == 0)
		{
			a.ctl->moved = moved;
			a.ctl->nempty = nempty;
			a.ctl->ticket2 = 0;
		}
		kmg_finalize_block(a, KMG_FIN_ITER, moved, nempty, a.clus);
	}
}

/* The reduction of the wide and direct passes' partials, ending the iteration. */
cudaError_t
kmg_reduce_finalize(const kmg_args *a, cudaStream_t stream)
{
	dim3		grid((KMG_CW(a->dp) + 31) / 32, a->k);

	kmg_reduce_finalize_kernel<<<grid, 256, 0, stream>>>(*a);
	return cudaGetLastError();
}
