// conv1d on cuDNN, and the choice between it and the GEMM path of
// ops/conv1d.cpp (--conv_impl auto|cudnn|gemm, core/backends.h). cuDNN pads
// symmetrically, so its output has Lout = L + 2*left - (K-1)*d rows per batch
// and y is a view of the first L. --conv_impl auto times both paths on first
// use of a shape and keeps the faster, if cuDNN agrees with ours.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "conv1d_paths.h"
#include "core/autocast.h"
#include "core/step_graph.h"
#include "cuda/cudnn.h"
#include "cuda/kernels.h"
#include "core/devices.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn::conv1d_paths {

// What the cuDNN path's backward keeps from its forward: x and w as cuDNN
// took them (in the operand dtype, w as [Cout, K, Cin]) and the shape's plan.
struct CudnnSaved {
  ConvRows geo;
  Tensor xc, wk;
  cuda::CudnnConvPlan plan;  // the algorithms found for this shape, reused here
  int64_t Lout;              // cuDNN's output rows (it pads geo.left on both sides)
  DType out_dtype;           // of the gradients: x's
};

// The cuDNN path's backward: dy [B, L, Cout] into dx, dw and db, each only if asked for.
ConvGrads conv1d_cudnn_backward(const CudnnSaved& s, const Tensor& dy, bool need_x, bool need_w, bool need_b) {
  const ConvRows& geo = s.geo;
  Tensor dyp = to_padded_rows(dy, 0, s.Lout, s.xc.dtype());  // zeros in the rows past L
  Tensor dx, dw;
  if (need_x) {
    dx = empty(s.xc.shape(), s.xc.options());
    TCN_CUDA_OP("conv1d backward", cuda::cudnn_conv_backward_data(s.plan, dx, dyp, s.wk));
    dx = dx.to(s.out_dtype);
  }
  if (need_w) {
    Tensor dwk = empty(s.wk.shape(), s.wk.options());
    TCN_CUDA_OP("conv1d backward", cuda::cudnn_conv_backward_filter(s.plan, dwk, s.xc, dyp));
    dw = empty({geo.Cout, geo.Cin, geo.K}, {s.out_dtype, dwk.device()});
    copy_(dw, dwk.permute({0, 2, 1}));
  }
  return ConvGrads{dx, dw, need_b ? sum(dy, {0, 1}) : Tensor()};
}

// The cuDNN path: x and w converted once to the operand dtype (w to cuDNN's
// [Cout, K, Cin]); y is cuDNN's output on top of the broadcast bias (float32),
// or converted from bfloat16 with the bias added (mixed precision).
ConvOut conv1d_cudnn(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s) {
  const bool bf16 = s.bf16;
  [[maybe_unused]] const cuda::CudnnConvMath math{.tf32 = s.tf32, .deterministic = s.deterministic};
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
    TCN_CUDA_OP("conv1d", plan = cuda::cudnn_conv_forward(y, xc, wk, geo.left, geo.d, b.defined() ? 1.0 : 0.0, math));
  } else {
    Tensor yb = empty({geo.B, Lout, geo.Cout}, {op_dtype, x.device()});
    TCN_CUDA_OP("conv1d", plan = cuda::cudnn_conv_forward(yb, xc, wk, geo.left, geo.d, 0.0, math));
    y = yb.to(x.dtype());
    if (b.defined()) add_(y, b);
  }
  return {y.narrow(1, 0, geo.L), std::bind_front(conv1d_cudnn_backward, CudnnSaved{geo, xc, wk, plan, Lout, x.dtype()})};
}

// Why cuDNN cannot take this conv ("" when it can).
static std::string cudnn_refusal(const ConvRows& geo, const Tensor& x) {
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
static ConvImpl conv1d_auto(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b,
                            const ConvSettings& s) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>,
                  ConvImpl>
      chosen;
  const auto key = std::tuple{x.device().index, geo.B, geo.L, geo.Cin, geo.Cout, geo.K, geo.d, geo.left,
                              s.bf16, s.tf32, s.deterministic};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  if (s.capturing) return ConvImpl::Gemm;

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
    Tensor y, dx, dw, db;
  };
  Generator own(20261205);  // not the default generator: choosing must not move the run's random stream
  Tensor dy = rand({geo.B, geo.L, geo.Cout}, x.options(), own);
  auto run = [&](ConvOut (*impl)(const ConvRows&, const Tensor&, const Tensor&, const Tensor&, const ConvSettings&)) {
    Run r;
    cuda::EventTimer timer(x.device().index);
    for (int rep = 0; rep < 4; ++rep) {
      const int32_t start = timer.mark();
      ConvOut out = impl(geo, x, w, b, s);
      ConvGrads g = out.backward(dy, true, true, b.defined());
      const int32_t end = timer.mark();
      if (rep == 0) continue;  // warm-up
      r.y = out.y, r.dx = g.dx, r.dw = g.dw, r.db = g.db;
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
  const double tol = s.bf16 || s.tf32 ? 2e-2 : 1e-3;
  double worst = 0;
  for (auto [a, c] : {std::pair{gemm_run.y, cudnn_run.y}, {gemm_run.dx, cudnn_run.dx}, {gemm_run.dw, cudnn_run.dw},
                      {gemm_run.db, cudnn_run.db}}) {
    if (!a.defined()) continue;  // no bias
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

ConvSettings conv_settings(const Tensor& x) {
  return ConvSettings{.bf16 = autocast_bf16(x),
                      .tf32 = autocast_tf32(),
                      .impl = cuda_backends().conv,
                      .deterministic = cudnn_conv_deterministic(),
                      .capturing = StepGraph::capturing() != nullptr};
}

// Which path runs this call.
ConvImpl conv1d_impl(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s) {
  const ConvImpl setting = s.impl;
  if (setting == ConvImpl::Winograd) {
    TCN_CHECK(!x.device().is_cuda(), "conv1d: --conv_impl winograd runs on the CPU only; use gemm, cudnn or auto on CUDA");
    return winograd_tile(geo.K, s.bf16) > 0 ? ConvImpl::Winograd : ConvImpl::Gemm;
  }
  if (!x.device().is_cuda())  // the CPU: auto takes the Winograd path where it is the faster
    return setting == ConvImpl::Auto && winograd_pays(geo, s.bf16) ? ConvImpl::Winograd : ConvImpl::Gemm;
  if (setting == ConvImpl::Gemm) return ConvImpl::Gemm;
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
  return conv1d_auto(geo, x, w, b, s);
}

}  // namespace tcn::conv1d_paths
