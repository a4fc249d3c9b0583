// conv1d on cuDNN (the op's side: ops/conv1d_cudnn.cpp; the library: cudnn.cu).
//
// The legacy cudnnConvolution* API (deprecated in cuDNN 9 in favour of the
// graph API, still shipped and what our shapes need): a conv1d over [B, L, C]
// is a 2-D NHWC convolution with H = 1, W = L, symmetric zero padding `pad` on
// W (the op narrows the output to its first L rows, the causal chomp), and the
// filter in KRSC layout [Cout, 1, K, Cin]. Without cuDNN (TCN_WITH_CUDNN=0)
// this file is empty: cudnn.cu's entry points say why.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "cuda/context.cuh"
#include "cuda/cudnn.h"
#include "core/devices.h"
#include "core/tensor.h"
#include "cuda/cudnn_lib.cuh"

#if TCN_WITH_CUDNN
namespace tcn::cuda {

namespace {
using namespace cudnn_lib;

// ---- convolutions ---------------------------------------------------------------------------------
// Strict FP32 means FMA kernels only; TF32 lets float32 use tensor cores;
// bfloat16 asks for them.
cudnnMathType_t conv_math(DType d, bool tf32) {
  if (d == DType::BF16) return CUDNN_TENSOR_OP_MATH;
  return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

constexpr size_t kWorkspaceCap = size_t{256} << 20;  // most scratch memory an algorithm may ask for

struct ConvKey {
  int device;
  DType dtype;
  cudnnMathType_t math;
  bool deterministic;
  int64_t B, L, Cin, Cout, K, pad, dilation;
  auto tie() const { return std::tie(device, dtype, math, deterministic, B, L, Cin, Cout, K, pad, dilation); }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

template <class Algo>
struct Chosen {
  Algo algo{};
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// A shape's descriptors and its three algorithms, made once.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int64_t Lout = 0;
  std::string where;  // the shapes, for errors
  Chosen<cudnnConvolutionFwdAlgo_t> fwd;
  Chosen<cudnnConvolutionBwdDataAlgo_t> bwd_data;
  Chosen<cudnnConvolutionBwdFilterAlgo_t> bwd_filter;
};

// The fastest result that succeeded, fits the workspace cap, is deterministic
// when that is asked for and uses FMA kernels when strict FP32 is. Find* lists
// its results fastest first.
template <class Perf, class Algo>
Chosen<Algo> pick(const Perf* perf, int n, const ConvKey& k, const std::string& where, const char* pass) {
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceCap) continue;
    if (k.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (k.math == CUDNN_FMA_MATH && p.mathType != CUDNN_FMA_MATH) continue;
    if (k.dtype == DType::F32 && p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;  // no fp16 rounding
    return Chosen<Algo>{p.algo, p.mathType, p.memory};
  }
  TCN_FAIL("cuDNN has no ", pass, " algorithm for ", where, " (", n, " tried", k.deterministic ? ", deterministic only" : "",
           k.math == CUDNN_FMA_MATH ? ", FMA math only" : "", ", workspace <= 256 MiB)");
}

ConvPlan& conv_plan(const ConvKey& k, const Tensor& x, const Tensor& w) {
  static std::mutex mu;
  static std::map<ConvKey, std::unique_ptr<ConvPlan>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(k);
  if (it != plans.end()) return *it->second;

  auto p = std::make_unique<ConvPlan>();
  p->where = describe("conv1d x [", k.B, ", ", k.L, ", ", k.Cin, "] w [", k.Cout, ", ", k.K, ", ", k.Cin, "] pad ", k.pad,
                      " dilation ", k.dilation, " ", dtype_name(k.dtype));
  const std::string& where = p->where;
  TCN_CHECK(!capturing(k.device), "cuDNN: the algorithm search for ", where,
            " cannot run inside a CUDA graph capture (run the shape once eagerly first)");
  const CudnnApi& a = dnn();
  const cudnnHandle_t h = handle(k.device);
  const cudnnDataType_t dt = data_type(k.dtype);
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(where, a.cudnnCreateTensorDescriptor(&p->x));
  CUDNN_CHECK(where, a.cudnnCreateTensorDescriptor(&p->y));
  CUDNN_CHECK(where, a.cudnnCreateFilterDescriptor(&p->w));
  CUDNN_CHECK(where, a.cudnnCreateConvolutionDescriptor(&p->conv));
  CUDNN_CHECK(where, a.cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, dt, i32(k.B), i32(k.Cin), 1, i32(k.L)));
  CUDNN_CHECK(where, a.cudnnSetFilter4dDescriptor(p->w, dt, CUDNN_TENSOR_NHWC, i32(k.Cout), i32(k.Cin), 1, i32(k.K)));
  CUDNN_CHECK(where, a.cudnnSetConvolution2dDescriptor(p->conv, 0, i32(k.pad), 1, 1, 1, i32(k.dilation),
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(where, a.cudnnSetConvolutionMathType(p->conv, k.math));
  int n = 0, c = 0, hh = 0, ww = 0;
  CUDNN_CHECK(where, a.cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &c, &hh, &ww));
  p->Lout = k.L + 2 * k.pad - (k.K - 1) * k.dilation;
  TCN_CHECK(n == k.B && c == k.Cout && hh == 1 && ww == p->Lout, "cuDNN: ", where, ": output [", n, ", ", c, ", ", hh,
            ", ", ww, "], expected [", k.B, ", ", k.Cout, ", 1, ", p->Lout, "]");
  CUDNN_CHECK(where, a.cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, dt, i32(k.B), i32(k.Cout), 1, i32(p->Lout)));

  // Time every algorithm on scratch outputs (x and w are the real inputs; dy is
  // the scratch y, zeroed) with a workspace of the cap.
  const Tensor ws = scratch(kWorkspaceCap, k.device);
  const Tensor y = zeros({k.B, p->Lout, k.Cout}, {k.dtype, x.device()});
  const Tensor dx = empty({k.B, k.L, k.Cin}, {k.dtype, x.device()});
  const Tensor dw = empty({k.Cout, k.K, k.Cin}, {k.dtype, x.device()});
  int found = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(where, a.cudnnFindConvolutionForwardAlgorithmEx(h, p->x, x.raw_data(), p->w, w.raw_data(), p->conv,
                                                                p->y, y.raw_data(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                &found, perf, ws.raw_data(), kWorkspaceCap));
    p->fwd = pick<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(perf, found, k, where, "forward");
  }
  CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, static_cast<size_t>(y.numel()) * dtype_size(y.dtype()),
                             stream(k.device)));
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(where, a.cudnnFindConvolutionBackwardDataAlgorithmEx(
                           h, p->w, w.raw_data(), p->y, y.raw_data(), p->conv, p->x, dx.raw_data(),
                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf, ws.raw_data(), kWorkspaceCap));
    p->bwd_data =
        pick<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(perf, found, k, where, "backward-data");
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(where, a.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                           h, p->x, x.raw_data(), p->y, y.raw_data(), p->conv, p->w, dw.raw_data(),
                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf, ws.raw_data(), kWorkspaceCap));
    p->bwd_filter = pick<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(perf, found, k, where,
                                                                                              "backward-filter");
  }
  ConvPlan& ref = *p;
  plans.emplace(k, std::move(p));
  return ref;
}

ConvKey conv_key(const Tensor& x, int64_t Cout, int64_t K, int64_t pad, int64_t dilation, CudnnConvMath m) {
  return ConvKey{x.device().index, x.dtype(), conv_math(x.dtype(), m.tf32), m.deterministic,
                 x.size(0),        x.size(1), x.size(2),           Cout,
                 K,                pad,       dilation};
}

// alpha and beta as cuDNN wants them: float for float and bfloat16 data.
struct Scale {
  float alpha, beta;
};

}  // namespace

CudnnConvPlan cudnn_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, int64_t pad, int64_t dilation,
                                 double beta, CudnnConvMath math) {
  const ConvKey k = conv_key(x, w.size(0), w.size(1), pad, dilation, math);
  ConvPlan& p = conv_plan(k, x, w);
  const Tensor ws = p.fwd.workspace ? scratch(p.fwd.workspace, k.device) : Tensor();
  const Scale s{1.0f, static_cast<float>(beta)};
  CUDNN_CHECK(p.where, dnn().cudnnSetConvolutionMathType(p.conv, p.fwd.math));
  CUDNN_CHECK(p.where, dnn().cudnnConvolutionForward(handle(k.device), &s.alpha, p.x, x.raw_data(), p.w, w.raw_data(),
                                                      p.conv, p.fwd.algo, ws.defined() ? ws.raw_data() : nullptr,
                                                      p.fwd.workspace, &s.beta, p.y, y.raw_data()));
  return &p;
}

void cudnn_conv_backward_data(CudnnConvPlan plan, const Tensor& dx, const Tensor& dy, const Tensor& w) {
  TCN_CHECK(plan != nullptr, "cuDNN conv backward without its forward's plan");
  const ConvPlan& p = *static_cast<const ConvPlan*>(plan);
  const int device = dx.device().index;
  const Tensor ws = p.bwd_data.workspace ? scratch(p.bwd_data.workspace, device) : Tensor();
  const Scale s{1.0f, 0.0f};
  CUDNN_CHECK(p.where, dnn().cudnnSetConvolutionMathType(p.conv, p.bwd_data.math));
  CUDNN_CHECK(p.where, dnn().cudnnConvolutionBackwardData(handle(device), &s.alpha, p.w, w.raw_data(), p.y,
                                                           dy.raw_data(), p.conv, p.bwd_data.algo,
                                                           ws.defined() ? ws.raw_data() : nullptr, p.bwd_data.workspace,
                                                           &s.beta, p.x, dx.raw_data()));
}

void cudnn_conv_backward_filter(CudnnConvPlan plan, const Tensor& dw, const Tensor& x, const Tensor& dy) {
  TCN_CHECK(plan != nullptr, "cuDNN conv backward without its forward's plan");
  const ConvPlan& p = *static_cast<const ConvPlan*>(plan);
  const int device = x.device().index;
  const Tensor ws = p.bwd_filter.workspace ? scratch(p.bwd_filter.workspace, device) : Tensor();
  const Scale s{1.0f, 0.0f};
  CUDNN_CHECK(p.where, dnn().cudnnSetConvolutionMathType(p.conv, p.bwd_filter.math));
  CUDNN_CHECK(p.where, dnn().cudnnConvolutionBackwardFilter(handle(device), &s.alpha, p.x, x.raw_data(), p.y,
                                                             dy.raw_data(), p.conv, p.bwd_filter.algo,
                                                             ws.defined() ? ws.raw_data() : nullptr,
                                                             p.bwd_filter.workspace, &s.beta, p.w, dw.raw_data()));
}

}  // namespace tcn::cuda
#endif  // TCN_WITH_CUDNN
