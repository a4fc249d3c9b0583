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

TEST_CASE("private pools: their blocks come back to them, never to the general cache, and a closed pool throws") {
  FakeDevice dev(1 << 20);
  CachingAllocator a = dev.make();
  void* general = a.allocate(1000);
  const CachingAllocator::PoolId pool = a.new_pool();
  a.use_pool(pool);
  void* p1 = a.allocate(1000);
  void* p2 = a.allocate(4000);
  CHECK(dev.calls == 3);
  CHECK(a.stats().pooled == 512 * 2 + 4096);
  a.deallocate(general, 1000);  // a general block freed while the pool is in use: back to the general cache
  a.deallocate(p1, 1000);
  a.use_pool(0);
  a.deallocate(p2, 4000);  // freed with the pool not in use: still back to the pool
  void* g2 = a.allocate(1000);
  CHECK(g2 == general);  // the general cache served it, not the pool's free block p1
  void* g3 = a.allocate(4000);
  CHECK(g3 != p2);
  CHECK(dev.calls == 4);
  a.use_pool(pool, false);  // as during a capture: no raw allocation
  CHECK(a.allocate(1000) == p1);
  CHECK(a.allocate(4000) == p2);
  CHECK_THROWS_WITH_AS(a.allocate(1000), doctest::Contains("private memory pool on fake:0 has no free block"),
                       PoolExhausted);
  CHECK(dev.calls == 4);
  a.use_pool(0);
  a.empty_cache();  // the general cache only
  CHECK(dev.live.count(p1) == 1);
  a.release_pool(pool);  // p1 and p2 are live: they go to the general cache when freed
  a.deallocate(p1, 1000);
  a.deallocate(p2, 4000);
  CHECK(a.stats().pooled == 0);
  CHECK(a.allocate(4000) == p2);  // from the general cache now
  a.deallocate(p2, 4000);
  a.deallocate(g2, 1000);
  a.deallocate(g3, 4000);
  // A pool takes a general cached block before calling the raw allocator.
  const CachingAllocator::PoolId pool2 = a.new_pool();
  a.use_pool(pool2, false);
  void* p3 = a.allocate(1000);
  CHECK(p3 != nullptr);
  CHECK(dev.calls == 4);
  a.use_pool(0);
  a.release_pool(pool2);
  a.deallocate(p3, 1000);
  a.empty_cache();
  CHECK(dev.live.count(p2) == 0);
  CHECK_THROWS_WITH_AS(a.use_pool(pool), doctest::Contains("pool 1 does not exist"), Error);
}
