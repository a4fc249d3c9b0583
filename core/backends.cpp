#include "core/backends.h"

#include "core/error.h"

namespace tcn {

namespace {
CudaBackends& current() {
  static CudaBackends b;
  return b;
}
}  // namespace

ConvImpl parse_conv_impl(const std::string& name) {
  if (name == "auto") return ConvImpl::Auto;
  if (name == "cudnn") return ConvImpl::Cudnn;
  if (name == "gemm") return ConvImpl::Gemm;
  if (name == "winograd") return ConvImpl::Winograd;
  TCN_FAIL("conv implementation must be auto, cudnn, gemm or winograd, got '", name, "'");
}

LstmImpl parse_lstm_impl(const std::string& name) {
  if (name == "fused") return LstmImpl::Fused;
  if (name == "cudnn") return LstmImpl::Cudnn;
  TCN_FAIL("LSTM implementation must be fused or cudnn, got '", name, "'");
}

const char* conv_impl_name(ConvImpl c) {
  switch (c) {
    case ConvImpl::Auto: return "auto";
    case ConvImpl::Cudnn: return "cudnn";
    case ConvImpl::Gemm: return "gemm";
    case ConvImpl::Winograd: return "winograd";
  }
  return "?";
}

const char* lstm_impl_name(LstmImpl l) { return l == LstmImpl::Cudnn ? "cudnn" : "fused"; }

const CudaBackends& cuda_backends() { return current(); }

bool cudnn_conv_deterministic() { return current().deterministic || current().conv == ConvImpl::Auto; }
void set_cuda_backends(const CudaBackends& b) { current() = b; }

}  // namespace tcn
