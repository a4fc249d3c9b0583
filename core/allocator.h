// Memory for tensors comes from one allocator per device. The CPU allocator
// hands out 64-byte aligned blocks; the CUDA allocator lives in cuda/.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace tcn {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

struct MemoryStats;
Allocator* cpu_allocator();
// Bytes in use, peak, cached, for the CPU or a CUDA device (core/caching_allocator.h).
MemoryStats memory_stats(Device device);
// Sets the peak of memory_stats(device) to what is in use now.
void reset_peak_memory(Device device);
// The allocator of `device`; throws tcn::Error when the device is not usable.
Allocator* allocator_for(Device device);

}  // namespace tcn
