// bench_gemm: where the CPU GEMM time of a training step goes, and how close it
// runs to the library's own rate. Records every float32 GEMM of one training
// step of the reference TCN or LSTM (batch 32 x 400, as `charlm bench`), groups
// them by shape and layout, and times each shape standalone with OpenBLAS and
// with oneDNN (best of --reps, operands hot in cache as in a steady step), all
// in one run. Prints one row per shape and the totals: the step's in-loop GEMM
// rate against the standalone rate of the same library at the same shapes.
//
//   build/bench_gemm --model tcn --threads 2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/autocast.h"
#include "core/threads.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "ops/cpu_blas.h"

using namespace tcn;
using Clock = std::chrono::steady_clock;

namespace {

struct GemmShape {
  bool ta, tb;
  int64_t M, N, K;
  bool acc, bf16;
  auto tie() const { return std::tie(bf16, ta, tb, M, N, K, acc); }
  bool operator<(const GemmShape& o) const { return tie() < o.tie(); }
};

// Seconds of one GEMM of this shape (best of `reps` after one warm-up call).
// bf16 shapes take bfloat16 operands (the oneDNN bf16 kernels; OpenBLAS widens them).
template <class In>
double time_shape_as(const GemmShape& s, cpu::GemmLibrary lib, int reps) {
  cpu::set_gemm_library(lib);
  const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<In> A(s.M * s.K, In(0.25f)), B(s.K * s.N, In(0.5f));
  std::vector<float> C(s.M * s.N, 0.0f);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    cpu::gemm(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.acc ? 1.0f : 0.0f, C.data(), s.N);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::min(best, t);
  }
  return best;
}
double time_shape(const GemmShape& s, cpu::GemmLibrary lib, int reps) {
  return s.bf16 ? time_shape_as<bfloat16>(s, lib, reps) : time_shape_as<float>(s, lib, reps);
}

// One training step of the reference model, after a warm-up step (primitives, memory
// pool), with every CPU GEMM call it makes recorded; `step_s` is the step's time.
std::vector<cpu::GemmCall> record_step(const std::string& model, const std::string& precision, int64_t batch,
                                       int64_t seq_len, int64_t validseqlen, double& step_s) {
  auto m = nn::make_char_lm(model, model == "tcn" ? nn::TCNConfig{}.to_json() : nn::LSTMConfig{}.to_json(), 1111);
  m->train();
  nn::SGD opt(m->parameters(), 4.0);
  Generator gen(7);
  Tensor u = rand({batch, seq_len + 1}, {DType::F64}, gen);
  std::vector<int64_t> toks;
  for (double x : u.to_vector<double>()) toks.push_back(static_cast<int64_t>(x * 50));
  Tensor seq = from_vector(toks, {batch, seq_len + 1});
  Tensor inp = seq.narrow(1, 0, seq_len).contiguous();
  Tensor tgt = seq.narrow(1, 1 + seq_len - validseqlen, validseqlen).contiguous();
  std::vector<cpu::GemmCall> calls;
  for (int s = 0; s < 2; ++s) {  // step 1 warms up; step 2 is recorded
    calls.clear();
    if (s == 1) cpu::record_gemms(&calls);
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      const Autocast scope(parse_precision(precision));
      loss = cross_entropy(m->forward(inp, validseqlen), tgt);
    }
    loss.backward();
    nn::clip_grad_norm_(m->parameters(), 0.15);
    opt.step();
    (void)loss.item();
    step_s = std::chrono::duration<double>(Clock::now() - t0).count();
    cpu::record_gemms(nullptr);
  }
  return calls;
}

// A row per GEMM shape of the step: its rate in the step, and standalone on each
// library (best of `reps`); then the totals. Leaves `lib` as the GEMM library.
void print_rates(const std::vector<cpu::GemmCall>& calls, double step_s, cpu::GemmLibrary lib, int reps) {
  std::map<GemmShape, std::pair<int64_t, double>> by_shape;  // calls, seconds in the step
  double flops = 0, in_step = 0;
  for (const auto& c : calls) {
    auto& e = by_shape[GemmShape{c.ta, c.tb, c.M, c.N, c.K, c.beta != 0, c.bf16}];
    ++e.first;
    e.second += c.seconds;
    flops += c.flops();
    in_step += c.seconds;
  }
  std::printf("\n| op(A) [M, K] @ op(B) [K, N] | layout | calls | in step GFLOP/s | OpenBLAS GFLOP/s | oneDNN GFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|\n");
  double t_blas = 0, t_dnnl = 0;
  for (const auto& [s, e] : by_shape) {
    const double f = 2.0 * s.M * s.N * s.K;
    const double tb = time_shape(s, cpu::GemmLibrary::OpenBLAS, reps);
    const double td = cpu::onednn_available() ? time_shape(s, cpu::GemmLibrary::OneDNN, reps) : 0;
    t_blas += tb * e.first;
    t_dnnl += td * e.first;
    std::printf("| %lld x %lld @ %lld x %lld | %s%s%s%s | %lld | %.0f | %.0f | %s |\n", static_cast<long long>(s.M),
                static_cast<long long>(s.K), static_cast<long long>(s.K), static_cast<long long>(s.N),
                s.bf16 ? "bf16 " : "", s.ta ? "A^T " : "", s.tb ? "B^T " : "", s.acc ? "C += " : "C = ",
                static_cast<long long>(e.first), f * e.first / e.second / 1e9, f / tb / 1e9,
                td > 0 ? std::to_string(static_cast<int>(f / td / 1e9)).c_str() : "-");
  }
  cpu::set_gemm_library(lib);
  const double standalone = lib == cpu::GemmLibrary::OneDNN ? t_dnnl : t_blas;
  std::printf("\nGEMMs in the step: %zu calls, %.1f GFLOP, %.1f ms of a %.1f ms step (%.0f%%): %.0f GFLOP/s\n",
              calls.size(), flops / 1e9, in_step * 1e3, step_s * 1e3, 100 * in_step / step_s, flops / in_step / 1e9);
  std::printf("Standalone at the same shapes: OpenBLAS %.0f GFLOP/s, oneDNN %s GFLOP/s\n", flops / t_blas / 1e9,
              t_dnnl > 0 ? std::to_string(static_cast<int>(flops / t_dnnl / 1e9)).c_str() : "-");
  std::printf("In-step rate / standalone rate (%s): %.2f\n", cpu::gemm_library_name(lib), standalone / in_step);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-shape GEMM rates of a training step: in the step, and standalone with OpenBLAS and oneDNN"};
  std::string model = "tcn", library = "onednn", precision = "fp32";
  int threads = 2, reps = 3;
  int64_t batch = 32, seq_len = 400, validseqlen = 320;
  app.add_option("--model", model, "tcn or lstm")->check(CLI::IsMember({"tcn", "lstm"}))->capture_default_str();
  app.add_option("--library", library, "the library the recorded step runs on: onednn or openblas")
      ->check(CLI::IsMember({"onednn", "openblas"}))
      ->capture_default_str();
  app.add_option("--precision", precision, "fp32 or bf16 (autocast: bf16 GEMM operands)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--reps", reps, "standalone repetitions per shape (best is kept)")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch_size", batch, "streams")->check(CLI::Range(1, 4096))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    const cpu::GemmLibrary lib = cpu::parse_gemm_library(library);
    cpu::set_gemm_library(lib);
    double step_s = 0;
    const std::vector<cpu::GemmCall> calls = record_step(model, precision, batch, seq_len, validseqlen, step_s);
    std::printf("bench_gemm: %s training step, batch %lld x %lld, %d threads, %s, step recorded on %s\n",
                model.c_str(), static_cast<long long>(batch), static_cast<long long>(seq_len), threads,
                precision.c_str(), cpu::gemm_library_name(lib));
    print_rates(calls, step_s, lib, reps);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
