#include "core/caching_allocator.h"

#include "core/error.h"

namespace tcn {

CachingAllocator::CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free, size_t max_cached)
    : device_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)),
      max_cached_(max_cached) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_all_cached();
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {  // reuse: exact size or at most twice as large
    void* p = it->second;
    stats_.cached -= it->first;
    free_.erase(it);
    stats_.in_use += block_size_.at(p);
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    stats_.cache_hits++;
    return p;
  }
  void* p = raw_alloc_(size);
  if (!p && stats_.cached > 0) {  // give the cache back and try once more
    release_all_cached();
    p = raw_alloc_(size);
  }
  TCN_CHECK(p != nullptr, "out of memory on ", device_, ": asked for ", nbytes, " bytes with ", stats_.in_use,
            " bytes in use (peak ", stats_.peak_in_use, ")");
  block_size_[p] = size;
  stats_.raw_allocs++;
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = block_size_.find(ptr);
  TCN_CHECK(it != block_size_.end(), "CachingAllocator(", device_, "): freeing a pointer it did not allocate");
  const size_t size = it->second;
  stats_.in_use -= size;
  if (stats_.cached + size <= max_cached_) {
    free_.emplace(size, ptr);
    stats_.cached += size;
  } else {
    block_size_.erase(it);
    raw_free_(ptr);
  }
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use = stats_.in_use;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_all_cached();
}

void CachingAllocator::release_all_cached() {
  for (auto& [size, p] : free_) {
    block_size_.erase(p);
    raw_free_(p);
  }
  free_.clear();
  stats_.cached = 0;
}

}  // namespace tcn
