// A Generator is a Philox seed plus an offset into its stream. Each random op
// reserves the counters it needs (n elements use ceil(n / 4) counters) and
// advances the offset, so the same seed gives the same sequence of tensors on
// any device. Save (seed, offset) to resume a run exactly.
#pragma once

#include <cstdint>

namespace tcn {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Moves the offset on by `counters` (what a replayed CUDA graph drew: core/step_graph.h).
  void skip(uint64_t counters) { offset_ += counters; }
  // Reserves the counters for `n` random 32-bit values; returns the first counter.
  uint64_t reserve(uint64_t n) {
    uint64_t start = offset_;
    offset_ += (n + 3) / 4;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_;
};

// The process-wide default generator, used when an op is not given one.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tcn
