// What the two synthetic-task trainers of the TCN paper (Bai, Kolter, Koltun
// 2018, section 5) share: the flags of locuslab/TCN's reference trainers, their
// range checks, and the training loop around the shared step
// (nn/trainer.h): sequential batches, an optimizer step per
// batch, a progress line per --log-interval steps, the test set at each
// epoch's end, a metrics CSV. The model, TaskTCN, is in nn/models.h.
//
//   adding.cpp   the adding problem: regress the sum of two marked numbers
//   copymem.cpp  copy memory: recall 10 digits after a long blank stretch
//
// Each program fills a TaskSetup (its data, its loss, its test metric) and
// calls train(). Every error is one line, "PROGRAM: error: ...", and exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/models.h"
#include "nn/optim.h"

namespace tasks {

// The flags both reference trainers have (add_test.py, copymem_test.py), with
// the defaults of the task that fills them in before add_common_flags, and ours.
struct CommonOptions {
  int64_t batch_size = 32;
  double dropout = 0.0;
  double clip = -1;  // <= 0: off (the reference's -1)
  int64_t epochs = 10, ksize = 7, levels = 8, nhid = 30;
  int64_t log_interval = 100;
  double lr = 4e-3;
  std::string optim = "Adam";
  uint64_t seed = 1111;
  // Ours.
  std::string device = "auto";
  std::string conv_impl = "auto";  // conv1d's path (core/backends.h)
  int64_t max_steps = 0;  // 0: no limit
  int64_t train_size = 0, test_size = 0;  // the task sets its N_train / N_test before add_common_flags
  std::string metrics;                    // default runs/<program>.csv
  std::string save_init;                  // the initial weights (PyTorch names), for tools/reference/check_tasks.py
  std::string dump_batches;               // the training samples of the steps this run takes, likewise
  std::string tcn;                        // --tcn: pytorch-tcn keyword arguments (JSON) over the flags
};

// Adds the shared flags to `app`, their help showing o's current values as defaults.
void add_common_flags(CLI::App& app, CommonOptions& o);
// Range-checks them (one tcn::Error naming the flag, its range and the value).
void check_common_flags(const CommonOptions& o);

// An integer flag in [lo, hi], a real one in a range (NaN is outside all).
void check(const char* flag, int64_t v, int64_t lo, int64_t hi, const char* note = "");
void check_real(const char* flag, double v, double lo, double hi, bool lo_open, bool hi_open, const char* note = "");


// The model of both tasks, locuslab's TCN class (nn/models.h).
using TaskTCN = tcn::nn::TaskTCN;

// A data set: inputs x [N, T, C] (float32) and targets y (the task's shape).
struct Dataset {
  tcn::Tensor x, y;
  int64_t size() const { return x.size(0); }
  Dataset slice(int64_t start, int64_t n) const { return {x.narrow(0, start, n), y.narrow(0, start, n)}; }
  Dataset to(tcn::Device d) const { return {x.to(d), y.to(d)}; }
};

// What a test pass adds up over its batches.
struct EvalSums {
  double loss_sum = 0;    // the loss times the number of values it averages
  int64_t loss_count = 0;
  int64_t correct = 0, scored = 0;  // for an accuracy; scored 0: the task has none
};

// One task for train(): its name, data, model and how to score a batch.
struct TaskSetup {
  const char* program;  // "adding": the prefix of messages, runs/adding.csv
  CommonOptions opts;
  Dataset train, test;  // on the CPU; train() moves them
  // The mean training loss of a batch (differentiable).
  std::function<tcn::Tensor(const TaskTCN&, const Dataset&)> loss;
  // Adds a test batch's loss (and accuracy counts) to the sums; runs under NoGrad.
  std::function<void(const TaskTCN&, const Dataset&, EvalSums&)> evaluate;
  const char* accuracy_name = "";  // how the log names the accuracy, when there is one
  int64_t inputs = 1, outputs = 1;  // the model's input channels and outputs per step
  // The task's TCN options over locuslab's (pytorch-tcn keyword arguments);
  // --tcn goes over these.
  nlohmann::json tcn_defaults = nlohmann::json::object();
  // Optional: more words for the end-of-epoch line, from the test loss.
  std::function<std::string(double test_loss)> describe_test;
  // Optional: called with the trained model after the last epoch.
  std::function<void(TaskTCN&)> finish;
};

// What the command line decides beyond each flag's range, checked before any
// data is made or read, so a bad run fails in a moment and loses nothing:
// the device (cpu, cuda[:N], auto), the output paths (--metrics, --save_init,
// --dump_batches) and the TCN: locuslab's configuration from --levels, --nhid,
// --ksize and --dropout, then the task's tcn_defaults, then --tcn (an error
// names --tcn when its JSON or an option in it is bad). A program calls it
// once its TaskSetup's inputs, outputs and tcn_defaults are set.
struct RunPlan {
  tcn::Device device;
  std::string metrics;  // the CSV's path: --metrics, or runs/<program>.csv
  tcn::nn::TCNOptions tcn;
};
RunPlan plan_run(const TaskSetup& task);

// The mean squared error of the model's outputs at the last step against
// y [B, K] (the adding problem's sum, the forecaster's K steps ahead).
tcn::Tensor mse_last(const TaskTCN& model, const Dataset& b);

// Builds the model (seeded from --seed), trains it as the reference does
// (batches in order, the last one possibly shorter, a clip if --clip > 0),
// prints progress, evaluates the test set at every epoch's end, writes the
// metrics CSV. A non-finite loss stops the run with an error naming its step.
int train(TaskSetup& task, const RunPlan& plan);

// The generators of a run, each its own Philox stream from --seed: model init,
// dropout masks, data. (Different keys, so they never overlap.)
inline tcn::Generator init_generator(uint64_t seed) { return tcn::Generator(seed); }
inline tcn::Generator dropout_generator(uint64_t seed) { return tcn::Generator(seed + 1); }
inline tcn::Generator data_generator(uint64_t seed) { return tcn::Generator(seed + 2); }

// Uniform integers in [0, n) from 32-bit Philox draws: floor(u * n), u in [0, 1).
std::vector<int64_t> random_ints(int64_t count, int64_t n, tcn::Generator& gen);

}  // namespace tasks
