// core/math/cpu_loops.h: for_each_row visits every element of every operand exactly
// once, whatever the strides, and whether rows are merged, split across
// threads, or cut into pieces (a long contiguous row is cut; many short rows
// are not). The tests run with OMP_NUM_THREADS=2, so the parallel paths run.
#include <atomic>
#include <vector>

#include "helpers.h"
#include "core/math/cpu_loops.h"

using namespace tcn;

namespace {

// Counts, per element index of operand 0 (its strides given), how often a
// row visits it; operand 1 is checked to move in lockstep at its own strides.
std::vector<int> visits(const Shape& shape, const Strides& s0, const Strides& s1, int64_t span0) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(span0));
  std::atomic<int64_t> calls{0}, mismatches{0};
  cpu::for_each_row<2>(shape, {s0, s1}, [&](const auto& off, int64_t n, const auto& inc) {
    ++calls;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = off[0] + i * inc[0], b = off[1] + i * inc[1];
      // Operand 1 is laid out as operand 0 scaled by 3 (see the callers).
      if (b != 3 * a) ++mismatches;
      hits[static_cast<size_t>(a)]++;
    }
  });
  CHECK(mismatches.load() == 0);
  CHECK(calls.load() >= 1);
  std::vector<int> out(hits.size());
  for (size_t i = 0; i < hits.size(); ++i) out[i] = hits[i].load();
  return out;
}

Strides times(const Strides& s, int64_t k) {
  Strides r = s;
  for (auto& v : r) v *= k;
  return r;
}

}  // namespace

TEST_CASE("for_each_row: every element once, contiguous, long rows cut into pieces") {
  // One row of 1,000,003 elements (odd, so the last piece is short), and a
  // few long rows: both are cut into pieces and spread over the threads.
  for (const Shape& shape : {Shape{1000003}, Shape{3, 200001}, Shape{2, 5, 7}, Shape{1}}) {
    Strides s = contiguous_strides(shape);
    const int64_t n = numel_of(shape);
    std::vector<int> h = visits(shape, s, times(s, 3), n);
    int64_t wrong = 0;
    for (int v : h) wrong += v != 1;
    CHECK_MESSAGE(wrong == 0, "shape " << shape_str(shape));
  }
}

TEST_CASE("for_each_row: strided and broadcast operands") {
  // [4, 300, 97] inside a [4, 310, 97] buffer (a narrowed view): the inner
  // two dims merge into 4 rows of 29,100 elements, each cut into pieces.
  const Shape shape{4, 300, 97};
  const Strides s{310 * 97, 97, 1};
  std::vector<int> h = visits(shape, s, times(s, 3), 4 * 310 * 97);
  int64_t wrong = 0;
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 310; ++t)
      for (int64_t c = 0; c < 97; ++c) wrong += h[static_cast<size_t>((b * 310 + t) * 97 + c)] != (t < 300 ? 1 : 0);
  CHECK(wrong == 0);

  // A column walk (stride 50 in the last dim): one long strided row, cut.
  const Shape col{100000};
  const Strides cs{50};
  std::vector<int> hc = visits(col, cs, times(cs, 3), 100000 * 50);
  int64_t bad = 0;
  for (int64_t i = 0; i < 100000 * 50; ++i) bad += hc[static_cast<size_t>(i)] != (i % 50 == 0 ? 1 : 0);
  CHECK(bad == 0);

  // A broadcast operand (stride 0) sees the same element for every row.
  std::atomic<int64_t> sum{0};
  cpu::for_each_row<2>(Shape{64, 1024}, {Strides{1024, 1}, Strides{0, 1}}, [&](const auto& off, int64_t n, const auto& inc) {
    for (int64_t i = 0; i < n; ++i) sum += off[1] + i * inc[1];
  });
  CHECK(sum.load() == 64 * (1023 * 1024 / 2));
}

TEST_CASE("for_each_row: empty shapes visit nothing") {
  int calls = 0;
  cpu::for_each_row<1>(Shape{0, 5}, {Strides{5, 1}}, [&](const auto&, int64_t, const auto&) { ++calls; });
  cpu::for_each_row<1>(Shape{7, 0}, {Strides{1, 1}}, [&](const auto&, int64_t, const auto&) { ++calls; });
  CHECK(calls == 0);
}
