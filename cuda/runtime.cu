// CUDA device runtime: device discovery and host/device copies. The memory
// allocator here is the plain one (cudaMalloc per block); the caching allocator
// arrives with the CUDA backend.
#include "cuda/runtime.h"

#include <memory>
#include <mutex>
#include <vector>

#include "cuda/common.h"

namespace tcn::cuda {

namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asks the driver once. A machine without a GPU (or with a driver older than the
// toolkit) answers with an error code, which we keep as the reason.
const Probe& probe() {
  static Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      r.reason = cudaGetErrorString(err);
      cudaGetLastError();  // clear the sticky error
    } else if (n == 0) {
      r.reason = "no CUDA device found";
    } else {
      r.count = n;
    }
    return r;
  }();
  return p;
}

class PlainCudaAllocator final : public Allocator {
 public:
  explicit PlainCudaAllocator(int device) : device_(device) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      TCN_FAIL("CUDA out of memory: asked for ", nbytes, " bytes on cuda:", device_, ", ",
               free_b, " of ", total_b, " bytes free (", cudaGetErrorString(err), ")");
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override { cudaFree(ptr); }

 private:
  int device_;
};

}  // namespace

bool built_with_cuda() { return true; }
bool kernels_available() { return false; }  // the op kernels arrive with the CUDA backend
int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

Allocator* allocator(int index) {
  TCN_CHECK(is_available(), "cuda:", index, " requested but no CUDA device is usable: ",
            unavailable_reason());
  TCN_CHECK(index >= 0 && index < device_count(), "cuda:", index, " requested but only ",
            device_count(), " CUDA device(s) are visible");
  static std::mutex mu;
  static std::vector<std::unique_ptr<PlainCudaAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  if (allocators.empty()) allocators.resize(device_count());
  if (!allocators[index]) allocators[index] = std::make_unique<PlainCudaAllocator>(index);
  return allocators[index].get();
}

void copy_host_to_device(void* dst, const void* src, size_t n) {
  if (n) CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}
void copy_device_to_host(void* dst, const void* src, size_t n) {
  if (n) CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}
void copy_device_to_device(void* dst, const void* src, size_t n) {
  if (n) CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
}
void synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace tcn::cuda
