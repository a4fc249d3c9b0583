// conv1d on channels-last sequences: x [B, T, Cin], w [Cout, Cin, K] (PyTorch's
// layout), bias [Cout]; y [B, T, Cout] with
//   y[b, t, o] = bias[o] + sum_{j, i} w[o, i, j] * x[b, t + j*dilation - left_pad, i]
// and zeros outside [0, T). left_pad = (K-1)*dilation is PyTorch's
// Conv1d(padding=(K-1)*dilation) followed by the chomp of the last (K-1)*dilation
// steps: a causal conv.
//
// The kernel is K accumulating GEMMs over time-shifted row ranges: tap j adds
// x[b, rows + shift_j] @ w[:, :, j]^T into y[b, rows]. The padding is never
// materialised (the row range is clipped instead), and there is no im2col buffer.
// Backward is the same walk: dx rows += dy rows @ w_j, dw_j += x rows^T @ dy rows.
#include "ops/cpu_blas.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// The output rows [t0, t1) that tap j reads from in-range input rows t + shift.
struct TapRange {
  int64_t shift, t0, t1;
};
TapRange tap_range(int64_t j, int64_t dilation, int64_t left_pad, int64_t T) {
  int64_t s = j * dilation - left_pad;
  return {s, std::max<int64_t>(0, -s), std::min<int64_t>(T, T - s)};
}

// y[b] (+)= sum_j x[b, shifted] @ wt[j], wt = [K, Cin, Cout] contiguous; x, y contiguous.
template <class T>
void conv1d_forward_cpu(const T* x, const T* wt, const T* bias, T* y, int64_t B, int64_t L, int64_t Cin,
                        int64_t Cout, int64_t K, int64_t dilation, int64_t left_pad) {
  for (int64_t b = 0; b < B; ++b) {
    T* yb = y + b * L * Cout;
    for (int64_t t = 0; t < L; ++t)
      for (int64_t o = 0; o < Cout; ++o) yb[t * Cout + o] = bias ? bias[o] : T(0);
    for (int64_t j = 0; j < K; ++j) {
      TapRange r = tap_range(j, dilation, left_pad, L);
      if (r.t1 <= r.t0) continue;
      cpu::gemm<T>(CblasNoTrans, CblasNoTrans, r.t1 - r.t0, Cout, Cin, x + (b * L + r.t0 + r.shift) * Cin, Cin,
                   wt + j * Cin * Cout, Cout, T(1), yb + r.t0 * Cout, Cout);
    }
  }
}

template <class T>
void conv1d_backward_cpu(const T* x, const T* wt, const T* dy, T* dx, T* dwt, int64_t B, int64_t L, int64_t Cin,
                         int64_t Cout, int64_t K, int64_t dilation, int64_t left_pad) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < K; ++j) {
      TapRange r = tap_range(j, dilation, left_pad, L);
      if (r.t1 <= r.t0) continue;
      const int64_t n = r.t1 - r.t0;
      const T* dyb = dy + (b * L + r.t0) * Cout;
      const T* xb = x + (b * L + r.t0 + r.shift) * Cin;
      if (dx)  // dx rows [n, Cin] += dy rows [n, Cout] @ wt[j]^T
        cpu::gemm<T>(CblasNoTrans, CblasTrans, n, Cin, Cout, dyb, Cout, wt + j * Cin * Cout, Cout, T(1),
                     dx + (b * L + r.t0 + r.shift) * Cin, Cin);
      if (dwt)  // dwt[j] [Cin, Cout] += x rows^T @ dy rows
        cpu::gemm<T>(CblasTrans, CblasNoTrans, Cin, Cout, n, xb, Cin, dyb, Cout, T(1), dwt + j * Cin * Cout, Cout);
    }
  }
}

}  // namespace

Tensor conv1d(const Tensor& x_in, const Tensor& w, const Tensor& bias, int64_t dilation, int64_t left_pad) {
  check_defined("conv1d", x_in);
  check_defined("conv1d", w, "weight");
  TCN_CHECK(x_in.dim() == 3, "conv1d: input must be [batch, time, channels], got ", x_in.shape());
  TCN_CHECK(w.dim() == 3, "conv1d: weight must be [out_channels, in_channels, kernel], got ", w.shape());
  check_same_dtype("conv1d", x_in, w);
  check_same_device("conv1d", x_in, w);
  check_float("conv1d", x_in);
  const int64_t B = x_in.size(0), L = x_in.size(1), Cin = x_in.size(2);
  const int64_t Cout = w.size(0), K = w.size(2);
  TCN_CHECK(w.size(1) == Cin, "conv1d: input has ", Cin, " channels (shape ", x_in.shape(), ") but the weight ",
            w.shape(), " expects ", w.size(1));
  TCN_CHECK(dilation >= 1, "conv1d: dilation must be >= 1, got ", dilation);
  TCN_CHECK(left_pad >= 0 && left_pad <= (K - 1) * dilation, "conv1d: left padding ", left_pad,
            " must be in [0, (K-1)*dilation = ", (K - 1) * dilation, "]");
  if (bias.defined()) {
    TCN_CHECK(bias.dim() == 1 && bias.size(0) == Cout, "conv1d: bias must be [", Cout, "], got ", bias.shape());
    check_same_dtype("conv1d", x_in, bias);
    check_same_device("conv1d", x_in, bias);
  }
  if (x_in.device().is_cuda()) no_cuda_kernel("conv1d");

  Tensor x = x_in.detach().contiguous();
  Tensor wt = w.detach().permute({2, 1, 0}).contiguous();  // [K, Cin, Cout]: each tap a GEMM operand
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty({B, L, Cout}, x.options());
  dispatch_float(x.dtype(), "conv1d", [&]<class T>() {
    conv1d_forward_cpu<T>(x.data<T>(), wt.data<T>(), b.defined() ? b.data<T>() : nullptr, y.data<T>(), B, L, Cin,
                          Cout, K, dilation, left_pad);
  });

  if (autograd::needs_grad({x_in, w, bias})) {
    bool need_x = x_in.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    autograd::record("conv1d", {x_in, w, bias}, {y},
                     [x, wt, need_x, need_w, need_b, dilation, left_pad, K](const TensorList& g) {
                       Tensor dy = g[0].contiguous();
                       const int64_t B = x.size(0), L = x.size(1), Cin = x.size(2), Cout = dy.size(2);
                       Tensor dx = need_x ? zeros(x.shape(), x.options()) : Tensor();
                       Tensor dwt = need_w ? zeros(wt.shape(), wt.options()) : Tensor();
                       dispatch_float(x.dtype(), "conv1d backward", [&]<class T>() {
                         conv1d_backward_cpu<T>(x.data<T>(), wt.data<T>(), dy.data<T>(),
                                                need_x ? dx.data<T>() : nullptr, need_w ? dwt.data<T>() : nullptr, B,
                                                L, Cin, Cout, K, dilation, left_pad);
                       });
                       return TensorList{dx, need_w ? dwt.permute({2, 1, 0}).contiguous() : Tensor(),
                                         need_b ? sum(dy, {0, 1}) : Tensor()};
                     });
  }
  return y;
}

}  // namespace tcn
