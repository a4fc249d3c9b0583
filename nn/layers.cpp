#include "nn/layers.h"

#include "core/backends.h"

#include <cmath>

namespace tcn::nn {

namespace {
// Fills a fresh (not yet registered) tensor; no tape involved.
Tensor uniform_init(const Shape& shape, double bound, Generator& gen) {
  Tensor t = empty(shape);
  uniform_(t, -bound, bound, gen);
  return t;
}
}  // namespace

Tensor norm_except_dim0(const Tensor& v) {
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < v.dim(); ++d) dims.push_back(d);
  return sqrt(sum(mul(v, v), dims, true));
}

// ---- Embedding ----------------------------------------------------------------
Embedding::Embedding(int64_t num, int64_t dim, Generator& gen) {
  TCN_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  Tensor w = empty({num, dim});
  normal_(w, 0.0, 1.0, gen);
  weight = register_parameter("weight", w);
}

// ---- Linear ---------------------------------------------------------------------
Linear::Linear(int64_t in, int64_t out, Generator& gen, Options opts) {
  TCN_CHECK(in > 0 && out > 0, "Linear: sizes must be positive, got ", in, " -> ", out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  if (opts.tied.defined()) {
    TCN_CHECK(opts.tied.shape() == Shape({out, in}), "Linear: tied weight has shape ", opts.tied.shape(),
              ", expected [", out, ", ", in, "]");
    TCN_CHECK(!opts.weight_norm, "Linear: a tied weight cannot also be weight-normed");
    weight = opts.tied;
    register_shared_parameter("weight", weight);
  } else if (opts.weight_norm) {
    Tensor v = uniform_init({out, in}, bound, gen);
    weight_g = register_parameter("weight_g", norm_except_dim0(v));
    weight_v = register_parameter("weight_v", v);
  } else {
    weight = register_parameter("weight", uniform_init({out, in}, bound, gen));
  }
  if (opts.bias) bias = register_parameter("bias", uniform_init({out}, bound, gen));
}

Tensor Linear::effective_weight() const { return weight_v.defined() ? weight_norm(weight_v, weight_g) : weight; }

Tensor Linear::forward(const Tensor& x) const {
  const auto scope = profile_scope();
  TCN_CHECK(x.dim() >= 1 && x.size(-1) == (weight_v.defined() ? weight_v : weight).size(1), "Linear: input ",
            x.shape(), " does not end in ", (weight_v.defined() ? weight_v : weight).size(1), " features");
  Tensor y = matmul(x, effective_weight().t());
  return bias.defined() ? add(y, bias) : y;
}

// ---- Conv1d ---------------------------------------------------------------------
Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, Generator& gen, Options o)
    : in_channels(in), out_channels(out), kernel_size(kernel), opts(o) {
  TCN_CHECK(in > 0 && out > 0 && kernel > 0, "Conv1d: sizes must be positive, got in ", in, ", out ", out,
            ", kernel ", kernel);
  TCN_CHECK(o.dilation >= 1, "Conv1d: dilation must be >= 1, got ", o.dilation);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel));
  Tensor w = uniform_init({out, in, kernel}, bound, gen);
  if (o.weight_norm) {
    weight_g = register_parameter("weight_g", norm_except_dim0(w));
    weight_v = register_parameter("weight_v", w);
  } else {
    weight = register_parameter("weight", w);
  }
  if (o.bias) bias = register_parameter("bias", uniform_init({out}, bound, gen));
}

int64_t Conv1d::left_pad() const {
  int64_t span = (kernel_size - 1) * opts.dilation;
  return opts.causal ? span : span / 2;
}

Tensor Conv1d::effective_weight() const { return weight_v.defined() ? weight_norm(weight_v, weight_g) : weight; }

Tensor Conv1d::forward(const Tensor& x) const {
  const auto scope = profile_scope();
  return conv1d(x, effective_weight(), bias, opts.dilation, left_pad());
}

// ---- LSTM -----------------------------------------------------------------------
LSTM::LSTM(int64_t input, int64_t h, int64_t n, Generator& gen) : input_size(input), hidden(h), layers(n) {
  TCN_CHECK(input > 0 && h > 0 && n > 0, "LSTM: sizes must be positive, got input ", input, ", hidden ", h,
            ", layers ", n);
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  for (int64_t k = 0; k < n; ++k) {
    const std::string s = std::to_string(k);
    const int64_t in = k == 0 ? input : h;
    weight_ih.push_back(register_parameter("weight_ih_l" + s, uniform_init({4 * h, in}, bound, gen)));
    weight_hh.push_back(register_parameter("weight_hh_l" + s, uniform_init({4 * h, h}, bound, gen)));
    bias_ih.push_back(register_parameter("bias_ih_l" + s, uniform_init({4 * h}, bound, gen)));
    bias_hh.push_back(register_parameter("bias_hh_l" + s, uniform_init({4 * h}, bound, gen)));
  }
}

std::pair<Tensor, LSTM::State> LSTM::forward(const Tensor& x, const std::optional<State>& state) const {
  const auto scope = profile_scope();
  TCN_CHECK(x.dim() == 3 && x.size(2) == input_size, "LSTM: input must be [batch, time, ", input_size, "], got ",
            x.shape());
  const int64_t B = x.size(0), T = x.size(1);
  TCN_CHECK(T > 0, "LSTM: empty sequence");
  if (state) {
    Shape want{layers, B, hidden};
    TCN_CHECK(state->h.shape() == want && state->c.shape() == want, "LSTM: initial state must be ", want,
              ", got h ", state->h.shape(), " and c ", state->c.shape());
  }
  // On CUDA float32 tensors, --lstm_impl cudnn runs each layer on cuDNN
  // (core/backends.h); everything else takes our fused layer.
  const bool use_cudnn = x.device().is_cuda() && cuda_backends().lstm == LstmImpl::Cudnn;
  Tensor input = x;
  TensorList h_n, c_n;
  for (int64_t k = 0; k < layers; ++k) {
    Tensor h0 = state ? state->h.narrow(0, k, 1).squeeze(0) : zeros({B, hidden}, x.options());
    Tensor c0 = state ? state->c.narrow(0, k, 1).squeeze(0) : zeros({B, hidden}, x.options());
    Tensor out, h, c;
    if (use_cudnn) {  // the whole layer, projection included, in cuDNN's RNN calls
      std::tie(out, h, c) = lstm_layer_cudnn(input, weight_ih[k], weight_hh[k], bias_ih[k], bias_hh[k], h0, c0);
    } else {
      // All time steps' input projections in one GEMM: [B, T, 4H].
      Tensor xp = add(matmul(input, weight_ih[k].t()), add(bias_ih[k], bias_hh[k]));
      std::tie(out, h, c) = lstm_layer(xp, weight_hh[k], h0, c0);  // the recurrence, fused
    }
    input = out;
    h_n.push_back(h);
    c_n.push_back(c);
  }
  return {input, State{stack(h_n, 0), stack(c_n, 0)}};
}

}  // namespace tcn::nn
