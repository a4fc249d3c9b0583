// Weight normalisation (Salimans & Kingma), as torch.nn.utils.weight_norm with
// dim 0: w = g * v / ||v||, the norm taken over each output row of v (every
// dim but the first), g one scale per row. One pass forward and one backward
// per row, on the CPU and in one kernel each on a GPU, instead of the five ops
// (and twice as many backward) of the composition
//     mul(v, div(g, sqrt(sum(mul(v, v), dims 1..))))
// which tests/test_grad.cpp keeps as this op's oracle.
//
// Backward, per row o with n = ||v_o|| and s = sum_k dw_ok v_ok:
//     dg_o  = s / n
//     dv_ok = (g_o / n) dw_ok - (g_o s / n^3) v_ok
#include <cmath>
#include <functional>

#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// w (R, C) = g * v / norm per row; norm (R) kept, in float64.
template <class T>
void weight_norm_forward_cpu(T* w, double* norm, const T* v, const T* g, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t o = 0; o < R; ++o) {
    double sq = 0;
    for (int64_t k = 0; k < C; ++k) sq += static_cast<double>(v[o * C + k]) * v[o * C + k];
    norm[o] = std::sqrt(sq);
    const T scale = static_cast<T>(static_cast<double>(g[o]) / norm[o]);
    for (int64_t k = 0; k < C; ++k) w[o * C + k] = v[o * C + k] * scale;
  }
}

template <class T>
void weight_norm_backward_cpu(T* dv, T* dg, const T* dw, const T* v, const T* g, const double* norm, int64_t R,
                              int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= (1 << 15))
  for (int64_t o = 0; o < R; ++o) {
    double s = 0;
    for (int64_t k = 0; k < C; ++k) s += static_cast<double>(dw[o * C + k]) * v[o * C + k];
    const double n = norm[o], go = g[o];
    if (dg) dg[o] = static_cast<T>(s / n);
    if (!dv) continue;
    const T a = static_cast<T>(go / n), b = static_cast<T>(go * s / (n * n * n));
    for (int64_t k = 0; k < C; ++k) dv[o * C + k] = a * dw[o * C + k] - b * v[o * C + k];
  }
}

// What weight_norm's backward keeps: v, g, each row's norm, which gradients.
struct WeightNormSaved {
  Tensor v, g, norm;
  bool need_v, need_g;
  int64_t R, C;
};

// weight_norm's backward: the gradient of w = g * v / ||v|| into those of v and g.
TensorList weight_norm_backward(const WeightNormSaved& s, const TensorList& grads) {
  Tensor dw = grads[0].contiguous();
  Tensor dv = s.need_v ? empty(s.v.shape(), s.v.options()) : Tensor();
  Tensor dg = s.need_g ? empty(s.g.shape(), s.g.options()) : Tensor();
  if (s.v.device().is_cuda()) {
    TCN_CUDA_OP("weight_norm backward", cuda::weight_norm_backward(dv, dg, dw, s.v, s.g, s.norm));
  } else {
    dispatch_float(s.v.dtype(), "weight_norm backward", [&]<class T>() {
      weight_norm_backward_cpu<T>(s.need_v ? dv.data<T>() : nullptr, s.need_g ? dg.data<T>() : nullptr, dw.data<T>(),
                                  s.v.data<T>(), s.g.data<T>(), s.norm.data<double>(), s.R, s.C);
    });
  }
  return {dv, dg};
}

}  // namespace

Tensor weight_norm(const Tensor& v_in, const Tensor& g_in) {
  const profile::Op range("weight_norm");
  check_defined("weight_norm", v_in, "v");
  check_defined("weight_norm", g_in, "g");
  check_float("weight_norm", v_in);
  check_same_dtype("weight_norm", v_in, g_in);
  check_same_device("weight_norm", v_in, g_in);
  TCN_CHECK(v_in.dim() >= 1 && g_in.dim() == v_in.dim() && g_in.size(0) == v_in.size(0) &&
                g_in.numel() == v_in.size(0),
            "weight_norm: g ", g_in.shape(), " must be [", v_in.dim() >= 1 ? v_in.size(0) : 0, ", 1, ...] for v ",
            v_in.shape());
  const int64_t R = v_in.size(0), C = R > 0 ? v_in.numel() / R : 0;
  Tensor v = v_in.detach().contiguous(), g = g_in.detach().contiguous();
  Tensor w = empty(v.shape(), v.options());
  Tensor norm = empty({R}, {DType::F64, v.device()});
  if (v.device().is_cuda()) {
    TCN_CUDA_OP("weight_norm", cuda::weight_norm_forward(w, norm, v, g));
  } else {
    dispatch_float(v.dtype(), "weight_norm", [&]<class T>() {
      weight_norm_forward_cpu<T>(w.data<T>(), norm.data<double>(), v.data<T>(), g.data<T>(), R, C);
    });
  }
  if (autograd::needs_grad({v_in, g_in})) {
    const bool need_v = v_in.requires_grad(), need_g = g_in.requires_grad();
    autograd::record("weight_norm", {v_in, g_in}, {w},
                     std::bind_front(weight_norm_backward, WeightNormSaved{v, g, norm, need_v, need_g, R, C}));
  }
  return w;
}

}  // namespace tcn
