// Small helpers shared by the ops: argument checks with uniform messages, and
// the CUDA branch of ops whose CUDA kernel has not been written yet.
#pragma once

#include "core/profile.h"
#include "core/tensor.h"
#include "core/devices.h"

namespace tcn {

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  TCN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TCN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch, ", a.dtype(), " ", a.shape(), " vs ",
            b.dtype(), " ", b.shape());
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TCN_CHECK(a.device() == b.device(), op, ": tensors are on different devices, ", a.device(), " ",
            a.shape(), " vs ", b.device(), " ", b.shape());
}

inline void check_float(const char* op, const Tensor& t) {
  TCN_CHECK(t.dtype() != DType::BF16, op, ": bfloat16 is a storage type in tcn (conversions, copies, bf16 GEMMs); ",
            "convert with .to(DType::F32) first (got a bfloat16 tensor ", t.shape(), ")");
  TCN_CHECK(is_floating(t.dtype()), op, ": expected a float32 or float64 tensor, got ", t.dtype(),
            " ", t.shape());
}

// Address of element `elem` of t's buffer (counted from t's offset, in t's
// dtype): for handing row blocks of a tensor to a GEMM.
inline void* element_ptr(const Tensor& t, int64_t elem) {
  return static_cast<char*>(t.raw_data()) + elem * static_cast<int64_t>(dtype_size(t.dtype()));
}

// Bytes of t's elements (what an op reads or writes of it, for the profiler's GB/s).
inline double nbytes(const Tensor& t) {
  return static_cast<double>(t.numel()) * static_cast<double>(dtype_size(t.dtype()));
}

// The CUDA branch of an op without a CUDA kernel: a clear error, never a crash.
[[noreturn]] inline void no_cuda_kernel(const char* op) {
  if (!cuda::built_with_cuda()) TCN_FAIL(op, ": tensor is on CUDA but tcn was built without CUDA");
  TCN_FAIL(op, ": no CUDA kernel yet; move the tensor to the CPU with .to(Device::cpu())");
}

}  // namespace tcn
