// cuDNN under conv1d and the LSTM layer (declarations and contracts: cuda/cudnn.h).
//
// Built only by nvcc with cudnn.h present (TCN_WITH_CUDNN=1); otherwise every
// entry point says why cuDNN is unavailable. cuDNN is reached through a table
// of function pointers filled from libcudnn.so.9 at first use, so nothing is
// linked and a program that never asks for cuDNN never loads it.
//
// Convolutions use the legacy cudnnConvolution* API (deprecated in cuDNN 9 in
// favour of the graph API, still shipped and what our shapes need): a conv1d
// over [B, L, C] is a 2-D NHWC convolution with H = 1, W = L, symmetric zero
// padding `pad` on W (the op narrows the output to its first L rows, the causal
// chomp), and the filter in KRSC layout [Cout, 1, K, Cin].
//
// The LSTM uses the v8 RNN API with one layer per call (the module stacks
// layers and applies its own dropout between them, so masks equal the CPU's),
// batch-major unpacked data ([B, T, *], every sequence of length T).
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "tcn/core/autocast.h"
#include "tcn/core/backends.h"
#include "tcn/core/step_graph.h"
#include "tcn/cuda/context.cuh"
#include "tcn/cuda/cudnn.h"
#include "tcn/cuda/runtime.h"
#include "tcn/ops/ops.h"

#if TCN_WITH_CUDNN
#include <cudnn.h>
#endif

namespace tcn::cuda {

namespace {
constexpr const char* kEmulated = "the emulated CUDA device has no cuDNN (its paths run on a real GPU only)";
}  // namespace

#if !TCN_WITH_CUDNN

std::string cudnn_unavailable_reason() {
#ifdef TCN_CUDA_EMU
  return kEmulated;
#else
  return "tcn was built without cuDNN (cudnn.h was not found at configure time)";
#endif
}
int64_t cudnn_version() { return 0; }

namespace {
[[noreturn]] void no_cudnn(const char* what) { TCN_FAIL(what, ": cuDNN is unavailable: ", cudnn_unavailable_reason()); }
}  // namespace

CudnnConvPlan cudnn_conv_forward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, double) {
  no_cudnn("conv1d on cuDNN");
}
void cudnn_conv_backward_data(CudnnConvPlan, const Tensor&, const Tensor&, const Tensor&) { no_cudnn("conv1d on cuDNN"); }
void cudnn_conv_backward_filter(CudnnConvPlan, const Tensor&, const Tensor&, const Tensor&) {
  no_cudnn("conv1d on cuDNN");
}
CudnnLstmSaved cudnn_lstm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) {
  no_cudnn("LSTM on cuDNN");
}
void cudnn_lstm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const CudnnLstmSaved&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cudnn("LSTM on cuDNN");
}

#else  // TCN_WITH_CUDNN

namespace {

// ---- the library ---------------------------------------------------------------------------------
// Every cuDNN function tcn calls, looked up by name in libcudnn.so.9 (which
// forwards to cuDNN's sub-libraries). The signatures come from cudnn.h.
#define TCN_CUDNN_FUNCTIONS(X)                                                                                 \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream)                                    \
  X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensor4dDescriptor)                 \
  X(cudnnSetTensorNdDescriptor) X(cudnnGetTensorNdDescriptor) X(cudnnCreateFilterDescriptor)                   \
  X(cudnnSetFilter4dDescriptor) X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor)          \
  X(cudnnSetConvolutionMathType) X(cudnnGetConvolution2dForwardOutputDim)                                       \
  X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnFindConvolutionBackwardDataAlgorithmEx)                      \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx) X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData)   \
  X(cudnnConvolutionBackwardFilter) X(cudnnCreateDropoutDescriptor) X(cudnnSetDropoutDescriptor)                \
  X(cudnnCreateRNNDescriptor) X(cudnnSetRNNDescriptor_v8) X(cudnnGetRNNWeightSpaceSize)                         \
  X(cudnnGetRNNWeightParams) X(cudnnGetRNNTempSpaceSizes) X(cudnnCreateRNNDataDescriptor)                       \
  X(cudnnSetRNNDataDescriptor) X(cudnnRNNForward) X(cudnnRNNBackwardData_v8) X(cudnnRNNBackwardWeights_v8)

struct CudnnApi {
#define TCN_CUDNN_MEMBER(f) decltype(&::f) f = nullptr;
  TCN_CUDNN_FUNCTIONS(TCN_CUDNN_MEMBER)
#undef TCN_CUDNN_MEMBER
};

struct Loaded {
  CudnnApi api;
  std::string error;  // why it could not be loaded ("" when it was)
  int64_t version = 0;
};

// libcudnn.so.9 from TCN_CUDNN_LIBRARY (a path) if set, else by the loader's search
// (LD_LIBRARY_PATH, the system's folders; tools/device_check.sh points it at
// PyTorch's nvidia-cudnn wheel on the device machine).
const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    const char* env = std::getenv("TCN_CUDNN_LIBRARY");
    const std::string name = env && *env ? env : "libcudnn.so.9";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* e = dlerror();
      r.error = "cannot load " + name + " (" + (e ? e : "?") +
                "); install cuDNN 9 or put its folder on LD_LIBRARY_PATH (or set TCN_CUDNN_LIBRARY to the file)";
      return r;
    }
#define TCN_CUDNN_LOOKUP(f)                                                             \
  r.api.f = reinterpret_cast<decltype(&::f)>(dlsym(lib, #f));                           \
  if (!r.api.f && r.error.empty()) r.error = name + " has no " #f " (cuDNN 9 is needed)";
    TCN_CUDNN_FUNCTIONS(TCN_CUDNN_LOOKUP)
#undef TCN_CUDNN_LOOKUP
    if (!r.error.empty()) return r;
    r.version = static_cast<int64_t>(r.api.cudnnGetVersion());
    if (r.version / 10000 != 9)
      r.error = name + " is cuDNN " + std::to_string(r.version) + "; tcn was compiled against cuDNN " +
                std::to_string(CUDNN_VERSION) + " and needs major version 9";
    return r;
  }();
  return l;
}

const CudnnApi& dnn() {
  const Loaded& l = loaded();
  TCN_CHECK(l.error.empty(), "cuDNN: ", l.error);
  return l.api;
}

// A failing call throws, naming the call, cuDNN's status and `where` (the
// layer and its shapes).
#define CUDNN_CHECK(where, call)                                                                              \
  do {                                                                                                        \
    const cudnnStatus_t st_ = (call);                                                                         \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                                          \
      TCN_FAIL("cuDNN error: ", dnn().cudnnGetErrorString(st_), " in ", #call, " for ", (where), " at ", __FILE__, \
               ":", __LINE__);                                                                                \
  } while (0)

// One cuDNN handle per device, bound to tcn's stream of that device.
cudnnHandle_t handle(int device) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) {
    CUDA_CHECK(cudaSetDevice(device));
    return it->second;
  }
  cudaStream_t s = stream(device);  // makes the device current
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK("a handle on cuda:" + std::to_string(device), dnn().cudnnCreate(&h));
  CUDNN_CHECK("a handle on cuda:" + std::to_string(device), dnn().cudnnSetStream(h, s));
  handles[device] = h;
  return h;
}

cudnnDataType_t data_type(DType d) {
  if (d == DType::F32) return CUDNN_DATA_FLOAT;
  if (d == DType::BF16) return CUDNN_DATA_BFLOAT16;
  TCN_FAIL("cuDNN paths take float32 or bfloat16 tensors, got ", d);
}

// A device buffer of at least `bytes` from tcn's allocator (so it is stream-ordered
// and comes from a captured step's private pool), as a float32 tensor.
Tensor scratch(size_t bytes, int device) {
  return empty({static_cast<int64_t>((bytes + 3) / 4)}, {DType::F32, Device::cuda(device)});
}

bool capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream(device), &st));
  return st != cudaStreamCaptureStatusNone;
}

template <class... A>
std::string describe(const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// ---- convolutions ---------------------------------------------------------------------------------
// Strict FP32 means FMA kernels only; TF32 (as cuBLAS decides it: tf32_allowed())
// lets float32 use tensor cores; bfloat16 asks for them.
cudnnMathType_t conv_math(DType d) {
  if (d == DType::BF16) return CUDNN_TENSOR_OP_MATH;
  return tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
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
  zero_(y);
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

ConvKey conv_key(const Tensor& x, int64_t Cout, int64_t K, int64_t pad, int64_t dilation) {
  return ConvKey{x.device().index, x.dtype(), conv_math(x.dtype()), cudnn_conv_deterministic(),
                 x.size(0),        x.size(1), x.size(2),           Cout,
                 K,                pad,       dilation};
}

// alpha and beta as cuDNN wants them: float for float and bfloat16 data.
struct Scale {
  float alpha, beta;
};

// ---- the LSTM -------------------------------------------------------------------------------------
struct LstmKey {
  int device;
  cudnnMathType_t math;
  int64_t B, T, I, H;
  auto tie() const { return std::tie(device, math, B, T, I, H); }
  bool operator<(const LstmKey& o) const { return tie() < o.tie(); }
};

// Which of our four parameters a piece of the weight space comes from.
enum class LstmParam { WIh, WHh, BIh, BHh };
struct WeightPiece {
  size_t space_offset;  // bytes into cuDNN's weight space
  LstmParam param;
  size_t param_offset;  // bytes into our (contiguous) parameter
  size_t bytes;
};

struct LstmPlan {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;  // hx, hy, cx, cy: [1, B, H]
  size_t weight_bytes = 0, work_train = 0, reserve_train = 0, work_infer = 0, reserve_infer = 0;
  Tensor seq_lengths;  // int32 [B], every one T, on the device (devSeqLengths)
  std::vector<WeightPiece> pieces;
  std::string where;
};

// Where each gate's matrix and bias sit in the weight space: cuDNN's linear
// layers 0-3 are the input matrices of gates i, f, g, o (PyTorch's order, so
// rows [g*H, (g+1)*H) of weight_ih), 4-7 the recurrent ones. Adjacent pieces are
// merged, so the copies are few when cuDNN lays the gates out one after another.
std::vector<WeightPiece> weight_pieces(const CudnnApi& a, cudnnHandle_t h, const LstmPlan& p, const LstmKey& k,
                                       const Tensor& space) {
  cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
  CUDNN_CHECK(p.where, a.cudnnCreateTensorDescriptor(&md));
  CUDNN_CHECK(p.where, a.cudnnCreateTensorDescriptor(&bd));
  auto numel = [&](cudnnTensorDescriptor_t d) {
    cudnnDataType_t dt;
    int nb = 0, dims[8] = {}, strides[8] = {};
    CUDNN_CHECK(p.where, a.cudnnGetTensorNdDescriptor(d, 8, &dt, &nb, dims, strides));
    int64_t n = 1;
    for (int i = 0; i < nb; ++i) n *= dims[i];
    return n;
  };
  const char* base = static_cast<const char*>(space.raw_data());
  std::vector<WeightPiece> pieces;
  auto add = [&](const void* at, LstmParam param, int64_t offset, int64_t count) {
    const size_t off = static_cast<size_t>(static_cast<const char*>(at) - base), bytes = count * sizeof(float);
    const size_t poff = offset * sizeof(float);
    if (!pieces.empty()) {
      WeightPiece& last = pieces.back();
      if (last.param == param && last.space_offset + last.bytes == off && last.param_offset + last.bytes == poff) {
        last.bytes += bytes;
        return;
      }
    }
    pieces.push_back({off, param, poff, bytes});
  };
  void* bias_at[8] = {};
  for (int id = 0; id < 8; ++id) {
    const bool input = id < 4;
    const int64_t gate = id % 4, cols = input ? k.I : k.H;
    void* m = nullptr;
    CUDNN_CHECK(p.where,
                a.cudnnGetRNNWeightParams(h, p.rnn, 0, p.weight_bytes, space.raw_data(), id, md, &m, bd, &bias_at[id]));
    TCN_CHECK(m && bias_at[id] && numel(md) == k.H * cols && numel(bd) == k.H, "cuDNN: ", p.where, ": linear layer ",
              id, " has a matrix of ", numel(md), " and a bias of ", numel(bd), " elements, expected ", k.H * cols,
              " and ", k.H);
    add(m, input ? LstmParam::WIh : LstmParam::WHh, gate * k.H * cols, k.H * cols);
  }
  // The biases after the matrices, so that each kind merges with its own.
  for (int id = 0; id < 8; ++id) add(bias_at[id], id < 4 ? LstmParam::BIh : LstmParam::BHh, (id % 4) * k.H, k.H);
  CUDNN_CHECK(p.where, a.cudnnDestroyTensorDescriptor(md));
  CUDNN_CHECK(p.where, a.cudnnDestroyTensorDescriptor(bd));
  return pieces;
}

LstmPlan& lstm_plan(const LstmKey& k) {
  static std::mutex mu;
  static std::map<LstmKey, std::unique_ptr<LstmPlan>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(k);
  if (it != plans.end()) return *it->second;

  auto p = std::make_unique<LstmPlan>();
  p->where = describe("LSTM layer x [", k.B, ", ", k.T, ", ", k.I, "] hidden ", k.H);
  const std::string& where = p->where;
  TCN_CHECK(!capturing(k.device), "cuDNN: the setup of ", where,
            " cannot run inside a CUDA graph capture (run the shape once eagerly first)");
  const CudnnApi& a = dnn();
  const cudnnHandle_t h = handle(k.device);
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(where, a.cudnnCreateDropoutDescriptor(&p->dropout));
  CUDNN_CHECK(where, a.cudnnSetDropoutDescriptor(p->dropout, h, 0.0f, nullptr, 0, 0));  // one layer: no dropout
  CUDNN_CHECK(where, a.cudnnCreateRNNDescriptor(&p->rnn));
  CUDNN_CHECK(where, a.cudnnSetRNNDescriptor_v8(p->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                                CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                CUDNN_DATA_FLOAT, k.math, i32(k.I), i32(k.H), i32(k.H), 1, p->dropout,
                                                CUDNN_RNN_PADDED_IO_ENABLED));
  const std::vector<int> lengths(k.B, i32(k.T));
  float fill = 0.0f;
  CUDNN_CHECK(where, a.cudnnCreateRNNDataDescriptor(&p->x));
  CUDNN_CHECK(where, a.cudnnCreateRNNDataDescriptor(&p->y));
  CUDNN_CHECK(where, a.cudnnSetRNNDataDescriptor(p->x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 i32(k.T), i32(k.B), i32(k.I), lengths.data(), &fill));
  CUDNN_CHECK(where, a.cudnnSetRNNDataDescriptor(p->y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 i32(k.T), i32(k.B), i32(k.H), lengths.data(), &fill));
  const int dims[3] = {1, i32(k.B), i32(k.H)}, strides[3] = {i32(k.B * k.H), i32(k.H), 1};
  CUDNN_CHECK(where, a.cudnnCreateTensorDescriptor(&p->h));
  CUDNN_CHECK(where, a.cudnnSetTensorNdDescriptor(p->h, CUDNN_DATA_FLOAT, 3, dims, strides));
  CUDNN_CHECK(where, a.cudnnGetRNNWeightSpaceSize(h, p->rnn, &p->weight_bytes));
  CUDNN_CHECK(where, a.cudnnGetRNNTempSpaceSizes(h, p->rnn, CUDNN_FWD_MODE_TRAINING, p->x, &p->work_train,
                                                 &p->reserve_train));
  CUDNN_CHECK(where, a.cudnnGetRNNTempSpaceSizes(h, p->rnn, CUDNN_FWD_MODE_INFERENCE, p->x, &p->work_infer,
                                                 &p->reserve_infer));
  p->seq_lengths = scratch(k.B * sizeof(int32_t), k.device);
  copy_host_to_device(p->seq_lengths.raw_data(), lengths.data(), k.B * sizeof(int32_t));
  p->pieces = weight_pieces(a, h, *p, k, scratch(p->weight_bytes, k.device));
  LstmPlan& ref = *p;
  plans.emplace(k, std::move(p));
  return ref;
}

// Copies between our four parameters and cuDNN's weight space (to_space: into it).
void move_pieces(const LstmPlan& p, const Tensor& space, const Tensor (&params)[4], bool to_space) {
  const cudaStream_t st = stream(space.device().index);
  char* s = static_cast<char*>(space.raw_data());
  for (const WeightPiece& w : p.pieces) {
    char* in_space = s + w.space_offset;
    char* in_param = static_cast<char*>(params[static_cast<int>(w.param)].raw_data()) + w.param_offset;
    CUDA_CHECK(cudaMemcpyAsync(to_space ? in_space : in_param, to_space ? in_param : in_space, w.bytes,
                               cudaMemcpyDeviceToDevice, st));
  }
}

LstmKey lstm_key(const Tensor& x, int64_t H) {
  // TF32 tensor cores where cuBLAS would use them (tf32_allowed()); strict FP32
  // otherwise, under bf16 mixed precision too (as our fused layer's recurrence).
  return LstmKey{x.device().index, tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, x.size(0), x.size(1),
                 x.size(2), H};
}

}  // namespace

std::string cudnn_unavailable_reason() {
  if (emulated()) return kEmulated;
  if (!is_available()) return "no GPU: " + unavailable_reason();
  const Loaded& l = loaded();
  return l.error;
}

int64_t cudnn_version() { return loaded().error.empty() ? loaded().version : 0; }

CudnnConvPlan cudnn_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, int64_t pad, int64_t dilation,
                                 double beta) {
  const ConvKey k = conv_key(x, w.size(0), w.size(1), pad, dilation);
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

CudnnLstmSaved cudnn_lstm_forward(const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& x,
                                  const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                  const Tensor& hx, const Tensor& cx, bool training) {
  const LstmKey k = lstm_key(x, w_hh.size(1));
  LstmPlan& p = lstm_plan(k);
  CudnnLstmSaved saved;
  saved.plan = &p;
  saved.weights = scratch(p.weight_bytes, k.device);
  const Tensor params[4] = {w_ih, w_hh, b_ih, b_hh};
  move_pieces(p, saved.weights, params, true);
  const size_t work_bytes = training ? p.work_train : p.work_infer;
  const size_t reserve_bytes = training ? p.reserve_train : p.reserve_infer;
  const Tensor work = scratch(work_bytes, k.device);
  if (reserve_bytes) saved.reserve = scratch(reserve_bytes, k.device);
  CUDNN_CHECK(p.where,
              dnn().cudnnRNNForward(handle(k.device), p.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                    static_cast<const int32_t*>(p.seq_lengths.raw_data()), p.x, x.raw_data(), p.y,
                                    y.raw_data(), p.h, hx.raw_data(), hy.raw_data(), p.h, cx.raw_data(), cy.raw_data(),
                                    p.weight_bytes, saved.weights.raw_data(), work_bytes, work.raw_data(),
                                    reserve_bytes, reserve_bytes ? saved.reserve.raw_data() : nullptr));
  return saved;
}

void cudnn_lstm_backward(const Tensor& dx, const Tensor& dhx, const Tensor& dcx, const Tensor& dw_ih,
                         const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const CudnnLstmSaved& saved,
                         const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& dy,
                         const Tensor& dhy, const Tensor& dcy) {
  TCN_CHECK(saved.plan != nullptr, "cuDNN LSTM backward without its forward's plan");
  const LstmPlan& p = *static_cast<const LstmPlan*>(saved.plan);  // the forward's settings, whatever they are now
  TCN_CHECK(saved.reserve.defined(), "cuDNN: ", p.where, ": backward of a forward run without training mode");
  const int device = x.device().index;
  const Tensor work = scratch(p.work_train, device);
  const cudnnHandle_t h = handle(device);
  const int32_t* lengths = static_cast<const int32_t*>(p.seq_lengths.raw_data());
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data() : nullptr; };
  // Data first: it reads the reserve space forward wrote and leaves what the
  // weight gradients need in it.
  CUDNN_CHECK(p.where, dnn().cudnnRNNBackwardData_v8(h, p.rnn, lengths, p.y, y.raw_data(), dy.raw_data(), p.x,
                                                      dx.raw_data(), p.h, hx.raw_data(), ptr(dhy), dhx.raw_data(), p.h,
                                                      cx.raw_data(), ptr(dcy), dcx.raw_data(), p.weight_bytes,
                                                      saved.weights.raw_data(), p.work_train, work.raw_data(),
                                                      p.reserve_train, saved.reserve.raw_data()));
  const Tensor dspace = zeros({saved.weights.numel()}, saved.weights.options());  // gradients are added into it
  CUDNN_CHECK(p.where, dnn().cudnnRNNBackwardWeights_v8(h, p.rnn, CUDNN_WGRAD_MODE_ADD, lengths, p.x, x.raw_data(),
                                                         p.h, hx.raw_data(), p.y, y.raw_data(), p.weight_bytes,
                                                         dspace.raw_data(), p.work_train, work.raw_data(),
                                                         p.reserve_train, saved.reserve.raw_data()));
  const Tensor grads[4] = {dw_ih, dw_hh, db_ih, db_hh};
  move_pieces(p, dspace, grads, false);
}

#endif  // TCN_WITH_CUDNN

}  // namespace tcn::cuda
