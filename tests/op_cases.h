// One registry of op test cases, after ggml's test-backend-ops: each op is
// registered once (tests/op_cases.cpp) with its inputs, shapes and tolerances,
// and tests/test_ops.cpp runs every case in every mode:
//   - gradcheck: finite differences in float64;
//   - CUDA against the CPU, in float32 and float64, values and gradients (the
//     emulated device in CI);
//   - bf16 autocast: a GEMM-class op equals itself on bf16-rounded operands, any
//     other op is untouched (bit for bit);
//   - errors: the op's bad inputs give the messages listed with it.
// A new op is one entry in op_cases.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace tcn::test {

// One input of a case, built in the dtype of the mode that runs it.
struct Input {
  Shape shape;
  uint64_t seed = 0;
  double lo = -1, hi = 1;
  bool strided = false;               // a transposed view, not row-major (rand_tensor's noncontig)
  bool grad = true;                   // false: a constant, whose gradient no mode asks for
  std::vector<int64_t> ids;           // non-empty: int64 indices of `shape` (no dtype, no gradient)
  std::function<Tensor(DType)> make;  // set: builds the input itself (values kept off a kink)
};

enum class Bf16 {
  Unaffected,  // autocast leaves it alone: bit for bit the float32 result
  Rounded,     // a GEMM-class op: equals itself on bf16-rounded float32 inputs
  Skip,        // mixes both (a composed expression); the parts have their own cases
};

struct OpError {
  std::function<void()> call;
  std::string message;  // what the tcn::Error's message must contain
};

struct OpCase {
  std::string name;
  std::vector<Input> inputs;
  std::function<Tensor(const TensorList&)> f;
  // gradcheck (float64): run or not, and gradient_mismatch's tolerances.
  bool gradcheck = true;
  double eps = 1e-6, atol = 1e-6, rtol = 1e-5;
  // CUDA against the CPU: relative tolerance in float32 and float64 (0: that dtype is not run).
  double cuda_f32 = 1e-5, cuda_f64 = 1e-12;
  Bf16 bf16 = Bf16::Unaffected;
  std::vector<OpError> errors;
};

const std::vector<OpCase>& op_cases();

// The case's inputs in `dtype` (int64 indices stay int64); none requires grad.
TensorList make_inputs(const OpCase& c, DType dtype);

}  // namespace tcn::test
