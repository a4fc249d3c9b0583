// core/math/vmath.h: the float32 exp, sigmoid, tanh and normal CDF the CPU kernels use, against
// double-precision libm over the range that matters and at the edges; and the
// float32 LSTM layer built on them against the same layer in float64.
#include <cmath>
#include <limits>

#include "helpers.h"
#include "core/math/vmath.h"

using namespace tcn;
using namespace tcn::test;

namespace {
// Distance from `got` to `want` in units of float's spacing at `want`.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double spacing = std::nextafter(w, std::numeric_limits<float>::infinity()) - w;
  return std::fabs(static_cast<double>(got) - want) / spacing;
}
}  // namespace

TEST_SUITE("vmath") {

TEST_CASE("exp within 2 ulp, sigmoid and tanh within 4e-7 relative, on [-30, 30] and beyond") {
  double worst_exp = 0, worst_sig = 0, worst_tanh = 0;
  for (int i = -300000; i <= 300000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    const double xd = x;
    worst_exp = std::max(worst_exp, ulps(vmath::exp(x), std::exp(xd)));
    const double s = 1 / (1 + std::exp(-xd));
    worst_sig = std::max(worst_sig, std::fabs(vmath::sigmoid(x) - s) / s);
    const double t = std::tanh(xd);
    if (x != 0) worst_tanh = std::max(worst_tanh, std::fabs(vmath::tanh(x) - t) / std::fabs(t));
  }
  for (float x : {-87.0f, -60.5f, 45.25f, 88.0f}) worst_exp = std::max(worst_exp, ulps(vmath::exp(x), std::exp(double(x))));
  MESSAGE("worst: exp ", worst_exp, " ulp, sigmoid ", worst_sig, ", tanh ", worst_tanh, " relative");
  CHECK(worst_exp <= 2.0);
  CHECK(worst_sig <= 4e-7);
  CHECK(worst_tanh <= 4e-7);
  // Tiny arguments: tanh(x) = x to float precision, exp(x) = 1.
  CHECK(vmath::tanh(1e-20f) == 1e-20f);
  CHECK(vmath::tanh(-3e-4f) == doctest::Approx(std::tanh(-3e-4)).epsilon(1e-7));
  CHECK(vmath::exp(0.0f) == 1.0f);
}

TEST_CASE("normal_cdf (GELU's Phi) and erfc within 5e-7 relative on [-12, 8], the tail included") {
  double worst = 0, worst_erfc = 0;
  for (int i = -120000; i <= 80000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    const double want = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    worst = std::max(worst, std::fabs(vmath::normal_cdf(x) - want) / want);
    if (x >= 0) {
      const double e = std::erfc(static_cast<double>(x));
      if (e > 1e-30) worst_erfc = std::max(worst_erfc, std::fabs(vmath::erfc_nonneg(x) - e) / e);
    }
  }
  MESSAGE("worst: normal_cdf ", worst, ", erfc ", worst_erfc, " relative");
  CHECK(worst <= 5e-7);
  CHECK(worst_erfc <= 5e-7);
  CHECK(vmath::normal_cdf(0.0f) == doctest::Approx(0.5).epsilon(2e-7));
  CHECK(vmath::normal_cdf(40.0f) == 1.0f);
  CHECK(vmath::normal_cdf(-40.0f) >= 0.0f);
  CHECK(std::isnan(vmath::normal_cdf(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("saturation, infinities and NaN") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(vmath::sigmoid(inf) == 1.0f);
  CHECK(vmath::sigmoid(-inf) < 1e-38f);
  CHECK(vmath::sigmoid(-inf) >= 0.0f);
  CHECK(vmath::tanh(inf) == 1.0f);
  CHECK(vmath::tanh(-inf) == -1.0f);
  CHECK(vmath::tanh(20.0f) == 1.0f);
  CHECK(std::isfinite(vmath::exp(1000.0f)));  // saturates at ~2.2e38, see core/math/vmath.h
  CHECK(vmath::exp(-1000.0f) < 2e-38f);
  // A NaN must reach the loss, where training stops on it.
  CHECK(std::isnan(vmath::exp(nan)));
  CHECK(std::isnan(vmath::sigmoid(nan)));
  CHECK(std::isnan(vmath::tanh(nan)));
}

TEST_CASE("float32 lstm_layer (vmath) agrees with float64 (libm), values and gradients") {
  const int64_t B = 4, T = 7, H = 23;  // H not a multiple of the SIMD width
  Tensor xp = rand_tensor({B, T, 4 * H}, 51, false, -3, 3), whh = rand_tensor({4 * H, H}, 52, false, -0.5, 0.5);
  Tensor h0 = rand_tensor({B, H}, 53), c0 = rand_tensor({B, H}, 54), w = rand_tensor({B, T, H}, 55);
  auto run = [&](DType dt) {
    TensorList in = {leaf(xp.to(dt)), leaf(whh.to(dt)), leaf(h0.to(dt)), leaf(c0.to(dt))};
    auto [out, hT, cT] = lstm_layer(in[0], in[1], in[2], in[3]);
    add(sum(mul(out, w.to(dt))), sum(mul(cT, cT))).backward();
    return TensorList{out.detach(), cT.detach(), in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad()};
  };
  TensorList f = run(DType::F32), d = run(DType::F64);
  for (size_t i = 0; i < f.size(); ++i) CHECK_CLOSE(f[i].to(DType::F64), d[i], 1e-5, 1e-5);
}

}  // TEST_SUITE
