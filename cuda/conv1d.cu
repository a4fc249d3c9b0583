// conv1d's weight packing and its inverse for the gradients (ops/conv1d.cpp:
// the packed [K, X, Cout] weights with the bias row).
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

// wt[j, i, o] = w[o, i, j] (any strides) for i < Cin; row i = Cin (with a bias)
// the bias in tap 0 and zeros in the others; rows past it zeros. One thread per
// element of wt.
template <class D, class S>
__global__ void pack_conv_weights_kernel(D* wt, const S* w, const S* bias, int64_t K, int64_t X, int64_t Cout,
                                         int64_t Cin, int64_t s0, int64_t s1, int64_t s2) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < K * X * Cout;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e % Cout, i = (e / Cout) % X, j = e / (Cout * X);
    wt[e] = i < Cin ? D(w[o * s0 + i * s1 + j * s2]) : i == Cin && j == 0 && bias ? D(bias[o]) : D(0.0f);
  }
}

// The reverse of the packing, for the gradients: dw[o, i, j] = dwt[j, i, o] for
// i < Cin, db[o] = dwt[0, Cin, o] (either output may be null; rows past Cin,
// the alignment's zeros, are not read). One thread per element of dwt [K, X, Cout].
template <class T>
__global__ void unpack_conv_grads_kernel(T* dw, T* db, const T* dwt, int64_t K, int64_t X, int64_t Cout,
                                         int64_t Cin) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < K * X * Cout;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e % Cout, i = (e / Cout) % X, j = e / (Cout * X);
    if (i < Cin) {
      if (dw) dw[(o * Cin + i) * K + j] = dwt[e];
    } else if (i == Cin && j == 0 && db) {
      db[o] = dwt[e];
    }
  }
}

}  // namespace

void pack_conv_weights(const Tensor& wt, const Tensor& w, const Tensor& bias) {
  const int64_t K = wt.size(0), X = wt.size(1), Cout = wt.size(2), Cin = w.size(1);
  TCN_CHECK(w.size(0) == Cout && w.size(2) == K && X >= Cin + (bias.defined() ? 1 : 0),
            "pack_conv_weights: ", w.shape(), " into ", wt.shape());
  TCN_CHECK(!bias.defined() || (bias.dtype() == w.dtype() && bias.numel() == Cout), "pack_conv_weights: bias ",
            bias.defined() ? bias.shape() : Shape{}, " for ", Cout, " output channels of dtype ", dtype_name(w.dtype()));
  if (K * X * Cout == 0) return;
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  auto launch = [&]<class D, class S>() {
    TCN_LAUNCH(grid_for(K * X * Cout, 256), 256, 0, stream(wt.device().index), pack_conv_weights_kernel<D, S>)(
        static_cast<D*>(wt.raw_data()), static_cast<const S*>(w.raw_data()),
        b.defined() ? static_cast<const S*>(b.raw_data()) : nullptr, K, X, Cout, Cin, w.stride(0), w.stride(1),
        w.stride(2));
  };
  if (wt.dtype() == DType::BF16 && w.dtype() == DType::F32) {
    launch.template operator()<bfloat16, float>();
  } else {
    TCN_CHECK(wt.dtype() == w.dtype(), "pack_conv_weights: ", dtype_name(w.dtype()), " into ",
              dtype_name(wt.dtype()), " (same dtypes, or float32 into bfloat16)");
    dispatch_float(wt.dtype(), "cuda::pack_conv_weights", [&]<class T>() { launch.template operator()<T, T>(); });
  }
  CUDA_CHECK(cudaGetLastError());
}

void unpack_conv_grads(const Tensor& dw, const Tensor& db, const Tensor& dwt, int64_t Cin) {
  const int64_t K = dwt.size(0), X = dwt.size(1), Cout = dwt.size(2);
  TCN_CHECK(dwt.is_contiguous() && (!dw.defined() || (dw.is_contiguous() && dw.size(0) == Cout && dw.size(2) == K &&
                                                      dw.size(1) == Cin && X >= Cin)) &&
                (!db.defined() || (db.is_contiguous() && db.numel() == Cout && X > Cin)),
            "unpack_conv_grads: ", dwt.shape(), " into ", dw.defined() ? dw.shape() : Shape{}, " and ",
            db.defined() ? db.shape() : Shape{});
  if (K * X * Cout == 0) return;
  dispatch_float(dwt.dtype(), "cuda::unpack_conv_grads", [&]<class T>() {
    TCN_LAUNCH(grid_for(K * X * Cout, 256), 256, 0, stream(dwt.device().index), unpack_conv_grads_kernel<T>)(
        dw.defined() ? static_cast<T*>(dw.raw_data()) : nullptr, db.defined() ? static_cast<T*>(db.raw_data()) : nullptr,
        static_cast<const T*>(dwt.raw_data()), K, X, Cout, Cin);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
