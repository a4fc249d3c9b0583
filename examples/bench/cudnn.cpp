// bench_cudnn: each CUDA layer of the two reference models on both of its
// implementations, in one run, forward + backward through the op (what a
// training step pays):
//   conv1d  the GEMM path, cuDNN, cuDNN with deterministic algorithms only, and
//           what --conv_impl auto chooses, per layer shape of the char_cnn TCN
//           (emsize 100, nhid 450, kernel 3, dilations 1, 2, 4; batch 32 x 400)
//   LSTM    our fused layer and cuDNN's (emsize 100, hidden 700, batch 32 x 400)
// for each precision asked for. tools/bench_torch_layers.py times PyTorch's
// nn.Conv1d and nn.LSTM at the same shapes; tools/device_check.sh runs both.
// Device time per call: the mean over --reps after one warm-up, the device
// synchronised around the loop.
//
//   build/bench_cudnn --device cuda --precision all
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>

#include "core/autocast.h"
#include "core/backends.h"
#include "cuda/cudnn.h"
#include "core/devices.h"
#include "nn/layers.h"
#include "ops/ops.h"

using namespace tcn;
using Clock = std::chrono::steady_clock;

namespace {

double mean_ms(int reps, const std::function<void()>& f) {
  f();  // warm-up (and, for cuDNN, the algorithm search of this shape)
  cuda::synchronize();
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) f();
  cuda::synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
}

// The time of `f` with the given backends, or -1 (printed "-") when it throws
// (the reason goes to stderr).
double timed(const CudaBackends& b, int reps, const std::function<void()>& f, const char* what) {
  const BackendsScope on(b);
  try {
    return mean_ms(reps, f);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cudnn: %s: %s\n", what, e.what());
    return -1;
  }
}

std::string cell(double ms) {
  if (ms < 0) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.3f", ms);
  return s;
}

// A row per conv1d layer shape of the TCN: forward + backward on our GEMM path, cuDNN,
// cuDNN's deterministic algorithms and auto's choice.
void conv_rows(const Device& dev, Precision p, int64_t B, int64_t T, int reps, Generator& gen) {
  struct ConvShape {
    int64_t cin, cout, d;
  };
  CudaBackends gemm, cudnn, cudnn_det, autos;
  gemm.conv = ConvImpl::Gemm;
  cudnn.conv = ConvImpl::Cudnn;
  cudnn_det = cudnn;
  cudnn_det.deterministic = true;
  autos.conv = ConvImpl::Auto;
  const int64_t K = 3;
  for (ConvShape s : {ConvShape{100, 450, 1}, ConvShape{450, 450, 1}, ConvShape{450, 450, 2}, ConvShape{450, 450, 4}}) {
    Tensor x = rand({B, T, s.cin}, {DType::F32, dev}, gen).requires_grad_();
    Tensor w = rand({s.cout, s.cin, K}, {DType::F32, dev}, gen).requires_grad_();
    Tensor b = rand({s.cout}, {DType::F32, dev}, gen).requires_grad_();
    Tensor g = rand({B, T, s.cout}, {DType::F32, dev}, gen);
    auto step = [&] {
      autograd::backward(conv1d(x, w, b, s.d, (K - 1) * s.d), g);
      x.set_grad(Tensor()), w.set_grad(Tensor()), b.set_grad(Tensor());
    };
    const double t_gemm = timed(gemm, reps, step, "conv1d gemm");
    const double t_cudnn = timed(cudnn, reps, step, "conv1d cudnn");
    const double t_det = timed(cudnn_det, reps, step, "conv1d cudnn deterministic");
    const double t_auto = timed(autos, reps, step, "conv1d auto");
    char name[96];
    std::snprintf(name, sizeof name, "conv1d %lld->%lld d%lld", static_cast<long long>(s.cin),
                  static_cast<long long>(s.cout), static_cast<long long>(s.d));
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", name, precision_name(p), cell(t_gemm).c_str(),
                cell(t_cudnn).c_str(), cell(t_det).c_str(), cell(t_auto).c_str(),
                t_cudnn > 0 && t_gemm > 0 ? cell(t_cudnn / t_gemm).c_str() : "-");
    std::fflush(stdout);
  }
}

// The LSTM char-LM's layer (100 -> 700): forward + backward on our fused path and on cuDNN's RNN.
void lstm_row(const Device& dev, Precision p, int64_t B, int64_t T, int reps, Generator& gen) {
  const int64_t I = 100, H = 700;
  Generator init(6);
  nn::LSTM lstm(I, H, 1, init);
  lstm.to(dev);
  Tensor x = rand({B, T, I}, {DType::F32, dev}, gen).requires_grad_();
  Tensor g = rand({B, T, H}, {DType::F32, dev}, gen);
  auto step = [&] {
    autograd::backward(lstm.forward(x).first, g);
    x.set_grad(Tensor());
    for (Tensor& q : lstm.parameters()) q.set_grad(Tensor());
  };
  CudaBackends fused, on_cudnn;
  on_cudnn.lstm = LstmImpl::Cudnn;
  const double t_fused = timed(fused, reps, step, "LSTM fused");
  const double t_cudnn = timed(on_cudnn, reps, step, "LSTM cudnn");
  std::printf("| LSTM 100->700 | %s | %s | %s | - | - | %s |\n", precision_name(p), cell(t_fused).c_str(),
              cell(t_cudnn).c_str(), t_cudnn > 0 && t_fused > 0 ? cell(t_cudnn / t_fused).c_str() : "-");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cudnn: conv1d and LSTM layers on our CUDA paths and on cuDNN, one run"};
  std::string device = "cuda", precision = "all";
  int reps = 20;
  int64_t B = 32, T = 400;
  app.add_option("--device", device, "cuda or cuda:N")->capture_default_str();
  app.add_option("--precision", precision, "fp32, tf32, bf16 or all")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "all"}))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed calls per cell")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--batch_size", B, "streams")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--seq_len", T, "positions")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    TCN_CHECK(device == "cuda" || device.starts_with("cuda:"), "--device must be cuda or cuda:N, got ", device);
    const Device dev = Device::cuda(device == "cuda" ? 0 : std::stoi(device.substr(5)));
    (void)cuda::allocator(dev.index);  // a clear error when there is no GPU
    const std::string why = cuda::cudnn_unavailable_reason();
    std::printf("bench_cudnn: %s%s, batch %lld x %lld, mean of %d calls (forward + backward) after a warm-up\n",
                cuda::emulated() ? "EMULATED device (logic only, times mean nothing), " : "",
                why.empty() ? ("cuDNN " + std::to_string(cuda::cudnn_version())).c_str() : ("no cuDNN: " + why).c_str(),
                static_cast<long long>(B), static_cast<long long>(T), reps);
    const std::vector<Precision> precisions = precision == "all"
                                                  ? std::vector<Precision>{Precision::FP32, Precision::TF32, Precision::BF16}
                                                  : std::vector<Precision>{parse_precision(precision)};
    std::printf("\n| layer | precision | ours (GEMM / fused) ms | cuDNN ms | cuDNN deterministic ms | auto ms | cuDNN / ours |\n"
                "|---|---|---|---|---|---|---|\n");
    Generator gen(5);
    for (Precision p : precisions) {
      const Autocast scope(p);
      conv_rows(dev, p, B, T, reps, gen);
      lstm_row(dev, p, B, T, reps, gen);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cudnn: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
