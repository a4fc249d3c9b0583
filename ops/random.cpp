// Random fills from the Philox stream of a Generator (core/philox.h): element
// i of a request of n uniforms is lane i % 4 of block start + i / 4. Normals
// use two uniforms each (Box-Muller), element i taking lanes 2(i%2), 2(i%2)+1
// of block start + i / 2. Values are produced in row-major order, so a tensor
// gets the same values on any device and for any strides.
#include <cmath>

#include "core/philox.h"
#include "core/step_graph.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace tcn {

namespace {

// Fills a contiguous CPU buffer of n values with f(block) for each Philox block.
template <class T, class PerBlock>
Tensor generate(const Tensor& like, int64_t n, PerBlock per_block) {
  Tensor buf = empty(like.shape(), {like.dtype(), Device::cpu()});
  T* p = buf.data<T>();
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) p[i] = per_block(i);
  return buf;
}

void check_random(const char* op, const Tensor& x) {
  check_defined(op, x);
  check_float(op, x);
  TCN_CHECK(!(x.requires_grad() && autograd::grad_enabled()), op,
            ": in-place fill of a tensor that requires grad; run it under autograd::NoGrad");
}

}  // namespace

void uniform_(const Tensor& x, double lo, double hi, Generator& gen) {
  const profile::Op range("uniform_");
  check_random("uniform_", x);
  const int64_t n = x.numel();
  const uint64_t seed = gen.seed(), start = gen.reserve(static_cast<uint64_t>(n));
  Tensor values = dispatch_float(x.dtype(), "uniform_", [&]<class T>() {
    return generate<T>(x, n, [&](int64_t i) {
      uint32_t bits = philox_block(seed, start + i / 4).v[i % 4];
      double u = std::is_same_v<T, float> ? uint_to_unit_float(bits) : uint_to_unit_double(bits);
      return static_cast<T>(lo + (hi - lo) * u);
    });
  });
  copy_(x, values);
}

void normal_(const Tensor& x, double mean, double std, Generator& gen) {
  const profile::Op range("normal_");
  check_random("normal_", x);
  const int64_t n = x.numel();
  const uint64_t seed = gen.seed(), start = gen.reserve(2 * static_cast<uint64_t>(n));
  Tensor values = dispatch_float(x.dtype(), "normal_", [&]<class T>() {
    return generate<T>(x, n, [&](int64_t i) {
      Philox4 r = philox_block(seed, start + i / 2);
      int lane = 2 * (i % 2);
      double u1 = 1.0 - uint_to_unit_double(r.v[lane]);  // (0, 1]: log is finite
      double u2 = uint_to_unit_double(r.v[lane + 1]);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      return static_cast<T>(mean + std * z);
    });
  });
  copy_(x, values);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator& gen) {
  Tensor t = empty(shape, opts);
  uniform_(t, 0.0, 1.0, gen);
  return t;
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator& gen) {
  Tensor t = empty(shape, opts);
  normal_(t, 0.0, 1.0, gen);
  return t;
}

// The step graph's device arithmetic on its Philox bases (core/step_graph.h):
// ops, so defined here.
void StepGraph::advance_bases(const Tensor& slots, const Tensor& incr) { add_(slots, incr); }

void StepGraph::set_increments(const Tensor& incr, const std::vector<double>& values) {
  copy_(incr, from_vector(values, {static_cast<int64_t>(values.size())}).to(incr.device()));
}

void StepGraph::set_base(const Tensor& slot, double value) { fill_(slot, value); }

}  // namespace tcn
