// Every user error is a tcn::Error whose message names the op and the problem.
// An op's own bad inputs are listed with its entry in the op registry
// (tests/op_cases.cpp); here: in-place updates, dtypes, devices, views,
// tensors, autograd misuse.
#include "helpers.h"

using namespace tcn;

TEST_SUITE("errors") {

TEST_CASE("in-place shape mismatches name the op and both shapes") {
  Tensor a = zeros({2, 3});
  CHECK_ERROR(add_(zeros({3}), a), "add_: [2, 3] cannot be added in place to [3]");
  CHECK_ERROR(copy_(zeros({2, 3}), zeros({3, 2})), "copy_: shapes [2, 3] and [3, 2]");
}

TEST_CASE("dtype misuse") {
  Tensor f = zeros({2}), i = zeros({2}, {DType::I64});
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
  CHECK_ERROR(x.narrow(1, 2, 2), "narrow: range [2, 4) is out of bounds for dim 1 of shape [2, 3]");
  CHECK_ERROR(x.reshape({4, 2}), "reshape: shape [4, 2] is invalid for 6 elements");
  CHECK_ERROR(x.reshape({-1, -1}), "more than one -1");
  CHECK_ERROR(x.t().view({6}), "view: shape [6] is incompatible with the layout");
  CHECK_ERROR(x.permute({0, 0}), "permute: dim 0 repeated");
  CHECK_ERROR(x.expand({4, 3}), "expand: shape [2, 3] cannot be expanded to [4, 3]");
  CHECK_ERROR(x.squeeze(0), "squeeze: dim 0 of shape [2, 3] has size 2, not 1");
  CHECK_ERROR(x.item(), "item(): tensor has 6 elements");
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector: 3 values do not fill shape [2, 2]");
  Tensor s = scalar_tensor(2.0);
  CHECK_ERROR(s.size(0), "size: a 0-dim tensor has no dim 0");
  CHECK_ERROR(s.squeeze(0), "squeeze: a 0-dim tensor has no dim 0");
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
