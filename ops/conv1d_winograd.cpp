// conv1d in the Winograd domain: fewer multiplies than the GEMM path
// (ops/conv1d.cpp), for the same result. CPU only; the choice is --conv_impl
// (core/backends.h). Read ops/conv1d.cpp first: this file works in its padded row
// space, with its packed weights and its ones column for the bias.
//
// 1. Phases. In the padded row space, output row r is
//        y[r] = sum_j x[r + j*d] @ W_j,    j = 0..K-1,
//    so the rows r = p, p + d, p + 2d, ... (one residue p mod d) read only rows of
//    the same residue: a dilated convolution is d ordinary ones, one per phase.
//
// 2. Tiles. Each phase is cut into tiles of m consecutive outputs. Tile (q, p)
//    has outputs r0 + i*d (i < m) with r0 = q*m*d + p, and reads the n = m + K - 1
//    inputs r0 + t*d (t < n). The d tiles of block q cover the output rows
//    [q*m*d, (q+1)*m*d) once each, so ceil(M / (m*d)) blocks cover all M rows;
//    the last block's outputs past M (a ragged tail) read the last sequence's
//    final rows and zero rows past them, and are dropped. The (K-1)*d output rows
//    between two sequences are computed and dropped, as in the GEMM path (2% at
//    the reference sizes); a tile's m outputs lie d rows apart, so for m > K - 1
//    no tile is made of them alone, and no tile's whole work is wasted.
//
// 3. Minimal filtering F(m, K) (Winograd 1980; Lavin & Gray, "Fast Algorithms for
//    Convolutional Neural Networks", 2015). For one channel, the m outputs of a
//    tile, y_i = sum_j w_j x_{i+j}, are
//        y = A^T [ (G w) * (B^T x) ]        (* elementwise, over n positions)
//    with A^T [m, n], G [n, K], B^T [n, n]: n multiplies instead of m*K. Over
//    channels the elementwise product at position xi becomes a matrix product:
//        P_xi [tiles, Cout] = V_xi [tiles, X] @ U_xi [X, Cout],
//    V_xi = (B^T x)_xi for every tile (the input transform), U_xi = (G w)_xi (the
//    filter transform, once per call). So the work is n GEMMs of about M/m rows
//    where the GEMM path does K GEMMs of M rows: n/m of its multiplies per
//    output row, not K. For K = 3: F(2,3) 2, F(4,3) 1.5, F(6,3) 1.33, against 3.
//    The transforms are a few passes over memory, vectorised over channels.
//
// 4. Where A, B and G come from (Toom-Cook). Take n - 1 distinct points p_c and
//    the point at infinity. Multiplying two polynomials h (degree m - 1) and g
//    (degree K - 1) is evaluating both at the points, multiplying the values, and
//    interpolating the product s = h g (degree n - 1) back: Lagrange on the
//    finite points, plus s's leading coefficient, which is the product "at
//    infinity". Written as matrices, s = C [(E_g g) * (E_h h)] with
//        E_h[c][i] = p_c^i,  E_g[c][j] = p_c^j,   and at infinity the last
//        coefficient (E_h[n-1][m-1] = E_g[n-1][K-1] = 1),
//        C[t][c] = coefficient of x^t in prod_{l != c} (x - p_l) / prod_{l != c} (p_c - p_l),
//        C[t][n-1] = coefficient of x^t in prod_l (x - p_l).
//    Our y is a correlation, the transpose of that product in h: for any h,
//        sum_i h_i y_i = sum_{i,j} h_i w_j x_{i+j} = x . s(h, w)
//                      = sum_c (C^T x)_c (E_g w)_c (E_h h)_c,
//    so y = E_h^T [(E_g w) * (C^T x)]: A^T = E_h^T, G = E_g and B^T = C^T. The
//    division is a factor per position c, so it moves from C into G, and B^T
//    holds the plain polynomial coefficients. winograd_transforms()
//    builds the three from the points; nothing is typed in. The identity every
//    F(m, K) must satisfy, sum_xi A^T[i][xi] G[xi][j] B^T[xi][t] = (t == i + j ? 1 : 0),
//    is what tests/test_conv_winograd.cpp checks.
//
// 5. Backward. The forward is three linear maps in a row: V = B^T x (per tile),
//    P_xi = V_xi @ U_xi, y = A^T P (per tile). The gradient of a linear map is its
//    transpose, so backward runs them back, each transposed:
//        D = A dy                      (per tile: the output transform's transpose)
//        dV_xi = D_xi @ U_xi^T,  dU_xi = V_xi^T @ D_xi     (the GEMM's gradients)
//        dx = B dV  (per tile; neighbouring tiles overlap by K - 1 inputs and add),
//        dw = G^T dU.
//    The same matrices and the same saving: n GEMMs of M/m rows for dx and n for
//    dw, where the GEMM path does K of M rows each. V and U are kept from the
//    forward (V is n/m times the GEMM path's padded input: 1.33x for F(6,3)). The
//    bias is the ones column, as in the GEMM path: its gradient is row Cin of
//    dw's tap 0.
//
// 6. Error. The transforms scale values up and down by powers of the points, so
//    the float rounding grows with n: a few 1e-6 of the output for F(6,3) in
//    float32 (the GEMM path: a few 1e-7); points of small magnitude (0, +-1,
//    +-1/2, +-2, ...) keep it low (Barabasz et al., "Error analysis and improving
//    the accuracy of Winograd convolution for deep neural networks", 2020). With
//    bf16 operands the rounding of V and U dominates: F(4,3), the tile there
//    (winograd_tile), is about 1e-2 of the output, 4-5x the bf16 GEMM path's
//    (build/bench_conv --accuracy; docs/results.md has the table).
#include <array>
#include <cmath>

#include "conv1d_paths.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn::conv1d_paths {

namespace {

// The interpolation points, taken in this order: small magnitudes first, each
// with its negative, halves before doubles (section 6).
constexpr std::array<double, 11> kPoints = {0, 1, -1, 0.5, -0.5, 2, -2, 0.25, -0.25, 4, -4};
constexpr int64_t kMaxN = kPoints.size() + 1;

// Coefficients, lowest first, of prod_{l < f, l != skip} (x - p_l).
std::vector<double> product_without(int64_t f, int64_t skip) {
  std::vector<double> c{1.0};
  for (int64_t l = 0; l < f; ++l) {
    if (l == skip) continue;
    std::vector<double> next(c.size() + 1, 0.0);
    for (size_t a = 0; a < c.size(); ++a) {
      next[a + 1] += c[a];
      next[a] -= kPoints[l] * c[a];
    }
    c = std::move(next);
  }
  return c;
}

// The tiles of a call: `blocks` blocks of d tiles, each tile m outputs of one phase.
struct Tiling {
  int64_t m, blocks, tiles;
  Tiling(const ConvRows& g, int64_t m) : m(m), blocks((g.M + m * g.d - 1) / (m * g.d)), tiles(blocks * g.d) {}
  int64_t first_row(int64_t tile, int64_t d) const { return (tile / d) * m * d + tile % d; }  // r0 of tile (q, p)
};

// Row r of the padded row space as a row of a [B, L, C] tensor (contiguous) that
// starts `shift` rows into each sequence's Lp rows: x's rows start at g.left, y's
// and dy's at 0. Null where r falls in the padding, or past the last sequence.
template <class T>
T* sequence_row(T* t, const ConvRows& g, int64_t r, int64_t shift, int64_t C) {
  const int64_t b = r / g.Lp, pos = r % g.Lp - shift;
  return b < g.B && pos >= 0 && pos < g.L ? t + (b * g.L + pos) * C : nullptr;
}

// The `count` rows of a tile, r0, r0 + d, ..., of t (as sequence_row), padding
// rows as `zeros`: what a transform reads, with no branch left in its loops.
template <class T>
std::array<const T*, kMaxN> tile_rows(const T* t, const ConvRows& g, int64_t r0, int64_t count, int64_t shift,
                                      int64_t C, const std::vector<T>& zeros) {
  std::array<const T*, kMaxN> rows{};
  for (int64_t i = 0; i < count; ++i) {
    const T* row = sequence_row(t, g, r0 + i * g.d, shift, C);
    rows[i] = row ? row : zeros.data();
  }
  return rows;
}

// A matrix of doubles as T, for the loops.
template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// V [n, tiles, X] = B^T x, tile by tile, channels as the vector. Column Cin is
// the bias's column of ones (its transform: B^T's row sums), columns past it zeros.
template <class T, class S>
void input_transform(const WinogradTransforms& tr, const ConvRows& g, const Tiling& tl, int64_t X, bool bias,
                     const T* x, S* V) {
  const int64_t n = tr.n, C = g.Cin;
  const std::vector<T> bt = as<T>(tr.BT), zeros(static_cast<size_t>(C), T(0));
#pragma omp parallel for schedule(static) if (tl.tiles * X >= (1 << 14))
  for (int64_t tile = 0; tile < tl.tiles; ++tile) {
    const std::array<const T*, kMaxN> in = tile_rows(x, g, tl.first_row(tile, g.d), n, g.left, C, zeros);
    for (int64_t xi = 0; xi < n; ++xi) {
      const T* bt_row = &bt[xi * n];
      S* out = V + (xi * tl.tiles + tile) * X;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t t = 0; t < n; ++t) acc += bt_row[t] * in[t][c];
        out[c] = S(acc);
      }
      T ones = 0;
      for (int64_t t = 0; t < n; ++t) ones += bt_row[t];
      for (int64_t c = C; c < X; ++c) out[c] = S(c == C && bias ? ones : T(0));
    }
  }
}

// U [n, X, Cout] = G w, from the packed weights wt [K, X, Cout] (bias row included).
template <class T, class S>
void filter_transform(const WinogradTransforms& tr, int64_t rows, const T* wt, S* U) {
  const int64_t n = tr.n, K = tr.k;
  const std::vector<T> gm = as<T>(tr.G);
#pragma omp parallel for schedule(static) if (rows >= (1 << 14))
  for (int64_t e = 0; e < rows; ++e)  // e: an element of a tap's [X, Cout]
    for (int64_t xi = 0; xi < n; ++xi) {
      T acc = 0;
      for (int64_t j = 0; j < K; ++j) acc += gm[xi * K + j] * wt[j * rows + e];
      U[xi * rows + e] = S(acc);
    }
}

// y = A^T P per tile (P: the GEMMs' products, Mx here), into the output rows that are not padding.
template <class T>
void output_transform(const WinogradTransforms& tr, const ConvRows& g, const Tiling& tl, const T* Mx, T* y) {
  const int64_t n = tr.n, C = g.Cout;
  const std::vector<T> at = as<T>(tr.AT);
#pragma omp parallel for schedule(static) if (tl.tiles * C >= (1 << 14))
  for (int64_t tile = 0; tile < tl.tiles; ++tile) {
    const int64_t r0 = tl.first_row(tile, g.d);
    for (int64_t i = 0; i < tr.m; ++i) {
      T* out = sequence_row(y, g, r0 + i * g.d, 0, C);
      if (!out) continue;
      const T* at_row = &at[i * n];
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t xi = 0; xi < n; ++xi) acc += at_row[xi] * Mx[(xi * tl.tiles + tile) * C + c];
        out[c] = acc;
      }
    }
  }
}

// D [n, tiles, Cout] = A dy per tile (the output transform's transpose); dy's
// padding rows are zeros.
template <class T, class S>
void output_transform_backward(const WinogradTransforms& tr, const ConvRows& g, const Tiling& tl, const T* dy, S* D) {
  const int64_t n = tr.n, C = g.Cout;
  const std::vector<T> at = as<T>(tr.AT), zeros(static_cast<size_t>(C), T(0));
#pragma omp parallel for schedule(static) if (tl.tiles * C >= (1 << 14))
  for (int64_t tile = 0; tile < tl.tiles; ++tile) {
    const std::array<const T*, kMaxN> in = tile_rows(dy, g, tl.first_row(tile, g.d), tr.m, 0, C, zeros);
    for (int64_t xi = 0; xi < n; ++xi) {
      S* out = D + (xi * tl.tiles + tile) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t i = 0; i < tr.m; ++i) acc += at[i * n + xi] * in[i][c];
        out[c] = S(acc);
      }
    }
  }
}

// dx = B dV (the input transform's transpose), gathered: input row t < m of tile
// (q, p) also gets rows t + s*m of the tiles (q - s, p) before it, where their
// inputs overlap. Each row of dx is written once, so no two threads meet.
template <class T>
void input_transform_backward(const WinogradTransforms& tr, const ConvRows& g, const Tiling& tl, const T* dV, T* dx) {
  const int64_t n = tr.n, m = tr.m, C = g.Cin;
  const std::vector<T> bt = as<T>(tr.BT);
  // Over all B*Lp input rows, not M: the last sequence's final (K-1)*d input rows
  // lie past M, and only the gather from the tiles before them reaches them.
  const int64_t rows = g.B * g.Lp, blocks = (rows + m * g.d - 1) / (m * g.d);
#pragma omp parallel for schedule(static) if (blocks * g.d * C >= (1 << 14))
  for (int64_t tile = 0; tile < blocks * g.d; ++tile) {  // tiles past tl.tiles only gather
    const int64_t q = tile / g.d, p = tile % g.d;
    for (int64_t t = 0; t < m; ++t) {
      T* out = sequence_row(dx, g, q * m * g.d + p + t * g.d, g.left, C);
      if (!out) continue;
      for (int64_t c = 0; c < C; ++c) out[c] = 0;
      for (int64_t s = 0; t + s * m < n && s <= q; ++s) {
        const int64_t from = (q - s) * g.d + p;
        if (from >= tl.tiles) continue;
        for (int64_t xi = 0; xi < n; ++xi) {
          const T b = bt[xi * n + t + s * m];
          if (b == T(0)) continue;
          const T* src = dV + (xi * tl.tiles + from) * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) out[c] += b * src[c];
        }
      }
    }
  }
}

// dwt [K, X, Cout] = G^T dU.
template <class T>
void filter_transform_backward(const WinogradTransforms& tr, int64_t rows, const T* dU, T* dwt) {
  const int64_t n = tr.n, K = tr.k;
  const std::vector<T> gm = as<T>(tr.G);
#pragma omp parallel for schedule(static) if (rows >= (1 << 14))
  for (int64_t e = 0; e < rows; ++e)
    for (int64_t j = 0; j < K; ++j) {
      T acc = 0;
      for (int64_t xi = 0; xi < n; ++xi) acc += gm[xi * K + j] * dU[xi * rows + e];
      dwt[j * rows + e] = acc;
    }
}

// Runs f<T, S>() for the compute type T (x's: float or double) and the type S of
// the GEMM operands (T, or bfloat16 under mixed precision).
template <class F>
void dispatch_types(DType compute, bool bf16, F&& f) {
  if (compute == DType::F64) return f.template operator()<double, double>();
  if (bf16) return f.template operator()<float, bfloat16>();
  f.template operator()<float, float>();
}

// What backward keeps: the transformed input V and filter U, and the geometry.
struct WinogradSaved {
  ConvRows geo;
  WinogradTransforms tr;
  int64_t X;
  Tensor V, U;  // [n, tiles, X], [n, X, Cout]: the GEMM operands (bf16 under mixed precision)
  TensorOptions out_opts;
};

ConvGrads conv1d_winograd_backward(const WinogradSaved& saved, const Tensor& dy_in, bool need_x, bool need_w, bool need_b) {
  const ConvRows& g = saved.geo;
  const Tiling tl(g, saved.tr.m);
  const int64_t n = saved.tr.n, X = saved.X;
  const Tensor dy = dy_in.contiguous();
  Tensor D = empty({n, tl.tiles, g.Cout}, {saved.V.dtype()});
  ConvGrads grads;
  dispatch_types(saved.out_opts.dtype, saved.V.dtype() == DType::BF16, [&]<class T, class S>() {
    output_transform_backward<T, S>(saved.tr, g, tl, dy.data<T>(), static_cast<S*>(D.raw_data()));
    if (need_x) {  // dV_xi = D_xi @ U_xi^T, only U's first Cin rows: x's channels
      Tensor dV = empty({n, tl.tiles, g.Cin}, saved.out_opts);
      gemm_on(D, false, false, true, tl.tiles, g.Cin, g.Cout, D.raw_data(), g.Cout, saved.U.raw_data(), g.Cout, 0.0,
              dV.raw_data(), g.Cin, {.count = n, .stride_a = tl.tiles * g.Cout, .stride_b = X * g.Cout,
                                     .stride_c = tl.tiles * g.Cin});
      grads.dx = empty({g.B, g.L, g.Cin}, saved.out_opts);
      input_transform_backward<T>(saved.tr, g, tl, dV.data<T>(), grads.dx.data<T>());
    }
    if (need_w || need_b) {  // dU_xi = V_xi^T @ D_xi, then dwt = G^T dU
      Tensor dU = empty({n, X, g.Cout}, saved.out_opts);
      gemm_on(D, false, true, false, X, g.Cout, tl.tiles, saved.V.raw_data(), X, D.raw_data(), g.Cout, 0.0, dU.raw_data(),
              g.Cout, {.count = n, .stride_a = tl.tiles * X, .stride_b = tl.tiles * g.Cout, .stride_c = X * g.Cout});
      Tensor dwt = empty({g.K, X, g.Cout}, saved.out_opts);
      filter_transform_backward<T>(saved.tr, X * g.Cout, dU.data<T>(), dwt.data<T>());
      unpack_grads(dwt, g, need_w, need_b, grads);
    }
  });
  return grads;
}

}  // namespace

WinogradTransforms winograd_transforms(int64_t m, int64_t k) {
  const int64_t n = m + k - 1, f = n - 1;  // f finite points, then infinity
  TCN_CHECK(m >= 1 && k >= 1 && f <= static_cast<int64_t>(kPoints.size()), "winograd: F(", m, ", ", k,
            ") needs ", f, " points; there are ", kPoints.size());
  WinogradTransforms tr{m, k, n, std::vector<double>(m * n, 0.0), std::vector<double>(n * k, 0.0),
                       std::vector<double>(n * n, 0.0)};
  for (int64_t c = 0; c < f; ++c) {
    const double p = kPoints[c];
    double scale = 1;  // prod_{l != c} (p_c - p_l): Lagrange's denominator, moved into G
    for (int64_t l = 0; l < f; ++l)
      if (l != c) scale *= p - kPoints[l];
    for (int64_t i = 0; i < m; ++i) tr.AT[i * n + c] = std::pow(p, static_cast<double>(i));
    for (int64_t j = 0; j < k; ++j) tr.G[c * k + j] = std::pow(p, static_cast<double>(j)) / scale;
    const std::vector<double> row = product_without(f, c);
    for (size_t t = 0; t < row.size(); ++t) tr.BT[c * n + static_cast<int64_t>(t)] = row[t];
  }
  tr.AT[(m - 1) * n + f] = 1;  // infinity: the leading coefficients
  tr.G[f * k + k - 1] = 1;
  const std::vector<double> whole = product_without(f, -1);
  for (int64_t t = 0; t < n; ++t) tr.BT[f * n + t] = whole[static_cast<size_t>(t)];
  return tr;
}

// n = m + K - 1 transformed positions: at most 8 in float32 and float64, 6 with
// bf16 operands, whose rounding the transforms amplify (section 6). A 1x1 conv
// has nothing to save; K > 7 leaves no tile of 2.
int64_t winograd_tile(int64_t K, bool bf16) {
  const int64_t m = (bf16 ? 6 : 8) - K + 1;
  return K >= 2 && m >= 2 ? m : 0;
}

// The GEMMs' work per tile grows with Cin * Cout, the transforms' with Cin + Cout,
// so the Winograd path wins once 1/Cin + 1/Cout is small: the channels' harmonic
// mean at least 128 in float32, 192 with bf16 operands (whose GEMMs are twice as
// fast, so the transforms weigh more). From build/bench_conv on a 2-core Zen 4 at
// 32 x 400, K 3, dilations 1/2/4 (winograd / gemm, forward + both backwards): fp32
// 64 ch 1.2-1.5, 128 ch 0.8-0.9, 256 ch 0.6-0.7, 450 ch 0.54-0.61; bf16 128 ch
// 1.1-1.3, 256 ch 0.85-0.88, 450 ch 0.68-0.74 (docs/results.md).
bool winograd_pays(const ConvRows& geo, bool bf16) {
  const double harmonic = 2.0 / (1.0 / static_cast<double>(geo.Cin) + 1.0 / static_cast<double>(geo.Cout));
  return winograd_tile(geo.K, bf16) > 0 && harmonic >= (bf16 ? 192.0 : 128.0);
}

ConvOut conv1d_winograd(const ConvRows& geo, const Tensor& x, const Tensor& w, const Tensor& b, const ConvSettings& s) {
  const int64_t m = winograd_tile(geo.K, s.bf16);  // conv1d_impl sends here only kernels with a tile
  TCN_CHECK(m > 0, "conv1d: the Winograd path has no tile for kernel size ", geo.K, s.bf16 ? " with bf16 operands" : "");
  return conv1d_winograd_tiled(geo, x, w, b, s, m);
}

ConvOut conv1d_winograd_tiled(const ConvRows& geo, const Tensor& x_in, const Tensor& w_in, const Tensor& b,
                              const ConvSettings& s, int64_t m) {
  TCN_CHECK(!x_in.device().is_cuda(), "conv1d: the Winograd path runs on the CPU only; use --conv_impl gemm or auto on CUDA");
  TCN_CHECK(!s.bf16 || x_in.dtype() == DType::F32, "conv1d: bf16 operands are for float32 inputs (autocast), got ",
            x_in.dtype());
  const WinogradTransforms tr = winograd_transforms(m, geo.K);
  const Tiling tl(geo, m);
  const int64_t n = tr.n, X = row_width(geo.Cin, b.defined());
  const DType op_dtype = s.bf16 ? DType::BF16 : x_in.dtype();  // of the GEMM operands
  const Tensor x = x_in.contiguous();
  const Tensor wt = pack_weights(w_in, b, X, x.dtype());  // [K, X, Cout] in x's precision
  Tensor V = empty({n, tl.tiles, X}, {op_dtype});
  Tensor U = empty({n, X, geo.Cout}, {op_dtype});
  Tensor Mx = empty({n, tl.tiles, geo.Cout}, x.options());
  Tensor y = empty({geo.B, geo.L, geo.Cout}, x.options());
  dispatch_types(x.dtype(), s.bf16, [&]<class T, class S>() {
    input_transform<T, S>(tr, geo, tl, X, b.defined(), x.data<T>(), static_cast<S*>(V.raw_data()));
    filter_transform<T, S>(tr, X * geo.Cout, wt.data<T>(), static_cast<S*>(U.raw_data()));
    gemm_on(V, false, false, false, tl.tiles, geo.Cout, X, V.raw_data(), X, U.raw_data(), geo.Cout, 0.0, Mx.raw_data(),
            geo.Cout, {.count = n, .stride_a = tl.tiles * X, .stride_b = X * geo.Cout, .stride_c = tl.tiles * geo.Cout});
    output_transform<T>(tr, geo, tl, Mx.data<T>(), y.data<T>());
  });
  return {y, std::bind_front(conv1d_winograd_backward, WinogradSaved{geo, tr, X, V, U, x.options()})};
}

}  // namespace tcn::conv1d_paths
