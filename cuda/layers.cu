// Kernels of the layer primitives: embedding rows, cross-entropy, dropout,
// LSTM cell. Each mirrors its CPU kernel in ops/ (same layouts, same math) so
// the CPU is its oracle (tests/test_cuda_ops.cpp).
#include <thrust/sequence.h>

#include "tcn/core/philox.h"
#include "tcn/cuda/context.cuh"
#include "tcn/cuda/device.cuh"
#include "tcn/cuda/thrust.cuh"
#include "tcn/cuda/kernels.h"
#include "tcn/ops/ops.h"

namespace tcn::cuda {

namespace {

template <class T>
__device__ __forceinline__ T sigm(T x) {
  return T(1) / (T(1) + ::exp(-x));
}

// ---- rows -------------------------------------------------------------------------
// One block finds the first element of idx outside [0, bound): each thread the
// first among its elements, then a min tree. The status is written only when
// no earlier error is pending (one stream per device: the first error wins).
constexpr int kCheckThreads = 256;
__global__ void check_index_kernel(DeviceStatus* st, int32_t what, const int64_t* idx, int64_t n, int64_t bound) {
  __shared__ int64_t first[kCheckThreads];
  int64_t mine = n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (idx[i] < 0 || idx[i] >= bound) {
      mine = i;
      break;
    }
  const int64_t bad = block_reduce(mine, first, [](int64_t a, int64_t b) { return b < a ? b : a; });
  if (threadIdx.x == 0 && bad < n && st->check == 0) {
    st->position = bad;
    st->value = idx[bad];
    st->bound = bound;
    __threadfence_system();  // the fields before the flag that says they are there
    st->check = what;
  }
}

// out (B, D) rows = table rows idx[i]; an index outside [0, V) gives a zero row.
template <class T>
__global__ void gather_kernel(T* out, const T* table, const int64_t* idx, int64_t n, int64_t D, int64_t V, int64_t s0,
                              int64_t s1) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D, r = idx[i];
    out[e] = r >= 0 && r < V ? table[r * s0 + j * s1] : T(0);
  }
}

// Embedding backward for small tables, without a sort: thread (v, j) adds
// src[i, j] for every i with idx[i] == v, in index order: the CPU's additions
// in the CPU's order, so the result is bit for bit the CPU's. The indices go
// through shared memory a tile at a time, read by the whole block.
// out (V, D) +=; src (n, D); block (32, 8): 32 columns of 8 rows.
constexpr int kScanCols = 32, kScanRows = 8, kScanTile = 1024;
template <class T>
__global__ void scatter_scan_kernel(T* out, const T* src, const int64_t* idx, int64_t n, int64_t D, int64_t V) {
  __shared__ int64_t tile[kScanTile];
  const int64_t j = blockIdx.x * int64_t(kScanCols) + threadIdx.x, v = blockIdx.y * int64_t(kScanRows) + threadIdx.y;
  const int t = threadIdx.y * kScanCols + threadIdx.x;
  T acc = 0;
  for (int64_t i0 = 0; i0 < n; i0 += kScanTile) {
    const int64_t m = n - i0 < kScanTile ? n - i0 : kScanTile;
    __syncthreads();  // the previous tile is no longer read
    for (int k = t; k < m; k += kScanCols * kScanRows) tile[k] = idx[i0 + k];
    __syncthreads();
    if (j < D && v < V)
      for (int64_t k = 0; k < m; ++k)
        if (tile[k] == v) acc += src[(i0 + k) * D + j];
  }
  if (j < D && v < V) out[v * D + j] += acc;
}

// Large tables: keys = indices sorted stably, pos = their original positions.
// The first position of each run of equal keys sums the run's rows in order.
template <class T>
__global__ void segment_sum_kernel(T* out, const T* src, const int64_t* keys, const int64_t* pos, int64_t n, int64_t D,
                                   int64_t V) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, j = e % D;
    if ((i > 0 && keys[i] == keys[i - 1]) || keys[i] < 0 || keys[i] >= V) continue;
    T acc = 0;
    for (int64_t k = i; k < n && keys[k] == keys[i]; ++k) acc += src[pos[k] * D + j];
    out[keys[i] * D + j] += acc;
  }
}

// ---- cross-entropy ------------------------------------------------------------------
// One block per row: max, then sum of exp, by block-wide reductions in shared memory.
template <class T>
__global__ void ce_rows_kernel(double* lse, double* row_loss, const T* x, const int64_t* tg, int64_t V) {
  double* sh = dynamic_shared<double>();
  const int64_t r = blockIdx.x;
  const T* row = x + r * V;
  double m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = ::fmax(m, static_cast<double>(row[v]));
  m = block_reduce(m, sh, [](double a, double b) { return ::fmax(a, b); });
  double acc = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) acc += ::exp(static_cast<double>(row[v]) - m);
  const double total = block_sum(acc, sh);
  if (threadIdx.x == 0) {
    lse[r] = m + ::log(total);
    const int64_t t = tg[r];  // out of range: reported by the target check; NaN here, no read
    row_loss[r] = t >= 0 && t < V ? lse[r] - static_cast<double>(row[t]) : NAN;
  }
}

// The mean of the row losses in one block: a fixed assignment of rows to threads
// and a fixed tree, so the result is deterministic. Written in the loss dtype.
template <class T>
__global__ void ce_mean_kernel(T* loss, const double* row_loss, int64_t N) {
  __shared__ double sh[256];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) acc += row_loss[r];
  const double total = block_sum(acc, sh);
  if (threadIdx.x == 0) *loss = static_cast<T>(total / static_cast<double>(N));
}

template <class T>
__global__ void ce_backward_kernel(T* dx, const T* x, const double* lse, const int64_t* tg, const T* dloss, int64_t N,
                                   int64_t V) {
  const double scale = static_cast<double>(*dloss) / static_cast<double>(N);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * V; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / V, v = e % V;
    double d = ::exp(static_cast<double>(x[e]) - lse[r]);
    if (v == tg[r]) d -= 1.0;
    dx[e] = static_cast<T>(scale * d);
  }
}

// ---- padded rows (conv1d) ---------------------------------------------------------------
// out (B, Lp, C) contiguous: x (B, L, C; any strides) at rows [left, left + L) of
// each batch, zeros in the other rows. One pass instead of a fill and a copy.
// D and S may differ (float32 into bfloat16: mixed precision's padded operands).
template <class D, class S>
__global__ void pad_rows_kernel(D* out, const S* x, int64_t B, int64_t Lp, int64_t C, int64_t L, int64_t left,
                                int64_t s0, int64_t s1, int64_t s2, int64_t Cx, float extra) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * Lp * C; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, t = (e / C) % Lp - left, b = e / (C * Lp);
    out[e] = c >= Cx ? D(c == Cx ? extra : 0.0f) : t >= 0 && t < L ? D(x[b * s0 + t * s1 + c * s2]) : D(0.0f);
  }
}

// wt[j, i, o] = w[o, i, j] (any strides) for i < Cin; row i = Cin (with a bias)
// the bias in tap 0 and zeros in the others; rows past it zeros. One thread per
// element of wt.
template <class D, class S>
__global__ void pack_conv_weights_kernel(D* wt, const S* w, const S* bias, int64_t K, int64_t X, int64_t Cout,
                                         int64_t Cin, int64_t s0, int64_t s1, int64_t s2) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < K * X * Cout;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e % Cout, i = (e / Cout) % X, j = e / (Cout * X);
    wt[e] = i < Cin ? D(w[o * s0 + i * s1 + j * s2]) : i == Cin && j == 0 && bias ? D(bias[o]) : D(0.0f);
  }
}

// The reverse of the packing, for the gradients: dw[o, i, j] = dwt[j, i, o] for
// i < Cin, db[o] = dwt[0, Cin, o] (either output may be null; rows past Cin,
// the alignment's zeros, are not read). One thread per element of dwt [K, X, Cout].
template <class T>
__global__ void unpack_conv_grads_kernel(T* dw, T* db, const T* dwt, int64_t K, int64_t X, int64_t Cout,
                                         int64_t Cin) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < K * X * Cout;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e % Cout, i = (e / Cout) % X, j = e / (Cout * X);
    if (i < Cin) {
      if (dw) dw[(o * Cin + i) * K + j] = dwt[e];
    } else if (i == Cin && j == 0 && db) {
      db[o] = dwt[e];
    }
  }
}

// ---- weight norm -----------------------------------------------------------------------
// One block per row o of v (R, C): norm[o] = ||v_o|| (float64), w_o = g_o v_o / norm[o].
constexpr int kRowThreads = 256;
template <class T>
__global__ void weight_norm_fwd_kernel(T* w, double* norm, const T* v, const T* g, int64_t C) {
  __shared__ double sh[kRowThreads];
  const int64_t o = blockIdx.x;
  const T* vo = v + o * C;
  double sq = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) sq += static_cast<double>(vo[k]) * vo[k];
  const double n = ::sqrt(block_sum(sq, sh));
  if (threadIdx.x == 0) norm[o] = n;
  const T scale = static_cast<T>(static_cast<double>(g[o]) / n);
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) w[o * C + k] = vo[k] * scale;
}

// s = sum_k dw_ok v_ok; dg_o = s / n; dv_ok = (g_o / n) dw_ok - (g_o s / n^3) v_ok (null outputs skipped).
template <class T>
__global__ void weight_norm_bwd_kernel(T* dv, T* dg, const T* dw, const T* v, const T* g, const double* norm,
                                       int64_t C) {
  __shared__ double sh[kRowThreads];
  const int64_t o = blockIdx.x;
  double acc = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) acc += static_cast<double>(dw[o * C + k]) * v[o * C + k];
  const double s = block_sum(acc, sh), n = norm[o], go = g[o];
  if (dg && threadIdx.x == 0) dg[o] = static_cast<T>(s / n);
  if (!dv) return;
  const T a = static_cast<T>(go / n), b = static_cast<T>(go * s / (n * n * n));
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) dv[o * C + k] = a * dw[o * C + k] - b * v[o * C + k];
}

// ---- dropout ---------------------------------------------------------------------------
// The first counter: start, plus the device-side base of a captured step (core/step_graph.h).
__device__ __forceinline__ uint64_t philox_start(uint64_t start, const double* base) {
  return base ? start + static_cast<uint64_t>(*base) : start;
}

// An input of up to 3 dims with any strides, read in row-major element order:
// a narrowed [B, T, C] activation needs no contiguous copy before the kernel.
struct Strided3 {
  int64_t n1 = 1, n2 = 1;      // sizes of the last two dims (the first is implied by n)
  int64_t s0 = 0, s1 = 0, s2 = 1;
  __device__ __forceinline__ int64_t offset(int64_t i) const {
    return (i / (n1 * n2)) * s0 + ((i / n2) % n1) * s1 + (i % n2) * s2;
  }
};

Strided3 strided3(const Tensor& x) {
  TCN_CHECK(x.dim() <= 3 || x.is_contiguous(), "CUDA kernel: a strided input of rank ", x.dim(), " (at most 3)");
  Strided3 g;
  if (x.dim() > 3) {  // contiguous: one row
    g.n2 = x.numel();
    return g;
  }
  const int pad = 3 - static_cast<int>(x.dim());
  auto size = [&](int d) { return d < pad ? int64_t{1} : x.size(d - pad); };
  auto stride = [&](int d) { return d < pad ? int64_t{0} : x.stride(d - pad); };
  g.n1 = size(1);
  g.n2 = size(2);
  g.s0 = stride(0);
  g.s1 = stride(1);
  g.s2 = stride(2);
  return g;
}

// Calls f(i, bits) for each element i < n, bits its 32-bit Philox number: number
// i % 4 of block i / 4 of the stream at `start`. A thread takes whole blocks (four
// elements: 4q .. 4q + 3), so the ten rounds of a block run once per four elements,
// not once per element. With draw false no block is computed (bits is 0).
template <class F>
__device__ __forceinline__ void for_each_philox_element(int64_t n, uint64_t seed, uint64_t start, bool draw, F&& f) {
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; 4 * q < n; q += int64_t(gridDim.x) * blockDim.x) {
    Philox4 bits{};
    if (draw) bits = philox_block(seed, start + q);
    for (int j = 0; j < 4 && 4 * q + j < n; ++j) f(4 * q + j, bits.v[j]);
  }
}

// y (contiguous) from x (strided): element i of both is the i-th in row-major order.
template <class T>
__global__ void dropout_fwd_kernel(T* y, const T* x, Strided3 xs, int64_t n, uint64_t seed, uint64_t start0,
                                   const double* base, uint32_t threshold, T scale, bool relu) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T xi = x[xs.offset(i)];
    bool k = (bits >> 8) >= threshold;
    if (relu) k = k && xi > T(0);
    y[i] = xi * (static_cast<T>(k) * scale);
  });
}

// dx = g * keep * scale. With y (relu_dropout's output), keep is y > 0 and no
// Philox is drawn.
template <class T>
__global__ void dropout_bwd_kernel(T* dx, const T* g, Strided3 gs, const T* y, int64_t n, uint64_t seed,
                                   uint64_t start0, const double* base, uint32_t threshold, T scale) {
  const uint64_t start = y ? 0 : philox_start(start0, base);
  for_each_philox_element(n, seed, start, !y, [&](int64_t i, uint32_t bits) {
    const bool k = y ? y[i] > T(0) : (bits >> 8) >= threshold;
    dx[i] = g[gs.offset(i)] * (static_cast<T>(k) * scale);
  });
}

// A TCN block's tail in one pass each way: z = relu(relu(x) * keep * scale + res),
// x and res read through their strides, z contiguous. The product and the sum
// are rounded separately, as the CPU's relu_dropout_add_relu rounds them, so
// that both devices give the same bits (the dropout masks are equal too).
template <class T>
__global__ void dropout_add_relu_fwd_kernel(T* z, const T* x, Strided3 xs, const T* res, Strided3 rs, int64_t n,
                                            uint64_t seed, uint64_t start0, const double* base, uint32_t threshold,
                                            T scale) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T xi = x[xs.offset(i)];
    const bool k = (bits >> 8) >= threshold && xi > T(0);
    const T s = add_rn(mul_rn(xi, static_cast<T>(k) * scale), res[rs.offset(i)]);
    z[i] = s > T(0) ? s : T(0);
  });
}

// Its gradients: dres = g where z > 0 (else 0), dx = dres * keep * scale where
// x > 0, the keep flags drawn again from (seed, start). dx and dres contiguous.
template <class T>
__global__ void dropout_add_relu_bwd_kernel(T* dx, T* dres, const T* g, Strided3 gs, const T* x, Strided3 xs,
                                            const T* z, int64_t n, uint64_t seed, uint64_t start0, const double* base,
                                            uint32_t threshold, T scale) {
  for_each_philox_element(n, seed, philox_start(start0, base), true, [&](int64_t i, uint32_t bits) {
    const T gz = z[i] > T(0) ? g[gs.offset(i)] : T(0);
    const bool k = (bits >> 8) >= threshold && x[xs.offset(i)] > T(0);
    dres[i] = gz;
    dx[i] = gz * (static_cast<T>(k) * scale);
  });
}

// ---- LSTM cell -------------------------------------------------------------------------
template <class T>
__global__ void lstm_fwd_kernel(T* act, const T* c0, T* hs, T* cs, bfloat16* hb, int64_t B, int64_t Tn, int64_t H,
                                int64_t t) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, k = e % H;
    T* a = act + (b * Tn + t) * 4 * H;
    const T cp = t == 0 ? c0[b * H + k] : cs[(b * Tn + t - 1) * H + k];
    const T i = sigm(a[k]), f = sigm(a[H + k]), g = ::tanh(a[2 * H + k]), o = sigm(a[3 * H + k]);
    a[k] = i;
    a[H + k] = f;
    a[2 * H + k] = g;
    a[3 * H + k] = o;
    const T c = f * cp + i * g;
    cs[(b * Tn + t) * H + k] = c;
    const T h = o * ::tanh(c);
    hs[(b * Tn + t) * H + k] = h;
    if (hb) hb[e] = bfloat16(static_cast<float>(h));  // the next step's GEMM operand under mixed precision
  }
}

template <class T>
__global__ void lstm_bwd_kernel(T* dG, bfloat16* dGb, const T* act, const T* c0, const T* cs, const T* dout, T* dh,
                                T* dc, int64_t B, int64_t Tn, int64_t H, int64_t t) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < B * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, k = e % H;
    const T* a = act + (b * Tn + t) * 4 * H;
    T* dg = dG + (b * Tn + t) * 4 * H;
    const T cp = t == 0 ? c0[b * H + k] : cs[(b * Tn + t - 1) * H + k];
    const T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];
    const T tc = ::tanh(cs[(b * Tn + t) * H + k]);
    const T dht = dout[(b * Tn + t) * H + k] + dh[e];
    const T dct = dc[e] + dht * o * (T(1) - tc * tc);
    const T d[4] = {dct * g * i * (T(1) - i), dct * cp * f * (T(1) - f), dct * i * (T(1) - g * g),
                    dht * tc * o * (T(1) - o)};
    for (int gate = 0; gate < 4; ++gate) dg[gate * H + k] = d[gate];
    dc[e] = dct * f;
    if (dGb)  // dG_t in bf16, [B, 4H]: the operand of this step's dh GEMM under mixed precision
      for (int gate = 0; gate < 4; ++gate) dGb[b * 4 * H + gate * H + k] = bfloat16(static_cast<float>(d[gate]));
  }
}

// Tables up to this many rows take the sort-free embedding backward: rows x D
// threads, each reading all n indices (not yet timed on a GPU).
constexpr int64_t kSmallTable = 1024;

uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::ceil(p * 16777216.0)); }
// The scale of kept elements, 1 / (1 - p) (0 when everything is dropped).
template <class T>
T dropout_scale(double p) {
  return static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
}

}  // namespace

void check_index_range(DeviceCheck what, const Tensor& idx, int64_t bound) {
  const int64_t n = idx.numel();
  if (n == 0) return;
  const int dev = idx.device().index;
  TCN_LAUNCH(1, kCheckThreads, 0, stream(dev), check_index_kernel)(device_status(dev), static_cast<int32_t>(what),
                                                                    static_cast<const int64_t*>(idx.raw_data()), n,
                                                                    bound);
  CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& idx) {
  const int64_t n = idx.numel(), D = table.size(1);
  if (n * D == 0) return;
  dispatch_float(table.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, stream(out.device().index), gather_kernel<T>)(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(table.raw_data()),
        static_cast<const int64_t*>(idx.raw_data()), n, D, table.size(0), table.stride(0), table.stride(1));
  });
  CUDA_CHECK(cudaGetLastError());
}

void scatter_add_rows(const Tensor& out, const Tensor& src, const Tensor& idx) {
  const int64_t n = idx.numel(), D = src.size(-1), V = out.size(0);
  if (n * D == 0 || V == 0) return;
  const int dev = out.device().index;
  cudaStream_t s = stream(dev);
  if (V <= kSmallTable) {  // one kernel, no sort, no host synchronisation
    const dim3 grid(static_cast<unsigned>((D + kScanCols - 1) / kScanCols),
                    static_cast<unsigned>((V + kScanRows - 1) / kScanRows));
    dispatch_float(src.dtype(), "CUDA kernel", [&]<class T>() {
      TCN_LAUNCH(grid, dim3(kScanCols, kScanRows), 0, s, scatter_scan_kernel<T>)(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(src.raw_data()),
          static_cast<const int64_t*>(idx.raw_data()), n, D, V);
    });
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  // Large tables: a stable sort of the indices (Thrust; it synchronises), then
  // one pass over the runs.
  Tensor keys = clone(idx);
  Tensor pos = empty({n}, {DType::I64, out.device()});
  // Raw pointers with an explicit policy (no thrust::device_ptr, whose
  // references Thrust's host backend builds from a null system pointer).
  int64_t* kp = static_cast<int64_t*>(keys.raw_data());
  int64_t* pp = static_cast<int64_t*>(pos.raw_data());
  thrust::sequence(thrust_on(s), pp, pp + n);
  stable_sort_by_key(s, kp, pp, n);
  dispatch_float(src.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(n * D, 256), 256, 0, s, segment_sum_kernel<T>)(static_cast<T*>(out.raw_data()),
                                                                static_cast<const T*>(src.raw_data()),
                                                                static_cast<const int64_t*>(keys.raw_data()),
                                                                static_cast<const int64_t*>(pos.raw_data()), n, D, V);
  });
  CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor row_loss = empty({N}, {DType::F64, logits.device()});
  const int block = 256;
  cudaStream_t s = stream(logits.device().index);
  dispatch_float(logits.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(N), block, block * sizeof(double), s, ce_rows_kernel<T>)(
        static_cast<double*>(lse.raw_data()), static_cast<double*>(row_loss.raw_data()),
        static_cast<const T*>(logits.raw_data()), static_cast<const int64_t*>(targets.raw_data()), V);
    TCN_LAUNCH(1, 256, 0, s, ce_mean_kernel<T>)(static_cast<T*>(loss.raw_data()),
                                        static_cast<const double*>(row_loss.raw_data()), N);
  });
  CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& targets) {
  const int64_t N = logits.size(0), V = logits.size(1);
  dispatch_float(logits.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(N * V, 256), 256, 0, stream(logits.device().index), ce_backward_kernel<T>)(
        static_cast<T*>(dlogits.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const double*>(lse.raw_data()), static_cast<const int64_t*>(targets.raw_data()),
        static_cast<const T*>(dloss.raw_data()), N, V);
  });
  CUDA_CHECK(cudaGetLastError());
}

void pad_rows(const Tensor& out, const Tensor& x, int64_t left, double extra) {
  const int64_t B = out.size(0), Lp = out.size(1), C = out.size(2);
  TCN_CHECK(x.size(2) <= C, "pad_rows: ", x.size(2), " channels into ", C);
  if (B * Lp * C == 0) return;
  auto launch = [&]<class D, class S>() {
    TCN_LAUNCH(grid_for(B * Lp * C, 256), 256, 0, stream(out.device().index), pad_rows_kernel<D, S>)(
        static_cast<D*>(out.raw_data()), static_cast<const S*>(x.raw_data()), B, Lp, C, x.size(1), left, x.stride(0),
        x.stride(1), x.stride(2), x.size(2), static_cast<float>(extra));
  };
  if (out.dtype() == DType::BF16 && x.dtype() == DType::F32) {
    launch.template operator()<bfloat16, float>();
  } else {
    TCN_CHECK(out.dtype() == x.dtype(), "pad_rows: ", dtype_name(x.dtype()), " into ", dtype_name(out.dtype()),
              " (same dtypes, or float32 into bfloat16)");
    dispatch_float(out.dtype(), "CUDA kernel", [&]<class T>() { launch.template operator()<T, T>(); });
  }
  CUDA_CHECK(cudaGetLastError());
}

void pack_conv_weights(const Tensor& wt, const Tensor& w, const Tensor& bias) {
  const int64_t K = wt.size(0), X = wt.size(1), Cout = wt.size(2), Cin = w.size(1);
  TCN_CHECK(w.size(0) == Cout && w.size(2) == K && X >= Cin + (bias.defined() ? 1 : 0),
            "pack_conv_weights: ", w.shape(), " into ", wt.shape());
  TCN_CHECK(!bias.defined() || (bias.dtype() == w.dtype() && bias.numel() == Cout), "pack_conv_weights: bias ",
            bias.defined() ? bias.shape() : Shape{}, " for ", Cout, " output channels of dtype ", dtype_name(w.dtype()));
  if (K * X * Cout == 0) return;
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  auto launch = [&]<class D, class S>() {
    TCN_LAUNCH(grid_for(K * X * Cout, 256), 256, 0, stream(wt.device().index), pack_conv_weights_kernel<D, S>)(
        static_cast<D*>(wt.raw_data()), static_cast<const S*>(w.raw_data()),
        b.defined() ? static_cast<const S*>(b.raw_data()) : nullptr, K, X, Cout, Cin, w.stride(0), w.stride(1),
        w.stride(2));
  };
  if (wt.dtype() == DType::BF16 && w.dtype() == DType::F32) {
    launch.template operator()<bfloat16, float>();
  } else {
    TCN_CHECK(wt.dtype() == w.dtype(), "pack_conv_weights: ", dtype_name(w.dtype()), " into ",
              dtype_name(wt.dtype()), " (same dtypes, or float32 into bfloat16)");
    dispatch_float(wt.dtype(), "CUDA kernel", [&]<class T>() { launch.template operator()<T, T>(); });
  }
  CUDA_CHECK(cudaGetLastError());
}

void unpack_conv_grads(const Tensor& dw, const Tensor& db, const Tensor& dwt, int64_t Cin) {
  const int64_t K = dwt.size(0), X = dwt.size(1), Cout = dwt.size(2);
  TCN_CHECK(dwt.is_contiguous() && (!dw.defined() || (dw.is_contiguous() && dw.size(0) == Cout && dw.size(2) == K &&
                                                      dw.size(1) == Cin && X >= Cin)) &&
                (!db.defined() || (db.is_contiguous() && db.numel() == Cout && X > Cin)),
            "unpack_conv_grads: ", dwt.shape(), " into ", dw.defined() ? dw.shape() : Shape{}, " and ",
            db.defined() ? db.shape() : Shape{});
  if (K * X * Cout == 0) return;
  dispatch_float(dwt.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(K * X * Cout, 256), 256, 0, stream(dwt.device().index), unpack_conv_grads_kernel<T>)(
        dw.defined() ? static_cast<T*>(dw.raw_data()) : nullptr, db.defined() ? static_cast<T*>(db.raw_data()) : nullptr,
        static_cast<const T*>(dwt.raw_data()), K, X, Cout, Cin);
  });
  CUDA_CHECK(cudaGetLastError());
}

void weight_norm_forward(const Tensor& w, const Tensor& norm, const Tensor& v, const Tensor& g) {
  const int64_t R = v.size(0), C = R > 0 ? v.numel() / R : 0;
  if (R == 0) return;
  dispatch_float(v.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(v.device().index), weight_norm_fwd_kernel<T>)(
        static_cast<T*>(w.raw_data()), static_cast<double*>(norm.raw_data()), static_cast<const T*>(v.raw_data()),
        static_cast<const T*>(g.raw_data()), C);
  });
  CUDA_CHECK(cudaGetLastError());
}

void weight_norm_backward(const Tensor& dv, const Tensor& dg, const Tensor& dw, const Tensor& v, const Tensor& g,
                          const Tensor& norm) {
  const int64_t R = v.size(0), C = R > 0 ? v.numel() / R : 0;
  if (R == 0) return;
  dispatch_float(v.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(static_cast<unsigned>(R), kRowThreads, 0, stream(v.device().index), weight_norm_bwd_kernel<T>)(
        dv.defined() ? static_cast<T*>(dv.raw_data()) : nullptr, dg.defined() ? static_cast<T*>(dg.raw_data()) : nullptr,
        static_cast<const T*>(dw.raw_data()), static_cast<const T*>(v.raw_data()), static_cast<const T*>(g.raw_data()),
        static_cast<const double*>(norm.raw_data()), C);
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_forward(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t start, const Tensor& base,
                     bool relu) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(x.device().index), dropout_fwd_kernel<T>)(
        static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()), strided3(x), n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p), relu);
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(const Tensor& dx, const Tensor& g, double p, uint64_t seed, uint64_t start, const Tensor& base,
                      const Tensor& y) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_float(g.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(g.device().index), dropout_bwd_kernel<T>)(
        static_cast<T*>(dx.raw_data()), static_cast<const T*>(g.raw_data()), strided3(g),
        y.defined() ? static_cast<const T*>(y.raw_data()) : nullptr, n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_add_relu_forward(const Tensor& z, const Tensor& x, const Tensor& res, double p, uint64_t seed,
                              uint64_t start, const Tensor& base) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(x.device().index), dropout_add_relu_fwd_kernel<T>)(
        static_cast<T*>(z.raw_data()), static_cast<const T*>(x.raw_data()), strided3(x),
        static_cast<const T*>(res.raw_data()), strided3(res), n, seed, start, scalar_ptr(base), dropout_threshold(p),
        dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

void dropout_add_relu_backward(const Tensor& dx, const Tensor& dres, const Tensor& g, const Tensor& x, const Tensor& z,
                               double p, uint64_t seed, uint64_t start, const Tensor& base) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_float(g.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for((n + 3) / 4, 256), 256, 0, stream(g.device().index), dropout_add_relu_bwd_kernel<T>)(
        static_cast<T*>(dx.raw_data()), static_cast<T*>(dres.raw_data()), static_cast<const T*>(g.raw_data()),
        strided3(g), static_cast<const T*>(x.raw_data()), strided3(x), static_cast<const T*>(z.raw_data()), n, seed,
        start, scalar_ptr(base), dropout_threshold(p), dropout_scale<T>(p));
  });
  CUDA_CHECK(cudaGetLastError());
}

void lstm_cell_forward(const Tensor& act, const Tensor& c0, const Tensor& hs, const Tensor& cs, int64_t t,
                       const Tensor& h_bf16) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;  // an empty batch: no grid to launch (a zero grid is an invalid configuration)
  dispatch_float(act.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_fwd_kernel<T>)(
        static_cast<T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()), static_cast<T*>(hs.raw_data()),
        static_cast<T*>(cs.raw_data()), h_bf16.defined() ? static_cast<bfloat16*>(h_bf16.raw_data()) : nullptr, B, Tn,
        H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

void lstm_cell_backward(const Tensor& dG, const Tensor& act, const Tensor& c0, const Tensor& cs, const Tensor& dout,
                        const Tensor& dh, const Tensor& dc, int64_t t, const Tensor& dG_bf16) {
  const int64_t B = act.size(0), Tn = act.size(1), H = act.size(2) / 4;
  if (B * H == 0) return;
  dispatch_float(act.dtype(), "CUDA kernel", [&]<class T>() {
    TCN_LAUNCH(grid_for(B * H, 256), 256, 0, stream(act.device().index), lstm_bwd_kernel<T>)(
        static_cast<T*>(dG.raw_data()), dG_bf16.defined() ? static_cast<bfloat16*>(dG_bf16.raw_data()) : nullptr,
        static_cast<const T*>(act.raw_data()), static_cast<const T*>(c0.raw_data()),
        static_cast<const T*>(cs.raw_data()), static_cast<const T*>(dout.raw_data()), static_cast<T*>(dh.raw_data()),
        static_cast<T*>(dc.raw_data()), B, Tn, H, t);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tcn::cuda
