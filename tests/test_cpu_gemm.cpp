// The CPU GEMM (ops/cpu_blas.h): oneDNN's matmul against a plain triple loop in
// double precision, over the layouts tcn passes (transposed operands, leading
// dimensions wider than the rows, beta 0 / 1 / other, empty and 1-wide shapes),
// for both libraries; and the primitive cache (a repeated shape creates nothing).
#include <random>
#include <vector>

#include "helpers.h"
#include "core/autocast.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "ops/cpu_blas.h"

using namespace tcn;

namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;  // pad: extra columns in every leading dimension
  float beta;
  bool bias = false;  // add a bias row
};

// C = op(A) op(B) + beta C with both libraries, each against the double-precision loop.
void check_case(const Case& c, cpu::GemmLibrary lib) {
  std::mt19937 rng(static_cast<unsigned>(c.M * 131 + c.N * 17 + c.K + c.ta * 7 + c.tb * 3));
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t arows = c.ta ? c.K : c.M, acols = c.ta ? c.M : c.K;
  const int64_t brows = c.tb ? c.N : c.K, bcols = c.tb ? c.K : c.N;
  const int64_t lda = acols + c.pad, ldb = bcols + c.pad, ldc = c.N + c.pad;
  std::vector<float> A(arows * lda), B(brows * ldb), C(std::max<int64_t>(c.M * ldc, 1));
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  for (float& x : C) x = u(rng);
  std::vector<float> bias(std::max<int64_t>(c.N, 1));
  for (float& x : bias) x = u(rng);
  std::vector<float> C0 = C;
  cpu::set_gemm_library(lib);
  cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc,
            c.bias ? bias.data() : nullptr);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= c.N) {  // the padding columns of C are never written
        CHECK(C[i * ldc + j] == C0[i * ldc + j]);
        continue;
      }
      double want = (c.beta == 0 ? 0.0 : c.beta * static_cast<double>(C0[i * ldc + j])) + (c.bias ? bias[j] : 0.0);
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[k * lda + i] : A[i * lda + k];
        const double b = c.tb ? B[j * ldb + k] : B[k * ldb + j];
        want += a * b;
      }
      CHECK(std::abs(C[i * ldc + j] - want) <= 1e-5 * (1 + std::sqrt(static_cast<double>(c.K))));
    }
}

}  // namespace

TEST_SUITE("cpu gemm") {

TEST_CASE("both CPU GEMM libraries compute op(A) op(B) + bias + beta C for every layout tcn passes") {
  std::vector<cpu::GemmLibrary> libs{cpu::GemmLibrary::OpenBLAS};
  if (cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDNN);
  const cpu::GemmLibrary before = cpu::gemm_library();
  const Case shapes[] = {{false, false, 37, 29, 45, 0, 0.0f}, {false, false, 64, 48, 32, 3, 1.0f},
                         {false, false, 1, 17, 9, 2, 1.0f},   {false, false, 13, 1, 7, 0, 0.5f},
                         {false, false, 5, 6, 1, 1, 0.0f},    {false, false, 0, 4, 3, 0, 1.0f},
                         {false, false, 4, 0, 3, 0, 0.0f},    {false, false, 3, 4, 0, 1, 0.0f},
                         {false, false, 3, 4, 0, 0, 2.0f}};
  for (cpu::GemmLibrary lib : libs)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool bias : {false, true})
          for (Case c : shapes) {
            c.ta = ta;
            c.tb = tb;
            c.bias = bias;
            INFO(cpu::gemm_library_name(lib), " ta ", ta, " tb ", tb, " bias ", bias, " M ", c.M, " N ", c.N, " K ",
                 c.K, " pad ", c.pad, " beta ", c.beta);
            check_case(c, lib);
          }
  cpu::set_gemm_library(before);
}

TEST_CASE("the bf16 GEMM with a bias equals the float32 GEMM of the same (bf16-exact) values, both libraries") {
  std::vector<cpu::GemmLibrary> libs{cpu::GemmLibrary::OpenBLAS};
  if (cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDNN);
  if (cpu::onednn_available() && !cpu::onednn_bf16_available())
    MESSAGE("this CPU has no AVX-512: oneDNN has no bf16 matmul here, so its bf16 case checks the widening path");
  const cpu::GemmLibrary before = cpu::gemm_library();
  const int64_t M = 45, N = 33, K = 20;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> q(-8, 8);  // small multiples of 1/8: exact in bf16 and in every sum
  std::vector<bfloat16> A(M * K), B(K * N);
  std::vector<float> Af(M * K), Bf(K * N), bias(N);
  for (int64_t i = 0; i < M * K; ++i) A[i] = Af[i] = q(rng) / 8.0f;
  for (int64_t i = 0; i < K * N; ++i) B[i] = Bf[i] = q(rng) / 8.0f;
  for (float& x : bias) x = q(rng) / 4.0f;
  for (cpu::GemmLibrary lib : libs)
    for (float beta : {0.0f, 1.0f}) {
      INFO(cpu::gemm_library_name(lib), " beta ", beta);
      cpu::set_gemm_library(lib);
      std::vector<float> C(M * N, 0.75f), want(M * N, 0.75f);
      cpu::gemm(false, false, M, N, K, A.data(), K, B.data(), N, beta, C.data(), N, bias.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double w = beta * 0.75 + bias[j];
          for (int64_t k = 0; k < K; ++k) w += static_cast<double>(Af[i * K + k]) * Bf[k * N + j];
          want[i * N + j] = static_cast<float>(w);
        }
      CHECK(C == want);
    }
  cpu::set_gemm_library(before);
}

TEST_CASE("oneDNN matmul primitives are cached by shape: a repeated GEMM creates none" *
          doctest::skip(!cpu::onednn_available())) {
  const cpu::GemmLibrary before = cpu::gemm_library();
  cpu::set_gemm_library(cpu::GemmLibrary::OneDNN);
  std::vector<float> A(96 * 40, 0.5f), B(40 * 72, 0.25f), C(96 * 72);
  cpu::gemm(false, false, 96, 72, 40, A.data(), 40, B.data(), 72, 0.0f, C.data(), 72);
  const int64_t created = cpu::onednn_primitives_created();
  for (int i = 0; i < 3; ++i) cpu::gemm(false, false, 96, 72, 40, A.data(), 40, B.data(), 72, 0.0f, C.data(), 72);
  CHECK(cpu::onednn_primitives_created() == created);
  CHECK(C[0] == doctest::Approx(40 * 0.125));
  cpu::gemm(false, false, 96, 72, 40, A.data(), 40, B.data(), 72, 1.0f, C.data(), 72);  // beta 1: another primitive
  CHECK(cpu::onednn_primitives_created() == created + 1);
  CHECK(C[0] == doctest::Approx(2 * 40 * 0.125));
  cpu::set_gemm_library(before);
}

TEST_CASE("a steady training step creates no oneDNN primitive, in fp32 and in bf16" * doctest::skip(!cpu::onednn_available())) {
  const cpu::GemmLibrary before = cpu::gemm_library();
  cpu::set_gemm_library(cpu::GemmLibrary::OneDNN);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    INFO(precision_name(p));
    nn::TCNCharLM m(nn::TCNConfig{.vocab_size = 7, .emsize = 6, .nhid = 10, .levels = 2, .ksize = 3}, 5);
    m.train();
    nn::SGD opt(m.parameters(), 0.1);
    Tensor tokens = from_vector<int64_t>(std::vector<int64_t>(3 * 25, 2), {3, 25});
    auto step = [&] {
      opt.zero_grad();
      Tensor loss;
      {
        Autocast scope(p);
        loss = cross_entropy(m.forward(tokens, 20), tokens.narrow(1, 5, 20));
      }
      loss.backward();
      opt.step();
    };
    step();
    const int64_t created = cpu::onednn_primitives_created();
    step();
    step();
    CHECK(cpu::onednn_primitives_created() == created);
  }
  cpu::set_gemm_library(before);
}

TEST_CASE("the CPU GEMM library is chosen by name; an unknown name is an error") {
  CHECK(cpu::parse_gemm_library("openblas") == cpu::GemmLibrary::OpenBLAS);
  CHECK(cpu::parse_gemm_library("onednn") == cpu::GemmLibrary::OneDNN);
  CHECK_ERROR(cpu::parse_gemm_library("mkl"), "unknown CPU GEMM library 'mkl': expected openblas or onednn");
  if (!cpu::onednn_available()) CHECK_ERROR(cpu::set_gemm_library(cpu::GemmLibrary::OneDNN), "has no oneDNN");
}

}  // TEST_SUITE
