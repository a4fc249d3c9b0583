// Dropout's kernels (ops/dropout.cpp): masks drawn from Philox by element
// index, so the CPU and CUDA masks are equal, regenerated in backward instead of
// stored; the TCN block's fused tail, relu(dropout(relu(x)) + res).
#include <cmath>

#include "core/philox.h"
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"
#include "core/math/functors.h"

namespace tcn::cuda {

namespace {

// The first counter: start, plus the device-side base of a captured step (core/step_graph.h).
__device__ __forceinline__ uint64_t philox_start(uint64_t start, const double* base) {
  return base ? start + static_cast<uint64_t>(*base) : start;
}

// An input of up to 3 dims with any strides, read in row-major element order:
// a narrowed [B, T, C] activation needs no contiguous copy before the kernel.
struct Strided3 {
  int64_t n1 = 1, n2 = 1;      // sizes of the last two dims (the first is implied by n)
  int64_t s0 = 0, s1 = 0, s2 = 1;
  __device__ __forceinline__ int64_t offset(int64_t i) const {
    return (i / (n1 * n2)) * s0 + ((i / n2) % n1) * s1 + (i % n2) * s2;
  }
};

Strided3 strided3(const Tensor& x) {
  TCN_CHECK(x.dim() <= 3 || x.is_contiguous(), "CUDA kernel: a strided input of rank ", x.dim(), " (at most 3)");
  Strided3 g;
  if (x.dim() > 3) {  // contiguous: one row
    g.n2 = x.numel();
    return g;
  }
  const int pad = 3 - static_cast<int>(x.dim());
  auto size = [&](int d) { return d < pad ? int64_t{1} : x.size(d - pad); };
  auto stride = [&](int d) { return d < pad ? int64_t{0} : x.stride(d - pad); };
  g.n1 = size(1);
  g.n2 = size(2);
  g.s0 = stride(0);
  g.s1 = stride(1);
  g.s2 = stride(2);
  return g;
}

// Calls f(i, bits) for each element i < n, bits its 32-bit Philox number: number
// i % 4 of block i / 4 of the stream at `start`. A thread takes whole blocks (four
// elements: 4q .. 4q + 3), so the ten rounds of a block run once per four elements,
// not once per element. With draw false no block is computed (bits is 0).
template <class F>
__device__ __forceinline__ void for_each_philox_element(int64_t n, uint64_t seed, uint64_t start, bool draw, F&& f) {
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; 4 * q < n; q += int64_t(gridDim.x) * blockDim.x) {
    Philox4 bits{};
    if (draw) bits = philox_block(seed, start + q);
    for (int j = 0; j < 4 && 4 * q + j < n; ++j) f(4 * q + j, bits.v[j]);
  }
}

// y (contiguous) from x (strided): element i of both is the i-th in row-major order.
template <class T>
__global__ void dropout_fwd_kernel(T* y, const T* x, Strided3 xs, int64_t n, uint64_t seed, uint64_t start0,
                                   const double* base, uint32_t threshold, T scale, bool relu) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T xi = x[xs.offset(i)];
    bool k = (bits >> 8) >= threshold;
    if (relu) k = k && xi > T(0);
    y[i] = xi * (static_cast<T>(k) * scale);
  });
}

// dx = g * keep * scale. With y (relu_dropout's output), keep is y > 0 and no
// Philox is drawn.
template <class T>
__global__ void dropout_bwd_kernel(T* dx, const T* g, Strided3 gs, const T* y, int64_t n, uint64_t seed,
                                   uint64_t start0, const double* base, uint32_t threshold, T scale) {
  const uint64_t start = y ? 0 : philox_start(start0, base);
  for_each_philox_element(n, seed, start, !y, [&](int64_t i, uint32_t bits) {
    const bool k = y ? y[i] > T(0) : (bits >> 8) >= threshold;
    dx[i] = g[gs.offset(i)] * (static_cast<T>(k) * scale);
  });
}

// A TCN block's tail in one pass each way: z = relu(relu(x) * keep * scale + res),
// x and res read through their strides, z contiguous. The product and the sum
// are rounded separately, as the CPU's relu_dropout_add_relu rounds them, so
// that both devices give the same bits (the dropout masks are equal too).
template <class T>
__global__ void dropout_add_relu_fwd_kernel(T* z, const T* x, Strided3 xs, const T* res, Strided3 rs, int64_t n,
                                            uint64_t seed, uint64_t start0, const double* base, uint32_t threshold,
                                            T scale) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T xi = x[xs.offset(i)];
    const bool k = (bits >> 8) >= threshold && xi > T(0);
    const T s = add_rn(mul_rn(xi, static_cast<T>(k) * scale), res[rs.offset(i)]);
    z[i] = fn::Relu{}.fwd(s);  // NaN stays NaN
  });
}

// Its gradients: dres = g where z > 0 (else 0), dx = dres * keep * scale where
// x > 0, the keep flags drawn again from (seed, start). dx and dres contiguous.
template <class T>
__global__ void dropout_add_relu_bwd_kernel(T* dx, T* dres, const T* g, Strided3 gs, const T* x, Strided3 xs,
                                            const T* z, int64_t n, uint64_t seed, uint64_t start0, const double* base,
                                            uint32_t threshold, T scale) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T gz = fn::Relu{}.bwd(g[gs.offset(i)], T(0), z[i]);
    const bool k = (bits >> 8) >= threshold && x[xs.offset(i)] > T(0);
    dres[i] = gz;
    dx[i] = gz * (static_cast<T>(k) * scale);
  });
}


uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::ceil(p * 16777216.0)); }
// The scale of kept elements, 1 / (1 - p) (0 when everything is dropped).
template <class T>
T dropout_scale(double p) {
  return static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
}

}  // namespace

void dropout_forward(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t start, const Tensor& base,
                     bool relu) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "cuda::dropout_forward", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(x.device().index), dropout_fwd_kernel<T>)(
        static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()), strided3(x), n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p), relu);
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(const Tensor& dx, const Tensor& g, double p, uint64_t seed, uint64_t start, const Tensor& base,
                      const Tensor& y) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_float(g.dtype(), "cuda::dropout_backward", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(g.device().index), dropout_bwd_kernel<T>)(
        static_cast<T*>(dx.raw_data()), static_cast<const T*>(g.raw_data()), strided3(g),
        y.defined() ? static_cast<const T*>(y.raw_data()) : nullptr, n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_add_relu_forward(const Tensor& z, const Tensor& x, const Tensor& res, double p, uint64_t seed,
                              uint64_t start, const Tensor& base) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "cuda::dropout_add_relu_forward", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(x.device().index), dropout_add_relu_fwd_kernel<T>)(
        static_cast<T*>(z.raw_data()), static_cast<const T*>(x.raw_data()), strided3(x),
        static_cast<const T*>(res.raw_data()), strided3(res), n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_add_relu_backward(const Tensor& dx, const Tensor& dres, const Tensor& g, const Tensor& x, const Tensor& z,
                               double p, uint64_t seed, uint64_t start, const Tensor& base) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_float(g.dtype(), "cuda::dropout_add_relu_backward", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(g.device().index), dropout_add_relu_bwd_kernel<T>)(
        static_cast<T*>(dx.raw_data()), static_cast<T*>(dres.raw_data()), static_cast<const T*>(g.raw_data()),
        strided3(g), static_cast<const T*>(x.raw_data()), strided3(x), static_cast<const T*>(z.raw_data()), n, seed,
        start, scalar_ptr(base), dropout_threshold(p), dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
