// The fused cross-entropy's kernels (ops/cross_entropy.cpp): per-row
// log-sum-exp and loss forward, softmax minus one-hot backward.
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

// One block per row: max, then sum of exp, by block-wide reductions in shared memory.
template <class T>
__global__ void ce_rows_kernel(double* lse, double* row_loss, const T* x, const int64_t* tg, int64_t V) {
  double* sh = dynamic_shared<double>();
  const int64_t r = blockIdx.x;
  const T* row = x + r * V;
  double m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = ::fmax(m, static_cast<double>(row[v]));
  m = block_reduce(m, sh, [](double a, double b) { return ::fmax(a, b); });
  double acc = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) acc += ::exp(static_cast<double>(row[v]) - m);
  const double total = block_sum(acc, sh);
  if (threadIdx.x == 0) {
    lse[r] = m + ::log(total);
    const int64_t t = tg[r];  // out of range: reported by the target check; NaN here, no read
    row_loss[r] = t >= 0 && t < V ? lse[r] - static_cast<double>(row[t]) : NAN;
  }
}

// The mean of the row losses in one block: a fixed assignment of rows to threads
// and a fixed tree, so the result is deterministic. Written in the loss dtype.
template <class T>
__global__ void ce_mean_kernel(T* loss, const double* row_loss, int64_t N) {
  __shared__ double sh[256];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) acc += row_loss[r];
  const double total = block_sum(acc, sh);
  if (threadIdx.x == 0) *loss = static_cast<T>(total / static_cast<double>(N));
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

}  // namespace

void cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor row_loss = empty({N}, {DType::F64, logits.device()});
  const int block = 256;
  cudaStream_t s = stream(logits.device().index);
  dispatch_float(logits.dtype(), "cuda::cross_entropy_forward", [&]<class T>() {
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
  dispatch_float(logits.dtype(), "cuda::cross_entropy_backward", [&]<class T>() {
    TCN_LAUNCH(grid_for(N * V, 256), 256, 0, stream(logits.device().index), ce_backward_kernel<T>)(
        static_cast<T*>(dlogits.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const double*>(lse.raw_data()), static_cast<const int64_t*>(targets.raw_data()),
        static_cast<const T*>(dloss.raw_data()), N, V);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
