// Chapter 4 (docs/tutorial/04-training.md): a training loop. A small temporal
// convolutional network learns a synthetic sequence task with Adam and
// global-norm gradient clipping; a held-out set, evaluated in eval mode under
// NoGrad, shows that it learned the rule and did not memorise the batches.
//
// The task: x is a sequence of N(0, 1) numbers, and the target at step t is
//   y_t = max(x_{t-1}, x_{t-5})      (x before the start counts as 0)
// so the network must look back 5 steps (a receptive field of at least 6) and
// be non-linear (max(a, b) = b + relu(a - b)).
#include <tcn/tcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>

#include "check.h"

using tcn::Tensor;
using tut::check;

// ---- the model: TemporalConvNet -> Linear, both framework layers ----------
// Parameter names follow the children's names: "tcn.network.0.conv1.weight_v",
// ..., "head.weight", "head.bias", as a PyTorch model with the same attributes.
class DelayNet : public tcn::nn::Module {
 public:
  DelayNet(int64_t hidden, double dropout, tcn::Generator& init, tcn::Generator& drop) {
    using namespace tcn::nn;
    // Two levels, kernel 3, dilations 1 and 2: receptive field 1 + 2*2 + 2*4 = 13.
    tcn = register_module("tcn", std::make_shared<TemporalConvNet>(1, std::vector<int64_t>{hidden, hidden}, 3,
                                                                   dropout, init, drop));
    head = register_module("head", std::make_shared<Linear>(hidden, 1, init));
  }
  // x [B, T, 1] -> prediction [B, T, 1]
  Tensor forward(const Tensor& x) const {
    const auto scope = profile_scope();
    return head->forward(tcn->forward(x));
  }
  std::shared_ptr<tcn::nn::TemporalConvNet> tcn;
  std::shared_ptr<tcn::nn::Linear> head;
};

// x_{t-k} for every t: shift right along time by k, filling with zeros.
Tensor delayed(const Tensor& x, int64_t k) { return tcn::pad(x, 1, k, 0).narrow(1, 0, x.size(1)); }

// A batch of the task: (x [B, T, 1], y [B, T, 1]).
std::pair<Tensor, Tensor> make_batch(int64_t batch, int64_t time, tcn::Generator& gen) {
  using namespace tcn;
  Tensor x = randn({batch, time, 1}, {}, gen);
  const Tensor a = delayed(x, 1), b = delayed(x, 5);
  return {x, b + relu(a - b)};  // max(a, b)
}

Tensor mse(const Tensor& pred, const Tensor& target) {
  const Tensor d = pred - target;
  return tcn::mean(d * d);
}

int main() {
  using namespace tcn;
  constexpr int64_t kBatch = 32, kTime = 48, kHidden = 16, kSteps = 400;
  constexpr double kMaxNorm = 1.0;
  Generator init(1), drop(2), train_data(3), heldout_data(4);
  // This model is tiny (a few thousand weights, [32, 48, 16] activations): a
  // second thread's synchronisation costs more than it saves, and on a busy
  // machine much more. Large models want every core (core/threads.h).
  set_num_threads(1);

  DelayNet model(kHidden, /*dropout=*/0.05, init, drop);
  std::printf("      model: %lld parameters, receptive field %lld steps\n",
              static_cast<long long>(model.num_parameters()), static_cast<long long>(model.tcn->receptive_field()));
  check(model.tcn->receptive_field() >= 6, "the receptive field covers x_{t-5}");
  std::string names;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name.starts_with("head.") || name.starts_with("tcn.network.0.conv1.")) names += name + " ";
  }
  std::printf("      some parameter names: %s\n", names.c_str());
  check(model.named_parameters().back().first == "head.bias", "the head's bias is named head.bias");

  // The held-out set: a fixed generator of its own, never trained on.
  // (Named tensors rather than `auto [x_eval, y_eval]`: the lambda below
  // captures them, which clang before 16 refuses for structured bindings.)
  Tensor x_eval, y_eval;
  std::tie(x_eval, y_eval) = make_batch(256, kTime, heldout_data);
  // Evaluation: eval mode (dropout off) and NoGrad (nothing recorded), then
  // back to training mode.
  auto evaluate = [&]() {
    autograd::NoGrad no_grad;
    model.eval();
    const double loss = mse(model.forward(x_eval), y_eval).item();
    model.train();
    return loss;
  };
  // The baseline a model without any memory could reach: predict the mean.
  const double y_mean = mean(y_eval).item();
  const double baseline = mse(full(y_eval.shape(), y_mean), y_eval).item();

  nn::Adam opt(model.parameters(), /*lr=*/1e-2);
  const double eval_before = evaluate();
  std::printf("      held-out MSE before training %.4f (predicting the mean: %.4f)\n", eval_before, baseline);

  const auto start = std::chrono::steady_clock::now();
  double first_train_loss = 0, last_train_loss = 0, max_norm_seen = 0;
  int64_t clipped_steps = 0;
  bool norm_bounded = true;
  for (int64_t step = 1; step <= kSteps; ++step) {
    // Halve the learning rate for the last quarter: lr is a plain field.
    if (step == 3 * kSteps / 4) opt.lr *= 0.5;

    const auto [x, y] = make_batch(kBatch, kTime, train_data);
    opt.zero_grad();                              // drop the last step's gradients
    const Tensor loss = mse(model.forward(x), y);  // forward records the tape
    loss.backward();                              // gradients into every parameter's .grad()
    // Clip: scale all gradients so their global L2 norm is at most kMaxNorm.
    const double norm = nn::clip_grad_norm(model.parameters(), kMaxNorm);
    if (norm > kMaxNorm) ++clipped_steps;
    max_norm_seen = std::max(max_norm_seen, norm);
    if (step % 100 == 1) {  // what the clipped gradients' norm is now
      double sq = 0;
      for (const Tensor& p : model.parameters()) sq += sum(p.grad() * p.grad()).item();
      norm_bounded = norm_bounded && std::sqrt(sq) <= kMaxNorm * (1 + 1e-5);
    }
    opt.step();  // Adam's update, in place, under NoGrad

    const double l = loss.item();
    if (step == 1) first_train_loss = l;
    last_train_loss = l;
    if (step % 100 == 0)
      std::printf("      step %3lld  train MSE %.4f  grad norm %.3f  held-out MSE %.4f\n",
                  static_cast<long long>(step), l, norm, evaluate());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double eval_after = evaluate();
  std::printf("      %lld steps in %.2f s; %lld steps had their gradient clipped (largest norm %.2f)\n",
              static_cast<long long>(kSteps), seconds, static_cast<long long>(clipped_steps), max_norm_seen);
  std::printf("      train MSE %.4f -> %.4f; held-out MSE %.4f -> %.4f\n", first_train_loss, last_train_loss,
              eval_before, eval_after);

  check(norm_bounded, "after clip_grad_norm the gradients' global norm is at most max_norm");
  check(autograd::tape_size() == 0, "every backward freed its tape; evaluation recorded nothing");
  check(std::isfinite(eval_after), "the held-out loss is finite");
  check(eval_after < 0.1 * eval_before, "the held-out MSE fell to under a tenth of its starting value");
  check(eval_after < 0.1 * baseline, "and to under a tenth of what predicting the mean achieves");

  // The model, in eval mode, is deterministic: two evaluations agree bitwise.
  check(evaluate() == eval_after, "evaluation is deterministic (dropout is off in eval mode)");

  // ---- the same loop, as the library runs it: nn::Trainer ----------------
  // nn/trainer.h holds this step once for every trainer: zero the gradients,
  // forward and loss, backward, clip, update, with what a long run needs
  // around it (the loss watched on the device, data-parallel gradients, a
  // CUDA graph, the profiler, signals). Trained again from the same start on
  // the same batches, it must give this model bit for bit.
  Generator init2(1), drop2(2), train_data2(3);
  DelayNet again(kHidden, /*dropout=*/0.05, init2, drop2);
  nn::Adam opt2(again.parameters(), /*lr=*/1e-2);
  nn::Trainer trainer;
  trainer.setup(again, opt2, Device::cpu(), [&](const nn::Batch& b) { return mse(again.forward(b.input), b.target); },
                nn::TrainerOptions{.clip = kMaxNorm});
  for (int64_t step = 1; step <= kSteps; ++step) {
    if (step == 3 * kSteps / 4) opt2.lr *= 0.5;
    const auto [x, y] = make_batch(kBatch, kTime, train_data2);
    trainer.step(nn::Batch{.input = x, .target = y});
  }
  const double trainer_loss = trainer.end_interval().loss;  // the mean loss of its steps
  trainer.finish();
  bool same = true;
  const auto mine = model.parameters(), its = again.parameters();
  for (size_t i = 0; i < mine.size(); ++i)
    same = same && mine[i].to_vector<float>() == its[i].to_vector<float>();  // every element equal
  std::printf("      nn::Trainer, the same %lld steps: mean train MSE %.4f\n", static_cast<long long>(kSteps),
              trainer_loss);
  check(same, "nn::Trainer's step trains the model exactly as the loop above");

  return tut::finish("tutorial_04_training");
}
