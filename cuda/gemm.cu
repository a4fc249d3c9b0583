// Batched GEMM through cuBLAS. cuBLAS is column-major: a row-major [M, N]
// product C = A B is the column-major product C^T = B^T A^T, so the operands
// are passed swapped with the same leading dimensions, and a row-major
// transposed view is simply CUBLAS_OP_T.
#include <optional>

#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "ops/ops.h"

namespace tcn::cuda {

namespace {

struct Operand {
  cublasOperation_t op;
  int64_t ld;
};

// A [rows, cols] row-major view with strides (s0, s1), as cuBLAS sees it (see ops/cpu_blas.h).
std::optional<Operand> as_cublas(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= cols)) return Operand{CUBLAS_OP_N, std::max<int64_t>(rows == 1 ? cols : s0, 1)};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= rows)) return Operand{CUBLAS_OP_T, std::max<int64_t>(cols == 1 ? rows : s1, 1)};
  return std::nullopt;
}

}  // namespace

void batched_gemm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  auto oa = as_cublas(M, K, a.stride(1), a.stride(2));
  if (!oa) {
    a = a.contiguous();
    oa = as_cublas(M, K, a.stride(1), a.stride(2));
  }
  auto ob = as_cublas(K, N, b.stride(1), b.stride(2));
  if (!ob) {
    b = b.contiguous();
    ob = as_cublas(K, N, b.stride(1), b.stride(2));
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {
    fill(out, 0.0);
    return;
  }
  cublasHandle_t h = cublas(out.device().index);
  if (out.dtype() == DType::F32) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, ob->op, oa->op, N, M, K, &one, static_cast<const float*>(b.raw_data()),
                                           ob->ld, b.stride(0), static_cast<const float*>(a.raw_data()), oa->ld,
                                           a.stride(0), &zero, static_cast<float*>(out.raw_data()), N, M * N, B));
  } else {
    const double one = 1.0, zero = 0.0;
    CUBLAS_CHECK(cublasDgemmStridedBatched(h, ob->op, oa->op, N, M, K, &one, static_cast<const double*>(b.raw_data()),
                                           ob->ld, b.stride(0), static_cast<const double*>(a.raw_data()), oa->ld,
                                           a.stride(0), &zero, static_cast<double*>(out.raw_data()), N, M * N, B));
  }
}

void gemm(DType dtype, int device, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
  // Column-major view: C^T [N, M] = op(B)^T op(A)^T.
  cublasHandle_t h = cublas(device);
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype == DType::F32) {
    const float one = 1.0f, b = static_cast<float>(beta);
    CUBLAS_CHECK(cublasSgemm(h, ob, oa, N, M, K, &one, static_cast<const float*>(B), ldb,
                             static_cast<const float*>(A), lda, &b, static_cast<float*>(C), ldc));
  } else {
    const double one = 1.0;
    CUBLAS_CHECK(cublasDgemm(h, ob, oa, N, M, K, &one, static_cast<const double*>(B), ldb,
                             static_cast<const double*>(A), lda, &beta, static_cast<double*>(C), ldc));
  }
}

}  // namespace tcn::cuda
