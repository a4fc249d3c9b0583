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
//   - every CUDA thread runs in its own TSan fiber context, created from the
//     context that starts the block and destroyed when the thread ends, even
//     when one Boost fiber runs several CUDA threads one after another;
//     switches never synchronise (__tsan_switch_to_fiber_no_sync);
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
//   - a block's shared memory is new: each block runs on a thread of its own
//     (created and joined by the launching context), so its static __shared__
//     variables (thread_locals) and its dynamic shared memory and fiber stacks
//     (mappings of that thread, unmapped when it ends) start with no history.
//     TSan forgets a thread's TLS and a mapping's accesses when they go.
// TSan's clocks: the GCC 12 runtime spends ~335 us per fiber (clang 14's: ~5
// us), so CMakeLists.txt asks for clang.
#pragma once

#include <cstddef>

#if TCN_EMU_RACECHECK
#include <sanitizer/tsan_interface.h>

#include <cstdint>
#include <cstdio>
#endif

namespace tcn::emu::race {

#if TCN_EMU_RACECHECK
constexpr bool kEnabled = true;

// The context the scheduler runs in on this OS thread (the thread's own, or
// the host's when blocks run on the calling thread).
inline thread_local void* tl_scheduler = nullptr;

struct Grid {
  char* start = nullptr;  // released by the launching context, acquired by each CUDA thread
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

// A block starts on its own OS thread.
inline void block_begin() { tl_scheduler = __tsan_get_current_fiber(); }

// A CUDA thread starts (called on its fiber stack, from the scheduler's
// context); returns its TSan context, now current.
inline void* thread_begin(const Grid& g, uint64_t block, unsigned tid) {
  void* f = __tsan_create_fiber(0);
  char name[48];
  std::snprintf(name, sizeof name, "CUDA block %llu thread %u", static_cast<unsigned long long>(block), tid);
  __tsan_set_fiber_name(f, name);
  __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync);
  __tsan_acquire(g.start);
  return f;
}
// `trapped`: the thread ended in a __trap, whose message (made on its context)
// the scheduler reads; the switch then orders the thread before the scheduler.
// Harmless: a trap ends the launch, and the context is lost for good.
inline void thread_end(const Grid& g, void* f, bool trapped) {
  __tsan_release(g.end);
  __tsan_switch_to_fiber(tl_scheduler, trapped ? 0 : __tsan_switch_to_fiber_no_sync);
  __tsan_destroy_fiber(f);
}
// A thread whose block faulted: its context goes without ordering anything.
inline void thread_drop(void* f) { __tsan_destroy_fiber(f); }

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
inline void block_begin() {}
inline void* thread_begin(const Grid&, uint64_t, unsigned) { return nullptr; }
inline void thread_end(const Grid&, void*, bool) {}
inline void thread_drop(void*) {}
inline void to_scheduler() {}
inline void to_thread(void*) {}
template <class Contexts>
void join(const Contexts&) {}
#endif

}  // namespace tcn::emu::race
