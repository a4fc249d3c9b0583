// copymem: the copy memory task of the TCN paper (Bai, Kolter, Koltun 2018,
// section 5.3), with the flags and defaults of locuslab/TCN's copymem_test.py.
//
// Each input has blank_len + 2 * seq_len steps of one channel: seq_len digits
// drawn uniformly from 1..8, then blank_len - 1 zeros, then seq_len + 1 nines
// (the first nine is the signal to start recalling). The target is 0 at every
// step but the last seq_len, which must repeat the digits in order. The model
// classifies every step into 10 classes, scored by the cross-entropy over all
// steps. Predicting 0 for the blanks and a uniform guess for the digits scores
// 10 ln 8 / (blank_len + 20), about 0.0204 for blank_len 1000.
#include <algorithm>
#include <cstdio>

#include "common.h"
#include "examples/common/program.h"
#include "ops/ops.h"

namespace {

using namespace tcn;

constexpr int64_t kMaxLen = 1000000;
constexpr int64_t kClasses = 10;

// N sequences: x [N, T + 2L, 1] (float32), y [N, T + 2L] (int64 class per step).
tasks::Dataset make_data(int64_t N, int64_t T, int64_t L, Generator& gen) {
  const int64_t S = T + 2 * L;
  const std::vector<int64_t> digits = tasks::random_ints(N * L, 8, gen);  // 0..7, +1 below
  std::vector<float> x(static_cast<size_t>(N * S), 0.0f);
  std::vector<int64_t> y(static_cast<size_t>(N * S), 0);
  for (int64_t i = 0; i < N; ++i) {
    float* xi = x.data() + i * S;
    int64_t* yi = y.data() + i * S;
    for (int64_t k = 0; k < L; ++k) {
      const int64_t d = digits[i * L + k] + 1;
      xi[k] = static_cast<float>(d);
      yi[L + T + k] = d;
    }
    for (int64_t t = L + T - 1; t < S; ++t) xi[t] = 9.0f;  // after seq_len digits and T - 1 blanks
  }
  return {from_vector(x, {N, S, 1}), from_vector(y, {N, S})};
}

// The mean cross-entropy over every step of every sequence.
Tensor ce_all(const tasks::TaskTCN& model, const tasks::Dataset& b) {
  return cross_entropy(model.forward(b.x), b.y);
}

}  // namespace

int main(int argc, char** argv) {
  tasks::TaskSetup task;
  task.program = "copymem";
  tasks::CommonOptions& o = task.opts;
  // copymem_test.py's defaults.
  o.batch_size = 32, o.dropout = 0.0, o.clip = 1.0, o.epochs = 50, o.ksize = 8, o.levels = 8, o.nhid = 10;
  o.log_interval = 50, o.lr = 5e-4, o.optim = "RMSprop", o.seed = 1111;
  o.train_size = 10000, o.test_size = 1000;
  int64_t blank_len = 1000, seq_len = 10, iters = 100;

  CLI::App app{"copymem: the copy memory task (TCN paper, section 5.3) with a TCN, tcn framework", "copymem"};
  app.add_option("--blank_len", blank_len, "the blank stretch T, in [1, 1000000]")->capture_default_str();
  app.add_option("--seq_len", seq_len, "digits to remember, in [1, 1000000]")->capture_default_str();
  app.add_option("--iters", iters,
                 "accepted for compatibility with copymem_test.py, which ignores it too (an epoch is one pass over "
                 "the training set), in [1, 1e12]")
      ->capture_default_str();
  tasks::add_common_flags(app, o);

  return program::run("copymem", app, argc, argv, [&] {
    tasks::check("--blank_len", blank_len, 1, kMaxLen);
    tasks::check("--seq_len", seq_len, 1, kMaxLen);
    tasks::check("--iters", iters, 1, 1000000000000);
    tasks::check_common_flags(o);
    task.inputs = 1, task.outputs = kClasses;
    const tasks::RunPlan plan = tasks::plan_run(task);  // bad input fails before the data is made
    Generator data = tasks::data_generator(o.seed);
    std::printf("copymem: producing %lld training and %lld test sequences (%lld digits, blank %lld, %lld steps)...\n",
                static_cast<long long>(o.train_size), static_cast<long long>(o.test_size),
                static_cast<long long>(seq_len), static_cast<long long>(blank_len),
                static_cast<long long>(blank_len + 2 * seq_len));
    std::fflush(stdout);
    task.train = make_data(o.train_size, blank_len, seq_len, data);
    task.test = make_data(o.test_size, blank_len, seq_len, data);
    task.loss = ce_all;
    task.accuracy_name = "accuracy";
    task.evaluate = [](const tasks::TaskTCN& model, const tasks::Dataset& b, tasks::EvalSums& s) {
      const Tensor out = model.forward(b.x);  // [B, S, 10]
      const int64_t n = b.y.numel();
      s.loss_sum += cross_entropy(out, b.y).item() * static_cast<double>(n);
      s.loss_count += n;
      const std::vector<int64_t> pred = max(out, -1).second.to(Device::cpu()).contiguous().to_vector<int64_t>();
      const std::vector<int64_t> want = b.y.to(Device::cpu()).contiguous().to_vector<int64_t>();
      for (size_t k = 0; k < pred.size(); ++k) s.correct += pred[k] == want[k];
      s.scored += n;
    };
    return tasks::train(task, plan);
  });
}
