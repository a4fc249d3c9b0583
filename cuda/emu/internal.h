// Shared between the emulator's runtime (runtime.cpp), scheduler
// (scheduler.cpp) and cuBLAS shim (cublas.cpp); not for users.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "emu.h"

namespace tcn::emu {

struct KernelLaunch {
  dim3 grid, block;
  size_t smem = 0;
  LaunchSite site{};
  std::function<void()> thread_body;
};

// Runs every block of a launch; returns "" or what faulted (a __trap).
// Divergent barriers and deadlocks print their sites and abort.
std::string run_grid(const KernelLaunch& launch);
// True once this thread has begun exiting (its thread_local objects, which
// run_grid uses, are gone): the queue then drops its work, whose results
// nothing can read any more.
bool thread_exiting();

// Queues an operation on a stream (or records it into the stream's capture).
// `what` names it in errors. Returns the error of the enqueue itself.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> op);

// Records an error as the last error with a detail that cudaGetErrorString shows.
cudaError_t fail(cudaError_t err, const std::string& detail);

// The allocation [base, base + size) that holds [p, p + n), if any.
struct Region {
  const char* base = nullptr;
  size_t size = 0;
  int kind = 0;  // 1 device, 2 pinned host
};
bool find_region(const void* p, size_t n, Region* out);

// Device memory (memory.cpp): an allocation in the protected mapping (nullptr
// when the mapping is full), and its release (false: not an allocation's start).
void* device_alloc(size_t size);
bool device_free(void* p);

void count_cublas_call();
// A GEMM issued by the host (not into a capture): counted as a launch of its own.
void count_cublas_issue(cudaStream_t stream);

}  // namespace tcn::emu
