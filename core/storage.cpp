#include "core/storage.h"

#include <cstdlib>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/devices.h"

namespace tcn {

Allocator* cpu_allocator() {
  // 64-byte aligned blocks, cached (core/caching_allocator.h): reusing freed
  // activations avoids page faults and kernel zeroing on every training step.
  static CachingAllocator a(
      "cpu", [](size_t n) { return std::aligned_alloc(64, n); }, [](void* p) { std::free(p); },
      size_t{4} << 30);
  return &a;
}

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) return static_cast<CachingAllocator*>(cpu_allocator())->stats();
  return cuda::memory_stats(device.index);
}

void reset_peak_memory(Device device) {
  if (device.is_cpu()) return static_cast<CachingAllocator*>(cpu_allocator())->reset_peak();
  cuda::caching_allocator(device.index)->reset_peak();
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
