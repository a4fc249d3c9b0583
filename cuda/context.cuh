// Per-device CUDA state shared by the kernels: one stream per device that every
// op uses, and a cuBLAS handle bound to it. Included by cuda/*.cu only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/common.h"

#define CUBLAS_CHECK(call)                                                                              \
  do {                                                                                                  \
    cublasStatus_t st_ = (call);                                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                   \
      TCN_FAIL("cuBLAS error: ", cublasGetStatusString(st_), " (", #call, ") at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace tcn::cuda {

// The stream of `device` (created on first use; the device is made current).
cudaStream_t stream(int device);
// The cuBLAS handle of `device`, bound to its stream, in the current math mode.
cublasHandle_t cublas(int device);

// Launch geometry for n independent elements.
inline unsigned grid_for(int64_t n, int block) {
  int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535 * 32 ? g : 65535 * 32);
}

}  // namespace tcn::cuda
