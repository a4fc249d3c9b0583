#include "core/autocast.h"

namespace tcn {

namespace {
thread_local Precision g_precision = Precision::FP32;
}

Precision autocast_precision() { return g_precision; }

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "tf32") return Precision::TF32;
  if (name == "bf16") return Precision::BF16;
  TCN_FAIL("unknown precision '", name, "': expected fp32, tf32 or bf16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP32: break;
  }
  return "fp32";
}

Autocast::Autocast(Precision p) : prev_(g_precision) { g_precision = p; }
Autocast::~Autocast() { g_precision = prev_; }

bool autocast_bf16(const Tensor& operand) {
  return g_precision == Precision::BF16 && operand.dtype() == DType::F32;
}

bool autocast_tf32() { return g_precision == Precision::TF32; }

}  // namespace tcn
