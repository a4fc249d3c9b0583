// A program outside tcn's tree: trains a small temporal convolutional network
// to output its input delayed by three steps, y[t] = x[t-3], and checks that it
// learned it. Everything comes through the umbrella header.
#include <tcn/tcn.h>

#include <cstdio>
#include <memory>

int main() {
  using namespace tcn;
  std::printf("tcn %s (%s), headers %s\n", version(), build_config(), TCN_VERSION_STRING);

  constexpr int64_t kBatch = 16, kTime = 32, kDelay = 3, kHidden = 16, kSteps = 300;
  Generator init(1), drop(2), data(3);
  // Two residual blocks of kernel 2, dilations 1 and 2: each output sees the
  // current input and the 6 before it (receptive field 7 > kDelay).
  nn::TemporalConvNet net(1, {kHidden, kHidden}, /*kernel=*/2, /*dropout=*/0.0, init, drop);
  nn::Linear head(kHidden, 1, init);
  std::vector<Tensor> params = net.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  nn::Adam opt(params, /*lr=*/1e-2);

  double first = 0, last = 0;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const Tensor x = randn({kBatch, kTime, 1}, {}, data);
    // The target: x shifted right by kDelay along time, zeros before the start.
    const Tensor target = pad(x.narrow(1, 0, kTime - kDelay), 1, kDelay, 0);
    const Tensor y = head.forward(net.forward(x));
    const Tensor loss = mean(pow(y - target, 2.0));
    opt.zero_grad();
    loss.backward();
    nn::clip_grad_norm_(params, 1.0);
    opt.step();
    const double l = loss.item();
    if (step == 1) first = l;
    last = l;
    if (step % 100 == 0) std::printf("step %3lld  mse %.5f\n", static_cast<long long>(step), l);
  }
  const bool learned = last < 0.05 * first;
  std::printf("mse %.4f -> %.5f: %s\n", first, last, learned ? "learned the delay" : "DID NOT LEARN");
  return learned ? 0 : 1;
}
