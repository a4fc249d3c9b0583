// conv1d on channels-last sequences: x [B, T, Cin], w [Cout, Cin, K] (PyTorch's
// layout), bias [Cout]; y [B, T, Cout] with
//   y[b, t, o] = bias[o] + sum_{j, i} w[o, i, j] * x[b, t + j*dilation - left_pad, i]
// and zeros outside [0, T). left_pad = (K-1)*dilation is PyTorch's
// Conv1d(padding=(K-1)*dilation) followed by the chomp of the last (K-1)*dilation
// steps: a causal conv.
//
// The same code runs on the CPU (oneDNN or OpenBLAS) and on a GPU (cuBLAS): only
// the GEMM call is device-specific; padding and copies are ordinary ops, and
// the bias is the CPU GEMM's bias argument or, on a GPU, the rows' start value.
//
// The kernel is K accumulating GEMMs, one per tap, each over all B*T rows at
// once. The input is copied once into a zero-padded buffer xp [B, Lp, Cin]
// (Lp = left_pad + T + right_pad), and the output is computed in the same padded
// row space: output row r = b*Lp + t reads input rows r + j*dilation, which
// never leave batch b. So tap j is ONE GEMM
//     yp[0:M] += xp[j*d : j*d + M] @ w_j^T,    M = B*Lp - (K-1)*d,
// and the (K-1)*d rows per batch that fall in the padding are computed and
// thrown away (2% extra work at the reference sizes, instead of B times more
// GEMM calls). The result is a strided view of yp: no copy. Backward is the
// same walk: dxp[j*d : j*d + M] += dyp[0:M] @ w_j, dw_j = xp[j*d : j*d + M]^T @ dyp[0:M].
//
// On a GPU the same op can run on cuDNN instead (cuda/cudnn.h; which one:
// core/backends.h): cuDNN pads symmetrically, so its output has
// Lout = L + 2*left - (K-1)*d rows per batch and y is again a view of the first
// L. The two paths sit behind one interface: a forward that returns y and the
// backward that turns dy into (dx, dw). --conv_impl auto times both on first
// use of a shape and keeps the faster (conv1d_auto below).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "tcn/core/autocast.h"
#include "tcn/core/backends.h"
#include "tcn/core/step_graph.h"
#include "tcn/cuda/cudnn.h"
#include "tcn/cuda/kernels.h"
#include "tcn/cuda/runtime.h"
#include "tcn/ops/cpu_blas.h"
#include "tcn/ops/dispatch.h"
#include "tcn/ops/ops.h"

namespace tcn {

namespace {

// Geometry of the padded row space.
struct ConvRows {
  int64_t B, L, Cin, Cout, K, d, left, Lp, M;
  ConvRows(int64_t B, int64_t L, int64_t Cin, int64_t Cout, int64_t K, int64_t d, int64_t left)
      : B(B), L(L), Cin(Cin), Cout(Cout), K(K), d(d), left(left), Lp(L + (K - 1) * d), M(B * Lp - (K - 1) * d) {}
};

// Row-major GEMM on the tensors' device: C = op(A) @ op(B) + beta * C, pointers
// into the buffers of `like` (its dtype and device). When `like` is bfloat16
// (mixed precision), A and B are bfloat16 and C is float32. `bias` ([N], C's
// dtype, or null) is added to every row of C; on the CPU the GEMM adds it as it
// writes C, on a GPU C is first set to it. A batch (strides in elements) is one
// cuBLAS call on a GPU and a loop of GEMMs on the CPU.
void gemm_on(const Tensor& like, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, double beta, void* C, int64_t ldc, const void* bias = nullptr,
             cuda::GemmBatch batch = {}) {
  if (like.device().is_cuda()) {
    TCN_CHECK(bias == nullptr, "conv1d: internal error: a CUDA GEMM with a bias");
    TCN_CUDA_OP("conv1d",
                cuda::gemm(like.dtype(), like.device().index, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, batch));
    return;
  }
  const size_t op_size = dtype_size(like.dtype()), out_size = like.dtype() == DType::BF16 ? 4 : op_size;
  for (int64_t i = 0; i < batch.count; ++i) {
    const void* a = static_cast<const char*>(A) + i * batch.stride_a * static_cast<int64_t>(op_size);
    const void* b = static_cast<const char*>(B) + i * batch.stride_b * static_cast<int64_t>(op_size);
    void* c = static_cast<char*>(C) + i * batch.stride_c * static_cast<int64_t>(out_size);
    if (like.dtype() == DType::BF16) {
      cpu::gemm(ta, tb, M, N, K, static_cast<const bfloat16*>(a), lda, static_cast<const bfloat16*>(b), ldb,
                static_cast<float>(beta), static_cast<float*>(c), ldc, static_cast<const float*>(bias));
      continue;
    }
    dispatch_float(like.dtype(), "conv1d", [&]<class T>() {
      cpu::gemm(ta, tb, M, N, K, static_cast<const T*>(a), lda, static_cast<const T*>(b), ldb, static_cast<T>(beta),
                static_cast<T*>(c), ldc, static_cast<const T*>(bias));
    });
  }
}

// yp rows [0, M) = bias + sum_j xp rows [j*d, j*d + M) @ wt[j]; wt = [K, Cin, Cout] contiguous.
// Tap 0 overwrites the rows (beta 0) and brings the bias: on the CPU as the
// GEMM's bias argument; on a GPU the rows start as the broadcast bias.
void conv1d_forward_rows(const ConvRows& g, const Tensor& xp, const Tensor& wt, const Tensor& bias, const Tensor& yp) {
  const void* gemm_bias = nullptr;
  double beta0 = 0.0;
  if (bias.defined() && yp.device().is_cpu()) {
    gemm_bias = bias.raw_data();
  } else if (bias.defined()) {
    copy_(yp.view({-1, g.Cout}).narrow(0, 0, g.M), bias);  // broadcast over the rows
    beta0 = 1.0;
  }
  for (int64_t j = 0; j < g.K; ++j)
    gemm_on(xp, false, false, g.M, g.Cout, g.Cin, element_ptr(xp, j * g.d * g.Cin), g.Cin,
            element_ptr(wt, j * g.Cin * g.Cout), g.Cout, j == 0 ? beta0 : 1.0, yp.raw_data(), g.Cout,
            j == 0 ? gemm_bias : nullptr);
}

// dxp = sum_j dyp @ wt[j]^T, shifted by j*d rows (rows past M must be zero already);
// dwt[j] = xp^T @ dyp per tap. dyp is zero in the padding rows.
void conv1d_backward_rows(const ConvRows& g, const Tensor& xp, const Tensor& wt, const Tensor& dyp, const Tensor& dxp,
                          const Tensor& dwt) {
  if (dxp.defined())  // tap 0 covers rows [0, M) first and overwrites them (beta 0); later taps accumulate
    for (int64_t j = 0; j < g.K; ++j)
      gemm_on(xp, false, true, g.M, g.Cin, g.Cout, dyp.raw_data(), g.Cout, element_ptr(wt, j * g.Cin * g.Cout), g.Cout,
              j == 0 ? 0.0 : 1.0, element_ptr(dxp, j * g.d * g.Cin), g.Cin);
  // The taps' weight gradients write separate outputs, so they are one batched
  // GEMM: tap j's A starts j*d rows further into xp, B (dyp) is shared.
  if (dwt.defined())
    gemm_on(xp, true, false, g.Cin, g.Cout, g.M, xp.raw_data(), g.Cin, dyp.raw_data(), g.Cout, 0.0, dwt.raw_data(),
            g.Cout, nullptr, {.count = g.K, .stride_a = g.d * g.Cin, .stride_b = 0, .stride_c = g.Cin * g.Cout});
}

// Places x [B, L, C] at rows [left, left + L) of each batch of a [B, Lp, C]
// buffer of `dtype` whose other rows are zero (only those rows are written
// twice); for mixed precision the copy is also the conversion to bfloat16.
Tensor to_padded_rows(const Tensor& x, int64_t left, int64_t Lp, DType dtype) {
  const int64_t L = x.size(1);
  if (Lp == L && x.is_contiguous()) return x.to(dtype);  // no padding (a 1x1 conv): x as it is, or one conversion
  Tensor p = empty({x.size(0), Lp, x.size(2)}, {dtype, x.device()});
  if (x.device().is_cuda() && (dtype == x.dtype() || (dtype == DType::BF16 && x.dtype() == DType::F32))) {
    // one kernel for the zeros and the copy (and the conversion to bf16)
    TCN_CUDA_OP("conv1d", cuda::pad_rows(p, x, left));
    return p;
  }
  if (left > 0) zero_(p.narrow(1, 0, left));
  if (Lp > left + L) zero_(p.narrow(1, left + L, Lp - left - L));
  copy_(p.narrow(1, left, L), x);
  return p;
}

// What an implementation gives the op: y [B, L, Cout] (x's dtype) and the
// function that computes (dx, dw) from dy; dx [B, L, Cin] and dw [Cout, Cin, K]
// are computed only where asked for (need_x, need_w).
struct ConvOut {
  Tensor y;
  std::function<std::pair<Tensor, Tensor>(const Tensor& dy, bool need_x, bool need_w)> backward;
};

// The GEMM path (above): K accumulating GEMMs per pass over padded rows.
ConvOut conv1d_gemm(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, bool bf16) {
  // Mixed precision (core/autocast.h): the GEMM operands in bfloat16, the
  // output, the bias and the gradients in float32. The bf16 copies are also
  // what backward keeps, at half the memory.
  const DType op_dtype = bf16 ? DType::BF16 : x.dtype();  // of the GEMM operands
  Tensor xp = to_padded_rows(x, geo.left, geo.Lp, op_dtype);
  // [K, Cin, Cout]: each tap a GEMM operand (permuted and converted in one copy).
  Tensor wt = empty({geo.K, geo.Cin, geo.Cout}, {op_dtype, w.device()});
  copy_(wt, w.permute({2, 1, 0}));
  Tensor yp = empty({geo.B, geo.Lp, geo.Cout}, x.options());
  conv1d_forward_rows(geo, xp, wt, b, yp);
  const TensorOptions out_opts = x.options();
  return {yp.narrow(1, 0, geo.L),  // the valid rows of each batch; a view
          [geo, xp, wt, bf16, out_opts](const Tensor& dy, bool need_x, bool need_w) {
            Tensor dyp = to_padded_rows(dy, 0, geo.Lp, bf16 ? DType::BF16 : dy.dtype());
            // Tap 0 writes rows [0, M) with beta = 0, so only the tail needs zeros.
            Tensor dxp;
            if (need_x) {
              dxp = empty(xp.shape(), out_opts);
              zero_(dxp.view({-1, geo.Cin}).narrow(0, geo.M, geo.B * geo.Lp - geo.M));
            }
            Tensor dwt = need_w ? empty(wt.shape(), out_opts) : Tensor();
            conv1d_backward_rows(geo, xp, wt, dyp, dxp, dwt);
            return std::pair{need_x ? dxp.narrow(1, geo.left, geo.L) : Tensor(),
                             need_w ? dwt.permute({2, 1, 0}).contiguous() : Tensor()};
          }};
}

// The cuDNN path: x and w converted once to the operand dtype (w to cuDNN's
// [Cout, K, Cin]); y is cuDNN's output on top of the broadcast bias (float32),
// or converted from bfloat16 with the bias added (mixed precision).
ConvOut conv1d_cudnn(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, bool bf16) {
  const DType op_dtype = bf16 ? DType::BF16 : x.dtype();
  const int64_t Lout = geo.L + 2 * geo.left - (geo.K - 1) * geo.d;  // cuDNN pads geo.left on both sides
  Tensor xc = x.to(op_dtype).contiguous();
  Tensor wk = empty({geo.Cout, geo.K, geo.Cin}, {op_dtype, w.device()});
  copy_(wk, w.permute({0, 2, 1}));
  Tensor y;
  cuda::CudnnConvPlan plan = nullptr;  // the shape's algorithms, which backward reuses
  if (!bf16) {
    y = empty({geo.B, Lout, geo.Cout}, x.options());
    if (b.defined()) copy_(y, b);  // broadcast over the rows; cuDNN adds onto it (beta 1)
    TCN_CUDA_OP("conv1d", plan = cuda::cudnn_conv_forward(y, xc, wk, geo.left, geo.d, b.defined() ? 1.0 : 0.0));
  } else {
    Tensor yb = empty({geo.B, Lout, geo.Cout}, {op_dtype, x.device()});
    TCN_CUDA_OP("conv1d", plan = cuda::cudnn_conv_forward(yb, xc, wk, geo.left, geo.d, 0.0));
    y = yb.to(x.dtype());
    if (b.defined()) add_(y, b);
  }
  const DType out_dtype = x.dtype();
  return {y.narrow(1, 0, geo.L), [geo, xc, wk, plan, Lout, op_dtype, out_dtype](const Tensor& dy, bool need_x, bool need_w) {
            Tensor dyp = to_padded_rows(dy, 0, Lout, op_dtype);  // zeros in the rows past L
            Tensor dx, dw;
            if (need_x) {
              dx = empty(xc.shape(), xc.options());
              TCN_CUDA_OP("conv1d backward", cuda::cudnn_conv_backward_data(plan, dx, dyp, wk));
              dx = dx.to(out_dtype);
            }
            if (need_w) {
              Tensor dwk = empty(wk.shape(), wk.options());
              TCN_CUDA_OP("conv1d backward", cuda::cudnn_conv_backward_filter(plan, dwk, xc, dyp));
              dw = empty({geo.Cout, geo.Cin, geo.K}, {out_dtype, dwk.device()});
              copy_(dw, dwk.permute({0, 2, 1}));
            }
            return std::pair{dx, dw};
          }};
}

// Why cuDNN cannot take this conv ("" when it can).
std::string cudnn_refusal(const ConvRows& geo, const Tensor& x) {
  if (!x.device().is_cuda()) return "a CPU tensor";
  if (x.dtype() != DType::F32) return std::string("cuDNN paths are float32 (or bf16 mixed precision), not ") +
                                      dtype_name(x.dtype());
  if (2 * geo.left < (geo.K - 1) * geo.d) return "left padding below half the receptive field (cuDNN pads both sides)";
  if (geo.B == 0 || geo.L == 0) return "an empty batch";
  // The legacy API's tensors hold fewer than 2^31 elements (32-bit sizes).
  const int64_t rows = geo.B * (geo.L + 2 * geo.left), widest = std::max(geo.Cin, geo.Cout);
  if (rows * widest >= (int64_t{1} << 31) || geo.Cout * geo.Cin * geo.K >= (int64_t{1} << 31))
    return "a tensor of 2^31 elements or more (cuDNN's sizes are 32-bit)";
  return cuda::cudnn_unavailable_reason();
}

// --conv_impl auto: on first use of a shape, both paths run forward and
// backward on this call's inputs (one warm-up and three timed repetitions each,
// device time from CUDA events), their outputs and gradients are compared, and
// the faster is kept for the shape if cuDNN's results agree with the GEMM
// path's (within a tolerance set by the precision); one line says what was
// chosen. Inside a CUDA graph capture nothing is timed: the GEMM path runs and
// the shape stays undecided.
ConvImpl conv1d_auto(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, bool bf16) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>, ConvImpl>
      chosen;
  const auto key = std::tuple{x.device().index, geo.B, geo.L, geo.Cin, geo.Cout, geo.K, geo.d, geo.left,
                              static_cast<int>(autocast_precision()), cuda_backends().deterministic};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  if (StepGraph::capturing()) return ConvImpl::Gemm;

  char shape[160];
  std::snprintf(shape, sizeof shape, "[B %lld, L %lld, %lld -> %lld, K %lld, dilation %lld]",
                static_cast<long long>(geo.B), static_cast<long long>(geo.L), static_cast<long long>(geo.Cin),
                static_cast<long long>(geo.Cout), static_cast<long long>(geo.K), static_cast<long long>(geo.d));
  auto decide = [&](ConvImpl c, const std::string& why) {
    std::fprintf(stderr, "conv1d %s: %s (%s)\n", shape, conv_impl_name(c), why.c_str());
    chosen[key] = c;
    return c;
  };
  struct Run {
    double ms = 0;
    Tensor y, dx, dw;
  };
  Generator own(20261205);  // not the default generator: choosing must not move the run's random stream
  Tensor dy = rand({geo.B, geo.L, geo.Cout}, x.options(), own);
  auto run = [&](ConvOut (*impl)(const ConvRows&, const Tensor&, const Tensor&, const Tensor&, bool)) {
    Run r;
    cuda::EventTimer timer(x.device().index);
    for (int rep = 0; rep < 4; ++rep) {
      const int32_t start = timer.mark();
      ConvOut out = impl(geo, x, w, b, bf16);
      auto [dx, dw] = out.backward(dy, true, true);
      const int32_t end = timer.mark();
      if (rep == 0) continue;  // warm-up
      r.y = out.y, r.dx = dx, r.dw = dw;
      timer.collect();
      r.ms += (timer.ms(end) - timer.ms(start)) / 3;
    }
    return r;
  };
  Run gemm_run, cudnn_run;
  try {
    gemm_run = run(conv1d_gemm);
    cudnn_run = run(conv1d_cudnn);
  } catch (const Error& e) {
    return decide(ConvImpl::Gemm, std::string("cuDNN failed: ") + e.what());
  }
  // Largest difference relative to the largest value, per output.
  const double tol = bf16 || autocast_tf32() ? 2e-2 : 1e-3;
  double worst = 0;
  for (auto [a, c] : {std::pair{gemm_run.y, cudnn_run.y}, {gemm_run.dx, cudnn_run.dx}, {gemm_run.dw, cudnn_run.dw}}) {
    const std::vector<float> va = a.contiguous().to(Device::cpu()).to_vector<float>();
    const std::vector<float> vc = c.contiguous().to(Device::cpu()).to_vector<float>();
    double big = 1e-30, diff = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      big = std::max(big, static_cast<double>(std::abs(va[i])));
      diff = std::max(diff, static_cast<double>(std::abs(va[i] - vc[i])));
    }
    worst = std::max(worst, diff / big);
  }
  char why[200];
  std::snprintf(why, sizeof why, "forward+backward: cudnn %.3f ms, gemm %.3f ms; largest difference %.1e", cudnn_run.ms,
                gemm_run.ms, worst);
  if (!(worst <= tol))
    return decide(ConvImpl::Gemm, std::string(why) + ": cuDNN disagrees with the GEMM path beyond " +
                                      std::to_string(tol) + ", so it is not used");
  return decide(cudnn_run.ms < gemm_run.ms ? ConvImpl::Cudnn : ConvImpl::Gemm, why);
}

// Which path runs this call.
ConvImpl conv1d_impl(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, bool bf16) {
  const ConvImpl setting = cuda_backends().conv;
  if (!x.device().is_cuda() || setting == ConvImpl::Gemm) return ConvImpl::Gemm;
  const std::string refusal = cudnn_refusal(geo, x);
  if (setting == ConvImpl::Cudnn) {
    TCN_CHECK(refusal.empty(), "conv1d: the cuDNN path was asked for (--conv_impl cudnn) but cannot run: ", refusal);
    return ConvImpl::Cudnn;
  }
  if (!refusal.empty()) {
    static std::once_flag noted;
    std::call_once(noted, [&] { std::fprintf(stderr, "conv1d: the GEMM path (cuDNN not used: %s)\n", refusal.c_str()); });
    return ConvImpl::Gemm;
  }
  return conv1d_auto(geo, x, w, b, bf16);
}

}  // namespace

Tensor conv1d(const Tensor& x_in, const Tensor& w, const Tensor& bias, int64_t dilation, int64_t left_pad) {
  const profile::Op range("conv1d");
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

  const ConvRows geo(B, L, Cin, Cout, K, dilation, left_pad);
  const bool bf16 = autocast_bf16(x_in);
  const Tensor x = x_in.detach(), wd = w.detach(), b = bias.defined() ? bias.detach().contiguous() : Tensor();
  ConvOut out = conv1d_impl(geo, x, wd, b, bf16) == ConvImpl::Cudnn ? conv1d_cudnn(geo, x, wd, b, bf16)
                                                                     : conv1d_gemm(geo, x, wd, b, bf16);
  if (autograd::needs_grad({x_in, w, bias})) {
    const bool need_x = x_in.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    autograd::record("conv1d", {x_in, w, bias}, {out.y},
                     [backward = out.backward, need_x, need_w, need_b](const TensorList& g) {
                       auto [dx, dw] = backward(g[0], need_x, need_w);
                       return TensorList{dx, dw, need_b ? sum(g[0], {0, 1}) : Tensor()};
                     });
  }
  return out.y;
}

}  // namespace tcn
