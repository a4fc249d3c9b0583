// Every op case of the registry (tests/op_cases.cpp) in every mode: float64
// gradcheck, CUDA against the CPU, bf16 autocast, error messages. A case that
// fails says its name; run one mode with -tc="ops: gradcheck*" and so on.
#include <cmath>
#include <set>

#include "cuda_compare.h"
#include "helpers.h"
#include "op_cases.h"
#include "core/autocast.h"
#include "core/math/functors.h"
#include "core/math/op_lists.h"

using namespace tcn;
using tcn::test::Bf16;
using tcn::test::OpCase;
using tcn::test::op_cases;

namespace {

// fwd(NaN) of a unary functor, its scalar (if it takes one) at 0.5: NaN in float and double.
template <class F>
void check_nan_propagates(F f, const char* name) {
  if constexpr (requires { f.p; }) f.p = 0.5;
  if constexpr (requires { f.s; }) f.s = 0.5;
  INFO("fn::", name);
  CHECK(std::isnan(f.template fwd<float>(NAN)));
  CHECK(std::isnan(f.template fwd<double>(NAN)));
}

// The inputs that a mode differentiates: floating ones not marked constant.
TensorList leaves(const OpCase& c, DType dtype) {
  TensorList v = test::make_inputs(c, dtype);
  for (size_t i = 0; i < v.size(); ++i)
    if (c.inputs[i].grad && is_floating(v[i].dtype())) v[i].requires_grad_(true);
  return v;
}

}  // namespace

TEST_SUITE("ops") {

TEST_CASE("ops: the registry names each case once, with inputs") {
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    INFO(c.name);
    CHECK(names.insert(c.name).second);
    CHECK(!c.inputs.empty());
    CHECK(c.f);
  }
  CHECK(op_cases().size() >= 80);
}

TEST_CASE("ops: gradcheck, finite differences in float64") {
  int run = 0;
  for (const OpCase& c : op_cases()) {
    if (!c.gradcheck) continue;
    INFO(c.name);
    test::check_gradients(c.f, leaves(c, DType::F64), c.eps, c.atol, c.rtol);
    ++run;
  }
  MESSAGE(run, " cases gradchecked");
}

TEST_CASE("ops: CUDA against the CPU, float32 and float64, values and gradients" * doctest::skip(!cuda::is_available())) {
  for (const OpCase& c : op_cases()) {
    for (auto [dtype, rtol] : {std::pair{DType::F32, c.cuda_f32}, std::pair{DType::F64, c.cuda_f64}}) {
      if (rtol == 0) continue;
      const std::string what = c.name + " in " + dtype_name(dtype);
      INFO(what);
      std::vector<bool> constant;
      for (const test::Input& i : c.inputs) constant.push_back(!i.grad);
      test::compare(c.f, test::make_inputs(c, dtype), rtol, 1e-7, constant);
    }
  }
}

TEST_CASE("ops: bf16 autocast rounds the operands of GEMM-class ops and leaves every other op alone") {
  const auto rounded = [](const Tensor& t) { return is_floating(t.dtype()) ? t.to(DType::BF16).to(DType::F32) : t; };
  for (const OpCase& c : op_cases()) {
    if (c.bf16 == Bf16::Skip) continue;
    INFO(c.name);
    const TensorList v = test::make_inputs(c, DType::F32);
    const Tensor fp32 = c.f(v);
    Tensor got;
    {
      Autocast bf16(Precision::BF16);
      got = c.f(v);
    }
    REQUIRE(got.dtype() == fp32.dtype());
    if (c.bf16 == Bf16::Unaffected) {
      CHECK(got.to_vector<double>() == fp32.to_vector<double>());
    } else {
      TensorList r;
      for (const Tensor& t : v) r.push_back(rounded(t));
      // bf16 products are exact in float32, so only the order of the float32 sums may differ.
      CHECK(test::rel_err(got, c.f(r)) < 1e-6);
      CHECK(test::rel_err(got, fp32) > 1e-5);  // the bf16 path really ran
    }
  }
}

TEST_CASE("ops: bad inputs give errors that name the op and the problem") {
  int run = 0;
  for (const OpCase& c : op_cases()) {
    for (const test::OpError& e : c.errors) {
      INFO(c.name, ": expected \"", e.message, "\"");
      CHECK_THROWS_WITH_AS(e.call(), doctest::Contains(e.message.c_str()), tcn::Error);
      ++run;
    }
  }
  CHECK(run >= 28);  // the messages listed in op_cases.cpp: none may be lost
}

TEST_CASE("ops: NaN in, NaN out, as in PyTorch: every unary functor, the activations and the fused tails") {
  // The math of every unary op, CPU and CUDA alike (core/math/op_lists.h names them all).
#define TCN_CHECK_NAN(Name) check_nan_propagates(fn::Name{}, #Name);
  TCN_UNARY_OPS(TCN_CHECK_NAN)
#undef TCN_CHECK_NAN
  // The ops on each device, fused kernels included: positions 0 and 3 are NaN, and must stay NaN
  // (dropout too: a dropped NaN is NaN * 0, as PyTorch's).
  std::vector<Device> devices{Device::cpu()};
  if (cuda::is_available()) devices.push_back(Device::cuda(0));
  for (const Device& dev : devices) {
    const Tensor x = from_vector<float>({NAN, -1.0f, 2.0f, NAN}, {4}).to(dev);
    const Tensor zero = zeros({4}).to(dev);
    Generator gen(7);
    const std::vector<std::pair<std::string, Tensor>> outs = {
        {"relu", relu(x)},
        {"leaky_relu", leaky_relu(x)},
        {"elu", elu(x)},
        {"selu", selu(x)},
        {"gelu", gelu(x)},
        {"tanh", tanh(x)},
        {"sigmoid", sigmoid(x)},
        {"minimum", minimum(x, 0.5)},
        {"add_relu", add_relu(x, zero)},
        {"relu_dropout", relu_dropout(x, 0.5, gen)},
        {"relu_dropout_add_relu", relu_dropout_add_relu(x, zero, 0.5, gen)},
        {"glu", glu(cat({x, x}, 0))},
    };
    for (const auto& out : outs) {  // not a structured binding: INFO captures it (clang 14)
      INFO(out.first, " on ", dev.str());
      const std::vector<float> v = out.second.to(Device::cpu()).to_vector<float>();
      CHECK(std::isnan(v[0]));
      CHECK(std::isnan(v[3]));
    }
  }
}

}  // TEST_SUITE
