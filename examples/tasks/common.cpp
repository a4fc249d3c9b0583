#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "examples/common/program.h"
#include "nn/trainer.h"
#include "core/devices.h"
#include "nn/safetensors.h"

namespace tasks {

using namespace tcn;
using Clock = std::chrono::steady_clock;

// ---- flags ----------------------------------------------------------------------------------
namespace {
constexpr int64_t kMaxCount = 1000000000000;  // --max_steps, --log-interval
constexpr int64_t kMaxBatch = 100000;
constexpr int64_t kMaxSamples = 100000000;  // --train_size, --test_size
constexpr int64_t kMaxEpochs = 1000000;
constexpr double kMaxLr = 1e30;  // huge is allowed: the NaN test diverges on purpose
constexpr double kMaxClip = 1e6;

std::string range(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

}  // namespace

void check(const char* flag, int64_t v, int64_t lo, int64_t hi, const char* note) {
  TCN_CHECK(v >= lo && v <= hi, flag, " must be in ", range(lo, hi), note, ", got ", v);
}

void check_real(const char* flag, double v, double lo, double hi, bool lo_open, bool hi_open, const char* note) {
  const bool ok = !std::isnan(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  TCN_CHECK(ok, flag, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]", note, ", got ", v);
}

void add_common_flags(CLI::App& app, CommonOptions& o) {
  app.add_option("--batch_size", o.batch_size, "batch size, in [1, 100000]")->capture_default_str();
  app.add_option("--dropout", o.dropout, "dropout in the temporal blocks, in [0, 1)")->capture_default_str();
  app.add_option("--clip", o.clip, "gradient clip (global L2 norm), in [-1, 1e6]; <= 0: off")->capture_default_str();
  app.add_option("--epochs", o.epochs, "upper epoch limit, in [1, 1000000]")->capture_default_str();
  app.add_option("--ksize", o.ksize, "kernel size, in [1, 64]")->capture_default_str();
  app.add_option("--levels", o.levels, "temporal blocks, in [1, 32]")->capture_default_str();
  app.add_option("--nhid", o.nhid, "channels per block, in [1, 65536]")->capture_default_str();
  app.add_option("--log-interval,--log_interval", o.log_interval, "steps per progress line, in [1, 1e12]")->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate, in (0, 1e30]")->capture_default_str();
  app.add_option("--optim", o.optim, "optimizer: Adam, RMSprop or SGD (torch.optim's defaults otherwise)")
      ->capture_default_str()
      ->check(CLI::IsMember({"Adam", "RMSprop", "SGD"}));
  app.add_option("--seed", o.seed, "seed of the data, the init and dropout, in [0, 2^64 - 1]")
      ->capture_default_str()
      ->check(program::kSeed);
  app.add_option("--device", o.device, "cpu, cuda[:N] or auto (a GPU once the CUDA kernels are verified on one)")
      ->capture_default_str();
  program::add_conv_impl_option(&app, o.conv_impl);
  app.add_option("--max_steps", o.max_steps, "stop after this many steps, in [0, 1e12] (0: no limit)")
      ->capture_default_str();
  app.add_option("--train_size", o.train_size, "training sequences, in [1, 1e8] (the reference's N_train)")
      ->capture_default_str();
  app.add_option("--test_size", o.test_size, "test sequences, in [1, 1e8] (the reference's N_test)")
      ->capture_default_str();
  app.add_option("--metrics", o.metrics, "metrics CSV (default runs/<program>.csv)");
  app.add_option("--save_init", o.save_init, "write the initial weights here (safetensors, PyTorch names)");
  app.add_option("--tcn", o.tcn,
                 "the TCN's options as pytorch-tcn keyword arguments (JSON) over the flags above, e.g. "
                 "'{\"use_norm\": \"layer_norm\", \"activation\": \"gelu\"}' (docs/tcn.md)");
  app.add_option("--dump_batches", o.dump_batches,
                 "write the training samples of the steps this run takes (at most one epoch) here (safetensors)");
}

void check_common_flags(const CommonOptions& o) {
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check_real("--dropout", o.dropout, 0, 1, false, true);
  check_real("--clip", o.clip, -1, kMaxClip, false, false, " (<= 0: off)");
  check("--epochs", o.epochs, 1, kMaxEpochs);
  check("--ksize", o.ksize, 1, nn::limits::kMaxKsize);
  check("--levels", o.levels, 1, nn::limits::kMaxLevels);
  check("--nhid", o.nhid, 1, nn::limits::kMaxWidth);
  check("--log-interval", o.log_interval, 1, kMaxCount);
  check_real("--lr", o.lr, 0, kMaxLr, true, false);
  check("--max_steps", o.max_steps, 0, kMaxCount, " (0: no limit)");
  check("--train_size", o.train_size, 1, kMaxSamples);
  check("--test_size", o.test_size, 1, kMaxSamples);
}

std::vector<int64_t> random_ints(int64_t count, int64_t n, Generator& gen) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (double u : rand({count}, {DType::F64}, gen).to_vector<double>())
    out.push_back(std::min<int64_t>(n - 1, static_cast<int64_t>(u * static_cast<double>(n))));
  return out;
}

// ---- the training loop ----------------------------------------------------------------------------
namespace {

// event,epoch,step,loss,accuracy,ms_per_step,elapsed_s (accuracy empty for a task without one).
class MetricsCsv {
 public:
  explicit MetricsCsv(const std::string& path) : path_(path) {
    const auto parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    TCN_CHECK(!ec, "--metrics ", path, ": cannot create ", parent.string(), " (", ec.message(), ")");
    f_.open(path, std::ios::trunc);
    TCN_CHECK(f_.good(), "--metrics ", path, ": cannot open for writing (", std::strerror(errno), ")");
    f_ << "event,epoch,step,loss,accuracy,ms_per_step,elapsed_s\n";
  }
  void row(const char* event, int64_t epoch, int64_t step, double loss, double accuracy, double ms, double elapsed) {
    char acc[32] = "";
    if (!std::isnan(accuracy)) std::snprintf(acc, sizeof acc, "%.6f", accuracy);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s,%lld,%lld,%.9g,%s,%.3f,%.2f\n", event, static_cast<long long>(epoch),
                  static_cast<long long>(step), loss, acc, ms, elapsed);
    f_ << buf;
    f_.flush();
    TCN_CHECK(f_.good(), "--metrics ", path_, ": write failed (", std::strerror(errno), ")");
  }

 private:
  std::string path_;
  std::ofstream f_;
};

std::unique_ptr<nn::Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr) {
  if (name == "Adam") return std::make_unique<nn::Adam>(std::move(params), lr);
  if (name == "RMSprop") return std::make_unique<nn::RMSprop>(std::move(params), lr);
  if (name == "SGD") return std::make_unique<nn::SGD>(std::move(params), lr);
  TCN_FAIL("--optim ", name, ": not Adam, RMSprop or SGD");
}

// The test set in batches of batch_size, under NoGrad: mean loss and accuracy (NaN without one).
std::pair<double, double> evaluate(const TaskSetup& t, TaskTCN& model, const Dataset& test) {
  model.eval();
  autograd::NoGrad ng;
  EvalSums s;
  for (int64_t i = 0; i < test.size(); i += t.opts.batch_size)
    t.evaluate(model, test.slice(i, std::min(t.opts.batch_size, test.size() - i)), s);
  model.train();
  return {s.loss_sum / static_cast<double>(s.loss_count),
          s.scored > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.scored) : std::nan("")};
}

}  // namespace

Tensor mse_last(const TaskTCN& model, const Dataset& b) {
  const Tensor out = model.forward(b.x, 1).reshape({b.size(), b.y.size(1)});
  const Tensor d = sub(out, b.y);
  return mean(mul(d, d));
}

namespace {

nn::TCNOptions tcn_options(const TaskSetup& t) {
  const CommonOptions& o = t.opts;
  nlohmann::json j = nn::TemporalConvNet::options(t.inputs, std::vector<int64_t>(static_cast<size_t>(o.levels), o.nhid),
                                                  o.ksize, o.dropout)
                         .to_json();
  j.update(t.tcn_defaults);
  if (!o.tcn.empty()) {
    const nlohmann::json user = nn::TCNOptions::parse(o.tcn, "--tcn");
    TCN_CHECK(user.is_object(), "--tcn: expected a JSON object of pytorch-tcn keyword arguments, got ", o.tcn);
    for (const char* fixed : {"num_inputs", "input_shape"})
      TCN_CHECK(!user.contains(fixed), "--tcn: ", fixed, " is the task's (", j[fixed].dump(), "), not an option here");
    j.update(user);
  }
  nn::TCNOptions opts;
  try {
    opts = nn::TCNOptions::from_json(j);
  } catch (const Error& e) {
    TCN_FAIL("--tcn: ", e.what());
  }
  // Conditioning embeddings need a second input per sample, which no task here has: refused before any data.
  TCN_CHECK(opts.embedding_dims.empty(), "--tcn: embedding_shapes asks for conditioning inputs, which ", t.program,
            "'s data does not have");
  return opts;
}

// For tools/reference/check_tasks.py: the weights before any step (--save_init)
// and the samples the `planned` steps will read (--dump_batches).
void save_reference_inputs(const TaskSetup& t, TaskTCN& model, const nn::TCNOptions& topts, int64_t planned) {
  const CommonOptions& o = t.opts;
  if (!o.save_init.empty()) {
    const nlohmann::json cfg = {{"task", t.program},    {"inputs", t.inputs}, {"outputs", t.outputs},
                                {"nhid", o.nhid},       {"levels", o.levels}, {"ksize", o.ksize},
                                {"dropout", o.dropout}, {"optim", o.optim},   {"lr", o.lr},
                                {"clip", o.clip},       {"tcn", topts.to_json()}};
    nn::save_safetensors(o.save_init, model.named_parameters(), {{"config", cfg.dump()}});
  }
  if (!o.dump_batches.empty()) {
    const int64_t n = t.train.size(), B = o.batch_size;
    const Dataset d = t.train.slice(0, std::min(n, planned * B));
    nn::save_safetensors(o.dump_batches, {{"x", d.x.contiguous()}, {"y", d.y.contiguous()}},
                         {{"batch_size", std::to_string(B)}});
  }
}

// The run's header: the data, the TCN, the optimizer, the device; then the TCN
// options that differ from locuslab's TCN.
void say_header(const TaskSetup& t, const TaskTCN& model, const nn::TCNOptions& topts, const Dataset& train,
                const Dataset& test, const Device& device) {
  const CommonOptions& o = t.opts;
  char clip[32] = "off";
  if (o.clip > 0) std::snprintf(clip, sizeof clip, "%g", o.clip);
  const nlohmann::json locuslab = nn::TemporalConvNet::options(t.inputs, topts.num_channels, topts.kernel_size,
                                                               topts.dropout).to_json();
  const nlohmann::json options = topts.to_json();
  nlohmann::json changed = nlohmann::json::object();
  for (const auto& [key, v] : options.items())
    if (locuslab[key] != v) changed[key] = v;
  std::printf("%s: %lld training and %lld test sequences of length %lld; TCN of %lld levels x %lld channels, kernel "
              "%lld (receptive field %lld), %lld parameters; %s lr %g, clip %s; %s\n",
              t.program, static_cast<long long>(train.size()), static_cast<long long>(test.size()),
              static_cast<long long>(train.x.size(1)), static_cast<long long>(topts.num_channels.size()),
              static_cast<long long>(topts.num_channels.back()), static_cast<long long>(topts.kernel_size),
              static_cast<long long>(model.tcn->receptive_field()), static_cast<long long>(model.num_parameters()),
              o.optim.c_str(), o.lr, clip, device.str().c_str());
  if (!changed.empty()) std::printf("%s: TCN options other than locuslab's: %s\n", t.program, changed.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

RunPlan plan_run(const TaskSetup& t) {
  const CommonOptions& o = t.opts;
  const Device device = program::resolve_device(o.device, t.program);
  program::apply_conv_impl(o.conv_impl, device);
  const std::string metrics = o.metrics.empty() ? "runs/" + std::string(t.program) + ".csv" : o.metrics;
  program::check_output_path("--metrics", metrics);
  if (!o.save_init.empty()) program::check_output_path("--save_init", o.save_init);
  if (!o.dump_batches.empty()) program::check_output_path("--dump_batches", o.dump_batches);
  return RunPlan{.device = device, .metrics = metrics, .tcn = tcn_options(t)};
}

int train(TaskSetup& t, const RunPlan& plan) {
  const CommonOptions& o = t.opts;
  const char* prog = t.program;
  const Device& device = plan.device;
  const std::string& metrics = plan.metrics;
  const nn::TCNOptions& topts = plan.tcn;

  Generator init = init_generator(o.seed), drop = dropout_generator(o.seed);
  TaskTCN model(topts, t.outputs, init, drop);
  const int64_t n = t.train.size(), B = o.batch_size;
  const int64_t per_epoch = (n + B - 1) / B;  // the last batch may be shorter, as in the reference
  const int64_t planned = o.max_steps > 0 ? std::min(o.max_steps, o.epochs * per_epoch) : o.epochs * per_epoch;

  save_reference_inputs(t, model, topts, planned);

  model.to(device);
  const Dataset train = t.train.to(device), test = t.test.to(device);
  std::unique_ptr<nn::Optimizer> opt = make_optimizer(o.optim, model.parameters(), o.lr);
  say_header(t, model, topts, train, test, device);

  MetricsCsv csv(metrics);
  const auto t_start = Clock::now();
  auto seconds_since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  // The step (nn/trainer.h): the loss stays on the device and is read at
  // log lines only; the first non-finite loss closes the optimizer's gate, so
  // the weights keep their last finite state, and the next read stops the run
  // naming the step.
  nn::Trainer trainer;
  trainer.setup(model, *opt, device, [&](const nn::Batch& b) { return t.loss(model, Dataset{b.input, b.target}); },
                nn::TrainerOptions{.clip = o.clip, .bad_loss_note = "stopped before its update"});
  auto log_interval = [&](int64_t epoch) {
    const nn::Interval in = trainer.end_interval();
    const double ms = 1000 * in.seconds / static_cast<double>(in.steps);
    const int64_t step = trainer.steps(), batch = (step - 1) % per_epoch + 1;
    std::printf("| epoch %3lld | step %7lld | %5lld/%5lld batches | lr %.2e | ms/step %7.2f | loss %.8f\n",
                static_cast<long long>(epoch), static_cast<long long>(step), static_cast<long long>(batch),
                static_cast<long long>(per_epoch), opt->lr, ms, in.loss);
    std::fflush(stdout);
    csv.row("train", epoch, step, in.loss, std::nan(""), ms, seconds_since(t_start));
  };

  for (int64_t epoch = 1; epoch <= o.epochs && trainer.steps() < planned; ++epoch) {
    model.train();
    for (int64_t i = 0; i < n && trainer.steps() < planned; i += B) {
      const Dataset batch = train.slice(i, std::min(B, n - i));
      trainer.step(nn::Batch{.input = batch.x, .target = batch.y});
      const int64_t step = trainer.steps();
      if (step % o.log_interval == 0 || step == planned) log_interval(epoch);
    }
    if (trainer.interval_steps() > 0) log_interval(epoch);  // the epoch's last steps, when they end no interval
    trainer.end_epoch(false);
    const int64_t step = trainer.steps();
    const auto t_eval = Clock::now();
    const auto [test_loss, accuracy] = evaluate(t, model, test);
    const double eval_s = seconds_since(t_eval);
    std::printf("| end of epoch %3lld | step %7lld | test loss %.8f", static_cast<long long>(epoch),
                static_cast<long long>(step), test_loss);
    if (!std::isnan(accuracy)) std::printf(" | %s %.4f", t.accuracy_name, accuracy);
    if (t.describe_test) std::printf(" | %s", t.describe_test(test_loss).c_str());
    std::printf(" | %.1f s (test %.1f s)%s\n", seconds_since(t_start), eval_s,
                step < epoch * per_epoch ? " (partial epoch)" : "");
    std::fflush(stdout);
    csv.row("test", epoch, step, test_loss, accuracy, 0, seconds_since(t_start));
    TCN_CHECK(std::isfinite(test_loss), "epoch ", epoch, ": test loss is ", test_loss);
  }
  if (t.finish) {
    model.eval();
    t.finish(model);
  }
  return 0;
}

}  // namespace tasks
