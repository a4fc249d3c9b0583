#include "core/storage.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "cuda/runtime.h"

namespace tcn {

namespace {
// 64-byte aligned blocks. Freed blocks are kept by exact size and handed out
// again: a training step allocates the same sizes every time, so after the
// first step no memory goes back to (or comes fresh from) the kernel, which
// would otherwise page-fault and zero every large activation anew. At most
// kMaxCached bytes are kept; beyond that blocks are freed.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kMaxCached = size_t{4} << 30;

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + 63) / 64 * 64;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, rounded);
    if (!p) {
      release_cache();
      p = std::aligned_alloc(64, rounded);
    }
    TCN_CHECK(p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    const size_t rounded = (nbytes + 63) / 64 * 64;
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + rounded <= kMaxCached) {
      free_[rounded].push_back(ptr);
      cached_ += rounded;
    } else {
      std::free(ptr);
    }
  }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};
}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::allocator(device.index);
}

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, nbytes_);
}

}  // namespace tcn
