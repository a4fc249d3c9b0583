// bfloat16: the upper 16 bits of an IEEE float32 (1 sign, 8 exponent, 7
// mantissa bits): float32's range at 3 significant digits. A storage type in
// tcn: tensors of it are made by conversion (to(DType::BF16)), copied, saved and
// fed to the bf16 GEMMs of mixed precision (ops/autocast.h); arithmetic ops
// take float32. Conversion from float rounds to nearest, ties to even; NaN
// stays NaN (quiet, sign kept) and infinities stay infinite.
#pragma once

#include <bit>
#include <cstdint>

namespace tcn {

// Host and device (CUDA kernels convert and copy bf16 tensors with it).
#if defined(__CUDACC__)
#define TCN_BF16_HD __host__ __device__ __forceinline__
#else
#define TCN_BF16_HD
#endif

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  TCN_BF16_HD bfloat16(float f) : bits(round(f)) {}  // NOLINT: implicit, as float -> double is
  TCN_BF16_HD operator float() const { return from_u32(static_cast<uint32_t>(bits) << 16); }

  TCN_BF16_HD static uint32_t to_u32(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    return std::bit_cast<uint32_t>(f);
#endif
  }
  TCN_BF16_HD static float from_u32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    return std::bit_cast<float>(u);
#endif
  }
  TCN_BF16_HD static uint16_t round(float f) {
    const uint32_t u = to_u32(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet it
    // Round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate.
    // Overflow rounds up to infinity, as IEEE rounding does.
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  TCN_BF16_HD static bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
};
static_assert(sizeof(bfloat16) == 2);

}  // namespace tcn
