// CUDA device runtime: device discovery, the caching allocator over cudaMalloc
// (core/caching_allocator.h), and host/device copies.
#include "core/devices.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/common.h"
#ifdef TCN_CUDA_EMU
#include "cuda/emu/emu.h"
#endif

namespace tcn::cuda {

namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asks the driver once. A machine without a GPU (or with a driver older than the
// toolkit) answers with an error code, which we keep as the reason.
const Probe& probe() {
  static Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      r.reason = cudaGetErrorString(err);
      cudaGetLastError();  // clear the sticky error
    } else if (n == 0) {
      r.reason = "no CUDA device found";
    } else {
      r.count = n;
    }
    return r;
  }();
  return p;
}

// The call-site counters (cuda/common.h's site:: functions). Captured launches
// and GEMMs go to the capture's own tally, which Graph keeps and adds per
// launch. Relaxed atomics: a count, not an ordering.
struct SiteCounts {
  std::atomic<int64_t> launches{0}, kernels_run{0}, graph_launches{0}, gemms{0}, gemm_launches{0}, host_syncs{0},
      allocations{0};
  std::atomic<bool> capturing{false};  // Graph's capture is global: one at a time, process-wide
  std::atomic<int64_t> captured_kernels{0}, captured_gemms{0};
};
SiteCounts& site_counts() {
  static SiteCounts c;
  return c;
}
void bump(std::atomic<int64_t>& v, int64_t n = 1) { v.fetch_add(n, std::memory_order_relaxed); }

// cudaMalloc for one device, returning nullptr (not throwing) when the device
// is out of memory, so the caching allocator can release its cache and retry.
void* raw_cuda_malloc(int device, size_t n) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) {
    cudaGetLastError();  // clear the error: out of memory is reported by the caller
    return nullptr;
  }
  site::allocation();
  return p;
}

void raw_cuda_free(void* p) {
  cudaFree(p);
  site::host_sync();  // cudaFree waits for the device
}

std::mutex& allocators_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::unique_ptr<CachingAllocator>>& allocators() {
  static std::vector<std::unique_ptr<CachingAllocator>> a;
  return a;
}

}  // namespace

bool built_with_cuda() { return true; }
#ifdef TCN_CUDA_EMU
bool emulated() { return true; }
bool verified_on_gpu() { return false; }  // emulation is not a GPU
#else
bool emulated() { return false; }
// Set to true in the commit that records a passing tools/device_check.sh in the README's results.
bool verified_on_gpu() { return false; }
#endif
int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

Allocator* allocator(int index) {
  TCN_CHECK(is_available(), "cuda:", index, " requested but no CUDA device is usable: ",
            unavailable_reason());
  TCN_CHECK(index >= 0 && index < device_count(), "cuda:", index, " requested but only ",
            device_count(), " CUDA device(s) are visible");
  std::lock_guard<std::mutex> lock(allocators_mutex());
  auto& all = allocators();
  if (all.empty()) all.resize(device_count());
  if (!all[index])
    all[index] = std::make_unique<CachingAllocator>(
        "cuda:" + std::to_string(index), [index](size_t n) { return raw_cuda_malloc(index, n); },
        raw_cuda_free, ~size_t{0});
  return all[index].get();
}

CachingAllocator* caching_allocator(int index) { return static_cast<CachingAllocator*>(allocator(index)); }

MemoryStats memory_stats(int index) {
  std::lock_guard<std::mutex> lock(allocators_mutex());
  auto& all = allocators();
  if (index < 0 || index >= static_cast<int>(all.size()) || !all[index]) return {};
  return all[index]->stats();
}

// Copies to and from the host wait for the device's earlier work, so they
// raise what the device-side checks found meanwhile.
void copy_host_to_device(void* dst, const void* src, size_t n) {
  if (n) {
    CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
    site::host_sync();
  }
  raise_device_errors();
}
void copy_device_to_host(void* dst, const void* src, size_t n) {
  if (n) {
    CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
    site::host_sync();
  }
  raise_device_errors();
}
void copy_device_to_device(void* dst, const void* src, size_t n) {  // does not wait for the device
  if (n) CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
}
void synchronize() {
  CUDA_CHECK(cudaDeviceSynchronize());
  site::host_sync();
  raise_device_errors();
}

namespace site {
void kernel_launch() {
  SiteCounts& c = site_counts();
  if (c.capturing.load(std::memory_order_relaxed)) {
    bump(c.captured_kernels);
  } else {
    bump(c.launches);
    bump(c.kernels_run);
  }
}
void gemm() {
  SiteCounts& c = site_counts();
  if (c.capturing.load(std::memory_order_relaxed)) {
    bump(c.captured_gemms);
  } else {
    bump(c.gemm_launches);
    bump(c.gemms);
  }
}
void host_sync() { bump(site_counts().host_syncs); }
void allocation() { bump(site_counts().allocations); }
void begin_capture() {
  SiteCounts& c = site_counts();
  c.captured_kernels = 0;
  c.captured_gemms = 0;
  c.capturing = true;
}
std::pair<int64_t, int64_t> end_capture() {
  SiteCounts& c = site_counts();
  c.capturing = false;
  return {c.captured_kernels.load(), c.captured_gemms.load()};
}
void graph_launch(int64_t kernels, int64_t gemms) {
  SiteCounts& c = site_counts();
  bump(c.graph_launches);
  bump(c.kernels_run, kernels);
  bump(c.gemms, gemms);
}
}  // namespace site

DeviceCounters call_site_counters() {
  const SiteCounts& c = site_counts();
  DeviceCounters d;
  d.launches = c.launches.load();
  d.kernels_run = c.kernels_run.load();
  d.graph_launches = c.graph_launches.load();
  d.gemms = c.gemms.load();
  d.gemm_launches = c.gemm_launches.load();
  d.host_syncs = c.host_syncs.load();
  d.allocations = c.allocations.load();
  return d;  // queue_waits: a full launch queue is not a call of ours
}

#ifdef TCN_CUDA_EMU
bool counters_available() { return true; }
DeviceCounters counters() {
  const emu::Counters c = emu::counters();
  DeviceCounters d;
  d.launches = static_cast<int64_t>(c.launches);
  d.kernels_run = static_cast<int64_t>(c.kernels_run);
  d.graph_launches = static_cast<int64_t>(c.graph_launches);
  d.gemms = static_cast<int64_t>(c.cublas_calls);
  d.gemm_launches = static_cast<int64_t>(c.cublas_launches);
  d.host_syncs = static_cast<int64_t>(c.host_syncs);
  d.queue_waits = static_cast<int64_t>(c.implicit_syncs);
  d.allocations = static_cast<int64_t>(c.allocations);
  return d;
}
#else
bool counters_available() { return true; }
DeviceCounters counters() { return call_site_counters(); }
#endif

}  // namespace tcn::cuda
