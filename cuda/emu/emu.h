// The emulated CUDA device's own interface (TCN_CUDA=EMU only): kernel
// launches (what TCN_LAUNCH expands to), the counters that tell how a step
// talks to the device, and the settings that change the schedule.
//
// A launch copies its arguments (as CUDA copies kernel parameters), checks its
// configuration as the GPU does, and queues the kernel on its stream. When the
// queue runs, each block runs on one OS thread (blocks spread over
// TCN_EMU_THREADS threads), each CUDA thread of the block is a fiber that runs
// until a barrier or its end (cuda/emu/scheduler.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "device.h"
#include "runtime_api.h"

namespace tcn::emu {

// ---- settings ----------------------------------------------------------------------
// The order in which a block's CUDA threads start and resume after a barrier
// (TCN_EMU_ORDER=forward|reverse|random; TCN_EMU_SEED varies random).
enum class Order { Forward, Reverse, Random };
Order order();
void set_order(Order o);
const char* order_name(Order o);
uint64_t seed();  // TCN_EMU_SEED (default 0)
// How queued work of different streams runs (TCN_EMU_STREAMS=fifo|interleave).
// Fifo: in issue order, one queue for all streams. Interleave: each step runs a
// random operation among those CUDA lets start (its stream's first, after the
// event records it waits for, legacy-stream order kept), as a GPU may, so a
// missing cudaStreamWaitEvent shows as a wrong result; graph nodes likewise
// follow only their stream order and captured event waits. Seeded by `seed`.
enum class Streams { Fifo, Interleave };
Streams streams();
void set_streams(Streams m, uint64_t seed);  // runs what is queued first
// OS threads that run blocks in parallel (TCN_EMU_THREADS; default: OpenMP's).
int threads();
void set_threads(int n);
// True in a racecheck build (TCN_SANITIZE=thread): ThreadSanitizer reports
// every pair of kernel accesses that CUDA leaves unordered (cuda/emu/racecheck.h).
bool racecheck();
// Racecheck keeps a pool of TSan contexts, each of which TSan counts as a
// thread: call this before fork(), or TSan sees a multi-threaded fork and
// silences the child. A no-op in other builds.
void before_fork();
// Device memory of each emulated device (TCN_EMU_MEMORY_MB; default 80 GiB).
size_t memory_limit();
void set_memory_limit(size_t bytes);

// ---- device memory ------------------------------------------------------------------
// Device memory is inaccessible to host code (it faults, naming the allocation:
// cuda/emu/memory.cpp) except while a HostAccess exists: the emulator's own work
// on it (kernels, copies, memsets, cuBLAS) and Thrust's host backend
// (cuda/thrust.cuh), which runs a GPU's algorithms on the calling thread.
// TCN_EMU_PROTECT=0 leaves it accessible (gdb).
bool protects_device_memory();  // false under TCN_EMU_PROTECT=0
struct HostAccess {
  HostAccess();
  ~HostAccess();
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;
};

// ---- counters (printed at exit when TCN_EMU_STATS=1) -------------------------------
struct Counters {
  uint64_t launches = 0;        // kernel launches issued by the host (graph replays not counted)
  uint64_t kernels_run = 0;     // kernels executed, graph nodes included
  uint64_t graph_launches = 0;  // cudaGraphLaunch calls
  uint64_t host_syncs = 0;      // times the host waited for the device: the sum of the next six
  uint64_t sync_d2h_copies = 0;      // device-to-host copies the host waited for
  uint64_t sync_h2d_copies = 0;      // synchronous cudaMemcpy host-to-device (waits for the stream first)
  uint64_t stream_syncs = 0;         // cudaStreamSynchronize
  uint64_t device_syncs = 0;         // cudaDeviceSynchronize, cudaFree
  uint64_t event_syncs = 0;          // cudaEventSynchronize
  uint64_t implicit_syncs = 0;       // a full launch queue (1024 pending operations)
  uint64_t async_copies = 0;    // cudaMemcpyAsync calls that did not make the host wait
  uint64_t pageable_uploads = 0;  // host-to-device copies from pageable (not pinned) memory
  uint64_t allocations = 0;     // cudaMalloc calls that succeeded
  uint64_t frees = 0;           // cudaFree calls
  uint64_t bytes_allocated = 0; // device bytes currently allocated by cudaMalloc
  uint64_t cublas_calls = 0;    // cuBLAS GEMMs run (a graph's included)
  uint64_t cublas_launches = 0; // cuBLAS GEMMs issued by the host (as `launches`: captured ones not counted)
};
Counters counters();
void reset_counters();
std::string format_counters(const Counters& c);

// ---- for tests of the emulator itself ----------------------------------------------
// Clears a sticky error (a GPU cannot; the emulator's own tests need to).
void clear_sticky_error();
// Where a pointer lives: 0 unknown (pageable host or invalid), 1 device, 2 pinned host.
int pointer_kind(const void* p);

// ---- launching -----------------------------------------------------------------------
struct LaunchSite {
  const char* kernel;  // the kernel expression as written at the launch site
  const char* file;
  int line;
};

// A kernel pointer argument, checked at launch: it must be null or point into
// device or pinned memory.
struct PointerArg {
  int index;
  const void* ptr;
};

// Checks the configuration and queues `thread_body` (one call per CUDA thread)
// on `stream`. Errors become the last error, as a failed <<<>>> launch does.
void submit_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const LaunchSite& site,
                   std::function<void()> thread_body, const std::vector<PointerArg>& pointers);

template <class Body>
class Launch {
 public:
  Launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, LaunchSite site, Body body)
      : grid_(grid), block_(block), smem_(smem), stream_(stream), site_(site), body_(std::move(body)) {}

  template <class... A>
  void operator()(A&&... a) {
    auto args = std::make_shared<std::tuple<std::decay_t<A>...>>(std::forward<A>(a)...);
    std::vector<PointerArg> pointers;
    collect_pointers(pointers, *args, std::index_sequence_for<A...>{});
    submit_launch(grid_, block_, smem_, stream_, site_, [args, body = body_]() { std::apply(body, *args); },
                  pointers);
  }

 private:
  template <class Tuple, size_t... I>
  static void collect_pointers(std::vector<PointerArg>& out, const Tuple& t, std::index_sequence<I...>) {
    (add_pointer(out, static_cast<int>(I), std::get<I>(t)), ...);
  }
  template <class T>
  static void add_pointer(std::vector<PointerArg>& out, int index, const T& v) {
    if constexpr (std::is_pointer_v<T>) out.push_back({index, static_cast<const void*>(v)});
  }

  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
  LaunchSite site_;
  Body body_;
};

}  // namespace tcn::emu
