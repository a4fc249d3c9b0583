// The emulated device's memory: every cudaMalloc allocation lives in one
// dedicated mapping, which is readable and writable only while the emulator
// itself works on it (the queue running kernels, copies and memsets, cuBLAS,
// Thrust's host backend) and inaccessible otherwise, as device memory is to
// host code on a GPU. A host dereference of a device pointer then faults, and
// the handler names the address, the allocation it falls in and where that
// was allocated, instead of the silent success that host memory would give.
//
// TCN_EMU_PROTECT=0 leaves the mapping accessible (to print device arrays from
// gdb). Pinned host memory is not in the mapping and stays accessible, as on a
// GPU. Under AddressSanitizer the unused tail of each allocation's block and
// every freed block are poisoned, so that kernels overrunning an allocation
// are still caught.
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define TCN_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define TCN_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define TCN_EMU_POISON(p, n) ((void)(p), (void)(n))
#define TCN_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace tcn::emu {

namespace {

constexpr size_t kAlign = 256;      // cudaMalloc's alignment
constexpr int kSiteFrames = 12;     // the allocation's call stack, kept for the fault message
// The mapping is backed by 2 MiB pages where the kernel allows (MADV_HUGEPAGE)
// and protection is toggled in whole 2 MiB steps: mprotect's cost grows with
// the page-table entries it rewrites, 512 times fewer than with 4 KiB pages.
constexpr size_t kHuge = size_t{2} << 20;

struct Block {
  size_t size = 0;      // what was asked for
  size_t reserved = 0;  // the block, a multiple of kAlign with at least kAlign to spare (a red zone)
  void* site[kSiteFrames] = {};
  int frames = 0;
};

struct Arena {
  std::recursive_mutex mu;
  char* base = nullptr;
  size_t capacity = 0;     // reserved address space
  size_t high = 0;         // bytes ever handed out, from base: what protection toggles
  std::map<size_t, size_t> free_spans;  // offset -> size, coalesced
  std::map<uintptr_t, Block> blocks;    // start -> block
  bool protect = true;
  int open = 0;            // nested HostAccess scopes
  struct sigaction previous {};
  bool handler_installed = false;
};

Arena& arena() {
  static Arena* a = new Arena;  // never destroyed: frees may come from static destructors
  return *a;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcn-emu: %s\n", what);
  std::abort();
}

void write_str(const char* s) { (void)!write(2, s, std::strlen(s)); }

void write_num(const char* label, uintptr_t v, bool hex) {
  char buf[64];
  std::snprintf(buf, sizeof buf, hex ? "%s0x%lx" : "%s%lu", label, static_cast<unsigned long>(v));
  write_str(buf);
}

void on_fault(int sig, siginfo_t* info, void* uctx);

// Our handler first, whatever a test framework installed since (doctest sets
// its own for each test case); other faults go on to that one.
void install_handler(Arena& a) {
  struct sigaction current {};
  sigaction(SIGSEGV, nullptr, &current);
  if (a.handler_installed && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_fault) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &a.previous);
  a.handler_installed = true;
}

void set_access(Arena& a, bool open) {
  if (!a.protect || a.high == 0) return;
  if (mprotect(a.base, a.high, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) die("mprotect of device memory failed");
  if (!open) install_handler(a);
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  Arena& a = arena();
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const auto base = reinterpret_cast<uintptr_t>(a.base);
  if (info->si_code <= 0 || !a.base || addr < base || addr >= base + a.capacity) {
    // Not ours: the handler that was there before, as if we had never been installed.
    sigaction(SIGSEGV, &a.previous, nullptr);
    if (!(a.previous.sa_flags & SA_SIGINFO) && a.previous.sa_handler == SIG_IGN) signal(SIGSEGV, SIG_DFL);
    (void)sig;
    (void)uctx;
    return;  // the instruction faults again, into that handler
  }
  write_str("tcn-emu: host code accessed device memory at ");
  write_num("", addr, true);
  write_str(" (on a GPU this is a segmentation fault: copy it to the host with cudaMemcpy first)\n");
  auto it = a.blocks.upper_bound(addr);
  if (it != a.blocks.begin() && addr < std::prev(it)->first + std::prev(it)->second.reserved) {
    --it;
    write_num("  it is byte ", addr - it->first, false);
    write_num(" of the device allocation of ", it->second.size, false);
    write_num(" bytes at ", it->first, true);
    write_str(addr - it->first >= it->second.size ? " (past its end)\n" : "\n");
    write_str("  allocated at:\n");
    backtrace_symbols_fd(it->second.site, it->second.frames, 2);
  } else {
    write_str("  it is in no live allocation (freed memory)\n");
  }
  write_str("  the access, at:\n");
  void* here[32];
  backtrace_symbols_fd(here, backtrace(here, 32), 2);
  write_str("  (addresses resolve with addr2line -e <program>; TCN_EMU_PROTECT=0 turns this check off)\n");
  signal(SIGABRT, SIG_DFL);
  std::abort();
}

void reserve(Arena& a) {
  if (a.base) return;
  a.protect = protects_device_memory();
  a.capacity = std::max<size_t>(memory_limit() * 2, size_t{1} << 30);
  a.capacity = (a.capacity + kHuge - 1) / kHuge * kHuge;
  void* m = mmap(nullptr, a.capacity + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) die("cannot reserve address space for device memory");
  // Start on a 2 MiB boundary, so that huge pages can back it from the first byte.
  const auto start = (reinterpret_cast<uintptr_t>(m) + kHuge - 1) / kHuge * kHuge;
  a.base = reinterpret_cast<char*>(start);
#ifdef MADV_HUGEPAGE
  madvise(a.base, a.capacity, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
#endif
  a.free_spans[0] = a.capacity;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the fault handler
}

}  // namespace

void* device_alloc(size_t size) {
  Arena& a = arena();
  std::lock_guard<std::recursive_mutex> lock(a.mu);
  reserve(a);
  const size_t want = (size + kAlign - 1) / kAlign * kAlign + kAlign;
  auto span = a.free_spans.begin();
  while (span != a.free_spans.end() && span->second < want) ++span;
  if (span == a.free_spans.end()) return nullptr;
  const size_t offset = span->first, left = span->second - want;
  a.free_spans.erase(span);
  if (left) a.free_spans[offset + want] = left;
  const size_t old_high = a.high;
  a.high = std::max(a.high, (offset + want + kHuge - 1) / kHuge * kHuge);
  char* p = a.base + offset;
  // The pages are usable now: open if a scope is open, or unprotected; else inaccessible.
  if (a.high > old_high && (a.open > 0 || !a.protect))
    mprotect(a.base + old_high, a.high - old_high, PROT_READ | PROT_WRITE);
  Block b;
  b.size = size;
  b.reserved = want;
  b.frames = backtrace(b.site, kSiteFrames);
  a.blocks[reinterpret_cast<uintptr_t>(p)] = b;
  TCN_EMU_POISON(p, want);
  TCN_EMU_UNPOISON(p, size);
  return p;
}

bool device_free(void* p) {
  Arena& a = arena();
  std::lock_guard<std::recursive_mutex> lock(a.mu);
  auto it = a.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == a.blocks.end()) return false;
  size_t offset = static_cast<size_t>(static_cast<char*>(p) - a.base), size = it->second.reserved;
  a.blocks.erase(it);
  TCN_EMU_POISON(p, size);
  // Coalesce with the neighbouring free spans.
  auto next = a.free_spans.lower_bound(offset);
  if (next != a.free_spans.end() && offset + size == next->first) {
    size += next->second;
    next = a.free_spans.erase(next);
  }
  if (next != a.free_spans.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      a.free_spans.erase(prev);
    }
  }
  a.free_spans[offset] = size;
  return true;
}

bool protects_device_memory() {
  static const bool on = [] {
    const char* v = std::getenv("TCN_EMU_PROTECT");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

HostAccess::HostAccess() {
  Arena& a = arena();
  std::lock_guard<std::recursive_mutex> lock(a.mu);
  if (a.open++ == 0) set_access(a, true);
}

HostAccess::~HostAccess() {
  Arena& a = arena();
  std::lock_guard<std::recursive_mutex> lock(a.mu);
  if (--a.open == 0) set_access(a, false);
}

}  // namespace tcn::emu
