// Elementwise ops of one tensor (and a scalar). The math of each lives in
// core/math/functors.h; this file is the one generic forward + backward around it.
#include <type_traits>

#include "cuda/kernels.h"
#include "ops/cpu_map.h"
#include "ops/dispatch.h"
#include "core/math/functors.h"
#include "ops/ops.h"
#include "ops/unary.h"
#include "core/math/simd.h"

namespace tcn {

namespace {

// Which CUDA kernel computes an op (core/math/op_lists.h), and its scalar parameter.
#define TCN_CUDA_OP_OF(Name) \
  constexpr cuda::UnaryOp cuda_op(fn::Name) { return cuda::UnaryOp::Name; }
TCN_UNARY_OPS(TCN_CUDA_OP_OF)
#undef TCN_CUDA_OP_OF
template <class Op>
double cuda_param(const Op& op) {
  static_assert(std::is_empty_v<Op> || requires { op.p; } || requires { op.s; },
                "a unary functor's scalar must be named p or s: the CUDA kernels are given it by that name");
  if constexpr (requires { op.p; }) return op.p;
  else if constexpr (requires { op.s; }) return op.s;
  else return 0.0;
}

// Contiguous float32 rows of every op, compiled once per ISA (core/math/simd.h): the
// AVX-512 or AVX2 copy where the CPU has it, instead of the generic build's
// SSE2. The same functor as every other path, so the values are the same but
// for FMA contraction in the last bit.
#define TCN_CPU_ROWS(Name)                                                                             \
  TCN_SIMD_CLONES void fwd_rows(const fn::Name& op_in, float* o, const float* x, int64_t n) {        \
    const fn::Name op = op_in;                                                                         \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) o[i] = op.fwd<float>(x[i]);                    \
  }                                                                                                    \
  TCN_SIMD_CLONES void bwd_rows(const fn::Name& op_in, float* gx, const float* g, const float* x,    \
                                const float* y, int64_t n) {                                           \
    const fn::Name op = op_in;                                                                         \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) gx[i] = op.bwd<float>(g[i], x[i], y[i]);       \
  }
TCN_UNARY_OPS(TCN_CPU_ROWS)
#undef TCN_CPU_ROWS

template <class Op>
Tensor unary_backward(const Op& op, const Tensor& g, const Tensor& x, const Tensor& y) {
  Tensor gx = empty(g.shape(), g.options());
  profile::add_bytes(nbytes(g) * (2 + (x.defined() ? 1 : 0) + (y.defined() ? 1 : 0)));
  if (g.device().is_cuda()) {
    TCN_CUDA_OP(Op::name, cuda::unary_backward(cuda_op(op), cuda_param(op), gx, g, x, y));
    return gx;
  }
  // Missing x or y (not kept because bwd ignores it) are stood in for by g.
  const Tensor& xs = x.defined() ? x : g;
  const Tensor& ys = y.defined() ? y : g;
  if (g.dtype() == DType::F32) {  // contiguous rows through the per-ISA copy
    cpu::cpu_map_rows<float>(
        gx, [op](float gi, float xi, float yi) TCN_LAMBDA_INLINE { return op.template bwd<float>(gi, xi, yi); },
        [&op](int64_t n, float* o, const float* gp, const float* xp, const float* yp) { bwd_rows(op, o, gp, xp, yp, n); },
        g, xs, ys);
    return gx;
  }
  dispatch_float(g.dtype(), Op::name, [&]<class T>() {
    cpu::cpu_map<T>(gx, [op](T gi, T xi, T yi) TCN_LAMBDA_INLINE { return op.template bwd<T>(gi, xi, yi); }, g, xs, ys);
  });
  return gx;
}

template <class Op>
Tensor unary(const Tensor& x, Op op) {
  const profile::Op range(Op::name);
  check_defined(Op::name, x);
  check_float(Op::name, x);
  Tensor y = empty(x.shape(), x.options());
  profile::add_bytes(2 * nbytes(x));
  if (x.device().is_cuda()) {
    TCN_CUDA_OP(Op::name, cuda::unary_forward(cuda_op(op), cuda_param(op), y, x));
  } else if (x.dtype() == DType::F32) {  // contiguous rows through the per-ISA copy
    cpu::cpu_map_rows<float>(
        y, [op](float xi) TCN_LAMBDA_INLINE { return op.template fwd<float>(xi); },
        [&op](int64_t n, float* o, const float* xp) { fwd_rows(op, o, xp, n); }, x);
  } else {
    dispatch_float(x.dtype(), Op::name, [&]<class T>() {
      cpu::cpu_map<T>(y, [op](T xi) TCN_LAMBDA_INLINE { return op.template fwd<T>(xi); }, x);
    });
  }
  if (autograd::needs_grad({x})) {
    Tensor keep_x = Op::kUsesX ? x.detach() : Tensor();
    Tensor keep_y = Op::kUsesY ? y.detach() : Tensor();
    autograd::record(Op::name, {x}, {y}, [op, keep_x, keep_y](const TensorList& g) {
      return TensorList{unary_backward(op, g[0], keep_x, keep_y)};
    });
  }
  return y;
}

}  // namespace

#define TCN_UNARY_OP_DEF(Name) \
  Tensor unary_op(const Tensor& x, const fn::Name& op) { return unary(x, op); }
TCN_UNARY_OPS(TCN_UNARY_OP_DEF)
#undef TCN_UNARY_OP_DEF

Tensor neg(const Tensor& x) { return unary(x, fn::Neg{}); }
Tensor relu(const Tensor& x) { return unary(x, fn::Relu{}); }
Tensor relu_backward(const Tensor& g, const Tensor& y) { return unary_backward(fn::Relu{}, g, Tensor(), y); }
Tensor tanh(const Tensor& x) { return unary(x, fn::Tanh{}); }
Tensor sigmoid(const Tensor& x) { return unary(x, fn::Sigmoid{}); }
Tensor exp(const Tensor& x) { return unary(x, fn::Exp{}); }
Tensor log(const Tensor& x) { return unary(x, fn::Log{}); }
Tensor sqrt(const Tensor& x) { return unary(x, fn::Sqrt{}); }
Tensor pow(const Tensor& x, double p) { return unary(x, fn::Pow{p}); }
Tensor add(const Tensor& x, double s) { return unary(x, fn::AddScalar{s}); }
Tensor mul(const Tensor& x, double s) { return unary(x, fn::MulScalar{s}); }
Tensor minimum(const Tensor& x, double s) { return unary(x, fn::Minimum{s}); }
Tensor leaky_relu(const Tensor& x, double negative_slope) { return unary(x, fn::LeakyRelu{negative_slope}); }
Tensor elu(const Tensor& x, double alpha) { return unary(x, fn::Elu{alpha}); }
Tensor selu(const Tensor& x) { return unary(x, fn::Selu{}); }
Tensor gelu(const Tensor& x) { return unary(x, fn::Gelu{}); }

}  // namespace tcn
