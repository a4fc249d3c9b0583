// Thrust on tcn's streams. Under nvcc, the CUDA backend on the given stream
// (thrust::cuda::par synchronises the stream after each algorithm). On the
// emulated device, Thrust's host (CPP) backend, which runs at once on the
// calling thread: the stream's queued work must run first, so this waits for
// the stream (a host sync, counted as one, and refused during stream capture,
// as Thrust's temporary allocations are on a GPU).
#pragma once

#include <thrust/execution_policy.h>

#include "cuda/common.h"

namespace tcn::cuda {

#if defined(__CUDACC__)
inline auto thrust_on(cudaStream_t s) { return thrust::cuda::par.on(s); }
#else
inline auto thrust_on(cudaStream_t s) {
  CUDA_CHECK(cudaStreamSynchronize(s));
  return thrust::cpp::par;
}
#endif

}  // namespace tcn::cuda
