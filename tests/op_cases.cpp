// The op test cases, one entry per op and configuration (tests/op_cases.h says
// what each field means; tests/test_ops.cpp runs them in every mode).
//
// Tolerances for CUDA against the CPU: elementwise ops 1e-5 in float32 (CUDA's
// expf, tanhf, logf, powf are within 1-4 ulp, the CPU's libm within 1, and a
// gradient adds a product or two that nvcc may contract) and 1e-12 in float64;
// sums, GEMMs and layers 1e-4 and 1e-10 (cuBLAS's tiles and split-K and
// OpenBLAS's blocks add in different orders, and the error grows with the terms).
#include "op_cases.h"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "cuda_compare.h"
#include "helpers.h"
#include "ops/unary.h"

namespace tcn::test {

namespace {

constexpr double kSum32 = 1e-4, kSum64 = 1e-10;

Input in(Shape shape, uint64_t seed, bool strided = false, double lo = -1, double hi = 1) {
  return Input{.shape = std::move(shape), .seed = seed, .lo = lo, .hi = hi, .strided = strided};
}
Input positive(Shape shape, uint64_t seed, bool strided = false) { return in(std::move(shape), seed, strided, 0.5, 2); }
Input constant(Input i) {
  i.grad = false;
  return i;
}
Input ids(Shape shape, std::vector<int64_t> values) { return Input{.shape = std::move(shape), .ids = std::move(values)}; }
Input made(std::function<Tensor(DType)> make) { return Input{.make = std::move(make)}; }

// Values at least `gap` away from 0: no finite difference straddles relu's kink.
Tensor off_zero(const Shape& shape, uint64_t seed, double gap, DType dt) {
  auto v = rand_tensor(shape, seed).to_vector<double>();
  for (auto& e : v) e = e >= 0 ? e + gap : e - gap;
  return from_vector(v, shape).to(dt);
}

// add_relu's operands: b broadcasts along a's rows; a is moved so that |a + b| >= 0.1.
Tensor add_relu_a(DType dt) {
  auto av = rand_tensor({6, 7}, 48).to_vector<double>();
  const auto bv = rand_tensor({7}, 47).to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) av[i] += av[i] + bv[i % 7] >= 0 ? 0.1 : -0.1;
  return from_vector(av, {6, 7}).to(dt);
}

// relu_dropout_add_relu's operands: x off relu's kink, and res such that no sum relu_dropout(x) + res is within
// 0.1 of 0 for either mask value (kept: x / (1 - 0.4), or 0).
Tensor rdar_x(DType dt) { return off_zero({5, 8}, 50, 0.2, dt); }
Tensor rdar_res(DType dt) {
  const auto xv = rdar_x(DType::F64).to_vector<double>();
  auto rv = rand_tensor({5, 8}, 51).to_vector<double>();
  for (size_t i = 0; i < rv.size(); ++i) {
    const double h = xv[i] > 0 ? xv[i] / 0.6 : 0.0;
    for (double s : {h, 0.0})
      if (std::abs(s + rv[i]) < 0.1) rv[i] += s + rv[i] >= 0 ? 0.2 : -0.2;
  }
  return from_vector(rv, {5, 8}).to(dt);
}

// Distinct values, so max's argmax is stable under the finite-difference step.
Tensor distinct(DType dt) {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = ((i * 7) % 24) * 0.1;
  return from_vector(v, {2, 3, 4}).to(dt);
}

using F = std::function<Tensor(const TensorList&)>;

// A unary op's input: uniform in [-3, 3] (its domain Domain::positive: [0.2, 3]), every
// value at least 0.1 from 0 and from the op's scalar, where the kinks are (relu and its
// kin at 0, minimum at its scalar), so that no finite difference straddles one.
Tensor unary_input(const Shape& shape, uint64_t seed, bool strided, fn::Domain domain, double scalar, DType dt) {
  const bool positive = domain == fn::Domain::positive;
  Shape stored = shape;  // strided: drawn transposed, then viewed back (as rand_tensor does)
  if (strided) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  auto v = rand_tensor(stored, seed, false, positive ? 0.2 : -3.0, 3.0).to_vector<double>();
  for (double& e : v)
    for (double kink : {0.0, scalar})
      if (!positive && std::abs(e - kink) < 0.1) e = kink + (e >= kink ? 0.1 : -0.1);
  Tensor t = from_vector(v, stored).to(dt);
  return strided ? t.transpose(-1, -2) : t;
}

// Two cases for each op of TCN_UNARY_OPS (core/math/op_lists.h): a contiguous [6, 7]
// input and a strided [3, 4, 5] one; an op with a scalar takes 2.5 and -1.5 in turn.
// The first carries the dtype check's message.
template <class Op>
void add_unary_cases(std::vector<OpCase>& cases, uint64_t seed) {
  constexpr bool kHasScalar = !std::is_empty_v<Op>;
  for (const bool strided : {false, true}) {
    const double scalar = kHasScalar ? (strided ? -1.5 : 2.5) : 0.0;
    const Op op = [&] {
      if constexpr (kHasScalar) return Op{scalar};
      else return Op{};
    }();
    const Shape shape = strided ? Shape{3, 4, 5} : Shape{6, 7};
    std::ostringstream name;
    name << Op::name;
    if (kHasScalar) name << " " << scalar;
    name << (strided ? ", [3, 4, 5] strided" : ", [6, 7]");
    OpCase c{.name = name.str(),
             .inputs = {made([=](DType dt) { return unary_input(shape, seed, strided, fn::domain_of<Op>(), scalar, dt); })},
             .f = [op](const TensorList& v) { return unary_op(v[0], op); }};
    if (!strided)
      c.errors = {{[op] { unary_op(zeros({2}, {DType::I64}), op); },
                   std::string(Op::name) + ": expected a float32 or float64 tensor, got int64"}};
    cases.push_back(std::move(c));
  }
}

std::vector<OpCase> unary() {
  std::vector<OpCase> cases;
  uint64_t seed = 200;
#define TCN_UNARY_CASES(Name) add_unary_cases<fn::Name>(cases, seed++);
  TCN_UNARY_OPS(TCN_UNARY_CASES)
#undef TCN_UNARY_CASES
  return cases;
}

// Elementwise ops: the first of each kind carries the kind's error messages.
std::vector<OpCase> elementwise() {
  const Input a = in({3, 4}, 1, true), b = in({4}, 2), c = in({2, 1, 4}, 3), d = positive({3, 1}, 4);
  const Input a3 = in({3, 4, 5}, 5, true), b3 = positive({4, 1}, 6);
  const Input x = in({4, 5}, 7, true), pos = in({4, 5}, 8, true, 0.2, 3.0);
  return {
      {.name = "add, [3, 4] strided + [4]", .inputs = {a, b}, .f = [](auto& v) { return add(v[0], v[1]); },
       .errors = {{[] { add(zeros({2, 3}), zeros({4})); }, "add: shapes [2, 3] and [4] cannot be broadcast together"},
                  {[] { add(zeros({2}), zeros({2}, {DType::F64})); }, "add: dtype mismatch, float32 [2] vs float64 [2]"},
                  {[] { add(Tensor(), zeros({2, 3})); }, "add: input is an undefined tensor"}}},
      {.name = "add, [3, 4, 5] strided + [4, 1]", .inputs = {a3, b3}, .f = [](auto& v) { return add(v[0], v[1]); }},
      {.name = "sub, [2, 1, 4] - [3, 4] strided", .inputs = {a, b, c}, .f = [](auto& v) { return sub(v[2], v[0]); }},
      {.name = "sub, [3, 4, 5] strided - [4, 1]", .inputs = {a3, b3}, .f = [](auto& v) { return sub(v[0], v[1]); }},
      {.name = "mul, [3, 4] strided * [2, 1, 4]", .inputs = {a, b, c}, .f = [](auto& v) { return mul(v[0], v[2]); },
       .errors = {{[] { mul(zeros({2, 3}), zeros({3, 2})); }, "mul: shapes [2, 3] and [3, 2] cannot be broadcast"}}},
      {.name = "mul, [3, 4, 5] strided * [4, 1]", .inputs = {a3, b3}, .f = [](auto& v) { return mul(v[0], v[1]); }},
      {.name = "mul, one side constant", .inputs = {in({3, 4}, 5), constant(in({3, 4}, 6))},
       .f = [](auto& v) { return add(mul(v[0], v[1]), mul(v[1], v[0])); }},
      {.name = "div, [3, 4] strided / [3, 1]", .inputs = {a, d}, .f = [](auto& v) { return div(v[0], v[1]); }},
      {.name = "div, [2, 1, 4] / [3, 1]", .inputs = {c, d}, .f = [](auto& v) { return div(v[0], v[1]); }},
      {.name = "div, [3, 4, 5] strided / [4, 1]", .inputs = {a3, b3}, .f = [](auto& v) { return div(v[0], v[1]); }},
      {.name = "add_relu, [6, 7] + [7], off the kink", .inputs = {made(add_relu_a), in({7}, 47)},
       .f = [](auto& v) { return add_relu(v[0], v[1]); },
       .errors = {{[] { add_relu(zeros({2, 3}), zeros({4})); },
                   "add_relu: shapes [2, 3] and [4] cannot be broadcast together"}}},
      {.name = "add_relu, [3, 4, 5] strided + [4, 1]", .inputs = {a3, b3},
       .f = [](auto& v) { return add_relu(v[0], v[1]); }, .gradcheck = false},
      {.name = "glu over the last dim", .inputs = {in({3, 4, 6}, 65, true)}, .f = [](auto& v) { return glu(v[0]); },
       .errors = {{[] { glu(zeros({2, 3})); }, "glu: the last dim must have an even size, got shape [2, 3]"}}},
      {.name = "glu of a narrowed input", .inputs = {in({2, 5, 9}, 66)},
       .f = [](auto& v) { return glu(v[0].narrow(-1, 1, 8)); }},
      {.name = "3 - x / 2", .inputs = {x}, .f = [](auto& v) { return 3.0 - v[0] / 2.0; }},
      {.name = "2 / x", .inputs = {pos}, .f = [](auto& v) { return 2.0 / v[0]; }},
  };
}

std::vector<OpCase> reductions_and_gemms() {
  const Input x = in({2, 3, 4}, 11, true), big = in({6, 7, 8}, 3, true);
  const F sum_all = [](auto& v) { return sum(v[0]); };
  return {
      {.name = "sum", .inputs = {x}, .f = sum_all, .cuda_f32 = kSum32, .cuda_f64 = kSum64,
       .errors = {{[] { sum(zeros({2, 3}), {2}); }, "sum: dim 2 is out of range for a tensor of rank 2"},
                  {[] { sum(scalar_tensor(2.0), {0}); }, "sum: a 0-dim tensor has no dim 0"}}},
      {.name = "sum over dim 1", .inputs = {x}, .f = [](auto& v) { return sum(v[0], {1}); }, .cuda_f32 = kSum32,
       .cuda_f64 = kSum64},
      {.name = "sum over dims 0, 2, kept", .inputs = {x}, .f = [](auto& v) { return sum(v[0], {0, 2}, true); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "sum over dim -1", .inputs = {x}, .f = [](auto& v) { return sum(v[0], {-1}); }, .cuda_f32 = kSum32,
       .cuda_f64 = kSum64},
      {.name = "sum over dims 0, 1 of [6, 7, 8]", .inputs = {big}, .f = [](auto& v) { return sum(v[0], {0, 1}); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "sum over dim 2 of [6, 7, 8], kept", .inputs = {big}, .f = [](auto& v) { return sum(v[0], {2}, true); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "mean over dims 0, 1", .inputs = {x}, .f = [](auto& v) { return mean(v[0], {0, 1}); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "mean", .inputs = {big}, .f = [](auto& v) { return mean(v[0]); }, .cuda_f32 = kSum32,
       .cuda_f64 = kSum64},
      {.name = "max along dim 1", .inputs = {made(distinct)}, .f = [](auto& v) { return max(v[0], 1).first; }},
      {.name = "max along dim -1, kept", .inputs = {made(distinct)},
       .f = [](auto& v) { return max(v[0], -1, true).first; }},
      {.name = "max along dim 1 of [6, 7, 8]", .inputs = {big}, .f = [](auto& v) { return max(v[0], 1).first; },
       .gradcheck = false},  // random values: two may be closer than the finite-difference step
      {.name = "sum_to [3, 1]", .inputs = {in({2, 3, 4}, 12)}, .f = [](auto& v) { return sum_to(v[0], {3, 1}); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "sum_to [4]", .inputs = {in({2, 3, 4}, 12)}, .f = [](auto& v) { return sum_to(v[0], {4}); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "mm", .inputs = {in({3, 5}, 13), in({5, 2}, 15, true)}, .f = [](auto& v) { return mm(v[0], v[1]); },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded,
       .errors = {{[] { mm(zeros({2, 3}), zeros({2, 3})); }, "mm: inner dimensions differ, [2, 3] @ [2, 3]"},
                  {[] { mm(zeros({2}), zeros({2, 3})); }, "mm: expected two matrices, got shapes [2] and [2, 3]"},
                  {[] { mm(zeros({2, 2}), zeros({2, 2}, {DType::F64})); }, "mm: dtype mismatch"}}},
      {.name = "mm, a transposed left operand", .inputs = {in({3, 5}, 14, true), in({5, 2}, 15, true)},
       .f = [](auto& v) { return mm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "mm [5, 9] strided @ [9, 3]", .inputs = {in({5, 9}, 4, true), in({9, 3}, 5)},
       .f = [](auto& v) { return mm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "bmm", .inputs = {in({2, 3, 4}, 16), in({2, 4, 5}, 17, true)},
       .f = [](auto& v) { return bmm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded,
       .errors = {{[] { bmm(zeros({2, 2, 3}), zeros({3, 3, 2})); }, "bmm: shapes do not match"}}},
      {.name = "matmul [2, 3, 4] @ [4, 6]", .inputs = {in({2, 3, 4}, 16), in({4, 6}, 18)},
       .f = [](auto& v) { return matmul(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded,
       .errors = {{[] { matmul(zeros({2, 3}), zeros({4, 2})); }, "matmul: inner dimensions differ"}}},
      {.name = "matmul, the batch broadcast", .inputs = {in({2, 3, 4}, 16), in({4, 5}, 19)},
       .f = [](auto& v) { return matmul(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "matmul [6, 7, 8] strided @ [8, 4]", .inputs = {big, in({8, 4}, 6)},
       .f = [](auto& v) { return matmul(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "a composed expression with fan-out", .inputs = {in({3, 4}, 28), in({4, 4}, 29, true)},
       .f =
           [](auto& v) {
             Tensor h = tanh(matmul(v[0], v[1]));
             return add(mul(h, v[0]), sigmoid(matmul(h, v[1])));  // x and w each used twice
           },
       .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Skip},
  };
}

std::vector<OpCase> data_movement() {
  const Input x = in({2, 3, 4}, 24, true), c = in({2, 3, 4}, 25);
  const Input idx = ids({2, 3}, {4, 0, 4, 2, 4, 1});
  return {
      {.name = "gather_rows, duplicate indices", .inputs = {in({5, 3}, 20), idx},
       .f = [](auto& v) { return gather_rows(v[0], v[1]); },
       .errors = {{[] { gather_rows(zeros({3, 2}), zeros({2})); }, "gather_rows: indices must be int64, got float32"},
                  {[] { gather_rows(zeros({3, 2}), from_vector<int64_t>({0, 3}, {2})); },
                   "gather_rows: index 3 at position 1 is out of range for 3 rows"},
                  {[] { gather_rows(zeros({3, 2}), from_vector<int64_t>({-1}, {1})); }, "index -1"}}},
      {.name = "gather_rows [7, 4]", .inputs = {in({7, 4}, 10), ids({2, 3}, {6, 0, 6, 2, 6, 1})},
       .f = [](auto& v) { return gather_rows(v[0], v[1]); }},
      {.name = "scatter_add_rows, duplicate indices", .inputs = {in({2, 3, 3}, 21), idx},
       .f = [](auto& v) { return scatter_add_rows(v[0], v[1], 6); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "pad dim 1", .inputs = {x}, .f = [](auto& v) { return pad(v[0], 1, 2, 1); },
       .errors = {{[] { pad(zeros({2, 3}), 0, -1, 0); }, "pad: negative padding"}}},
      {.name = "pad dim -1 with 1.5", .inputs = {x}, .f = [](auto& v) { return pad(v[0], -1, 0, 3, 1.5); }},
      {.name = "pad [6, 7, 8] strided", .inputs = {in({6, 7, 8}, 3, true)},
       .f = [](auto& v) { return pad(v[0], 1, 2, 1); }},
      {.name = "cat", .inputs = {x, in({2, 2, 4}, 23)}, .f = [](auto& v) { return cat({v[0], v[1], v[0]}, 1); },
       .errors = {{[] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }, "cat: tensor 1 has shape [2, 4]"},
                  {[] { cat({scalar_tensor(2.0), scalar_tensor(2.0)}, 0); }, "cat: a 0-dim tensor has no dim 0"}}},
      {.name = "reshape (copies a strided input)", .inputs = {x}, .f = [](auto& v) { return v[0].reshape({4, 6}); }},
      {.name = "view", .inputs = {c}, .f = [](auto& v) { return v[0].view({6, -1}); }},
      {.name = "transpose", .inputs = {x}, .f = [](auto& v) { return v[0].transpose(0, 2); }},
      {.name = "transpose, made contiguous", .inputs = {in({6, 7, 8}, 3, true)},
       .f = [](auto& v) { return v[0].transpose(0, 2).contiguous(); }},
      {.name = "permute", .inputs = {x}, .f = [](auto& v) { return v[0].permute({1, 2, 0}); }},
      {.name = "narrow", .inputs = {x}, .f = [](auto& v) { return v[0].narrow(2, 1, 2); }},
      {.name = "narrow, squeeze", .inputs = {x}, .f = [](auto& v) { return v[0].narrow(1, 2, 1).squeeze(1); }},
      {.name = "unsqueeze, expand", .inputs = {x}, .f = [](auto& v) { return v[0].unsqueeze(1).expand({2, 5, 3, 4}); }},
      {.name = "expand", .inputs = {in({3, 1}, 26)}, .f = [](auto& v) { return v[0].expand({2, 3, 4}); }},
      {.name = "contiguous", .inputs = {in({3, 4}, 27, true)}, .f = [](auto& v) { return v[0].contiguous(); }},
      {.name = "clone", .inputs = {in({3, 4}, 27, true)}, .f = [](auto& v) { return clone(v[0]); }},
      // float64 -> float32 -> float64 loses precision: float32-sized tolerances, float64 inputs only.
      {.name = "dtype round trip through float32", .inputs = {in({3, 4}, 27, true)},
       .f = [](auto& v) { return v[0].to(DType::F32).to(DType::F64); }, .eps = 1e-3, .atol = 1e-3, .rtol = 1e-3,
       .cuda_f32 = 0, .cuda_f64 = 1e-6},
  };
}

std::vector<OpCase> layers() {
  const Input x = in({2, 9, 3}, 30, true), w = in({4, 3, 3}, 31), b = in({4}, 32);  // [B, T, Cin], [Cout, Cin, K]
  const Input xl = in({3, 17, 5}, 7, true), wl = in({6, 5, 3}, 8), bl = in({6}, 9);
  const auto conv = [](int64_t dilation, int64_t left) {
    return [=](const TensorList& v) { return conv1d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), dilation, left); };
  };
  const auto winograd = [](F f) {  // f with --conv_impl winograd
    return [=](const TensorList& v) {
      const Backends on(conv_on(ConvImpl::Winograd));
      return f(v);
    };
  };
  return {
      {.name = "conv1d causal, dilation 1", .inputs = {x, w, b}, .f = conv(1, 2), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "conv1d causal, dilation 2", .inputs = {x, w, b}, .f = conv(2, 4), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "conv1d, taps beyond T", .inputs = {x, w, b}, .f = conv(4, 8), .cuda_f32 = kSum32, .cuda_f64 = kSum64,
       .bf16 = Bf16::Rounded},
      {.name = "conv1d 'same' padding, no bias", .inputs = {x, w}, .f = conv(2, 2), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "conv1d 1x1", .inputs = {x, in({5, 3, 1}, 33), in({5}, 34)}, .f = conv(1, 0), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      // A frozen weight: the bias gradient (a row of the packed weight gradient) is still computed.
      {.name = "conv1d, a frozen weight", .inputs = {x, constant(w), b},
       .f = [](auto& v) { return conv1d(v[0], v[1].detach(), v[2], 2, 4); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64,
       .bf16 = Bf16::Rounded},
      {.name = "conv1d [3, 17, 5], causal dilation 2", .inputs = {xl, wl, bl}, .f = conv(2, 4), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "conv1d [3, 17, 5], dilation 1, 'same'", .inputs = {xl, wl, bl}, .f = conv(1, 1), .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      {.name = "conv1d 1x1, the weight a strided view", .inputs = {xl, in({5, 6, 1}, 22), bl},
       .f = [](auto& v) { return conv1d(v[0], v[1].permute({1, 0, 2}), v[2], 1, 0); }, .cuda_f32 = kSum32,
       .cuda_f64 = kSum64, .bf16 = Bf16::Rounded},
      // The Winograd path (CPU only: no CUDA mode; its bf16 rounds the transformed operands, not the inputs).
      {.name = "conv1d winograd, causal dilation 2", .inputs = {xl, wl, bl}, .f = winograd(conv(2, 4)), .cuda_f32 = 0,
       .cuda_f64 = 0, .bf16 = Bf16::Skip},
      {.name = "conv1d winograd, dilation 1, 'same', no bias", .inputs = {xl, wl}, .f = winograd(conv(1, 1)),
       .cuda_f32 = 0, .cuda_f64 = 0, .bf16 = Bf16::Skip},
      {.name = "conv1d winograd, K 2, dilation 3, taps beyond T", .inputs = {x, in({4, 3, 2}, 36), b},
       .f = winograd(conv(3, 3)), .cuda_f32 = 0, .cuda_f64 = 0, .bf16 = Bf16::Skip},
      {.name = "cross_entropy on a narrowed window", .inputs = {in({2, 5, 7}, 35, false, -3, 3), ids({2, 3}, {0, 6, 3, 3, 1, 2})},
       .f = [](auto& v) { return cross_entropy(v[0].narrow(1, 2, 3), v[1]); }, .cuda_f32 = kSum32,
       .cuda_f64 = kSum64},
      {.name = "cross_entropy [2, 5, 9]",
       .inputs = {in({2, 5, 9}, 11, false, -3, 3), ids({2, 5}, {0, 8, 3, 3, 1, 2, 4, 5, 6, 7})},
       .f = [](auto& v) { return cross_entropy(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "weight_norm", .inputs = {in({5, 3, 2}, 47), positive({5, 1, 1}, 48)},
       .f = [](auto& v) { return weight_norm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64,
       .errors = {{[] { weight_norm(zeros({5, 3, 2}), zeros({5})); },
                   "weight_norm: g [5] must be [5, 1, ...] for v [5, 3, 2]"}}},
      {.name = "layer_norm over channels, affine", .inputs = {in({2, 5, 6}, 70, true), in({6}, 71), in({6}, 72)},
       .f = [](auto& v) { return layer_norm(v[0], v[1], v[2]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64,
       .errors = {{[] { layer_norm(zeros({2, 3}), zeros({2}), Tensor()); },
                   "layer_norm: gamma must be [3] (the last dim of [2, 3]), got [2]"},
                  {[] { layer_norm(zeros({2, 3}), Tensor(), zeros({3}, {DType::F64})); }, "layer_norm: dtype mismatch"},
                  {[] { layer_norm(scalar_tensor(1.0), Tensor(), Tensor()); }, "layer_norm: expected a tensor of at least one dim"}}},
      {.name = "layer_norm, no affine, eps 0.1", .inputs = {in({7, 9}, 73)},
       .f = [](auto& v) { return layer_norm(v[0], Tensor(), Tensor(), 0.1); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "layer_norm, gamma only, rows longer than a block", .inputs = {in({3, 300}, 74), in({300}, 75)},
       .f = [](auto& v) { return layer_norm(v[0], v[1], Tensor()); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "layer_norm, a constant input", .inputs = {constant(in({4, 6}, 76)), in({6}, 77), in({6}, 78)},
       .f = [](auto& v) { return layer_norm(v[0], v[1], v[2]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "weight_norm of a strided view", .inputs = {in({4, 6}, 50, true), positive({4, 1}, 51)},
       .f = [](auto& v) { return weight_norm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      {.name = "weight_norm, rows longer than a block", .inputs = {in({3, 700}, 20, true), positive({3, 1}, 21)},
       .f = [](auto& v) { return weight_norm(v[0], v[1]); }, .cuda_f32 = kSum32, .cuda_f64 = kSum64},
      // A generator made inside: the same mask at every evaluation, and on both devices (the CUDA kernel draws
      // the CPU's Philox stream).
      {.name = "dropout 0.3", .inputs = {in({4, 6}, 36, true)},
       .f =
           [](auto& v) {
             Generator gen(77);
             return dropout(v[0], 0.3, gen);
           },
       .cuda_f32 = 1e-6},
      {.name = "relu_dropout 0.4", .inputs = {made([](DType dt) { return off_zero({5, 8}, 39, 0.1, dt); })},
       .f =
           [](auto& v) {
             Generator gen(78);
             return relu_dropout(v[0], 0.4, gen);
           },
       .cuda_f32 = 1e-6},
      {.name = "relu_dropout_add_relu 0.4", .inputs = {made(rdar_x), made(rdar_res)},
       .f =
           [](auto& v) {
             Generator gen(79);
             return relu_dropout_add_relu(v[0], v[1], 0.4, gen);
           },
       .cuda_f32 = 1e-6,
       .errors = {{[] { relu_dropout_add_relu(zeros({2, 3}), zeros({3, 2}), 0.1); },
                   "relu_dropout_add_relu: the residual's shape [3, 2] differs from the input's [2, 3]"},
                  {[] { relu_dropout_add_relu(zeros({2, 3}), zeros({2, 3}), 1.5); },
                   "relu_dropout_add_relu: probability must be in [0, 1], got 1.5"},
                  {[] { relu_dropout_add_relu(zeros({2}), zeros({2}, {DType::F64}), 0.1); },
                   "relu_dropout_add_relu: dtype mismatch, float32 [2] vs float64 [2]"}}},
      {.name = "lstm_cell, both outputs", .inputs = {in({3, 8}, 37, false, -2, 2), in({3, 2}, 38)},
       .f =
           [](auto& v) {
             auto [h, cn] = lstm_cell(v[0], v[1]);
             return add(h, mul(cn, 0.7));
           },
       .cuda_f32 = 0, .cuda_f64 = 0},  // the CPU's LSTM oracle: CUDA runs the whole layer (lstm_layer)
      {.name = "lstm_cell, the cell state", .inputs = {in({3, 8}, 37, false, -2, 2), in({3, 2}, 38)},
       .f = [](auto& v) { return lstm_cell(v[0], v[1]).second; }, .cuda_f32 = 0, .cuda_f64 = 0},
      {.name = "lstm_layer", .inputs = {in({3, 5, 16}, 42), in({16, 4}, 43), in({3, 4}, 44), in({3, 4}, 45)},
       .f =
           [](auto& v) {
             auto [o, h, c] = lstm_layer(v[0], v[1], v[2], v[3]);
             return add(o, mul(add(h, c).unsqueeze(1), 0.5));
           },
       // Its recurrent GEMMs round each step's state, not only the inputs: tests/test_autocast.cpp checks it.
       .cuda_f32 = kSum32, .cuda_f64 = kSum64, .bf16 = Bf16::Skip},
  };
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> all = [] {
    std::vector<OpCase> v;
    for (auto part : {elementwise, unary, reductions_and_gemms, data_movement, layers}) {
      auto p = part();
      v.insert(v.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
    }
    return v;
  }();
  return all;
}

TensorList make_inputs(const OpCase& c, DType dtype) {
  TensorList out;
  for (const Input& i : c.inputs) {
    if (i.make) out.push_back(i.make(dtype));
    else if (!i.ids.empty()) out.push_back(from_vector<int64_t>(i.ids, i.shape));
    else out.push_back(rand_tensor(i.shape, i.seed, i.strided, i.lo, i.hi, dtype));
  }
  return out;
}

}  // namespace tcn::test
