// The layers tcn runs on cuDNN (core/backends.h says when): the convolution
// (legacy cudnnConvolution* API, NHWC with H = 1) and the LSTM (the v8 RNN API).
// Plain C++ declarations, like cuda/kernels.h; the implementation is
// cuda/conv1d_cudnn.cu and cuda/lstm_cudnn.cu, which talk to cuDNN only through
// a table of functions that cuda/cudnn.cu loads from libcudnn.so.9 at first use (dlopen, as NCCL in nn/distributed.cpp):
// cuDNN's libraries are over 500 MB, and a program that never asks for cuDNN
// must start and run without them.
//
// Conventions as in cuda/kernels.h: outputs first, tensors on one device,
// contiguous unless stated, shapes checked by the op (ops/conv1d_cudnn.cpp,
// ops/lstm_layer.cpp). A failing cuDNN call throws tcn::Error naming the call,
// its status and the shapes it was given.
//
// The emulated device has no cuDNN: cudnn_unavailable_reason() says so there,
// and the tests of these paths report themselves skipped (docs/cudnn.md says
// what has run where).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tcn::cuda {

// "" when the cuDNN paths can run here; otherwise why not (built without
// cuDNN, the emulated device, no GPU, libcudnn.so.9 not found or too old).
std::string cudnn_unavailable_reason();
inline bool cudnn_available() { return cudnn_unavailable_reason().empty(); }
// The loaded library's version (cudnnGetVersion(), e.g. 91900), 0 when none.
int64_t cudnn_version();

// ---- conv1d: x [B, L, Cin], w [Cout, K, Cin] (cuDNN's KRSC filter layout with R = 1),
// y [B, Lout, Cout], Lout = L + 2 * pad - (K - 1) * dilation; one dtype, float32 or
// bfloat16 (mixed precision: float32 accumulation). Math: strict FP32 FMA kernels
// for float32 unless `math.tf32` (--precision tf32, core/autocast.h); tensor cores
// for bfloat16. The algorithms are found by timing (cudnnFind*AlgorithmEx) on
// first use of a shape and kept; with `math.deterministic` only deterministic ones.
// y = conv(x, w) + beta * y (beta 1: y holds the broadcast bias already).
// Returns the shape's plan (descriptors and algorithms, kept for the process),
// which the backward passes of this call take: they run with the settings the
// forward ran with, and never search for algorithms themselves.
using CudnnConvPlan = const void*;
struct CudnnConvMath {
  bool tf32 = false;           // float32 on TF32 tensor cores
  bool deterministic = false;  // only algorithms that give the same bits every run
};
CudnnConvPlan cudnn_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, int64_t pad, int64_t dilation,
                                 double beta, CudnnConvMath math);
// dx [B, L, Cin] = the input gradient from dy [B, Lout, Cout].
void cudnn_conv_backward_data(CudnnConvPlan plan, const Tensor& dx, const Tensor& dy, const Tensor& w);
// dw [Cout, K, Cin] = the filter gradient from x and dy.
void cudnn_conv_backward_filter(CudnnConvPlan plan, const Tensor& dw, const Tensor& x, const Tensor& dy);

// ---- One LSTM layer over a whole sequence, PyTorch's parameters and gate order
// (i, f, g, o): x [B, T, I], w_ih [4H, I], w_hh [4H, H], b_ih, b_hh [4H], hx, cx
// [B, H]; out y [B, T, H], hy, cy [B, H]. float32, strict FP32 math unless tf32
// (under bf16 mixed precision too, as our own layer's recurrence). The parameters are copied into
// cuDNN's weight space (a few device copies) on each forward; that copy, and the
// reserve space a training forward fills, are what backward needs.
struct CudnnLstmSaved {
  Tensor weights;              // the weight space used by forward
  Tensor reserve;              // training only
  const void* plan = nullptr;  // the shape's descriptors (cuda/conv1d_cudnn.cu), for backward
};
CudnnLstmSaved cudnn_lstm_forward(const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& x,
                                  const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                  const Tensor& hx, const Tensor& cx, bool training, bool tf32);
// Gradients of everything from dy [B, T, H] and dhy, dcy [B, H] (either may be
// undefined: zero). Writes dx, dhx, dcx and the four parameter gradients.
void cudnn_lstm_backward(const Tensor& dx, const Tensor& dhx, const Tensor& dcx, const Tensor& dw_ih,
                         const Tensor& dw_hh, const Tensor& db_ih, const Tensor& db_hh, const CudnnLstmSaved& saved,
                         const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& dy,
                         const Tensor& dhy, const Tensor& dcy);

}  // namespace tcn::cuda
