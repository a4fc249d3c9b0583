// bench_conv: one causal dilated conv layer of the reference TCN, forward +
// backward-data + backward-weights, three ways in one run:
//   gemm     - ops/conv1d.cpp: one GEMM per tap over the padded row space, on the
//              CPU GEMM library in use (oneDNN matmul by default), through the op
//              and its autograd node (padding copies and the bias gradient included);
//   winograd - ops/conv1d_winograd.cpp: F(m, K) on each dilation phase, the same
//              GEMM library, through the same op (--conv_impl winograd);
//   oneDNN convolution primitive - NWC activations, weights in the layout the
//              primitive prefers (reordered once, outside the timing), left padding,
//              dilation; the three primitives created once, outside the timing.
// gemm and winograd alternate, call by call; their medians and the spread of the
// per-round ratio are printed. Float32, or bf16 with --precision bf16 (bf16
// operands, f32 outputs for all).
//
//   build/bench_conv --threads 2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/autocast.h"
#include "core/backends.h"
#include "core/threads.h"
#include "ops/conv1d_paths.h"
#include "ops/ops.h"

#if TCN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

using namespace tcn;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double best_ms(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    f();
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r > 0) best = std::min(best, t);  // the first call warms up
  }
  return best;
}

#if TCN_WITH_ONEDNN
// Forward + backward data + backward weights with oneDNN's convolution primitives.
double onednn_conv_ms(int64_t B, int64_t T, int64_t Cin, int64_t Cout, int64_t K, int64_t d, bool bf16, int reps) {
  using namespace dnnl;
  using tag = memory::format_tag;
  const memory::data_type in = bf16 ? memory::data_type::bf16 : memory::data_type::f32, f32 = memory::data_type::f32;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const int64_t pad = (K - 1) * d;
  memory::desc src({B, Cin, T}, in, tag::nwc), dst({B, Cout, T}, in, tag::nwc), dst_f32({B, Cout, T}, f32, tag::nwc);
  memory::desc wei_any({Cout, Cin, K}, in, tag::any), bias({Cout}, f32, tag::a);
  const memory::dims strides{1}, dil{d - 1}, pl{pad}, pr{0};
  // Forward writes f32 (as tcn's bf16 GEMMs do); backward reads bf16 gradients in bf16 mode.
  convolution_forward::primitive_desc fwd(
      {prop_kind::forward_training, algorithm::convolution_direct, src, wei_any, bias, dst_f32, strides, dil, pl, pr},
      eng);
  convolution_backward_data::primitive_desc bwd_data(
      {algorithm::convolution_direct, memory::desc({B, Cin, T}, f32, tag::nwc), wei_any, dst, strides, dil, pl, pr},
      eng, fwd);
  convolution_backward_weights::primitive_desc bwd_w(
      {algorithm::convolution_direct, src, memory::desc({Cout, Cin, K}, f32, tag::any), bias, dst, strides, dil, pl,
       pr},
      eng, fwd);
  memory x(src, eng), w(fwd.weights_desc(), eng), b(bias, eng), y(dst_f32, eng), dy(dst, eng);
  memory dx(bwd_data.diff_src_desc(), eng), wb(bwd_data.weights_desc(), eng);
  memory dw(bwd_w.diff_weights_desc(), eng), db(bias, eng);
  convolution_forward pf(fwd);
  convolution_backward_data pd(bwd_data);
  convolution_backward_weights pw(bwd_w);
  return best_ms(reps, [&] {
    pf.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    pd.execute(s, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DIFF_SRC, dx}});
    pw.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}});
    s.wait();
  });
}
#endif

// gemm and winograd alternating, and oneDNN's primitive, at dilations 1, 2, 4.
void time_table(int64_t B, int64_t T, int64_t C, int64_t K, bool bf16, int reps) {
  std::printf("| dilation | gemm ms (median) | winograd ms (median) | winograd / gemm (median, range) | oneDNN "
              "convolution ms | oneDNN / gemm |\n|---|---|---|---|---|---|\n");
  Generator gen(3);
  for (int64_t d : {1, 2, 4}) {
    Tensor x = rand({B, T, C}, {DType::F32}, gen).requires_grad_();
    Tensor w = rand({C, C, K}, {DType::F32}, gen).requires_grad_();
    Tensor b = rand({C}, {DType::F32}, gen).requires_grad_();
    Tensor g = rand({B, T, C}, {DType::F32}, gen);
    auto step_ms = [&](ConvImpl impl) {
      const BackendsScope on(with_conv(impl));
      const auto t0 = Clock::now();
      Tensor y;
      {
        const Autocast scope(bf16 ? Precision::BF16 : Precision::FP32);
        y = conv1d(x, w, b, d, (K - 1) * d);
      }
      autograd::backward(y, g);
      x.set_grad(Tensor()), w.set_grad(Tensor()), b.set_grad(Tensor());
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    std::vector<double> gemm, wino, ratio;
    for (int r = 0; r <= reps; ++r) {  // round 0 warms both up
      const double tg = step_ms(ConvImpl::Gemm), tw = step_ms(ConvImpl::Winograd);
      if (r == 0) continue;
      gemm.push_back(tg), wino.push_back(tw), ratio.push_back(tw / tg);
    }
    const double ours = median(gemm);
    char cells[160];
    std::snprintf(cells, sizeof cells, "| %lld | %.1f | %.1f | %.2f (%.2f-%.2f) |", static_cast<long long>(d), ours,
                  median(wino), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()));
#if TCN_WITH_ONEDNN
    const double dnnl = onednn_conv_ms(B, T, C, C, K, d, bf16, reps);
    std::printf("%s %.1f | %.2f |\n", cells, dnnl, dnnl / ours);
#else
    std::printf("%s - (no oneDNN in this build) | - |\n", cells);
#endif
    std::fflush(stdout);
  }
}

// Largest |a - ref| over the largest |ref|.
double scaled_err(const Tensor& a, const Tensor& ref) {
  const auto va = a.contiguous().to(DType::F64).to_vector<double>(), vr = ref.contiguous().to_vector<double>();
  double big = 0, diff = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    big = std::max(big, std::abs(vr[i]));
    diff = std::max(diff, std::abs(va[i] - vr[i]));
  }
  return diff / big;
}

// The Winograd path's error per tile and precision against the GEMM path in float64:
// y, dx, dw and db, each as its largest error over its largest value.
void accuracy_table(int64_t B, int64_t T, int64_t C, int64_t K) {
  using namespace conv1d_paths;
  std::printf("| tile | operands | dilation | y | dx | dw | db |\n|---|---|---|---|---|---|---|\n");
  Generator gen(4);
  for (int64_t d : {1, 2, 4}) {
    const ConvRows geo(B, T, C, C, K, d, (K - 1) * d);
    // Uniform in [-1, 1), the weights scaled as an initialised layer's (PyTorch's bound 1/sqrt(C K)).
    const auto uniform = [&](const Shape& shape, double bound) { return (rand(shape, {DType::F32}, gen) * 2.0 - 1.0) * bound; };
    const Tensor x = uniform({B, T, C}, 1.0), w = uniform({C, C, K}, 1.0 / std::sqrt(static_cast<double>(C * K)));
    const Tensor b = uniform({C}, 1.0), dy = uniform({B, T, C}, 1.0);
    const auto f64 = [](const Tensor& t) { return t.to(DType::F64); };
    const ConvOut ref = conv1d_gemm(geo, f64(x), f64(w), f64(b), ConvSettings{});
    const ConvGrads rg = ref.backward(f64(dy), true, true, true);
    for (const bool bf16 : {false, true})
      for (int64_t m : {2, 4, 6}) {
        ConvSettings s;
        s.bf16 = bf16;
        const ConvOut out = conv1d_winograd_tiled(geo, x, w, b, s, m);
        const ConvGrads g = out.backward(dy, true, true, true);
        std::printf("| F(%lld, %lld) | %s | %lld | %.1e | %.1e | %.1e | %.1e |\n", static_cast<long long>(m),
                    static_cast<long long>(K), bf16 ? "bf16" : "fp32", static_cast<long long>(d),
                    scaled_err(out.y, ref.y), scaled_err(g.dx, rg.dx), scaled_err(g.dw, rg.dw), scaled_err(g.db, rg.db));
        std::fflush(stdout);
      }
    // The GEMM path itself in float32 and with bf16 operands, for scale.
    for (const bool bf16 : {false, true}) {
      ConvSettings s;
      s.bf16 = bf16;
      const ConvOut out = conv1d_gemm(geo, x, w, b, s);
      const ConvGrads g = out.backward(dy, true, true, true);
      std::printf("| gemm path | %s | %lld | %.1e | %.1e | %.1e | %.1e |\n", bf16 ? "bf16" : "fp32",
                  static_cast<long long>(d), scaled_err(out.y, ref.y), scaled_err(g.dx, rg.dx),
                  scaled_err(g.dw, rg.dw), scaled_err(g.db, rg.db));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One TCN conv layer (forward + both backwards): tcn's GEMM and Winograd paths vs oneDNN's convolution"};
  int threads = 2, reps = 3;
  int64_t B = 32, T = 400, C = 450, K = 3;
  std::string precision = "fp32";
  bool accuracy = false;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--reps", reps, "timed rounds (medians and the ratio's range are printed)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--batch_size", B, "batch")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--seq_len", T, "positions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--channels", C, "in = out channels")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  app.add_flag("--accuracy", accuracy,
               "instead of timing: the Winograd path's error per tile (2, 4, 6) and operand precision against the GEMM "
               "path in float64, with the GEMM path's own for scale");
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    std::printf("bench_conv: batch %lld x %lld positions, %lld -> %lld channels, kernel %lld, %s, %d threads\n\n",
                static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C),
                static_cast<long long>(C), static_cast<long long>(K), accuracy ? "accuracy" : precision.c_str(),
                threads);
    if (accuracy) accuracy_table(B, T, C, K);
    else time_table(B, T, C, K, precision == "bf16", reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
