// Mixed precision, autocast style: one rule for which ops compute in bfloat16.
//
//   { tcn::Autocast bf16(tcn::Precision::BF16);  loss = model(x) ...; }
//   loss.backward();
//
// Inside the scope the GEMM-class ops (conv1d, mm / bmm and so Linear, the
// LSTM's input projection) multiply bfloat16 copies of their float32 operands
// and accumulate in float32; they return float32. conv1d's bias is part of its
// GEMM (a row of the packed weights, ops/conv1d.cpp), so it is rounded to
// bfloat16 with the weights, as PyTorch's autocast casts a conv's bias (on the
// cuDNN path it is added in float32). Every other op (Linear's bias, ReLU,
// dropout, weight norm, softmax / cross-entropy, reductions, the optimizer)
// runs in float32 as always, and parameters, gradients and optimizer state stay
// float32 (the master weights). The backward of an op recorded inside a scope
// runs with the scope's precision (the tape restores it), so the gradient GEMMs
// are bf16 too, wherever backward() is called.
//
// The rule is the same on both devices: on CUDA the bf16 GEMMs are cuBLAS's
// cublasGemmEx (bf16 tensor cores, float32 accumulation) and the conversions
// are CUDA kernels (the LSTM layer's recurrent GEMMs included:
// ops/lstm_layer.cpp).
//
// TF32 is the GPU's own reduced precision: float32 tensors throughout, and the
// GEMMs of CUDA tensors on tensor cores, which round their inputs to 10
// mantissa bits and accumulate in float32 (cuBLAS's TF32 math mode; the
// emulated device rounds the inputs the same way). CPU tensors are unaffected
// (there is no TF32 on a CPU); the trainer refuses --precision tf32 on a CPU.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tcn {

enum class Precision { FP32, TF32, BF16 };

Precision autocast_precision();
Precision parse_precision(const std::string& name);  // "fp32" | "tf32" | "bf16"
const char* precision_name(Precision p);

class Autocast {
 public:
  explicit Autocast(Precision p);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  Precision prev_;
};

// True when a GEMM-class op with this (float32) operand computes in bf16 here.
bool autocast_bf16(const Tensor& operand);
// True when GEMMs on CUDA tensors use TF32 tensor cores here.
bool autocast_tf32();

}  // namespace tcn
