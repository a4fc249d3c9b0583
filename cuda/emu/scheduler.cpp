// The emulated device's scheduler: runs the blocks of a kernel launch, each on
// one OS thread, each CUDA thread of a block as a fiber (Boost.Context).
//
// A block starts a fiber, which runs CUDA threads one after another (in the
// order TCN_EMU_ORDER picks) until one of them waits at a barrier or a warp
// collective; then a new fiber takes the next thread, and so on. A kernel
// without barriers therefore costs one fiber per block and a function call per
// thread. When every thread has started, the scheduler releases whatever can
// proceed: a warp collective whose lanes have all arrived, or the block barrier
// once every live thread waits at it. Threads at different barriers, lanes
// missing from a collective, or nothing able to proceed is a bug in the
// kernel: the emulator prints the sites and aborts.
#include <omp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include <boost/context/fiber.hpp>

#include "internal.h"
#include "racecheck.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace tcn::emu {

namespace {

namespace ctx = boost::context;

// AddressSanitizer must be told when execution moves to another stack
// (before the switch: the destination; after it: where it came from).
#if defined(__SANITIZE_ADDRESS__)
void asan_leave(void** fake_stack, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
void asan_arrive(void* fake_stack, const void** old_bottom, size_t* old_size) {
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
}
#else
void asan_leave(void**, const void*, size_t) {}
void asan_arrive(void*, const void**, size_t*) {}
#endif
thread_local const void* tl_sched_bottom = nullptr;  // the OS thread's own stack, where the scheduler runs
thread_local size_t tl_sched_size = 0;
thread_local void* tl_sched_fake = nullptr;

// ---- fiber stacks: mmap'ed with a guard page, pooled per OS thread --------------------
constexpr size_t kStackSize = 256 * 1024;

struct StackPool {
  std::vector<ctx::stack_context> free;
  ~StackPool() {
    for (auto& s : free) munmap(static_cast<char*>(s.sp) - s.size - page(), s.size + page());
  }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};
thread_local StackPool tl_stacks;
// Racecheck runs one block at a time (racecheck.h), some on OS threads of their
// own: its stacks come from one pool for the process, never unmapped (a thread
// may still unwind on them at exit).
StackPool& stack_pool() {
  if constexpr (race::kEnabled) {
    static StackPool* shared = new StackPool;
    return *shared;
  } else {
    return tl_stacks;
  }
}

struct Worker;
void note_stack(Worker* w, const ctx::stack_context& s);

struct PooledStack {
  Worker* owner;
  ctx::stack_context allocate() {
    StackPool& pool = stack_pool();
    if (!pool.free.empty()) {
      ctx::stack_context s = pool.free.back();
      pool.free.pop_back();
      note_stack(owner, s);
      return s;
    }
    const size_t pg = StackPool::page();
    void* mem = mmap(nullptr, kStackSize + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      std::fprintf(stderr, "tcn-emu: cannot map a %zu-byte fiber stack\n", kStackSize);
      std::abort();
    }
    mprotect(mem, pg, PROT_NONE);  // the guard page: a stack overflow faults instead of corrupting memory
    ctx::stack_context s;
    s.size = kStackSize;
    s.sp = static_cast<char*>(mem) + pg + kStackSize;
    note_stack(owner, s);
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { stack_pool().free.push_back(s); }
};

// ---- per-block state (one block at a time per OS thread) ------------------------------
enum class State : uint8_t { Unstarted, Running, Barrier, Warp, Done };

struct Slot {
  State state = State::Unstarted;
  const char* file = nullptr;
  int line = 0;
  Worker* worker = nullptr;
  // block barrier
  BarrierOp bop = BarrierOp::Sync;
  int pred = 0, bresult = 0;
  // warp collective
  WarpOp wop = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t value = 0, wresult = 0;
  int arg = 0, width = 32;
  void* race_context = nullptr;  // its ThreadSanitizer context while it lives (racecheck builds)
};

struct Worker {
  ctx::fiber self;   // held by the scheduler while the worker is suspended
  ctx::fiber sched;  // held by the worker while it runs
  int tid = -1;
  const void* stack_bottom = nullptr;  // for AddressSanitizer
  size_t stack_size = 0;
  void* fake_stack = nullptr;
};

void note_stack(Worker* w, const ctx::stack_context& s) {
  w->stack_bottom = static_cast<char*>(s.sp) - s.size;
  w->stack_size = s.size;
}

struct KernelFault {
  std::string what;
};

// A block's dynamic shared memory: a mapping of this OS thread, grown when a
// launch asks for more (a mapping, so that racecheck forgets its accesses with it).
struct SharedMemory {
  unsigned char* data = nullptr;
  size_t size = 0, mapped = 0;
  void release() {
    if (data) munmap(data, mapped);
    data = nullptr;
    size = mapped = 0;
  }
  void resize(size_t n) {
    if (n > mapped) map(n);
    size = n;
  }
  void map(size_t n) {
    release();
    mapped = (n + StackPool::page() - 1) / StackPool::page() * StackPool::page();
    void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "tcn-emu: cannot map %zu bytes of shared memory\n", n);
      std::abort();
    }
    data = static_cast<unsigned char*>(m);
  }
  ~SharedMemory() { release(); }
};

struct Block {
  const KernelLaunch* launch = nullptr;
  const race::Grid* grid = nullptr;
  uint3 index{0, 0, 0};
  int n = 0;
  std::vector<int> start_order;
  int next = 0, done = 0;
  std::vector<Slot> slots;
  std::vector<std::unique_ptr<Worker>> workers;  // reused across blocks
  size_t workers_used = 0;
  bool faulted = false;
  std::string fault;
  SharedMemory shared;  // dynamic shared memory
  uint64_t linear = 0;  // the block's index in the grid
  std::mt19937_64 rng;
};

thread_local Block tl_block;
thread_local Worker* tl_worker = nullptr;

// A thread that exits destroys its thread_local objects (tl_block, tl_stacks)
// before the process's static ones: a caching allocator that frees its blocks
// at exit (cudaFree waits for the queue) must not then run kernels on this
// thread. The sentinel, made when the thread first runs a block, says so.
thread_local bool tl_exiting = false;
struct ExitSentinel {
  ~ExitSentinel() { tl_exiting = true; }
  void touch() {}
};
thread_local ExitSentinel tl_sentinel;

std::atomic<uint64_t> g_launch_counter{0};

void set_coords(const Block& b, int tid) {
  const dim3 bd = b.launch->block;
  threadIdx = uint3{tid % bd.x, (tid / bd.x) % bd.y, tid / (bd.x * bd.y)};
}

std::string coords(const uint3& v) {
  std::ostringstream s;
  s << "(" << v.x << "," << v.y << "," << v.z << ")";
  return s.str();
}

std::string where(const Block& b) {
  const KernelLaunch& l = *b.launch;
  std::ostringstream s;
  s << "kernel " << l.site.kernel << " launched at " << l.site.file << ":" << l.site.line << ", block "
    << coords(b.index) << " of grid " << coords({l.grid.x, l.grid.y, l.grid.z}) << ", blockDim "
    << coords({l.block.x, l.block.y, l.block.z});
  return s.str();
}

[[noreturn]] void kernel_bug(const Block& b, const std::string& what) {
  std::fprintf(stderr, "tcn-emu: %s:\n  %s\n", where(b).c_str(), what.c_str());
  std::fflush(stderr);
  std::abort();
}

// "threads 0-31, 64 wait at f:l; threads 32-63 at g:m" for the threads matching `pick`.
template <class Describe>
std::string describe_threads(const Block& b, Describe describe) {
  std::ostringstream out;
  std::string prev;
  int run_start = -1;
  auto flush = [&](int end) {
    if (run_start < 0) return;
    out << "\n    threads " << run_start;
    if (end - 1 > run_start) out << "-" << end - 1;
    out << ": " << prev;
  };
  for (int t = 0; t < b.n; ++t) {
    std::string d = describe(b.slots[t]);
    if (d != prev || run_start < 0) {
      flush(t);
      prev = d;
      run_start = t;
    }
  }
  flush(b.n);
  return out.str();
}

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
  }
  return "?";
}

std::string state_of(const Slot& s) {
  std::ostringstream o;
  switch (s.state) {
    case State::Done: return "exited";
    case State::Unstarted: return "not started";
    case State::Running: return "running";
    case State::Barrier: o << "wait at __syncthreads " << s.file << ":" << s.line; break;
    case State::Warp:
      o << "wait at " << warp_op_name(s.wop) << " " << s.file << ":" << s.line << " mask 0x" << std::hex << s.mask;
      break;
  }
  return o.str();
}

// ---- running threads ---------------------------------------------------------------------
void run_thread(Block& b, Worker* w, int tid) {
  Slot& s = b.slots[tid];
  s.state = State::Running;
  s.worker = w;
  w->tid = tid;
  tl_worker = w;
  set_coords(b, tid);
  s.race_context = race::thread_begin(*b.grid, b.linear, static_cast<unsigned>(tid), static_cast<unsigned>(b.n));
  bool trapped = false;
  try {
    b.launch->thread_body();
  } catch (const KernelFault& f) {
    trapped = true;
    if (!b.faulted) {
      b.faulted = true;
      b.fault = f.what;
    }
  }
  race::thread_end(*b.grid, s.race_context, trapped);
  s.race_context = nullptr;
  s.state = State::Done;
  b.done++;
}

// A worker runs not-yet-started threads until one blocks (it then suspends
// inside that thread) or none are left (the fiber ends).
ctx::fiber worker_main(Worker* w, ctx::fiber&& sched) {
  asan_arrive(nullptr, &tl_sched_bottom, &tl_sched_size);
  w->sched = std::move(sched);
  Block& b = tl_block;
  while (!b.faulted && b.next < b.n) run_thread(b, w, b.start_order[b.next++]);
  w->tid = -1;
  asan_leave(nullptr, tl_sched_bottom, tl_sched_size);  // this stack is done
  return std::move(w->sched);
}

// Scheduler side: runs the worker until it suspends or ends.
void switch_to(Worker* w) {
  asan_leave(&tl_sched_fake, w->stack_bottom, w->stack_size);
  w->self = std::move(w->self).resume();
  asan_arrive(tl_sched_fake, nullptr, nullptr);
}

Worker* new_worker(Block& b) {
  if (b.workers_used == b.workers.size()) b.workers.push_back(std::make_unique<Worker>());
  return b.workers[b.workers_used++].get();
}

void start_threads(Block& b) {
  while (!b.faulted && b.next < b.n) {
    Worker* w = new_worker(b);
    w->self = ctx::fiber(std::allocator_arg, PooledStack{w},
                         [w](ctx::fiber&& sched) { return worker_main(w, std::move(sched)); });
    switch_to(w);
  }
}

void resume(Block& b, int tid) {
  Worker* w = b.slots[tid].worker;
  b.slots[tid].state = State::Running;
  switch_to(w);
}

// Called inside a CUDA thread: back to the scheduler until released.
void suspend() {
  Worker* w = tl_worker;
  race::to_scheduler();
  asan_leave(&w->fake_stack, tl_sched_bottom, tl_sched_size);
  w->sched = std::move(w->sched).resume();
  asan_arrive(w->fake_stack, nullptr, nullptr);
  tl_worker = w;
  set_coords(tl_block, w->tid);
  race::to_thread(tl_block.slots[w->tid].race_context);
}

Slot& current_slot(const char* what) {
  if (!tl_worker || tl_worker->tid < 0) {
    std::fprintf(stderr, "tcn-emu: %s called outside a kernel\n", what);
    std::abort();
  }
  return tl_block.slots[tl_worker->tid];
}

// ---- releasing waiting threads -----------------------------------------------------------
// The threads out[first..] pass one barrier or collective together: for
// racecheck, what each did before it happens before what each does after.
void join_released(const Block& b, const std::vector<int>& out, size_t first) {
  if constexpr (race::kEnabled) {
    std::vector<void*> contexts;
    for (size_t i = first; i < out.size(); ++i) contexts.push_back(b.slots[out[i]].race_context);
    race::join(contexts);
  }
}

bool same_site(const Slot& a, const Slot& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

uint64_t poison_bits() { return ~uint64_t{0}; }

// Completes the collective of warp `warp` that lane `first` waits at, if all
// lanes of its mask have arrived. Appends the released threads to `out`.
bool try_warp(Block& b, int warp, int first, std::vector<int>& out) {
  const Slot& s0 = b.slots[warp * 32 + first];
  const unsigned mask = s0.mask;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    const int tid = warp * 32 + lane;
    if (tid >= b.n) {
      std::ostringstream m;
      m << warp_op_name(s0.wop) << " at " << s0.file << ":" << s0.line << " names lane " << lane << " of warp "
        << warp << " in mask 0x" << std::hex << mask << std::dec << ", but the block has only " << b.n << " threads";
      kernel_bug(b, m.str());
    }
    const Slot& s = b.slots[tid];
    if (s.state == State::Warp && s.mask == mask && s.wop == s0.wop && same_site(s, s0)) continue;
    if (s.state == State::Barrier) return false;  // may still be a deadlock: decided when nothing can proceed
    if (s.state == State::Warp) {
      std::ostringstream m;
      m << "divergent warp collective in warp " << warp << ": lane " << first << " " << state_of(s0) << ", lane "
        << lane << " " << state_of(s);
      kernel_bug(b, m.str());
    }
    std::ostringstream m;  // Done: it will never arrive
    m << "deadlock: lane " << first << " of warp " << warp << " waits at " << warp_op_name(s0.wop) << " "
      << s0.file << ":" << s0.line << " for lane " << lane << " (mask 0x" << std::hex << mask << std::dec
      << "), which has " << state_of(s);
    kernel_bug(b, m.str());
  }
  const int width = s0.width;
  if (width < 1 || width > 32 || (width & (width - 1))) {
    std::ostringstream m;
    m << warp_op_name(s0.wop) << " at " << s0.file << ":" << s0.line << ": width " << width
      << " is not a power of two in [1, 32]";
    kernel_bug(b, m.str());
  }
  unsigned votes = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((mask >> lane & 1u) && b.slots[warp * 32 + lane].value) votes |= 1u << lane;
  auto value_of = [&](int src) -> uint64_t {
    if (!(mask >> src & 1u)) return poison_bits();  // reading an inactive lane: undefined on the GPU
    return b.slots[warp * 32 + src].value;
  };
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    Slot& s = b.slots[warp * 32 + lane];
    const int base = lane & ~(width - 1);
    switch (s.wop) {
      case WarpOp::Sync: break;
      case WarpOp::Shfl: s.wresult = value_of(base + (s.arg & (width - 1))); break;
      case WarpOp::ShflUp: {
        const int src = lane - s.arg;
        s.wresult = src >= base ? value_of(src) : s.value;
        break;
      }
      case WarpOp::ShflDown: {
        const int src = lane + s.arg;
        s.wresult = src < base + width ? value_of(src) : s.value;
        break;
      }
      case WarpOp::ShflXor: {
        const int src = lane ^ s.arg;
        s.wresult = (src & ~(width - 1)) == base ? value_of(src) : s.value;
        break;
      }
      case WarpOp::Ballot: s.wresult = votes; break;
      case WarpOp::Any: s.wresult = votes != 0; break;
      case WarpOp::All: s.wresult = votes == mask; break;
    }
    out.push_back(warp * 32 + lane);
  }
  join_released(b, out, out.size() - std::popcount(mask));
  return true;
}

bool release_warps(Block& b, std::vector<int>& out) {
  const int warps = (b.n + 31) / 32;
  for (int w = 0; w < warps; ++w) {
    for (int lane = 0; lane < 32 && w * 32 + lane < b.n; ++lane) {
      const Slot& s = b.slots[w * 32 + lane];
      if (s.state != State::Warp) continue;
      try_warp(b, w, lane, out);
      break;  // one collective per warp per pass (its lanes are now released or still waiting)
    }
  }
  return !out.empty();
}

bool release_barrier(Block& b, std::vector<int>& out) {
  const Slot* first = nullptr;
  int count = 0, total = 0;
  for (int t = 0; t < b.n; ++t) {
    const Slot& s = b.slots[t];
    if (s.state == State::Done) continue;
    if (s.state != State::Barrier) return false;
    if (!first) first = &s;
    if (!same_site(s, *first) || s.bop != first->bop) {
      kernel_bug(b, "divergent __syncthreads: threads of one block wait at different barriers:" +
                        describe_threads(b, [](const Slot& x) { return state_of(x); }));
    }
    count += s.pred;
    total++;
  }
  if (!first) return false;
  int result = 0;
  switch (first->bop) {
    case BarrierOp::Sync: break;
    case BarrierOp::Count: result = count; break;
    case BarrierOp::And: result = count == total; break;
    case BarrierOp::Or: result = count > 0; break;
  }
  for (int t = 0; t < b.n; ++t) {
    if (b.slots[t].state != State::Barrier) continue;
    b.slots[t].bresult = result;
    out.push_back(t);
  }
  join_released(b, out, 0);
  return true;
}

// `tids` arrive in ascending order (the start list, release_warps and release_barrier all
// walk the threads upwards), so forward keeps them and reverse turns them round: no sort.
void order_threads(Block& b, std::vector<int>& tids) {
  switch (order()) {
    case Order::Forward: break;
    case Order::Reverse: std::reverse(tids.begin(), tids.end()); break;
    case Order::Random: std::shuffle(tids.begin(), tids.end(), b.rng); break;
  }
}

void run_block(Block& b, const KernelLaunch& l, const race::Grid& grid, uint64_t linear, uint64_t launch_id,
               const race::Ranges* tls) {
  const dim3 g = l.grid;
  b.launch = &l;
  b.grid = &grid;
  b.index = uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>(linear / g.x % g.y),
                  static_cast<unsigned>(linear / (uint64_t(g.x) * g.y))};
  b.n = static_cast<int>(l.block.x * l.block.y * l.block.z);
  b.next = b.done = 0;
  b.workers_used = 0;
  b.faulted = false;
  b.fault.clear();
  if (b.slots.size() < static_cast<size_t>(b.n)) b.slots.resize(b.n);
  for (int t = 0; t < b.n; ++t) b.slots[t].state = State::Unstarted;
  b.start_order.resize(b.n);
  for (int t = 0; t < b.n; ++t) b.start_order[t] = t;
  if (order() != Order::Forward) {
    b.rng.seed((launch_id + (seed() << 32)) * 0x9E3779B97F4A7C15ull + linear);
    order_threads(b, b.start_order);
  }
  b.linear = linear;
  if (race::kEnabled) b.shared.release();  // mapped anew: TSan forgets an unmapped range's accesses
  b.shared.resize(std::max<size_t>(l.smem, 1));
  std::memset(b.shared.data, 0xFF, b.shared.size);  // uninitialised shared memory reads as NaN / -1
  race::block_begin(grid, tls);
  blockIdx = b.index;
  blockDim = l.block;
  gridDim = l.grid;

  start_threads(b);
  std::vector<int> release;
  while (b.done < b.n && !b.faulted) {
    release.clear();
    if (!release_warps(b, release) && !release_barrier(b, release)) {
      kernel_bug(b, "deadlock: no thread can proceed:" + describe_threads(b, [](const Slot& x) { return state_of(x); }));
    }
    order_threads(b, release);
    for (int tid : release) {
      if (b.faulted) break;
      resume(b, tid);
    }
  }
  // After a fault, the threads still suspended are unwound (their fibers destroyed).
  for (size_t i = 0; i < b.workers_used; ++i) b.workers[i]->self = ctx::fiber();
  for (int t = 0; t < b.n; ++t) {
    if (b.slots[t].race_context) race::thread_drop(b.slots[t].race_context);
    b.slots[t].race_context = nullptr;
  }
  tl_worker = nullptr;
}

}  // namespace

// ---- the device-language entry points (cuda/emu/device.h) --------------------------------
int block_barrier(BarrierOp op, int pred, const char* file, int line) {
  Slot& s = current_slot("__syncthreads");
  s.state = State::Barrier;
  s.bop = op;
  s.pred = pred;
  s.file = file;
  s.line = line;
  suspend();
  return tl_block.slots[tl_worker->tid].bresult;
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  Slot& s = current_slot(warp_op_name(op));
  const int lane = tl_worker->tid % 32;
  if (!(mask >> lane & 1u)) {
    std::ostringstream m;
    m << warp_op_name(op) << " at " << file << ":" << line << ": calling lane " << lane << " (thread "
      << tl_worker->tid << ") is not in its mask 0x" << std::hex << mask;
    kernel_bug(tl_block, m.str());
  }
  s.state = State::Warp;
  s.wop = op;
  s.mask = mask;
  s.value = value;
  s.arg = arg;
  s.width = width;
  s.file = file;
  s.line = line;
  suspend();
  return tl_block.slots[tl_worker->tid].wresult;
}

void* dynamic_shared_memory() {
  current_slot("dynamic_shared");
  return tl_block.shared.data;
}

unsigned active_mask() {
  Slot& s = current_slot("__activemask");
  (void)s;
  const int warp = tl_worker->tid / 32;
  unsigned m = 0;
  for (int lane = 0; lane < 32 && warp * 32 + lane < tl_block.n; ++lane)
    if (tl_block.slots[warp * 32 + lane].state != State::Done) m |= 1u << lane;
  return m;
}

void trap(const char* file, int line) {
  current_slot("__trap");
  std::ostringstream m;
  m << "__trap() at " << file << ":" << line << " in thread " << coords(threadIdx) << " of block "
    << coords(blockIdx);
  throw KernelFault{m.str()};
}

// Runs f on a new OS thread and waits for it.
template <class F>
void on_new_thread(F f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);  // the scheduler's frames; CUDA threads run on fiber stacks
  pthread_t t;
  auto body = [](void* p) -> void* {
    (*static_cast<F*>(p))();
    return nullptr;
  };
  if (pthread_create(&t, &attr, body, &f) != 0) {
    std::fprintf(stderr, "tcn-emu: cannot start a thread for a block\n");
    std::abort();
  }
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

std::string run_grid(const KernelLaunch& l) {
  const uint64_t blocks = uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  const uint64_t id = g_launch_counter.fetch_add(1);
  std::atomic<bool> faulted{false};
  std::string fault;
  race::Grid grid = race::grid_begin();
  const race::Ranges* tls = race::resettable_tls();  // racecheck: this thread's TLS, if it can be reset
  auto one = [&](uint64_t linear) {
    if (faulted.load(std::memory_order_relaxed)) return;
    tl_sentinel.touch();
    Block& b = tl_block;
    run_block(b, l, grid, linear, id, tls);
    if (b.faulted && !faulted.exchange(true)) fault = where(b) + ": " + b.fault;
  };
  const int nt = threads();
  if (race::kEnabled && !tls) {  // one block at a time, each on a new OS thread (racecheck.h)
    for (uint64_t i = 0; i < blocks; ++i) on_new_thread([&] { one(i); });
  } else if (race::kEnabled || blocks == 1 || nt <= 1) {  // racecheck: one block at a time (racecheck.h)
    for (uint64_t i = 0; i < blocks; ++i) one(i);
  } else {
    const int64_t nb = static_cast<int64_t>(blocks);
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt)
    for (int64_t i = 0; i < nb; ++i) one(static_cast<uint64_t>(i));
  }
  race::grid_end(grid);
  return fault;
}

bool thread_exiting() { return tl_exiting; }

bool racecheck() { return race::kEnabled; }

void before_fork() { race::release_contexts(); }

}  // namespace tcn::emu
