// Per-device CUDA state shared by the kernels: one stream per device that every
// op uses, and a cuBLAS handle bound to it. Included by cuda/*.cu only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/common.h"
#include "cuda/kernels.h"

#define CUBLAS_CHECK(call)                                                                              \
  do {                                                                                                  \
    cublasStatus_t st_ = (call);                                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                   \
      TCN_FAIL("cuBLAS error: ", cublasGetStatusString(st_), " (", #call, ") at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace tcn::cuda {

// The stream of `device` (created on first use; the device is made current).
cudaStream_t stream(int device);
// The cuBLAS handle of `device`, bound to its stream, set to strict FP32 math
// or (tf32) to TF32 tensor cores for float32 GEMMs.
cublasHandle_t cublas(int device, bool tf32);

// Device-side input checks (no host synchronisation in a training step): a
// check kernel records the first bad element it finds here, in pinned host
// memory the device writes directly, instead of the indices being copied to
// the host to be checked. The kernels that use the indices skip bad ones (no
// out-of-bounds access). The host looks at the status whenever it waits for
// the device anyway (synchronize(), a device-to-host copy: cuda/devices.cu)
// and throws the error then: raise_device_errors(). The first error wins; it
// stays until raised.
struct DeviceStatus {
  int32_t check;     // a DeviceCheck (cuda/kernels.h); None while all is well
  int32_t unused;
  int64_t position;  // of the first bad element (row-major over the index tensor)
  int64_t value;     // what it held
  int64_t bound;     // the valid range was [0, bound)
};
// The status block of `device` (a pointer the device and the host both use).
DeviceStatus* device_status(int device);

// The address of a float64 device scalar read by a kernel (the optimizer's gate
// and learning rate, a captured step's Philox base), or nullptr when undefined.
inline const double* scalar_ptr(const Tensor& s) {
  return s.defined() ? static_cast<const double*>(s.raw_data()) : nullptr;
}

// Launch geometry for n independent elements.
inline unsigned grid_for(int64_t n, int block) {
  int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535 * 32 ? g : 65535 * 32);
}

}  // namespace tcn::cuda
