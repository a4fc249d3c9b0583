// GEMM on the CPU, used by matmul, conv1d and the LSTM layer (core/math/gemm_layout.h
// says how views are passed). float32 runs on oneDNN's matmul where tcn was
// built with it (it dispatches on the CPU's ISA itself: AVX-512 here, where
// OpenBLAS is held to its Haswell kernels), else on OpenBLAS; float64 always
// runs on OpenBLAS (oneDNN 2.x has no f64 matmul on CPUs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bfloat16.h"

namespace tcn::cpu {

// C = op(A) @ op(B) + bias + beta * C, row-major, C [M, N] with leading
// dimension ldc; op(A) is A^T when ta (A then stored [K, M] with leading
// dimension lda); bias, when given, is [N], added to every row (oneDNN adds it
// as the matmul's bias argument, as the GEMM writes C: no separate pass).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
          int64_t ldb, double beta, double* C, int64_t ldc, const double* bias = nullptr);
// Mixed precision: bfloat16 A and B, float32 accumulation, C and bias. On
// oneDNN (AVX512-BF16 dot products where the CPU has them); without oneDNN, or
// on a CPU where oneDNN has no bf16 matmul (one without AVX-512), A and B are
// widened to float32 and multiplied by OpenBLAS (same result, no speedup).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
          int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);

// Which library computes float32 GEMMs. The default is oneDNN when built in;
// the environment variable TCN_CPU_GEMM=openblas|onednn overrides it at the
// first GEMM, set_gemm_library at any time (benchmarks compare the two).
enum class GemmLibrary { OpenBLAS, OneDNN };
bool onednn_available();
// Whether oneDNN can run bf16 GEMMs on this CPU (it needs AVX-512); false
// without oneDNN. When false, bf16 GEMMs take the widening path above.
bool onednn_bf16_available();
GemmLibrary gemm_library();
void set_gemm_library(GemmLibrary lib);  // throws when oneDNN is asked for and not built in
GemmLibrary parse_gemm_library(const std::string& name);  // "openblas" | "onednn"
const char* gemm_library_name(GemmLibrary lib);
// Distinct oneDNN matmul primitives created so far: a steady training step
// creates none (they are cached by shape); tests check it.
int64_t onednn_primitives_created();

// Benchmarks: while a sink is set, every float32 GEMM appends its shape and
// wall time to it (record_gemms(nullptr) stops). Not thread-safe: for one
// training loop on one thread, which is how tcn calls GEMMs.
struct GemmCall {
  bool ta, tb, bf16, bias;
  int64_t M, N, K, lda, ldb, ldc;
  float beta;
  double seconds;
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};
void record_gemms(std::vector<GemmCall>* sink);

}  // namespace tcn::cpu
