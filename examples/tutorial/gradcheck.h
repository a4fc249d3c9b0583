// A finite-difference gradient check (chapter 2; chapter 3 reuses it).
//
// f maps the inputs to a one-element tensor. The inputs must be contiguous
// float64 CPU leaves that require grad. For every element e of every input,
// the analytic d f / d e (one backward) is compared with the central
// difference (f(e + h) - f(e - h)) / 2h, computed under NoGrad by nudging the
// element in place. Returns the largest |analytic - numeric| / max(1, |numeric|).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include <tcn/tcn.h>

namespace tut {

inline double gradcheck(const std::function<tcn::Tensor(const tcn::TensorList&)>& f, const tcn::TensorList& inputs,
                        double h = 1e-6) {
  using namespace tcn;
  for (const Tensor& x : inputs) {
    TCN_CHECK(x.dtype() == DType::F64 && x.device().is_cpu() && x.is_contiguous() && x.requires_grad() &&
                  x.is_leaf(),
              "gradcheck: inputs must be contiguous float64 CPU leaves that require grad");
    x.zero_grad();
  }
  f(inputs).backward();  // analytic gradients into every input's .grad()

  double worst = 0;
  autograd::NoGrad no_grad;
  for (const Tensor& x : inputs) {
    const Tensor g = x.grad();  // undefined if f does not depend on x
    double* e = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double saved = e[i];
      e[i] = saved + h;
      const double up = f(inputs).item();
      e[i] = saved - h;
      const double down = f(inputs).item();
      e[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = g.defined() ? g.data<double>()[i] : 0.0;
      worst = std::max(worst, std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric)));
    }
  }
  return worst;
}

}  // namespace tut
