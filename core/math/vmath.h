// exp, sigmoid, tanh and the normal CDF for float32 loops that the compiler can vectorise.
//
// libm's expf/tanhf are scalar calls: in a CPU LSTM step they took 14% of the
// time (perf), one element at a time. These are plain arithmetic
// and bit operations with no branches, so a loop over them under
// `#pragma omp simd` becomes SIMD code (SSE2 in a generic x86-64 build, AVX-512
// in TCN_SIMD_CLONES functions (core/math/simd.h) on CPUs that have it: 11x libm there).
//
// exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]:
// e^r by its Taylor series to r^7 (truncation < 6e-9 relative), 2^n built in the
// exponent bits. tanh(|x|) = 1 - 2 / (e^{2|x|} + 1) above 0.5, its odd Taylor
// series to x^13 below (where the subtraction would cancel). Against double
// precision over [-30, 30] (tests/test_vmath.cpp, bounds 2 ulp and 4e-7): exp
// within 1.15 ulp, sigmoid and tanh within 1.6e-7 relative. double arguments use
// libm unchanged.
//
// normal_cdf(x) = Phi(x) = erfc(-x / sqrt 2) / 2 (GELU's), from the Chebyshev
// fit of erfc (Numerical Recipes' erfcc: fractional error below 1.2e-7 for
// z >= 0): erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P of degree 9,
// with exp(-z^2) split in two so that it keeps float precision for large z.
// The small side is computed directly, 1 - small for the other, so the tail
// keeps its relative accuracy (tests/test_vmath.cpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/math/simd.h"

namespace tcn::vmath {

TCN_ALWAYS_INLINE inline float exp(float x) {
  // Outside this range expf over- or underflows; clamping keeps the bit tricks
  // valid (exp(88.3) ~ 2.2e38 stands in for +inf, exp(-87.3) ~ 1.2e-38 for 0).
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  constexpr float kLog2e = 1.44269504f, kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-6f;  // ln 2 = hi + lo, hi exact in 16 bits
  const float shifted = x * kLog2e + kShift;  // n sits in its low mantissa bits
  const float n = shifted - kShift;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n: n + 127 in the exponent field. n is taken from the bits of `shifted`
  // rather than by a float-to-int conversion, which would be undefined for NaN
  // (a NaN argument still returns NaN: p is NaN).
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kShift);
  return p * std::bit_cast<float>((n_bits + 127u) << 23);
}

TCN_ALWAYS_INLINE inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

TCN_ALWAYS_INLINE inline float tanh(float x) {
  const float a = x < 0 ? -x : x;
  const float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  const float s = a * a;  // odd series: a - a s (1/3 - 2 s/15 + 17 s^2/315 - ...)
  float p = -21844.0f / 6081075;
  p = p * s + 1382.0f / 155925;
  p = p * s - 62.0f / 2835;
  p = p * s + 17.0f / 315;
  p = p * s - 2.0f / 15;
  p = p * s + 1.0f / 3;
  const float small = a - a * s * p;
  const float t = a < 0.5f ? small : big;
  return x < 0 ? -t : t;
}

// P(t) of the erfc fit above.
TCN_ALWAYS_INLINE inline float erfc_poly(float t) {
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  return p * t - 1.26551223f;
}

// exp(-s * a^2 + q) for a >= 0 to float precision: a^2 rounded would be off by up
// to half its ulp (7.6e-6 relative in the result at a^2 = 72), so a = h + (a - h)
// with h's low 12 bits cleared: h * h is exact, the small rest joins q.
TCN_ALWAYS_INLINE inline float exp_neg_square(float a, float s, float q) {
  const float h = std::bit_cast<float>(std::bit_cast<uint32_t>(a) & 0xfffff000u);
  return exp(-s * (h * h)) * exp(s * (h - a) * (h + a) + q);
}

// erfc(z) for z >= 0.
TCN_ALWAYS_INLINE inline float erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  return t * exp_neg_square(z, 1.0f, erfc_poly(t));
}

// Phi(x). The tail Phi(-|x|) = erfc(|x| / sqrt 2) / 2 takes its exp(-x^2 / 2)
// from x itself, not from the rounded |x| / sqrt 2 (whose error the tail would
// magnify by x^2).
TCN_ALWAYS_INLINE inline float normal_cdf(float x) {
  const float a = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * (a * 0.70710678f));
  const float tail = 0.5f * t * exp_neg_square(a, 0.5f, erfc_poly(t));
  return x < 0 ? tail : 1.0f - tail;
}

// Generic entry points for templated kernels: float32 takes the SIMD-friendly
// versions above, double stays on libm (the tests' oracle precision).
template <class T>
TCN_ALWAYS_INLINE inline T sigmoid_of(T x) {
  if constexpr (std::is_same_v<T, float>) return vmath::sigmoid(x);
  else return T(1) / (T(1) + std::exp(-x));
}
template <class T>
TCN_ALWAYS_INLINE inline T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>) return vmath::tanh(x);
  else return std::tanh(x);
}
template <class T>
TCN_ALWAYS_INLINE inline T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return vmath::exp(x);
  else return std::exp(x);
}
template <class T>
TCN_ALWAYS_INLINE inline T normal_cdf_of(T x) {
  if constexpr (std::is_same_v<T, float>) return vmath::normal_cdf(x);
  else return T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
}

}  // namespace tcn::vmath
