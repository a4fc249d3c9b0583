#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/error.h"
#include "cuda/runtime.h"

namespace tcn {

namespace {
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    TCN_CHECK(p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
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
