// The training loop's step, with its policies: what charlm, wordlm, the task
// trainers (examples/tasks), tutorial chapter 4 and a program of yours share.
// The step itself is one block, Trainer::compute: zero the gradients,
// forward and loss, backward, average the gradients over the ranks, clip,
// update. What surrounds it is a policy object each, with one job:
//
//   GraphCapture  on CUDA, the step captured once as a graph and replayed (core/step_graph.h)
//   StepProfiler  --profile: a few steps recorded op by op, then the table (nn/profiler.h)
//   GradAverage   data-parallel: gradients and loss averaged over the ranks (nn/distributed.h)
//   LossCheck     the loss watched on the device, read at log lines (nn::LossWatch)
//   StopSignals   SIGINT / SIGTERM: stop after the current step
//
// A program's loop then reads:
//
//   nn::Trainer trainer;
//   trainer.setup(model, opt, device, loss_fn, options);
//   for (epoch ...) {
//     for (batch ...) {
//       if (trainer.stop_requested()) return save_and_exit(trainer.interrupt());
//       trainer.step(batch);
//       if (log line due) print(trainer.end_interval());
//     }
//     trainer.end_epoch(stopped);
//   }
//   trainer.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/step_graph.h"
#include "core/tensor.h"
#include "nn/distributed.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/profiler.h"

namespace tcn::nn {

// What one step reads. input and target may be views (of the training data on
// the device); the step makes them contiguous, or copies them into the graph's
// buffers.
struct Batch {
  Tensor input, target;
  int64_t items = 0;              // what the rate counts: tokens scored, over all ranks (0: none)
  int64_t epoch = 0, number = 0;  // its place (1-based batch number), named when its loss is bad (0: unnamed)
};

// The steps since the last log line.
struct Interval {
  double loss = 0;      // their mean loss
  int64_t steps = 0, items = 0;
  double seconds = 0;   // wall time, evaluations left out
};

struct TrainerOptions {
  double clip = 0;                    // the gradients' global L2 norm at most this (<= 0: off)
  GraphMode graph = GraphMode::Off;
  Shape graph_batch;             // the shape of the batches the graph replays (full windows)
  TensorOptions graph_batch_options;  // their dtype and device
  dist::Comm* comm = nullptr;    // data-parallel: gradients averaged over its ranks (when launched)
  int64_t profile_steps = 0;          // record this many steps after two warm-up steps (0: off)
  std::string trace;                  // with profile_steps: the Chrome trace of them
  bool debug_sync = false;            // read the loss after every step (an error at its step)
  bool stop_on_signals = false;       // SIGINT / SIGTERM ask the loop to stop (stop_requested)
  bool say = true;                    // the trainer's lines on stdout (profile table, graph status)
  bool tty = false;                   // stderr shows a progress line, cleared before printing
  std::string bad_loss_note;          // ends the error about a non-finite loss
};

// On CUDA the step is captured once as a graph and replayed. The graph reads
// its batch from two fixed buffers, which each batch of the full shape is
// copied into; a batch of another shape (a shorter last window) runs eagerly.
class GraphCapture {
 public:
  GraphCapture(GraphMode mode, Device device, std::vector<Tensor> params,
               const Shape& batch_shape, TensorOptions options);
  // The batch the step reads (the profiler's data phase), and the key of its
  // launches (StepGraph::run): which shapes and buffers they read.
  struct Staged {
    Batch batch;
    int64_t key;
  };
  Staged stage(const Batch& b);
  Tensor run(int64_t key, const std::function<Tensor()>& body) { return graph_.run(key, body); }
  // True once: at the first step after the warm-up (the graph replays, or stays eager for good).
  bool just_settled();
  const std::string& status() const { return graph_.status(); }

 private:
  StepGraph graph_;
  Tensor input_, target_;
  bool said_ = false;
};

// --profile N: steps from + 1 .. from + N recorded op by op, eagerly (a
// StepGraph runs its body while a profiler records), then the table.
class StepProfiler {
 public:
  StepProfiler(int64_t steps, int64_t from, std::string trace) : steps_(steps), from_(from), trace_(std::move(trace)) {}
  // The profiler that records step number `step` (0-based), or nullptr when it
  // is not a profiled one (the first profiled step starts the profiler).
  Profiler* profiler_for(int64_t step, const Module& model, Device device);
  bool last(int64_t step) const { return prof_ && step + 1 == from_ + steps_; }
  bool recording() const { return prof_ != nullptr; }
  bool pending() const { return steps_ > 0; }  // asked for and not reported yet
  // Stops recording and prints the table (and writes the trace) through `say`;
  // `read_losses` runs first (a bad step's error comes before the table).
  void report(const std::function<void()>& read_losses, bool run_ended,
              const std::function<void(const std::string&)>& say);

 private:
  int64_t steps_, from_;
  std::string trace_;
  std::unique_ptr<Profiler> prof_;
};

// Data-parallel: after backward every rank holds the whole batch's gradient,
// and the loss returned is the mean of the ranks' (so every rank watches the
// same value and stops at the same bad step). In one process: the loss as is.
class GradAverage {
 public:
  GradAverage(dist::Comm* comm, std::vector<Tensor> params);  // a no-op unless comm was launched
  Tensor finish(Tensor loss);
  int64_t buckets() const { return reducer_ ? reducer_->num_buckets() : 0; }

 private:
  dist::Comm* comm_;
  std::unique_ptr<dist::GradReducer> reducer_;
};

// The losses are watched on the device (nn::LossWatch): a step never waits to
// read its loss; the first non-finite one gates off every later update, so
// the parameters stay as they were before it. read() is the one host wait
// (which also raises what the device-side index checks found); a bad loss
// then stops the run naming its step and, when known, its batch.
class LossCheck {
 public:
  LossCheck(Device device, std::string note) : watch_(device), note_(std::move(note)) {}
  void add(const Tensor& loss, int64_t step) { watch_.add(loss, step); }
  const Tensor& ok() const { return watch_.ok(); }
  void placed(int64_t epoch, int64_t number) { unread_.emplace_back(epoch, number); }
  bool unread() const { return !unread_.empty(); }
  // The losses since the last read; `steps` is the steps taken so far.
  LossWatch::Reading read(int64_t steps);

 private:
  LossWatch watch_;
  std::string note_;
  std::vector<std::pair<int64_t, int64_t>> unread_;  // (epoch, batch) of each step since the last read
};

// SIGINT / SIGTERM while training: the first one asks the loop to stop after
// the current step; a second one exits at once (128 + signal).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int received();
};

class Trainer {
 public:
  using LossFn = std::function<Tensor(const Batch&)>;  // forward and loss (differentiable)

  // `steps_done`: the steps a resumed run has behind it.
  void setup(Module& model, Optimizer& opt, Device device, LossFn loss,
             TrainerOptions options, int64_t steps_done = 0);
  void step(const Batch& batch);
  Interval end_interval();
  // The epoch's last losses read (a bad one stops here, before evaluations and
  // saves), a profile that the epoch ends reported; `run_ends`: the step limit.
  void end_epoch(bool run_ends);
  // Whether to stop for a signal. Across processes all ranks decide together
  // (a signal may reach them at different steps), so they stop at one step.
  bool stop_requested();
  // The pending losses read, the progress line cleared; returns 128 + signal.
  int interrupt();
  void finish();  // says when --profile asked for steps the run never reached

  // The losses not read yet into this interval's sum (before an evaluation or a save).
  void read_losses();
  // Leaves `d` (an evaluation) out of the interval's time.
  void exclude_time(std::chrono::steady_clock::duration d) { interval_start_ += d; }
  int64_t steps() const { return steps_; }
  int64_t interval_steps() const { return interval_steps_; }
  double last_loss() const { return last_loss_; }  // the step's (debug_sync) or the last interval's
  int64_t grad_buckets() const { return reduce_->buckets(); }

 private:
  Tensor compute(const Batch& b);
  void say(const std::string& text) const;
  std::function<void(const std::string&)> say_fn() const {
    return [this](const std::string& s) { say(s); };
  }
  void clear_progress() const;

  Module* model_ = nullptr;
  Optimizer* opt_ = nullptr;
  std::vector<Tensor> params_;
  Device device_;
  LossFn loss_;
  TrainerOptions o_;
  std::unique_ptr<GradAverage> reduce_;
  std::unique_ptr<LossCheck> watch_;
  std::unique_ptr<GraphCapture> graph_;
  std::unique_ptr<StepProfiler> profiler_;
  std::unique_ptr<StopSignals> signals_;
  int64_t steps_ = 0, interval_steps_ = 0, interval_items_ = 0;
  double interval_loss_ = 0, last_loss_ = 0;
  std::chrono::steady_clock::time_point interval_start_;
  bool interval_started_ = false;
};

}  // namespace tcn::nn
