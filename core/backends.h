// Which implementation the CUDA layers run on: our own paths on cuBLAS, or
// cuDNN (cuda/cudnn.h). Process-wide settings, set once from the command line
// (--conv_impl, --lstm_impl, --deterministic) and read by the ops.
//
//   conv1d  Gemm   K accumulating GEMMs over padded rows (ops/conv1d.cpp), on
//                  cuBLAS on a GPU and the CPU GEMM library on the CPU
//           Winograd  the CPU only: F(m, K) minimal filtering on each dilation
//                  phase, n/m of the GEMM path's multiplies per output
//                  (ops/conv1d_winograd.cpp); a conv it does not apply to (K = 1,
//                  K > 7) takes the GEMM path
//           Cudnn  cudnnConvolution{Forward,BackwardData,BackwardFilter}, the
//                  algorithms found by timing on first use per shape
//           Auto   on CUDA per layer shape, both timed once on first use
//                  (forward and backward, the same inputs) and the faster kept;
//                  cuDNN is kept only if its output also agrees with the GEMM
//                  path's. Where cuDNN cannot run (not built, library missing,
//                  emulated device) Auto is Gemm, with a one-line note. On the
//                  CPU, Winograd where it pays by a rule on the channels
//                  (winograd_pays, ops/conv1d_winograd.cpp), else Gemm.
//   LSTM    Fused  our layer: one input-projection GEMM, then per step a cuBLAS
//                  GEMM and a cell kernel (ops/lstm_layer.cpp)
//           Cudnn  cudnnRNNForward / cudnnRNNBackwardData_v8 / _BackwardWeights_v8
//
// CPU tensors take the GEMM or the Winograd path (Auto chooses by a rule, Gemm and
// Winograd force one); the other settings change nothing there.
// cuDNN's convolutions use only the algorithms it declares deterministic under
// Auto (the default: a run repeats itself bit for bit, a resumed run continues
// exactly, a replayed CUDA graph equals the eager step) and with `deterministic`;
// only an explicit Cudnn without `deterministic` lets cuDNN pick any algorithm.
// Our own GEMM and kernel paths are always deterministic.
// The defaults are Auto for conv1d, whose first use per shape compares cuDNN's
// result with ours, and Fused for the LSTM.
#pragma once

#include <string>

namespace tcn {

enum class ConvImpl { Auto, Cudnn, Gemm, Winograd };
enum class LstmImpl { Fused, Cudnn };

ConvImpl parse_conv_impl(const std::string& name);  // "auto" | "cudnn" | "gemm" | "winograd"; else an error naming the choices
LstmImpl parse_lstm_impl(const std::string& name);  // "fused" | "cudnn"
const char* conv_impl_name(ConvImpl c);
const char* lstm_impl_name(LstmImpl l);

struct CudaBackends {
  ConvImpl conv = ConvImpl::Auto;
  LstmImpl lstm = LstmImpl::Fused;
  bool deterministic = false;
};

const CudaBackends& cuda_backends();
// Whether cuDNN's convolutions must use deterministic algorithms: under Auto, or
// when `deterministic` is set.
bool cudnn_conv_deterministic();
void set_cuda_backends(const CudaBackends& b);

// Sets the backends for a scope and puts the earlier ones back (benchmarks that
// time each path, tests that pin one), like Autocast for the precision.
class BackendsScope {
 public:
  explicit BackendsScope(const CudaBackends& b) : prev_(cuda_backends()) { set_cuda_backends(b); }
  ~BackendsScope() { set_cuda_backends(prev_); }
  BackendsScope(const BackendsScope&) = delete;
  BackendsScope& operator=(const BackendsScope&) = delete;

 private:
  CudaBackends prev_;
};
// The current backends with conv1d's path replaced.
inline CudaBackends with_conv(ConvImpl c) {
  CudaBackends b = cuda_backends();
  b.conv = c;
  return b;
}

}  // namespace tcn
