// Layer norm over the last dim, one kernel each way (ops/layer_norm.cpp): one
// block per row, the row's statistics in float64 as on the CPU.
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

constexpr int kRowThreads = 256;

// Row r of x (R, C): mean[r], rstd[r] = 1 / sqrt(var + eps), y = (x - mean) rstd gamma + beta.
template <class T>
__global__ void layer_norm_fwd_kernel(T* y, double* mean, double* rstd, const T* x, const T* gamma, const T* beta,
                                      int64_t C, double eps) {
  __shared__ double sh[kRowThreads];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  double s = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) s += xr[k];
  const double m = block_sum(s, sh) / static_cast<double>(C);
  double sq = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) sq += (xr[k] - m) * (xr[k] - m);
  const double rs = 1.0 / ::sqrt(block_sum(sq, sh) / static_cast<double>(C) + eps);
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    double v = (xr[k] - m) * rs;
    if (gamma) v *= static_cast<double>(gamma[k]);
    if (beta) v += static_cast<double>(beta[k]);
    y[r * C + k] = static_cast<T>(v);
  }
}

// Row r: xhat = (x - mean) rstd, dxhat = dy gamma; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
template <class T>
__global__ void layer_norm_bwd_kernel(T* dx, T* xhat, const T* dy, const T* x, const T* gamma, const double* mean,
                                      const double* rstd, int64_t C) {
  __shared__ double sh[kRowThreads];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * C, *dyr = dy + r * C;
  const double m = mean[r], rs = rstd[r];
  double a = 0, b = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    const double xh = (xr[k] - m) * rs;
    const double dxh = gamma ? static_cast<double>(dyr[k]) * static_cast<double>(gamma[k]) : static_cast<double>(dyr[k]);
    a += dxh;
    b += dxh * xh;
    if (xhat) xhat[r * C + k] = static_cast<T>(xh);
  }
  if (!dx) return;  // uniform across the block: no thread is left waiting at the barriers below
  a = block_sum(a, sh) / static_cast<double>(C);
  b = block_sum(b, sh) / static_cast<double>(C);
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    const double xh = (xr[k] - m) * rs;
    const double dxh = gamma ? static_cast<double>(dyr[k]) * static_cast<double>(gamma[k]) : static_cast<double>(dyr[k]);
    dx[r * C + k] = static_cast<T>(rs * (dxh - a - xh * b));
  }
}

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}

}  // namespace

void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, double eps) {
  const int64_t C = x.size(-1), R = C > 0 ? x.numel() / C : 0;
  if (R == 0) return;
  dispatch_float(x.dtype(), "cuda::layer_norm_forward", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(x.device().index), layer_norm_fwd_kernel<T>)(
        static_cast<T*>(y.raw_data()), static_cast<double*>(mean.raw_data()), static_cast<double*>(rstd.raw_data()),
        static_cast<const T*>(x.raw_data()), ptr_or_null<T>(gamma), ptr_or_null<T>(beta), C, eps);
  });
  CUDA_CHECK(cudaGetLastError());
}

void layer_norm_backward(const Tensor& dx, const Tensor& xhat, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1), R = C > 0 ? x.numel() / C : 0;
  if (R == 0) return;
  dispatch_float(x.dtype(), "cuda::layer_norm_backward", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(x.device().index), layer_norm_bwd_kernel<T>)(
        dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr,
        xhat.defined() ? static_cast<T*>(xhat.raw_data()) : nullptr, static_cast<const T*>(dy.raw_data()),
        static_cast<const T*>(x.raw_data()), ptr_or_null<T>(gamma), static_cast<const double*>(mean.raw_data()),
        static_cast<const double*>(rstd.raw_data()), C);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
