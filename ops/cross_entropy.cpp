// Fused log-softmax + negative log-likelihood, averaged over positions.
// logits [..., V] (any strides on the leading dims), targets int64 [...].
// Forward keeps one log-sum-exp per row; backward is softmax - onehot, scaled.
#include <cmath>
#include <functional>
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

// What backward keeps: the logits as forward read them ([N, V] on a GPU, any
// leading strides on the CPU), the targets, one log-sum-exp per row.
struct CrossEntropySaved {
  Tensor x, targets, lse;
  int64_t N, V;
  Shape shape;  // of the logits
};

// The CPU forward: each row's log-sum-exp into lse, the mean loss into `loss`.
// The rows' losses are summed in row order, whatever the thread count.
void cross_entropy_cpu(const CrossEntropySaved& s, const Tensor& loss) {
  const int64_t N = s.N, V = s.V;
  dispatch_float(s.x.dtype(), "cross_entropy", [&]<class T>() {
    const T* base = s.x.data<T>();
    const int64_t* tg = s.targets.data<int64_t>();
    double* l = s.lse.data<double>();
    std::vector<double> row_loss(N);
#pragma omp parallel for schedule(static) if (N * V >= (1 << 15))
    for (int64_t r = 0; r < N; ++r) {
      const T* row = base + row_offset(s.x, r);
      double m = row[0];
      for (int64_t v = 1; v < V; ++v) m = std::max<double>(m, row[v]);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - m);
      l[r] = m + std::log(sum);
      row_loss[r] = l[r] - static_cast<double>(row[tg[r]]);
    }
    double total = 0;
    for (double v : row_loss) total += v;
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });
}

// The CPU backward: dx = (softmax(x) - onehot(target)) * dloss / N.
Tensor cross_entropy_cpu_backward(const CrossEntropySaved& s, const Tensor& dloss) {
  const int64_t N = s.N, V = s.V;
  Tensor dx = empty(s.x.shape(), s.x.options());
  const double scale = dloss.item() / static_cast<double>(N);
  dispatch_float(s.x.dtype(), "cross_entropy backward", [&]<class T>() {
    const T* base = s.x.data<T>();
    T* out = dx.data<T>();
    const double* l = s.lse.data<double>();
    const int64_t* tg = s.targets.data<int64_t>();
#pragma omp parallel for schedule(static) if (N * V >= (1 << 15))
    for (int64_t r = 0; r < N; ++r) {
      const T* row = base + row_offset(s.x, r);
      T* o = out + r * V;
      for (int64_t v = 0; v < V; ++v) o[v] = static_cast<T>(scale * std::exp(static_cast<double>(row[v]) - l[r]));
      o[tg[r]] -= static_cast<T>(scale);
    }
  });
  return dx;
}

// cross_entropy's node on the tape: the logits' gradient (the targets get none).
TensorList cross_entropy_backward(const CrossEntropySaved& s, const TensorList& grad_outputs) {
  if (!s.x.device().is_cuda()) return {cross_entropy_cpu_backward(s, grad_outputs[0]), Tensor()};
  Tensor dx = empty(s.x.shape(), s.x.options());
  TCN_CUDA_OP("cross_entropy backward",
              cuda::cross_entropy_backward(dx, grad_outputs[0].contiguous(), s.x, s.lse, s.targets));
  return {dx.view(s.shape), Tensor()};
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
  CrossEntropySaved saved{.x = {}, .targets = {}, .lse = empty({N}, {DType::F64, logits.device()}), .N = N, .V = V,
                          .shape = logits.shape()};
  Tensor loss = empty({}, logits.options());
  if (logits.device().is_cuda()) {
    saved.x = logits.detach().contiguous().view({N, V});
    saved.targets = targets_in.contiguous().view({N});
    // A target out of range is raised at the next host wait.
    TCN_CUDA_OP("cross_entropy", cuda::check_index_range(cuda::DeviceCheck::CrossEntropyTarget, saved.targets, V);
                cuda::cross_entropy_forward(loss, saved.lse, saved.x, saved.targets));
  } else {
    saved.x = logits.stride(-1) == 1 ? logits.detach() : logits.detach().contiguous();
    saved.targets = targets_in.contiguous();
    check_targets(saved.targets, N, V);
    cross_entropy_cpu(saved, loss);
  }
  if (autograd::needs_grad({logits}))
    autograd::record("cross_entropy", {logits, Tensor()}, {loss}, std::bind_front(cross_entropy_backward, saved));
  return loss;
}

}  // namespace tcn
