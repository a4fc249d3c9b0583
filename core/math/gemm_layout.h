// How strided matrices go to a row-major GEMM (OpenBLAS on the CPU, cuBLAS on a
// GPU) without copies: a [rows, cols] view with unit column stride is passed
// as it is (ld = row stride), one with unit row stride (a transposed view) is
// passed transposed (ld = column stride); anything else is copied first.
#pragma once

#include <algorithm>
#include <optional>

#include "core/tensor.h"

namespace tcn {

struct GemmLayout {
  bool trans;
  int64_t ld;
};

inline std::optional<GemmLayout> gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= cols)) return GemmLayout{false, std::max<int64_t>(rows == 1 ? cols : s0, 1)};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= rows)) return GemmLayout{true, std::max<int64_t>(cols == 1 ? rows : s1, 1)};
  return std::nullopt;
}

// The operands of out[i] = a[i] @ b[i] (a [B, M, K], b [B, K, N]) as a GEMM can
// take them: the views themselves when they qualify, else contiguous copies.
struct GemmOperands {
  Tensor a, b;
  GemmLayout la, lb;
};

inline GemmOperands gemm_operands(Tensor a, Tensor b) {
  auto la = gemm_layout(a.size(1), a.size(2), a.stride(1), a.stride(2));
  if (!la) {
    a = a.contiguous();
    la = gemm_layout(a.size(1), a.size(2), a.stride(1), a.stride(2));
  }
  auto lb = gemm_layout(b.size(1), b.size(2), b.stride(1), b.stride(2));
  if (!lb) {
    b = b.contiguous();
    lb = gemm_layout(b.size(1), b.size(2), b.stride(1), b.stride(2));
  }
  return {a, b, *la, *lb};
}

}  // namespace tcn
