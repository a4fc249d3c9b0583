#include "bench.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "examples/common/program.h"
#include "core/autocast.h"
#include "core/backends.h"
#include "core/step_graph.h"
#include "core/threads.h"
#include "core/devices.h"
#include "flags.h"
#include "generate.h"
#include "nn/optim.h"
#include "nn/profiler.h"
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
  // On the emulated device: what the timed steps asked of it, summed (the
  // bench's own wait at the end of each step taken out).
  cuda::DeviceCounters device;
  int64_t counted_steps = 0;
  std::string profile;  // the profiler's table of the steps after the timed ones (--profile)
  std::string graph;  // how the steps ran on CUDA (core/step_graph.h): one graph each, or eagerly and why
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
  StepGraph graph(parse_graph_mode(o.cuda_graph), dev, model->parameters());
  auto body = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(inp, o.validseqlen), tgt.narrow(1, hist, o.validseqlen));
    loss.backward();
    nn::clip_grad_norm_(model->parameters(), 0.15);
    opt.step();
    return loss;
  };
  std::vector<double> ms;
  // A CUDA graph is captured in the third step, or a little later when its
  // memory pool needed another eager step (core/step_graph.h): the warm-up
  // lasts until the steps are replays (or are known to stay eager).
  int64_t warmup = graph.enabled() ? std::max<int64_t>(o.warmup, 3) : o.warmup;
  for (int64_t s = 0; s < warmup + o.steps; ++s) {
    if (s == warmup && !graph.settled() && warmup < o.warmup + 8) ++warmup;
    std::vector<cpu::GemmCall> calls;
    if (s == warmup && !dev.is_cuda()) cpu::record_gemms(&calls);  // the first timed step: its GEMM FLOPs
    sync(dev);
    const bool count = dev.is_cuda() && cuda::counters_available() && s >= warmup;
    const cuda::DeviceCounters c0 = count ? cuda::counters() : cuda::DeviceCounters{};
    auto t0 = Clock::now();
    graph.run(0, body);  // on CUDA, from the third step on, one graph launch
    sync(dev);  // the step's queued work done: the clock covers all of it
    if (count) {
      cuda::DeviceCounters d = cuda::counters() - c0;
      d.host_syncs -= 1;  // the wait just above, the bench's own
      r.device = r.device + d;
      ++r.counted_steps;
    }
    double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    cpu::record_gemms(nullptr);
    for (const auto& c : calls) r.gemm_gflop += c.flops() / 1e9;
    std::fprintf(stderr, "  tcn %s%s step %lld: %.1f ms%s\n", kind.c_str(), label.c_str(), static_cast<long long>(s + 1),
                 t, s < warmup ? " (warmup)" : "");
    if (s >= warmup) ms.push_back(t);
  }
  if (o.profile > 0) {  // after the timed steps, so that they are as without it
    nn::Profiler prof(*model, dev);
    for (int64_t s = 0; s < o.profile; ++s) prof.step([&] { (void)graph.run(0, body); });
    r.profile = prof.finish().table();
    if (!o.trace.empty()) {
      std::string tag = label;  // " (fp32, oneDNN)" -> "-tcn-fp32-oneDNN"
      for (char& c : tag)
        if (c == ' ' || c == ',' || c == '(' || c == ')') c = '-';
      std::string clean = "-" + kind;
      for (char c : tag)
        if (c != '-' || clean.back() != '-') clean += c;
      while (clean.back() == '-') clean.pop_back();
      const size_t dot = o.trace.rfind('.');
      const bool ext = dot != std::string::npos && o.trace.find('/', dot) == std::string::npos;
      const std::string path = ext ? o.trace.substr(0, dot) + clean + o.trace.substr(dot) : o.trace + clean;
      prof.write_trace(path);
      r.profile += "trace written to " + path + "\n";
    }
  }
  r.median_ms = median(ms);
  r.min_ms = ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end());
  r.params = model->num_parameters();
  r.graph = graph.status();
  r.ok = true;
  return r;
}

Timing time_torch(const std::string& kind, const BenchOptions& o, const Device& dev, const std::string& variant,
                  const std::string& precision) {
  Timing r;
  if (o.torch == "off") {
    r.note = "skipped (--torch off)";
    return r;
  }
  // $TCN_SOURCE_DIR, when set, names the checkout to take the script from (the device bundle's binaries run
  // from another copy of the tree than the one they were built from).
  const char* root = std::getenv("TCN_SOURCE_DIR");
  const std::string script = std::string(root && *root ? root : TCN_SOURCE_DIR) + "/tools/bench_torch.py";
  std::string cmd = o.python + " -c 'import torch' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    r.note = "PyTorch not importable by " + o.python + " (apt-get install python3-torch)";
    return r;
  }
  cmd = o.python + " '" + script + "' --model " + kind + " --steps " + std::to_string(o.steps) + " --warmup " +
        std::to_string(o.warmup) + " --threads " + std::to_string(o.threads) + " --batch_size " +
        std::to_string(o.batch_size) + " --seq_len " + std::to_string(o.seq_len) + " --validseqlen " +
        std::to_string(o.validseqlen) + " --device " + dev.str() + " --variant " + variant + " --precision " + precision;
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

// The flags' ranges and choices, before anything runs.
void check_bench_options(const BenchOptions& o) {
  using namespace limits;
  check("--steps", o.steps, 1, kMaxBenchSteps);
  check("--warmup", o.warmup, 0, kMaxBenchSteps);
  check("--threads", o.threads, 1, kMaxThreads);
  check("--batch_size", o.batch_size, 1, kMaxBatch);
  check("--seq_len", o.seq_len, 1, kMaxSeqLen);
  TCN_CHECK(o.validseqlen > 0 && o.validseqlen <= o.seq_len, "--validseqlen ", o.validseqlen,
            " must be in [1, --seq_len = ", o.seq_len, "]");
  check("--generate_chars", o.generate_chars, 0, kMaxChars, " (0: skip)");
  check("--profile", o.profile, 0, kMaxBenchSteps, " (0: off)");
  if (!o.trace.empty()) program::check_output_path("--trace", o.trace);
  TCN_CHECK(o.torch == "auto" || o.torch == "off", "--torch ", o.torch, ": expected auto or off");
  (void)parse_graph_mode(o.cuda_graph);
  TCN_CHECK(o.cpu_gemm == "both" || o.cpu_gemm == "onednn" || o.cpu_gemm == "openblas", "--cpu_gemm ", o.cpu_gemm,
            ": expected both, onednn or openblas");
  TCN_CHECK(o.precision == "both" || o.precision == "fp32" || o.precision == "bf16" || o.precision == "tf32",
            "--precision ", o.precision, ": expected both, fp32, tf32 or bf16");
  TCN_CHECK(o.cpu_gemm != "onednn" || cpu::onednn_available(), "--cpu_gemm onednn: this build has no oneDNN");
}

// One of our rows: a precision, and on the CPU the GEMM library.
struct Config {
  Precision precision;
  cpu::GemmLibrary lib;
};

// bf16 runs on oneDNN only on the CPU (without it the bf16 GEMMs are widened to fp32:
// no point timing them twice). On CUDA the CPU's library plays no part, and the GPU's
// reduced precisions are TF32 and bf16.
std::vector<Config> our_configs(const BenchOptions& o, const Device& dev) {
  const bool fp32 = o.precision == "fp32" || o.precision == "both";
  const bool bf16 = o.precision == "bf16" || o.precision == "both";
  std::vector<Config> configs;
  if (dev.is_cuda()) {
    if (fp32) configs.push_back({Precision::FP32, cpu::gemm_library()});
    if (o.precision == "tf32" || o.precision == "both") configs.push_back({Precision::TF32, cpu::gemm_library()});
    if (bf16) configs.push_back({Precision::BF16, cpu::gemm_library()});
    return configs;
  }
  const bool dnnl = cpu::onednn_available() && o.cpu_gemm != "openblas";
  const bool blas = o.cpu_gemm != "onednn" || !cpu::onednn_available();
  if (fp32 && dnnl) configs.push_back({Precision::FP32, cpu::GemmLibrary::OneDNN});
  if (fp32 && blas) configs.push_back({Precision::FP32, cpu::GemmLibrary::OpenBLAS});
  if (bf16)
    configs.push_back({Precision::BF16, dnnl && cpu::onednn_bf16_available() ? cpu::GemmLibrary::OneDNN
                                                                              : cpu::GemmLibrary::OpenBLAS});
  return configs;
}

// PyTorch's rows for one model: the published locuslab formulation in fp32, for the
// TCN also the fastest faithful one (tools/bench_torch.py --variant lean), and on the
// CPU one in bf16 autocast (the LSTM is nn.LSTM either way).
struct TorchConfig {
  std::string variant, precision;
};
std::vector<TorchConfig> torch_configs(const std::string& kind, const BenchOptions& o, const Device& dev) {
  std::vector<TorchConfig> configs{{"published", "fp32"}};
  if (kind == "tcn") configs.push_back({"lean", "fp32"});
  if (o.precision != "fp32" && !dev.is_cuda()) configs.push_back({kind == "tcn" ? "lean" : "published", "bf16"});
  return configs;
}

struct Row {
  std::string kind, framework, variant, precision;
  Timing t;
};

// The conv paths a model's rows run: on the CPU the TCN gets a row per path when
// --conv_impl is auto (the GEMM path and the Winograd path, which auto takes for
// its wide convs), else the one asked for; the LSTM has no conv, and on CUDA the
// setting applies as given.
std::vector<ConvImpl> conv_paths(const std::string& kind, const BenchOptions& o, const Device& dev) {
  const ConvImpl asked = parse_conv_impl(o.conv_impl);
  if (kind != "tcn" || dev.is_cuda() || asked != ConvImpl::Auto) return {asked};
  return {ConvImpl::Gemm, ConvImpl::Winograd};
}

// Every row of every model: PyTorch's first, then ours.
std::vector<Row> time_rows(const std::vector<std::string>& kinds, const BenchOptions& o, const Device& dev) {
  const std::vector<Config> configs = our_configs(o, dev);
  const cpu::GemmLibrary before = cpu::gemm_library();
  std::vector<Row> rows;
  for (const auto& k : kinds) {
    for (const auto& c : torch_configs(k, o, dev))
      rows.push_back({k, "PyTorch", c.variant, c.precision, time_torch(k, o, dev, c.variant, c.precision)});
    for (const Config& c : configs)
      for (const ConvImpl conv : conv_paths(k, o, dev)) {
        cpu::set_gemm_library(c.lib);
        const Autocast scope(c.precision);
        const BackendsScope path(with_conv(conv));
        std::string impl = dev.is_cuda() ? "cuBLAS" : cpu::gemm_library_name(c.lib);
        if (k == "tcn" && !dev.is_cuda()) impl += std::string(", ") + conv_impl_name(conv);
        const std::string label = std::string(" (") + precision_name(c.precision) + ", " + impl + ")";
        rows.push_back({k, "tcn", impl, precision_name(c.precision), time_ours(k, o, dev, label)});
      }
  }
  cpu::set_gemm_library(before);
  return rows;
}

// The fastest timed row of a model, framework and precision (0: none).
double fastest(const std::vector<Row>& rows, const std::string& kind, const std::string& framework,
               const std::string& precision) {
  double best = 0;
  for (const Row& r : rows)
    if (r.kind == kind && r.framework == framework && r.precision == precision && r.t.ok &&
        (best == 0 || r.t.median_ms < best))
      best = r.t.median_ms;
  return best;
}

// The CPU speed targets (docs/cpu_performance.md), as ratios to the fastest PyTorch fp32 row (and bf16 row).
std::string target(const std::vector<Row>& rows, const Row& r, const Device& dev) {
  if (r.framework != "tcn" || dev.is_cuda()) return "";
  const double f32 = fastest(rows, r.kind, "PyTorch", "fp32"), b16 = fastest(rows, r.kind, "PyTorch", "bf16");
  if (f32 == 0) return "(no PyTorch row)";
  const double ratio = r.t.median_ms / f32;
  if (r.kind == "tcn" && r.precision == "fp32") return std::string("<= 0.60 ") + (ratio <= 0.6 ? "met" : "NOT met");
  if (r.kind == "tcn" && r.precision == "bf16") {
    const bool beats = b16 == 0 || r.t.median_ms < b16;
    return std::string("<= 0.35 and < PyTorch bf16: ") + (ratio <= 0.35 && beats ? "met" : "NOT met");
  }
  if (r.kind == "lstm" && r.precision == "fp32") return std::string("<= 0.20 ") + (ratio <= 0.2 ? "met" : "NOT met");
  return "";
}

void print_table(const std::vector<Row>& rows, const BenchOptions& o, const Device& dev) {
  std::printf("\n| model | framework | implementation | precision | params | ms/step (median) | / fastest PyTorch fp32 "
              "| chars/s | GEMM GFLOP/s of the step | target |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (!r.t.ok) {
      std::printf("| %s | %s | %s | %s | - | - | - | - | - | (%s) |\n", r.kind.c_str(), r.framework.c_str(),
                  r.variant.c_str(), r.precision.c_str(), r.t.note.c_str());
      continue;
    }
    const double f32 = fastest(rows, r.kind, "PyTorch", "fp32");
    const double cps = static_cast<double>(o.batch_size * o.validseqlen) / (r.t.median_ms / 1000);
    char ratio[32] = "-";  // rounded, not cut: 0.568 is 0.57
    if (f32 > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.t.median_ms / f32);
    const std::string gflops =
        r.t.gemm_gflop > 0 ? std::to_string(static_cast<int>(r.t.gemm_gflop / (r.t.median_ms / 1000))) : "-";
    std::printf("| %s | %s | %s | %s | %lld | %.1f | %s | %.0f | %s | %s |\n", r.kind.c_str(), r.framework.c_str(),
                r.variant.c_str(), r.precision.c_str(), static_cast<long long>(r.t.params), r.t.median_ms, ratio, cps,
                gflops.c_str(), target(rows, r, dev).c_str());
  }
}

// What our rows asked of the device per step (launches, GEMMs, syncs) and how their steps ran.
void print_cuda_counts(const std::vector<Row>& rows, const Device& dev) {
  std::printf("\n");
  for (const Row& r : rows)
    if (r.framework == "tcn" && r.t.ok)
      std::printf("%s (%s) per step on %s: %s\n", r.kind.c_str(), r.precision.c_str(),
                  cuda::emulated() ? "the EMULATED device" : (dev.str() + " (tcn's own calls)").c_str(),
                  r.t.device.per(r.t.counted_steps).c_str());
  for (const Row& r : rows)
    if (r.framework == "tcn" && r.t.ok) std::printf("%s (%s) steps: %s\n", r.kind.c_str(), r.precision.c_str(), r.t.graph.c_str());
}

// Characters per second of the untrained reference models, batch 1, streaming vs recomputing the window.
void print_generation(const std::vector<std::string>& kinds, const BenchOptions& o, const Device& dev) {
  if (dev.is_cuda()) std::printf("\n(generation runs on the CPU, whatever --device says)\n");
  std::printf("\n| generation (untrained reference models, batch 1) | incremental chars/s | full recompute chars/s | "
              "speedup |\n|---|---|---|---|\n");
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

}  // namespace

int run_bench(const BenchOptions& opts, const char*) {
  BenchOptions o = opts;
  if (!o.trace.empty() && o.profile == 0) o.profile = 3;
  check_bench_options(o);
  set_num_threads(o.threads);
  const Device dev = program::resolve_device(o.device, "charlm");
  if (o.precision != "both") (void)precision_for(o.precision, dev);  // tf32 needs CUDA
  apply_cuda_backends(o.conv_impl, o.lstm_impl, o.deterministic, dev);
  const std::vector<std::string> kinds =
      o.model == "both" ? std::vector<std::string>{"tcn", "lstm"} : std::vector<std::string>{o.model};
  std::printf("charlm bench: device %s, batch %lld, seq_len %lld (scored %lld), reference configs, vocab 50, "
              "%d threads, %lld timed steps after %lld warmup\n",
              dev.str().c_str(), static_cast<long long>(o.batch_size), static_cast<long long>(o.seq_len),
              static_cast<long long>(o.validseqlen), o.threads, static_cast<long long>(o.steps),
              static_cast<long long>(o.warmup));
  std::fflush(stdout);

  const std::vector<Row> rows = time_rows(kinds, o, dev);
  print_table(rows, o, dev);
  if (dev.is_cuda()) print_cuda_counts(rows, dev);
  for (const Row& r : rows)
    if (r.framework == "tcn" && r.t.ok && !r.t.profile.empty())
      std::printf("\n### profile: %s, %s, %s\n\n%s", r.kind.c_str(), r.precision.c_str(), r.variant.c_str(),
                  r.t.profile.c_str());
  const double lstm = fastest(rows, "lstm", "tcn", "fp32");
  if (kinds.size() == 2 && lstm > 0)
    std::printf("\nTCN step / LSTM step (tcn framework, fp32, fastest rows): %.2f\n",
                fastest(rows, "tcn", "tcn", "fp32") / lstm);
  if (o.generate_chars > 0) print_generation(kinds, o, dev);
  return 0;
}

}  // namespace charlm
