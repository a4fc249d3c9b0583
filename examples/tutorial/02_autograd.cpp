// Chapter 2 (docs/tutorial/02-autograd.md): the tape, backward, NoGrad, and
// two new differentiable ops written as a user would: swish, composed from
// existing ops, and softplus, with its own forward loop and its own backward
// closure recorded on the tape. Both pass a float64 finite-difference check.
#include <tcn/tcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "check.h"
#include "gradcheck.h"

using tcn::Tensor;
using tcn::TensorList;
using tut::check;

// ---- a new op, composed: swish(x) = x * sigmoid(x) -------------------------
// Every op it calls records itself, so the composition is differentiable
// with no code of ours for backward.
Tensor swish(const Tensor& x) { return x * tcn::sigmoid(x); }

// ---- a new op with its own backward: softplus(x) = log(1 + exp(x)) ---------
// Forward: our own loop, in the stable form max(x, 0) + log1p(exp(-|x|)).
// Backward: d softplus / dx = sigmoid(x), recorded as a closure on the tape.
Tensor softplus(const Tensor& x_in) {
  using namespace tcn;
  TCN_CHECK(x_in.device().is_cpu(), "softplus: CPU only (chapter 5 adds the CUDA kernel)");
  const Tensor x = x_in.detach().contiguous();  // our loop reads x as one dense array
  Tensor y = empty(x.shape(), x.options());
  dispatch_float(x.dtype(), "softplus", [&]<class T>() {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = std::max(xp[i], T(0)) + std::log1p(std::exp(-std::abs(xp[i])));
  });
  if (autograd::needs_grad({x_in})) {
    // The closure keeps only what backward needs (x, detached) and runs with
    // grad mode off, so it may use ordinary ops.
    autograd::record("softplus", {x_in}, {y}, [x](const TensorList& g) {
      return TensorList{g[0] * sigmoid(x)};
    });
  }
  return y;
}

// The same op with a deliberately wrong backward (exp(x) instead of
// sigmoid(x)): the gradient check must catch it.
Tensor softplus_wrong_backward(const Tensor& x_in) {
  using namespace tcn;
  const Tensor x = x_in.detach();
  Tensor y = log(exp(x) + 1.0);
  if (autograd::needs_grad({x_in}))
    autograd::record("softplus_wrong", {x_in}, {y}, [x](const TensorList& g) { return TensorList{g[0] * exp(x)}; });
  return y;
}

int main() {
  using namespace tcn;

  // ---- the tape: one node per op that has an input requiring grad --------
  Tensor w = tensor({1, 2, 3}, {3}).requires_grad_();  // a leaf, like a parameter
  Tensor c = tensor({4, 5, 6}, {3});                    // a constant
  autograd::clear_tape();
  Tensor loss = sum(w * w * c);  // mul, mul, sum: three nodes
  check(autograd::tape_size() == 3 && loss.requires_grad() && !loss.is_leaf(),
        "sum(w * w * c) recorded 3 nodes; loss is a non-leaf that requires grad");
  loss.backward();
  check(w.grad().to_vector<float>() == std::vector<float>{8, 20, 36}, "d loss / dw = 2 w c = [8, 20, 36]");
  check(autograd::tape_size() == 0, "backward freed the tape");
  bool second_refused = false;
  try {
    loss.backward();
  } catch (const Error& e) {
    second_refused = true;
    std::printf("      second backward: %s\n", e.what());
  }
  check(second_refused, "a second backward through a freed tape is an error");

  // Gradients of leaves accumulate until zero_grad().
  sum(w * c).backward();
  check(w.grad().to_vector<float>() == std::vector<float>{12, 25, 42}, "a new backward adds c to the kept gradient");
  w.zero_grad();
  check(!w.grad().defined(), "zero_grad() drops it (set_to_none)");

  // ---- NoGrad: evaluation records nothing -------------------------------
  {
    autograd::NoGrad no_grad;
    Tensor y = sum(w * c);
    check(!y.requires_grad() && autograd::tape_size() == 0, "under NoGrad nothing is recorded");
  }
  check(autograd::grad_enabled(), "grad mode is back on after the guard's scope");
  Tensor frozen = w.detach();
  check(!frozen.requires_grad() && frozen.shares_storage(w), "detach(): same storage, no history");

  // ---- the new ops, checked by finite differences in float64 -------------
  Generator gen(7);
  const TensorOptions f64 = TensorOptions{}.with(DType::F64);
  Tensor x = randn({4, 5}, f64, gen) * 3.0;  // spread over [-9, 9]: both branches of |x|
  x.requires_grad_();
  const Tensor weights = randn({4, 5}, f64, gen);  // loss = sum(op(x) * weights): every element matters
  const double tol = 1e-7;

  const double err_swish = tut::gradcheck([&](const TensorList& in) { return sum(swish(in[0]) * weights); }, {x});
  std::printf("      swish:    max gradient error %.2e\n", err_swish);
  check(err_swish < tol, "swish (composed) passes the float64 gradient check, error < 1e-7");

  const double err_softplus =
      tut::gradcheck([&](const TensorList& in) { return sum(softplus(in[0]) * weights); }, {x});
  std::printf("      softplus: max gradient error %.2e\n", err_softplus);
  check(err_softplus < tol, "softplus (own backward) passes the float64 gradient check, error < 1e-7");

  const double err_wrong =
      tut::gradcheck([&](const TensorList& in) { return sum(softplus_wrong_backward(in[0]) * weights); }, {x});
  std::printf("      softplus with a wrong backward: max gradient error %.2e\n", err_wrong);
  check(err_wrong > 1e-2, "the check rejects a wrong backward (error > 1e-2)");

  // softplus agrees with the naive formula where that one is safe, and stays
  // finite where exp(x) overflows.
  Tensor small = tensor({-3, -0.5, 0, 0.5, 3}, {5}, f64);
  const auto a = softplus(small).to_vector<double>(), b = log(exp(small) + 1.0).to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  check(diff < 1e-15, "softplus equals log(1 + exp(x)) on [-3, 3] within 1e-15");
  check(softplus(tensor({1000.0}, {1})).item() == 1000.0, "softplus(1000) = 1000 in float32 (no overflow)");

  return tut::finish("tutorial_02_autograd");
}
