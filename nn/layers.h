// The layers. Sequences are channels-last, [batch, time, channels], from the
// embedding to the decoder; weights keep PyTorch's layouts and names.
#pragma once

#include <optional>

#include "nn/module.h"

namespace tcn::nn {

// PyTorch's weight_norm over dim 0 is tcn::weight_norm (ops/weight_norm.cpp):
// w = g * v / ||v||, the norm over all dims but the first, per output channel.
// The g that makes weight_norm(v, g) == v: ||v|| per output channel, keepdim.
Tensor norm_except_dim0(const Tensor& v);

// Lookup table [num, dim]; input int64 indices of any shape -> [..., dim].
// Init N(0, 1) as PyTorch. Backward scatter-adds (duplicates accumulate).
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen);
  Tensor forward(const Tensor& idx) const {
    const auto scope = profile_scope();
    return gather_rows(weight, idx);
  }
  Tensor weight;
};

// y = x W^T + b over the last dim of any-rank x. W [out, in] as in PyTorch.
// With `tied`, W is that existing parameter (e.g. an Embedding's weight) and
// is not re-initialised. With weight_norm, the parameters are weight_g [out, 1]
// and weight_v [out, in] instead of weight.
class Linear : public Module {
 public:
  struct Options {
    bool bias = true;
    bool weight_norm = false;
    Tensor tied;  // share this [out, in] parameter as the weight
  };
  Linear(int64_t in, int64_t out, Generator& gen) : Linear(in, out, gen, Options{}) {}
  Linear(int64_t in, int64_t out, Generator& gen, Options opts);
  Tensor forward(const Tensor& x) const;
  Tensor effective_weight() const;
  Tensor weight, weight_g, weight_v, bias;
};

// 1-D convolution over [B, T, Cin] -> [B, T, Cout], stride 1, any kernel size
// and dilation. causal=true is exactly PyTorch's Conv1d(padding=(k-1)*d) followed
// by the chomp of the last (k-1)*d steps (left zero padding, no wasted outputs,
// no copy); causal=false pads symmetrically ('same' for odd k). Weight
// [Cout, Cin, K]; with weight_norm: weight_g [Cout, 1, 1] and weight_v.
// Init as PyTorch: U(-1/sqrt(Cin*K), +) for weight and bias, g = ||v||.
class Conv1d : public Module {
 public:
  struct Options {
    int64_t dilation = 1;
    bool causal = true;
    bool bias = true;
    bool weight_norm = false;
  };
  Conv1d(int64_t in, int64_t out, int64_t kernel, Generator& gen) : Conv1d(in, out, kernel, gen, Options{}) {}
  Conv1d(int64_t in, int64_t out, int64_t kernel, Generator& gen, Options opts);
  Tensor forward(const Tensor& x) const;
  Tensor effective_weight() const;
  int64_t left_pad() const;
  Tensor weight, weight_g, weight_v, bias;
  int64_t in_channels, out_channels, kernel_size;
  Options opts;
};

// Inverted dropout in training mode, identity in eval mode. Masks come from
// `gen` (a Philox stream), so a seed fixes them.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen) : p(p), gen_(&gen) {
    TCN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
  }
  Tensor forward(const Tensor& x) const {
    const auto scope = profile_scope();
    return is_training() && p > 0 ? dropout(x, p, *gen_) : x;
  }
  // forward(relu(x)), with the two fused in training mode.
  Tensor forward_relu(const Tensor& x) const {
    const auto scope = profile_scope();
    return is_training() && p > 0 ? relu_dropout(x, p, *gen_) : relu(x);
  }
  // relu(forward(relu(x)) + res): a residual block's tail, the three fused in training mode.
  Tensor forward_relu_add_relu(const Tensor& x, const Tensor& res) const {
    const auto scope = profile_scope();
    return is_training() && p > 0 ? relu_dropout_add_relu(x, res, p, *gen_) : add_relu(relu(x), res);
  }
  double p;

 private:
  Generator* gen_;
};

// Layer norm over the channels (the last dim), as torch.nn.LayerNorm(C): the
// fused layer_norm op with parameters weight [C] (ones) and bias [C] (zeros).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t channels, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

// Batch norm per channel, as torch.nn.BatchNorm1d(C), over every dim but the
// last (channels-last: [B, T, C] or [B, C]). Training: the batch's mean and
// biased variance normalise, and the running statistics move by `momentum`
// (the unbiased variance, as PyTorch); eval: the running statistics normalise.
// Parameters weight, bias [C]; buffers running_mean, running_var [C] and
// num_batches_tracked (int64), saved in checkpoints under PyTorch's names.
// Composed from ops (mean, sub, mul, sqrt, div): its backward is autograd's.
class BatchNorm1d : public Module {
 public:
  struct Options {
    double eps = 1e-5;
    double momentum = 0.1;
    bool affine = true;
    bool track_running_stats = true;
  };
  explicit BatchNorm1d(int64_t channels) : BatchNorm1d(channels, Options{}) {}
  BatchNorm1d(int64_t channels, Options opts);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t channels;
  Options opts;
};

// Multi-layer LSTM, batch-first, PyTorch's gate order (i, f, g, o) and names
// weight_ih_l{k} [4H, in], weight_hh_l{k} [4H, H], bias_ih_l{k}, bias_hh_l{k}.
// The input projection of all time steps is one GEMM per layer; the recurrence
// is the fused lstm_layer op (one GEMM and one cell per step; the recurrent
// weight gradient is one GEMM over all steps). Init U(-1/sqrt(H), 1/sqrt(H)).
class LSTM : public Module {
 public:
  struct State {
    Tensor h, c;  // [layers, B, H]
  };
  LSTM(int64_t input_size, int64_t hidden, int64_t layers, Generator& gen);
  // x [B, T, input] -> output [B, T, H] and the final state.
  std::pair<Tensor, State> forward(const Tensor& x, const std::optional<State>& state = std::nullopt) const;
  int64_t input_size, hidden, layers;
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;
};

// Children named "0", "1", ... (PyTorch's nn.Sequential / ModuleList names).
// A null entry keeps its index and registers nothing (PyTorch's ModuleList
// holding None, as pytorch-tcn's skip projections do where widths agree).
template <class M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    if (m) register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  const std::vector<std::shared_ptr<M>>& items() const { return items_; }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace tcn::nn
