#include "nn/tcn.h"

#include <algorithm>
#include <cmath>

namespace tcn::nn {

// ---- initializers ---------------------------------------------------------------
namespace {

// torch.nn.init.calculate_gain; leaky_relu's slope as the caller passes it.
double gain_of(Activation a, double leaky_slope) {
  switch (a) {
    case Activation::relu: return std::sqrt(2.0);
    case Activation::tanh: return 5.0 / 3.0;
    case Activation::leaky_relu: return std::sqrt(2.0 / (1.0 + leaky_slope * leaky_slope));
    case Activation::selu: return 0.75;
    case Activation::sigmoid: return 1.0;
    case Activation::elu:
    case Activation::gelu: return std::sqrt(2.0);  // pytorch-tcn's choice (with a warning) for xavier
  }
  return 1.0;
}

// pytorch-tcn's kernel_initializer on a conv weight [out, in, k] (under NoGrad).
void init_kernel(const Tensor& w, const std::string& name, Activation act, Generator& gen) {
  const double k = static_cast<double>(w.size(2));
  const double fan_in = static_cast<double>(w.size(1)) * k, fan_out = static_cast<double>(w.size(0)) * k;
  if (name == "normal_0.01") return normal_(w, 0.0, 0.01, gen);
  if (name == "normal") return normal_(w, 0.0, 1.0, gen);
  if (name == "uniform") return uniform_(w, 0.0, 1.0, gen);
  if (name == "xavier_uniform" || name == "xavier_normal") {
    // calculate_gain('leaky_relu') with no slope uses 0.01.
    const double gain = gain_of(act, 0.01);
    if (name == "xavier_normal") return normal_(w, 0.0, gain * std::sqrt(2.0 / (fan_in + fan_out)), gen);
    const double a = gain * std::sqrt(6.0 / (fan_in + fan_out));
    return uniform_(w, -a, a, gen);
  }
  // kaiming_*(nonlinearity=activation) with a = 0: leaky_relu's gain is sqrt(2).
  const double gain = gain_of(act, 0.0);
  if (name == "kaiming_normal") return normal_(w, 0.0, gain / std::sqrt(fan_in), gen);
  const double bound = gain * std::sqrt(3.0 / fan_in);
  uniform_(w, -bound, bound, gen);
}

}  // namespace

// ---- one level ----------------------------------------------------------------------
TemporalBlock::TemporalBlock(const Options& o, Generator& init, Generator& drop) : opts(o) {
  const bool wn = o.use_norm == "weight_norm";
  const int64_t width1 = o.use_gate ? 2 * o.out : o.out;  // the gate halves conv1's output
  conv1 = register_module("conv1", std::make_shared<Conv1d>(o.in, width1, o.kernel, init,
                                                            Conv1d::Options{.dilation = o.dilation,
                                                                            .causal = o.causal,
                                                                            .weight_norm = wn}));
  conv2 = register_module("conv2", std::make_shared<Conv1d>(o.out, o.out, o.kernel, init,
                                                            Conv1d::Options{.dilation = o.dilation,
                                                                            .causal = o.causal,
                                                                            .weight_norm = wn}));
  if (o.use_norm == "batch_norm") {
    batch_norm1 = register_module("norm1", std::make_shared<BatchNorm1d>(width1));
    batch_norm2 = register_module("norm2", std::make_shared<BatchNorm1d>(o.out));
  } else if (o.use_norm == "layer_norm") {
    layer_norm1 = register_module("norm1", std::make_shared<LayerNorm>(width1));
    layer_norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.out));
  }
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout, drop));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout, drop));
  if (o.in != o.out) downsample = register_module("downsample", std::make_shared<Conv1d>(o.in, o.out, 1, init));
  if (o.embedding_channels > 0) {
    embedding_projection_1 = register_module(
        "embedding_projection_1", std::make_shared<Conv1d>(o.embedding_channels, width1, 1, init));
    // pytorch-tcn creates the concat projection in both modes.
    embedding_projection_2 =
        register_module("embedding_projection_2", std::make_shared<Conv1d>(2 * width1, width1, 1, init));
  }
  autograd::NoGrad ng;
  if (!wn) {  // a weight-normed conv's weight is g * v / ||v||: pytorch-tcn's init of it has no effect
    init_kernel(conv1->weight, o.kernel_initializer, o.activation, init);
    init_kernel(conv2->weight, o.kernel_initializer, o.activation, init);
  }
  if (downsample) init_kernel(downsample->weight, o.kernel_initializer, o.activation, init);
}

TemporalBlock::TemporalBlock(int64_t in, int64_t out, int64_t kernel, int64_t dilation, double p, Generator& init,
                             Generator& drop)
    : TemporalBlock(Options{.in = in, .out = out, .kernel = kernel, .dilation = dilation, .dropout = p}, init, drop) {}

Tensor TemporalBlock::after_conv1(const Tensor& c1, const Tensor& e) const {
  Tensor h = batch_norm1 ? batch_norm1->forward(c1) : layer_norm1 ? layer_norm1->forward(c1) : c1;
  if (e.defined()) {
    const Tensor pe = embedding_projection_1->forward(e);  // [B, 1 or T, width1]
    h = opts.embedding_concat ? embedding_projection_2->forward(cat({h, expand(pe, h.shape())}, -1)) : add(h, pe);
  }
  if (opts.use_gate) return dropout1->forward(glu(h));
  if (opts.activation == Activation::relu) return dropout1->forward_relu(h);  // fused in training
  return dropout1->forward(activate(opts.activation, h));
}

TemporalBlock::Output TemporalBlock::after_conv2(const Tensor& y2, const Tensor& res, bool want_skip) const {
  const Tensor y = batch_norm2 ? batch_norm2->forward(y2) : layer_norm2 ? layer_norm2->forward(y2) : y2;
  if (opts.activation == Activation::relu) {
    if (!want_skip) return {dropout2->forward_relu_add_relu(y, res), Tensor()};  // the three fused in training
    Tensor out = dropout2->forward_relu(y);
    return {add_relu(out, res), out};
  }
  Tensor out = dropout2->forward(activate(opts.activation, y));
  return {activate(opts.activation, add(out, res)), want_skip ? out : Tensor()};
}

TemporalBlock::Output TemporalBlock::forward(const Tensor& x, const Tensor& e, int64_t x_start, int64_t out_start,
                                             bool want_skip) const {
  const auto scope = profile_scope();
  const int64_t T = x_start + x.size(1), s = span();
  TCN_CHECK(x_start == 0 ? out_start >= 0 : out_start >= x_start + 2 * s, "TemporalBlock: outputs from ", out_start,
            " need inputs from ", std::max<int64_t>(0, out_start - 2 * s), ", x starts at ", x_start);
  // conv1 over x: its first s outputs lack history when x is a suffix; keep from mid.
  const int64_t mid = x_start == 0 ? std::max<int64_t>(0, out_start - s) : out_start - s;
  const Tensor em = e.defined() && e.size(1) > 1 ? e.narrow(1, mid, T - mid) : e;
  Tensor h = after_conv1(conv1->forward(x).narrow(1, mid - x_start, T - mid), em);
  Tensor y2 = conv2->forward(h).narrow(1, out_start - mid, T - out_start);
  Tensor xs = x.narrow(1, out_start - x_start, T - out_start);
  return after_conv2(y2, downsample ? downsample->forward(xs) : xs, want_skip);
}

// ---- the network ----------------------------------------------------------------------
TCN::TCN(const TCNOptions& o, Generator& init, Generator& drop) : opts_(o) {
  o.validate();
  act_ = activation_from_name(o.activation);
  if (!o.output_activation.empty()) output_act_ = activation_from_name(o.output_activation);
  const auto& ch = o.num_channels;
  const int64_t levels = static_cast<int64_t>(ch.size());
  // pytorch-tcn's order of creation (and of draws from `init`): skip projections, levels, output projection.
  if (o.use_skip_connections) {
    downsample_skip_connection = register_module("downsample_skip_connection", std::make_shared<ModuleList<Conv1d>>());
    for (int64_t i = 0; i < levels; ++i) {
      std::shared_ptr<Conv1d> p;
      if (ch[i] != ch.back()) {
        p = std::make_shared<Conv1d>(ch[i], ch.back(), 1, init);
        autograd::NoGrad ng;
        init_kernel(p->weight, o.kernel_initializer, act_, init);
      }
      downsample_skip_connection->push_back(p);
    }
  }
  int64_t embedding_channels = 0;
  for (int64_t e : o.embedding_dims) embedding_channels += e;
  const std::vector<int64_t> dil = o.level_dilations();
  network = register_module("network", std::make_shared<ModuleList<TemporalBlock>>());
  for (int64_t i = 0; i < levels; ++i) {
    network->push_back(std::make_shared<TemporalBlock>(
        TemporalBlock::Options{.in = i == 0 ? o.num_inputs : ch[i - 1],
                               .out = ch[i],
                               .kernel = o.kernel_size,
                               .dilation = dil[i],
                               .dropout = o.dropout,
                               .causal = o.causal,
                               .use_norm = o.use_norm,
                               .activation = act_,
                               .kernel_initializer = o.kernel_initializer,
                               .embedding_channels = embedding_channels,
                               .embedding_concat = o.embedding_mode == "concat",
                               .use_gate = o.use_gate},
        init, drop));
  }
  if (o.output_projection > 0)
    projection_out = register_module("projection_out", std::make_shared<Conv1d>(ch.back(), o.output_projection, 1, init));
}

int64_t TCN::receptive_field() const {
  int64_t r = 1;
  for (const auto& b : network->items()) r += 2 * b->span();
  return r;
}

int64_t TCN::output_channels() const {
  return opts_.output_projection > 0 ? opts_.output_projection : opts_.num_channels.back();
}

Tensor TCN::to_channels_last(const Tensor& x, const char* what) const {
  TCN_CHECK(x.dim() == 3, "TCN: ", what, " must be [batch, ", opts_.input_shape == "NCL" ? "channels, time" : "time, channels",
            "] (input_shape ", opts_.input_shape, "), got ", x.shape());
  return opts_.input_shape == "NCL" ? x.transpose(1, 2) : x;
}

Tensor TCN::from_channels_last(const Tensor& y) const { return opts_.input_shape == "NCL" ? y.transpose(1, 2) : y; }

Tensor TCN::concat_embeddings(const TensorList& embeddings, int64_t T) const {
  const auto& dims = opts_.embedding_dims;
  TCN_CHECK(embeddings.size() == dims.size(), "TCN: expected ", dims.size(), " embeddings (embedding_shapes), got ",
            embeddings.size());
  if (dims.empty()) return Tensor();
  TensorList parts;
  for (size_t i = 0; i < dims.size(); ++i) {
    const Tensor& e = embeddings[i];
    if (e.dim() == 2) {
      TCN_CHECK(e.size(1) == dims[i], "TCN: embedding ", i, " has shape ", e.shape(), ", expected [batch, ", dims[i],
                "]");
      parts.push_back(e.unsqueeze(1));  // constant over time: [B, 1, E]
    } else {
      Tensor el = to_channels_last(e, "a time-varying embedding");
      TCN_CHECK(el.size(2) == dims[i] && el.size(1) == T, "TCN: embedding ", i, " has shape ", e.shape(),
                ", expected ", dims[i], " channels over ", T, " steps (input_shape ", opts_.input_shape, ")");
      parts.push_back(el);
    }
  }
  // A mix of constant and time-varying embeddings: the constant ones repeat over time.
  int64_t len = 1;
  for (const auto& p : parts) len = std::max(len, p.size(1));
  for (auto& p : parts)
    if (p.size(1) != len) p = expand(p, {p.size(0), len, p.size(2)});
  return parts.size() == 1 ? parts[0] : cat(parts, -1);
}

Tensor TCN::finish(const Tensor& h, const Tensor& skip_sum) const {
  Tensor y = skip_sum.defined() ? activate(act_, skip_sum) : h;
  if (projection_out) y = projection_out->forward(y);
  if (output_act_) y = activate(*output_act_, y);
  return y;
}

Tensor TCN::forward(const Tensor& x_in, const TensorList& embeddings, int64_t keep_last) const {
  const auto scope = profile_scope();
  const Tensor x = to_channels_last(x_in, "input");
  TCN_CHECK(x.size(2) == opts_.num_inputs, "TCN: input has shape ", x_in.shape(), ", with ", x.size(2),
            " channels; expected num_inputs = ", opts_.num_inputs, " (input_shape ", opts_.input_shape, ")");
  const int64_t T = x.size(1);
  const Tensor e = concat_embeddings(embeddings, T);
  const auto& blocks = network->items();
  const size_t n = blocks.size();
  const int64_t keep = keep_last > 0 && keep_last < T ? keep_last : T;
  // Where each level's output must start, from the top down. Only a causal net
  // without batch norm (whose statistics span every position) can skip the rest.
  std::vector<int64_t> start(n + 1, 0);
  if (opts_.causal && opts_.use_norm != "batch_norm") {
    start[n] = T - keep;
    for (size_t i = n; i-- > 0;) start[i] = std::max<int64_t>(0, start[i + 1] - 2 * blocks[i]->span());
  }
  Tensor h = start[0] > 0 ? x.narrow(1, start[0], T - start[0]) : x;
  Tensor skip_sum;
  for (size_t i = 0; i < n; ++i) {
    const bool skip = opts_.use_skip_connections;
    TemporalBlock::Output o = blocks[i]->forward(h, e, start[i], start[i + 1], skip && i + 1 < n);
    h = o.y;
    if (!skip) continue;
    // The last level contributes its output; the others their `out`, projected to the last width.
    Tensor s = i + 1 < n ? o.out : o.y;
    if (const auto& p = downsample_skip_connection->items()[i]) s = p->forward(s);
    s = s.narrow(1, s.size(1) - (T - start[n]), T - start[n]);
    skip_sum = skip_sum.defined() ? add(skip_sum, s) : s;
  }
  Tensor y = finish(h, skip_sum);
  if (y.size(1) > keep) y = y.narrow(1, y.size(1) - keep, keep);
  return from_channels_last(y);
}

// ---- streaming --------------------------------------------------------------------------
namespace {
// One causal conv over a chunk x [B, L, Cin] given the `hist` [B, (k-1)*d, Cin]
// inputs before it: output t sums tap j's weights times input t - (k-1-j)*d.
// The k taps side by side make [B, L, k*Cin], one GEMM with the weight laid out
// [Cout, k*Cin] (`w`, made once per stream). hist moves on to the last (k-1)*d inputs.
Tensor conv_step(const Conv1d& conv, Tensor& hist, const Tensor& w, const Tensor& x) {
  const int64_t K = conv.kernel_size, d = conv.opts.dilation, L = x.size(1), span = (K - 1) * d;
  Tensor taps = x;
  if (span > 0) {
    const Tensor xx = cat({hist, x}, 1);  // [B, span + L, Cin]
    TensorList parts;
    for (int64_t j = 0; j < K; ++j) parts.push_back(xx.narrow(1, j * d, L));
    taps = cat(parts, -1);
    hist = xx.narrow(1, L, span).contiguous();
  }
  Tensor y = matmul(taps, w.t());
  return conv.bias.defined() ? add(y, conv.bias) : y;
}

// conv's weight as conv_step takes it: [Cout, Cin, K] -> [Cout, K * Cin].
Tensor step_weight(const Conv1d& conv) {
  const Tensor w = conv.effective_weight();
  return w.permute({0, 2, 1}).reshape({w.size(0), w.size(1) * w.size(2)}).contiguous();
}
}  // namespace

TCN::Stream TCN::stream() const {
  TCN_CHECK(opts_.causal, "TCN: streaming needs a causal network (causal = false reads future steps)");
  return Stream();
}

Tensor TCN::step(Stream& s, const Tensor& x_t, const TensorList& embeddings) const {
  const auto scope = profile_scope();
  TCN_CHECK(opts_.causal, "TCN: streaming needs a causal network (causal = false reads future steps)");
  TCN_CHECK(!is_training(), "TCN: streaming is inference: call eval() first (dropout and batch statistics "
            "would differ from a full forward)");
  autograd::NoGrad ng;
  const bool single = x_t.dim() == 2;
  const Tensor x = single ? x_t.unsqueeze(1) : to_channels_last(x_t, "a streamed chunk");
  TCN_CHECK(x.size(2) == opts_.num_inputs, "TCN: streamed input has shape ", x_t.shape(), ", expected ",
            opts_.num_inputs, " channels");
  const auto& blocks = network->items();
  const int64_t B = x.size(0), L = x.size(1);
  if (s.history_.empty()) {
    for (const auto& b : blocks)
      for (const auto* c : {b->conv1.get(), b->conv2.get()}) {
        s.history_.push_back(zeros({B, b->span(), c->in_channels}, {x.dtype(), x.device()}));
        s.weights_.push_back(step_weight(*c));
      }
  }
  TCN_CHECK(s.history_.size() == 2 * blocks.size() && s.history_[0].size(0) == B, "TCN: this stream holds ",
            s.history_.empty() ? 0 : s.history_[0].size(0), " sequences, the chunk ", B,
            " (reset() it to start over with another batch)");
  const Tensor e = concat_embeddings(embeddings, L);  // [B, E]: this chunk's, or constant
  Tensor h = x, skip_sum;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const TemporalBlock& b = *blocks[i];
    const bool skip = opts_.use_skip_connections;
    Tensor c1 = b.after_conv1(conv_step(*b.conv1, s.history_[2 * i], s.weights_[2 * i], h), e);
    Tensor y2 = conv_step(*b.conv2, s.history_[2 * i + 1], s.weights_[2 * i + 1], c1);
    TemporalBlock::Output o = b.after_conv2(y2, b.downsample ? b.downsample->forward(h) : h, skip && i + 1 < blocks.size());
    h = o.y;
    if (!skip) continue;
    Tensor sk = i + 1 < blocks.size() ? o.out : o.y;
    if (const auto& p = downsample_skip_connection->items()[i]) sk = p->forward(sk);
    skip_sum = skip_sum.defined() ? add(skip_sum, sk) : sk;
  }
  s.position_ += L;
  Tensor y = finish(h, skip_sum);
  return single ? y.squeeze(1) : from_channels_last(y);
}

// ---- locuslab's network ----------------------------------------------------------------
TCNOptions TemporalConvNet::options(int64_t inputs, const std::vector<int64_t>& channels, int64_t kernel,
                                    double dropout) {
  TCNOptions o;
  o.num_inputs = inputs;
  o.num_channels = channels;
  o.kernel_size = kernel;
  o.dropout = dropout;
  o.kernel_initializer = "normal_0.01";  // reaches only the downsample: the convs are weight-normed
  o.input_shape = "NLC";
  return o;
}

TemporalConvNet::TemporalConvNet(int64_t inputs, const std::vector<int64_t>& channels, int64_t kernel, double p,
                                 Generator& init, Generator& drop)
    : TCN(options(inputs, channels, kernel, p), init, drop) {}

}  // namespace tcn::nn
