// BLAS on the CPU: how a strided 2-D view is handed to cblas_?gemm without a
// copy, and a typed gemm wrapper. Used by matmul and conv1d.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

namespace tcn::cpu {

// A [rows, cols] matrix with element strides (s0, s1), as row-major BLAS sees it.
struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// Row-major with unit column stride: NoTrans. Unit row stride (a transposed
// view): Trans with the other leading dimension. Anything else: nullopt (copy first).
inline std::optional<BlasOperand> as_blas(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= cols))
    return BlasOperand{CblasNoTrans, std::max<int64_t>(rows == 1 ? cols : s0, 1)};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= rows))
    return BlasOperand{CblasTrans, std::max<int64_t>(cols == 1 ? rows : s1, 1)};
  return std::nullopt;
}

// C = op(A) @ op(B) + beta * C, row-major, C [M, N] with leading dimension ldc.
template <class T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace tcn::cpu
