// The embedding's kernels (ops/rows.cpp): gather_rows and scatter_add_rows,
// and the device-side index check that the rows and cross-entropy ops share.
// The CPU kernels are the oracle (tests/op_cases.cpp, test_cuda_ops.cpp).
#include <thrust/sequence.h>

#include "cuda/context.cuh"
#include "cuda/device.cuh"
#include "cuda/kernels.h"
#include "cuda/thrust.cuh"
#include "core/tensor.h"

namespace tcn::cuda {

namespace {

// One block finds the first element of idx outside [0, bound): each thread the
// first among its elements, then a min tree. The status is written only when
// no earlier error is pending (one stream per device: the first error wins).
constexpr int kCheckThreads = 256;
__global__ void check_index_kernel(DeviceStatus* st, int32_t what, const int64_t* idx, int64_t n, int64_t bound) {
  __shared__ int64_t first[kCheckThreads];
  int64_t mine = n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (idx[i] < 0 || idx[i] >= bound) {
      mine = i;
      break;
    }
  const int64_t bad = block_reduce(mine, first, [](int64_t a, int64_t b) { return b < a ? b : a; });
  if (threadIdx.x == 0 && bad < n && st->check == 0) {
    st->position = bad;
    st->value = idx[bad];
    st->bound = bound;
    __threadfence_system();  // the fields before the flag that says they are there
    st->check = what;
  }
}

// out (B, D) rows = table rows idx[i]; an index outside [0, V) gives a zero row.
template <class T>
__global__ void gather_kernel(T* out, const T* table, const int64_t* idx, int64_t n, int64_t D, int64_t V, int64_t s0,
                              int64_t s1) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D, r = idx[i];
    out[e] = r >= 0 && r < V ? table[r * s0 + j * s1] : T(0);
  }
}

// Embedding backward for small tables, without a sort: thread (v, j) adds
// src[i, j] for every i with idx[i] == v, in index order: the CPU's additions
// in the CPU's order, so the result is bit for bit the CPU's. The indices go
// through shared memory a tile at a time, read by the whole block.
// out (V, D) +=; src (n, D); block (32, 8): 32 columns of 8 rows.
constexpr int kScanCols = 32, kScanRows = 8, kScanTile = 1024;
template <class T>
__global__ void scatter_scan_kernel(T* out, const T* src, const int64_t* idx, int64_t n, int64_t D, int64_t V) {
  __shared__ int64_t tile[kScanTile];
  const int64_t j = blockIdx.x * int64_t(kScanCols) + threadIdx.x, v = blockIdx.y * int64_t(kScanRows) + threadIdx.y;
  const int t = threadIdx.y * kScanCols + threadIdx.x;
  T acc = 0;
  for (int64_t i0 = 0; i0 < n; i0 += kScanTile) {
    const int64_t m = n - i0 < kScanTile ? n - i0 : kScanTile;
    __syncthreads();  // the previous tile is no longer read
    for (int k = t; k < m; k += kScanCols * kScanRows) tile[k] = idx[i0 + k];
    __syncthreads();
    if (j < D && v < V)
      for (int64_t k = 0; k < m; ++k)
        if (tile[k] == v) acc += src[(i0 + k) * D + j];
  }
  if (j < D && v < V) out[v * D + j] += acc;
}

// Large tables: keys = indices sorted stably, pos = their original positions.
// The first position of each run of equal keys sums the run's rows in order.
template <class T>
__global__ void segment_sum_kernel(T* out, const T* src, const int64_t* keys, const int64_t* pos, int64_t n, int64_t D,
                                   int64_t V) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D;
    if ((i > 0 && keys[i] == keys[i - 1]) || keys[i] < 0 || keys[i] >= V) continue;
    T acc = 0;
    for (int64_t k = i; k < n && keys[k] == keys[i]; ++k) acc += src[pos[k] * D + j];
    out[keys[i] * D + j] += acc;
  }
}



// Tables up to this many rows take the sort-free embedding backward: rows x D
// threads, each reading all n indices (not yet timed on a GPU).
constexpr int64_t kSmallTable = 1024;

}  // namespace

void check_index_range(DeviceCheck what, const Tensor& idx, int64_t bound) {
  const int64_t n = idx.numel();
  if (n == 0) return;
  const int dev = idx.device().index;
  TCN_LAUNCH(1, kCheckThreads, 0, stream(dev), check_index_kernel)(device_status(dev), static_cast<int32_t>(what),
                                                                    static_cast<const int64_t*>(idx.raw_data()), n,
                                                                    bound);
  CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& idx) {
  const int64_t n = idx.numel(), D = table.size(1);
  if (n * D == 0) return;
  dispatch_float(table.dtype(), "cuda::gather_rows", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, stream(out.device().index), gather_kernel<T>)(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(table.raw_data()),
        static_cast<const int64_t*>(idx.raw_data()), n, D, table.size(0), table.stride(0), table.stride(1));
  });
  CUDA_CHECK(cudaGetLastError());
}

void scatter_add_rows(const Tensor& out, const Tensor& src, const Tensor& idx) {
  const int64_t n = idx.numel(), D = src.size(-1), V = out.size(0);
  if (n * D == 0 || V == 0) return;
  const int dev = out.device().index;
  cudaStream_t s = stream(dev);
  if (V <= kSmallTable) {  // one kernel, no sort, no host synchronisation
    const dim3 grid(static_cast<unsigned>((D + kScanCols - 1) / kScanCols),
                    static_cast<unsigned>((V + kScanRows - 1) / kScanRows));
    dispatch_float(src.dtype(), "cuda::scatter_add_rows", [&]<class T>() {
      TCN_LAUNCH(grid, dim3(kScanCols, kScanRows), 0, s, scatter_scan_kernel<T>)(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(src.raw_data()),
          static_cast<const int64_t*>(idx.raw_data()), n, D, V);
    });
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  // Large tables: a stable sort of the indices (Thrust; it synchronises), then
  // one pass over the runs.
  Tensor keys = empty({n}, {DType::I64, out.device()});  // the indices (contiguous: ops/rows.cpp), sorted in place
  CUDA_CHECK(cudaMemcpyAsync(keys.raw_data(), idx.raw_data(), static_cast<size_t>(n) * sizeof(int64_t),
                             cudaMemcpyDeviceToDevice, s));
  Tensor pos = empty({n}, {DType::I64, out.device()});
  // Raw pointers with an explicit policy (no thrust::device_ptr, whose
  // references Thrust's host backend builds from a null system pointer).
  int64_t* kp = static_cast<int64_t*>(keys.raw_data());
  int64_t* pp = static_cast<int64_t*>(pos.raw_data());
  {
    [[maybe_unused]] ThrustScope scope;
    thrust::sequence(thrust_on(s), pp, pp + n);
  }
  stable_sort_by_key(s, kp, pp, n);
  dispatch_float(src.dtype(), "cuda::scatter_add_rows", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, s, segment_sum_kernel<T>)(static_cast<T*>(out.raw_data()),
                                                                static_cast<const T*>(src.raw_data()),
                                                                static_cast<const int64_t*>(keys.raw_data()),
                                                                static_cast<const int64_t*>(pos.raw_data()), n, D, V);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
