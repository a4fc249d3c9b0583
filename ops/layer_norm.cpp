// Layer normalisation over the last dim (torch.nn.functional.layer_norm with
// normalized_shape = [C]): for each row x of C values,
//     y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps),
// var the biased variance (divided by C), gamma and beta [C] optional. In a
// channels-last [B, L, C] activation a row is one time step: the norm is over
// channels, as a TCN's layer norm needs. One pass per row each way, on the CPU
// and in one kernel each on a GPU; mean and rstd are kept (float64) for backward.
//
// Backward, per row, with xhat = (x - mean) rstd and dxhat = dy * gamma:
//     dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
//     dgamma = sum over rows of dy xhat,   dbeta = sum over rows of dy
// The two column sums are ops (sum over the rows) on xhat, which the row pass writes.
#include <cmath>

#include "tcn/cuda/kernels.h"
#include "tcn/ops/dispatch.h"
#include "tcn/ops/ops.h"

namespace tcn {

namespace {

template <class T>
void layer_norm_forward_cpu(T* y, double* mean, double* rstd, const T* x, const T* gamma, const T* beta, int64_t R,
                            int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    double s = 0;
    for (int64_t k = 0; k < C; ++k) s += xr[k];
    const double m = s / static_cast<double>(C);
    double sq = 0;
    for (int64_t k = 0; k < C; ++k) sq += (xr[k] - m) * (xr[k] - m);
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
    mean[r] = m;
    rstd[r] = rs;
    for (int64_t k = 0; k < C; ++k) {
      double v = (xr[k] - m) * rs;
      if (gamma) v *= static_cast<double>(gamma[k]);
      if (beta) v += static_cast<double>(beta[k]);
      y[r * C + k] = static_cast<T>(v);
    }
  }
}

// dx (if wanted) and xhat (if wanted) per row.
template <class T>
void layer_norm_backward_cpu(T* dx, T* xhat, const T* dy, const T* x, const T* gamma, const double* mean,
                             const double* rstd, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const T *xr = x + r * C, *dyr = dy + r * C;
    const double m = mean[r], rs = rstd[r];
    double a = 0, b = 0;
    for (int64_t k = 0; k < C; ++k) {
      const double xh = (xr[k] - m) * rs, dxh = gamma ? static_cast<double>(dyr[k]) * gamma[k] : dyr[k];
      a += dxh;
      b += dxh * xh;
      if (xhat) xhat[r * C + k] = static_cast<T>(xh);
    }
    if (!dx) continue;
    a /= static_cast<double>(C);
    b /= static_cast<double>(C);
    for (int64_t k = 0; k < C; ++k) {
      const double xh = (xr[k] - m) * rs, dxh = gamma ? static_cast<double>(dyr[k]) * gamma[k] : dyr[k];
      dx[r * C + k] = static_cast<T>(rs * (dxh - a - xh * b));
    }
  }
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, double eps) {
  const profile::Op range("layer_norm");
  check_defined("layer_norm", x_in);
  check_float("layer_norm", x_in);
  TCN_CHECK(x_in.dim() >= 1, "layer_norm: expected a tensor of at least one dim, got a 0-dim tensor");
  TCN_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  const int64_t C = x_in.size(-1), R = C > 0 ? x_in.numel() / C : 0;
  for (const auto& [t, what] : {std::pair{gamma_in, "gamma"}, std::pair{beta_in, "beta"}}) {
    if (!t.defined()) continue;
    TCN_CHECK(t.dim() == 1 && t.size(0) == C, "layer_norm: ", what, " must be [", C, "] (the last dim of ",
              x_in.shape(), "), got ", t.shape());
    check_same_dtype("layer_norm", x_in, t);
    check_same_device("layer_norm", x_in, t);
  }
  const Tensor x = x_in.detach().contiguous();
  const Tensor gamma = gamma_in.defined() ? gamma_in.detach().contiguous() : Tensor();
  const Tensor beta = beta_in.defined() ? beta_in.detach().contiguous() : Tensor();
  Tensor y = empty(x.shape(), x.options());
  Tensor mean = empty({R}, {DType::F64, x.device()}), rstd = empty({R}, {DType::F64, x.device()});
  profile::add_bytes(2 * nbytes(x));
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("layer_norm", cuda::layer_norm_forward(y, mean, rstd, x, gamma, beta, eps));
  } else {
    dispatch_float(x.dtype(), "layer_norm", [&]<class T>() {
      layer_norm_forward_cpu<T>(y.data<T>(), mean.data<double>(), rstd.data<double>(), x.data<T>(),
                                gamma.defined() ? gamma.data<T>() : nullptr, beta.defined() ? beta.data<T>() : nullptr,
                                R, C, eps);
    });
  }
  if (autograd::needs_grad({x_in, gamma_in, beta_in})) {
    const bool need_x = x_in.requires_grad(), need_gamma = gamma_in.defined() && gamma_in.requires_grad();
    const bool need_beta = beta_in.defined() && beta_in.requires_grad();
    autograd::record("layer_norm", {x_in, gamma_in, beta_in}, {y},
                     [x, gamma, mean, rstd, need_x, need_gamma, need_beta, R, C](const TensorList& g) {
                       const Tensor dy = g[0].contiguous();
                       Tensor dx = need_x ? empty(x.shape(), x.options()) : Tensor();
                       Tensor xhat = need_gamma ? empty(x.shape(), x.options()) : Tensor();
                       if (need_x || need_gamma) {
                         if (x.device().is_cuda()) {
                           TCN_CUDA_OP("layer_norm backward",
                                       cuda::layer_norm_backward(dx, xhat, dy, x, gamma, mean, rstd));
                         } else {
                           dispatch_float(x.dtype(), "layer_norm backward", [&]<class T>() {
                             layer_norm_backward_cpu<T>(need_x ? dx.data<T>() : nullptr,
                                                        need_gamma ? xhat.data<T>() : nullptr, dy.data<T>(),
                                                        x.data<T>(), gamma.defined() ? gamma.data<T>() : nullptr,
                                                        mean.data<double>(), rstd.data<double>(), R, C);
                           });
                         }
                       }
                       // The parameters' gradients: sums over the rows.
                       const Tensor dgamma = need_gamma ? sum(mul(dy, xhat).reshape({R, C}), {0}) : Tensor();
                       const Tensor dbeta = need_beta ? sum(dy.reshape({R, C}), {0}) : Tensor();
                       return TensorList{dx, dgamma, dbeta};
                     });
  }
  return y;
}

}  // namespace tcn
