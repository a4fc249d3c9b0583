// cuDNN under conv1d and the LSTM layer (declarations and contracts: cuda/cudnn.h):
// loading the library and what its paths share (cuda/cudnn_lib.cuh); the
// convolutions are in conv1d_cudnn.cu, the LSTM in lstm_cudnn.cu.
//
// Built only by nvcc with cudnn.h present (TCN_WITH_CUDNN=1); otherwise every
// entry point says why cuDNN is unavailable. cuDNN is reached through a table
// of function pointers filled from libcudnn.so.9 at first use, so nothing is
// linked and a program that never asks for cuDNN never loads it.
#include <dlfcn.h>

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

CudnnConvPlan cudnn_conv_forward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, double, CudnnConvMath) {
  no_cudnn("conv1d on cuDNN");
}
void cudnn_conv_backward_data(CudnnConvPlan, const Tensor&, const Tensor&, const Tensor&) { no_cudnn("conv1d on cuDNN"); }
void cudnn_conv_backward_filter(CudnnConvPlan, const Tensor&, const Tensor&, const Tensor&) {
  no_cudnn("conv1d on cuDNN");
}
CudnnLstmSaved cudnn_lstm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
  no_cudnn("LSTM on cuDNN");
}
void cudnn_lstm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const CudnnLstmSaved&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cudnn("LSTM on cuDNN");
}

#else  // TCN_WITH_CUDNN

namespace {
using namespace cudnn_lib;

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

}  // namespace

namespace cudnn_lib {

const CudnnApi& dnn() {
  const Loaded& l = loaded();
  TCN_CHECK(l.error.empty(), "cuDNN: ", l.error);
  return l.api;
}

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

Tensor scratch(size_t bytes, int device) {
  return empty({static_cast<int64_t>((bytes + 3) / 4)}, {DType::F32, Device::cuda(device)});
}

bool capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream(device), &st));
  return st != cudaStreamCaptureStatusNone;
}

}  // namespace cudnn_lib

std::string cudnn_unavailable_reason() {
  if (emulated()) return kEmulated;
  if (!is_available()) return "no GPU: " + unavailable_reason();
  const Loaded& l = loaded();
  return l.error;
}

int64_t cudnn_version() { return loaded().error.empty() ? loaded().version : 0; }

#endif  // TCN_WITH_CUDNN

}  // namespace tcn::cuda
