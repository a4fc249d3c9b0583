// Optimizer updates and the training-loss watch as kernels, so that a step's
// update can depend on device data (a non-finite loss turns it off) without
// the host reading anything. Each mirrors the CPU loop in nn/optim.cpp (same
// formulas, same order of operations), which is its oracle in
// tests/test_cuda_train.cpp.
#include <cmath>

#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "ops/ops.h"

namespace tcn::cuda {

namespace {

// gate: null (always update) or a float64 scalar on the device; 0 turns the update off.
__device__ __forceinline__ bool gate_closed(const double* gate) { return gate != nullptr && *gate == 0.0; }

// p (n) -= lr * d, d = g + wd * p; with buf: buf = first ? d : mom * buf + d, d = buf.
template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T wd, T mom, bool first, const double* gate) {
  if (gate_closed(gate)) return;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    T d = g[k] + wd * p[k];
    if (buf) {
      buf[k] = first ? d : mom * buf[k] + d;
      d = buf[k];
    }
    p[k] -= lr * d;
  }
}

// Adam with bias correction; the step count t (float64, on the device) is the
// one this update makes: *steps + 1 (the count is advanced after, by
// count_step_kernel, once every thread has read it).
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, const double* steps, int64_t n, double lr, double beta1,
                            double beta2, T eps, T wd, const double* gate) {
  if (gate_closed(gate)) return;
  const double t = *steps + 1;
  const double step_size = lr / (1 - ::pow(beta1, t)), sqrt_bc2 = ::sqrt(1 - ::pow(beta2, t));
  const T b1 = T(beta1), b2 = T(beta2), c1 = T(1 - beta1), c2 = T(1 - beta2);
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const T d = g[k] + wd * p[k];
    m[k] = b1 * m[k] + c1 * d;
    v[k] = b2 * v[k] + c2 * (d * d);
    const T denom = ::sqrt(v[k]) / T(sqrt_bc2) + eps;
    p[k] -= T(step_size) * m[k] / denom;
  }
}

__global__ void count_step_kernel(double* steps, const double* gate) {
  if (!gate_closed(gate)) *steps += 1;
}

// w = [ok, first bad step, its loss, sum of finite losses]: while ok, a finite
// loss is added to the sum; the first non-finite one clears ok for good.
template <class T>
__global__ void watch_loss_kernel(double* w, const T* loss, int64_t step) {
  const double l = static_cast<double>(*loss);
  if (w[0] == 0.0) return;
  if (l - l == 0.0) {  // finite (NaN and infinities give NaN): the same test on host and device
    w[3] += l;
  } else {
    w[0] = 0.0;
    w[1] = static_cast<double>(step);
    w[2] = l;
  }
}

const double* gate_ptr(const Tensor& gate) { return gate.defined() ? static_cast<const double*>(gate.raw_data()) : nullptr; }

}  // namespace

void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double weight_decay, double momentum,
                bool first, const Tensor& gate) {
  const int64_t n = p.numel();
  if (n == 0) return;
  dispatch_float(p.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n, 256), 256, 0, stream(p.device().index), sgd_kernel<T>)(
        static_cast<T*>(p.raw_data()), static_cast<const T*>(g.raw_data()),
        buf.defined() ? static_cast<T*>(buf.raw_data()) : nullptr, n, T(lr), T(weight_decay), T(momentum), first,
        gate_ptr(gate));
  });
  CUDA_CHECK(cudaGetLastError());
}

void adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& step_count,
                 double lr, double beta1, double beta2, double eps, double weight_decay, const Tensor& gate) {
  const int64_t n = p.numel();
  cudaStream_t s = stream(p.device().index);
  if (n > 0)
    dispatch_float(p.dtype(), "CUDA kernel", [&]<class T>() {
      TCN_LAUNCH(grid_for(n, 256), 256, 0, s, adam_kernel<T>)(
          static_cast<T*>(p.raw_data()), static_cast<const T*>(g.raw_data()), static_cast<T*>(m.raw_data()),
          static_cast<T*>(v.raw_data()), static_cast<const double*>(step_count.raw_data()), n, lr, beta1, beta2, T(eps),
          T(weight_decay), gate_ptr(gate));
    });
  TCN_LAUNCH(1, 1, 0, s, count_step_kernel)(static_cast<double*>(step_count.raw_data()), gate_ptr(gate));
  CUDA_CHECK(cudaGetLastError());
}

void watch_loss(const Tensor& watch, const Tensor& loss, int64_t step) {
  dispatch_float(loss.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(1, 1, 0, stream(loss.device().index), watch_loss_kernel<T>)(
        static_cast<double*>(watch.raw_data()), static_cast<const T*>(loss.raw_data()), step);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
