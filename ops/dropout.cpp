// Inverted dropout with Philox masks: element i (row-major) of x is kept when
// its uniform u_i = (bits_i >> 8) / 2^24 is >= p, and kept elements are scaled
// by 1/(1-p). The comparison is done on the integer bits (u_i >= p exactly when
// bits_i >> 8 >= ceil(p * 2^24)), so any device draws the same mask from the
// same (seed, offset). On the CPU the forward keeps the mask as one byte per
// element, so backward is a multiply instead of a second pass of Philox.
//
// relu_dropout(x) = dropout(relu(x)) in one pass each way: the TCN applies
// dropout right after every ReLU, and fusing them saved ~9% of a training step
// on the CPU (charlm bench). dropout(relu(x)) composed is its test oracle.
// relu_dropout_add_relu(x, res) = relu(relu_dropout(x) + res), a TCN block's
// tail (dropout, residual connection, activation): one kernel each way on CUDA,
// where it saves a kernel and a pass over the activations in each direction.
#include <cmath>
#include <memory>
#include <vector>

#include "core/philox.h"
#include "core/step_graph.h"
#include "core/math/cpu_loops.h"
#include "ops/cpu_map.h"
#include "core/math/functors.h"
#include "cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/ops.h"
#include "core/math/simd.h"

namespace tcn {

namespace {

using Mask = std::vector<uint8_t>;

// The keep flags of blocks [first, first + count) of a Philox stream: mask[4k + lane].
// Written as independent per-block lanes over a chunk so the compiler can run
// several Philox blocks per vector instruction; TCN_SIMD_CLONES (core/math/simd.h)
// picks the widest vector unit of the machine at run time.
TCN_SIMD_CLONES void philox_keep_flags(
    uint64_t seed, uint64_t first, int64_t count, uint32_t threshold, uint8_t* mask) {
  constexpr int64_t kChunk = 64;
  uint32_t c0[kChunk], c1[kChunk], c2[kChunk], c3[kChunk];
  for (int64_t base = 0; base < count; base += kChunk) {
    const int64_t m = std::min(kChunk, count - base);
    for (int64_t i = 0; i < m; ++i) {
      const uint64_t ctr = first + base + i;
      c0[i] = static_cast<uint32_t>(ctr);
      c1[i] = static_cast<uint32_t>(ctr >> 32);
      c2[i] = 0;
      c3[i] = 0;
    }
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      for (int64_t i = 0; i < m; ++i) {  // the same round as philox4x32_10, on m blocks at once
        const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[i];
        const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[i];
        const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
        const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
        c1[i] = static_cast<uint32_t>(p1);
        c3[i] = static_cast<uint32_t>(p0);
        c0[i] = n0;
        c2[i] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (int64_t i = 0; i < m; ++i) {
      uint8_t* f = mask + 4 * (base + i);
      f[0] = (c0[i] >> 8) >= threshold;
      f[1] = (c1[i] >> 8) >= threshold;
      f[2] = (c2[i] >> 8) >= threshold;
      f[3] = (c3[i] >> 8) >= threshold;
    }
  }
}

// Contiguous rows: y = x * keep * scale (with kRelu, keep &= x > 0 first).
// Branch-free so it vectorises (keep is 0 or 1; as in PyTorch, a dropped inf or
// NaN stays NaN: x * 0); the float version is compiled for AVX-512/AVX2 too.
template <bool kRelu, class T>
inline void apply_keep_flags_generic(const T* x, uint8_t* m, T* y, int64_t n, T scale) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    if constexpr (kRelu) m[i] = m[i] & static_cast<uint8_t>(v > T(0));
    y[i] = v * (static_cast<T>(m[i]) * scale);
  }
}
TCN_SIMD_CLONES void apply_keep_flags_f32(const float* x, uint8_t* m, float* y, int64_t n, float scale, bool relu) {
  if (relu)
    apply_keep_flags_generic<true>(x, m, y, n, scale);
  else
    apply_keep_flags_generic<false>(x, m, y, n, scale);
}
template <bool kRelu, class T>
void apply_keep_flags(const T* x, uint8_t* m, T* y, int64_t n, T scale) {
  if constexpr (std::is_same_v<T, float>)
    apply_keep_flags_f32(x, m, y, n, scale, kRelu);
  else
    apply_keep_flags_generic<kRelu>(x, m, y, n, scale);
}

// y = x * keep * scale for a possibly strided x (a conv output is a view),
// recording keep into mask (which has room for whole Philox blocks). With
// kRelu, y = relu(x) * keep * scale and the mask records keep && x > 0, so the
// same backward serves both.
template <bool kRelu, class T>
void dropout_forward_cpu(const Tensor& x, const Tensor& y, uint8_t* mask, double p, uint64_t seed, uint64_t start) {
  const int64_t n = x.numel();
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));  // in units of 2^-24
  const int64_t blocks = (n + 3) / 4;
  constexpr int64_t kPerTask = 4096;  // blocks per parallel task
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t b0 = 0; b0 < blocks; b0 += kPerTask)
    philox_keep_flags(seed, start + b0, std::min(kPerTask, blocks - b0), threshold, mask + 4 * b0);
  const T scale = static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  cpu::for_each_row<2>(x.shape(), {y.strides(), x.strides()}, [&](const auto& off, int64_t len, const auto& inc) {
    uint8_t* m = mask + off[0];  // y is contiguous: its offset is the element index
    const T* xr = xp + off[1];
    T* yr = yp + off[0];
    if (inc[1] != 1) {
      for (int64_t i = 0; i < len; ++i) {
        const T v = xr[i * inc[1]];
        if constexpr (kRelu) m[i] = m[i] & (v > T(0));
        yr[i] = v * (static_cast<T>(m[i]) * scale);
      }
      return;
    }
    apply_keep_flags<kRelu>(xr, m, yr, len, scale);
  });
}

// dx = g * keep * scale; g may be a strided view (a conv's output gradient often is).
template <class T>
void dropout_backward_cpu(const Tensor& g, const Tensor& dx, const uint8_t* mask, T scale) {
  const T* gp = g.data<T>();
  T* out = dx.data<T>();
  cpu::for_each_row<2>(g.shape(), {dx.strides(), g.strides()}, [&](const auto& off, int64_t n, const auto& inc) {
    const uint8_t* m = mask + off[0];  // dx is contiguous: its offset is the element index
    const T* gr = gp + off[1];
    T* o = out + off[0];
    if (inc[1] == 1)
      for (int64_t i = 0; i < n; ++i) o[i] = gr[i] * (static_cast<T>(m[i]) * scale);  // vectorises
    else
      for (int64_t i = 0; i < n; ++i) o[i] = gr[i * inc[1]] * (static_cast<T>(m[i]) * scale);
  });
}

// dx = g * mask * scale as a new tensor (the CPU's dropout backward).
Tensor dropout_grad_cpu(const Tensor& g, const Mask& mask, double p) {
  Tensor dx = empty(g.shape(), g.options());
  dispatch_float(dx.dtype(), "dropout backward", [&]<class T>() {
    dropout_backward_cpu<T>(g, dx, mask.data(), static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0));
  });
  return dx;
}

// The CPU forward: y = x * keep * scale (relu(x) with kRelu) as a new tensor,
// drawing n flags from gen; the flags stay in the returned mask for backward.
struct CpuDropout {
  Tensor y;
  std::shared_ptr<Mask> mask;
};
template <bool kRelu>
CpuDropout cpu_dropout(const char* op, const Tensor& x, double p, Generator& gen) {
  const int64_t n = x.numel();
  const uint64_t seed = gen.seed(), start = gen.reserve(static_cast<uint64_t>(n));
  CpuDropout d{empty(x.shape(), x.options()), std::make_shared<Mask>((n + 3) / 4 * 4)};
  dispatch_float(x.dtype(), op, [&]<class T>() {
    dropout_forward_cpu<kRelu, T>(x.detach(), d.y, d.mask->data(), p, seed, start);
  });
  return d;
}

// Where a CUDA dropout's n keep flags start in its generator's Philox stream. On
// a GPU the mask is not stored: backward draws it again from (seed, start).
// Inside a captured step (core/step_graph.h) start is relative to a device-side
// base that each replay advances; eagerly it is absolute (no base).
struct CudaDraw {
  uint64_t start = 0;
  Tensor base;
};
CudaDraw cuda_draw(Generator& gen, int64_t n, StepGraph* capturing) {
  if (StepGraph* g = capturing) {
    StepGraph::Philox ph = g->philox(gen, static_cast<uint64_t>(n));
    return {ph.rel, ph.base};
  }
  return {gen.reserve(static_cast<uint64_t>(n)), Tensor()};
}

// The CUDA kernels read up to 3 dims through their strides: a narrowed activation needs no copy.
Tensor strided_ok(const Tensor& t) { return t.dim() <= 3 ? t : t.contiguous(); }

template <bool kRelu>
Tensor dropout_impl(const char* op, const Tensor& x_in, double p, Generator& gen) {
  check_defined(op, x_in);
  check_float(op, x_in);
  TCN_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
  if (x_in.device().is_cuda()) {
    const uint64_t seed = gen.seed();
    // After a ReLU, backward reads the mask from the output instead of drawing it
    // (y > 0 exactly where kept and x > 0).
    const CudaDraw draw = cuda_draw(gen, x_in.numel(), StepGraph::capturing());
    Tensor x = strided_ok(x_in.detach());
    Tensor y = empty(x.shape(), x.options());
    TCN_CUDA_OP(op, cuda::dropout_forward(y, x, p, seed, draw.start, draw.base, kRelu));
    if (autograd::needs_grad({x_in}))
      autograd::record(op, {x_in}, {y}, [p, seed, draw, yk = kRelu ? y.detach() : Tensor()](const TensorList& g) {
        Tensor gc = strided_ok(g[0]);
        Tensor dx = empty(gc.shape(), gc.options());
        TCN_CUDA_OP("dropout backward", cuda::dropout_backward(dx, gc, p, seed, draw.start, draw.base, yk));
        return TensorList{dx};
      });
    return y;
  }
  CpuDropout d = cpu_dropout<kRelu>(op, x_in, p, gen);
  if (autograd::needs_grad({x_in}))
    autograd::record(op, {x_in}, {d.y},
                     [mask = d.mask, p](const TensorList& g) { return TensorList{dropout_grad_cpu(g[0], *mask, p)}; });
  return d.y;
}

}  // namespace

Tensor relu_dropout_add_relu(const Tensor& x_in, const Tensor& res_in, double p, Generator& gen) {
  const char* op = "relu_dropout_add_relu";
  const profile::Op range(op);
  check_defined(op, x_in);
  check_defined(op, res_in);
  check_same_device(op, x_in, res_in);
  check_same_dtype(op, x_in, res_in);
  check_float(op, x_in);
  TCN_CHECK(x_in.shape() == res_in.shape(), op, ": the residual's shape ", res_in.shape(), " differs from the input's ",
            x_in.shape());
  TCN_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
  if (p == 0.0) return add_relu(relu(x_in), res_in);  // they count their own bytes
  profile::add_bytes(3 * nbytes(x_in) + static_cast<double>(x_in.numel()));  // x, res, z + the mask
  if (x_in.device().is_cuda()) {
    const uint64_t seed = gen.seed();
    const CudaDraw draw = cuda_draw(gen, x_in.numel(), StepGraph::capturing());
    Tensor x = strided_ok(x_in.detach()), res = strided_ok(res_in.detach());
    Tensor z = empty(x.shape(), x.options());
    TCN_CUDA_OP(op, cuda::dropout_add_relu_forward(z, x, res, p, seed, draw.start, draw.base));
    if (autograd::needs_grad({x_in, res_in}))
      autograd::record(op, {x_in, res_in}, {z}, [p, seed, draw, x, zk = z.detach()](const TensorList& g) {
        Tensor gc = strided_ok(g[0]);
        Tensor dx = empty(gc.shape(), gc.options()), dres = empty(gc.shape(), gc.options());
        TCN_CUDA_OP("relu_dropout_add_relu backward",
                    cuda::dropout_add_relu_backward(dx, dres, gc, x, zk, p, seed, draw.start, draw.base));
        return TensorList{dx, dres};
      });
    return z;
  }
  // The CPU: relu_dropout's pass (its mask records keep && x > 0), then z = relu(h + res) in place.
  CpuDropout d = cpu_dropout<true>(op, x_in, p, gen);
  Tensor z = d.y;
  dispatch_float(z.dtype(), op, [&]<class T>() { cpu::cpu_map<T>(z, fn::AddRelu{}, z, res_in.detach()); });
  if (autograd::needs_grad({x_in, res_in}))
    autograd::record(op, {x_in, res_in}, {z}, [mask = d.mask, p, zk = z.detach()](const TensorList& g) {
      Tensor dres = relu_backward(g[0], zk);
      return TensorList{dropout_grad_cpu(dres, *mask, p), dres};
    });
  return z;
}

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  const profile::Op range("dropout");
  check_defined("dropout", x);
  if (p == 0.0) return x;
  profile::add_bytes(2 * nbytes(x) + static_cast<double>(x.numel()));  // + the mask
  return dropout_impl<false>("dropout", x, p, gen);
}

Tensor relu_dropout(const Tensor& x, double p, Generator& gen) {
  const profile::Op range("relu_dropout");
  check_defined("relu_dropout", x);
  if (p == 0.0) return relu(x);  // relu counts its own bytes
  profile::add_bytes(2 * nbytes(x) + static_cast<double>(x.numel()));  // + the mask
  return dropout_impl<true>("relu_dropout", x, p, gen);
}

}  // namespace tcn
