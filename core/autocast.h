// Mixed precision, autocast style: one rule for which ops compute in bfloat16.
//
//   { tcn::Autocast bf16(tcn::Precision::BF16);  loss = model(x) ...; }
//   loss.backward();
//
// Inside the scope the GEMM-class ops (conv1d, mm / bmm and so Linear, the
// LSTM's input projection) multiply bfloat16 copies of their float32 operands
// and accumulate in float32; they return float32. Every other op (bias, ReLU,
// dropout, weight norm, softmax / cross-entropy, reductions, the optimizer)
// runs in float32 as always, and parameters, gradients and optimizer state stay
// float32 (the master weights). The backward of an op recorded inside a scope
// runs with the scope's precision (the tape restores it), so the gradient GEMMs
// are bf16 too, wherever backward() is called.
//
// Today the rule applies to float32 CPU tensors; CUDA tensors keep float32
// (their GEMMs use TF32 where enabled) until the CUDA backend has bf16 kernels.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tcn {

enum class Precision { FP32, BF16 };

Precision autocast_precision();
Precision parse_precision(const std::string& name);  // "fp32" | "bf16"
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

// True when a GEMM-class op with this (float32, CPU) operand computes in bf16 here.
bool autocast_bf16(const Tensor& operand);

}  // namespace tcn
