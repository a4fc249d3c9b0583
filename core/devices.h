// tcn's device layer: the CUDA devices as the rest of tcn sees them (discovery, streams,
// synchronisation, memory, graphs, counters). Plain C++ declarations, here in
// core/ because the tensor's storage, the profiler's recorder and the step graph
// stand on them; the implementation is the layer above, cuda/ (devices.cu,
// graph.cu, timing.cu) when built with CUDA, and cuda/nocuda/devices.cpp
// otherwise (where every device call explains that tcn was built without CUDA).
//
// "No GPU" is a normal state, never a crash: device_count() is 0 and
// unavailable_reason() says why (no device, driver too old, built without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/caching_allocator.h"

namespace tcn::cuda {

bool built_with_cuda();
// Whether the CUDA device is the emulated one (TCN_CUDA=EMU): kernels run on
// the CPU, to check their logic; never a measure of speed, never a GPU.
bool emulated();
// Number of usable CUDA devices (respects CUDA_VISIBLE_DEVICES); 0 when none.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Whether this build's CUDA kernels have passed the CPU-vs-CUDA tests on a real
// GPU (set by hand once tools/device_check.sh has run clean). Until then
// `--device auto` stays on the CPU, and an explicit `--device cuda` warns.
bool verified_on_gpu();
// Why no device is usable ("" when one is).
std::string unavailable_reason();

// The allocator for device `index`; throws tcn::Error naming the reason when the
// device is not usable.
Allocator* allocator(int index);
// The caching allocator's statistics for device `index` (zeros when unused).
MemoryStats memory_stats(int index);
// The same allocator as a CachingAllocator, for its private pools (CUDA graphs).
CachingAllocator* caching_allocator(int index);

// A CUDA graph of the work one device's stream is given between begin_capture
// and end_capture (cudaStreamBeginCapture in global mode ... cudaStreamEndCapture,
// cudaGraphInstantiate), launched as one unit by launch(). During a capture
// nothing runs: kernels are recorded with the arguments they were given, and
// whatever would make the host wait (a copy to the host, a synchronisation, a
// cudaMalloc) fails the capture. core/step_graph.h builds a training step on it.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void begin_capture(int device);
  // Ends the capture and instantiates the graph. Returns "" on success, or the
  // reason CUDA gives when the capture failed (no graph then; the error cleared).
  std::string end_capture();
  void launch();  // one cudaGraphLaunch on the device's stream; no host wait
  bool ready() const { return exec_ != nullptr; }
  size_t nodes() const { return nodes_; }  // kernels, copies and GEMMs recorded
  void reset();                            // destroys the graph

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int device_ = -1;
  size_t nodes_ = 0;
  int64_t kernels_ = 0, gemms_ = 0;  // tcn's kernel launches and GEMMs captured: what one launch runs
};

// Timing marks on a device's stream, for the profiler (core/profile.h). mark()
// records an event on the stream where the work stands now (no host wait);
// collect() waits for the stream, after which ms(m) is the device's time from
// construction to mark m. Every mark is an event until collect(), which the
// profiler calls once, when it stops (a profile of N steps holds N steps'
// events); after collect() the events are reused.
class EventTimer {
 public:
  explicit EventTimer(int device);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  int32_t mark();
  void collect();
  double ms(int32_t mark) const { return ms_.at(static_cast<size_t>(mark)); }

 private:
  int device_;
  void* origin_ = nullptr;          // cudaEvent_t
  std::vector<void*> pending_;      // events of the marks from ms_.size() on
  std::vector<void*> free_;         // collected, ready to record again
  std::vector<double> ms_;
};
// NVTX ranges (Nsight Systems shows them on the host timeline); no-ops on the
// emulated device.
void nvtx_push(const char* name);
void nvtx_pop();

// Copies between host and device memory: synchronous cudaMemcpy on the legacy
// default stream, which orders them with tcn's streams (created blocking).
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);
void copy_device_to_device(void* dst, const void* src, size_t nbytes);
void synchronize();
// Throws the first error a device-side input check found since it was last
// raised (an embedding index or cross-entropy target out of range; see
// cuda/context.cuh), and clears it. Every function above that waits for the
// device calls it; call it after waiting some other way.
void raise_device_errors();

// How a stretch of work talked to the device: what `charlm bench --device cuda`
// prints per step and what the tests of the GPU step check ("no host
// synchronisation, no allocation in a steady step").
//
// Two counts exist. The emulated device (TCN_CUDA=EMU) counts inside the CUDA
// API it implements, so it sees every launch, copy, wait and cudaMalloc. tcn's
// own call sites count too, in both builds: every kernel launch goes through
// TCN_LAUNCH (cuda/common.h), every GEMM through cuda/gemm.cu, every graph
// launch through Graph, and every host wait and cudaMalloc through
// cuda/devices.cu, cuda/timing.cu and cuda/thrust.cuh. counters() is the
// emulator's count on the emulated device and the call sites' on a GPU;
// call_site_counters() is always the call sites'. A test checks on every CI run
// that the two agree on whole training steps, eager and captured, so the call
// sites miss nothing of ours. What they cannot see on a GPU: the kernels a
// library launches inside one call (a cuBLAS GEMM is counted as one GEMM, not
// as its one or two kernels; cuDNN and NCCL calls not at all), a library's own
// waits and allocations, and waits for a full launch queue (queue_waits is 0).
struct DeviceCounters {
  int64_t launches = 0;        // kernels launched by the host (a graph's kernels not included)
  int64_t kernels_run = 0;     // kernels executed, a graph's included
  int64_t graph_launches = 0;  // cudaGraphLaunch
  int64_t gemms = 0;           // cuBLAS GEMMs run, a graph's included
  int64_t gemm_launches = 0;   // cuBLAS GEMMs issued by the host (as launches: a graph's not included)
  int64_t host_syncs = 0;      // times the host waited for the device, for any reason
  int64_t queue_waits = 0;     // of those, waits because the launch queue was full (1,024 pending on the emulator)
  int64_t allocations = 0;     // cudaMalloc calls (the caching allocator's misses)
  DeviceCounters operator-(const DeviceCounters& o) const {
    return {launches - o.launches,       kernels_run - o.kernels_run, graph_launches - o.graph_launches,
            gemms - o.gemms,             gemm_launches - o.gemm_launches, host_syncs - o.host_syncs,
            queue_waits - o.queue_waits, allocations - o.allocations};
  }
  DeviceCounters operator+(const DeviceCounters& o) const {
    return {launches + o.launches,       kernels_run + o.kernels_run, graph_launches + o.graph_launches,
            gemms + o.gemms,             gemm_launches + o.gemm_launches, host_syncs + o.host_syncs,
            queue_waits + o.queue_waits, allocations + o.allocations};
  }
  // Each field divided by n (per step), rounded to one decimal, as one line.
  std::string per(int64_t n) const {
    auto f = [n](int64_t v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f", static_cast<double>(v) / static_cast<double>(n > 0 ? n : 1));
      std::string s = b;
      return s.size() > 2 && s.substr(s.size() - 2) == ".0" ? s.substr(0, s.size() - 2) : s;
    };
    return f(launches) + " kernel launches, " + f(kernels_run) + " kernels run, " + f(graph_launches) +
           " graph launches, " + f(gemms) + " GEMMs, " + f(host_syncs) + " host syncs" +
           (queue_waits > 0 ? " (" + f(queue_waits) + " of them a full launch queue)" : std::string()) + ", " +
           f(allocations) + " allocations";
  }
};
bool counters_available();  // true wherever CUDA is built in (false in a CPU-only build)
DeviceCounters counters();
DeviceCounters call_site_counters();

}  // namespace tcn::cuda
