// Every user error is a tcn::Error whose message names the op and the problem.
#include "helpers.h"

using namespace tcn;

TEST_SUITE("errors") {

TEST_CASE("shape mismatches name the op and both shapes") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_ERROR(add(a, b), "add: shapes [2, 3] and [4] cannot be broadcast together");
  CHECK_ERROR(mul(a, zeros({3, 2})), "mul: shapes [2, 3] and [3, 2] cannot be broadcast");
  CHECK_ERROR(mm(a, zeros({2, 3})), "mm: inner dimensions differ, [2, 3] @ [2, 3]");
  CHECK_ERROR(mm(zeros({2}), a), "mm: expected two matrices, got shapes [2] and [2, 3]");
  CHECK_ERROR(bmm(zeros({2, 2, 3}), zeros({3, 3, 2})), "bmm: shapes do not match");
  CHECK_ERROR(matmul(zeros({2, 3}), zeros({4, 2})), "matmul: inner dimensions differ");
  CHECK_ERROR(cat({a, zeros({2, 4})}, 0), "cat: tensor 1 has shape [2, 4]");
  CHECK_ERROR(add_(zeros({3}), a), "add_: [2, 3] cannot be added in place to [3]");
  CHECK_ERROR(copy_(zeros({2, 3}), zeros({3, 2})), "copy_: shapes [2, 3] and [3, 2]");
  CHECK_ERROR(add_relu(a, b), "add_relu: shapes [2, 3] and [4] cannot be broadcast together");
  CHECK_ERROR(relu_dropout_add_relu(a, zeros({3, 2}), 0.1),
              "relu_dropout_add_relu: the residual's shape [3, 2] differs from the input's [2, 3]");
  CHECK_ERROR(relu_dropout_add_relu(a, a, 1.5), "relu_dropout_add_relu: probability must be in [0, 1], got 1.5");
}

TEST_CASE("dtype mismatches") {
  Tensor f = zeros({2}), d = zeros({2}, {DType::F64}), i = zeros({2}, {DType::I64});
  CHECK_ERROR(add(f, d), "add: dtype mismatch, float32 [2] vs float64 [2]");
  CHECK_ERROR(relu(i), "relu: expected a float32 or float64 tensor, got int64");
  CHECK_ERROR(mm(zeros({2, 2}), zeros({2, 2}, {DType::F64})), "mm: dtype mismatch");
  CHECK_ERROR(relu_dropout_add_relu(f, d, 0.1), "relu_dropout_add_relu: dtype mismatch, float32 [2] vs float64 [2]");
  CHECK_ERROR(gather_rows(zeros({3, 2}), zeros({2})), "gather_rows: indices must be int64, got float32");
  CHECK_ERROR(f.data<double>(), "data<float64>() called on a float32 tensor");
  CHECK_ERROR(i.requires_grad_(), "only floating-point tensors can require grad");
}

TEST_CASE("wrong device") {
  if (!cuda::is_available()) {
    // No usable GPU: asking for one is a clear error, not a crash.
    CHECK_ERROR(zeros({2}, {DType::F32, Device::cuda(0)}), "cuda:0 requested but");
    CHECK_ERROR(zeros({2}).to(Device::cuda(0)), "cuda:0 requested but");
  } else {
    Tensor g = zeros({2}, {DType::F32, Device::cuda(0)});
    CHECK_ERROR(add(zeros({2}), g), "add: tensors are on different devices, cpu [2] vs cuda:0 [2]");
    CHECK_ERROR(relu_dropout_add_relu(zeros({2}), g, 0.1),
                "relu_dropout_add_relu: tensors are on different devices, cpu [2] vs cuda:0 [2]");
    CHECK_ERROR(zeros({2}, {DType::F32, Device::cuda(cuda::device_count())}), "requested but only");
  }
  CHECK_ERROR(parse_device("tpu"), "unknown device 'tpu'");
  CHECK(parse_device("cuda:1") == Device::cuda(1));
}

TEST_CASE("index, range and view errors") {
  Tensor x = zeros({2, 3});
  CHECK_ERROR(gather_rows(zeros({3, 2}), from_vector<int64_t>({0, 3}, {2})),
              "gather_rows: index 3 at position 1 is out of range for 3 rows");
  CHECK_ERROR(gather_rows(zeros({3, 2}), from_vector<int64_t>({-1}, {1})), "index -1");
  CHECK_ERROR(x.narrow(1, 2, 2), "narrow: range [2, 4) is out of bounds for dim 1 of shape [2, 3]");
  CHECK_ERROR(x.reshape({4, 2}), "reshape: shape [4, 2] is invalid for 6 elements");
  CHECK_ERROR(x.reshape({-1, -1}), "more than one -1");
  CHECK_ERROR(x.t().view({6}), "view: shape [6] is incompatible with the layout");
  CHECK_ERROR(x.permute({0, 0}), "permute: dim 0 repeated");
  CHECK_ERROR(x.expand({4, 3}), "expand: shape [2, 3] cannot be expanded to [4, 3]");
  CHECK_ERROR(x.squeeze(0), "squeeze: dim 0 of shape [2, 3] has size 2, not 1");
  CHECK_ERROR(sum(x, {2}), "sum: dim 2 is out of range for a tensor of rank 2");
  CHECK_ERROR(x.item(), "item(): tensor has 6 elements");
  CHECK_ERROR(pad(x, 0, -1, 0), "pad: negative padding");
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector: 3 values do not fill shape [2, 2]");
  CHECK_ERROR(add(Tensor(), x), "add: input is an undefined tensor");
  Tensor s = scalar_tensor(2.0);
  CHECK_ERROR(s.size(0), "size: a 0-dim tensor has no dim 0");
  CHECK_ERROR(sum(s, {0}), "sum: a 0-dim tensor has no dim 0");
  CHECK_ERROR(s.squeeze(0), "squeeze: a 0-dim tensor has no dim 0");
  CHECK_ERROR(cat({s, s}, 0), "cat: a 0-dim tensor has no dim 0");
}

TEST_CASE("autograd misuse") {
  Tensor w = zeros({2}).requires_grad_();
  CHECK_ERROR(add_(w, ones({2})), "add_: in-place update of a tensor that requires grad");
  CHECK_ERROR(mul_(w, 2.0), "mul_: in-place update");
  CHECK_ERROR(uniform_(w, 0, 1), "uniform_: in-place fill of a tensor that requires grad");
  CHECK_ERROR(copy_(w, ones({2})), "copy_: in-place update of a tensor that requires grad");
  {
    autograd::NoGrad ng;  // allowed under NoGrad, as an optimizer does
    add_(w, ones({2}));
  }
  CHECK(w.to_vector<float>() == std::vector<float>{1, 1});

  Tensor y = mul(w, 2.0);
  CHECK_ERROR(y.requires_grad_(false), "only leaf tensors can change requires_grad");
  CHECK_ERROR(y.backward(), "backward: a gradient can be created implicitly only for a one-element tensor");
  Tensor loss = sum(y);
  loss.backward();
  CHECK_ERROR(loss.backward(), "backward: the graph of this tensor was already freed");
  CHECK_ERROR(zeros({2}).backward(), "backward: the tensor does not require grad");
  // Using a tensor whose graph was freed would silently lose its gradient: refused.
  Tensor stale = mul(w, 3.0);
  sum(mul(w, 2.0)).backward();
  CHECK_ERROR(mul(stale, 2.0), "mul_scalar: input 0 (shape [2]) was computed before the last backward()");
}

}  // TEST_SUITE
