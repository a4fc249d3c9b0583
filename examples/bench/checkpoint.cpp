// bench_checkpoint: how the safetensors reader and writer scale with the number
// of tensors in a file. A header is parsed once per load (`charlm --resume`,
// eval, the fuzzer), so it must be linear in its entries: a file of 10^5
// one-element tensors (a 7 MB header, under the 16 MiB header limit) must load
// in well under a second. Saves and loads files of N one-element float32
// tensors, for each N, and prints the seconds and the microseconds per tensor:
// the last column stays flat when both are linear.
//
//   build/bench_checkpoint --counts 10000,20000,40000,100000
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "nn/safetensors.h"
#include "ops/ops.h"

using namespace tcn;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"bench_checkpoint: safetensors save and load time against the number of tensors", "bench_checkpoint"};
  std::vector<int64_t> counts{10000, 20000, 40000, 100000};
  int reps = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  app.add_option("--counts", counts, "tensor counts to time")->delimiter(',')->capture_default_str();
  app.add_option("--reps", reps, "loads per count (the best is kept), in [1, 100]")->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--dir", dir, "where the files are written (and removed)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::printf("| tensors | header bytes | save s | load s (best of %d) | load us per tensor |\n|---|---|---|---|---|\n",
              reps);
  const std::string path = dir + "/bench_checkpoint.safetensors";
  for (const int64_t n : counts) {
    if (n < 1) {
      std::fprintf(stderr, "bench_checkpoint: error: --counts must be positive, got %lld\n", static_cast<long long>(n));
      return 2;
    }
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      tensors.emplace_back("layer." + std::to_string(i) + ".weight", full({1}, static_cast<double>(i)));
    const auto t0 = Clock::now();
    nn::save_safetensors(path, tensors);
    const double save_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double best = 1e30;
    size_t loaded = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t1 = Clock::now();
      const nn::SafetensorsContents c = nn::load_safetensors(path);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t1).count());
      loaded = c.tensors.size();
    }
    uint64_t header = 0;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      if (std::fread(&header, 8, 1, f) != 1) header = 0;
      std::fclose(f);
    }
    if (loaded != static_cast<size_t>(n)) {
      std::fprintf(stderr, "bench_checkpoint: error: saved %lld tensors, loaded %zu\n", static_cast<long long>(n),
                   loaded);
      return 1;
    }
    std::printf("| %lld | %llu | %.3f | %.3f | %.2f |\n", static_cast<long long>(n),
                static_cast<unsigned long long>(header), save_s, best, best * 1e6 / static_cast<double>(n));
    std::fflush(stdout);
  }
  std::filesystem::remove(path);
  return 0;
}
