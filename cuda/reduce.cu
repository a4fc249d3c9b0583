// Sums over any set of dims, accumulating in double, deterministic (a fixed
// assignment of elements to threads and a fixed tree). Short reductions: one
// thread per output. Long ones: when the outputs lie next to each other in
// memory (a bias gradient: the column sums of [B*T, C]), a block takes 32 of
// them, a warp's 32 threads reading 32 neighbours of one row at a time, so each
// load is coalesced; otherwise (a full sum, a row sum) one block per output, its
// threads striding over the reduced elements. Either way a shared-memory tree
// finishes. Neighbouring dims that step as one are merged first, so each
// element's offset takes fewer divisions.
#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace tcn::cuda {

namespace {

constexpr int kMaxDims = 8;

struct ReduceGeometry {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_sizes[kMaxDims], kept_strides[kMaxDims];
  int64_t red_sizes[kMaxDims], red_strides[kMaxDims];
};

__device__ __forceinline__ int64_t offset_of(int64_t i, int rank, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

template <class T>
__global__ void sum_kernel(T* out, const T* in, ReduceGeometry g, int64_t n_out, int64_t n_red) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n_out; o += int64_t(gridDim.x) * blockDim.x) {
    const T* base = in + offset_of(o, g.kept_rank, g.kept_sizes, g.kept_strides);
    double acc = 0;
    for (int64_t r = 0; r < n_red; ++r) acc += base[offset_of(r, g.red_rank, g.red_sizes, g.red_strides)];
    out[o] = static_cast<T>(acc);
  }
}

constexpr int kBlock = 256;

// Columns: block (32, kColumnRows) takes outputs [32 * blockIdx.x, + 32), thread
// (x, y) sums reduced elements y, y + kColumnRows, ... of output x; then a tree over y.
// 1,024 threads a block: __launch_bounds__ holds the compiler to the registers that
// allow it (64 a thread), or the launch would fail on a GPU.
constexpr int kColumnRows = 32;
template <class T>
__global__ void __launch_bounds__(32 * kColumnRows) sum_columns_kernel(T* out, const T* in, ReduceGeometry g, int64_t n_out, int64_t n_red) {
  __shared__ double sh[kColumnRows][33];  // 33: no bank conflicts in the tree's column reads
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t o = blockIdx.x * int64_t(32) + x;
  double acc = 0;
  if (o < n_out) {
    const T* base = in + offset_of(o, g.kept_rank, g.kept_sizes, g.kept_strides);
    for (int64_t r = y; r < n_red; r += kColumnRows)
      acc += base[offset_of(r, g.red_rank, g.red_sizes, g.red_strides)];
  }
  sh[y][x] = acc;
  __syncthreads();
  for (int half = kColumnRows / 2; half > 0; half /= 2) {
    if (y < half) sh[y][x] += sh[y + half][x];
    __syncthreads();
  }
  if (y == 0 && o < n_out) out[o] = static_cast<T>(sh[0][x]);
}

template <class T>
__global__ void sum_block_kernel(T* out, const T* in, ReduceGeometry g, int64_t n_red) {
  __shared__ double sh[kBlock];
  const int64_t o = blockIdx.x;
  const T* base = in + offset_of(o, g.kept_rank, g.kept_sizes, g.kept_strides);
  double acc = 0;
  for (int64_t r = threadIdx.x; r < n_red; r += kBlock) acc += base[offset_of(r, g.red_rank, g.red_sizes, g.red_strides)];
  const double total = block_sum(acc, sh);  // launched with kBlock threads
  if (threadIdx.x == 0) out[o] = static_cast<T>(total);
}

// One thread per output: the first index of the largest value along the dim.
template <class T>
__global__ void max_kernel(T* values, int64_t* indices, const T* in, ReduceGeometry g, int64_t n_out, int64_t len,
                           int64_t stride) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n_out; o += int64_t(gridDim.x) * blockDim.x) {
    const T* base = in + offset_of(o, g.kept_rank, g.kept_sizes, g.kept_strides);
    int64_t best = 0;
    for (int64_t i = 1; i < len; ++i)
      if (base[i * stride] > base[best * stride]) best = i;
    values[o] = base[best * stride];
    indices[o] = best;
  }
}

// Merges neighbouring entries of a (sizes, strides) list that step as one
// (strides[i] == strides[i + 1] * sizes[i + 1]); offset_of then visits the same
// elements in the same order with fewer divisions.
void merge_dims(int& rank, int64_t* sizes, int64_t* strides) {
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    if (r > 0 && strides[r - 1] == strides[i] * sizes[i]) {
      sizes[r - 1] *= sizes[i];
      strides[r - 1] = strides[i];
    } else {
      sizes[r] = sizes[i];
      strides[r] = strides[i];
      ++r;
    }
  }
  rank = r;
}

}  // namespace

void max_along(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  ReduceGeometry g;
  int64_t n_out = 1;
  TCN_CHECK(x.dim() <= kMaxDims, "CUDA max: rank ", x.dim(), " exceeds ", kMaxDims);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    g.kept_sizes[g.kept_rank] = x.size(d);
    g.kept_strides[g.kept_rank++] = x.stride(d);
    n_out *= x.size(d);
  }
  if (n_out == 0) return;
  cudaStream_t s = stream(x.device().index);
  if (x.dtype() == DType::F32)
    TCN_LAUNCH(grid_for(n_out, 128), 128, 0, s, max_kernel<float>)(static_cast<float*>(values.raw_data()),
                                                           static_cast<int64_t*>(indices.raw_data()),
                                                           static_cast<const float*>(x.raw_data()), g, n_out,
                                                           x.size(dim), x.stride(dim));
  else
    TCN_LAUNCH(grid_for(n_out, 128), 128, 0, s, max_kernel<double>)(static_cast<double*>(values.raw_data()),
                                                            static_cast<int64_t*>(indices.raw_data()),
                                                            static_cast<const double*>(x.raw_data()), g, n_out,
                                                            x.size(dim), x.stride(dim));
  CUDA_CHECK(cudaGetLastError());
}

void sum(const Tensor& out, const Tensor& x, const std::vector<bool>& reduced) {
  ReduceGeometry g;
  int64_t n_out = 1, n_red = 1;
  TCN_CHECK(x.dim() <= kMaxDims, "CUDA sum: rank ", x.dim(), " exceeds ", kMaxDims);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reduced[d]) {
      g.red_sizes[g.red_rank] = x.size(d);
      g.red_strides[g.red_rank++] = x.stride(d);
      n_red *= x.size(d);
    } else {
      g.kept_sizes[g.kept_rank] = x.size(d);
      g.kept_strides[g.kept_rank++] = x.stride(d);
      n_out *= x.size(d);
    }
  }
  if (n_out == 0) return;
  merge_dims(g.kept_rank, g.kept_sizes, g.kept_strides);
  merge_dims(g.red_rank, g.red_sizes, g.red_strides);
  cudaStream_t s = stream(x.device().index);
  const bool columns = g.kept_rank > 0 && g.kept_strides[g.kept_rank - 1] == 1;  // neighbouring outputs, neighbours in memory
  if (n_red >= 1024 && columns && (n_out + 31) / 32 <= (int64_t{1} << 31) - 1) {
    const dim3 block(32, kColumnRows);
    const unsigned grid = static_cast<unsigned>((n_out + 31) / 32);
    if (x.dtype() == DType::F32)
      TCN_LAUNCH(grid, block, 0, s, sum_columns_kernel<float>)(
          static_cast<float*>(out.raw_data()), static_cast<const float*>(x.raw_data()), g, n_out, n_red);
    else
      TCN_LAUNCH(grid, block, 0, s, sum_columns_kernel<double>)(
          static_cast<double*>(out.raw_data()), static_cast<const double*>(x.raw_data()), g, n_out, n_red);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (n_red >= 1024 && n_out <= (int64_t{1} << 31) - 1) {
    if (x.dtype() == DType::F32)
      TCN_LAUNCH(static_cast<unsigned>(n_out), kBlock, 0, s, sum_block_kernel<float>)(
          static_cast<float*>(out.raw_data()), static_cast<const float*>(x.raw_data()), g, n_red);
    else
      TCN_LAUNCH(static_cast<unsigned>(n_out), kBlock, 0, s, sum_block_kernel<double>)(
          static_cast<double*>(out.raw_data()), static_cast<const double*>(x.raw_data()), g, n_red);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int block = 128;
  if (x.dtype() == DType::F32)
    TCN_LAUNCH(grid_for(n_out, block), block, 0, s, sum_kernel<float>)(static_cast<float*>(out.raw_data()),
                                                               static_cast<const float*>(x.raw_data()), g, n_out, n_red);
  else
    TCN_LAUNCH(grid_for(n_out, block), block, 0, s, sum_kernel<double>)(static_cast<double*>(out.raw_data()),
                                                                static_cast<const double*>(x.raw_data()), g, n_out, n_red);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
