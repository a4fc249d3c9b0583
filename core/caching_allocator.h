// A caching allocator over a raw device allocator (aligned_alloc on the CPU,
// cudaMalloc on a GPU). Freed blocks are kept by size and handed out again, so
// a training step, which allocates the same sizes every time, stops calling the
// raw allocator after its first step: no page faults and zeroing on the CPU, no
// cudaMalloc/cudaFree (which synchronise the device) on a GPU.
//
// Sizes are rounded up to 512 bytes; a request takes a cached block of its
// rounded size, or the smallest cached block at most twice as large. When the
// raw allocator fails, the cache is released and the request retried once; if
// it fails again the error says what was asked and what is in use.
//
// Private pools (for CUDA graphs, core/step_graph.h): a captured step writes
// into the addresses it was captured with, so its blocks must stay reserved for
// it between replays. While a pool is in use (use_pool), requests are served
// from that pool's free blocks, then from the general cache's (the block joins
// the pool), then by the raw allocator; blocks handed out then belong to the
// pool for good: freed, they return to it, never to the general cache, whether
// the pool is in use at the time or not. With raw allocation forbidden (a
// capture is in progress, where cudaMalloc may not be called) a request nothing
// cached can serve throws PoolExhausted. release_pool hands a pool's free
// blocks to the general cache now, and its live ones when they are freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocator.h"
#include "core/error.h"

namespace tcn {

// Thrown when a pool that may not grow (raw allocation forbidden) has no block for a request.
struct PoolExhausted : Error {
  using Error::Error;
};

struct MemoryStats {
  size_t in_use = 0;       // bytes handed out and not yet freed (rounded sizes)
  size_t peak_in_use = 0;  // maximum of in_use since start (or reset_peak)
  size_t cached = 0;       // bytes held in the cache, free for reuse
  size_t raw_allocs = 0;   // calls to the raw allocator
  size_t cache_hits = 0;   // requests served from the cache
  size_t pooled = 0;       // bytes held by private pools, live or free (included in in_use and cached)
};

class CachingAllocator final : public Allocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // nullptr when out of memory
  using RawFree = std::function<void(void*)>;
  CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free, size_t max_cached);
  ~CachingAllocator() override;

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  MemoryStats stats() const;
  void reset_peak();
  // Returns every cached block to the raw allocator.
  void empty_cache();

  static size_t round_size(size_t nbytes) { return (nbytes + 511) / 512 * 512; }

  // Private pools. Pool 0 is the general cache; new_pool() returns a fresh id.
  using PoolId = uint64_t;
  PoolId new_pool();
  // Serves later requests from `pool` (0: the general cache again). With
  // allow_raw false, a request the pool cannot serve throws PoolExhausted
  // instead of calling the raw allocator.
  void use_pool(PoolId pool, bool allow_raw = true);
  // Ends the pool: its blocks go to the general cache (free ones now, live ones when freed).
  void release_pool(PoolId pool);

 private:
  void release_all_cached();  // caller holds mu_
  // Keeps a freed general block in the cache, or frees it past max_cached (caller holds mu_).
  void cache_or_free(void* p, size_t size);
  using FreeList = std::multimap<size_t, void*>;
  // The block of `size` (rounded) from `list`, or nullptr (caller holds mu_).
  static void* take(FreeList& list, size_t size);
  struct Block {
    size_t size;
    PoolId pool;
  };
  PoolId active_ = 0;
  bool allow_raw_ = true;
  PoolId next_pool_ = 0;
  std::map<PoolId, FreeList> pools_;  // live private pools and their free blocks
  std::string device_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  size_t max_cached_;
  mutable std::mutex mu_;
  FreeList free_;                                 // general cache: rounded size -> cached block
  std::unordered_map<void*, Block> blocks_;       // every live or cached block -> its size and pool
  MemoryStats stats_;
};

}  // namespace tcn
