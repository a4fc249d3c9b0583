// In-place updates, used by optimizers, gradient accumulation and clipping.
// They record nothing, and refuse to modify a tensor that requires grad while
// grad mode is on (that would silently corrupt its gradient).
#include "cuda/kernels.h"
#include "ops/cpu_map.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {
void check_inplace(const char* op, const Tensor& x) {
  check_defined(op, x);
  TCN_CHECK(!(x.requires_grad() && autograd::grad_enabled()), op, ": in-place update of a tensor that requires grad (shape ",
            x.shape(), "); run it under autograd::NoGrad");
}
}  // namespace

void fill_(const Tensor& x, double value) {
  const profile::Op range("fill_");
  check_inplace("fill_", x);
  profile::add_bytes(nbytes(x));
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("fill_", cuda::fill(x, value));
    return;
  }
  dispatch_all(x.dtype(), [&]<class T>() {
    const T v = static_cast<T>(value);
    cpu::cpu_map<T>(x, [v]() { return v; });
  });
}

// The factory of core/tensor.h that fills: defined here, beside fill_.
Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = empty(shape, opts);
  fill_(t, value);
  return t;
}

void add_(const Tensor& x, const Tensor& y, double alpha) {
  const profile::Op range("add_");
  check_inplace("add_", x);
  check_defined("add_", y);
  profile::add_bytes(2 * nbytes(x) + nbytes(y));
  check_same_dtype("add_", x, y);
  check_same_device("add_", x, y);
  check_float("add_", x);
  TCN_CHECK(broadcast_shapes(x.shape(), y.shape(), "add_") == x.shape(), "add_: ", y.shape(),
            " cannot be added in place to ", x.shape());
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("add_", cuda::add_inplace(x, y, alpha));
    return;
  }
  dispatch_float(x.dtype(), "add_", [&]<class T>() {
    const T a = static_cast<T>(alpha);
    if (alpha == 1.0)
      cpu::cpu_map<T>(x, [](T xi, T yi) { return xi + yi; }, x, y);
    else
      cpu::cpu_map<T>(x, [a](T xi, T yi) { return xi + a * yi; }, x, y);
  });
}

// The tape's in-place sum of a leaf's gradient (autograd/tape.h).
void autograd::gradient_add_(const Tensor& into, const Tensor& g) { add_(into, g); }

void mul_(const Tensor& x, double s) {
  const profile::Op range("mul_");
  check_inplace("mul_", x);
  check_float("mul_", x);
  profile::add_bytes(2 * nbytes(x));
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("mul_", cuda::mul_inplace(x, s));
    return;
  }
  dispatch_float(x.dtype(), "mul_", [&]<class T>() {
    const T v = static_cast<T>(s);
    cpu::cpu_map<T>(x, [v](T xi) { return xi * v; }, x);
  });
}

void mul_(const Tensor& x, const Tensor& s) {
  const profile::Op range("mul_");
  check_inplace("mul_", x);
  check_defined("mul_", s);
  profile::add_bytes(2 * nbytes(x));
  check_same_dtype("mul_", x, s);
  check_same_device("mul_", x, s);
  check_float("mul_", x);
  TCN_CHECK(broadcast_shapes(x.shape(), s.shape(), "mul_") == x.shape(), "mul_: ", s.shape(),
            " cannot multiply ", x.shape(), " in place");
  if (x.device().is_cuda()) {
    TCN_CUDA_OP("mul_", cuda::mul_inplace(x, s));
    return;
  }
  dispatch_float(x.dtype(), "mul_", [&]<class T>() { cpu::cpu_map<T>(x, [](T xi, T si) { return xi * si; }, x, s); });
}

}  // namespace tcn
