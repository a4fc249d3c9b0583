// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): a counter-based generator. Output = f(counter, key), so any element of
// a random stream can be computed independently, on the CPU or in a CUDA kernel,
// and a dropout mask can be regenerated in backward instead of stored.
//
// Stream layout used everywhere in tcn: for a Generator with seed s at offset o,
// element i of a request takes lane (i % 4) of philox(counter = o + i / 4, key = s),
// where the 64-bit counter fills the two low words of the 128-bit counter.
#pragma once

#include <cstdint>

// Host and device, always inlined: an elementwise functor must be inlined into
// each CPU loop to vectorise there (GCC leaves a large one, GELU's backward, as a call).
#if defined(__CUDACC__)
#define TCN_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define TCN_HD inline __attribute__((always_inline))
#else
#define TCN_HD inline
#endif

namespace tcn {

struct Philox4 {
  uint32_t v[4];
};

TCN_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// One call = 10 rounds over a 128-bit counter with a 64-bit key.
TCN_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(M0, c.v[0], hi0, lo0);
    philox_mulhilo(M1, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += W0;
    k1 += W1;
  }
  return c;
}

// The four 32-bit outputs for stream position `counter` under `seed`.
TCN_HD Philox4 philox_block(uint64_t seed, uint64_t counter) {
  Philox4 c{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A uniform float in [0, 1) from 32 random bits (24 bits of mantissa).
TCN_HD float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
// A uniform double in [0, 1) from 32 random bits.
TCN_HD double uint_to_unit_double(uint32_t x) { return static_cast<double>(x) * (1.0 / 4294967296.0); }

}  // namespace tcn
