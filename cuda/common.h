// Error checks for CUDA, cuBLAS and cuDNN calls: a failure throws tcn::Error
// with the call's status string, the file and the line (after llm.c's
// cuda_common.h), and the one way to launch a kernel. Included only by .cu files.
//
// Built with nvcc, <cuda_runtime.h> is CUDA's; built with TCN_CUDA=EMU it is the
// emulated device's (cuda/emu/include/), and the same .cu files run on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/error.h"

// tcn's call-site counters (cuda::call_site_counters() in core/devices.h adds
// them up): each function notes one event where tcn asks it of CUDA. Inside a
// stream capture (Graph), launches and GEMMs are tallied for the graph, which
// adds them per replay.
namespace tcn::cuda::site {
void kernel_launch();
void gemm();
void host_sync();
void allocation();
// Graph (cuda/graph.cu): a capture's launches and GEMMs are tallied apart;
// end_capture() returns them, and graph_launch() adds them per replay.
void begin_capture();
std::pair<int64_t, int64_t> end_capture();
void graph_launch(int64_t kernels, int64_t gemms);
}  // namespace tcn::cuda::site

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
// Each launch is also counted (cuda::call_site_counters(), core/devices.h).
#if defined(__CUDACC__)
#define TCN_LAUNCH(grid, block, smem, stream, ...) \
  ::tcn::cuda::site::kernel_launch(), __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#else
#define TCN_LAUNCH(grid, block, smem, stream, ...)                                                 \
  ::tcn::cuda::site::kernel_launch(), ::tcn::emu::Launch((grid), (block), (smem), (stream), ::tcn::emu::LaunchSite{#__VA_ARGS__, __FILE__, __LINE__}, \
                     [](auto&... emu_args_) { __VA_ARGS__(emu_args_...); })
#endif
