// The temporal convolutional network as a configurable layer: nn::TCN takes the
// options of pytorch-tcn's TCN class (github.com/paul-krug/pytorch-tcn, 1.2.x),
// the superset of keras-tcn's, under the same names, and its parameters and
// buffers carry pytorch-tcn's state_dict names. locuslab's network (the char-LM's
// and the synthetic tasks') is one configuration of it: TemporalConvNet.
//
// One level (TemporalBlock), on channels-last [B, T, C]:
//
//   h   = conv1(x)                          causal: left zero padding (k-1)*d;
//                                           else (k-1)*d//2 left, the rest right
//   h   = norm1(h)                          batch_norm / layer_norm (weight_norm
//                                           lives in the convs' parameters)
//   h   = h + proj1(e)   or  proj2([h, proj1(e)])   conditioning embeddings e
//   h   = dropout1(use_gate ? glu(h) : act(h))      glu: a * sigmoid(b), 2C -> C
//   out = dropout2(act(norm2(conv2(h))))
//   y   = act(out + res),  res = x, or downsample(x) (1x1) when widths differ
//
// With use_skip_connections the network's output is act(sum of every level's
// `out`, projected 1x1 to the last width where needed, with the last level's y
// in place of its out). Then an optional 1x1 output projection and activation.
//
// Differences from pytorch-tcn (docs/tcn.md has the whole option table):
// time-varying embeddings follow input_shape ([B, E, T] in NCL, [B, T, E] in
// NLC; pytorch-tcn takes [B, E, T] always); streaming state is not a module
// buffer but a TCN::Stream object, any batch size; output_activation has no
// softmax / log_softmax; "normal_0.01" is an extra kernel_initializer (locuslab's
// init_weights, which pytorch-tcn offers as BaseTCN.init_weights()).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace tcn::nn {

// The activations of pytorch-tcn's activation_fn (torch.nn defaults:
// leaky_relu slope 0.01, elu alpha 1, gelu the exact erf form).
enum class Activation { relu, tanh, leaky_relu, sigmoid, elu, gelu, selu };
Activation activation_from_name(const std::string& name);  // tcn::Error listing the names otherwise
const char* activation_name(Activation a);
Tensor activate(Activation a, const Tensor& x);

struct TCNOptions {
  int64_t num_inputs = 0;
  std::vector<int64_t> num_channels;  // one width per level
  int64_t kernel_size = 4;
  std::vector<int64_t> dilations;     // one per level; empty: 2^i, restarting at 1 after dilation_reset
  int64_t dilation_reset = 0;         // 0: never (else the largest dilation, a power of two)
  double dropout = 0.1;
  bool causal = true;
  std::string use_norm = "weight_norm";  // weight_norm, batch_norm, layer_norm or none
  std::string activation = "relu";
  // xavier_uniform, xavier_normal (gain of the activation), kaiming_uniform,
  // kaiming_normal (fan_in; not with gelu or elu), normal (N(0, 1)), uniform
  // (U(0, 1)), normal_0.01 (locuslab). Applied to conv1 and conv2 unless they are
  // weight-normed (as in pytorch-tcn, where it has no effect on them then), to
  // the downsample and to the skip projections; biases keep PyTorch's default.
  std::string kernel_initializer = "xavier_uniform";
  bool use_skip_connections = false;
  std::string input_shape = "NCL";     // NCL ([B, C, T]) or NLC ([B, T, C])
  std::vector<int64_t> embedding_dims; // conditioning embeddings (pytorch-tcn's embedding_shapes[i][0])
  std::string embedding_mode = "add";  // add or concat
  bool use_gate = false;
  int64_t output_projection = 0;       // 0: none
  std::string output_activation;       // "": none

  // pytorch-tcn's keyword arguments as a JSON object (missing keys keep the
  // defaults above; null where pytorch-tcn allows None); unknown keys are an error.
  static TCNOptions from_json(const nlohmann::json& j);
  // Parses the text of such an object (a --tcn flag, a file's kwargs): invalid JSON, or a key that
  // appears twice in any object, is an error that starts with `what`.
  static nlohmann::json parse(const std::string& text, const std::string& what);
  nlohmann::json to_json() const;
  // Every field checked, with an error naming it and the allowed values.
  void validate() const;
  std::vector<int64_t> level_dilations() const;  // the dilation schedule in effect
};

class TemporalBlock : public Module {
 public:
  struct Options {
    int64_t in = 0, out = 0, kernel = 2, dilation = 1;
    double dropout = 0.0;
    bool causal = true;
    std::string use_norm = "weight_norm";
    Activation activation = Activation::relu;
    std::string kernel_initializer = "normal_0.01";
    int64_t embedding_channels = 0;  // summed embedding widths (0: none)
    bool embedding_concat = false;
    bool use_gate = false;
  };
  TemporalBlock(const Options& o, Generator& init, Generator& drop);
  // locuslab's block: weight-normed causal convs, ReLU, downsample init N(0, 0.01).
  TemporalBlock(int64_t in, int64_t out, int64_t kernel, int64_t dilation, double dropout, Generator& init,
                Generator& drop);

  struct Output {
    Tensor y;    // the block's output
    Tensor out;  // dropout2(act(norm2(conv2(.)))): the skip connection (set only when asked for)
  };
  Tensor forward(const Tensor& x) const { return forward(x, Tensor(), 0, 0, false).y; }
  // x holds positions [x_start, T) of a sequence (x_start > 0: a suffix, whose
  // first positions lack their history); returns the outputs for positions
  // [out_start, T), which must have their full receptive field inside x:
  // out_start == 0 when x_start == 0, else out_start >= x_start + 2 * span().
  // A suffix needs causal convs and no batch norm (TCN::forward sees to it).
  // e: the concatenated embeddings over the whole sequence, [B, 1, E] or
  // [B, T, E] (undefined: none).
  Output forward(const Tensor& x, const Tensor& e, int64_t x_start, int64_t out_start, bool want_skip) const;
  int64_t span() const { return (conv1->kernel_size - 1) * conv1->opts.dilation; }  // history one conv reads

  Options opts;
  std::shared_ptr<Conv1d> conv1, conv2, downsample;  // downsample is null when in == out
  // "norm1", "norm2": one of the two kinds, or neither (weight_norm, none).
  std::shared_ptr<BatchNorm1d> batch_norm1, batch_norm2;
  std::shared_ptr<LayerNorm> layer_norm1, layer_norm2;
  std::shared_ptr<Conv1d> embedding_projection_1, embedding_projection_2;  // with embeddings only
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  friend class TCN;  // its streaming step runs the convs itself, then these
  // conv1's output -> conv2's input: norm1, embeddings, gate or activation, dropout1.
  Tensor after_conv1(const Tensor& h, const Tensor& e) const;
  // conv2's output and the residual -> the block's output: norm2, activation,
  // dropout2, then act(out + res).
  Output after_conv2(const Tensor& y, const Tensor& res, bool want_skip) const;
};

class TCN : public Module {
 public:
  // init draws the weights, drop the dropout masks (a Philox stream each).
  TCN(const TCNOptions& o, Generator& init, Generator& drop);

  // x [B, C, T] (NCL) or [B, T, C] (NLC) -> the same layout with the output
  // width. embeddings: one per embedding_dims entry, [B, E] (constant over time)
  // or time-varying ([B, E, T] in NCL, [B, T, E] in NLC). keep_last > 0 returns
  // only the last keep_last positions, and computes only what they depend on
  // when the network is causal without batch norm.
  Tensor forward(const Tensor& x, const TensorList& embeddings = {}, int64_t keep_last = 0) const;

  // Streaming inference (causal networks, eval mode): feed a sequence chunk by
  // chunk, getting for each chunk what forward() gives for those positions of
  // the whole sequence. Each conv keeps its last (k-1)*d inputs per batch row.
  // The convs' weights are read at a stream's first step (after a reset): change
  // the weights, and reset the stream.
  class Stream {
   public:
    void reset() {  // the next chunk starts a new sequence
      history_.clear();
      weights_.clear();
      position_ = 0;
    }
    int64_t position() const { return position_; }  // steps fed since the last reset

   private:
    friend class TCN;
    std::vector<Tensor> history_;  // per conv [B, (k-1)*d, C_in], in forward order
    std::vector<Tensor> weights_;  // per conv [C_out, k * C_in]
    int64_t position_ = 0;
  };
  Stream stream() const;
  // x_t [B, C] (one step) or a chunk ([B, C, L] in NCL, [B, L, C] in NLC) ->
  // the outputs for those steps, in the same form.
  Tensor step(Stream& s, const Tensor& x_t, const TensorList& embeddings = {}) const;

  int64_t receptive_field() const;  // 1 + sum of 2 * span over the levels
  int64_t output_channels() const;
  const TCNOptions& options() const { return opts_; }

  std::shared_ptr<ModuleList<Conv1d>> downsample_skip_connection;  // null entries where widths agree
  std::shared_ptr<ModuleList<TemporalBlock>> network;
  std::shared_ptr<Conv1d> projection_out;

 private:
  // h: the last level's channels-last output; skip_sum: the skip connections'
  // sum (undefined: none) -> the output after the projection and activation.
  Tensor finish(const Tensor& h, const Tensor& skip_sum) const;
  // The embeddings as one channels-last [B, 1 or T, sum E] tensor (undefined: none).
  Tensor concat_embeddings(const TensorList& embeddings, int64_t T) const;
  Tensor to_channels_last(const Tensor& x, const char* what) const;
  Tensor from_channels_last(const Tensor& y) const;
  TCNOptions opts_;
  Activation act_;                         // the blocks' activation
  std::optional<Activation> output_act_;   // opts_.output_activation (none: identity)
};

// locuslab's TemporalConvNet (TCN/tcn.py): blocks of weight-normed causal convs
// with ReLU and dilation 2^i, channels-last; children "network.0", "network.1", ...
class TemporalConvNet : public TCN {
 public:
  TemporalConvNet(int64_t inputs, const std::vector<int64_t>& channels, int64_t kernel, double dropout,
                  Generator& init, Generator& drop);
  // Its configuration: weight_norm, relu, causal, NLC, the downsample drawn N(0, 0.01).
  static TCNOptions options(int64_t inputs, const std::vector<int64_t>& channels, int64_t kernel, double dropout);
  // x [B, T, C] -> the outputs of the last `keep_last` positions (all when
  // keep_last <= 0 or >= T). Only what those outputs depend on is computed:
  // each level reads 2 * span fewer positions than the one below it needs.
  Tensor forward(const Tensor& x, int64_t keep_last = 0) const { return TCN::forward(x, {}, keep_last); }
};

}  // namespace tcn::nn
