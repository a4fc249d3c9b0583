#include "bench.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/threads.h"
#include "cuda/runtime.h"
#include "flags.h"
#include "generate.h"
#include "nn/optim.h"
#include "ops/cpu_blas.h"
#include "train.h"

namespace charlm {

using namespace tcn;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  TCN_CHECK(!v.empty(), "bench: no timed step");
  return v[v.size() / 2];
}

struct Timing {
  double median_ms = 0, min_ms = 0;
  double gemm_gflop = 0;  // float32 GEMM work of one step (CPU only; 0: not measured)
  int64_t params = 0;
  bool ok = false;
  std::string note;
};

// Waits for the device's queued work, so that a host clock read after it
// covers all of it (a no-op on the CPU).
void sync(const Device& dev) {
  if (dev.is_cuda()) cuda::synchronize();
}

Timing time_ours(const std::string& kind, const BenchOptions& o, const Device& dev, const std::string& label) {
  Timing r;
  nlohmann::json cfg = kind == "tcn" ? nn::TCNConfig{}.to_json() : nn::LSTMConfig{}.to_json();
  auto model = nn::make_char_lm(kind, cfg, 1111);
  model->train();
  model->to(dev);
  nn::SGD opt(model->parameters(), 4.0);
  Generator gen(7);
  Tensor u = rand({o.batch_size, o.seq_len + 1}, {DType::F64}, gen);
  std::vector<int64_t> toks;
  for (double x : u.to_vector<double>()) toks.push_back(static_cast<int64_t>(x * 50));
  Tensor seq = from_vector(toks, {o.batch_size, o.seq_len + 1});
  Tensor inp = seq.narrow(1, 0, o.seq_len).contiguous().to(dev);
  Tensor tgt = seq.narrow(1, 1, o.seq_len).contiguous().to(dev);
  const int64_t hist = o.seq_len - o.validseqlen;
  std::vector<double> ms;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    std::vector<cpu::GemmCall> calls;
    if (s == o.warmup && !dev.is_cuda()) cpu::record_gemms(&calls);  // the first timed step: its GEMM FLOPs
    sync(dev);
    auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(inp, o.validseqlen), tgt.narrow(1, hist, o.validseqlen));
    loss.backward();
    nn::clip_grad_norm_(model->parameters(), 0.15);
    opt.step();
    (void)loss.item();
    sync(dev);
    double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    cpu::record_gemms(nullptr);
    for (const auto& c : calls) r.gemm_gflop += c.flops() / 1e9;
    std::fprintf(stderr, "  tcn %s%s step %lld: %.1f ms%s\n", kind.c_str(), label.c_str(), static_cast<long long>(s + 1),
                 t, s < o.warmup ? " (warmup)" : "");
    if (s >= o.warmup) ms.push_back(t);
  }
  r.median_ms = median(ms);
  r.min_ms = ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end());
  r.params = model->num_parameters();
  r.ok = true;
  return r;
}

Timing time_torch(const std::string& kind, const BenchOptions& o, const Device& dev) {
  Timing r;
  if (o.torch == "off") {
    r.note = "skipped (--torch off)";
    return r;
  }
  const std::string script = std::string(TCN_SOURCE_DIR) + "/tools/bench_torch.py";
  std::string cmd = o.python + " -c 'import torch' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    r.note = "PyTorch not importable by " + o.python + " (apt-get install python3-torch)";
    return r;
  }
  cmd = o.python + " '" + script + "' --model " + kind + " --steps " + std::to_string(o.steps) + " --warmup " +
        std::to_string(o.warmup) + " --threads " + std::to_string(o.threads) + " --batch_size " +
        std::to_string(o.batch_size) + " --seq_len " + std::to_string(o.seq_len) + " --validseqlen " +
        std::to_string(o.validseqlen) + " --device " + dev.str();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    r.note = "could not start " + script;
    return r;
  }
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int rc = ::pclose(p);
  try {
    auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
    r.median_ms = j.at("ms_per_step_median");
    r.min_ms = j.at("ms_per_step_min");
    r.params = j.at("params");
    r.ok = rc == 0;
    r.note = "torch " + j.at("torch_version").get<std::string>();
  } catch (const std::exception& e) {
    r.note = "PyTorch benchmark failed (exit " + std::to_string(rc) + ")";
  }
  return r;
}

}  // namespace

int run_bench(const BenchOptions& o, const char*) {
  using namespace limits;
  check("--steps", o.steps, 1, kMaxBenchSteps);
  check("--warmup", o.warmup, 0, kMaxBenchSteps);
  check("--threads", o.threads, 1, kMaxThreads);
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check("--seq_len", o.seq_len, 1, kMaxSeqLen);
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  check("--generate_chars", o.generate_chars, 0, kMaxChars, " (0: skip)");
  TCN_CHECK(o.torch == "auto" || o.torch == "off", "--torch ", o.torch, ": expected auto or off");
  set_num_threads(o.threads);
  const Device dev = resolve_device(o.device);
  std::vector<std::string> kinds = o.model == "both" ? std::vector<std::string>{"tcn", "lstm"}
                                                     : std::vector<std::string>{o.model};
  std::printf("charlm bench: device %s, batch %lld, seq_len %lld (scored %lld), reference configs, vocab 50, "
              "%d threads, %lld timed steps after %lld warmup\n",
              dev.str().c_str(), static_cast<long long>(o.batch_size), static_cast<long long>(o.seq_len),
              static_cast<long long>(o.validseqlen), o.threads, static_cast<long long>(o.steps),
              static_cast<long long>(o.warmup));
  std::fflush(stdout);
  // The CPU GEMM libraries to time our steps with (the first is the headline row).
  std::vector<cpu::GemmLibrary> libs;
  if (!dev.is_cuda()) {
    TCN_CHECK(o.cpu_gemm == "both" || o.cpu_gemm == "onednn" || o.cpu_gemm == "openblas", "--cpu_gemm ", o.cpu_gemm,
              ": expected both, onednn or openblas");
    if (o.cpu_gemm != "openblas" && cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDNN);
    if (o.cpu_gemm != "onednn" || !cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OpenBLAS);
    TCN_CHECK(o.cpu_gemm != "onednn" || cpu::onednn_available(), "--cpu_gemm onednn: this build has no oneDNN");
  }
  const cpu::GemmLibrary before = cpu::gemm_library();
  struct Row {
    std::string kind, label;
    Timing ours, torch;
  };
  std::vector<Row> rows;
  for (const auto& k : kinds) {
    Timing torch = time_torch(k, o, dev);
    if (libs.empty()) rows.push_back({k, "", time_ours(k, o, dev, ""), torch});
    for (cpu::GemmLibrary lib : libs) {
      cpu::set_gemm_library(lib);
      const std::string label = std::string(" (") + cpu::gemm_library_name(lib) + ")";
      rows.push_back({k, label, time_ours(k, o, dev, label), torch});
    }
  }
  cpu::set_gemm_library(before);

  std::printf("\n| model | params | tcn ms/step | PyTorch ms/step | tcn / PyTorch | target | chars/s (tcn) | GEMM GFLOP/s of the step |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double target = r.kind == "tcn" ? 0.8 : 0.5;
    const double cps = static_cast<double>(o.batch_size * o.validseqlen) / (r.ours.median_ms / 1000);
    const std::string gflops =
        r.ours.gemm_gflop > 0 ? std::to_string(static_cast<int>(r.ours.gemm_gflop / (r.ours.median_ms / 1000))) : "-";
    const std::string name = r.kind + r.label;
    if (r.torch.ok)
      std::printf("| %s | %lld | %.1f | %.1f | %.2f | <= %.1f %s | %.0f | %s |\n", name.c_str(),
                  static_cast<long long>(r.ours.params), r.ours.median_ms, r.torch.median_ms,
                  r.ours.median_ms / r.torch.median_ms, target,
                  r.ours.median_ms / r.torch.median_ms <= target ? "(met)" : "(NOT met)", cps, gflops.c_str());
    else
      std::printf("| %s | %lld | %.1f | - | - | <= %.1f | %.0f | %s |  (%s)\n", name.c_str(),
                  static_cast<long long>(r.ours.params), r.ours.median_ms, target, cps, gflops.c_str(),
                  r.torch.note.c_str());
  }
  if (kinds.size() == 2) {
    const size_t per = rows.size() / 2;
    std::printf("\nTCN step / LSTM step (tcn framework%s): %.2f\n", rows[0].label.c_str(),
                rows[0].ours.median_ms / rows[per].ours.median_ms);
  }
  if (libs.size() == 2)
    for (size_t i = 0; i + 1 < rows.size(); i += 2)
      std::printf("%s step, oneDNN / OpenBLAS GEMMs: %.2f\n", rows[i].kind.c_str(),
                  rows[i].ours.median_ms / rows[i + 1].ours.median_ms);

  if (o.generate_chars > 0) {
    if (dev.is_cuda()) std::printf("\n(generation runs on the CPU, whatever --device says)\n");
    std::printf("\n| generation (untrained reference models, batch 1) | incremental chars/s | full recompute chars/s | speedup |\n|---|---|---|---|\n");
    for (const auto& k : kinds) {
      nlohmann::json cfg = k == "tcn" ? nn::TCNConfig{}.to_json() : nn::LSTMConfig{}.to_json();
      auto model = nn::make_char_lm(k, cfg, 1);
      double cps[2];
      for (int full = 0; full < 2; ++full) {
        auto st = full ? make_full_stepper(*model) : make_incremental_stepper(*model);
        auto t0 = Clock::now();
        for (int64_t i = 0; i < o.generate_chars; ++i) st->step(i % 50);
        cps[full] = static_cast<double>(o.generate_chars) / std::chrono::duration<double>(Clock::now() - t0).count();
      }
      std::printf("| %s, %lld chars | %.0f | %.0f | %.1fx |\n", k.c_str(), static_cast<long long>(o.generate_chars),
                  cps[0], cps[1], cps[0] / cps[1]);
    }
  }
  return 0;
}

}  // namespace charlm
