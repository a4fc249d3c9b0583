// Element types. float32 everywhere; float64 on the CPU for gradient checks;
// int64 for indices; bfloat16 as a storage type for mixed precision
// (core/bfloat16.h: conversions, copies and the bf16 GEMMs, no arithmetic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "core/bfloat16.h"
#include "core/error.h"

namespace tcn {

enum class DType : uint8_t { F32, F64, I64, BF16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::BF16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BF16; }

// Calls fn.template operator()<T>() with T the C++ type of a floating dtype:
//   dispatch_float(x.dtype(), "relu", [&]<class T>() { relu_kernel<T>(...); });
template <class Fn>
decltype(auto) dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn.template operator()<float>();
    case DType::F64: return fn.template operator()<double>();
    case DType::BF16:
      TCN_FAIL(op, ": bfloat16 is a storage type in tcn (conversions, copies, bf16 GEMMs); convert with "
               ".to(DType::F32) first");
    default: break;
  }
  TCN_FAIL(op, ": expected a floating-point tensor (float32 or float64), got ", dtype_name(t));
}

// Same, for any dtype (copies, fills, conversions, views of index tensors).
template <class Fn>
decltype(auto) dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn.template operator()<float>();
    case DType::F64: return fn.template operator()<double>();
    case DType::I64: return fn.template operator()<int64_t>();
    case DType::BF16: return fn.template operator()<bfloat16>();
  }
  TCN_FAIL("unknown dtype");
}

}  // namespace tcn
