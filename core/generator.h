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
    if (world_ > 1) return reserve_shard(n);
    uint64_t start = offset_;
    offset_ += (n + 3) / 4;
    return start;
  }
  // Data parallelism (nn/distributed.h): from now on each draw of n values is
  // this process's rows [rank * n, (rank + 1) * n) of a draw `world` times as
  // large, so `world` processes holding equal slices of a batch (along its
  // first dimension) draw together exactly what one process holding the whole
  // batch would. The offset advances by the whole draw on every rank.
  void set_shard(uint64_t rank, uint64_t world);
  uint64_t shard_world() const { return world_; }

 private:
  uint64_t reserve_shard(uint64_t n);
  uint64_t seed_;
  uint64_t offset_;
  uint64_t rank_ = 0, world_ = 1;
};

// The process-wide default generator, used when an op is not given one.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tcn
