#include <memory>
#include <mutex>
#include <vector>

#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "cuda/runtime.h"

namespace tcn::cuda {

namespace {

struct DeviceState {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::vector<std::unique_ptr<DeviceState>>& states() {
  static std::vector<std::unique_ptr<DeviceState>> s;
  return s;
}
bool& allow_tf32() {
  static bool a = false;
  return a;
}

DeviceState& state(int device) {
  TCN_CHECK(device >= 0 && device < device_count(), "cuda:", device, " is not a usable device (",
            device_count(), " visible)");
  std::lock_guard<std::mutex> lock(mu());
  auto& all = states();
  if (all.empty()) all.resize(device_count());
  if (!all[device]) {
    auto s = std::make_unique<DeviceState>();
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreate(&s->stream));  // a blocking stream: ordered with the legacy default stream
    CUBLAS_CHECK(cublasCreate(&s->cublas));
    CUBLAS_CHECK(cublasSetStream(s->cublas, s->stream));
    all[device] = std::move(s);
  }
  CUDA_CHECK(cudaSetDevice(device));
  return *all[device];
}

}  // namespace

cudaStream_t stream(int device) { return state(device).stream; }

cublasHandle_t cublas(int device) {
  cublasHandle_t h = state(device).cublas;
  // Strict FP32 unless TF32 was asked for (PyTorch's default for matmul is also strict).
  CUBLAS_CHECK(cublasSetMathMode(h, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return h;
}

void set_allow_tf32(bool allow) { allow_tf32() = allow; }

}  // namespace tcn::cuda
