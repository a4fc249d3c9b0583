#include "core/caching_allocator.h"

namespace tcn {

CachingAllocator::CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free, size_t max_cached)
    : device_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)),
      max_cached_(max_cached) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_all_cached();
  for (auto& [id, list] : pools_)
    for (auto& [size, p] : list) raw_free_(p);
}

void* CachingAllocator::take(FreeList& list, size_t size) {
  auto it = list.lower_bound(size);
  if (it == list.end() || it->first > 2 * size) return nullptr;  // reuse: exact size or at most twice as large
  void* p = it->second;
  list.erase(it);
  return p;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = active_ ? take(pools_.at(active_), size) : nullptr;
  if (!p && (p = take(free_, size)) && active_) {  // a general cached block joins the pool
    Block& b = blocks_.at(p);
    b.pool = active_;
    stats_.pooled += b.size;
  }
  if (p) {
    const size_t got = blocks_.at(p).size;
    stats_.cached -= got;
    stats_.in_use += got;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    stats_.cache_hits++;
    return p;
  }
  if (!allow_raw_)
    throw PoolExhausted(detail::concat("the private memory pool on ", device_, " has no free block for ", nbytes,
                                       " bytes, and it may not grow now (a CUDA graph capture is in progress)"));
  p = raw_alloc_(size);
  if (!p && stats_.cached > 0) {  // give the cache back and try once more
    release_all_cached();
    p = raw_alloc_(size);
  }
  TCN_CHECK(p != nullptr, "out of memory on ", device_, ": asked for ", nbytes, " bytes with ", stats_.in_use,
            " bytes in use (peak ", stats_.peak_in_use, ")");
  blocks_[p] = Block{size, active_};
  if (active_) stats_.pooled += size;
  stats_.raw_allocs++;
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  TCN_CHECK(it != blocks_.end(), "CachingAllocator(", device_, "): freeing a pointer it did not allocate");
  const Block b = it->second;
  stats_.in_use -= b.size;
  if (b.pool) {  // a private pool's block goes back to its pool (or, the pool released, to the general cache)
    auto pool = pools_.find(b.pool);
    if (pool != pools_.end()) {
      pool->second.emplace(b.size, ptr);
      stats_.cached += b.size;
      return;
    }
    stats_.pooled -= b.size;
    it->second.pool = 0;
  }
  cache_or_free(ptr, b.size);
}

void CachingAllocator::cache_or_free(void* p, size_t size) {
  if (stats_.cached + size <= max_cached_) {
    free_.emplace(size, p);
    stats_.cached += size;
  } else {
    blocks_.erase(p);
    raw_free_(p);
  }
}

CachingAllocator::PoolId CachingAllocator::new_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  pools_[++next_pool_];
  return next_pool_;
}

void CachingAllocator::use_pool(PoolId pool, bool allow_raw) {
  std::lock_guard<std::mutex> lock(mu_);
  TCN_CHECK(pool == 0 || pools_.count(pool), "CachingAllocator(", device_, "): pool ", pool, " does not exist");
  active_ = pool;
  allow_raw_ = allow_raw;
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  FreeList freed = std::move(it->second);
  pools_.erase(it);
  for (auto& [size, p] : freed) {  // to the general cache, as any freed block
    stats_.pooled -= size;
    stats_.cached -= size;
    blocks_.at(p).pool = 0;
    cache_or_free(p, size);
  }
  if (active_ == pool) {
    active_ = 0;
    allow_raw_ = true;
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

void CachingAllocator::release_all_cached() {  // the general cache only: pools keep their blocks
  for (auto& [size, p] : free_) {
    blocks_.erase(p);
    raw_free_(p);
  }
  free_.clear();
  stats_.cached = 0;
  for (auto& [id, list] : pools_)
    for (auto& [size, p] : list) stats_.cached += size;
}

}  // namespace tcn
