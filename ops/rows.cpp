// Row gather and row scatter-add: the embedding primitive and its backward.
// scatter_add_rows sums duplicate indices in index order (threads split the
// columns, never the rows), so the result is deterministic.
#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// Every index in [0, num_rows). On the CPU at once; on a GPU by a check kernel
// whose finding is raised at the host's next wait for the device (no copy of
// the indices to the host, no synchronisation: cuda/kernels.h).
void check_indices(const char* op, cuda::DeviceCheck on_device, const Tensor& idx, int64_t num_rows) {
  TCN_CHECK(idx.dtype() == DType::I64, op, ": indices must be int64, got ", idx.dtype());
  if (idx.device().is_cuda()) {
    TCN_CUDA_OP(op, cuda::check_index_range(on_device, idx, num_rows));
    return;
  }
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    TCN_CHECK(p[i] >= 0 && p[i] < num_rows, op, ": index ", p[i], " at position ", i,
              " is out of range for ", num_rows, " rows");
}

}  // namespace

Tensor gather_rows(const Tensor& table, const Tensor& idx_in) {
  const profile::Op range("gather_rows");
  check_defined("gather_rows", table);
  check_defined("gather_rows", idx_in, "index");
  check_float("gather_rows", table);
  check_same_device("gather_rows", table, idx_in);
  TCN_CHECK(table.dim() == 2, "gather_rows: table must be [rows, dim], got ", table.shape());
  const int64_t V = table.size(0), D = table.size(1);
  Shape out_shape = idx_in.shape();
  out_shape.push_back(D);
  Tensor out = empty(out_shape, table.options());
  Tensor idx = idx_in.contiguous();
  check_indices("gather_rows", cuda::DeviceCheck::GatherRows, idx, V);
  const int64_t n = idx.numel(), s0 = table.stride(0), s1 = table.stride(1);
  if (table.device().is_cuda()) {
    TCN_CUDA_OP("gather_rows", cuda::gather_rows(out, table.detach(), idx));
  } else dispatch_float(table.dtype(), "gather_rows", [&]<class T>() {
    const int64_t* ix = idx.data<int64_t>();
    const T* src = table.data<T>();
    T* dst = out.data<T>();
#pragma omp parallel for schedule(static) if (n * D >= (1 << 15))
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < D; ++j) dst[i * D + j] = src[ix[i] * s0 + j * s1];
  });
  if (autograd::needs_grad({table}))
    autograd::record("gather_rows", {table, Tensor()}, {out}, [idx, V](const TensorList& g) {
      return TensorList{scatter_add_rows(g[0], idx, V), Tensor()};
    });
  return out;
}

Tensor scatter_add_rows(const Tensor& src_in, const Tensor& idx_in, int64_t num_rows) {
  const profile::Op range("scatter_add_rows");
  check_defined("scatter_add_rows", src_in);
  check_defined("scatter_add_rows", idx_in, "index");
  check_float("scatter_add_rows", src_in);
  check_same_device("scatter_add_rows", src_in, idx_in);
  TCN_CHECK(src_in.dim() == idx_in.dim() + 1 &&
                Shape(src_in.shape().begin(), src_in.shape().end() - 1) == idx_in.shape(),
            "scatter_add_rows: source ", src_in.shape(), " must be the index shape ", idx_in.shape(),
            " plus one trailing dim");
  TCN_CHECK(num_rows >= 0, "scatter_add_rows: negative number of rows ", num_rows);
  const int64_t D = src_in.size(-1);
  Tensor out = zeros({num_rows, D}, src_in.options());
  Tensor idx = idx_in.contiguous();
  Tensor src = src_in.detach().contiguous();
  check_indices("scatter_add_rows", cuda::DeviceCheck::ScatterAddRows, idx, num_rows);
  const int64_t n = idx.numel();
  if (src.device().is_cuda()) {
    TCN_CUDA_OP("scatter_add_rows", cuda::scatter_add_rows(out, src, idx));
  } else dispatch_float(src.dtype(), "scatter_add_rows", [&]<class T>() {
    const int64_t* ix = idx.data<int64_t>();
    const T* s = src.data<T>();
    T* dst = out.data<T>();
#pragma omp parallel for schedule(static) if (n * D >= (1 << 15) && D >= 16)
    for (int64_t j = 0; j < D; ++j)
      for (int64_t i = 0; i < n; ++i) dst[ix[i] * D + j] += s[i * D + j];
  });
  if (autograd::needs_grad({src_in}))
    autograd::record("scatter_add_rows", {src_in, Tensor()}, {out}, [idx](const TensorList& g) {
      return TensorList{gather_rows(g[0], idx), Tensor()};
    });
  return out;
}

}  // namespace tcn
