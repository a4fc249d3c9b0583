// The caching allocator (used for the CPU and for each CUDA device), tested
// over a fake raw allocator with a fixed budget.
#include <cstdlib>
#include <map>
#include <set>

#include "core/caching_allocator.h"
#include "helpers.h"

using namespace tcn;

namespace {
struct FakeDevice {
  size_t budget, used = 0, calls = 0;
  std::set<void*> live;
  std::map<void*, size_t> sizes;
  explicit FakeDevice(size_t b) : budget(b) {}
  CachingAllocator make(size_t max_cached = ~size_t{0}) {
    return CachingAllocator(
        "fake:0",
        [this](size_t n) -> void* {
          calls++;
          if (used + n > budget) return nullptr;
          used += n;
          void* p = std::malloc(n);
          live.insert(p);
          sizes[p] = n;
          return p;
        },
        [this](void* p) {
          live.erase(p);
          used -= sizes.at(p);
          sizes.erase(p);
          std::free(p);
        },
        max_cached);
  }
};
}  // namespace

TEST_SUITE("allocator") {

TEST_CASE("freed blocks are reused by size, and stats follow") {
  FakeDevice dev(1 << 20);
  CachingAllocator a = dev.make();
  void* p = a.allocate(1000);  // rounded to 1024
  CHECK(a.stats().in_use == 1024);
  a.deallocate(p, 1000);
  CHECK(a.stats().in_use == 0);
  CHECK(a.stats().cached == 1024);
  void* q = a.allocate(900);  // same rounded size: the cached block
  CHECK(q == p);
  CHECK(a.stats().cache_hits == 1);
  CHECK(dev.calls == 1);
  void* big = a.allocate(4096);  // nothing cached that fits: a raw allocation
  CHECK(big != p);
  CHECK(dev.calls == 2);
  CHECK(a.stats().peak_in_use == 1024 + 4096);
  a.deallocate(q, 900);
  a.deallocate(big, 4096);
  a.reset_peak();
  CHECK(a.stats().peak_in_use == 0);
  a.empty_cache();
  CHECK(a.stats().cached == 0);
  CHECK(dev.live.empty());
}

TEST_CASE("a block is not reused for a request less than half its size") {
  FakeDevice dev(1 << 20);
  CachingAllocator a = dev.make();
  void* p = a.allocate(8192);
  a.deallocate(p, 8192);
  void* small = a.allocate(1024);
  CHECK(small != p);
  a.deallocate(small, 1024);
}

TEST_CASE("out of memory: the cache is released and the request retried, then a clear error") {
  FakeDevice dev(10 * 1024);
  CachingAllocator a = dev.make();
  void* p = a.allocate(6 * 1024);
  a.deallocate(p, 6 * 1024);  // cached, still held from the fake device
  void* q = a.allocate(8 * 1024);  // does not fit next to the cached block: cache released, retried
  CHECK(q != nullptr);
  CHECK(a.stats().cached == 0);
  CHECK_ERROR(a.allocate(4 * 1024), "out of memory on fake:0: asked for 4096 bytes with 8192 bytes in use");
  a.deallocate(q, 8 * 1024);
}

TEST_CASE("the cache is bounded") {
  FakeDevice dev(1 << 20);
  CachingAllocator a = dev.make(2048);
  void* p = a.allocate(2048);
  void* q = a.allocate(2048);
  a.deallocate(p, 2048);
  a.deallocate(q, 2048);  // over the bound: returned to the device
  CHECK(a.stats().cached == 2048);
  CHECK(dev.live.size() == 1);
}

TEST_CASE("the CPU allocator reports its statistics") {
  MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor t = empty({1 << 20});  // 4 MiB
    CHECK(memory_stats(Device::cpu()).in_use >= before.in_use + (4u << 20));
  }
  CHECK(memory_stats(Device::cpu()).in_use == before.in_use);
}

}  // TEST_SUITE
