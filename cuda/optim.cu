// Optimizer updates and the training-loss watch as kernels, so that a step's
// update can depend on device data (a non-finite loss turns it off) without
// the host reading anything. Each mirrors the CPU loop in nn/optim.cpp (same
// formulas, same order of operations), which is its oracle in
// tests/test_cuda_train.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"
#include "core/tensor.h"

namespace tcn::cuda {

namespace {

// gate: null (always update) or a float64 scalar on the device; 0 turns the update off.
__device__ __forceinline__ bool gate_closed(const double* gate) { return gate != nullptr && *gate == 0.0; }

// w = [ok, first bad step, its loss, sum of finite losses, step of the last
// loss]: while ok, a finite loss is added to the sum; the first non-finite one
// clears ok for good and records its step.
template <class T>
__global__ void watch_loss_kernel(double* w, const T* loss) {
  const double l = static_cast<double>(*loss);
  const double step = w[4] + 1;
  w[4] = step;
  if (w[0] == 0.0) return;
  if (l - l == 0.0) {  // finite (NaN and infinities give NaN): the same test on host and device
    w[3] += l;
  } else {
    w[0] = 0.0;
    w[1] = step;
    w[2] = l;
  }
}

// ---- many tensors in one launch ------------------------------------------------------
// Up to kMany contiguous tensors of one dtype passed by value in the kernel's
// parameters (no table to upload) and seen as one range of elements:
// element e is in the first tensor i with e < end[i]. A thread's e only grows,
// so it finds i by walking forward from the last one.
constexpr int kMany = 32;
template <class T>
struct Many {
  T* p[kMany];
  int64_t end[kMany];  // elements in tensors 0..i
  int n;
};
// For any of the packs below (a struct with end[]): element e's tensor i
// (walked forward from the caller's last i) and its index within it.
template <class Pack>
__device__ __forceinline__ int64_t locate(const Pack& m, int64_t e, int& i) {
  while (e >= m.end[i]) ++i;
  return e - (i > 0 ? m.end[i - 1] : 0);
}

// partial[block] = sum over this block's elements of x^2, in float64. Fixed
// grid, fixed assignment, fixed tree: the same sum every run.
constexpr int kNormBlocks = 128, kNormThreads = 256;
template <class T>
__global__ void sum_squares_kernel(double* partial, Many<const T> m) {
  __shared__ double sh[kNormThreads];
  double acc = 0;
  const int64_t total = m.end[m.n - 1];
  int i = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = locate(m, e, i);
    const double x = static_cast<double>(m.p[i][k]);
    acc += x * x;
  }
  const double block_total = block_sum(acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = block_total;
}

// norm = sqrt(sum of the partials of all launches); coef = min(1, max_norm / (norm + 1e-6)), as PyTorch.
template <class T>
__global__ void clip_coef_kernel(T* norm, T* coef, const double* partial, int n, double max_norm) {
  __shared__ double sh[kNormThreads];
  double acc = 0;
  for (int k = threadIdx.x; k < n; k += blockDim.x) acc += partial[k];
  const double total = block_sum(acc, sh);
  if (threadIdx.x == 0) {
    const double nrm = ::sqrt(total);
    const double c = max_norm / (nrm + 1e-6);
    *norm = static_cast<T>(nrm);
    *coef = static_cast<T>(c < 1.0 ? c : 1.0);
  }
}

template <class T>
__global__ void scale_many_kernel(Many<T> m, const T* coef) {
  const T c = *coef;
  const int64_t total = m.end[m.n - 1];
  int i = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = locate(m, e, i);
    m.p[i][k] *= c;
  }
}

// SGD over many parameters: p -= lr * d, d = g + wd * p; with a momentum
// buffer (null without momentum) buf = first ? d : mom * buf + d, d = buf.
template <class T>
struct SgdMany {
  T* p[kMany];
  const T* g[kMany];
  T* buf[kMany];
  bool first[kMany];
  int64_t end[kMany];
  int n;
};
template <class T>
__global__ void sgd_many_kernel(SgdMany<T> m, const double* lr_ptr, T wd, T mom, const double* gate) {
  if (gate_closed(gate)) return;
  const T lr = T(*lr_ptr);
  const int64_t total = m.end[m.n - 1];
  int i = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = locate(m, e, i);
    T* p = m.p[i];
    T d = m.g[i][k] + wd * p[k];
    if (T* b = m.buf[i]) {
      b[k] = m.first[i] ? d : mom * b[k] + d;
      d = b[k];
    }
    p[k] -= lr * d;
  }
}

// Adam over many parameters, with bias correction from each parameter's step
// count t (float64, on the device): this update's t is *steps + 1, and
// count_steps_kernel advances the counts after (once every thread has read them).
template <class T>
struct AdamMany {
  T* p[kMany];
  const T* g[kMany];
  T* m[kMany];
  T* v[kMany];
  double* steps[kMany];
  int64_t end[kMany];
  int n;
};
template <class T>
__global__ void adam_many_kernel(AdamMany<T> a, const double* lr_ptr, double beta1, double beta2, T eps, T wd,
                                 const double* gate) {
  if (gate_closed(gate)) return;
  const double lr = *lr_ptr;
  const T b1 = T(beta1), b2 = T(beta2), c1 = T(1 - beta1), c2 = T(1 - beta2);
  const int64_t total = a.end[a.n - 1];
  int i = 0, corrected = -1;  // the tensor whose bias corrections are in step_size, sqrt_bc2
  double step_size = 0, sqrt_bc2 = 1;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = locate(a, e, i);
    if (i != corrected) {
      const double t = *a.steps[i] + 1;
      step_size = lr / (1 - ::pow(beta1, t));
      sqrt_bc2 = ::sqrt(1 - ::pow(beta2, t));
      corrected = i;
    }
    T *p = a.p[i], *m = a.m[i], *v = a.v[i];
    const T d = a.g[i][k] + wd * p[k];
    m[k] = b1 * m[k] + c1 * d;
    v[k] = b2 * v[k] + c2 * (d * d);
    const T denom = ::sqrt(v[k]) / T(sqrt_bc2) + eps;
    p[k] -= T(step_size) * m[k] / denom;
  }
}

// RMSprop over many parameters: v = alpha * v + (1 - alpha) * d^2,
// p -= lr * d / (sqrt(v) + eps), d = g + wd * p.
template <class T>
struct RmspropMany {
  T* p[kMany];
  const T* g[kMany];
  T* v[kMany];
  int64_t end[kMany];
  int n;
};
template <class T>
__global__ void rmsprop_many_kernel(RmspropMany<T> r, const double* lr_ptr, double alpha, T eps, T wd,
                                    const double* gate) {
  if (gate_closed(gate)) return;
  const T lr = T(*lr_ptr), a = T(alpha), c = T(1 - alpha);
  const int64_t total = r.end[r.n - 1];
  int i = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = locate(r, e, i);
    T *p = r.p[i], *v = r.v[i];
    const T d = r.g[i][k] + wd * p[k];
    v[k] = a * v[k] + c * (d * d);
    p[k] -= lr * d / (::sqrt(v[k]) + eps);
  }
}

template <class T>
__global__ void count_steps_kernel(AdamMany<T> a, const double* gate) {
  if (!gate_closed(gate) && static_cast<int>(threadIdx.x) < a.n) *a.steps[threadIdx.x] += 1;
}

// Packs items into consecutive kernel-parameter structs of at most kMany
// (set(m, item) fills slot m.n of m and returns the item's element count) and
// calls f(m, total elements) for each struct that has any.
template <class Pack, class Item, class Set, class F>
void for_groups(const std::vector<Item>& items, Set set, F f) {
  for (size_t g0 = 0; g0 < items.size(); g0 += kMany) {
    Pack m{};
    int64_t total = 0;
    for (size_t k = g0; k < items.size() && k < g0 + kMany; ++k) {
      total += set(m, items[k]);
      m.end[m.n++] = total;
    }
    f(m, total);
  }
}

// The Many<T> of plain tensors.
template <class T>
int64_t set_tensor(Many<T>& m, const Tensor& t) {
  m.p[m.n] = static_cast<T*>(t.raw_data());
  return t.numel();
}


}  // namespace

void sgd_update_many(const std::vector<SgdParam>& params, const Tensor& lr, double weight_decay, double momentum,
                     const Tensor& gate) {
  if (params.empty()) return;
  const Tensor& p0 = params.front().p;
  cudaStream_t s = stream(p0.device().index);
  dispatch_float(p0.dtype(), "cuda::sgd_update_many", [&]<class T>() {
    auto set = [](SgdMany<T>& m, const SgdParam& q) {
      m.p[m.n] = static_cast<T*>(q.p.raw_data());
      m.g[m.n] = static_cast<const T*>(q.g.raw_data());
      m.buf[m.n] = q.buf.defined() ? static_cast<T*>(q.buf.raw_data()) : nullptr;
      m.first[m.n] = q.first;
      return q.p.numel();
    };
    for_groups<SgdMany<T>>(params, set, [&](const SgdMany<T>& m, int64_t total) {
      if (total > 0)
        TCN_LAUNCH(grid_for(total, 256), 256, 0, s, sgd_many_kernel<T>)(m, scalar_ptr(lr), T(weight_decay), T(momentum),
                                                                        scalar_ptr(gate));
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void adam_update_many(const std::vector<AdamParam>& params, const Tensor& lr, double beta1, double beta2, double eps,
                      double weight_decay, const Tensor& gate) {
  if (params.empty()) return;
  const Tensor& p0 = params.front().p;
  cudaStream_t s = stream(p0.device().index);
  dispatch_float(p0.dtype(), "cuda::adam_update_many", [&]<class T>() {
    auto set = [](AdamMany<T>& a, const AdamParam& q) {
      a.p[a.n] = static_cast<T*>(q.p.raw_data());
      a.g[a.n] = static_cast<const T*>(q.g.raw_data());
      a.m[a.n] = static_cast<T*>(q.m.raw_data());
      a.v[a.n] = static_cast<T*>(q.v.raw_data());
      a.steps[a.n] = static_cast<double*>(q.step_count.raw_data());
      return q.p.numel();
    };
    for_groups<AdamMany<T>>(params, set, [&](const AdamMany<T>& a, int64_t total) {
      if (total > 0)
        TCN_LAUNCH(grid_for(total, 256), 256, 0, s, adam_many_kernel<T>)(a, scalar_ptr(lr), beta1, beta2, T(eps), T(weight_decay),
                                                                         scalar_ptr(gate));
      TCN_LAUNCH(1, kMany, 0, s, count_steps_kernel<T>)(a, scalar_ptr(gate));
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void rmsprop_update_many(const std::vector<RmspropParam>& params, const Tensor& lr, double alpha, double eps,
                         double weight_decay, const Tensor& gate) {
  if (params.empty()) return;
  const Tensor& p0 = params.front().p;
  cudaStream_t s = stream(p0.device().index);
  dispatch_float(p0.dtype(), "cuda::rmsprop_update_many", [&]<class T>() {
    auto set = [](RmspropMany<T>& r, const RmspropParam& q) {
      r.p[r.n] = static_cast<T*>(q.p.raw_data());
      r.g[r.n] = static_cast<const T*>(q.g.raw_data());
      r.v[r.n] = static_cast<T*>(q.v.raw_data());
      return q.p.numel();
    };
    for_groups<RmspropMany<T>>(params, set, [&](const RmspropMany<T>& r, int64_t total) {
      if (total > 0)
        TCN_LAUNCH(grid_for(total, 256), 256, 0, s, rmsprop_many_kernel<T>)(r, scalar_ptr(lr), alpha, T(eps),
                                                                             T(weight_decay), scalar_ptr(gate));
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const Tensor& norm) {
  const int dev = norm.device().index;
  cudaStream_t s = stream(dev);
  const int groups = static_cast<int>((grads.size() + kMany - 1) / kMany);
  Tensor partial = empty({std::max(1, groups) * kNormBlocks}, {DType::F64, norm.device()});  // every slot written
  Tensor coef = empty({}, norm.options());
  dispatch_float(norm.dtype(), "cuda::clip_grad_norm", [&]<class T>() {
    int g = 0;  // every group writes its kNormBlocks partial sums, even an empty one (zeros)
    for_groups<Many<const T>>(grads, set_tensor<const T>, [&](const Many<const T>& m, int64_t) {
      TCN_LAUNCH(kNormBlocks, kNormThreads, 0, s, sum_squares_kernel<T>)(
          static_cast<double*>(partial.raw_data()) + g++ * kNormBlocks, m);
    });
    TCN_LAUNCH(1, kNormThreads, 0, s, clip_coef_kernel<T>)(static_cast<T*>(norm.raw_data()),
                                                           static_cast<T*>(coef.raw_data()),
                                                           static_cast<const double*>(partial.raw_data()),
                                                           static_cast<int>(partial.numel()), max_norm);
    for_groups<Many<T>>(grads, set_tensor<T>, [&](const Many<T>& m, int64_t total) {
      if (total > 0)
        TCN_LAUNCH(grid_for(total, 256), 256, 0, s, scale_many_kernel<T>)(m, static_cast<const T*>(coef.raw_data()));
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void watch_loss(const Tensor& watch, const Tensor& loss) {
  dispatch_float(loss.dtype(), "cuda::watch_loss", [&]<class T>() {
    TCN_LAUNCH(1, 1, 0, stream(loss.device().index), watch_loss_kernel<T>)(
        static_cast<double*>(watch.raw_data()), static_cast<const T*>(loss.raw_data()));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
