// Philox 4x32-10 against the published known-answer vectors, and the stream
// contract: same seed and offset, same numbers; requests tile the stream.
#include <cmath>

#include "core/philox.h"
#include "helpers.h"

using namespace tcn;

TEST_SUITE("rng") {

TEST_CASE("Philox 4x32-10 known-answer vectors (Random123 kat_vectors)") {
  Philox4 z = philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  CHECK(z.v[0] == 0x6627e8d5u);
  CHECK(z.v[1] == 0xe169c58du);
  CHECK(z.v[2] == 0xbc57ac4cu);
  CHECK(z.v[3] == 0x9b00dbd8u);
  Philox4 f = philox4x32_10(Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  CHECK(f.v[0] == 0x408f276du);
  CHECK(f.v[1] == 0x41c83b0eu);
  CHECK(f.v[2] == 0xa20bc7c6u);
  CHECK(f.v[3] == 0x6d5451fdu);
  Philox4 p = philox4x32_10(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  CHECK(p.v[0] == 0xd16cfe09u);
  CHECK(p.v[1] == 0x94fdccebu);
  CHECK(p.v[2] == 0x5001e420u);
  CHECK(p.v[3] == 0x24126ea1u);
}

TEST_CASE("same seed and offset give the same stream; different seeds differ") {
  Generator g1(1234), g2(1234), g3(1235);
  Tensor a = rand({1000}, {}, g1), b = rand({1000}, {}, g2), c = rand({1000}, {}, g3);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  CHECK(g1.offset() == 250);
  // Restoring (seed, offset) replays the next tensor exactly.
  Tensor next = randn({37}, {DType::F64}, g1);
  Generator g4(1234, 250);
  CHECK(randn({37}, {DType::F64}, g4).to_vector<double>() == next.to_vector<double>());
}

TEST_CASE("consecutive requests tile one stream") {
  Generator whole(7), parts(7);
  auto all = rand({16}, {DType::F64}, whole).to_vector<double>();
  auto first = rand({8}, {DType::F64}, parts).to_vector<double>();
  auto second = rand({8}, {DType::F64}, parts).to_vector<double>();
  first.insert(first.end(), second.begin(), second.end());
  CHECK(first == all);
}

TEST_CASE("uniform range and normal moments") {
  Generator g(99);
  auto u = rand({200000}, {}, g).to_vector<float>();
  double mean = 0;
  int outside = 0;
  for (float v : u) {
    outside += v < 0.0f || v >= 1.0f;
    mean += v;
  }
  CHECK(outside == 0);
  CHECK(std::abs(mean / u.size() - 0.5) < 0.005);
  auto n = randn({200000}, {DType::F64}, g).to_vector<double>();
  double m = 0, s = 0;
  for (double v : n) m += v;
  m /= n.size();
  for (double v : n) s += (v - m) * (v - m);
  s = std::sqrt(s / n.size());
  CHECK(std::abs(m) < 0.01);
  CHECK(std::abs(s - 1.0) < 0.01);
  Tensor t = empty({5000});
  normal_(t, 3.0, 0.5, g);
  auto tv = t.to_vector<float>();
  double tm = 0;
  for (float v : tv) tm += v;
  CHECK(std::abs(tm / tv.size() - 3.0) < 0.05);
}

TEST_CASE("random fills of a strided view follow row-major order") {
  Generator g1(5), g2(5);
  Tensor base = zeros({4, 3});
  uniform_(base.t(), 0, 1, g1);  // fill the [3, 4] transposed view
  Tensor ref = rand({3, 4}, {}, g2);
  CHECK(base.t().to_vector<float>() == ref.to_vector<float>());
}

}  // TEST_SUITE
