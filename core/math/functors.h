// The math of the elementwise ops, written once for the CPU and CUDA kernels
// (TCN_HD marks them host+device under nvcc). A unary op has fwd(x) and
// bwd(g, x, y) = dL/dx given dL/dy = g, x the input and y = fwd(x).
// kUsesX / kUsesY say what backward needs, so nothing else is kept alive.
#pragma once

#include <cmath>

#include "core/philox.h"
#ifndef __CUDA_ARCH__
#include "core/math/vmath.h"
#endif

namespace tcn::fn {

// The transcendental functions the functors use. On the host, float32 takes
// core/math/vmath.h's branch-free versions, which vectorise in cpu_map's loops (libm's
// are one call per element); double (the tests' oracle precision) and the GPU
// take the standard ones.
#ifdef __CUDA_ARCH__
template <class T> TCN_HD T exp_(T x) { return std::exp(x); }
template <class T> TCN_HD T sigmoid_(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> TCN_HD T tanh_(T x) { return std::tanh(x); }
template <class T> TCN_HD T normal_cdf_(T x) { return T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440))); }
#else  // inlined into each loop, or the loop cannot vectorise
template <class T> TCN_ALWAYS_INLINE inline T exp_(T x) { return vmath::exp_of(x); }
template <class T> TCN_ALWAYS_INLINE inline T sigmoid_(T x) { return vmath::sigmoid_of(x); }
template <class T> TCN_ALWAYS_INLINE inline T tanh_(T x) { return vmath::tanh_of(x); }
template <class T> TCN_ALWAYS_INLINE inline T normal_cdf_(T x) { return vmath::normal_cdf_of(x); }
#endif

// Where a unary op is defined: every real x, or x > 0 only (log, sqrt, pow with any
// exponent). A functor says kDomain = Domain::positive when it needs it; the op tests
// draw their inputs from it (tests/op_cases.cpp), so a new functor is tested with no edit.
enum class Domain { real, positive };
template <class Op>
constexpr Domain domain_of() {
  if constexpr (requires { Op::kDomain; }) return Op::kDomain;
  else return Domain::real;
}

struct Neg {
  static constexpr const char* name = "neg";
  static constexpr bool kUsesX = false, kUsesY = false;
  template <class T> TCN_HD T fwd(T x) const { return -x; }
  template <class T> TCN_HD T bwd(T g, T, T) const { return -g; }
};
// NaN in, NaN out, as in PyTorch: an activation that mapped NaN to a number would
// let a broken model (a NaN weight) evaluate to a plausible loss. x != x is NaN.
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> TCN_HD T fwd(T x) const { return (x > T(0) || x != x) ? x : T(0); }
  template <class T> TCN_HD T bwd(T g, T, T y) const { return y <= T(0) ? T(0) : g; }
};
struct Tanh {
  static constexpr const char* name = "tanh";
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> TCN_HD T fwd(T x) const { return tanh_(x); }
  template <class T> TCN_HD T bwd(T g, T, T y) const { return g * (T(1) - y * y); }
};
struct Sigmoid {
  static constexpr const char* name = "sigmoid";
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> TCN_HD T fwd(T x) const { return sigmoid_(x); }
  template <class T> TCN_HD T bwd(T g, T, T y) const { return g * y * (T(1) - y); }
};
struct Exp {
  static constexpr const char* name = "exp";
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> TCN_HD T fwd(T x) const { return exp_(x); }
  template <class T> TCN_HD T bwd(T g, T, T y) const { return g * y; }
};
struct Log {
  static constexpr const char* name = "log";
  static constexpr Domain kDomain = Domain::positive;
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> TCN_HD T fwd(T x) const { return std::log(x); }
  template <class T> TCN_HD T bwd(T g, T x, T) const { return g / x; }
};
struct Sqrt {
  static constexpr const char* name = "sqrt";
  static constexpr Domain kDomain = Domain::positive;
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> TCN_HD T fwd(T x) const { return std::sqrt(x); }
  template <class T> TCN_HD T bwd(T g, T, T y) const { return g / (T(2) * y); }
};
struct Pow {
  static constexpr const char* name = "pow";
  static constexpr Domain kDomain = Domain::positive;
  static constexpr bool kUsesX = true, kUsesY = false;
  double p;
  template <class T> TCN_HD T fwd(T x) const { return std::pow(x, T(p)); }
  template <class T> TCN_HD T bwd(T g, T x, T) const { return g * T(p) * std::pow(x, T(p - 1)); }
};
struct AddScalar {
  static constexpr const char* name = "add_scalar";
  static constexpr bool kUsesX = false, kUsesY = false;
  double s;
  template <class T> TCN_HD T fwd(T x) const { return x + T(s); }
  template <class T> TCN_HD T bwd(T g, T, T) const { return g; }
};
struct MulScalar {
  static constexpr const char* name = "mul_scalar";
  static constexpr bool kUsesX = false, kUsesY = false;
  double s;
  template <class T> TCN_HD T fwd(T x) const { return x * T(s); }
  template <class T> TCN_HD T bwd(T g, T, T) const { return g * T(s); }
};

struct Minimum {
  static constexpr const char* name = "minimum";
  static constexpr bool kUsesX = true, kUsesY = false;
  double s;
  template <class T> TCN_HD T fwd(T x) const { return (x < T(s) || x != x) ? x : T(s); }
  template <class T> TCN_HD T bwd(T g, T x, T) const { return x >= T(s) ? T(0) : g; }
};

// The activations of general TCNs (nn::TCN's `activation`), as PyTorch defines them.
// A functor's one scalar is its member p (or s): the CUDA kernels receive it by that name.
struct LeakyRelu {
  static constexpr const char* name = "leaky_relu";
  static constexpr bool kUsesX = true, kUsesY = false;
  double p;  // the negative side's slope (PyTorch's negative_slope, 0.01 by default)
  template <class T> TCN_HD T fwd(T x) const { return x > T(0) ? x : T(p) * x; }
  template <class T> TCN_HD T bwd(T g, T x, T) const { return x > T(0) ? g : T(p) * g; }
};
struct Elu {
  static constexpr const char* name = "elu";
  static constexpr bool kUsesX = true, kUsesY = true;
  double p;  // alpha
  template <class T> TCN_HD T fwd(T x) const { return x > T(0) ? x : T(p) * (exp_(x) - T(1)); }
  // For x <= 0, d/dx alpha (e^x - 1) = alpha e^x = y + alpha.
  template <class T> TCN_HD T bwd(T g, T x, T y) const { return x > T(0) ? g : g * (y + T(p)); }
};
// Scaled ELU with the constants of Klambauer et al. (2017), as torch.nn.SELU.
struct Selu {
  static constexpr const char* name = "selu";
  static constexpr bool kUsesX = true, kUsesY = true;
  static constexpr double kAlpha = 1.6732632423543772848170429916717;
  static constexpr double kScale = 1.0507009873554804934193349852946;
  template <class T> TCN_HD T fwd(T x) const {
    return x > T(0) ? T(kScale) * x : T(kScale * kAlpha) * (exp_(x) - T(1));
  }
  template <class T> TCN_HD T bwd(T g, T x, T y) const {
    return x > T(0) ? g * T(kScale) : g * (y + T(kScale * kAlpha));
  }
};
// GELU, the exact form x * Phi(x) with the normal CDF Phi (torch.nn.GELU()'s default, not the tanh approximation).
struct Gelu {
  static constexpr const char* name = "gelu";
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> TCN_HD T fwd(T x) const { return x * normal_cdf_(x); }
  template <class T> TCN_HD T bwd(T g, T x, T) const {
    const T cdf = normal_cdf_(x);
    const T pdf = T(0.39894228040143267794) * exp_(T(-0.5) * x * x);  // 1 / sqrt(2 pi) e^(-x^2 / 2)
    return g * (cdf + x * pdf);
  }
};

// Binary ops: fwd(a, b). Their backward is composed from ops (see ops/binary.cpp).
struct Add { template <class T> TCN_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> TCN_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> TCN_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> TCN_HD T operator()(T a, T b) const { return a / b; } };
// relu(a + b): a residual connection and its activation in one pass.
struct AddRelu {
  template <class T> TCN_HD T operator()(T a, T b) const { return Relu{}.fwd<T>(a + b); }
};
// a * sigmoid(b): the gated linear unit's product (glu, ops/binary.cpp).
struct GluProduct {
  template <class T> TCN_HD T operator()(T a, T b) const { return a * Sigmoid{}.fwd<T>(b); }
};
// glu's gradients, given dL/dy = g: d/da = g sigmoid(b), d/db = g a sigmoid(b) (1 - sigmoid(b)).
struct GluGradA {
  template <class T> TCN_HD T operator()(T g, T b) const { return g * Sigmoid{}.fwd<T>(b); }
};
struct GluGradB {
  template <class T> TCN_HD T operator()(T g, T a, T b) const {
    const T s = Sigmoid{}.fwd<T>(b);
    return g * a * s * (T(1) - s);
  }
};

}  // namespace tcn::fn
