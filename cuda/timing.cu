// The profiler's clock on the device: events recorded on the stream between
// ops (core/devices.h EventTimer), and NVTX ranges for Nsight.
#include "cuda/context.cuh"
#include "core/devices.h"
#ifndef TCN_CUDA_EMU
#include <nvtx3/nvToolsExt.h>
#endif

namespace tcn::cuda {

EventTimer::EventTimer(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  origin_ = e;
  CUDA_CHECK(cudaEventRecord(e, stream(device)));
}

EventTimer::~EventTimer() {
  // No throwing from here: a failed destroy leaves an event behind, nothing worse.
  for (void* e : pending_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  for (void* e : free_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (origin_) cudaEventDestroy(static_cast<cudaEvent_t>(origin_));
}

int32_t EventTimer::mark() {
  cudaEvent_t e = nullptr;
  if (!free_.empty()) {
    e = static_cast<cudaEvent_t>(free_.back());
    free_.pop_back();
  } else {
    CUDA_CHECK(cudaEventCreate(&e));
  }
  pending_.push_back(e);
  CUDA_CHECK(cudaEventRecord(e, stream(device_)));
  return static_cast<int32_t>(ms_.size() + pending_.size() - 1);
}

void EventTimer::collect() {
  if (pending_.empty()) return;
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(pending_.back())));
  site::host_sync();
  for (void* e : pending_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(origin_), static_cast<cudaEvent_t>(e)));
    ms_.push_back(ms);
    free_.push_back(e);
  }
  pending_.clear();
  raise_device_errors();  // the host waited: what the device-side checks found surfaces here too
}

#ifdef TCN_CUDA_EMU
void nvtx_push(const char*) {}
void nvtx_pop() {}
#else
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }
#endif

}  // namespace tcn::cuda
