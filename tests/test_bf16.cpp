// bfloat16: conversion rounds to nearest, ties to even, keeps NaN and
// infinities; tensors convert, copy, fill and save; arithmetic ops refuse it
// with a message that says what to do.
#include <bit>
#include <cmath>
#include <limits>

#include "helpers.h"
#include "nn/safetensors.h"

using namespace tcn;

namespace {
float bits_to_float(uint32_t u) { return std::bit_cast<float>(u); }
uint16_t bf16_bits(float f) { return bfloat16(f).bits; }
}  // namespace

TEST_SUITE("bf16") {

TEST_CASE("float -> bfloat16 rounds to nearest, ties to even") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits(bits_to_float(0x3F808000)) == 0x3F80);  // 1 + 2^-8: halfway, the even neighbour is 1
  CHECK(bf16_bits(bits_to_float(0x3F818000)) == 0x3F82);  // 1 + 3 * 2^-8: halfway, the even neighbour is up
  CHECK(bf16_bits(bits_to_float(0x3F808001)) == 0x3F81);  // just above halfway: up
  CHECK(bf16_bits(bits_to_float(0x3F807FFF)) == 0x3F80);  // just below: down
  CHECK(bf16_bits(-2.5f) == 0xC020);
  CHECK(bf16_bits(0.0f) == 0x0000);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  CHECK(bf16_bits(bits_to_float(0x00010000)) == 0x0001);  // a subnormal is kept
  // Every bfloat16 converts to float and back to itself (all 65536 bit patterns; NaNs stay NaN).
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bfloat16::from_bits(static_cast<uint16_t>(b));
    if (std::isnan(f)) CHECK(std::isnan(static_cast<float>(bfloat16(f))));
    else CHECK(bf16_bits(f) == b);
  }
}

TEST_CASE("NaN stays NaN (quiet, sign kept), infinities stay infinite, overflow rounds to infinity") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bf16_bits(inf) == 0x7F80);
  CHECK(bf16_bits(-inf) == 0xFF80);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(static_cast<float>(bfloat16(qnan))));
  // A signalling NaN whose payload lives only in the low 16 bits must not become infinity.
  const float snan = bits_to_float(0x7F800001);
  CHECK(std::isnan(static_cast<float>(bfloat16(snan))));
  CHECK(std::signbit(static_cast<float>(bfloat16(bits_to_float(0xFF800001)))));
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);        // past the largest bf16 + half an ulp
  CHECK(bf16_bits(bits_to_float(0x7F7F7FFF)) == 0x7F7F);               // the largest bf16 stays finite
}

TEST_CASE("tensors convert to and from bfloat16 element by element, from strided views too") {
  Tensor x = test::rand_tensor({5, 7}, 11, true, -3, 3, DType::F32);  // non-contiguous
  Tensor b = x.to(DType::BF16);
  CHECK(b.dtype() == DType::BF16);
  CHECK(b.shape() == x.shape());
  const auto xs = x.to_vector<float>(), bs = b.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) CHECK(bs[i] == static_cast<float>(bfloat16(xs[i])));
  CHECK(b.to(DType::F32).to_vector<float>() == bs);
  CHECK(from_vector<int64_t>({0, -7, 256, 257}, {4}).to(DType::BF16).to_vector<float>() ==
        std::vector<float>{0, -7, 256, 256});  // 257 needs 9 significant bits: ties to even, 256
  Tensor f = empty({3}, {DType::BF16});
  fill_(f, 1.5);
  CHECK(f.to_vector<double>() == std::vector<double>{1.5, 1.5, 1.5});
  Tensor c = empty({7, 5}, {DType::BF16});
  copy_(c, b.t());
  CHECK(c.to_vector<float>() == b.t().contiguous().to_vector<float>());
}

TEST_CASE("the vectorised tensor conversion rounds every float exactly as bfloat16::round does") {
  // 2^22 bit patterns spread over all 2^32 (stride 1021, odd, so every low
  // 16-bit remainder and so every rounding case occurs), then the edge cases:
  // ties both ways, subnormals, the largest finite values, infinities, NaNs
  // with payloads in either half. Contiguous, so the branch-free row path
  // (ops/copy.cpp) converts it, in pieces across threads.
  std::vector<float> f;
  for (uint64_t i = 0; i < (uint64_t{1} << 22); ++i) f.push_back(bits_to_float(static_cast<uint32_t>(i * 1021u * 1024u + i)));
  for (uint32_t u : {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x00008000u, 0x00018000u, 0x807FFFFFu, 0x7F7F7FFFu,
                     0x7F7F8000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7F800001u, 0x7FC00000u, 0xFFFFFFFFu,
                     0x7F810000u, 0x80000000u})
    f.push_back(bits_to_float(u));
  Tensor t = from_vector<float>(f, {static_cast<int64_t>(f.size())});
  Tensor b = t.to(DType::BF16);
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(b.raw_data());
  int64_t wrong = 0;
  for (size_t i = 0; i < f.size(); ++i) wrong += bits[i] != bfloat16::round(f[i]);
  CHECK(wrong == 0);
}

TEST_CASE("bfloat16 tensors save and load as safetensors BF16; arithmetic on them is a clear error") {
  test::TempDir dir;
  Tensor b = test::rand_tensor({4, 3}, 12, false, -1, 1, DType::F32).to(DType::BF16);
  nn::save_safetensors(dir.file("b.safetensors"), {{"b", b}});
  nn::SafetensorsContents c = nn::load_safetensors(dir.file("b.safetensors"));
  CHECK(c.at("b").dtype() == DType::BF16);
  CHECK(c.at("b").to_vector<float>() == b.to_vector<float>());
  CHECK_ERROR(relu(b), "bfloat16 is a storage type in tcn");
  CHECK_ERROR(add(b, b), "bfloat16");
  // conv1d's GEMM path would have written float32 results into a bfloat16 output.
  const Tensor x = zeros({1, 5, 3}, {DType::BF16}), w = zeros({2, 3, 3}, {DType::BF16});
  CHECK_ERROR(conv1d(x, w, Tensor(), 1, 2), "conv1d: bfloat16 is a storage type in tcn");
}

TEST_CASE("copy_ converts between dtypes on the CPU, into strided views too") {
  Tensor x = test::rand_tensor({4, 6}, 13, false, -2, 2, DType::F32);
  Tensor dst = zeros({6, 4}, {DType::BF16});
  copy_(dst.t(), x);  // a transposed destination
  CHECK(dst.t().to_vector<float>() == x.to(DType::BF16).to_vector<float>());
  Tensor back = empty({4, 6}, {DType::F64});
  copy_(back, dst.t());
  CHECK(back.to_vector<double>() == dst.t().to(DType::F64).to_vector<double>());
}

}  // TEST_SUITE
