// Fused log-softmax + negative log-likelihood, averaged over positions.
// logits [..., V] (any strides on the leading dims), targets int64 [...].
// Forward keeps one log-sum-exp per row; backward is softmax - onehot, scaled.
#include <cmath>
#include <vector>

#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// Element offset of row r (row-major over the leading dims) of a [..., V] tensor.
int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    off += (r % t.size(d)) * t.stride(d);
    r /= t.size(d);
  }
  return off;
}

void check_targets(const Tensor& targets, int64_t N, int64_t V) {
  const int64_t* tg = targets.data<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    TCN_CHECK(tg[r] >= 0 && tg[r] < V, "cross_entropy: target ", tg[r], " at position ", r, " is not a class in [0, ",
              V, ")");
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets_in) {
  const profile::Op range("cross_entropy");
  check_defined("cross_entropy", logits);
  check_defined("cross_entropy", targets_in, "targets");
  check_float("cross_entropy", logits);
  check_same_device("cross_entropy", logits, targets_in);
  profile::add_bytes(nbytes(logits));
  TCN_CHECK(logits.dim() >= 1, "cross_entropy: logits must be [..., classes]");
  TCN_CHECK(targets_in.dtype() == DType::I64, "cross_entropy: targets must be int64, got ", targets_in.dtype());
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  TCN_CHECK(targets_in.shape() == lead, "cross_entropy: logits ", logits.shape(), " need targets of shape ", lead,
            ", got ", targets_in.shape());
  const int64_t V = logits.size(-1), N = numel_of(lead);
  TCN_CHECK(N > 0, "cross_entropy: no positions to score");
  if (logits.device().is_cuda()) {
#ifdef TCN_WITH_CUDA
    Tensor x = logits.detach().contiguous().view({N, V});
    Tensor targets = targets_in.contiguous().view({N});
    cuda::check_index_range(cuda::DeviceCheck::CrossEntropyTarget, targets, V);  // raised at the next host wait
    Tensor lse = empty({N}, {DType::F64, logits.device()});
    Tensor loss = empty({}, logits.options());
    cuda::cross_entropy_forward(loss, lse, x, targets);
    if (autograd::needs_grad({logits}))
      autograd::record("cross_entropy", {logits, Tensor()}, {loss},
                       [x, targets, lse, shape = logits.shape()](const TensorList& g) {
                         Tensor dx = empty(x.shape(), x.options());
                         cuda::cross_entropy_backward(dx, g[0].contiguous(), x, lse, targets);
                         return TensorList{dx.view(shape), Tensor()};
                       });
    return loss;
#else
    no_cuda_kernel("cross_entropy");
#endif
  }
  Tensor x = logits.stride(-1) == 1 ? logits.detach() : logits.detach().contiguous();
  Tensor targets = targets_in.contiguous();
  check_targets(targets, N, V);
  const int64_t* tg = targets.data<int64_t>();

  Tensor lse = empty({N}, {DType::F64, Device::cpu()});
  Tensor loss = empty({}, logits.options());
  dispatch_float(x.dtype(), "cross_entropy", [&]<class T>() {
    const T* base = x.data<T>();
    double* l = lse.data<double>();
    std::vector<double> row_loss(N);
#pragma omp parallel for schedule(static) if (N * V >= (1 << 15))
    for (int64_t r = 0; r < N; ++r) {
      const T* row = base + row_offset(x, r);
      double m = row[0];
      for (int64_t v = 1; v < V; ++v) m = std::max<double>(m, row[v]);
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]) - m);
      l[r] = m + std::log(s);
      row_loss[r] = l[r] - static_cast<double>(row[tg[r]]);
    }
    double total = 0;  // in row order, whatever the thread count
    for (double v : row_loss) total += v;
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });

  if (autograd::needs_grad({logits}))
    autograd::record("cross_entropy", {logits, Tensor()}, {loss}, [x, targets, lse, N, V](const TensorList& g) {
      Shape shape = x.shape();
      Tensor dx = empty(shape, x.options());
      const double scale = g[0].item() / static_cast<double>(N);
      dispatch_float(x.dtype(), "cross_entropy backward", [&]<class T>() {
        const T* base = x.data<T>();
        T* out = dx.data<T>();
        const double* l = lse.data<double>();
        const int64_t* tg = targets.data<int64_t>();
#pragma omp parallel for schedule(static) if (N * V >= (1 << 15))
        for (int64_t r = 0; r < N; ++r) {
          const T* row = base + row_offset(x, r);
          T* o = out + r * V;
          for (int64_t v = 0; v < V; ++v) o[v] = static_cast<T>(scale * std::exp(static_cast<double>(row[v]) - l[r]));
          o[tg[r]] -= static_cast<T>(scale);
        }
      });
      return TensorList{dx, Tensor()};
    });
  return loss;
}

}  // namespace tcn
