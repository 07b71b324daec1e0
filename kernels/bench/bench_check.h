/*
 * bench_check.h
 *	  CK(call): a CUDA runtime call the harnesses in this folder need to
 *	  succeed; otherwise the harness stops, naming the call, its file and
 *	  line, and CUDA's message.
 */
#ifndef BENCH_CHECK_H
#define BENCH_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

#endif							/* BENCH_CHECK_H */
