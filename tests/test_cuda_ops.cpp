// CUDA against the CPU, op by op, forward and backward, on the same random
// inputs (ggml's test-backend-ops idea). Skipped, and reported as skipped,
// when no GPU is usable. Tolerances: float64 relative 1e-12 (1e-10 for sums
// and products, whose order differs), float32 relative 1e-5 (1e-4 for GEMM).
#include "cuda/kernels.h"
#include "helpers.h"

using namespace tcn;
using tcn::test::rand_tensor;

namespace {

const bool kNoGpu = !cuda::is_available();

// Runs f on CPU leaves and on their CUDA copies; compares outputs and the
// gradients of sum(f(...) * w). Each side runs forward and backward before the
// other starts: backward() frees the whole tape, so a graph built before it
// (the other side's) could no longer be differentiated.
void compare(const std::function<Tensor(const TensorList&)>& f, const TensorList& cpu_inputs, double rtol,
             double atol = 1e-7) {
  TensorList cpu, gpu;
  for (const Tensor& t : cpu_inputs) {
    Tensor c = clone(t.detach());
    Tensor g = c.to(Device::cuda(0));
    if (is_floating(t.dtype())) {
      c.requires_grad_();
      g.requires_grad_();
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor yc = f(cpu);
  Tensor w = rand_tensor(yc.shape(), 99, false, -1, 1, yc.dtype());
  if (yc.requires_grad()) sum(mul(yc, w)).backward();
  Tensor yg = f(gpu);
  REQUIRE(yg.device() == Device::cuda(0));
  CHECK_CLOSE(yg.to(Device::cpu()), yc, atol, rtol);
  REQUIRE(yg.requires_grad() == yc.requires_grad());
  if (yg.requires_grad()) sum(mul(yg, w.to(Device::cuda(0)))).backward();
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].requires_grad() || !cpu[i].grad().defined()) continue;
    INFO("gradient of input ", i);
    REQUIRE(gpu[i].grad().defined());
    CHECK(gpu[i].grad().device() == Device::cuda(0));
    CHECK_CLOSE(gpu[i].grad().to(Device::cpu()), cpu[i].grad(), atol, rtol);
  }
}

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("CUDA vs CPU: elementwise with broadcasting, float32 and float64" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-5 : 1e-12;
    Tensor a = rand_tensor({3, 4, 5}, 1, true, -1, 1, dt), b = rand_tensor({4, 1}, 2, false, 0.5, 2, dt);
    compare([](const TensorList& v) { return add(v[0], v[1]); }, {a, b}, rtol);
    compare([](const TensorList& v) { return sub(v[0], v[1]); }, {a, b}, rtol);
    compare([](const TensorList& v) { return mul(v[0], v[1]); }, {a, b}, rtol);
    compare([](const TensorList& v) { return div(v[0], v[1]); }, {a, b}, rtol);
    compare([](const TensorList& v) { return relu(v[0]); }, {a}, rtol);
    compare([](const TensorList& v) { return tanh(v[0]); }, {a}, rtol);
    compare([](const TensorList& v) { return sigmoid(v[0]); }, {a}, rtol);
    compare([](const TensorList& v) { return exp(v[0]); }, {a}, rtol);
    compare([](const TensorList& v) { return log(v[0]); }, {b}, rtol);
    compare([](const TensorList& v) { return sqrt(v[0]); }, {b}, rtol);
    compare([](const TensorList& v) { return pow(v[0], 2.5); }, {b}, rtol);
    compare([](const TensorList& v) { return 3.0 - v[0] * 0.5; }, {a}, rtol);
    compare([](const TensorList& v) { return minimum(v[0], 0.25); }, {a}, rtol);
  }
}

TEST_CASE("CUDA vs CPU: sums, GEMMs, copies and in-place updates" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    Tensor x = rand_tensor({6, 7, 8}, 3, true, -1, 1, dt);
    compare([](const TensorList& v) { return sum(v[0], {0, 1}); }, {x}, rtol);
    compare([](const TensorList& v) { return sum(v[0], {2}, true); }, {x}, rtol);
    compare([](const TensorList& v) { return mean(v[0]); }, {x}, rtol);
    Tensor a = rand_tensor({5, 9}, 4, true, -1, 1, dt), b = rand_tensor({9, 3}, 5, false, -1, 1, dt);
    compare([](const TensorList& v) { return mm(v[0], v[1]); }, {a, b}, rtol);
    compare([](const TensorList& v) { return matmul(v[0], v[1]); }, {x, rand_tensor({8, 4}, 6, false, -1, 1, dt)}, rtol);
    compare([](const TensorList& v) { return v[0].transpose(0, 2).contiguous(); }, {x}, rtol);
    compare([](const TensorList& v) { return pad(v[0], 1, 2, 1); }, {x}, rtol);
    compare([](const TensorList& v) { return max(v[0], 1).first; }, {x}, rtol);
    compare([](const TensorList& v) { return v[0].to(DType::F32).to(DType::F64); }, {rand_tensor({3, 4}, 17)}, 1e-6);
  }
  Tensor g = zeros({4, 3}, {DType::F32, Device::cuda(0)});
  fill_(g.narrow(0, 1, 2), 2.0);
  add_(g, full({3}, 0.5, {DType::F32, Device::cuda(0)}), 2.0);
  mul_(g, 3.0);
  CHECK(g.to_vector<float>() == std::vector<float>{3, 3, 3, 9, 9, 9, 9, 9, 9, 3, 3, 3});
}

TEST_CASE("CUDA vs CPU: layer primitives" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double rtol = dt == DType::F32 ? 1e-4 : 1e-10;
    Tensor x = rand_tensor({3, 17, 5}, 7, true, -1, 1, dt), w = rand_tensor({6, 5, 3}, 8, false, -1, 1, dt);
    Tensor bias = rand_tensor({6}, 9, false, -1, 1, dt);
    compare([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 2, 4); }, {x, w, bias}, rtol);
    compare([](const TensorList& v) { return conv1d(v[0], v[1], v[2], 1, 1); }, {x, w, bias}, rtol);
    Tensor table = rand_tensor({7, 4}, 10, false, -1, 1, dt);
    Tensor idx = from_vector<int64_t>({6, 0, 6, 2, 6, 1}, {2, 3});
    compare([idx](const TensorList& v) { return gather_rows(v[0], idx.to(v[0].device())); }, {table}, rtol);
    Tensor logits = rand_tensor({2, 5, 9}, 11, false, -3, 3, dt);
    Tensor targets = from_vector<int64_t>({0, 8, 3, 3, 1, 2, 4, 5, 6, 7}, {2, 5});
    compare([targets](const TensorList& v) { return cross_entropy(v[0], targets.to(v[0].device())); }, {logits}, rtol);
    Tensor xp = rand_tensor({2, 6, 16}, 12, false, -1, 1, dt), whh = rand_tensor({16, 4}, 13, false, -1, 1, dt);
    Tensor h0 = rand_tensor({2, 4}, 14, false, -1, 1, dt), c0 = rand_tensor({2, 4}, 15, false, -1, 1, dt);
    compare(
        [](const TensorList& v) {
          auto [o, h, c] = lstm_layer(v[0], v[1], v[2], v[3]);
          return add(o, mul(add(h, c).unsqueeze(1), 0.5));
        },
        {xp, whh, h0, c0}, rtol);
  }
}

TEST_CASE("CUDA dropout draws the CPU's masks" * doctest::skip(kNoGpu)) {
  Tensor x = rand_tensor({64, 33}, 16, false, -1, 1, DType::F32);
  for (bool with_relu : {false, true}) {
    Generator g1(21), g2(21);
    Tensor cpu = with_relu ? relu_dropout(x, 0.3, g1) : dropout(x, 0.3, g1);
    Tensor gpu = with_relu ? relu_dropout(x.to(Device::cuda(0)), 0.3, g2) : dropout(x.to(Device::cuda(0)), 0.3, g2);
    CHECK(gpu.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
    CHECK(g1.offset() == g2.offset());
  }
  compare(
      [](const TensorList& v) {
        Generator g(5);
        return relu_dropout(dropout(v[0], 0.2, g), 0.4, g);
      },
      {x}, 1e-6);
}

}  // TEST_SUITE
