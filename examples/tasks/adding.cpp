// adding: the adding problem of the TCN paper (Bai, Kolter, Koltun 2018,
// section 5.2), with the flags and defaults of locuslab/TCN's add_test.py.
//
// Each sequence has seq_len steps of two channels: a number drawn uniformly
// from [0, 1), and a mask that is 1 at exactly two (distinct, random) steps and
// 0 elsewhere. The target is the sum of the two marked numbers; the model reads
// the whole sequence and its output at the last step is scored by the mean
// squared error. Predicting 1 (the target's mean) always scores about 0.167.
#include <algorithm>
#include <cstdio>

#include "common.h"
#include "examples/common/program.h"
#include "ops/ops.h"

namespace {

using namespace tcn;

constexpr int64_t kMaxSeqLen = 1000000;

// N sequences of length T: x [N, T, 2] (number, mask), y [N, 1] (float32).
tasks::Dataset make_data(int64_t N, int64_t T, Generator& gen) {
  std::vector<float> numbers = rand({N, T}, {DType::F32}, gen).to_vector<float>();
  // Two distinct positions: the first uniform over T, the second over the T - 1 others.
  const std::vector<int64_t> first = tasks::random_ints(N, T, gen), second = tasks::random_ints(N, T - 1, gen);
  std::vector<float> x(static_cast<size_t>(N * T * 2), 0.0f), y(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = first[i], b = second[i] >= a ? second[i] + 1 : second[i];
    float* xi = x.data() + i * T * 2;
    const float* ni = numbers.data() + i * T;
    for (int64_t t = 0; t < T; ++t) xi[2 * t] = ni[t];
    xi[2 * a + 1] = 1.0f;
    xi[2 * b + 1] = 1.0f;
    y[i] = ni[a] + ni[b];
  }
  return {from_vector(x, {N, T, 2}), from_vector(y, {N, 1})};
}

}  // namespace

int main(int argc, char** argv) {
  tasks::TaskSetup task;
  task.program = "adding";
  tasks::CommonOptions& o = task.opts;
  // add_test.py's defaults (most are CommonOptions's own).
  o.batch_size = 32, o.dropout = 0.0, o.clip = -1, o.epochs = 10, o.ksize = 7, o.levels = 8, o.nhid = 30;
  o.log_interval = 100, o.lr = 4e-3, o.optim = "Adam", o.seed = 1111;
  o.train_size = 50000, o.test_size = 1000;
  int64_t seq_len = 400;

  CLI::App app{"adding: the adding problem (TCN paper, section 5.2) with a TCN, tcn framework", "adding"};
  app.add_option("--seq_len", seq_len, "sequence length T, in [2, 1000000]")->capture_default_str();
  tasks::add_common_flags(app, o);

  return program::run("adding", app, argc, argv, [&] {
    tasks::check("--seq_len", seq_len, 2, kMaxSeqLen);
    tasks::check_common_flags(o);
    task.inputs = 2, task.outputs = 1;
    const tasks::RunPlan plan = tasks::plan_run(task);  // bad input fails before the data is made
    Generator data = tasks::data_generator(o.seed);
    std::printf("adding: producing %lld training and %lld test sequences of length %lld...\n",
                static_cast<long long>(o.train_size), static_cast<long long>(o.test_size),
                static_cast<long long>(seq_len));
    std::fflush(stdout);
    task.train = make_data(o.train_size, seq_len, data);
    task.test = make_data(o.test_size, seq_len, data);
    task.loss = tasks::mse_last;
    task.evaluate = [](const tasks::TaskTCN& model, const tasks::Dataset& b, tasks::EvalSums& s) {
      s.loss_sum += tasks::mse_last(model, b).item() * static_cast<double>(b.size());
      s.loss_count += b.size();
    };
    return tasks::train(task, plan);
  });
}
