// Optimizers with PyTorch's update rules, global-norm gradient clipping, and a
// device-side watch on the training loss. step() runs under NoGrad and updates
// parameters in place; parameters with no gradient are skipped, as in PyTorch.
// On a GPU each parameter's update is one kernel.
#pragma once

#include <vector>

#include "nn/module.h"

namespace tcn::nn {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // gate: undefined (update), or a float64 scalar on the parameters' device
  // (LossWatch::ok()): while it is 0 the step changes nothing, neither the
  // parameters nor the optimizer's state. It is read where it lives, so a GPU
  // step needs no host wait to decide.
  virtual void step(const Tensor& gate = Tensor()) = 0;
  void zero_grad() const;
  double lr;  // may change between steps, also between replays of a captured step
  const std::vector<Tensor>& params() const { return params_; }
  // The optimizer's state tensors by name (momentum buffers, moments, step
  // count), for checkpoints. load_state checks names and shapes.
  virtual NamedTensors state() const = 0;
  void load_state(const NamedTensors& state);

 protected:
  // lr as a float64 scalar on `device`, which the GPU update kernels read (so a
  // captured step, core/step_graph.h, follows a changed lr): refreshed here when
  // lr changed, and before each replay of a step captured with it.
  const Tensor& device_lr(const Device& device);
  std::vector<Tensor> params_;

 private:
  void refresh_lr(size_t k);
  struct DeviceLr {
    Device device;
    Tensor value;
    double holds;  // the lr it was last set to
  };
  std::vector<DeviceLr> device_lr_;
};

// p -= lr * d, with d = g + wd * p, and with momentum m: buf = m * buf + d
// (buf = d on the first step), d = buf.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0);
  void step(const Tensor& gate = Tensor()) override;
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
  void step(const Tensor& gate = Tensor()) override;
  NamedTensors state() const override;
  double beta1, beta2, eps, weight_decay;

 private:
  std::vector<Tensor> m_, v_;
  // float64 [params], on the parameters' device: steps taken per parameter
  // (they skip steps without a gradient, and gated-off steps).
  Tensor steps_;
};

// RMSprop (Hinton's lecture 6e), as torch.optim.RMSprop with its defaults
// (no momentum, not centered): v = alpha * v + (1 - alpha) * d^2,
// p -= lr * d / (sqrt(v) + eps), with d = g + wd * p. The copy-memory task's optimizer.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8,
          double weight_decay = 0.0);
  void step(const Tensor& gate = Tensor()) override;
  NamedTensors state() const override;
  double alpha, eps, weight_decay;

 private:
  std::vector<Tensor> v_;  // the running average of squared gradients, per parameter
};

// Watches the training loss on its device without reading it back every step
// (on a GPU, a read is a host wait). add(loss, step) sums finite losses; the
// first non-finite one turns ok() to 0 for good and records its step and value.
// Steps are counted on the device (each add is the step after the previous
// one), so an add inside a captured step (core/step_graph.h) names the right
// step at every replay; an add whose step does not follow on resets the count.
// ok() is the gate for Optimizer::step, so the parameters and optimizer state
// stay as they were before that step. read() (one host wait) returns the sum
// since the last read, and the bad step if there was one.
class LossWatch {
 public:
  explicit LossWatch(Device device);
  void add(const Tensor& loss, int64_t step);
  const Tensor& ok() const { return ok_; }
  struct Reading {
    double loss_sum = 0;      // finite losses added since the last read
    int64_t losses = 0;       // how many add() calls that covers
    int64_t bad_step = -1;    // the first non-finite loss's step, -1 if none
    double bad_loss = 0;      // its value (NaN or an infinity)
  };
  Reading read();

 private:
  Tensor w_;   // float64 [5] on the device: ok, bad step, bad loss, sum, step of the last add
  Tensor ok_;  // w_[0], a scalar view
  int64_t added_ = 0;
  int64_t next_step_ = -1;  // the step the device count gives the next add (-1: not set yet)
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
