#include "nn/trainer.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "core/profile.h"
#include "ops/ops.h"

namespace tcn::nn {

using Clock = std::chrono::steady_clock;

// ---- the step --------------------------------------------------------------------------------

// One training step, as every trainer here takes it. On CUDA this is what the
// graph captures: nothing in it reads a value back to the host.
Tensor Trainer::compute(const Batch& b) {
  opt_->zero_grad();
  Tensor loss = loss_(b);                                  // forward and loss
  loss.backward();
  loss = reduce_->finish(loss);                            // data-parallel: the whole batch's gradient and loss
  if (o_.clip > 0) clip_grad_norm_(params_, o_.clip);  // the norm stays on the device
  watch_->add(loss, steps_ + 1);
  opt_->step(watch_->ok());  // a no-op from the first non-finite loss on, decided on the device
  return loss;
}

// The step through its policies: the profiler records it when it is one of
// the profiled steps; the batch goes into the graph's buffers; the graph runs
// it (captured once, then replayed). Then the loss watch's bookkeeping.
void Trainer::step(const Batch& batch) {
  if (!interval_started_) interval_start_ = Clock::now(), interval_started_ = true;
  {
    const Profiler::Step profiled(profiler_->profiler_for(steps_, *model_, device_));
    const GraphCapture::Staged in = graph_->stage(batch);
    graph_->run(in.key, [&] { return compute(in.batch); });
  }
  // After the last profiled step: the table; the losses read first go to this interval.
  if (profiler_->last(steps_)) profiler_->report([this] { read_losses(), clear_progress(); }, false, say_fn());
  if (graph_->just_settled()) say("cuda graph: " + graph_->status() + "\n");
  ++steps_;
  watch_->placed(batch.epoch, batch.number);
  ++interval_steps_;
  interval_items_ += batch.items;
  if (o_.debug_sync) {
    last_loss_ = watch_->read(steps_).loss_sum;  // this step's loss alone
    interval_loss_ += last_loss_;
  }
}

// ---- around the steps ------------------------------------------------------------------------

void Trainer::setup(Module& model, Optimizer& opt, Device device, LossFn loss, TrainerOptions options,
                    int64_t steps_done) {
  model_ = &model;
  opt_ = &opt;
  params_ = model.parameters();
  device_ = device;
  loss_ = std::move(loss);
  o_ = std::move(options);
  steps_ = steps_done;
  reduce_ = std::make_unique<GradAverage>(o_.comm, params_);
  watch_ = std::make_unique<LossCheck>(device, o_.bad_loss_note);
  graph_ = std::make_unique<GraphCapture>(o_.graph, device, params_, o_.graph_batch, o_.graph_batch_options);
  const int64_t profile_steps = o_.profile_steps > 0 ? o_.profile_steps : o_.trace.empty() ? 0 : 3;
  profiler_ = std::make_unique<StepProfiler>(profile_steps, steps_done + 2, o_.trace);  // after two warm-up steps
  if (o_.stop_on_signals) signals_ = std::make_unique<StopSignals>();
}

void Trainer::read_losses() {
  if (watch_->unread()) interval_loss_ += watch_->read(steps_).loss_sum;
}

Interval Trainer::end_interval() {
  read_losses();
  Interval r;
  r.seconds = std::chrono::duration<double>(Clock::now() - interval_start_).count();
  r.steps = interval_steps_;
  r.items = interval_items_;
  r.loss = interval_loss_ / static_cast<double>(interval_steps_);
  last_loss_ = r.loss;
  interval_loss_ = 0;
  interval_steps_ = interval_items_ = 0;
  interval_started_ = false;
  return r;
}

void Trainer::end_epoch(bool run_ends) {
  watch_->read(steps_);  // the epoch's (or run's) last steps: a bad one stops here, before evaluation and saves
  if (profiler_->recording()) profiler_->report([this] { clear_progress(); }, run_ends, say_fn());
  clear_progress();
  interval_loss_ = 0;
  interval_steps_ = interval_items_ = 0;
  interval_started_ = false;
}

bool Trainer::stop_requested() {
  if (!signals_) return false;
  const bool here = StopSignals::received() != 0;
  return o_.comm && o_.comm->size() > 1 ? o_.comm->all_reduce_sum(here ? 1.0 : 0.0) > 0 : here;
}

int Trainer::interrupt() {
  watch_->read(steps_);  // a bad step pending: its error, not a save
  const int sig = StopSignals::received() != 0 ? StopSignals::received() : SIGTERM;
  clear_progress();
  std::fflush(stdout);
  return 128 + sig;
}

void Trainer::finish() {
  if (profiler_->pending())
    say("--profile: the run ended before the profiled steps (they follow 2 warm-up steps); nothing profiled\n");
}

void Trainer::say(const std::string& text) const {
  if (!o_.say) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void Trainer::clear_progress() const {
  if (o_.tty) std::fprintf(stderr, "\r%80s\r", "");
}

// ---- the policies ----------------------------------------------------------------------------

GraphCapture::GraphCapture(GraphMode mode, Device device, std::vector<Tensor> params, const Shape& batch_shape,
                           TensorOptions options)
    : graph_(mode, device, std::move(params)) {
  if (graph_.enabled()) input_ = empty(batch_shape, options), target_ = empty(batch_shape, options);
}

GraphCapture::Staged GraphCapture::stage(const Batch& b) {
  const profile::PhaseScope data(profile::Phase::Data);
  if (graph_.enabled() && b.input.shape() == input_.shape()) {  // only full batches in the buffers replay
    copy_(input_, b.input);
    copy_(target_, b.target);
    return {Batch{input_, target_, b.items, b.epoch, b.number}, 1};
  }
  return {Batch{b.input.contiguous(), b.target.contiguous(), b.items, b.epoch, b.number}, -1};
}

bool GraphCapture::just_settled() {
  if (!graph_.enabled() || said_ || !graph_.settled()) return false;
  return said_ = true;
}

Profiler* StepProfiler::profiler_for(int64_t step, const Module& model, Device device) {
  if (steps_ > 0 && step == from_) prof_ = std::make_unique<Profiler>(model, device);
  return prof_.get();
}

void StepProfiler::report(const std::function<void()>& read_losses, bool run_ended,
                          const std::function<void(const std::string&)>& say) {
  const ProfileReport& r = prof_->finish();  // recording stops before the losses are read
  read_losses();
  if (r.steps < steps_)
    say("\n(profiled " + std::to_string(r.steps) + " of the " + std::to_string(steps_) +
        " steps asked for: the " + (run_ended ? "run" : "epoch") + " ended first)");
  say("\n" + r.table() + "\n");
  if (!trace_.empty()) {
    prof_->write_trace(trace_);
    say("trace of the profiled steps written to " + trace_ + "\n");
  }
  prof_.reset();
  steps_ = 0;
}

GradAverage::GradAverage(dist::Comm* comm, std::vector<Tensor> params) : comm_(comm) {
  if (comm && comm->launched()) reducer_ = std::make_unique<dist::GradReducer>(*comm, std::move(params));
}

Tensor GradAverage::finish(Tensor loss) {
  if (!reducer_) return loss;
  reducer_->finish();  // every rank now holds the gradient of the whole batch
  loss = clone(loss.detach());
  comm_->all_reduce_sum(loss);
  mul_(loss, 1.0 / comm_->size());
  return loss;
}

LossWatch::Reading LossCheck::read(int64_t steps) {
  const LossWatch::Reading r = watch_.read();
  if (r.bad_step >= 0) {
    const int64_t back = steps - r.bad_step;  // steps since the bad one: it is among the unread ones
    std::string where;
    if (back >= 0 && back < static_cast<int64_t>(unread_.size())) {
      const auto [epoch, batch] = unread_[unread_.size() - 1 - static_cast<size_t>(back)];
      if (epoch > 0) where = " (epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) + ")";
    }
    TCN_FAIL("step ", r.bad_step, where, ": loss is ", r.bad_loss, "; ", note_);
  }
  unread_.clear();
  return r;
}

namespace {
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) ::_exit(128 + sig);
  g_signal = sig;
}

struct sigaction g_old_int {}, g_old_term {};
}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_signal = 0;
}

int StopSignals::received() { return g_signal; }

}  // namespace tcn::nn
