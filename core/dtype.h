// Element types. float32 everywhere; float64 on the CPU for gradient checks;
// int64 for indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "core/error.h"

namespace tcn {

enum class DType : uint8_t { F32, F64, I64 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }

// Calls fn.template operator()<T>() with T the C++ type of a floating dtype:
//   dispatch_float(x.dtype(), "relu", [&]<class T>() { relu_kernel<T>(...); });
template <class Fn>
decltype(auto) dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn.template operator()<float>();
    case DType::F64: return fn.template operator()<double>();
    default: break;
  }
  TCN_FAIL(op, ": expected a floating-point tensor (float32 or float64), got ", dtype_name(t));
}

// Same, for any dtype (copies, fills, views of index tensors).
template <class Fn>
decltype(auto) dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn.template operator()<float>();
    case DType::F64: return fn.template operator()<double>();
    case DType::I64: return fn.template operator()<int64_t>();
  }
  TCN_FAIL("unknown dtype");
}

}  // namespace tcn
