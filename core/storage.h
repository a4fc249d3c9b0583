// A Storage owns one block of device memory. Tensors are views into a Storage:
// several tensors (a parameter and its transposed view, say) share one.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace tcn {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
};

}  // namespace tcn
