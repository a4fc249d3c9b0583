// conv1d's Winograd path (ops/conv1d_winograd.cpp) against its own algebra and
// against the GEMM path: the transforms' identity for every F(m, k) used, then
// forward and both gradients over kernel sizes, dilations, paddings, ragged
// lengths and tile sizes, the error in float32 and with bf16 operands, repeats
// bit for bit, and which path --conv_impl winograd runs. The op registry
// (tests/op_cases.cpp) adds finite-difference gradient checks.
#include <algorithm>
#include <cmath>

#include "cuda_compare.h"
#include "helpers.h"
#include "core/autocast.h"
#include "core/devices.h"
#include "ops/conv1d_paths.h"

namespace tcn::test {

namespace {

using conv1d_paths::ConvGrads;
using conv1d_paths::ConvRows;
using conv1d_paths::ConvSettings;

struct Result {
  Tensor y, dx, dw, db;
};

// One path's forward and backward, run directly (no tape) on the same inputs and dy.
template <class Path>
Result run(Path path, const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
           const ConvSettings& s = {}) {
  conv1d_paths::ConvOut out = path(geo, x, w, b, s);
  ConvGrads g = out.backward(dy, true, true, b.defined());
  return {out.y.contiguous(), g.dx.contiguous(), g.dw, g.db};
}

// Largest |a - b| over the largest |b|: the error relative to the result's scale. The
// scale is at least 1e-3 (the inputs are in [-1, 1]): a gradient that is exactly zero,
// as when every tap of an output reads padding, leaves rounding noise to compare.
double scaled_err(const Tensor& a, const Tensor& b) {
  const auto va = a.to(DType::F64).to_vector<double>(), vb = b.to(DType::F64).to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double big = 1e-3, diff = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    big = std::max(big, std::abs(vb[i]));
    diff = std::max(diff, std::abs(va[i] - vb[i]));
  }
  return diff / big;
}

struct Shape3 {
  int64_t B, L, Cin, Cout, K, d, left;
  bool bias;
};

// A path under test: the Winograd path with tile m (m = 0: the GEMM path, for scale).
conv1d_paths::ConvOut path_with_tile(int64_t m, const ConvRows& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                     const ConvSettings& s) {
  return m == 0 ? conv1d_paths::conv1d_gemm(g, x, w, b, s) : conv1d_paths::conv1d_winograd_tiled(g, x, w, b, s, m);
}

// The path with tile m (0: the GEMM path) in `dtype`, with bf16 operands if asked, against the GEMM
// path in float64: the largest scaled error of y, dx, dw and db. `strided`: x a transposed view.
double worst_vs_gemm(const Shape3& c, int64_t m, DType dtype, uint64_t seed, bool bf16 = false, bool strided = false) {
  const ConvRows geo(c.B, c.L, c.Cin, c.Cout, c.K, c.d, c.left);
  const Tensor x = rand_tensor({c.B, c.L, c.Cin}, seed, strided, -1, 1, dtype);
  const Tensor w = rand_tensor({c.Cout, c.Cin, c.K}, seed + 1, false, -1, 1, dtype);
  const Tensor b = c.bias ? rand_tensor({c.Cout}, seed + 2, false, -1, 1, dtype) : Tensor();
  const Tensor dy = rand_tensor({c.B, c.L, c.Cout}, seed + 3, false, -1, 1, dtype);
  const auto f64 = [](const Tensor& t) { return t.defined() ? t.to(DType::F64) : t; };
  const Result ref = run(conv1d_paths::conv1d_gemm, geo, f64(x), f64(w), f64(b), f64(dy));
  ConvSettings s;
  s.bf16 = bf16;
  const Result got = run(
      [m](const ConvRows& g, const Tensor& xx, const Tensor& ww, const Tensor& bb, const ConvSettings& ss) {
        return path_with_tile(m, g, xx, ww, bb, ss);
      },
      geo, x, w, b, dy, s);
  CHECK(got.y.dtype() == dtype);
  CHECK(got.dx.dtype() == dtype);
  double worst = std::max({scaled_err(got.y, ref.y), scaled_err(got.dx, ref.dx), scaled_err(got.dw, ref.dw)});
  if (c.bias) worst = std::max(worst, scaled_err(got.db, ref.db));
  return worst;
}

}  // namespace

TEST_SUITE("ops") {

TEST_CASE("winograd: A^T, G and B^T of every F(m, k) used satisfy sum_xi A^T[i][xi] G[xi][j] B^T[xi][t] = [t == i + j]") {
  for (int64_t m = 1; m <= 7; ++m)
    for (int64_t k = 2; k <= 7 && m + k - 1 <= 12; ++k) {
      const auto w = conv1d_paths::winograd_transforms(m, k);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t t = 0; t < w.n; ++t) {
            double s = 0;
            for (int64_t xi = 0; xi < w.n; ++xi) s += w.AT[i * w.n + xi] * w.G[xi * k + j] * w.BT[xi * w.n + t];
            worst = std::max(worst, std::abs(s - (t == i + j ? 1.0 : 0.0)));
          }
      INFO("F(", m, ", ", k, ")");
      CHECK(worst < 1e-9);
    }
  CHECK_ERROR(conv1d_paths::winograd_transforms(8, 7), "winograd: F(8, 7) needs 13 points");
}

TEST_CASE("winograd: forward and both gradients equal the GEMM path's in float64 (K 2-7, dilations, paddings, ragged T, every tile used)") {
  int cases = 0;
  uint64_t seed = 100;
  for (int64_t K = 2; K <= 7; ++K) {
    // Tiles 2, 4, 6, and the ones winograd_tile picks for float32 and for bf16 operands.
    std::vector<int64_t> tiles{2, 4, 6};
    for (const int64_t m : {conv1d_paths::winograd_tile(K, false), conv1d_paths::winograd_tile(K, true)})
      if (m > 0 && std::find(tiles.begin(), tiles.end(), m) == tiles.end()) tiles.push_back(m);
    for (int64_t d : {1, 2, 3, 8})
      for (int64_t L : {1, 4, 17, 33}) {
        const int64_t span = (K - 1) * d;
        for (int64_t left : {span, span / 2, int64_t{0}})
          for (int64_t m : tiles) {
            REQUIRE(m + K - 1 <= 12);
            // Three sequences: two boundaries between them in the padded row space.
            const Shape3 c{.B = 3, .L = L, .Cin = 3, .Cout = 5, .K = K, .d = d, .left = left, .bias = (cases % 2) == 0};
            INFO("K ", K, ", d ", d, ", L ", L, ", left ", left, ", m ", m, ", bias ", c.bias);
            CHECK(worst_vs_gemm(c, m, DType::F64, seed++) < 1e-10);
            ++cases;
          }
      }
  }
  CHECK(cases == (5 + 3 + 5 + 3 + 4 + 3) * 4 * 4 * 3);  // the tiles per K (2..7) x d x L x padding
}

TEST_CASE("winograd: a strided input, and each gradient asked for alone, as when the others are not needed") {
  const Shape3 c{.B = 2, .L = 23, .Cin = 6, .Cout = 4, .K = 3, .d = 2, .left = 4, .bias = true};
  CHECK(worst_vs_gemm(c, 4, DType::F64, 500, false, /*strided=*/true) < 1e-10);
  const ConvRows geo(2, 23, 6, 4, 3, 2, 4);
  const Tensor x = rand_tensor({2, 23, 6}, 501), w = rand_tensor({4, 6, 3}, 502), b = rand_tensor({4}, 503);
  const Tensor dy = rand_tensor({2, 23, 4}, 504);
  const Result all = run(conv1d_paths::conv1d_winograd, geo, x, w, b, dy);
  const conv1d_paths::ConvOut out = conv1d_paths::conv1d_winograd(geo, x, w, b, ConvSettings{});
  const ConvGrads only_x = out.backward(dy, true, false, false), only_w = out.backward(dy, false, true, false),
                  only_b = out.backward(dy, false, false, true);
  CHECK(!only_x.dw.defined());
  CHECK(!only_x.db.defined());
  CHECK(!only_w.dx.defined());
  CHECK(!only_b.dw.defined());
  CHECK(only_x.dx.contiguous().to_vector<double>() == all.dx.to_vector<double>());
  CHECK(only_w.dw.to_vector<double>() == all.dw.to_vector<double>());
  CHECK(only_b.db.to_vector<double>() == all.db.to_vector<double>());
}

TEST_CASE("winograd: float32 at a size where every transform runs on the thread pool, against float64") {
  // [4, 256, 128 -> 128]: each transform's loop is over 2^14 work items, where OpenMP splits it.
  const Shape3 c{.B = 4, .L = 256, .Cin = 128, .Cout = 128, .K = 3, .d = 2, .left = 4, .bias = true};
  const double win = worst_vs_gemm(c, 6, DType::F32, 600), gemm = worst_vs_gemm(c, 0, DType::F32, 600);
  INFO("F(6, 3) ", win, ", the GEMM path ", gemm);
  CHECK(win < 2e-5);
  CHECK(win < 20 * gemm);
}

TEST_CASE("winograd: float32 error at a TCN layer's shape stays near the GEMM path's (tiles 2, 4, 6; dilations 1, 2, 4)") {
  // [2, 64, 48 -> 40] rather than [32, 400, 450 -> 450], so that the suite stays quick; the
  // error grows with the tile, not with the sizes.
  uint64_t seed = 300;
  for (int64_t d : {1, 2, 4})
    for (int64_t m : {2, 4, 6}) {
      const Shape3 c{.B = 2, .L = 64, .Cin = 48, .Cout = 40, .K = 3, .d = d, .left = 2 * d, .bias = true};
      const double err = worst_vs_gemm(c, m, DType::F32, seed++);
      INFO("F(", m, ", 3), dilation ", d, ": ", err);
      CHECK(err < (m == 6 ? 2e-5 : 1e-5));
    }
}

TEST_CASE("winograd: bf16 operands (mixed precision) stay within a few times the bf16 GEMM path's error") {
  const Shape3 c{.B = 2, .L = 40, .Cin = 32, .Cout = 24, .K = 3, .d = 2, .left = 4, .bias = true};
  const int64_t m = conv1d_paths::winograd_tile(3, true);
  CHECK(m == 4);
  const double win = worst_vs_gemm(c, m, DType::F32, 400, true), gemm = worst_vs_gemm(c, 0, DType::F32, 400, true);
  INFO("F(", m, ", 3) with bf16 operands: ", win, "; the bf16 GEMM path: ", gemm);
  CHECK(gemm > 1e-4);      // bf16 did round: float32 alone would be far below this
  CHECK(win < 6 * gemm);   // measured 4-5x at the TCN's shape (docs/results.md)
  // bf16 operands come from float32 inputs (autocast); a float64 input with them is refused.
  CHECK_ERROR(conv1d_paths::conv1d_winograd_tiled(ConvRows(1, 4, 2, 2, 3, 1, 2), zeros({1, 4, 2}, {DType::F64}),
                                                  zeros({2, 2, 3}, {DType::F64}), Tensor(), ConvSettings{.bf16 = true}, 2),
              "conv1d: bf16 operands are for float32 inputs (autocast), got float64");
}

TEST_CASE("winograd: two runs give the same bits") {
  const ConvRows geo(3, 50, 20, 16, 3, 4, 8);
  const Tensor x = rand_tensor({3, 50, 20}, 1, false, -1, 1, DType::F32);
  const Tensor w = rand_tensor({16, 20, 3}, 2, false, -1, 1, DType::F32);
  const Tensor b = rand_tensor({16}, 3, false, -1, 1, DType::F32);
  const Tensor dy = rand_tensor({3, 50, 16}, 4, false, -1, 1, DType::F32);
  const Result a = run(conv1d_paths::conv1d_winograd, geo, x, w, b, dy);
  const Result c = run(conv1d_paths::conv1d_winograd, geo, x, w, b, dy);
  for (auto [p, q] : {std::pair{a.y, c.y}, {a.dx, c.dx}, {a.dw, c.dw}, {a.db, c.db}})
    CHECK(p.to_vector<float>() == q.to_vector<float>());
}

TEST_CASE("winograd: --conv_impl winograd runs it on the CPU where it applies, auto where it pays; a 1x1 conv takes the GEMM path; CUDA refuses it") {
  ConvSettings s;
  s.impl = ConvImpl::Winograd;
  const Tensor x = zeros({2, 10, 4}), w3 = zeros({5, 4, 3}), w1 = zeros({5, 4, 1});
  CHECK(conv1d_paths::conv1d_impl(ConvRows(2, 10, 4, 5, 3, 1, 2), x, w3, Tensor(), s) == ConvImpl::Winograd);
  CHECK(conv1d_paths::conv1d_impl(ConvRows(2, 10, 4, 5, 1, 1, 0), x, w1, Tensor(), s) == ConvImpl::Gemm);
  CHECK(conv1d_paths::winograd_tile(1, false) == 0);
  CHECK(conv1d_paths::winograd_tile(3, false) == 6);
  CHECK(conv1d_paths::winograd_tile(7, false) == 2);
  CHECK(conv1d_paths::winograd_tile(8, false) == 0);
  CHECK(conv1d_paths::winograd_tile(5, true) == 2);
  // auto on the CPU: the Winograd path where the channels' harmonic mean is >= 128 (fp32), >= 192 (bf16).
  ConvSettings a;
  const Tensor xa = zeros({1, 4, 1});  // only its device matters here
  const auto choice = [&](int64_t cin, int64_t cout, int64_t K, bool bf16) {
    a.bf16 = bf16;
    return conv1d_paths::conv1d_impl(ConvRows(32, 400, cin, cout, K, 1, K - 1), xa, Tensor(), Tensor(), a);
  };
  CHECK(a.impl == ConvImpl::Auto);
  CHECK(choice(450, 450, 3, false) == ConvImpl::Winograd);
  CHECK(choice(100, 450, 3, false) == ConvImpl::Winograd);  // harmonic mean 164
  CHECK(choice(64, 64, 3, false) == ConvImpl::Gemm);
  CHECK(choice(450, 450, 1, false) == ConvImpl::Gemm);  // 1x1: nothing to save
  CHECK(choice(450, 450, 3, true) == ConvImpl::Winograd);
  CHECK(choice(100, 450, 3, true) == ConvImpl::Gemm);
  CHECK(choice(450, 450, 6, true) == ConvImpl::Gemm);  // no bf16 tile of 2 for K = 6
  // Through the op: the same values as the GEMM path, within float32 rounding.
  const Tensor xr = rand_tensor({2, 30, 8}, 5, true, -1, 1, DType::F32), wr = rand_tensor({6, 8, 3}, 6, false, -1, 1, DType::F32);
  Tensor y_gemm, y_win;
  {
    const Backends on(conv_on(ConvImpl::Gemm));
    y_gemm = conv1d(xr, wr, Tensor(), 2, 4);
  }
  {
    const Backends on(conv_on(ConvImpl::Winograd));
    y_win = conv1d(xr, wr, Tensor(), 2, 4);
  }
  CHECK(scaled_err(y_win, y_gemm) < 1e-5);
  CHECK(y_win.to_vector<float>() != y_gemm.to_vector<float>());  // a different path: not the same rounding
  if (cuda::is_available()) {
    const Backends on(conv_on(ConvImpl::Winograd));
    CHECK_ERROR(conv1d(xr.to(Device::cuda(0)), wr.to(Device::cuda(0)), Tensor(), 2, 4),
                "conv1d: --conv_impl winograd runs on the CPU only");
  }
}

}  // TEST_SUITE

}  // namespace tcn::test
