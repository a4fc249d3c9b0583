// `charlm bench`: times full training steps (forward, backward, clip, SGD) of
// the reference TCN and LSTM on synthetic data, and the same steps of the same
// models in PyTorch in the same run when Debian's python3-torch is importable
// (tools/bench_torch.py), and prints the ratios. `--device cuda` runs both
// frameworks' steps on the GPU. Also times generation (on the CPU),
// incremental vs full recompute. On the CPU each of our steps is timed with
// oneDNN and OpenBLAS GEMMs, and in bf16; PyTorch's with the published locuslab
// model, the fastest faithful formulation ("lean"), and bf16 autocast; ratios
// are against the fastest PyTorch fp32 row of the same run.
#pragma once

#include <string>

namespace charlm {

struct BenchOptions {
  std::string model = "both", torch = "auto", python = "/usr/bin/python3";
  std::string device = "cpu";  // cpu, cuda[:N] or auto: where both frameworks' training steps run
  std::string cpu_gemm = "both";  // CPU steps timed with oneDNN and OpenBLAS GEMMs (both), or one of them
  std::string precision = "both";  // fp32, bf16 or both: our steps (and PyTorch's) in each
  std::string cuda_graph = "auto";  // on CUDA: each step one graph launch after the warm-up (core/step_graph.h)
  std::string conv_impl = "auto", lstm_impl = "fused";  // which conv1d path (winograd: CPU) and LSTM (core/backends.h)
  bool deterministic = false;                           // cuDNN: deterministic algorithms only
  int64_t steps = 5, warmup = 1, batch_size = 32, seq_len = 400, validseqlen = 320, generate_chars = 200;
  int threads = 2;
  int64_t profile = 0;  // after the timed steps, profile this many more of each of our rows (nn/profiler.h)
  std::string trace;    // with profile: a Chrome trace per row, FILE with "-<model>-<precision>-<impl>" before ".json"
};
int run_bench(const BenchOptions& opts, const char* argv0);

}  // namespace charlm
