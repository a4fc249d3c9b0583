// Thrust on tcn's streams, and the one sort tcn needs. Under nvcc, the CUDA
// backend on the given stream (thrust::cuda::par synchronises the stream after
// each algorithm). On the
// emulated device, Thrust's host (CPP) backend, which runs at once on the
// calling thread: the stream's queued work must run first, so this waits for
// the stream (a host sync, counted as one, and refused during stream capture,
// as Thrust's temporary allocations are on a GPU).
#pragma once

#include <thrust/execution_policy.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/common.h"
#if !defined(__CUDACC__)
#include "cuda/emu/emu.h"
#endif

namespace tcn::cuda {

// Either way, one host wait per algorithm (counted: core/devices.h).
#if defined(__CUDACC__)
inline auto thrust_on(cudaStream_t s) {
  site::host_sync();  // the algorithm's own wait at its end
  return thrust::cuda::par.on(s);
}
// Hold one around a Thrust call: on the emulated device, Thrust's host backend
// works on device memory from the calling thread, which the emulator otherwise
// keeps inaccessible to host code (cuda/emu/emu.h, HostAccess).
struct ThrustScope {};
#else
inline auto thrust_on(cudaStream_t s) {
  CUDA_CHECK(cudaStreamSynchronize(s));
  site::host_sync();
  return thrust::cpp::par;
}
using ThrustScope = tcn::emu::HostAccess;
#endif

// keys[0, n) sorted stably on stream s, vals moved along with them. On a GPU,
// Thrust's (it synchronises the stream). On the emulated device, std's on the
// host after waiting for the stream (device memory is host memory there):
// Thrust's host-backend sorts bind a reference to a null policy pointer in
// their temporary storage (thrust/detail/reference.h:330, undefined behaviour
// that UBSan stops on), and the emulator is not where Thrust's sort is tested.
inline void stable_sort_by_key(cudaStream_t s, int64_t* keys, int64_t* vals, int64_t n) {
#if defined(__CUDACC__)
  thrust::stable_sort_by_key(thrust_on(s), keys, keys + n, vals);
#else
  CUDA_CHECK(cudaStreamSynchronize(s));
  site::host_sync();
  ThrustScope on_host;
  std::vector<std::pair<int64_t, int64_t>> kv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) kv[static_cast<size_t>(i)] = {keys[i], vals[i]};
  std::stable_sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (int64_t i = 0; i < n; ++i) std::tie(keys[i], vals[i]) = kv[static_cast<size_t>(i)];
#endif
}

}  // namespace tcn::cuda
