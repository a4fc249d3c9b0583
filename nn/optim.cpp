#include "nn/optim.h"

#include <cmath>
#include <utility>

#include "core/step_graph.h"
#include "cuda/kernels.h"
#include "ops/dispatch.h"

namespace tcn::nn {

namespace {
// Element loops over a contiguous CPU parameter, its gradient and state tensors.
template <class F>
void for_each_element(const Tensor& p, F f) {
  dispatch_float(p.dtype(), "optimizer", [&]<class T>() { f.template operator()<T>(p.numel()); });
}

// The gate of Optimizer::step, checked once per step against the parameters
// that have a gradient (those the step would update): true when it is a CPU
// tensor holding 0, read once (a GPU gate is read by the update kernels instead).
bool gate_closed_on_host(const Tensor& gate, const std::vector<Tensor>& params) {
  if (!gate.defined()) return false;
  bool checked = false;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    if (!checked)
      TCN_CHECK(gate.numel() == 1 && gate.dtype() == DType::F64, "optimizer: the gate must be a float64 scalar, got ",
                gate.dtype(), " ", gate.shape());
    checked = true;
    TCN_CHECK(gate.device() == p.device(), "optimizer: the gate is on ", gate.device(), " but a parameter is on ",
              p.device());
  }
  return checked && gate.device().is_cpu() && gate.item() == 0.0;
}

// GPU updates go in batches (one launch per 32 tensors of one dtype and one
// device): adds `item`, first handing the batch to `flush` when item's
// parameter differs from the batch's in dtype or device.
template <class Item, class Flush>
void add_to_batch(std::vector<Item>& batch, Item item, Flush flush) {
  if (!batch.empty() && (batch.front().p.device() != item.p.device() || batch.front().p.dtype() != item.p.dtype()))
    flush(std::exchange(batch, {}));
  batch.push_back(std::move(item));
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : lr(lr), params_(std::move(params)) {
  TCN_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got ", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    TCN_CHECK(params_[i].requires_grad() && params_[i].is_leaf() && params_[i].is_contiguous(), "optimizer: parameter ",
              i, " (shape ", params_[i].shape(), ") is not a contiguous leaf that requires grad");
}

const Tensor& Optimizer::device_lr(const Device& device) {
  size_t k = 0;
  while (k < device_lr_.size() && device_lr_[k].device != device) ++k;
  if (k == device_lr_.size()) {
    TCN_CHECK(!StepGraph::capturing(), "optimizer: its first step on ", device,
              " may not be captured in a CUDA graph (it makes the learning-rate scalar); run one step eagerly first");
    device_lr_.push_back({device, empty({}, {DType::F64, device}), -1.0});
  }
  if (StepGraph* g = StepGraph::capturing()) {
    // A fill captured into the graph would reset lr at every replay: refresh it before each one instead.
    TCN_CHECK(device_lr_[k].holds == lr, "optimizer: lr changed in the step being captured");
    g->before_replay([this, k] { refresh_lr(k); });
  } else {
    refresh_lr(k);
  }
  return device_lr_[k].value;
}

void Optimizer::refresh_lr(size_t k) {
  if (device_lr_[k].holds == lr) return;
  fill_(device_lr_[k].value, lr);  // queued: no host wait
  device_lr_[k].holds = lr;
}

void Optimizer::zero_grad() const {
  const profile::PhaseScope phase(profile::Phase::Optimizer);
  const profile::Op range("zero_grad");
  for (const Tensor& p : params_) p.zero_grad();
}

void Optimizer::load_state(const NamedTensors& incoming) {
  NamedTensors mine = state();
  TCN_CHECK(incoming.size() == mine.size(), "optimizer state has ", incoming.size(), " tensors, expected ",
            mine.size());
  for (size_t i = 0; i < mine.size(); ++i)  // all checked before anything is copied
    TCN_CHECK(incoming[i].first == mine[i].first && incoming[i].second.shape() == mine[i].second.shape(),
              "optimizer state: got '", incoming[i].first, "' ", incoming[i].second.shape(), ", expected '",
              mine[i].first, "' ", mine[i].second.shape());
  autograd::NoGrad ng;
  for (size_t i = 0; i < mine.size(); ++i)
    copy_(mine[i].second, incoming[i].second.to(mine[i].second.dtype()).to(mine[i].second.device()));
}

// ---- SGD --------------------------------------------------------------------------------
SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay)
    : Optimizer(std::move(params), lr), momentum(momentum), weight_decay(weight_decay) {
  TCN_CHECK(momentum >= 0 && weight_decay >= 0, "SGD: momentum and weight decay must be >= 0");
  if (momentum != 0) {
    for (const Tensor& p : params_) buf_.push_back(zeros(p.shape(), p.options()));
    // PyTorch starts each buffer at the parameter's first gradient; 1 marks a started buffer.
    started_ = zeros({static_cast<int64_t>(params_.size())}, {DType::F64});
  }
}

void SGD::step(const Tensor& gate) {
  autograd::NoGrad ng;
  const profile::PhaseScope phase(profile::Phase::Optimizer);
  const profile::Op range("sgd_step");
  if (gate_closed_on_host(gate, params_)) return;
  std::vector<cuda::SgdParam> on_gpu;  // updated together, one launch per 32
  auto flush = [&](const std::vector<cuda::SgdParam>& batch) {
    TCN_CUDA_OP("SGD", cuda::sgd_update_many(batch, device_lr(batch.front().p.device()), weight_decay, momentum, gate));
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    profile::add_bytes(nbytes(p) * (momentum != 0 ? 5 : 3));  // w read and written, g read (+ the buffer)
    // A buffer that a gated-off step left at zero gives the same update either way.
    bool first = momentum != 0 && started_.data<double>()[i] == 0;
    // A replay cannot start a buffer: the kernel's `first` is fixed when captured.
    TCN_CHECK(!first || !StepGraph::capturing(), "SGD: the momentum buffer of parameter ", i,
              " starts in the step being captured; run a step with its gradient eagerly first");
    if (p.device().is_cuda()) {
      add_to_batch(on_gpu, cuda::SgdParam{p, g.contiguous(), momentum != 0 ? buf_[i] : Tensor(), first}, flush);
      if (momentum != 0) started_.data<double>()[i] = 1;
      continue;
    }
    for_each_element(p, [&]<class T>(int64_t n) {
      T* w = p.data<T>();
      const T* gr = g.data<T>();
      T* b = momentum != 0 ? buf_[i].data<T>() : nullptr;
      const T lr_t = T(lr), wd = T(weight_decay), mom = T(momentum);
      for (int64_t k = 0; k < n; ++k) {
        T d = gr[k] + wd * w[k];
        if (b) {
          b[k] = first ? d : mom * b[k] + d;
          d = b[k];
        }
        w[k] -= lr_t * d;
      }
    });
    if (momentum != 0) started_.data<double>()[i] = 1;
  }
  if (!on_gpu.empty()) flush(on_gpu);
}

NamedTensors SGD::state() const {
  NamedTensors s;
  if (momentum == 0) return s;
  for (size_t i = 0; i < buf_.size(); ++i) s.emplace_back("momentum_buffer." + std::to_string(i), buf_[i]);
  s.emplace_back("momentum_started", started_);
  return s;
}

// ---- Adam -------------------------------------------------------------------------------
Adam::Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Optimizer(std::move(params), lr), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay) {
  TCN_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "Adam: betas must be in [0, 1), got ", beta1, ", ",
            beta2);
  for (const Tensor& p : params_) {
    m_.push_back(zeros(p.shape(), p.options()));
    v_.push_back(zeros(p.shape(), p.options()));
  }
  const Device dev = params_.empty() ? Device::cpu() : params_[0].device();
  for (const Tensor& p : params_)
    TCN_CHECK(p.device() == dev, "Adam: all parameters must be on one device, got ", dev, " and ", p.device());
  steps_ = zeros({static_cast<int64_t>(params_.size())}, {DType::F64, dev});  // where the updates read it
}

void Adam::step(const Tensor& gate) {
  autograd::NoGrad ng;
  const profile::PhaseScope phase(profile::Phase::Optimizer);
  const profile::Op range("adam_step");
  if (gate_closed_on_host(gate, params_)) return;
  std::vector<cuda::AdamParam> on_gpu;  // updated together, two launches per 32
  auto flush = [&](const std::vector<cuda::AdamParam>& batch) {
    TCN_CUDA_OP("Adam", cuda::adam_update_many(batch, device_lr(batch.front().p.device()), beta1, beta2, eps,
                                               weight_decay, gate));
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    profile::add_bytes(nbytes(p) * 7);  // w, m, v read and written, g read
    if (p.device().is_cuda()) {  // the step count is on the device: the kernel computes the bias corrections
      add_to_batch(on_gpu, cuda::AdamParam{p, g.contiguous(), m_[i], v_[i], steps_.narrow(0, i, 1)}, flush);
      continue;
    }
    double& t = steps_.data<double>()[i];
    t += 1;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    const double step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
    for_each_element(p, [&]<class T>(int64_t n) {
      T* w = p.data<T>();
      const T* gr = g.data<T>();
      T *m = m_[i].data<T>(), *v = v_[i].data<T>();
      // 1 - beta in double, then rounded (as PyTorch's scalar arguments, and the CUDA path):
      // in float32, 1 - 0.999f would be 1.3e-5 off 0.001.
      const T b1 = T(beta1), b2 = T(beta2), wd = T(weight_decay), c1 = T(1 - beta1), c2 = T(1 - beta2);
      for (int64_t k = 0; k < n; ++k) {
        T d = gr[k] + wd * w[k];
        m[k] = b1 * m[k] + c1 * d;
        v[k] = b2 * v[k] + c2 * (d * d);
        T denom = std::sqrt(v[k]) / T(sqrt_bc2) + T(eps);
        w[k] -= T(step_size) * m[k] / denom;
      }
    });
  }
  if (!on_gpu.empty()) flush(on_gpu);
}

NamedTensors Adam::state() const {
  NamedTensors s;
  for (size_t i = 0; i < m_.size(); ++i) {
    s.emplace_back("exp_avg." + std::to_string(i), m_[i]);
    s.emplace_back("exp_avg_sq." + std::to_string(i), v_[i]);
  }
  s.emplace_back("step", steps_);
  return s;
}

// ---- RMSprop ----------------------------------------------------------------------------
RMSprop::RMSprop(std::vector<Tensor> params, double lr, double alpha, double eps, double weight_decay)
    : Optimizer(std::move(params), lr), alpha(alpha), eps(eps), weight_decay(weight_decay) {
  TCN_CHECK(alpha >= 0 && alpha < 1, "RMSprop: alpha must be in [0, 1), got ", alpha);
  TCN_CHECK(eps >= 0 && weight_decay >= 0, "RMSprop: eps and weight decay must be >= 0");
  for (const Tensor& p : params_) v_.push_back(zeros(p.shape(), p.options()));
}

void RMSprop::step(const Tensor& gate) {
  autograd::NoGrad ng;
  const profile::PhaseScope phase(profile::Phase::Optimizer);
  const profile::Op range("rmsprop_step");
  if (gate_closed_on_host(gate, params_)) return;
  std::vector<cuda::RmspropParam> on_gpu;  // updated together, one launch per 32
  auto flush = [&](const std::vector<cuda::RmspropParam>& batch) {
    TCN_CUDA_OP("RMSprop",
                cuda::rmsprop_update_many(batch, device_lr(batch.front().p.device()), alpha, eps, weight_decay, gate));
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    profile::add_bytes(nbytes(p) * 5);  // w, v read and written, g read
    if (p.device().is_cuda()) {
      add_to_batch(on_gpu, cuda::RmspropParam{p, g.contiguous(), v_[i]}, flush);
      continue;
    }
    for_each_element(p, [&]<class T>(int64_t n) {
      T* w = p.data<T>();
      const T* gr = g.data<T>();
      T* v = v_[i].data<T>();
      // 1 - alpha in double, then rounded, as PyTorch (and Adam above).
      const T a = T(alpha), c = T(1 - alpha), wd = T(weight_decay), lr_t = T(lr), e = T(eps);
      for (int64_t k = 0; k < n; ++k) {
        T d = gr[k] + wd * w[k];
        v[k] = a * v[k] + c * (d * d);
        w[k] -= lr_t * d / (std::sqrt(v[k]) + e);
      }
    });
  }
  if (!on_gpu.empty()) flush(on_gpu);
}

NamedTensors RMSprop::state() const {
  NamedTensors s;
  for (size_t i = 0; i < v_.size(); ++i) s.emplace_back("square_avg." + std::to_string(i), v_[i]);
  return s;
}

// ---- clipping -----------------------------------------------------------------------------
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  TCN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  autograd::NoGrad ng;
  const profile::PhaseScope phase(profile::Phase::Optimizer);
  const profile::Op range("clip_grad_norm");
  // On a GPU, when the gradients allow it (contiguous, one dtype and device):
  // a few multi-tensor launches instead of four per gradient.
  std::vector<Tensor> grads;
  bool fused = true;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor& first = grads.empty() ? g : grads.front();
    fused = fused && g.device().is_cuda() && g.is_contiguous() && g.dtype() == first.dtype() &&
            g.device() == first.device();
    grads.push_back(g);
  }
  if (fused && !grads.empty()) {
    Tensor norm = empty({}, grads.front().options());
    TCN_CUDA_OP("clip_grad_norm", cuda::clip_grad_norm(grads, max_norm, norm));
    return norm;
  }
  Tensor sq;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor s = sum(mul(g, g));
    sq = sq.defined() ? add(sq, s) : s;
  }
  if (!sq.defined()) return scalar_tensor(0.0);
  Tensor norm = sqrt(sq);
  Tensor coef = minimum(mul(pow(add(norm, 1e-6), -1.0), max_norm), 1.0);  // stays on the device
  for (const Tensor& p : params)
    if (p.grad().defined()) mul_(p.grad(), coef);
  return norm;
}

}  // namespace tcn::nn

namespace tcn::nn {

// ---- LossWatch ----------------------------------------------------------------------------
LossWatch::LossWatch(Device device) : w_(zeros({5}, {DType::F64, device})) {
  fill_(w_.narrow(0, 0, 1), 1.0);
  ok_ = w_.narrow(0, 0, 1).squeeze(0);
}

void LossWatch::add(const Tensor& loss, int64_t step) {
  const profile::PhaseScope phase(profile::Phase::Optimizer);  // it gates the update
  const profile::Op range("loss_watch");
  TCN_CHECK(loss.defined() && loss.numel() == 1 && is_floating(loss.dtype()), "LossWatch: the loss must be a float scalar");
  TCN_CHECK(loss.device() == w_.device(), "LossWatch: the loss is on ", loss.device(), ", the watch on ", w_.device());
  if (StepGraph* g = StepGraph::capturing()) {
    TCN_CHECK(step == next_step_, "LossWatch: a captured add must follow on from the last eager one (step ", step,
              ", expected ", next_step_, ")");
    g->after_replay([this] {  // the replay added a loss
      ++added_;
      ++next_step_;
    });
  } else {
    if (step != next_step_) fill_(w_.narrow(0, 4, 1), static_cast<double>(step - 1));
    ++added_;
    next_step_ = step + 1;
  }
  if (w_.device().is_cuda()) {
    TCN_CUDA_OP("LossWatch", cuda::watch_loss(w_, loss.detach().contiguous()));
    return;
  }
  double* w = w_.data<double>();  // the kernel's logic, on the host
  const double l = loss.item();
  w[4] += 1;
  if (w[0] == 0.0) return;
  if (std::isfinite(l)) {
    w[3] += l;
  } else {
    w[0] = 0.0;
    w[1] = w[4];
    w[2] = l;
  }
}

LossWatch::Reading LossWatch::read() {
  const std::vector<double> h = w_.to(Device::cpu()).to_vector<double>();  // on a GPU: the one host wait
  Reading r;
  r.loss_sum = h[3];
  r.losses = added_;
  r.bad_step = h[0] == 0.0 ? static_cast<int64_t>(h[1]) : -1;
  r.bad_loss = h[2];
  added_ = 0;
  fill_(w_.narrow(0, 3, 1), 0.0);  // the sum starts again (queued on a GPU: no wait)
  return r;
}

}  // namespace tcn::nn
