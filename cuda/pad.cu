// One-pass padding of rows (ops/pad.cpp, and conv1d's padded operands in
// ops/conv1d.cpp).
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

// out (B, Lp, C) contiguous: x (B, L, C; any strides) at rows [left, left + L) of
// each batch, zeros in the other rows. One pass instead of a fill and a copy.
// D and S may differ (float32 into bfloat16: mixed precision's padded operands).
template <class D, class S>
__global__ void pad_rows_kernel(D* out, const S* x, int64_t B, int64_t Lp, int64_t C, int64_t L, int64_t left,
                                int64_t s0, int64_t s1, int64_t s2, int64_t Cx, float extra) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * Lp * C; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, t = (e / C) % Lp - left, b = e / (C * Lp);
    out[e] = c >= Cx ? D(c == Cx ? extra : 0.0f) : t >= 0 && t < L ? D(x[b * s0 + t * s1 + c * s2]) : D(0.0f);
  }
}

}  // namespace

void pad_rows(const Tensor& out, const Tensor& x, int64_t left, double extra) {
  const int64_t B = out.size(0), Lp = out.size(1), C = out.size(2);
  TCN_CHECK(x.size(2) <= C, "pad_rows: ", x.size(2), " channels into ", C);
  if (B * Lp * C == 0) return;
  auto launch = [&]<class D, class S>() {
    TCN_LAUNCH(grid_for(B * Lp * C, 256), 256, 0, stream(out.device().index), pad_rows_kernel<D, S>)(
        static_cast<D*>(out.raw_data()), static_cast<const S*>(x.raw_data()), B, Lp, C, x.size(1), left, x.stride(0),
        x.stride(1), x.stride(2), x.size(2), static_cast<float>(extra));
  };
  if (out.dtype() == DType::BF16 && x.dtype() == DType::F32) {
    launch.template operator()<bfloat16, float>();
  } else {
    TCN_CHECK(out.dtype() == x.dtype(), "pad_rows: ", dtype_name(x.dtype()), " into ", dtype_name(out.dtype()),
              " (same dtypes, or float32 into bfloat16)");
    dispatch_float(out.dtype(), "cuda::pad_rows", [&]<class T>() { launch.template operator()<T, T>(); });
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
