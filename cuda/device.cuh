// Device-side helpers shared by the kernels of cuda/*.cu, valid both under nvcc
// and on the emulated device.
#pragma once

#include "cuda/common.h"

namespace tcn::cuda {

// The block's dynamic shared memory (the launch's third <<<>>> argument), as T.
// `extern __shared__ T x[]` would do under nvcc, but not for two kernels with
// different T, nor on the emulator: this is the one spelling for both.
template <class T>
__device__ __forceinline__ T* dynamic_shared() {
#if defined(__CUDACC__)
  extern __shared__ __align__(16) unsigned char tcn_dynamic_smem[];
  return reinterpret_cast<T*>(tcn_dynamic_smem);
#else
  return static_cast<T*>(::tcn::emu::dynamic_shared_memory());
#endif
}

// combine(v of every thread) over the block, returned to all of them: a tree in
// shared memory sh (blockDim.x entries, a power of two), the same steps in the
// same order on every run (deterministic). Every thread of the block must call
// it; it ends with a barrier, so sh may be reused at once.
template <class T, class Combine>
__device__ __forceinline__ T block_reduce(T v, T* sh, Combine combine) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = combine(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const T total = sh[0];
  __syncthreads();
  return total;
}

template <class T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
  return block_reduce(v, sh, [](T a, T b) { return a + b; });
}

// a * b and a + b each rounded once, never contracted into an FMA with a
// neighbouring operation (nvcc contracts `a*b + c` by default). For kernels
// whose results must equal the CPU's bit for bit, which computes them
// uncontracted.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

}  // namespace tcn::cuda
