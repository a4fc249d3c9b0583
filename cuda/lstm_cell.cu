// The LSTM cell's kernels (ops/lstm_cell.cpp, ops/lstm_layer.cpp): gates,
// state and output forward, their gradients backward, in PyTorch's gate order.
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

template <class T>
__device__ __forceinline__ T sigm(T x) {
  return T(1) / (T(1) + ::exp(-x));
}

template <class T>
__global__ void lstm_fwd_kernel(T* act, const T* c0, T* hs, T* cs, bfloat16* hb, int64_t B, int64_t Tn, int64_t H,
                                int64_t t) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, k = e % H;
    T* a = act + (b * Tn + t) * 4 * H;
    const T cp = t == 0 ? c0[b * H + k] : cs[(b * Tn + t - 1) * H + k];
    const T i = sigm(a[k]), f = sigm(a[H + k]), g = ::tanh(a[2 * H + k]), o = sigm(a[3 * H + k]);
    a[k] = i;
    a[H + k] = f;
    a[2 * H + k] = g;
    a[3 * H + k] = o;
    const T c = f * cp + i * g;
    cs[(b * Tn + t) * H + k] = c;
    const T h = o * ::tanh(c);
    hs[(b * Tn + t) * H + k] = h;
    if (hb) hb[e] = bfloat16(static_cast<float>(h));  // the next step's GEMM operand under mixed precision
  }
}

template <class T>
__global__ void lstm_bwd_kernel(T* dG, bfloat16* dGb, const T* act, const T* c0, const T* cs, const T* dout, T* dh,
                                T* dc, int64_t B, int64_t Tn, int64_t H, int64_t t) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, k = e % H;
    const T* a = act + (b * Tn + t) * 4 * H;
    T* dg = dG + (b * Tn + t) * 4 * H;
    const T cp = t == 0 ? c0[b * H + k] : cs[(b * Tn + t - 1) * H + k];
    const T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];
    const T tc = ::tanh(cs[(b * Tn + t) * H + k]);
    const T dht = dout[(b * Tn + t) * H + k] + dh[e];
    const T dct = dc[e] + dht * o * (T(1) - tc * tc);
    const T d[4] = {dct * g * i * (T(1) - i), dct * cp * f * (T(1) - f), dct * i * (T(1) - g * g),
                    dht * tc * o * (T(1) - o)};
    for (int gate = 0; gate < 4; ++gate) dg[gate * H + k] = d[gate];
    dc[e] = dct * f;
    if (dGb)  // dG_t in bf16, [B, 4H]: the operand of this step's dh GEMM under mixed precision
      for (int gate = 0; gate < 4; ++gate) dGb[b * 4 * H + gate * H + k] = bfloat16(static_cast<float>(d[gate]));
  }
}

}  // namespace

void lstm_cell_forward(const Tensor& act, const Tensor& c0, const Tensor& hs, const Tensor& cs, int64_t t,
                       const Tensor& h_bf16) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;  // an empty batch: no grid to launch (a zero grid is an invalid configuration)
  dispatch_float(act.dtype(), "cuda::lstm_cell_forward", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_fwd_kernel<T>)(
        static_cast<T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()), static_cast<T*>(hs.raw_data()),
        static_cast<T*>(cs.raw_data()), h_bf16.defined() ? static_cast<bfloat16*>(h_bf16.raw_data()) : nullptr, B, Tn,
        H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

void lstm_cell_backward(const Tensor& dG, const Tensor& act, const Tensor& c0, const Tensor& cs, const Tensor& dout,
                        const Tensor& dh, const Tensor& dc, int64_t t, const Tensor& dG_bf16) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;
  dispatch_float(act.dtype(), "cuda::lstm_cell_backward", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_bwd_kernel<T>)(
        static_cast<T*>(dG.raw_data()), dG_bf16.defined() ? static_cast<bfloat16*>(dG_bf16.raw_data()) : nullptr,
        static_cast<const T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()),
        static_cast<const T*>(cs.raw_data()), static_cast<const T*>(dout.raw_data()), static_cast<T*>(dh.raw_data()),
        static_cast<T*>(dc.raw_data()), B, Tn, H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
