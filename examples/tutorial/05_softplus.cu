// Chapter 5 (docs/tutorial/05-cuda-kernel.md): softplus forward and backward
// as CUDA kernels, written as the framework writes its own (cuda/elementwise.cu):
// a grid-stride loop, launched through TCN_LAUNCH on the device's tcn stream,
// the launch error checked with CUDA_CHECK.
//
// The same file builds two ways: with nvcc for a GPU, or (TCN_CUDA=EMU) with
// the host compiler against the emulated device of cuda/emu/, where
// <cuda_runtime.h> is the emulator's, __global__ and __device__ vanish, and
// every CUDA thread runs on the CPU (docs/emulator.md).
#include "05_softplus.h"

#include <tcn/cuda/context.cuh>  // tcn::cuda::stream(device), grid_for, CUDA_CHECK, TCN_LAUNCH

namespace tut {

namespace {

// The math, once per precision: the C library's functions, which CUDA
// provides in device code and the host's libm provides on the emulator.
__device__ __forceinline__ float softplus_value(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
__device__ __forceinline__ double softplus_value(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }
__device__ __forceinline__ float sigmoid_value(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double sigmoid_value(double x) { return 1.0 / (1.0 + exp(-x)); }

// One CUDA thread per element; a grid-stride loop, so any n works with a grid
// capped at grid_for's maximum: thread i handles i, i + stride, i + 2 stride, ...
template <class T>
__global__ void softplus_forward_kernel(T* y, const T* x, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) y[i] = softplus_value(x[i]);
}

template <class T>
__global__ void softplus_backward_kernel(T* gx, const T* g, const T* x, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
    gx[i] = g[i] * sigmoid_value(x[i]);
}

constexpr int kBlock = 256;  // threads per block

void check_operands(const char* what, const tcn::Tensor& out, const tcn::TensorList& in) {
  TCN_CHECK(out.device().is_cuda() && out.is_contiguous(), what, ": output must be a contiguous CUDA tensor");
  for (const tcn::Tensor& t : in)
    TCN_CHECK(t.device() == out.device() && t.dtype() == out.dtype() && t.shape() == out.shape() && t.is_contiguous(),
              what, ": operands must be contiguous, on ", out.device(), ", ", out.dtype(), " ", out.shape(), "; got ",
              t.device(), " ", t.dtype(), " ", t.shape());
}

}  // namespace

void softplus_forward_cuda(const tcn::Tensor& y, const tcn::Tensor& x) {
  check_operands("softplus_forward_cuda", y, {x});
  const int64_t n = y.numel();
  if (n == 0) return;  // a launch with an empty grid is an error
  // Every tcn op on this device runs on this one stream, so the kernel is
  // ordered after whatever produced x and before whatever reads y, with no
  // host synchronisation.
  cudaStream_t s = tcn::cuda::stream(y.device().index);
  tcn::dispatch_float(y.dtype(), "softplus_forward_cuda", [&]<class T>() {
    TCN_LAUNCH(tcn::cuda::grid_for(n, kBlock), kBlock, 0, s, softplus_forward_kernel<T>)(
        static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()), n);
  });
  CUDA_CHECK(cudaGetLastError());  // a bad configuration shows here; a fault in the kernel at the next sync
}

void softplus_backward_cuda(const tcn::Tensor& gx, const tcn::Tensor& g, const tcn::Tensor& x) {
  check_operands("softplus_backward_cuda", gx, {g, x});
  const int64_t n = gx.numel();
  if (n == 0) return;
  cudaStream_t s = tcn::cuda::stream(gx.device().index);
  tcn::dispatch_float(gx.dtype(), "softplus_backward_cuda", [&]<class T>() {
    TCN_LAUNCH(tcn::cuda::grid_for(n, kBlock), kBlock, 0, s, softplus_backward_kernel<T>)(
        static_cast<T*>(gx.raw_data()), static_cast<const T*>(g.raw_data()), static_cast<const T*>(x.raw_data()), n);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tut
