// bench_ops: the general TCN's elementwise and normalisation ops on the CPU,
// forward + backward (of sum(op(x) * dy)) through the op and its autograd node, at a TCN
// activation's shape [B, T, C] in float32. One line per op, the best of --reps
// calls after a warm-up. tools/bench_ops_vs_torch.py runs it alternately with
// PyTorch's same ops and prints the ratios.
//
//   build/bench_ops --threads 2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "core/threads.h"
#include "ops/ops.h"

using namespace tcn;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"The general TCN's ops on the CPU, forward + backward, best of --reps calls"};
  int threads = 2, reps = 10;
  int64_t B = 32, T = 400, C = 128;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (best kept)")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch_size", B, "batch")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--seq_len", T, "positions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--channels", C, "channels (glu's input has twice as many)")->check(CLI::Range(1, 65536))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);

  Generator g(1);
  // N(0, 1): both sides of every activation's kink, as activations are.
  const Tensor x = randn({B, T, C}, {DType::F32}, g), x2 = randn({B, T, 2 * C}, {DType::F32}, g);
  const Tensor gamma = rand({C}, {DType::F32}, g), beta = rand({C}, {DType::F32}, g);
  const Tensor dy = rand({B, T, C}, {DType::F32}, g);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"relu", [](const Tensor& v) { return relu(v); }},  // the reference: an op the TCN step already uses
      {"gelu", [](const Tensor& v) { return gelu(v); }},
      {"elu", [](const Tensor& v) { return elu(v); }},
      {"selu", [](const Tensor& v) { return selu(v); }},
      {"leaky_relu", [](const Tensor& v) { return leaky_relu(v); }},
      {"glu", [](const Tensor& v) { return glu(v); }},
      {"layer_norm", [&](const Tensor& v) { return layer_norm(v, gamma, beta); }},
  };
  std::printf("bench_ops: [B %lld, T %lld, C %lld] float32, %d thread(s), forward + backward, best of %d\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C), threads, reps);
  for (const auto& [name, f] : ops) {
    const Tensor in = (std::string(name) == "glu" ? x2 : x).detach().requires_grad_(true);
    double best = 1e30;
    for (int r = 0; r <= reps; ++r) {
      in.zero_grad();
      const auto t0 = Clock::now();
      sum(mul(f(in), dy)).backward();  // the same loss on PyTorch's side
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (r > 0) best = std::min(best, ms);  // the first call warms up
    }
    std::printf("%-12s %9.3f ms\n", name, best);
  }
  return 0;
}
