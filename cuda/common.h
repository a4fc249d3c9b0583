// Error checks for CUDA, cuBLAS and cuDNN calls: a failure throws tcn::Error
// with the call's status string, the file and the line (after llm.c's
// cuda_common.h). Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess)                                                               \
      TCN_FAIL("CUDA error: ", cudaGetErrorString(err_), " (", #call, ") at ", __FILE__, ":", \
               __LINE__);                                                                  \
  } while (0)
