// Error checks for CUDA, cuBLAS and cuDNN calls: a failure throws tcn::Error
// with the call's status string, the file and the line (after llm.c's
// cuda_common.h), and the one way to launch a kernel. Included only by .cu files.
//
// Built with nvcc, <cuda_runtime.h> is CUDA's; built with TCN_CUDA=EMU it is the
// emulated device's (cuda/emu/include/), and the same .cu files run on the CPU.
#pragma once

#include <cuda_runtime.h>

#include "tcn/core/error.h"

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess)                                                               \
      TCN_FAIL("CUDA error: ", cudaGetErrorString(err_), " (", #call, ") at ", __FILE__, ":", \
               __LINE__);                                                                  \
  } while (0)

// TCN_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...) launches a
// kernel: `kernel<<<grid, block, shared_bytes, stream>>>(args...)` under nvcc,
// the emulator's launcher otherwise (cuda/emu/emu.h). `kernel` may be a
// template with some arguments given (map_kernel<T, K>); the rest are deduced
// from args, as with <<<>>>. Check cudaGetLastError() after it, as after <<<>>>.
#if defined(__CUDACC__)
#define TCN_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#else
#define TCN_LAUNCH(grid, block, smem, stream, ...)                                                 \
  ::tcn::emu::Launch((grid), (block), (smem), (stream), ::tcn::emu::LaunchSite{#__VA_ARGS__, __FILE__, __LINE__}, \
                     [](auto&... emu_args_) { __VA_ARGS__(emu_args_...); })
#endif
