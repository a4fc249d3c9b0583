// Batched GEMM through cuBLAS. cuBLAS is column-major: a row-major [M, N]
// product C = A B is the column-major product C^T = B^T A^T, so the operands
// are passed swapped with the same leading dimensions, and a row-major
// transposed view is simply CUBLAS_OP_T.
#include "core/profile.h"
#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "core/math/gemm_layout.h"

namespace tcn::cuda {

void batched_gemm(const Tensor& out, const Tensor& a_in, const Tensor& b_in, bool tf32) {
  const int64_t B = a_in.size(0), M = a_in.size(1), K = a_in.size(2), N = b_in.size(2);
  profile::add_flops(2.0 * static_cast<double>(B) * static_cast<double>(M) * static_cast<double>(N) *
                     static_cast<double>(K));
  site::gemm();
  GemmOperands g = gemm_operands(a_in, b_in);
  const Tensor &a = g.a, &b = g.b;
  const cublasOperation_t opa = g.la.trans ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = cublas(out.device().index, tf32);
  if (a.dtype() == DType::BF16) {  // mixed precision: bf16 operands, float32 output and accumulation
    TCN_CHECK(b.dtype() == DType::BF16 && out.dtype() == DType::F32, "CUDA bf16 GEMM: operands ", dtype_name(a.dtype()),
              " and ", dtype_name(b.dtype()), ", output ", dtype_name(out.dtype()), " (expected bf16, bf16, float32)");
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, N, M, K, &one, b.raw_data(), CUDA_R_16BF, g.lb.ld, b.stride(0),
                                            a.raw_data(), CUDA_R_16BF, g.la.ld, a.stride(0), &zero, out.raw_data(),
                                            CUDA_R_32F, N, M * N, B, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else if (out.dtype() == DType::F32) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &one, static_cast<const float*>(b.raw_data()),
                                           g.lb.ld, b.stride(0), static_cast<const float*>(a.raw_data()), g.la.ld,
                                           a.stride(0), &zero, static_cast<float*>(out.raw_data()), N, M * N, B));
  } else {
    const double one = 1.0, zero = 0.0;
    CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, N, M, K, &one, static_cast<const double*>(b.raw_data()),
                                           g.lb.ld, b.stride(0), static_cast<const double*>(a.raw_data()), g.la.ld,
                                           a.stride(0), &zero, static_cast<double*>(out.raw_data()), N, M * N, B));
  }
}

void gemm(DType dtype, bool tf32, int device, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, GemmBatch batch) {
  profile::add_flops(2.0 * static_cast<double>(batch.count) * static_cast<double>(M) * static_cast<double>(N) *
                     static_cast<double>(K));
  site::gemm();
  // Column-major view: C^T [N, M] = op(B)^T op(A)^T.
  cublasHandle_t h = cublas(device, tf32);
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t n = batch.count, sa = batch.stride_a, sb = batch.stride_b, sc = batch.stride_c;
  if (dtype == DType::BF16) {  // mixed precision: A and B bf16, C float32, float32 accumulation
    const float one = 1.0f, b = static_cast<float>(beta);
    if (n == 1)
      CUBLAS_CHECK(cublasGemmEx(h, ob, oa, N, M, K, &one, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &b, C, CUDA_R_32F,
                                ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ob, oa, N, M, K, &one, B, CUDA_R_16BF, ldb, sb, A, CUDA_R_16BF, lda,
                                              sa, &b, C, CUDA_R_32F, ldc, sc, n, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
  } else if (dtype == DType::F32) {
    const float one = 1.0f, b = static_cast<float>(beta);
    const auto *pa = static_cast<const float*>(A), *pb = static_cast<const float*>(B);
    auto* pc = static_cast<float*>(C);
    if (n == 1)
      CUBLAS_CHECK(cublasSgemm(h, ob, oa, N, M, K, &one, pb, ldb, pa, lda, &b, pc, ldc));
    else
      CUBLAS_CHECK(cublasSgemmStridedBatched(h, ob, oa, N, M, K, &one, pb, ldb, sb, pa, lda, sa, &b, pc, ldc, sc, n));
  } else {
    const double one = 1.0;
    const auto *pa = static_cast<const double*>(A), *pb = static_cast<const double*>(B);
    auto* pc = static_cast<double*>(C);
    if (n == 1)
      CUBLAS_CHECK(cublasDgemm(h, ob, oa, N, M, K, &one, pb, ldb, pa, lda, &beta, pc, ldc));
    else
      CUBLAS_CHECK(
          cublasDgemmStridedBatched(h, ob, oa, N, M, K, &one, pb, ldb, sb, pa, lda, sa, &beta, pc, ldc, sc, n));
  }
}

}  // namespace tcn::cuda
