// Inverted dropout with Philox masks: element i (row-major) of x is kept when
// uniform u_i >= p, and kept elements are scaled by 1/(1-p). The mask is not
// stored: backward regenerates it from the generator's (seed, offset), so
// dropout costs no memory beyond its output.
#include "core/philox.h"
#include "ops/cpu_map.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// out = in * keep_i * scale over the row-major elements of `in` (contiguous output).
Tensor apply_mask(const Tensor& in, double p, uint64_t seed, uint64_t start) {
  Tensor c = in.contiguous();
  Tensor out = empty(in.shape(), in.options());
  const int64_t n = in.numel();
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  dispatch_float(in.dtype(), "dropout", [&]<class T>() {
    const T* x = c.data<T>();
    T* y = out.data<T>();
    const T s = static_cast<T>(scale);
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t blk = 0; blk < (n + 3) / 4; ++blk) {
      Philox4 r = philox_block(seed, start + blk);
      for (int64_t lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) {
        const int64_t i = blk * 4 + lane;
        y[i] = uint_to_unit_float(r.v[lane]) >= p ? x[i] * s : T(0);
      }
    }
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  check_defined("dropout", x);
  check_float("dropout", x);
  TCN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (p == 0.0) return x;
  if (x.device().is_cuda()) no_cuda_kernel("dropout");
  const uint64_t seed = gen.seed(), start = gen.reserve(static_cast<uint64_t>(x.numel()));
  Tensor y = apply_mask(x.detach(), p, seed, start);
  if (autograd::needs_grad({x}))
    autograd::record("dropout", {x}, {y}, [p, seed, start](const TensorList& g) {
      return TensorList{apply_mask(g[0], p, seed, start)};
    });
  return y;
}

}  // namespace tcn
