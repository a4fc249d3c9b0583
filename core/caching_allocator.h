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
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocator.h"

namespace tcn {

struct MemoryStats {
  size_t in_use = 0;       // bytes handed out and not yet freed (rounded sizes)
  size_t peak_in_use = 0;  // maximum of in_use since start (or reset_peak)
  size_t cached = 0;       // bytes held in the cache, free for reuse
  size_t raw_allocs = 0;   // calls to the raw allocator
  size_t cache_hits = 0;   // requests served from the cache
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

 private:
  void release_all_cached();  // caller holds mu_
  std::string device_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  size_t max_cached_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;              // rounded size -> cached block
  std::unordered_map<void*, size_t> block_size_;  // every live or cached block -> its real size
  MemoryStats stats_;
};

}  // namespace tcn
