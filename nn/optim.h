// Optimizers with PyTorch's update rules, and global-norm gradient clipping.
// step() runs under NoGrad and updates parameters in place; parameters with
// no gradient are skipped, as in PyTorch.
#pragma once

#include <vector>

#include "nn/module.h"

namespace tcn::nn {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad() const;
  double lr;
  const std::vector<Tensor>& params() const { return params_; }
  // The optimizer's state tensors by name (momentum buffers, moments, step
  // count), for checkpoints. load_state checks names and shapes.
  virtual NamedTensors state() const = 0;
  void load_state(const NamedTensors& state);

 protected:
  std::vector<Tensor> params_;
};

// p -= lr * d, with d = g + wd * p, and with momentum m: buf = m * buf + d
// (buf = d on the first step), d = buf.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0);
  void step() override;
  NamedTensors state() const override;
  double momentum, weight_decay;

 private:
  std::vector<Tensor> buf_;
  Tensor started_;  // float64 [params]: 1 once a buffer holds a gradient
};

// Adam (Kingma & Ba) with bias correction, as torch.optim.Adam (L2 weight decay).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0.0);
  void step() override;
  NamedTensors state() const override;
  double beta1, beta2, eps, weight_decay;

 private:
  std::vector<Tensor> m_, v_;
  Tensor steps_;  // float64 [params]: steps taken per parameter (they skip steps without a gradient)
};

// Scales all gradients so their global L2 norm is at most max_norm (factor
// min(1, max_norm / (norm + 1e-6)), as PyTorch) and returns the norm before
// clipping as a one-element tensor on the gradients' device: nothing is read
// back to the host, so on a GPU the step does not synchronise.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
// The same, returning the norm as a number (reads it back).
inline double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return clip_grad_norm_(params, max_norm).item();
}

}  // namespace tcn::nn
