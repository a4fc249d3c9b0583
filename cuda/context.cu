#include <memory>
#include <mutex>
#include <vector>

#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "core/devices.h"

namespace tcn::cuda {

namespace {

// cuBLAS's workspace: 32 MiB, what cuBLAS's documentation recommends for
// Hopper (4 MiB suffices before it). Without one of our own cuBLAS allocates
// its own, which a CUDA graph capture records as allocation nodes, and whose
// size can change the kernels it picks from one run to the next.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

struct DeviceState {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;  // from the caching allocator, kept for the process's life
  DeviceStatus* status = nullptr;  // pinned host memory, written by check kernels
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::vector<std::unique_ptr<DeviceState>>& states() {
  static std::vector<std::unique_ptr<DeviceState>> s;
  return s;
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
    // Set once, here, before any capture can begin (cuBLAS resets it when the stream changes; ours never does).
    s->cublas_workspace = allocator(device)->allocate(kCublasWorkspaceBytes);
    CUBLAS_CHECK(cublasSetWorkspace(s->cublas, s->cublas_workspace, kCublasWorkspaceBytes));
    void* st = nullptr;
    CUDA_CHECK(cudaMallocHost(&st, sizeof(DeviceStatus)));
    s->status = static_cast<DeviceStatus*>(st);
    *s->status = DeviceStatus{};
    all[device] = std::move(s);
  }
  CUDA_CHECK(cudaSetDevice(device));
  return *all[device];
}

}  // namespace

cudaStream_t stream(int device) { return state(device).stream; }

cublasHandle_t cublas(int device, bool tf32) {
  cublasHandle_t h = state(device).cublas;
  CUBLAS_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return h;
}

DeviceStatus* device_status(int device) { return state(device).status; }

void raise_device_errors() {
  DeviceStatus found{};
  int where = -1;
  {
    std::lock_guard<std::mutex> lock(mu());
    for (size_t d = 0; d < states().size() && where < 0; ++d) {
      DeviceState* s = states()[d].get();
      if (!s || !s->status) continue;
      volatile DeviceStatus* st = s->status;  // written by the device
      if (st->check == static_cast<int32_t>(DeviceCheck::None)) continue;
      found.check = st->check;
      found.position = st->position;
      found.value = st->value;
      found.bound = st->bound;
      st->check = static_cast<int32_t>(DeviceCheck::None);
      where = static_cast<int>(d);
    }
  }
  if (where < 0) return;
  const std::string site = " (found by a device-side check on cuda:" + std::to_string(where) +
                           ", reported at the next host synchronisation)";
  switch (static_cast<DeviceCheck>(found.check)) {
    case DeviceCheck::GatherRows:
    case DeviceCheck::ScatterAddRows:
      TCN_FAIL(static_cast<DeviceCheck>(found.check) == DeviceCheck::GatherRows ? "gather_rows" : "scatter_add_rows",
               ": index ", found.value, " at position ", found.position, " is out of range for ", found.bound, " rows",
               site);
    case DeviceCheck::CrossEntropyTarget:
      TCN_FAIL("cross_entropy: target ", found.value, " at position ", found.position, " is not a class in [0, ",
               found.bound, ")", site);
    case DeviceCheck::None:
      break;
  }
  TCN_FAIL("a device-side check on cuda:", where, " failed with unknown code ", found.check);
}

}  // namespace tcn::cuda
