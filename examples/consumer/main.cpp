// A program outside tcn's tree: trains a small temporal convolutional network
// to output its input delayed by three steps, y[t] = x[t-3], and checks that it
// learned it. Everything comes through the umbrella header; the loop is the
// library's training step (nn::Trainer), as in tcn's own trainers.
#include <tcn/tcn.h>

#include <cstdio>
#include <memory>

using namespace tcn;

// Two residual blocks of kernel 2, dilations 1 and 2, then a linear head: each
// output sees the current input and the 6 before it (receptive field 7 > the delay).
class Delay : public nn::Module {
 public:
  Delay(int64_t hidden, Generator& init, Generator& drop) {
    net = register_module("net", std::make_shared<nn::TemporalConvNet>(1, std::vector<int64_t>{hidden, hidden},
                                                                      /*kernel=*/2, /*dropout=*/0.0, init, drop));
    head = register_module("head", std::make_shared<nn::Linear>(hidden, 1, init));
  }
  Tensor forward(const Tensor& x) { return head->forward(net->forward(x)); }

 private:
  std::shared_ptr<nn::TemporalConvNet> net;
  std::shared_ptr<nn::Linear> head;
};

int main() {
  std::printf("tcn %s (%s), headers %s\n", version(), build_config(), TCN_VERSION_STRING);

  constexpr int64_t kBatch = 16, kTime = 32, kDelay = 3, kHidden = 16, kSteps = 300;
  Generator init(1), drop(2), data(3);
  Delay model(kHidden, init, drop);
  nn::Adam opt(model.parameters(), /*lr=*/1e-2);

  // The step: zero the gradients, this loss, backward, clip to norm 1, update.
  nn::Trainer trainer;
  trainer.setup(model, opt, Device::cpu(),
                [&](const nn::Batch& b) { return mean(pow(model.forward(b.input) - b.target, 2.0)); },
                nn::TrainerOptions{.clip = 1.0});
  double first = 0, last = 0;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const Tensor x = randn({kBatch, kTime, 1}, {}, data);
    // The target: x shifted right by kDelay along time, zeros before the start.
    const Tensor target = pad(x.narrow(1, 0, kTime - kDelay), 1, kDelay, 0);
    trainer.step(nn::Batch{.input = x, .target = target});
    if (step == 1 || step % 100 == 0) {
      const double l = trainer.end_interval().loss;  // the mean loss of the steps since the last call
      if (step == 1) first = l;
      last = l;
      std::printf("step %3lld  mse %.5f\n", static_cast<long long>(step), l);
    }
  }
  trainer.finish();
  const bool learned = last < 0.05 * first;
  std::printf("mse %.4f -> %.5f: %s\n", first, last, learned ? "learned the delay" : "DID NOT LEARN");
  return learned ? 0 : 1;
}
