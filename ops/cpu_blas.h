// BLAS on the CPU: a typed cblas_?gemm wrapper (row-major), used by matmul,
// conv1d and the LSTM layer. ops/gemm_layout.h says how views are passed.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace tcn::cpu {

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
