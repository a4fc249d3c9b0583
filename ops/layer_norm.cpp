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
// On the CPU the column sums are taken in the same pass as dx (per-thread
// partial sums); on a GPU they are ops (sums over the rows) on xhat, which the
// backward kernel writes.
#include <cmath>
#include <functional>
#include <vector>

#include <omp.h>

#include "core/threads.h"
#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// The row loops vectorise (omp simd): the statistics accumulate in float64
// lanes, xhat = (x - mean) rstd is taken in float64, the rest in T, and gamma / beta stand in as 1 / 0 when
// absent (the `ones`/`zeros` rows) so that no loop branches.
template <class T>
void layer_norm_forward_cpu(T* y, double* mean, double* rstd, const T* x, const T* gamma, const T* beta, int64_t R,
                            int64_t C, double eps) {
  const std::vector<T> ones(gamma ? 0 : C, T(1)), zeros(beta ? 0 : C, T(0));
  const T* g = gamma ? gamma : ones.data();
  const T* b = beta ? beta : zeros.data();
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < C; ++k) s += static_cast<double>(xr[k]);
    const double m = s / static_cast<double>(C);
    double sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int64_t k = 0; k < C; ++k) {
      const double d = static_cast<double>(xr[k]) - m;
      sq += d * d;
    }
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
    mean[r] = m;
    rstd[r] = rs;
#pragma omp simd
    for (int64_t k = 0; k < C; ++k) yr[k] = static_cast<T>((static_cast<double>(xr[k]) - m) * rs) * g[k] + b[k];
  }
}

// dx (if wanted) per row, and the parameters' gradients dgamma = sum over rows
// of dy xhat and dbeta = sum of dy (if wanted, float64 [C]): each thread adds
// its rows into its own partial sums, which are added up at the end, so the
// backward reads x and dy once.
template <class T>
void layer_norm_backward_cpu(T* dx, double* dgamma, double* dbeta, const T* dy, const T* x, const T* gamma,
                             const double* mean, const double* rstd, int64_t R, int64_t C) {
  const std::vector<T> ones(gamma ? 0 : C, T(1));
  const T* g = gamma ? gamma : ones.data();
  const bool parallel = R * C >= (1 << 15);
  const int threads = parallel ? num_threads() : 1;
  std::vector<double> partial_g(dgamma ? threads * C : 0, 0.0), partial_b(dbeta ? threads * C : 0, 0.0);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int t = parallel ? omp_get_thread_num() : 0;
    double* pg = dgamma ? partial_g.data() + t * C : nullptr;
    double* pb = dbeta ? partial_b.data() + t * C : nullptr;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const T *xr = x + r * C, *dyr = dy + r * C;
      const double m = mean[r], rs = rstd[r];
      // xhat in float64: x - mean in float32 would lose digits where the mean is large.
      auto xhat = [&](int64_t k) { return static_cast<T>((static_cast<double>(xr[k]) - m) * rs); };
      if (pg) {
#pragma omp simd
        for (int64_t k = 0; k < C; ++k) pg[k] += static_cast<double>(dyr[k] * xhat(k));
      }
      if (pb) {
#pragma omp simd
        for (int64_t k = 0; k < C; ++k) pb[k] += static_cast<double>(dyr[k]);
      }
      if (!dx) continue;
      double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
      for (int64_t k = 0; k < C; ++k) {
        const T xh = xhat(k), dxh = dyr[k] * g[k];
        a += static_cast<double>(dxh);
        b += static_cast<double>(dxh) * static_cast<double>(xh);
      }
      const T am = static_cast<T>(a / static_cast<double>(C)), bm = static_cast<T>(b / static_cast<double>(C));
      const T rt = static_cast<T>(rs);
      T* dxr = dx + r * C;
#pragma omp simd
      for (int64_t k = 0; k < C; ++k) dxr[k] = rt * (dyr[k] * g[k] - am - xhat(k) * bm);
    }
  }
  for (int t = 0; t < threads; ++t)
    for (int64_t k = 0; k < C; ++k) {
      if (dgamma) dgamma[k] += partial_g[t * C + k];
      if (dbeta) dbeta[k] += partial_b[t * C + k];
    }
}

// What backward keeps: the normalised input's source x, gamma, each row's mean
// and 1/std, and which gradients were asked for.
struct LayerNormSaved {
  Tensor x, gamma, mean, rstd;
  bool need_x, need_gamma, need_beta;
  int64_t R, C;
};

// layer_norm's node on the tape: dy into the gradients of x, gamma and beta.
// On the CPU one pass computes all three; on a GPU one kernel gives dx and the
// normalised input, and the parameters' gradients are sums over the rows.
TensorList layer_norm_backward(const LayerNormSaved& s, const TensorList& grad_outputs) {
  const Tensor& x = s.x;
  const Tensor dy = grad_outputs[0].contiguous();
  Tensor dx = s.need_x ? empty(x.shape(), x.options()) : Tensor();
  if (!x.device().is_cuda()) {
    Tensor dg = s.need_gamma ? zeros({s.C}, {DType::F64}) : Tensor();
    Tensor db = s.need_beta ? zeros({s.C}, {DType::F64}) : Tensor();
    dispatch_float(x.dtype(), "layer_norm backward", [&]<class T>() {
      layer_norm_backward_cpu<T>(s.need_x ? dx.data<T>() : nullptr, s.need_gamma ? dg.data<double>() : nullptr,
                                 s.need_beta ? db.data<double>() : nullptr, dy.data<T>(), x.data<T>(),
                                 s.gamma.defined() ? s.gamma.data<T>() : nullptr, s.mean.data<double>(),
                                 s.rstd.data<double>(), s.R, s.C);
    });
    return {dx, s.need_gamma ? dg.to(x.dtype()) : Tensor(), s.need_beta ? db.to(x.dtype()) : Tensor()};
  }
  Tensor xhat = s.need_gamma ? empty(x.shape(), x.options()) : Tensor();
  if (s.need_x || s.need_gamma)
    TCN_CUDA_OP("layer_norm backward", cuda::layer_norm_backward(dx, xhat, dy, x, s.gamma, s.mean, s.rstd));
  const Tensor dgamma = s.need_gamma ? sum(mul(dy, xhat).reshape({s.R, s.C}), {0}) : Tensor();
  const Tensor dbeta = s.need_beta ? sum(dy.reshape({s.R, s.C}), {0}) : Tensor();
  return {dx, dgamma, dbeta};
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
    const LayerNormSaved saved{.x = x, .gamma = gamma, .mean = mean, .rstd = rstd,
                               .need_x = x_in.requires_grad(),
                               .need_gamma = gamma_in.defined() && gamma_in.requires_grad(),
                               .need_beta = beta_in.defined() && beta_in.requires_grad(), .R = R, .C = C};
    autograd::record("layer_norm", {x_in, gamma_in, beta_in}, {y}, std::bind_front(layer_norm_backward, saved));
  }
  return y;
}

}  // namespace tcn
