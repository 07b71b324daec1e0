/*
 * km_hd.h
 *	  How a function that both compilers build is declared.
 *
 * The arithmetic headers of this folder (km_exact.h, km_fixsum.h,
 * km_hash.h) and the k-means++ arithmetic of the CUDA engine
 * (kernels/seed/seed_pp.h) are compiled as plain C by the CPU engine, the
 * SQL layer and the kernels' C references, and by nvcc for both the host
 * and the device side of the GPU engine.  KM_HD gives their functions the
 * qualifiers each compiler needs; the functions themselves are written so
 * that every compiler rounds every step the same way (see km_exact.h).
 */
#ifndef KM_HD_H
#define KM_HD_H

#ifdef __CUDACC__
#define KM_HD static __host__ __device__ __forceinline__
#else
#define KM_HD static inline
#endif

#endif							/* KM_HD_H */
