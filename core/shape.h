// Shapes and strides are small vectors of int64; strides count elements.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include <vector>

namespace tcn {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Row-major (C order) strides of a shape.
inline Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] > 0 ? s[i] : 1;
  }
  return st;
}

// Turns a possibly negative dim into [0, rank). Throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);

// Broadcasts two shapes NumPy-style; throws naming `op` and both shapes on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// "[2, 3, 4]"
inline std::string shape_str(const Shape& s) { return detail::concat(s); }

}  // namespace tcn
