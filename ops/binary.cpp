// add, sub, mul, div (and add_relu) with NumPy broadcasting. Backward sums each gradient back
// to its input's shape (sum_to), the inverse of broadcasting.
#include <functional>

#include "cuda/kernels.h"
#include "ops/cpu_map.h"
#include "ops/dispatch.h"
#include "core/math/functors.h"
#include "ops/ops.h"
#include "core/math/simd.h"

namespace tcn {

namespace {

// Contiguous float32 rows of the binary ops and of glu's gradients, compiled
// once per ISA (core/math/simd.h), as the unary ops' are (ops/unary.cpp).
#define TCN_CPU_ROWS2(Name)                                                                             \
  TCN_SIMD_CLONES void rows(const fn::Name& f_in, float* o, const float* a, const float* b, int64_t n) { \
    const fn::Name f = f_in;                                                                            \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);                           \
  }
TCN_BINARY_OPS(TCN_CPU_ROWS2)
TCN_CPU_ROWS2(GluGradA)
#undef TCN_CPU_ROWS2
TCN_SIMD_CLONES void rows(const fn::GluGradB& f_in, float* o, const float* g, const float* a, const float* b,
                          int64_t n) {
  const fn::GluGradB f = f_in;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = f(g[i], a[i], b[i]);
}

// out = f(in...) on the CPU: float32 through the per-ISA rows, float64 inline.
template <class F, class... In>
void cpu_apply(const char* op, const Tensor& out, F f, const In&... in) {
  if (out.dtype() == DType::F32) {
    cpu::cpu_map_rows<float>(out, f, [&f](int64_t n, float* o, const auto*... p) { rows(f, o, p..., n); }, in...);
    return;
  }
  dispatch_float(out.dtype(), op, [&]<class T>() { cpu::cpu_map<T>(out, f, in...); });
}

template <class F>
Tensor binary_forward(const char* op, const Tensor& a, const Tensor& b, F f, cuda::BinaryOp cuda_op) {
  check_defined(op, a);
  check_defined(op, b);
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
  check_float(op, a);
  Tensor out = empty(broadcast_shapes(a.shape(), b.shape(), op), a.options());
  profile::add_bytes(nbytes(a) + nbytes(b) + nbytes(out));
  if (a.device().is_cuda()) {
    TCN_CUDA_OP(op, cuda::binary(cuda_op, out, a, b));
    return out;
  }
  cpu_apply(op, out, f, a, b);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const profile::Op range("add");
  Tensor out = binary_forward("add", a, b, fn::Add{}, cuda::BinaryOp::Add);
  if (autograd::needs_grad({a, b}))
    autograd::record("add", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const TensorList& g) {
      return TensorList{sum_to(g[0], sa), sum_to(g[0], sb)};
    });
  return out;
}

// The tape's sum of two gradients in flight (autograd/tape.h).
Tensor autograd::gradient_sum(const Tensor& a, const Tensor& b) { return add(a, b); }

Tensor sub(const Tensor& a, const Tensor& b) {
  const profile::Op range("sub");
  Tensor out = binary_forward("sub", a, b, fn::Sub{}, cuda::BinaryOp::Sub);
  if (autograd::needs_grad({a, b}))
    autograd::record("sub", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const TensorList& g) {
      return TensorList{sum_to(g[0], sa), sum_to(neg(g[0]), sb)};
    });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const profile::Op range("mul");
  Tensor out = binary_forward("mul", a, b, fn::Mul{}, cuda::BinaryOp::Mul);
  if (autograd::needs_grad({a, b})) {
    // Keep each factor only if the other one needs its gradient.
    Tensor keep_a = b.requires_grad() ? a.detach() : Tensor();
    Tensor keep_b = a.requires_grad() ? b.detach() : Tensor();
    autograd::record("mul", {a, b}, {out}, [keep_a, keep_b, sa = a.shape(), sb = b.shape()](const TensorList& g) {
      return TensorList{keep_b.defined() ? sum_to(mul(g[0], keep_b), sa) : Tensor(),
                        keep_a.defined() ? sum_to(mul(g[0], keep_a), sb) : Tensor()};
    });
  }
  return out;
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  const profile::Op range("add_relu");
  Tensor out = binary_forward("add_relu", a, b, fn::AddRelu{}, cuda::BinaryOp::AddRelu);
  if (autograd::needs_grad({a, b}))
    autograd::record("add_relu", {a, b}, {out},
                     [y = out.detach(), sa = a.shape(), sb = b.shape()](const TensorList& g) {
                       Tensor gs = relu_backward(g[0], y);  // the gradient of a + b, shared by both
                       return TensorList{sum_to(gs, sa), sum_to(gs, sb)};
                     });
  return out;
}

// glu's backward, from the halves a and b of its input: d/da = g sigmoid(b);
// d/db = g a sigmoid(b) (1 - sigmoid(b)).
static TensorList glu_backward(const Tensor& a, const Tensor& b, const TensorList& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  if (g.device().is_cuda()) {  // composed from ops on a GPU
    const Tensor s = sigmoid(b), ga = mul(g, s);
    return {cat({ga, mul(mul(ga, a), 1.0 - s)}, -1)};
  }
  // On the CPU one pass per half, straight into the halves of the gradient.
  Shape shape = a.shape();
  shape.back() *= 2;
  Tensor gx = empty(shape, a.options());
  const int64_t C = a.size(-1);
  profile::add_bytes(7 * nbytes(a));
  cpu_apply("glu", gx.narrow(-1, 0, C), fn::GluGradA{}, g, b);
  cpu_apply("glu", gx.narrow(-1, C, C), fn::GluGradB{}, g, a, b);
  return {gx};
}

// The gated linear unit over the last dim (torch.nn.functional.glu(x, dim=-1)):
// x [..., 2C] split into halves a and b, y = a * sigmoid(b), one pass. It is the
// gate of pytorch-tcn's TemporalBlock (use_gate), over the channels.
Tensor glu(const Tensor& x) {
  const profile::Op range("glu");
  check_defined("glu", x);
  TCN_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "glu: the last dim must have an even size, got shape ", x.shape());
  const int64_t C = x.size(-1) / 2;
  const Tensor a = x.detach().narrow(-1, 0, C), b = x.detach().narrow(-1, C, C);
  Tensor out = binary_forward("glu", a, b, fn::GluProduct{}, cuda::BinaryOp::GluProduct);
  if (autograd::needs_grad({x})) autograd::record("glu", {x}, {out}, std::bind_front(glu_backward, a, b));
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  const profile::Op range("div");
  Tensor out = binary_forward("div", a, b, fn::Div{}, cuda::BinaryOp::Div);
  if (autograd::needs_grad({a, b})) {
    bool need_b = b.requires_grad();
    // d(a/b)/db = -(a/b)/b: keep the output rather than a.
    autograd::record("div", {a, b}, {out},
                     [bd = b.detach(), od = need_b ? out.detach() : Tensor(), sa = a.shape(),
                      sb = b.shape()](const TensorList& g) {
                       Tensor ga = div(g[0], bd);
                       return TensorList{sum_to(ga, sa), od.defined() ? sum_to(neg(mul(ga, od)), sb) : Tensor()};
                     });
  }
  return out;
}

}  // namespace tcn
