// Mixed precision (core/autocast.h): inside an Autocast(BF16) scope the GEMM
// ops multiply bfloat16-rounded operands exactly (products of bf16 numbers are
// exact in float32) and accumulate in float32; backward follows the precision
// its op was recorded with; the golden TCN's logits stay within a stated
// tolerance of PyTorch's float32 ones.
#include "core/autocast.h"
#include "core/devices.h"
#include "helpers.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "ops/cpu_blas.h"

using namespace tcn;
using tcn::test::rel_err;

namespace {

Tensor rounded(const Tensor& x) { return x.to(DType::BF16).to(DType::F32); }

// bf16 logits and loss of a golden model against PyTorch's float32 ones.
std::pair<double, double> golden_bf16_errors(const std::string& file, const std::string& kind,
                                             Device dev = Device::cpu()) {
  auto g = nn::load_safetensors(test::source_path("tests/golden/" + file));
  const auto config = nlohmann::json::parse(g.metadata.at("config"));
  auto model = nn::make_char_lm(kind, config, 1);
  nn::SafetensorsContents params;
  params.path = g.path;
  for (const auto& [name, t] : g.tensors)
    if (name.rfind("param.", 0) == 0) params.tensors.emplace_back(name.substr(6), t);
  nn::load_module(params, *model);
  model->eval();
  model->to(dev);
  const int64_t T = config.at("seq_len"), V = config.at("validseqlen"), hist = T - V;
  Tensor logits;
  {
    Autocast bf16(Precision::BF16);
    logits = model->forward(g.at("tokens").to(dev)).to(Device::cpu());
  }
  Tensor loss = cross_entropy(logits.narrow(1, hist, V), g.at("targets").narrow(1, hist, V));
  const double e = rel_err(logits, g.at("logits"));
  const double le = std::abs(loss.item() - g.at("loss").item()) / g.at("loss").item();
  MESSAGE(kind, " in bf16 on ", dev.str(), " vs PyTorch float32: logits relative error ", e, ", loss relative error ",
          le);
  return {e, le};
}

}  // namespace

TEST_SUITE("autocast") {

TEST_CASE("precision names and scopes") {
  CHECK(parse_precision("fp32") == Precision::FP32);
  CHECK(parse_precision("bf16") == Precision::BF16);
  CHECK_ERROR(parse_precision("fp16"), "unknown precision 'fp16': expected fp32, tf32 or bf16");
  CHECK(autocast_precision() == Precision::FP32);
  {
    Autocast a(Precision::BF16);
    CHECK(autocast_precision() == Precision::BF16);
    {
      Autocast b(Precision::FP32);
      CHECK(autocast_precision() == Precision::FP32);
    }
    CHECK(autocast_precision() == Precision::BF16);
  }
  CHECK(autocast_precision() == Precision::FP32);
}

TEST_CASE("conv1d and mm in bf16 equal float32 on bf16-rounded operands, and differ from plain float32") {
  Tensor x = test::rand_tensor({3, 37, 24}, 1, false, -1, 1, DType::F32);
  Tensor w = test::rand_tensor({20, 24, 3}, 2, false, -0.3, 0.3, DType::F32);
  Tensor b = test::rand_tensor({20}, 3, false, -1, 1, DType::F32);
  Tensor fp32 = conv1d(x, w, b, 2, 4);
  Tensor want = conv1d(rounded(x), rounded(w), rounded(b), 2, 4);  // the bias rides in the GEMM: bf16 too
  Tensor got;
  {
    Autocast bf16(Precision::BF16);
    got = conv1d(x, w, b, 2, 4);
  }
  CHECK(got.dtype() == DType::F32);
  CHECK(rel_err(got, want) < 1e-6);
  CHECK(rel_err(got, fp32) > 1e-4);  // the bf16 path really ran
  CHECK(rel_err(got, fp32) < 1e-2);

  Tensor a = test::rand_tensor({33, 70}, 4, false, -1, 1, DType::F32), m = test::rand_tensor({50, 70}, 5, false, -1, 1, DType::F32);
  Tensor mm_want = mm(rounded(a), rounded(m).t());
  Tensor mm_got;
  {
    Autocast bf16(Precision::BF16);
    mm_got = mm(a, m.t());  // a transposed operand, as Linear passes its weight
  }
  CHECK(rel_err(mm_got, mm_want) < 1e-6);
  CHECK(rel_err(mm_got, mm(a, m.t())) > 1e-4);
  // float64 never autocasts.
  Tensor a64 = a.to(DType::F64);
  const Tensor ref64 = mm(a64, a64.t());
  Autocast bf16(Precision::BF16);
  CHECK(mm(a64, a64.t()).dtype() == DType::F64);
  CHECK(mm(a64, a64.t()).to_vector<double>() == ref64.to_vector<double>());
}

TEST_CASE("backward runs with the precision its op was recorded with, wherever backward() is called") {
  Tensor x = test::leaf(test::rand_tensor({2, 30, 16}, 6, false, -1, 1, DType::F32));
  Tensor w = test::leaf(test::rand_tensor({12, 16, 2}, 7, false, -0.3, 0.3, DType::F32));
  Tensor v = test::leaf(test::rand_tensor({5, 12}, 8, false, -0.3, 0.3, DType::F32));
  auto loss_of = [&] { return sum(mul(relu(mm(conv1d(x, w, Tensor(), 1, 1).reshape({-1, 12}), v.t())), 0.5)); };
  Tensor l32 = loss_of();
  l32.backward();
  const Tensor gx32 = x.grad().detach(), gw32 = w.grad().detach(), gv32 = v.grad().detach();
  x.set_grad(Tensor()), w.set_grad(Tensor()), v.set_grad(Tensor());
  Tensor l16;
  {
    Autocast bf16(Precision::BF16);
    l16 = loss_of();
  }
  std::vector<cpu::GemmCall> calls;
  cpu::record_gemms(&calls);
  l16.backward();  // outside the scope
  cpu::record_gemms(nullptr);
  REQUIRE(calls.size() >= 4);
  for (const auto& c : calls) CHECK(c.bf16);
  for (const auto& [g16, g32] : {std::pair{x.grad(), gx32}, {w.grad(), gw32}, {v.grad(), gv32}}) {
    CHECK(g16.dtype() == DType::F32);
    CHECK(rel_err(g16, g32) < 2e-2);
    CHECK(rel_err(g16, g32) > 1e-5);
  }
}

// The errors as measured on the CPU: TCN logits 2.1e-3, loss 1.9e-6; LSTM (bf16 recurrent
// GEMMs too) logits 1.1e-3, loss 1.7e-5. The bounds leave 2x (TCN) and 4x (LSTM) on the logits.
TEST_CASE("the golden TCN and LSTM in bf16: logits within 5e-3 (relative norm) of PyTorch's float32, loss within 1e-3") {
  auto [te, tl] = golden_bf16_errors("tcn_small.safetensors", "tcn");
  CHECK(te < 5e-3);
  CHECK(tl < 1e-3);
  auto [le, ll] = golden_bf16_errors("lstm_small.safetensors", "lstm");
  CHECK(le < 5e-3);
  CHECK(ll < 1e-3);
}

// The same rule on CUDA (cublasGemmEx with bf16 operands): the TCN within the
// same bounds, the LSTM's recurrent GEMMs in bf16 as on the CPU.
TEST_CASE("the golden TCN and LSTM in bf16 on CUDA: the same bounds" * doctest::skip(!cuda::is_available())) {
  auto [te, tl] = golden_bf16_errors("tcn_small.safetensors", "tcn", Device::cuda(0));
  CHECK(te < 5e-3);
  CHECK(te > 1e-5);  // bf16 really ran
  CHECK(tl < 1e-3);
  auto [le, ll] = golden_bf16_errors("lstm_small.safetensors", "lstm", Device::cuda(0));
  CHECK(le < 5e-3);
  CHECK(ll < 1e-3);
}

}  // TEST_SUITE
