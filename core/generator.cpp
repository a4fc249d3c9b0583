#include "core/generator.h"

#include "core/error.h"

namespace tcn {

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void Generator::set_shard(uint64_t rank, uint64_t world) {
  TCN_CHECK(world >= 1 && rank < world, "Generator::set_shard: rank ", rank, " of ", world, " processes");
  rank_ = rank;
  world_ = world;
}

uint64_t Generator::reserve_shard(uint64_t n) {
  // A counter yields 4 values, so a slice must start on a counter boundary.
  TCN_CHECK((rank_ * n) % 4 == 0, "dropout across ", world_, " processes: each process's share of ", n,
            " values must start on a multiple of 4 values (rank ", rank_, " starts at ", rank_ * n,
            "); use a per-process batch whose activations hold a multiple of 4 values");
  const uint64_t start = offset_;
  offset_ += (n * world_ + 3) / 4;
  return start + rank_ * n / 4;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace tcn
