// The documented range of every numeric flag of charlm, and the checks that
// enforce them: a value outside its range (NaN and infinities included) is one
// tcn::Error naming the flag, the range and the value; nothing is clamped.
// The same constants give the ranges in the --help text (main.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "nn/models.h"

namespace charlm::limits {

// The model's own bounds (nn/models.h), so a flag and a checkpoint config agree.
constexpr int64_t kMaxWidth = tcn::nn::limits::kMaxWidth;    // --emsize, --nhid
constexpr int64_t kMaxLevels = tcn::nn::limits::kMaxLevels;  // --levels
constexpr int64_t kMaxLayers = tcn::nn::limits::kMaxLayers;  // --layers
constexpr int64_t kMaxKsize = tcn::nn::limits::kMaxKsize;    // --ksize
constexpr int64_t kMaxBatch = 100000;        // --batch_size, --eval_batch_size
constexpr int64_t kMaxSeqLen = 1000000;      // --seq_len
constexpr int64_t kMaxCount = 1000000000000;  // --max_steps, --eval_batches, --eval_interval, --save_every, ...
constexpr int64_t kMaxEpochs = 1000000;      // --epochs
constexpr int64_t kMaxThreads = 1024;        // --threads
constexpr int64_t kMaxChars = 100000000;     // generate -n, bench --generate_chars
constexpr int64_t kMaxBenchSteps = 1000000;  // bench --steps, --warmup
constexpr double kMaxLr = 1e30;              // --lr in (0, kMaxLr] (huge is allowed: a divergence test)
constexpr double kMaxClip = 1e6;             // --clip in [0, kMaxClip]
constexpr double kMaxTemperature = 1000;     // --temperature in (0, kMaxTemperature]

// "[lo, hi]" for the help text and the errors.
inline std::string range(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// An integer flag in [lo, hi]; `note` follows the range (e.g. "; 0: no limit").
inline void check(const char* flag, int64_t v, int64_t lo, int64_t hi, const char* note = "") {
  TCN_CHECK(v >= lo && v <= hi, flag, " must be in ", range(lo, hi), note, ", got ", v);
}

// A real flag in [lo, hi], or (lo, hi] with lo_open, or [lo, hi) with hi_open;
// NaN is outside every range.
inline void check_real(const char* flag, double v, double lo, double hi, bool lo_open, bool hi_open,
                       const char* note = "") {
  const bool ok = !std::isnan(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  TCN_CHECK(ok, flag, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]", note, ", got ", v);
}

}  // namespace charlm::limits
