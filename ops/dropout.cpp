// Inverted dropout with Philox masks: element i (row-major) of x is kept when
// its uniform u_i = (bits_i >> 8) / 2^24 is >= p, and kept elements are scaled
// by 1/(1-p). The comparison is done on the integer bits (u_i >= p exactly when
// bits_i >> 8 >= ceil(p * 2^24)), so any device draws the same mask from the
// same (seed, offset). On the CPU the forward keeps the mask as one byte per
// element, so backward is a multiply instead of a second pass of Philox.
#include <cmath>
#include <memory>
#include <vector>

#include "core/philox.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

using Mask = std::vector<uint8_t>;

// out = x * keep * scale, recording keep into mask.
template <class T>
void dropout_forward_cpu(const T* x, T* y, uint8_t* mask, int64_t n, double p, uint64_t seed, uint64_t start) {
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));  // in units of 2^-24
  const T scale = static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const Philox4 r = philox_block(seed, start + blk);
    const int64_t base = blk * 4, lanes = std::min<int64_t>(4, n - base);
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const uint8_t keep = (r.v[lane] >> 8) >= threshold;
      mask[base + lane] = keep;
      y[base + lane] = keep ? x[base + lane] * scale : T(0);
    }
  }
}

template <class T>
void dropout_backward_cpu(const T* g, T* dx, const uint8_t* mask, int64_t n, T scale) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? g[i] * scale : T(0);
}

}  // namespace

Tensor dropout(const Tensor& x_in, double p, Generator& gen) {
  check_defined("dropout", x_in);
  check_float("dropout", x_in);
  TCN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (p == 0.0) return x_in;
  if (x_in.device().is_cuda()) no_cuda_kernel("dropout");
  const int64_t n = x_in.numel();
  const uint64_t seed = gen.seed(), start = gen.reserve(static_cast<uint64_t>(n));
  Tensor x = x_in.detach().contiguous();
  Tensor y = empty(x.shape(), x.options());
  auto mask = std::make_shared<Mask>(n);
  dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    dropout_forward_cpu<T>(x.data<T>(), y.data<T>(), mask->data(), n, p, seed, start);
  });
  if (autograd::needs_grad({x_in}))
    autograd::record("dropout", {x_in}, {y}, [mask, p](const TensorList& g) {
      Tensor gc = g[0].contiguous();
      Tensor dx = empty(gc.shape(), gc.options());
      dispatch_float(gc.dtype(), "dropout backward", [&]<class T>() {
        dropout_backward_cpu<T>(gc.data<T>(), dx.data<T>(), mask->data(), gc.numel(),
                                static_cast<T>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0));
      });
      return TensorList{dx};
    });
  return y;
}

}  // namespace tcn
