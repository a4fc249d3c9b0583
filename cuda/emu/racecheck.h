// Racecheck for the emulated device: ThreadSanitizer (TSan) sees every memory
// access of the kernels and is told exactly the orderings CUDA guarantees, so
// an access pair that CUDA leaves unordered is reported as a data race, in
// every resume order (TSan reasons about happens-before, not about the order
// the threads happened to run in).
//
// Built when TCN_SANITIZE=thread (CMakeLists.txt): everything is compiled
// with -fsanitize=thread except the scheduler (scheduler.cpp and this
// header's user), whose own bookkeeping is therefore invisible to TSan. The
// scheduler calls the hooks below:
//   - every CUDA thread runs in a TSan fiber context of its own within its
//     grid, even when one Boost fiber runs several CUDA threads one after
//     another; switches never synchronise (__tsan_switch_to_fiber_no_sync).
//     The contexts are a pool of kContexts, kept from kernel to kernel:
//     thread t of linear block b uses context (b mod (kContexts / n)) * n + t
//     for n threads per block. Reuse across kernels orders nothing that the
//     kernel boundary does not order already (below); within a grid the
//     threads of a block always have distinct contexts, and so do two blocks
//     unless they are a multiple of kContexts / n apart (16 for 256-thread
//     blocks). Such blocks share their contexts, clocks included, so the
//     later one counts as ordered after the earlier: a race between them is
//     not seen. A fresh context per CUDA thread would see it, but creating
//     tens of millions of TSan threads (the whole emulated suite) spends most
//     of the run in TSan's thread bookkeeping. (TSan's own limit is of the
//     same kind: its runtime has 256 slots, and a context that takes over a
//     slot counts as ordered after the slot's earlier holders.) A report
//     names a context by the CUDA thread it last ran, which for the earlier
//     of the two accesses may be a later block or kernel than the one that
//     made it;
//   - a kernel launch: the launching context releases a per-launch object that
//     each CUDA thread acquires when it starts; each thread releases a second
//     object at its end, which the launching context acquires when the grid is
//     done (kernel boundaries, and through the host, stream order and events);
//   - a barrier or a warp collective: when the scheduler releases its
//     participants, each of them releases a fresh object and then each
//     acquires it, so everything before the barrier happens before everything
//     after it, among exactly the threads that took part (a warp's lanes, or
//     the block's live threads). Blocks share nothing, so one block reading
//     what another block of the same kernel writes is a race;
//   - atomics are std::atomic_ref (cuda/emu/device.h), which TSan knows.
//   - a block's shared memory is new: the blocks run one at a time, on the
//     launching thread, and before each TSan forgets every access to that
//     thread's static TLS (where the static __shared__ variables live, as
//     thread_locals); the dynamic shared memory is mapped anew (TSan forgets
//     an unmapped range). What one block left there races with nothing of
//     the next. TSan's public ways to forget a range are few: the dynamic
//     annotation AnnotateNewMemory is a no-op in its runtime, and a new OS
//     thread per block (which TSan starts with clean TLS) spent most of the
//     run in thread bookkeeping. So the TLS is "allocated" anew through TSan's
//     Java heap interface (__tsan_java_alloc resets the range's history), the
//     "heap" being a window around the first launching thread's static TLS.
//     A race on static shared memory is therefore reported as in a "heap
//     block" allocated by the launching thread. A thread whose TLS lies
//     outside the window runs each block on an OS thread of its own instead.
// TSan's clocks: the GCC 12 runtime spends ~335 us per fiber (clang 14's: ~5
// us), so CMakeLists.txt asks for clang.
#pragma once

#include <cstddef>

#if TCN_EMU_RACECHECK
#if !defined(__x86_64__)
#error "racecheck's address ranges (TSan's high application memory) are x86-64's"
#endif
#include <link.h>
#include <sanitizer/tsan_interface.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

// TSan's Java interface (tsan_interface_java.h, exported by its runtime).
extern "C" void __tsan_java_init(unsigned long heap_begin, unsigned long heap_size);
extern "C" void __tsan_java_alloc(unsigned long ptr, unsigned long size);
extern "C" void __tsan_java_free(unsigned long ptr, unsigned long size);
#endif

namespace tcn::emu::race {

#if TCN_EMU_RACECHECK
constexpr bool kEnabled = true;

// The context the scheduler runs in on this OS thread (the thread's own, or
// the host's when blocks run on the calling thread).
inline thread_local void* tl_scheduler = nullptr;

struct Grid {
  char* start = nullptr;  // released by the launching context (at launch, at each block), acquired by each CUDA thread
  char* end = nullptr;    // released by each CUDA thread, acquired by the launching context
};

inline Grid grid_begin() {
  Grid g{new char, new char};
  __tsan_release(g.start);
  return g;
}
inline void grid_end(Grid& g) {
  __tsan_acquire(g.end);
  delete g.start;  // freeing resets the objects: the next launch starts clean
  delete g.end;
}

// ---- a block's shared memory starts with no history -------------------------------------
// (The pool, the window and the stack pool of scheduler.cpp are shared without
// locks: the emulator runs one grid at a time, under its queue's mutex, the
// blocks one after another.)
// The "Java heap" that TSan is told of: a window around the static TLS of the
// first thread that runs a block. Kept small because a report on an address
// inside it that is in no "allocation" makes TSan search it backwards, 8 bytes
// at a time.
struct Window {
  unsigned long begin = 0, end = 0;
};
// TSan's high application memory on x86-64 (thread stacks, static TLS, mappings);
// below it, TSan's own heap.
constexpr unsigned long kHighMemBegin = 0x7e8000000000ul, kHighMemEnd = 0x800000000000ul;
inline Window& window() {
  static Window w;
  return w;
}

// This thread's instance of every loaded module's TLS segment that lives in
// the static TLS area (the __shared__ variables of the kernels in the program
// and in libtcn do). A module's TLS allocated on the heap (modules loaded by
// dlopen, which hold no kernels) is left alone.
using Ranges = std::vector<std::pair<unsigned long, unsigned long>>;  // [begin, end), 8-byte aligned
inline Ranges static_tls() {
  Ranges r;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto p = reinterpret_cast<unsigned long>(info->dlpi_tls_data);
          if (info->dlpi_phdr[i].p_type != PT_TLS || !p || p < kHighMemBegin) continue;
          static_cast<Ranges*>(out)->emplace_back(p & ~7ul, (p + info->dlpi_phdr[i].p_memsz + 7) & ~7ul);
        }
        return 0;
      },
      &r);
  return r;
}

// The ranges to reset before each block run on this thread, or nullptr when
// this thread's TLS falls outside the window (then its blocks each get an OS
// thread of their own, which TSan starts with clean TLS: slower, as sound).
inline const Ranges* resettable_tls() {
  static thread_local const Ranges tls = static_tls();
  Window& w = window();
  if (w.begin == 0 && !tls.empty()) {
    constexpr unsigned long kMargin = 64ul << 20;
    w.begin = tls.front().first, w.end = tls.front().second;
    for (const auto& [a, e] : tls) w.begin = std::min(w.begin, a), w.end = std::max(w.end, e);
    w.begin -= kMargin, w.end = std::min(w.end + kMargin, kHighMemEnd);
    __tsan_java_init(w.begin, w.end - w.begin);
  }
  if (tls.empty()) return nullptr;  // nothing found to reset: the safe way
  for (const auto& [a, e] : tls)
    if (a < w.begin || e > w.end) return nullptr;
  return &tls;
}

// A block starts on this OS thread. Every access to its static TLS is
// forgotten ("allocated" anew through the Java interface), and the launching
// context releases g.start once more, so that what the scheduler wrote for
// the block (its dynamic shared memory, mapped anew and filled: see
// scheduler.cpp) happens before its threads.
inline void block_begin(const Grid& g, const Ranges* tls) {
  tl_scheduler = __tsan_get_current_fiber();
  if (tls)
    for (const auto& [a, e] : *tls) {
      __tsan_java_free(a, e - a);
      __tsan_java_alloc(a, e - a);
    }
  __tsan_release(g.start);
}

constexpr uint64_t kContexts = 4096;  // at least the largest block (1,024 threads)
// The pool (its contexts made on first use, never freed but by before_fork).
inline void** contexts() {
  static void** pool = new void*[kContexts]();
  return pool;
}
// Destroys the pool's contexts: TSan counts each as a live thread, and in the
// child of a fork with live threads it ignores everything.
inline void release_contexts() {
  for (uint64_t i = 0; i < kContexts; ++i)
    if (void*& f = contexts()[i]) {
      __tsan_destroy_fiber(f);
      f = nullptr;
    }
}

// A CUDA thread starts (called on its fiber stack, from the scheduler's
// context); returns its TSan context, now current.
inline void* thread_begin(const Grid& g, uint64_t block, unsigned tid, unsigned block_threads) {
  // Blocks a multiple of kContexts / block_threads apart share, thread for thread.
  void*& f = contexts()[block % (kContexts / block_threads) * block_threads + tid];
  if (!f) f = __tsan_create_fiber(0);
  char name[48];
  std::snprintf(name, sizeof name, "CUDA block %llu thread %u", static_cast<unsigned long long>(block), tid);
  __tsan_set_fiber_name(f, name);
  __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync);
  __tsan_acquire(g.start);
  return f;
}
// A context that must not be reused (its thread trapped or was abandoned
// mid-kernel, leaving TSan's call stack of it unbalanced) is destroyed; its
// place in the pool gets a new one when next needed.
inline void retire(void* f) {
  void** pool = contexts();
  for (uint64_t i = 0; i < kContexts; ++i)
    if (pool[i] == f) pool[i] = nullptr;
  __tsan_destroy_fiber(f);
}

// `trapped`: the thread ended in a __trap, whose message (made on its context)
// the scheduler reads; the switch then orders the thread before the scheduler.
// Harmless: a trap ends the launch, and the context is retired.
inline void thread_end(const Grid& g, void* f, bool trapped) {
  __tsan_release(g.end);
  __tsan_switch_to_fiber(tl_scheduler, trapped ? 0 : __tsan_switch_to_fiber_no_sync);
  if (trapped) retire(f);
}
// A thread whose block faulted: its context goes without ordering anything.
inline void thread_drop(void* f) { retire(f); }

// Around the scheduler's switches into and out of a suspended CUDA thread.
inline void to_scheduler() { __tsan_switch_to_fiber(tl_scheduler, __tsan_switch_to_fiber_no_sync); }
inline void to_thread(void* f) { __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync); }

// A barrier or warp collective releases `contexts`: all-to-all happens-before.
template <class Contexts>
void join(const Contexts& contexts) {
  char* sync = new char;
  for (void* f : contexts) {
    to_thread(f);
    __tsan_release(sync);
  }
  for (void* f : contexts) {
    to_thread(f);
    __tsan_acquire(sync);
  }
  to_scheduler();
  delete sync;
}

#else
constexpr bool kEnabled = false;
struct Grid {};
inline Grid grid_begin() { return {}; }
inline void grid_end(Grid&) {}
struct Ranges {};
inline const Ranges* resettable_tls() { return nullptr; }
inline void block_begin(const Grid&, const Ranges*) {}
inline void* thread_begin(const Grid&, uint64_t, unsigned, unsigned) { return nullptr; }
inline void thread_end(const Grid&, void*, bool) {}
inline void thread_drop(void*) {}
inline void release_contexts() {}
inline void to_scheduler() {}
inline void to_thread(void*) {}
template <class Contexts>
void join(const Contexts&) {}
#endif

}  // namespace tcn::emu::race
