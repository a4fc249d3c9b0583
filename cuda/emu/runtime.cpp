// The emulated device's runtime: memory, copies, streams, events, stream
// capture and graphs, the error state, properties and counters.
//
// One FIFO holds the work of every stream in the order the host issued it; it
// runs when the host waits (a synchronisation, a device-to-host copy, an event,
// a full queue). Issue order respects every stream order and event dependency,
// so the queue is a valid schedule; what it cannot show is a race between two
// streams that lack a dependency (docs/emulator.md). All state sits behind one
// mutex and is never destroyed, so a caching allocator that frees its blocks
// at exit still finds it.
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <algorithm>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "internal.h"

struct CUgraph_st;

struct CUstream_st {
  unsigned flags = 0;
  int device = 0;
  uint64_t id = 0;  // 0: the legacy default stream (the queue's key; an address may be reused)
  uint64_t last_seq = 0;
  struct Capture* capture = nullptr;
  // cudaStreamWaitEvent's dependencies, taken by the stream's next operation:
  std::vector<uint64_t> waits;        // queue positions of event records
  std::vector<size_t> capture_waits;  // in a capture: graph nodes (index + 1)
};

struct CUevent_st {
  unsigned flags = 0;
  uint64_t seq = 0;  // the queue position of its last record; 0: never recorded
  bool done = false;
  std::chrono::steady_clock::time_point time{};
  uint64_t capture_id = 0;  // recorded into this capture (0: not captured)
  CUstream_st* capture_stream = nullptr;
  size_t capture_nodes = 0;  // graph size when it was recorded
  size_t capture_tail = 0;   // the recording stream's last node then (index + 1; 0: none)
};

namespace {
struct Node {
  std::string what;
  std::function<void()> op;
  std::vector<size_t> after;  // nodes (index + 1) it follows: its stream's previous one, the events it waits for
};
}  // namespace

struct CUgraph_st {
  std::vector<Node> nodes;
};
struct CUgraphExec_st {
  std::vector<Node> nodes;
};

struct Capture {
  uint64_t id = 0;
  CUgraph_st* graph = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  CUstream_st* origin = nullptr;
  bool invalidated = false;
  std::string why_invalid;
  std::map<CUstream_st*, size_t> last_node;    // per stream in the capture: graph size after its last node
  std::map<CUstream_st*, size_t> joined_back;  // per forked stream: how far the origin has waited for it
  std::map<CUstream_st*, size_t> tail;         // per stream: its last node (index + 1)
};

namespace tcn::emu {

namespace {

constexpr size_t kQueueDepth = 1024;  // pending operations before the host must wait (as a GPU's launch queue)

struct Pending {
  uint64_t seq;
  std::function<void()> op;
  uint64_t stream = 0;          // CUstream_st::id
  bool blocking = true;         // ordered with the legacy stream (the legacy stream itself included)
  std::vector<uint64_t> after;  // event records (queue positions) it waits for
};

struct Settings {
  Order order = Order::Forward;
  Streams streams = Streams::Fifo;
  uint64_t seed = 0;
  int threads = 1;
  size_t memory_limit = size_t{80} << 30;
  int devices = 1;
  bool stats_at_exit = false;
  size_t max_dynamic_smem = 48 * 1024;
};

struct State {
  std::recursive_mutex mu;
  Settings settings;
  Counters counters;
  // Per kernel (its name without template arguments): the most threads per block and the most
  // dynamic shared memory it was launched with; written at exit to $TCN_EMU_LAUNCHES, which
  // tools/kernel_resources.py joins with the compiler's register counts.
  std::map<std::string, std::pair<uint64_t, size_t>> launch_sizes;
  std::string launches_file;
  std::map<uintptr_t, Region> regions;
  std::vector<size_t> device_bytes;
  std::deque<Pending> queue;
  uint64_t next_seq = 0;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_detail;
  CUstream_st legacy;
  std::set<CUstream_st*> streams;
  uint64_t next_stream_id = 0;
  std::mt19937_64 stream_rng;  // picks among runnable operations (Streams::Interleave)
  std::set<CUevent_st*> events;
  std::vector<Capture*> captures;
  uint64_t next_capture_id = 0;
};

[[noreturn]] void bad_env(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "tcn-emu: %s=%s: expected %s\n", name, value, expected);
  std::exit(2);
}

long env_long(const char* name, long lo, long hi, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi) {
    std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    bad_env(name, v, range.c_str());
  }
  return x;
}

void print_stats_at_exit();
void write_launch_sizes_at_exit();

State& st() {
  static State* s = [] {
    // The .cu files are compiled with -mfma (CMakeLists.txt: FMA contraction, as nvcc).
    if (!__builtin_cpu_supports("fma")) {
      std::fprintf(stderr, "tcn-emu: this CPU has no FMA instructions, which the emulated device's kernels are "
                           "compiled with (to round as a GPU does)\n");
      std::exit(2);
    }
    auto* p = new State;  // never destroyed: see the file comment
    Settings& c = p->settings;
    if (const char* o = std::getenv("TCN_EMU_ORDER"); o && *o) {
      const std::string v = o;
      if (v == "forward") c.order = Order::Forward;
      else if (v == "reverse") c.order = Order::Reverse;
      else if (v == "random") c.order = Order::Random;
      else bad_env("TCN_EMU_ORDER", o, "forward, reverse or random");
    }
    if (const char* v = std::getenv("TCN_EMU_STREAMS"); v && *v) {
      const std::string x = v;
      if (x == "fifo") c.streams = Streams::Fifo;
      else if (x == "interleave") c.streams = Streams::Interleave;
      else bad_env("TCN_EMU_STREAMS", v, "fifo or interleave");
    }
    c.seed = static_cast<uint64_t>(env_long("TCN_EMU_SEED", 0, LONG_MAX, 0));
    p->stream_rng.seed(c.seed);
    c.threads = static_cast<int>(env_long("TCN_EMU_THREADS", 1, 1024, omp_get_max_threads()));
    c.memory_limit = static_cast<size_t>(env_long("TCN_EMU_MEMORY_MB", 1, 1 << 30, 80 * 1024)) << 20;
    c.devices = static_cast<int>(env_long("TCN_EMU_DEVICES", 0, 16, 1));
    c.stats_at_exit = env_long("TCN_EMU_STATS", 0, 1, 0) == 1;
    if (const char* f = std::getenv("TCN_EMU_LAUNCHES"); f && *f) {
      p->launches_file = f;
      std::atexit(write_launch_sizes_at_exit);
    }
    p->device_bytes.assign(c.devices, 0);
    if (c.stats_at_exit) std::atexit(print_stats_at_exit);
    return p;
  }();
  return *s;
}

using Lock = std::lock_guard<std::recursive_mutex>;

thread_local cudaError_t tl_last = cudaSuccess;
thread_local cudaError_t tl_detail_err = cudaSuccess;
thread_local std::string tl_detail;
thread_local std::string tl_message;
thread_local int tl_device = 0;

const char* base_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}


void set_sticky(cudaError_t e, const std::string& detail) {
  State& s = st();
  if (s.sticky == cudaSuccess) {
    s.sticky = e;
    s.sticky_detail = detail;
    std::fprintf(stderr, "tcn-emu: %s: %s\n", base_string(e), detail.c_str());
  }
  tl_last = e;
}

// ---- the queue ------------------------------------------------------------------------
// Streams::Fifo runs the queue in issue order. Streams::Interleave runs, at each
// step, a random one of the operations CUDA lets start: the first queued
// operation of its stream, whose waited-for event records have run, and, between
// the legacy stream and blocking streams, after the other side's earlier work.
size_t pick_runnable(State& s) {
  if (s.settings.streams == Streams::Fifo) return 0;
  std::vector<size_t> runnable;
  std::set<uint64_t> streams_seen;
  bool legacy_seen = false, blocking_seen = false;
  auto queued = [&](uint64_t seq) {
    auto it = std::lower_bound(s.queue.begin(), s.queue.end(), seq,
                               [](const Pending& p, uint64_t x) { return p.seq < x; });
    return it != s.queue.end() && it->seq == seq;
  };
  for (size_t i = 0; i < s.queue.size(); ++i) {
    const Pending& p = s.queue[i];
    const bool legacy = p.stream == 0;
    bool can = streams_seen.insert(p.stream).second;
    can = can && !(legacy && blocking_seen) && !(p.blocking && !legacy && legacy_seen);
    for (uint64_t a : p.after) can = can && !queued(a);
    if (can) runnable.push_back(i);
    legacy_seen = legacy_seen || legacy;
    blocking_seen = blocking_seen || (p.blocking && !legacy);
  }
  return runnable[s.stream_rng() % runnable.size()];  // never empty: the first operation can always run
}

void run_until(uint64_t seq) {
  State& s = st();
  if (s.queue.empty() || s.queue.front().seq > seq) return;
  HostAccess device_work;  // the queue's work may touch device memory
  while (!s.queue.empty() && s.queue.front().seq <= seq) {
    const size_t i = pick_runnable(s);
    Pending p = std::move(s.queue[i]);
    s.queue.erase(s.queue.begin() + static_cast<std::ptrdiff_t>(i));
    // A faulted context runs nothing more; nor does a thread past its exit (a cudaFree from a static destructor).
    if (s.sticky == cudaSuccess && !thread_exiting()) p.op();
  }
}
void run_all() { run_until(~uint64_t{0}); }

// ---- captures ---------------------------------------------------------------------------
CUstream_st* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &st().legacy;
  return s;
}
bool valid_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || st().streams.count(s);
}

// Captures that an unsafe call from this thread would disturb (global mode:
// every one; thread-local: this thread's; relaxed: none).
bool unsafe_call_during_capture(const char* call) {
  bool any = false;
  for (Capture* c : st().captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->mode == cudaStreamCaptureModeThreadLocal && c->thread != std::this_thread::get_id()) continue;
    if (!c->invalidated) c->why_invalid = std::string(call) + " was called during the capture";
    c->invalidated = true;
    any = true;
  }
  return any;
}

void end_capture(Capture* c) {
  State& s = st();
  for (auto& [stream, n] : c->last_node) {
    stream->capture = nullptr;
    stream->capture_waits.clear();  // a final join names nodes of this graph only
  }
  c->origin->capture = nullptr;
  std::erase(s.captures, c);
  delete c;
}

std::string hex(const void* p) {
  std::ostringstream o;
  o << p;
  return o.str();
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "?";
}

// Where [p, p + n) lives: 1 device, 2 pinned host, 0 pageable host; -1 when it
// starts in an allocation but runs past its end (`detail` says how).
int classify(const void* p, size_t n, std::string* detail) {
  State& s = st();
  auto it = s.regions.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == s.regions.begin()) return 0;
  --it;
  const Region& r = it->second;
  const char* c = static_cast<const char*>(p);
  if (c > r.base + r.size || (c == r.base + r.size && n > 0)) return 0;  // one past the end is a valid empty range
  if (static_cast<size_t>(c - r.base) + n > r.size) {
    std::ostringstream o;
    o << n << " bytes at " << p << " run past the end of its " << (r.kind == 1 ? "device" : "pinned")
      << " allocation (" << r.size << " bytes at " << static_cast<const void*>(r.base) << ", offset "
      << (c - r.base) << ")";
    *detail = o.str();
    return -1;
  }
  return r.kind;
}

// Checks a copy's pointers against its kind (resolving Default); returns the
// kind, or sets the error and returns -1.
int check_copy(const char* call, void* dst, const void* src, size_t n, cudaMemcpyKind kind, int* dk, int* sk) {
  std::string detail;
  *dk = classify(dst, n, &detail);
  if (*dk < 0) return fail(cudaErrorInvalidValue, std::string(call) + ": destination: " + detail), -1;
  *sk = classify(src, n, &detail);
  if (*sk < 0) return fail(cudaErrorInvalidValue, std::string(call) + ": source: " + detail), -1;
  const bool dd = *dk == 1, sd = *sk == 1;
  if (kind == cudaMemcpyDefault)
    kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": unknown copy kind"), -1;
  if (dd != want_dd || sd != want_sd) {
    std::ostringstream o;
    o << call << " " << kind_name(kind) << ": " << (dd != want_dd ? "destination " : "source ")
      << hex(dd != want_dd ? dst : src) << " is " << ((dd != want_dd ? dd : sd) ? "" : "not ") << "device memory";
    return fail(cudaErrorInvalidValue, o.str()), -1;
  }
  return kind;
}

#define EMU_STICKY()                                  \
  do {                                                \
    if (st().sticky != cudaSuccess) return st().sticky; \
  } while (0)

void print_stats_at_exit() {
  std::fprintf(stderr, "[tcn-emu] %s\n", format_counters(counters()).c_str());
}

// "name threads dynamic_smem" lines, appended (several processes of a test run share the file).
void write_launch_sizes_at_exit() {
  State& s = st();
  Lock lock(s.mu);
  // One write() on an O_APPEND descriptor: test programs that run at once (ctest -j) add their
  // lines whole, never interleaved mid-line as buffered stdio could.
  std::string text;
  for (const auto& [name, size] : s.launch_sizes)
    text += name + " " + std::to_string(size.first) + " " + std::to_string(size.second) + "\n";
  const int fd = ::open(s.launches_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!ok) std::fprintf(stderr, "tcn-emu: TCN_EMU_LAUNCHES=%s: cannot append: %s\n", s.launches_file.c_str(),
                        std::strerror(errno));
  if (fd >= 0) ::close(fd);
}

// "tcn::cuda::map_kernel<T, K>" -> "map_kernel": what the compiler's report is joined on.
std::string kernel_base_name(const char* expr) {
  std::string n(expr);
  n = n.substr(0, n.find('<'));
  if (const size_t colon = n.rfind("::"); colon != std::string::npos) n = n.substr(colon + 2);
  while (!n.empty() && n.back() == ' ') n.pop_back();
  return n;
}

}  // namespace

// ---- internal interface (cuda/emu/internal.h) ---------------------------------------------
cudaError_t fail(cudaError_t err, const std::string& detail) {
  tl_last = err;
  tl_detail_err = err;
  tl_detail = detail;
  return err;
}

bool find_region(const void* p, size_t n, Region* out) {
  Lock lock(st().mu);
  State& s = st();
  auto it = s.regions.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == s.regions.begin()) return false;
  --it;
  const char* c = static_cast<const char*>(p);
  if (c < it->second.base || static_cast<size_t>(c - it->second.base) + n > it->second.size) return false;
  *out = it->second;
  return true;
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> op) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, std::string(what) + ": not a live stream");
  CUstream_st* cs = resolve(stream);
  if (Capture* c = cs->capture) {
    if (c->invalidated) return fail(cudaErrorStreamCaptureInvalidated, c->why_invalid);
    std::vector<size_t> after = std::move(cs->capture_waits);
    cs->capture_waits.clear();
    if (size_t t = c->tail[cs]) after.push_back(t);
    c->graph->nodes.push_back({what, std::move(op), std::move(after)});
    c->last_node[cs] = c->tail[cs] = c->graph->nodes.size();
    return cudaSuccess;
  }
  if (cs == &s.legacy && !s.captures.empty()) {
    // The legacy stream waits for every blocking stream, a capturing one too: CUDA refuses.
    for (Capture* c : s.captures) {
      if (!c->invalidated) c->why_invalid = std::string(what) + " on the legacy default stream during the capture";
      c->invalidated = true;
    }
    return fail(cudaErrorStreamCaptureImplicit, std::string(what) + " on the legacy stream while a stream is capturing");
  }
  s.queue.push_back({++s.next_seq, std::move(op), cs->id, !(cs->flags & cudaStreamNonBlocking), std::move(cs->waits)});
  cs->waits.clear();
  cs->last_seq = s.next_seq;
  if (s.queue.size() > kQueueDepth) {  // the host blocks until the device catches up
    s.counters.implicit_syncs++;
    s.counters.host_syncs++;
    run_until(s.queue[kQueueDepth / 2].seq);
  }
  return cudaSuccess;
}

void count_cublas_call() {
  Lock lock(st().mu);
  st().counters.cublas_calls++;
}

void count_cublas_issue(cudaStream_t stream) {
  Lock lock(st().mu);
  if (resolve(stream)->capture == nullptr) st().counters.cublas_launches++;
}

// ---- settings, counters, test hooks (cuda/emu/emu.h) ---------------------------------------
Order order() { return st().settings.order; }
void set_order(Order o) { st().settings.order = o; }
uint64_t seed() { return st().settings.seed; }
Streams streams() { return st().settings.streams; }
void set_streams(Streams m, uint64_t seed) {
  State& s = st();
  Lock lock(s.mu);
  run_all();  // what is queued ran under the previous mode
  s.settings.streams = m;
  s.stream_rng.seed(seed);
}
const char* order_name(Order o) {
  switch (o) {
    case Order::Forward: return "forward";
    case Order::Reverse: return "reverse";
    case Order::Random: return "random";
  }
  return "?";
}
int threads() { return st().settings.threads; }
void set_threads(int n) { st().settings.threads = n < 1 ? 1 : n; }
size_t memory_limit() { return st().settings.memory_limit; }
void set_memory_limit(size_t bytes) {
  Lock lock(st().mu);
  st().settings.memory_limit = bytes;
}

Counters counters() {
  Lock lock(st().mu);
  return st().counters;
}
void reset_counters() {
  Lock lock(st().mu);
  const uint64_t bytes = st().counters.bytes_allocated;
  st().counters = Counters{};
  st().counters.bytes_allocated = bytes;
}
std::string format_counters(const Counters& c) {
  std::ostringstream o;
  o << "emulated device: " << c.launches << " kernel launches, " << c.kernels_run << " kernels run, "
    << c.graph_launches << " graph launches, " << c.cublas_calls << " cuBLAS GEMMs; " << c.host_syncs
    << " host syncs (" << c.sync_d2h_copies << " device-to-host copies, " << c.sync_h2d_copies
    << " synchronous uploads, " << c.stream_syncs << " stream, " << c.device_syncs << " device, " << c.event_syncs
    << " event, " << c.implicit_syncs << " full-queue); " << c.async_copies << " async copies, "
    << c.pageable_uploads << " uploads from pageable memory; " << c.allocations << " cudaMalloc, " << c.frees
    << " cudaFree, " << c.bytes_allocated << " bytes allocated";
  return o.str();
}

void clear_sticky_error() {
  Lock lock(st().mu);
  st().sticky = cudaSuccess;
  st().sticky_detail.clear();
  tl_last = cudaSuccess;
}

int pointer_kind(const void* p) {
  Region r;
  return find_region(p, 0, &r) ? r.kind : 0;
}

void submit_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const LaunchSite& site,
                   std::function<void()> thread_body, const std::vector<PointerArg>& pointers) {
  State& s = st();
  Lock lock(s.mu);
  if (s.sticky != cudaSuccess) {
    tl_last = s.sticky;
    return;
  }
  auto config = [&] {
    std::ostringstream o;
    o << "kernel " << site.kernel << " at " << site.file << ":" << site.line << " launched with grid (" << grid.x
      << "," << grid.y << "," << grid.z << "), block (" << block.x << "," << block.y << "," << block.z << ")";
    return o.str();
  };
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::string bad;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) bad = "an empty grid or block";
  else if (threads > 1024) bad = std::to_string(threads) + " threads per block (at most 1024)";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64) bad = "a block dimension over (1024, 1024, 64)";
  else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) bad = "a grid dimension over (2^31-1, 65535, 65535)";
  if (!bad.empty()) {
    fail(cudaErrorInvalidConfiguration, config() + ": " + bad);
    return;
  }
  if (smem > s.settings.max_dynamic_smem) {
    fail(cudaErrorInvalidValue, config() + ": " + std::to_string(smem) + " bytes of dynamic shared memory (at most " +
                                    std::to_string(s.settings.max_dynamic_smem) + ")");
    return;
  }
  if (!s.launches_file.empty()) {
    auto& size = s.launch_sizes[kernel_base_name(site.kernel)];
    size.first = std::max(size.first, threads);
    size.second = std::max(size.second, smem);
  }
  for (const PointerArg& p : pointers) {
    std::string ignored;
    if (p.ptr && classify(p.ptr, 0, &ignored) <= 0) {
      set_sticky(cudaErrorIllegalAddress, config() + ": argument " + std::to_string(p.index) + " = " + hex(p.ptr) +
                                              " is not device memory (host memory, freed, or never allocated)");
      return;
    }
  }
  KernelLaunch l{grid, block, smem, site, std::move(thread_body)};
  std::string what = std::string("kernel ") + site.kernel;
  const bool captured = resolve(stream)->capture != nullptr;
  cudaError_t e = enqueue(stream, "a kernel launch", [l = std::move(l)]() {
    st().counters.kernels_run++;
    std::string fault = run_grid(l);
    if (!fault.empty()) set_sticky(cudaErrorLaunchFailure, fault);
  });
  if (e == cudaSuccess && !captured) s.counters.launches++;
}

}  // namespace tcn::emu

// ---- the CUDA runtime API ----------------------------------------------------------------
using namespace tcn::emu;

const char* cudaGetErrorString(cudaError_t err) {
  if (err == cudaSuccess) return base_string(err);
  std::string detail;
  if (err == tl_detail_err && !tl_detail.empty()) detail = tl_detail;
  else if (err == st().sticky) detail = st().sticky_detail;
  if (detail.empty()) return base_string(err);
  tl_message = std::string(base_string(err)) + " [emulated device: " + detail + "]";
  return tl_message.c_str();
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    default: return "cudaError";
  }
}

cudaError_t cudaGetLastError() {
  Lock lock(st().mu);
  if (st().sticky != cudaSuccess) return st().sticky;
  cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  Lock lock(st().mu);
  return st().sticky != cudaSuccess ? st().sticky : tl_last;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = st().settings.devices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  EMU_STICKY();
  if (device < 0 || device >= st().settings.devices)
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): " +
                                            std::to_string(st().settings.devices) + " emulated device(s)");
  tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= st().settings.devices) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "tcn emulated sm_90 device %d (runs on the CPU)", device);
  p->totalGlobalMem = st().settings.memory_limit;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->maxThreadsPerMultiProcessor = 2048;
  p->multiProcessorCount = 132;
  p->major = 9;
  p->minor = 0;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 5120;
  p->totalConstMem = 65536;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 3;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute attr, int value) {
  // Launches do not know their kernel's address, so the limit is raised for all
  // kernels (up to what an sm_90 part allows).
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: value out of range");
  Lock lock(st().mu);
  st().settings.max_dynamic_smem = std::max<size_t>(st().settings.max_dynamic_smem, static_cast<size_t>(value));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (unsafe_call_during_capture("cudaDeviceSynchronize"))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize during stream capture");
  run_all();
  s.counters.device_syncs++;
  s.counters.host_syncs++;
  return s.sticky;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& s = st();
  Lock lock(s.mu);
  *total_bytes = s.settings.memory_limit;
  const size_t used = s.device_bytes[tl_device];
  *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  State& s = st();
  Lock lock(s.mu);
  *ptr = nullptr;
  EMU_STICKY();
  if (unsafe_call_during_capture("cudaMalloc"))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaMalloc during stream capture");
  if (size == 0) return cudaSuccess;
  size_t& used = s.device_bytes[tl_device];
  if (size > s.settings.memory_limit - std::min(used, s.settings.memory_limit))
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) + " bytes with " +
                                               std::to_string(used) + " of " +
                                               std::to_string(s.settings.memory_limit) + " bytes in use on device " +
                                               std::to_string(tl_device));
  void* p = device_alloc(size);
  if (!p) return fail(cudaErrorMemoryAllocation, "no address space left for " + std::to_string(size) + " bytes");
  {
    HostAccess fill;
    std::memset(p, 0xFF, size);  // fresh device memory reads as NaN / -1, never as zeros
  }
  s.regions[reinterpret_cast<uintptr_t>(p)] = Region{static_cast<const char*>(p), size, 1};
  used += size;
  s.counters.allocations++;
  s.counters.bytes_allocated += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  State& s = st();
  Lock lock(s.mu);
  if (!ptr) return cudaSuccess;
  if (unsafe_call_during_capture("cudaFree"))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaFree during stream capture");
  auto it = s.regions.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.regions.end() || it->second.kind != 1)
    return fail(cudaErrorInvalidDevicePointer, "cudaFree(" + hex(ptr) + "): not the start of a device allocation");
  run_all();  // cudaFree waits for the device
  s.counters.device_syncs++;
  s.counters.host_syncs++;
  s.counters.frees++;
  s.counters.bytes_allocated -= it->second.size;
  s.device_bytes[tl_device] -= std::min(s.device_bytes[tl_device], it->second.size);
  s.regions.erase(it);
  device_free(ptr);
  return s.sticky;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned) {
  State& s = st();
  Lock lock(s.mu);
  *ptr = nullptr;
  EMU_STICKY();
  if (size == 0) return cudaSuccess;
  void* p = ::operator new(size, std::align_val_t{256}, std::nothrow);
  if (!p) return fail(cudaErrorMemoryAllocation, "cudaMallocHost of " + std::to_string(size) + " bytes");
  s.regions[reinterpret_cast<uintptr_t>(p)] = Region{static_cast<const char*>(p), size, 2};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  State& s = st();
  Lock lock(s.mu);
  if (!ptr) return cudaSuccess;
  auto it = s.regions.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.regions.end() || it->second.kind != 2)
    return fail(cudaErrorInvalidValue, "cudaFreeHost(" + hex(ptr) + "): not the start of a pinned allocation");
  run_all();
  s.counters.device_syncs++;
  s.counters.host_syncs++;
  s.regions.erase(it);
  ::operator delete(ptr, std::align_val_t{256});
  return s.sticky;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (n == 0) return cudaSuccess;
  int dk, sk;
  const int k = check_copy("cudaMemcpy", dst, src, n, kind, &dk, &sk);
  if (k < 0) return tl_last;
  if (k == cudaMemcpyDeviceToDevice)
    return enqueue(nullptr, "cudaMemcpy DeviceToDevice", [dst, src, n] { std::memcpy(dst, src, n); });
  if (k != cudaMemcpyHostToHost && unsafe_call_during_capture("cudaMemcpy"))
    return fail(cudaErrorStreamCaptureUnsupported, "a synchronous cudaMemcpy during stream capture");
  run_all();  // the legacy stream waits for the device's earlier work, then the host for the copy
  if (s.sticky != cudaSuccess) return s.sticky;
  {
    HostAccess copy;
    std::memcpy(dst, src, n);
  }
  if (k == cudaMemcpyDeviceToHost) {
    s.counters.sync_d2h_copies++;
    s.counters.host_syncs++;
  } else if (k == cudaMemcpyHostToDevice) {
    s.counters.sync_h2d_copies++;
    s.counters.host_syncs++;
    if (sk != 2) s.counters.pageable_uploads++;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (n == 0) return cudaSuccess;
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: not a live stream");
  int dk, sk;
  const int k = check_copy("cudaMemcpyAsync", dst, src, n, kind, &dk, &sk);
  if (k < 0) return tl_last;
  const bool capturing = resolve(stream)->capture != nullptr;
  const bool pageable = (k == cudaMemcpyHostToDevice && sk == 0) || (k == cudaMemcpyDeviceToHost && dk == 0);
  if (capturing && (pageable || k == cudaMemcpyHostToHost)) {
    Capture* c = resolve(stream)->capture;
    if (!c->invalidated) c->why_invalid = "cudaMemcpyAsync with pageable host memory during the capture";
    c->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaMemcpyAsync during capture needs pinned host memory (cudaMallocHost), got pageable " + hex(
                    k == cudaMemcpyHostToDevice ? src : dst));
  }
  if (k == cudaMemcpyHostToHost) {
    std::memcpy(dst, src, n);
    return cudaSuccess;
  }
  if (k == cudaMemcpyDeviceToHost && dk == 0) {  // into pageable memory: the host waits for the copy
    run_until(resolve(stream)->last_seq);
    if (s.sticky != cudaSuccess) return s.sticky;
    {
      HostAccess copy;
      std::memcpy(dst, src, n);
    }
    s.counters.sync_d2h_copies++;
    s.counters.host_syncs++;
    return cudaSuccess;
  }
  if (k == cudaMemcpyHostToDevice && sk == 0) {  // from pageable memory: staged now, written later
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    s.counters.pageable_uploads++;
    s.counters.async_copies++;
    return enqueue(stream, "cudaMemcpyAsync HostToDevice", [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  if (!capturing) s.counters.async_copies++;
  return enqueue(stream, "cudaMemcpyAsync", [dst, src, n] { std::memcpy(dst, src, n); });
}

namespace {
cudaError_t memset_on(cudaStream_t stream, const char* call, void* dst, int value, size_t n) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (n == 0) return cudaSuccess;
  std::string detail;
  const int k = classify(dst, n, &detail);
  if (k < 0) return fail(cudaErrorInvalidValue, std::string(call) + ": " + detail);
  if (k != 1) return fail(cudaErrorInvalidValue, std::string(call) + ": " + hex(dst) + " is not device memory");
  return enqueue(stream, call, [dst, value, n] { std::memset(dst, value, n); });
}
}  // namespace

cudaError_t cudaMemset(void* dst, int value, size_t n) { return memset_on(nullptr, "cudaMemset", dst, value, n); }
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  return memset_on(stream, "cudaMemsetAsync", dst, value, n);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  auto* cs = new CUstream_st;
  cs->flags = flags;
  cs->device = tl_device;
  cs->id = ++s.next_stream_id;
  s.streams.insert(cs);
  *stream = cs;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  if (!s.streams.count(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  if (stream->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy of a capturing stream");
  s.streams.erase(stream);
  delete stream;  // its queued work still runs: the queue holds no reference to the stream
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  CUstream_st* cs = resolve(stream);
  if (cs->capture) {
    cs->capture->invalidated = true;
    cs->capture->why_invalid = "cudaStreamSynchronize of the capturing stream";
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream");
  }
  run_until(cs == &s.legacy ? ~uint64_t{0} : cs->last_seq);
  s.counters.stream_syncs++;
  s.counters.host_syncs++;
  return s.sticky;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: not a live stream");
  CUstream_st* cs = resolve(stream);
  if (cs->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a capturing stream");
  run_until(cs->last_seq);  // the emulated device is idle whenever the host looks
  return s.sticky;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!valid_stream(stream) || !s.events.count(event))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream or event");
  CUstream_st* cs = resolve(stream);
  Capture* ec = nullptr;
  for (Capture* c : s.captures)
    if (c->id == event->capture_id) ec = c;
  if (ec) {
    if (cs->capture && cs->capture != ec)
      return fail(cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent joins two separate captures");
    if (!cs->capture) {  // fork: the stream joins the capture
      if (cs == &s.legacy) return fail(cudaErrorStreamCaptureImplicit, "the legacy stream cannot join a capture");
      cs->capture = ec;
      ec->last_node[cs] = event->capture_nodes;
    }
    if (event->capture_stream != cs) {
      size_t& j = ec->joined_back[event->capture_stream];
      j = std::max(j, event->capture_nodes);
    }
    if (event->capture_tail) cs->capture_waits.push_back(event->capture_tail);
    return cudaSuccess;
  }
  if (cs->capture && event->seq != 0 && !event->done)
    return fail(cudaErrorStreamCaptureIsolation, "a capturing stream waits for an event recorded outside the capture");
  if (event->seq != 0 && !event->done) cs->waits.push_back(event->seq);  // the stream's next operation waits
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  auto* e = new CUevent_st;
  e->flags = flags;
  s.events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  State& s = st();
  Lock lock(s.mu);
  if (!s.events.erase(event)) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  run_all();  // a queued record may still point at it
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!s.events.count(event) || !valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event or stream");
  CUstream_st* cs = resolve(stream);
  if (Capture* c = cs->capture) {
    event->capture_id = c->id;
    event->capture_stream = cs;
    event->capture_nodes = c->graph->nodes.size();
    event->capture_tail = c->tail[cs];
    return cudaSuccess;
  }
  event->capture_id = 0;
  // The record's queue position is set before it is queued (a full queue may run it at once).
  const uint64_t prev_seq = event->seq, seq = s.next_seq + 1;
  const bool prev_done = event->done;
  event->seq = seq;
  event->done = false;
  cudaError_t e = enqueue(stream, "cudaEventRecord", [event, seq] {
    if (event->seq != seq) return;  // recorded again since: the event completes with its latest record
    event->done = true;
    event->time = std::chrono::steady_clock::now();
  });
  if (e != cudaSuccess) {
    event->seq = prev_seq;
    event->done = prev_done;
  }
  return e;
}

namespace {
bool captured_now(cudaEvent_t e) {
  for (Capture* c : st().captures)
    if (c->id == e->capture_id) return true;
  return false;
}
}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!s.events.count(event)) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  if (captured_now(event)) return fail(cudaErrorCapturedEvent, "cudaEventSynchronize of an event in a capture");
  if (event->seq == 0) return cudaSuccess;
  run_until(event->seq);
  s.counters.event_syncs++;
  s.counters.host_syncs++;
  return s.sticky;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!s.events.count(event)) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event");
  if (captured_now(event)) return fail(cudaErrorCapturedEvent, "cudaEventQuery of an event in a capture");
  if (event->seq != 0) run_until(event->seq);
  return s.sticky;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!s.events.count(a) || !s.events.count(b))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not a live event");
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
  if (a->seq == 0 || b->seq == 0) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event never recorded");
  if (!a->done || !b->done) return fail(cudaErrorNotReady, "cudaEventElapsedTime: event not completed yet");
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: not a live stream");
  CUstream_st* cs = resolve(stream);
  if (cs == &s.legacy) return fail(cudaErrorStreamCaptureUnsupported, "the legacy default stream cannot be captured");
  if (cs->capture) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  auto* c = new Capture;
  c->id = ++s.next_capture_id;
  c->graph = new CUgraph_st;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = cs;
  c->last_node[cs] = 0;
  cs->capture = c;
  s.captures.push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  State& s = st();
  Lock lock(s.mu);
  *graph = nullptr;
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamEndCapture: not a live stream");
  CUstream_st* cs = resolve(stream);
  Capture* c = cs->capture;
  if (!c) return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  if (c->origin != cs) return fail(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture on a forked stream");
  std::string unjoined;
  for (auto& [other, last] : c->last_node)
    if (other != cs && last > c->joined_back[other]) unjoined = "a forked stream has work the origin never waited for";
  const bool invalid = c->invalidated;
  const std::string why = c->why_invalid;
  CUgraph_st* g = c->graph;
  end_capture(c);
  if (invalid) {
    delete g;
    return fail(cudaErrorStreamCaptureInvalidated, why);
  }
  if (!unjoined.empty()) {
    delete g;
    return fail(cudaErrorStreamCaptureUnjoined, unjoined);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  State& s = st();
  Lock lock(s.mu);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamIsCapturing: not a live stream");
  Capture* c = resolve(stream)->capture;
  *status = !c ? cudaStreamCaptureStatusNone
               : (c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes) {
  if (!graph) return fail(cudaErrorInvalidValue, "cudaGraphGetNodes: null graph");
  if (nodes)
    for (size_t i = 0; i < std::min(*num_nodes, graph->nodes.size()); ++i)
      nodes[i] = reinterpret_cast<cudaGraphNode_t>(i + 1);
  *num_nodes = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph");
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}

namespace tcn::emu {
namespace {
// A graph's nodes in capture order (Streams::Fifo), or in a random order that
// keeps every node after those it follows (Streams::Interleave).
std::vector<size_t> node_order(const std::vector<Node>& nodes) {
  State& s = st();
  std::vector<size_t> order;
  order.reserve(nodes.size());
  if (s.settings.streams == Streams::Fifo) {
    for (size_t i = 0; i < nodes.size(); ++i) order.push_back(i);
    return order;
  }
  std::vector<int> waiting(nodes.size());
  std::vector<std::vector<size_t>> next(nodes.size());
  std::vector<size_t> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t a : nodes[i].after) next[a - 1].push_back(i);
    waiting[i] = static_cast<int>(nodes[i].after.size());
    if (waiting[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const size_t k = s.stream_rng() % ready.size();
    const size_t i = ready[k];
    ready[k] = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (size_t j : next[i])
      if (--waiting[j] == 0) ready.push_back(j);
  }
  if (order.size() != nodes.size()) {
    std::fprintf(stderr, "tcn-emu: internal error: a graph's node dependencies form a cycle\n");
    std::abort();
  }
  return order;
}
}  // namespace
}  // namespace tcn::emu

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  State& s = st();
  Lock lock(s.mu);
  EMU_STICKY();
  if (!exec) return fail(cudaErrorInvalidValue, "cudaGraphLaunch: null graph");
  if (valid_stream(stream) && resolve(stream)->capture)
    return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch into a capturing stream is not emulated");
  cudaError_t e = enqueue(stream, "cudaGraphLaunch", [exec] {
    for (size_t i : node_order(exec->nodes))
      if (st().sticky == cudaSuccess) exec->nodes[i].op();
  });
  if (e == cudaSuccess) s.counters.graph_launches++;
  return e;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Lock lock(st().mu);
  run_all();  // a queued launch may still use it
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
