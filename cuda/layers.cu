// Kernels of the layer primitives: embedding rows, cross-entropy, dropout,
// LSTM cell. Each mirrors its CPU kernel in ops/ (same layouts, same math) so
// the CPU is its oracle (tests/test_cuda_ops.cpp).
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "core/philox.h"
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/thrust.cuh"
#include "cuda/kernels.h"
#include "ops/ops.h"

namespace tcn::cuda {

namespace {

template <class T>
__device__ __forceinline__ T sigm(T x) {
  return T(1) / (T(1) + ::exp(-x));
}

// ---- rows -------------------------------------------------------------------------
template <class T>
__global__ void gather_kernel(T* out, const T* table, const int64_t* idx, int64_t n, int64_t D, int64_t s0, int64_t s1) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D;
    out[e] = table[idx[i] * s0 + j * s1];
  }
}

// keys = indices sorted stably, pos = their original positions. The first
// position of each run of equal keys sums the run's rows in order.
template <class T>
__global__ void segment_sum_kernel(T* out, const T* src, const int64_t* keys, const int64_t* pos, int64_t n, int64_t D) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D;
    if (i > 0 && keys[i] == keys[i - 1]) continue;
    T acc = 0;
    for (int64_t k = i; k < n && keys[k] == keys[i]; ++k) acc += src[pos[k] * D + j];
    out[keys[i] * D + j] += acc;
  }
}

// ---- cross-entropy ------------------------------------------------------------------
// One block per row: max, then sum of exp, by block-wide reductions in shared memory.
template <class T>
__global__ void ce_rows_kernel(double* lse, double* row_loss, const T* x, const int64_t* tg, int64_t V) {
  double* sh = dynamic_shared<double>();
  const int64_t r = blockIdx.x;
  const T* row = x + r * V;
  double m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = ::fmax(m, static_cast<double>(row[v]));
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = ::fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  m = sh[0];
  __syncthreads();
  double acc = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) acc += ::exp(static_cast<double>(row[v]) - m);
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    lse[r] = m + ::log(sh[0]);
    row_loss[r] = lse[r] - static_cast<double>(row[tg[r]]);
  }
}

// The mean of the row losses in one block: a fixed assignment of rows to threads
// and a fixed tree, so the result is deterministic. Written in the loss dtype.
template <class T>
__global__ void ce_mean_kernel(T* loss, const double* row_loss, int64_t N) {
  __shared__ double sh[256];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) acc += row_loss[r];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<T>(sh[0] / static_cast<double>(N));
}

template <class T>
__global__ void ce_backward_kernel(T* dx, const T* x, const double* lse, const int64_t* tg, const T* dloss, int64_t N,
                                   int64_t V) {
  const double scale = static_cast<double>(*dloss) / static_cast<double>(N);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * V; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / V, v = e % V;
    double d = ::exp(static_cast<double>(x[e]) - lse[r]);
    if (v == tg[r]) d -= 1.0;
    dx[e] = static_cast<T>(scale * d);
  }
}

// ---- dropout ---------------------------------------------------------------------------
__device__ __forceinline__ bool keep_flag(uint64_t seed, uint64_t start, int64_t i, uint32_t threshold) {
  return (philox_block(seed, start + i / 4).v[i % 4] >> 8) >= threshold;
}

template <class T>
__global__ void dropout_fwd_kernel(T* y, const T* x, int64_t n, uint64_t seed, uint64_t start, uint32_t threshold,
                                   T scale, bool relu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    bool k = keep_flag(seed, start, i, threshold);
    if (relu) k = k && x[i] > T(0);
    y[i] = x[i] * (static_cast<T>(k) * scale);
  }
}

template <class T>
__global__ void dropout_bwd_kernel(T* dx, const T* g, const T* y, int64_t n, uint64_t seed, uint64_t start,
                                   uint32_t threshold, T scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool k = y ? y[i] > T(0) : keep_flag(seed, start, i, threshold);
    dx[i] = g[i] * (static_cast<T>(k) * scale);
  }
}

// ---- LSTM cell -------------------------------------------------------------------------
template <class T>
__global__ void lstm_fwd_kernel(T* act, const T* c0, T* hs, T* cs, int64_t B, int64_t Tn, int64_t H, int64_t t) {
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
    hs[(b * Tn + t) * H + k] = o * ::tanh(c);
  }
}

template <class T>
__global__ void lstm_bwd_kernel(T* dG, const T* act, const T* c0, const T* cs, const T* dout, T* dh, T* dc, int64_t B,
                                int64_t Tn, int64_t H, int64_t t) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, k = e % H;
    const T* a = act + (b * Tn + t) * 4 * H;
    T* dg = dG + (b * Tn + t) * 4 * H;
    const T cp = t == 0 ? c0[b * H + k] : cs[(b * Tn + t - 1) * H + k];
    const T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];
    const T tc = ::tanh(cs[(b * Tn + t) * H + k]);
    const T dht = dout[(b * Tn + t) * H + k] + dh[e];
    const T dct = dc[e] + dht * o * (T(1) - tc * tc);
    dg[k] = dct * g * i * (T(1) - i);
    dg[H + k] = dct * cp * f * (T(1) - f);
    dg[2 * H + k] = dct * i * (T(1) - g * g);
    dg[3 * H + k] = dht * tc * o * (T(1) - o);
    dc[e] = dct * f;
  }
}

uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::ceil(p * 16777216.0)); }

}  // namespace

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& idx) {
  const int64_t n = idx.numel(), D = table.size(1);
  if (n * D == 0) return;
  dispatch_float(table.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, stream(out.device().index), gather_kernel<T>)(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(table.raw_data()),
        static_cast<const int64_t*>(idx.raw_data()), n, D, table.stride(0), table.stride(1));
  });
  CUDA_CHECK(cudaGetLastError());
}

void scatter_add_rows(const Tensor& out, const Tensor& src, const Tensor& idx) {
  const int64_t n = idx.numel(), D = src.size(-1);
  if (n * D == 0) return;
  const int dev = out.device().index;
  cudaStream_t s = stream(dev);
  Tensor keys = clone(idx);
  Tensor pos = empty({n}, {DType::I64, out.device()});
  // Raw pointers with an explicit policy (no thrust::device_ptr, whose
  // references Thrust's host backend builds from a null system pointer).
  int64_t* kp = static_cast<int64_t*>(keys.raw_data());
  int64_t* pp = static_cast<int64_t*>(pos.raw_data());
  thrust::sequence(thrust_on(s), pp, pp + n);
  thrust::stable_sort_by_key(thrust_on(s), kp, kp + n, pp);
  dispatch_float(src.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, s, segment_sum_kernel<T>)(static_cast<T*>(out.raw_data()),
                                                                static_cast<const T*>(src.raw_data()),
                                                                static_cast<const int64_t*>(keys.raw_data()),
                                                                static_cast<const int64_t*>(pos.raw_data()), n, D);
  });
  CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor row_loss = empty({N}, {DType::F64, logits.device()});
  const int block = 256;
  cudaStream_t s = stream(logits.device().index);
  dispatch_float(logits.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(N), block, block * sizeof(double), s, ce_rows_kernel<T>)(
        static_cast<double*>(lse.raw_data()), static_cast<double*>(row_loss.raw_data()),
        static_cast<const T*>(logits.raw_data()), static_cast<const int64_t*>(targets.raw_data()), V);
    TCN_LAUNCH(1, 256, 0, s, ce_mean_kernel<T>)(static_cast<T*>(loss.raw_data()),
                                        static_cast<const double*>(row_loss.raw_data()), N);
  });
  CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& targets) {
  const int64_t N = logits.size(0), V = logits.size(1);
  dispatch_float(logits.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(N * V, 256), 256, 0, stream(logits.device().index), ce_backward_kernel<T>)(
        static_cast<T*>(dlogits.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const double*>(lse.raw_data()), static_cast<const int64_t*>(targets.raw_data()),
        static_cast<const T*>(dloss.raw_data()), N, V);
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_forward(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t start, bool relu) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n, 256), 256, 0, stream(x.device().index), dropout_fwd_kernel<T>)(
        static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()), n, seed, start, dropout_threshold(p),
        static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0), relu);
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(const Tensor& dx, const Tensor& g, double p, uint64_t seed, uint64_t start, const Tensor& y) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_float(g.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n, 256), 256, 0, stream(g.device().index), dropout_bwd_kernel<T>)(
        static_cast<T*>(dx.raw_data()), static_cast<const T*>(g.raw_data()),
        y.defined() ? static_cast<const T*>(y.raw_data()) : nullptr, n, seed, start, dropout_threshold(p),
        static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0));
  });
  CUDA_CHECK(cudaGetLastError());
}

void lstm_cell_forward(const Tensor& act, const Tensor& c0, const Tensor& hs, const Tensor& cs, int64_t t) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;  // an empty batch: no grid to launch (a zero grid is an invalid configuration)
  dispatch_float(act.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_fwd_kernel<T>)(
        static_cast<T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()), static_cast<T*>(hs.raw_data()),
        static_cast<T*>(cs.raw_data()), B, Tn, H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

void lstm_cell_backward(const Tensor& dG, const Tensor& act, const Tensor& c0, const Tensor& cs, const Tensor& dout,
                        const Tensor& dh, const Tensor& dc, int64_t t) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;
  dispatch_float(act.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_bwd_kernel<T>)(
        static_cast<T*>(dG.raw_data()), static_cast<const T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()),
        static_cast<const T*>(cs.raw_data()), static_cast<const T*>(dout.raw_data()), static_cast<T*>(dh.raw_data()),
        static_cast<T*>(dc.raw_data()), B, Tn, H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
