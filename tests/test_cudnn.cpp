// The cuDNN paths of conv1d and the LSTM (cuda/cudnn.h, core/backends.h).
//
// On a GPU with cuDNN: each path against the CPU oracle, forward and
// gradients, in float32, TF32 and bf16; deterministic algorithms repeat bit for
// bit; cuDNN inside a captured training step equals eager steps. These cases
// report themselves skipped elsewhere (doctest's skip, visible in the summary),
// saying why in the case name: the emulated device has no cuDNN.
//
// Everywhere: how the settings choose a path where cuDNN cannot run (the
// emulated device in CI): auto falls back to the GEMM path with identical
// results, an explicit cudnn is an error naming the reason.
//
// TCN_REQUIRE_CUDNN=1 (tools/device_check.sh on a GPU) turns a cuDNN that did
// not load into failures instead of skips: every GPU case runs, and the first
// case says why cuDNN is missing.
#include "core/autocast.h"
#include "core/backends.h"
#include "core/step_graph.h"
#include "cuda/cudnn.h"
#include "core/devices.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "cuda_compare.h"
#include "helpers.h"

#include <cstdlib>
#include <cstring>

using namespace tcn;
using tcn::test::Backends;
using tcn::test::compare;
using tcn::test::conv_on;
using tcn::test::compare_lstm;
using tcn::test::rand_tensor;

namespace {

const Device kCuda = Device::cuda(0);
const bool kHaveCudnn = cuda::cudnn_available();
const bool kRequireCudnn = [] {
  const char* v = std::getenv("TCN_REQUIRE_CUDNN");
  return v != nullptr && std::strcmp(v, "1") == 0;
}();
// The GPU cases skip themselves where cuDNN is missing, unless it is required.
const bool kNoCudnn = !kHaveCudnn && !kRequireCudnn;

// Causal (left = (K-1)d, the TCN's) and centred (left = (K-1)d/2) convolutions.
struct ConvCase {
  int64_t B, L, Cin, Cout, K, d, left;
};
const ConvCase kConvCases[] = {{2, 37, 5, 7, 3, 2, 4}, {3, 50, 16, 8, 2, 8, 8}, {2, 20, 6, 6, 3, 1, 1}};

// x [B, L, Cin], w [Cout, Cin, K] and bias [Cout], float32 on the CPU, from seeds seed, seed+1, seed+2.
TensorList conv_inputs(const ConvCase& c, uint64_t seed) {
  return {rand_tensor({c.B, c.L, c.Cin}, seed, false, -1, 1, DType::F32),
          rand_tensor({c.Cout, c.Cin, c.K}, seed + 1, false, -1, 1, DType::F32),
          rand_tensor({c.Cout}, seed + 2, false, -1, 1, DType::F32)};
}

// conv1d with bias on CUDA (under the backends in force) against the CPU:
// output and the three gradients, float32 tolerances.
void compare_conv(const ConvCase& c, uint64_t seed) {
  compare([&](const TensorList& in) { return conv1d(in[0], in[1], in[2], c.d, c.left); }, conv_inputs(c, seed), 1e-4,
          1e-5);
}

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("backend names parse, and a bad one is an error naming the choices") {
  CHECK(parse_conv_impl("auto") == ConvImpl::Auto);
  CHECK(parse_conv_impl("cudnn") == ConvImpl::Cudnn);
  CHECK(parse_conv_impl("gemm") == ConvImpl::Gemm);
  CHECK(parse_conv_impl("winograd") == ConvImpl::Winograd);
  CHECK(parse_lstm_impl("fused") == LstmImpl::Fused);
  CHECK(parse_lstm_impl("cudnn") == LstmImpl::Cudnn);
  CHECK_THROWS_WITH_AS(parse_conv_impl("fft"), doctest::Contains("auto, cudnn, gemm or winograd, got 'fft'"), Error);
  CHECK_THROWS_WITH_AS(parse_lstm_impl("cudnn7"), doctest::Contains("fused or cudnn, got 'cudnn7'"), Error);
  for (ConvImpl c : {ConvImpl::Auto, ConvImpl::Cudnn, ConvImpl::Gemm, ConvImpl::Winograd}) CHECK(parse_conv_impl(conv_impl_name(c)) == c);
  CHECK(CudaBackends{}.lstm == LstmImpl::Fused);  // the default until the cuDNN LSTM has run on a GPU
}

TEST_CASE("where cuDNN cannot run, the reason is given, and it is never available on the emulated device") {
  const std::string why = cuda::cudnn_unavailable_reason();
  if (cuda::emulated()) {
    CHECK(why.find("emulated") != std::string::npos);
    CHECK(cuda::cudnn_version() == 0);
  }
  if (!cuda::built_with_cuda()) CHECK(why.find("without CUDA") != std::string::npos);
  CHECK(cuda::cudnn_available() == why.empty());
}

TEST_CASE("cuDNN loads where the run requires it (TCN_REQUIRE_CUDNN=1)" * doctest::skip(!kRequireCudnn)) {
  INFO("cuDNN required but unavailable: ", cuda::cudnn_unavailable_reason());
  CHECK(cuda::cudnn_available());
}

TEST_CASE("without cuDNN: conv1d auto is the GEMM path bit for bit; cudnn is an error naming the reason" *
          doctest::skip(!cuda::is_available() || kHaveCudnn)) {
  const ConvCase c = kConvCases[0];
  const TensorList in = conv_inputs(c, 1);
  const Tensor x = in[0].to(kCuda), w = in[1].to(kCuda), b = in[2].to(kCuda);
  std::vector<float> gemm, autos;
  {
    Backends s(conv_on(ConvImpl::Gemm));
    gemm = conv1d(x, w, b, c.d, c.left).contiguous().to(Device::cpu()).to_vector<float>();
  }
  {
    Backends s(conv_on(ConvImpl::Auto));
    autos = conv1d(x, w, b, c.d, c.left).contiguous().to(Device::cpu()).to_vector<float>();
  }
  CHECK(gemm == autos);
  Backends s(conv_on(ConvImpl::Cudnn));
  CHECK_THROWS_WITH_AS(conv1d(x, w, b, c.d, c.left),
                       doctest::Contains(("--conv_impl cudnn) but cannot run: " + cuda::cudnn_unavailable_reason()).c_str()),
                       Error);
}

TEST_CASE("without cuDNN: the cuDNN LSTM layer is an error naming the reason" *
          doctest::skip(!cuda::is_available() || kHaveCudnn)) {
  const int64_t B = 2, T = 3, I = 4, H = 5;
  auto r = [&](Shape s, uint64_t seed) { return rand_tensor(s, seed, false, -1, 1, DType::F32).to(kCuda); };
  CHECK_THROWS_WITH_AS(
      lstm_layer_cudnn(r({B, T, I}, 1), r({4 * H, I}, 2), r({4 * H, H}, 3), r({4 * H}, 4), r({4 * H}, 5), r({B, H}, 6),
                       r({B, H}, 7)),
      doctest::Contains(("cuDNN is unavailable: " + cuda::cudnn_unavailable_reason()).c_str()), Error);
  // The module with --lstm_impl cudnn goes the same way.
  CudaBackends b;
  b.lstm = LstmImpl::Cudnn;
  Backends s(b);
  Generator g(3);
  nn::LSTM lstm(I, H, 1, g);
  lstm.to(kCuda);
  CHECK_THROWS_WITH_AS(lstm.forward(r({B, T, I}, 8)), doctest::Contains("cuDNN is unavailable"), Error);
}

// ---- on a GPU with cuDNN --------------------------------------------------------------------------

TEST_CASE("cuDNN conv1d vs CPU: float32 (strict), causal and centred, forward and gradients" * doctest::skip(kNoCudnn)) {
  Backends s(conv_on(ConvImpl::Cudnn));
  for (const ConvCase& c : kConvCases) {
    INFO("B ", c.B, " L ", c.L, " Cin ", c.Cin, " Cout ", c.Cout, " K ", c.K, " d ", c.d, " left ", c.left);
    compare_conv(c, 11);
  }
}

TEST_CASE("cuDNN conv1d vs CPU: TF32 and bf16 (mixed precision)" * doctest::skip(kNoCudnn)) {
  Backends s(conv_on(ConvImpl::Cudnn));
  const ConvCase c = kConvCases[1];
  for (Precision p : {Precision::TF32, Precision::BF16}) {
    INFO(precision_name(p));
    // The oracle is the float32 CPU op; TF32 and bf16 round the operands to
    // 10 and 7 mantissa bits, so 1e-2 relative to the largest values.
    TensorList in{rand_tensor({c.B, c.L, c.Cin}, 21, false, -1, 1, DType::F32),
                  rand_tensor({c.Cout, c.Cin, c.K}, 22, false, -1, 1, DType::F32)};
    Tensor want = conv1d(in[0], in[1], Tensor(), c.d, c.left);
    Tensor got;
    {
      Autocast scope(p);
      got = conv1d(in[0].to(kCuda), in[1].to(kCuda), Tensor(), c.d, c.left).to(Device::cpu());
    }
    CHECK_CLOSE(got, want, 2e-2 * c.Cin * c.K, 2e-2);
  }
}

TEST_CASE("cuDNN conv1d with --deterministic repeats its gradients bit for bit" * doctest::skip(kNoCudnn)) {
  Backends s(conv_on(ConvImpl::Cudnn, true));
  const ConvCase c = kConvCases[1];
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor x = rand_tensor({c.B, c.L, c.Cin}, 31, false, -1, 1, DType::F32).to(kCuda).requires_grad_();
    Tensor w = rand_tensor({c.Cout, c.Cin, c.K}, 32, false, -1, 1, DType::F32).to(kCuda).requires_grad_();
    sum(mul(conv1d(x, w, Tensor(), c.d, c.left), conv1d(x, w, Tensor(), c.d, c.left))).backward();
    std::vector<float> all = x.grad().to(Device::cpu()).to_vector<float>();
    for (float v : w.grad().to(Device::cpu()).to_vector<float>()) all.push_back(v);
    runs.push_back(all);
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("conv1d auto on a GPU: chooses per shape, and its results stay within the chosen path's tolerance" *
          doctest::skip(kNoCudnn)) {
  Backends s(conv_on(ConvImpl::Auto));
  compare_conv(kConvCases[0], 41);
}

TEST_CASE("cuDNN LSTM vs CPU: two layers with a given state, outputs and every gradient" * doctest::skip(kNoCudnn)) {
  CudaBackends b;
  b.lstm = LstmImpl::Cudnn;
  Backends s(b);
  Generator g1(51), g2(51);
  nn::LSTM cpu(10, 16, 2, g1), gpu(10, 16, 2, g2);
  gpu.to(kCuda);
  compare_lstm(cpu, gpu, 4, 9, 52, 1e-6, 1e-4);
}

TEST_CASE("cuDNN inside a captured training step: replays equal eager steps (TCN and LSTM)" * doctest::skip(kNoCudnn)) {
  CudaBackends b;
  b.conv = ConvImpl::Cudnn;
  b.lstm = LstmImpl::Cudnn;
  b.deterministic = true;  // bit for bit between two runs: deterministic algorithms only
  Backends s(b);
  nn::TCNConfig tcfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .levels = 2, .ksize = 3, .dropout = 0.2,
                     .emb_dropout = 0.2};
  nn::LSTMConfig lcfg{.vocab_size = 11, .emsize = 8, .nhid = 12, .layers = 2, .dropout = 0.2, .emb_dropout = 0.2};
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "tcn" : "lstm"));
    std::vector<std::vector<float>> losses;
    for (GraphMode mode : {GraphMode::Off, GraphMode::On}) {
      // The same seed: the same weights and dropout masks (the model's own generator) in both runs.
      std::unique_ptr<nn::CharLM> m;
      if (which == 0) m = std::make_unique<nn::TCNCharLM>(tcfg, 61);
      else m = std::make_unique<nn::LSTMCharLM>(lcfg, 62);
      m->train();
      m->to(kCuda);
      nn::SGD opt(m->parameters(), 0.5);
      const test::CharBatch batch = test::random_char_batch(11, 9, kCuda);
      const Tensor &inp = batch.inp, &tgt = batch.tgt;
      StepGraph graph(mode, kCuda, m->parameters());
      std::vector<float> l;
      for (int step = 0; step < 6; ++step) {
        Tensor loss = graph.run(0, [&] {
          opt.zero_grad();
          Tensor loss = cross_entropy(m->forward(inp, 30), tgt);
          loss.backward();
          opt.step();
          return loss;
        });
        l.push_back(loss.to(Device::cpu()).to_vector<float>()[0]);
      }
      if (mode == GraphMode::On) CHECK_MESSAGE(graph.replaying(), graph.status());
      losses.push_back(l);
    }
    CHECK(losses[0] == losses[1]);
  }
}

}  // TEST_SUITE("cuda")
