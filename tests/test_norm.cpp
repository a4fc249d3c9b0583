// The normalisation layers: BatchNorm1d against PyTorch (training steps, the
// running statistics, eval), its gradients, its buffers in checkpoints and on
// CUDA; LayerNorm's parameters. The layer_norm op itself is in the op registry.
#include "cuda_compare.h"
#include "helpers.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"

using namespace tcn;
using tcn::test::rand_tensor;

namespace {

// x [N 2, L 4, C 3], channels last; PyTorch was given x.transpose(1, 2).
Tensor bn_input() {
  return from_vector<double>({1.0, -2.0, 0.5, 3.0, 3.5, -1.0, 0.2, 0.4, 0.6, -1.5, 2.5, 0.0,
                              0.3, -0.1, 2.0, 1.1, -0.7, 0.9, 2.2, 1.3, -0.4, 0.0, 0.8, 1.5},
                             {2, 4, 3});
}

std::shared_ptr<nn::BatchNorm1d> bn_like_torch() {
  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  bn->to(DType::F64);
  autograd::NoGrad ng;
  copy_(bn->weight, from_vector<double>({0.5, 2.0, -1.0}, {3}));
  copy_(bn->bias, from_vector<double>({0.1, 0.0, -0.3}, {3}));
  return bn;
}

void check_values(const Tensor& got, const std::vector<double>& want, double eps = 1e-13) {
  const auto g = got.to(Device::cpu()).to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(eps));
}

}  // namespace

TEST_SUITE("nn") {

TEST_CASE("BatchNorm1d equals torch.nn.BatchNorm1d: two training steps, the running statistics, then eval") {
  // Reference: /usr/bin/python3, torch 1.13, float64: BatchNorm1d(3) with weight [0.5, 2, -1] and bias
  // [0.1, 0, -0.3]; y1 = bn(x), y2 = bn(0.5 x + 0.25) in training mode, then y3 = bn(x) in eval mode.
  auto bn = bn_like_torch();
  const Tensor x = bn_input();
  check_values(bn->forward(x).narrow(1, 0, 1), {0.1818858754586553, -3.3147097539962043, -0.28637033353036045,
                                                 -0.08785583193456215, -0.9928854101831946, -1.9219303098871103});
  check_values(bn->forward(add(mul(x, 0.5), 0.25)).narrow(1, 3, 1),
               {-0.7814695118491739, 2.1843356703051255, 0.2588063597537547, -0.20345671719397793,
                0.10692552232262867, -1.3767244492816244});
  check_values(bn->running_mean, {0.13525, 0.12475, 0.09675});
  check_values(bn->running_var, {1.0312723214285715, 1.16204375, 0.92054375});
  CHECK(bn->num_batches_tracked.dtype() == DType::I64);
  CHECK(bn->num_batches_tracked.to_vector<int64_t>() == std::vector<int64_t>{2});
  bn->eval();
  check_values(bn->forward(x).narrow(1, 1, 1), {1.5104832916278073, 6.262140874065132, 0.8430969535652739,
                                                 0.5750026199835683, -1.5301683389038494, -1.1371940988842546});
}

TEST_CASE("BatchNorm1d: gradients in training mode (float64 finite differences), with and without affine") {
  for (bool affine : {true, false}) {
    INFO("affine ", affine);
    nn::BatchNorm1d bn(4, {.affine = affine});
    bn.to(DType::F64);
    TensorList inputs{test::leaf(rand_tensor({3, 5, 4}, 90, true))};
    if (affine) {
      autograd::NoGrad ng;
      copy_(bn.weight, rand_tensor({4}, 91, false, 0.5, 2));
      copy_(bn.bias, rand_tensor({4}, 92));
    }
    // Each evaluation is another training step (the running statistics move), which the output does not see.
    test::check_gradients([&](const TensorList& v) { return bn.forward(v[0]); }, inputs);
    if (affine) {
      // The parameters' gradients: gradient_mismatch perturbs weight and bias in place, which forward reads.
      test::check_gradients([&](const TensorList& v) { return bn.forward(v[0]); },
                            {inputs[0].detach(), bn.weight, bn.bias});
    }
  }
}

TEST_CASE("BatchNorm1d's buffers: PyTorch's names, saved and loaded with the parameters, moved by to()") {
  auto bn = bn_like_torch();
  (void)bn->forward(bn_input());
  std::vector<std::string> names;
  for (const auto& [n, t] : bn->named_state()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn->parameters().size() == 2);  // buffers are not trained
  test::TempDir dir;
  nn::save_module(dir.file("bn.safetensors"), *bn, {});
  nn::BatchNorm1d fresh(3);
  fresh.to(DType::F64);
  nn::load_module(nn::load_safetensors(dir.file("bn.safetensors")), fresh);
  CHECK(fresh.running_mean.to_vector<double>() == bn->running_mean.to_vector<double>());
  CHECK(fresh.running_var.to_vector<double>() == bn->running_var.to_vector<double>());
  CHECK(fresh.num_batches_tracked.to_vector<int64_t>() == std::vector<int64_t>{1});
  fresh.to(DType::F32);
  CHECK(fresh.running_mean.dtype() == DType::F32);
  CHECK(fresh.num_batches_tracked.dtype() == DType::I64);  // a counter stays an integer
  // A file without the buffers is refused, naming them.
  nn::save_safetensors(dir.file("params.safetensors"), bn->named_parameters());
  CHECK_ERROR(nn::load_module(nn::load_safetensors(dir.file("params.safetensors")), fresh), "missing 'running_mean'");
}

TEST_CASE("BatchNorm1d: clear errors") {
  nn::BatchNorm1d bn(3);
  CHECK_ERROR(bn.forward(zeros({2, 4, 5})), "BatchNorm1d: expected [batch, ..., 3] (channels last), got [2, 4, 5]");
  CHECK_ERROR(bn.forward(zeros({1, 3})), "BatchNorm1d: training needs more than one value per channel");
  CHECK_ERROR(nn::BatchNorm1d(3, {.momentum = 2}), "BatchNorm1d: momentum must be in [0, 1], got 2");
  bn.eval();
  CHECK(bn.forward(zeros({1, 3})).shape() == Shape{1, 3});  // eval: the running statistics, any batch
}

TEST_CASE("BatchNorm1d on CUDA equals the CPU: outputs, gradients, running statistics" *
          doctest::skip(!cuda::is_available())) {
  nn::BatchNorm1d cpu(6), gpu(6);
  gpu.to(Device::cuda(0));
  for (int step = 0; step < 2; ++step) {
    Tensor x = rand_tensor({4, 7, 6}, 95 + step, true, -1, 1, DType::F32);
    Tensor xc = test::leaf(clone(x)), xg = test::leaf(x.to(Device::cuda(0)));
    // Each side's forward and backward before the other's: backward() frees the whole tape.
    Tensor w = rand_tensor({4, 7, 6}, 97, false, -1, 1, DType::F32);
    Tensor yc = cpu.forward(xc);
    sum(mul(yc, w)).backward();
    Tensor yg = gpu.forward(xg);
    sum(mul(yg, w.to(Device::cuda(0)))).backward();
    CHECK_CLOSE(yg.detach().to(Device::cpu()), yc.detach(), 1e-6, 1e-5);
    CHECK_CLOSE(xg.grad().to(Device::cpu()), xc.grad(), 1e-6, 1e-4);
    CHECK_CLOSE(gpu.weight.grad().to(Device::cpu()), cpu.weight.grad(), 1e-6, 1e-4);
  }
  CHECK_CLOSE(gpu.running_mean.to(Device::cpu()), cpu.running_mean, 1e-7, 1e-5);
  CHECK_CLOSE(gpu.running_var.to(Device::cpu()), cpu.running_var, 1e-7, 1e-5);
  CHECK(gpu.num_batches_tracked.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{2});
}

TEST_CASE("LayerNorm: PyTorch's parameter names, ones and zeros; it is the layer_norm op") {
  nn::LayerNorm ln(5);
  std::vector<std::string> names;
  for (const auto& [n, t] : ln.named_state()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight", "bias"});
  const Tensor x = rand_tensor({2, 3, 5}, 98, false, -1, 1, DType::F32);
  CHECK(ln.forward(x).to_vector<float>() == layer_norm(x, ones({5}), zeros({5})).to_vector<float>());
  CHECK_ERROR(ln.forward(zeros({2, 4})), "layer_norm: gamma must be [4]");
}

}  // TEST_SUITE
