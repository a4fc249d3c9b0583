// Weight norm in one kernel each way (ops/weight_norm.cpp): w = g v / ||v||
// per row, the norms in float64.
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

// One block per row o of v (R, C): norm[o] = ||v_o|| (float64), w_o = g_o v_o / norm[o].
constexpr int kRowThreads = 256;
template <class T>
__global__ void weight_norm_fwd_kernel(T* w, double* norm, const T* v, const T* g, int64_t C) {
  __shared__ double sh[kRowThreads];
  const int64_t o = blockIdx.x;
  const T* vo = v + o * C;
  double sq = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) sq += static_cast<double>(vo[k]) * vo[k];
  const double n = ::sqrt(block_sum(sq, sh));
  if (threadIdx.x == 0) norm[o] = n;
  const T scale = static_cast<T>(static_cast<double>(g[o]) / n);
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) w[o * C + k] = vo[k] * scale;
}

// s = sum_k dw_ok v_ok; dg_o = s / n; dv_ok = (g_o / n) dw_ok - (g_o s / n^3) v_ok (null outputs skipped).
template <class T>
__global__ void weight_norm_bwd_kernel(T* dv, T* dg, const T* dw, const T* v, const T* g, const double* norm,
                                       int64_t C) {
  __shared__ double sh[kRowThreads];
  const int64_t o = blockIdx.x;
  double acc = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) acc += static_cast<double>(dw[o * C + k]) * v[o * C + k];
  const double s = block_sum(acc, sh), n = norm[o], go = g[o];
  if (dg && threadIdx.x == 0) dg[o] = static_cast<T>(s / n);
  if (!dv) return;
  const T a = static_cast<T>(go / n), b = static_cast<T>(go * s / (n * n * n));
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) dv[o * C + k] = a * dw[o * C + k] - b * v[o * C + k];
}

}  // namespace

void weight_norm_forward(const Tensor& w, const Tensor& norm, const Tensor& v, const Tensor& g) {
  const int64_t R = v.size(0), C = R > 0 ? v.numel() / R : 0;
  if (R == 0) return;
  dispatch_float(v.dtype(), "cuda::weight_norm_forward", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(v.device().index), weight_norm_fwd_kernel<T>)(
        static_cast<T*>(w.raw_data()), static_cast<double*>(norm.raw_data()), static_cast<const T*>(v.raw_data()),
        static_cast<const T*>(g.raw_data()), C);
  });
  CUDA_CHECK(cudaGetLastError());
}

void weight_norm_backward(const Tensor& dv, const Tensor& dg, const Tensor& dw, const Tensor& v, const Tensor& g,
                          const Tensor& norm) {
  const int64_t R = v.size(0), C = R > 0 ? v.numel() / R : 0;
  if (R == 0) return;
  dispatch_float(v.dtype(), "cuda::weight_norm_backward", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(v.device().index), weight_norm_bwd_kernel<T>)(
        dv.defined() ? static_cast<T*>(dv.raw_data()) : nullptr, dg.defined() ? static_cast<T*>(dg.raw_data()) : nullptr,
        static_cast<const T*>(dw.raw_data()), static_cast<const T*>(v.raw_data()), static_cast<const T*>(g.raw_data()),
        static_cast<const double*>(norm.raw_data()), C);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
