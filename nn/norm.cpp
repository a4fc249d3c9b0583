// The normalisation layers: LayerNorm (the fused op) and BatchNorm1d (composed
// from ops, with running statistics kept as module buffers).
#include <numeric>

#include "nn/layers.h"

namespace tcn::nn {

LayerNorm::LayerNorm(int64_t channels, double eps) : eps(eps) {
  TCN_CHECK(channels > 0, "LayerNorm: channels must be positive, got ", channels);
  weight = register_parameter("weight", ones({channels}));
  bias = register_parameter("bias", zeros({channels}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  const auto scope = profile_scope();
  return layer_norm(x, weight, bias, eps);
}

BatchNorm1d::BatchNorm1d(int64_t channels, Options o) : channels(channels), opts(o) {
  TCN_CHECK(channels > 0, "BatchNorm1d: channels must be positive, got ", channels);
  TCN_CHECK(o.eps >= 0, "BatchNorm1d: eps must be >= 0, got ", o.eps);
  TCN_CHECK(o.momentum >= 0 && o.momentum <= 1, "BatchNorm1d: momentum must be in [0, 1], got ", o.momentum);
  if (o.affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({channels}));
    running_var = register_buffer("running_var", ones({channels}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {DType::I64}));
  }
}

Tensor BatchNorm1d::forward(const Tensor& x) const {
  const auto scope = profile_scope();
  TCN_CHECK(x.dim() >= 2 && x.size(-1) == channels, "BatchNorm1d: expected [batch, ..., ", channels,
            "] (channels last), got ", x.shape());
  std::vector<int64_t> dims(static_cast<size_t>(x.dim() - 1));
  std::iota(dims.begin(), dims.end(), 0);  // every dim but the channels
  const int64_t n = x.numel() / channels;  // values per channel
  Tensor y;
  if (is_training() || !opts.track_running_stats) {
    TCN_CHECK(n > 1, "BatchNorm1d: training needs more than one value per channel, got input ", x.shape());
    const Tensor mu = mean(x, dims);
    const Tensor centred = sub(x, mu);
    const Tensor var = mean(mul(centred, centred), dims);  // biased: what normalises, as PyTorch
    y = div(centred, sqrt(add(var, opts.eps)));
    if (is_training() && opts.track_running_stats) {
      autograd::NoGrad ng;
      const double m = opts.momentum;
      mul_(running_mean, 1.0 - m);
      add_(running_mean, mu.detach(), m);
      mul_(running_var, 1.0 - m);
      add_(running_var, var.detach(), m * static_cast<double>(n) / static_cast<double>(n - 1));  // unbiased
      // + 1 on the device, without a host round trip.
      copy_(num_batches_tracked, add(num_batches_tracked.to(DType::F64), 1.0).to(DType::I64));
    }
  } else {
    y = div(sub(x, running_mean), sqrt(add(running_var, opts.eps)));
  }
  return opts.affine ? add(mul(y, weight), bias) : y;
}

}  // namespace tcn::nn
