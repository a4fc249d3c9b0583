// The CPU elementwise engine: visits every element of a shape for N operands
// with arbitrary element strides (0 for a broadcast dim), row by row.
//
//   for_each_row<3>(shape, {out_strides, a_strides, b_strides},
//                   [&](const auto& off, int64_t n, const auto& inc) {
//                     // operand k starts at element off[k] and steps by inc[k]
//                   });
//
// Adjacent dims that are contiguous for every operand are merged first, so a
// contiguous tensor is one long row and [B, T, C] + bias[C] is B*T rows of C.
// Rows are split across OpenMP threads when there is enough work, long rows
// cut into pieces first.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/shape.h"

namespace tcn::cpu {

constexpr int64_t kParallelGrain = 1 << 15;  // elements below which loops stay serial
constexpr int64_t kMinTasks = 16;             // rows are cut until there are this many (or pieces hit kMinPiece)
constexpr int64_t kMinPiece = 1 << 12;        // elements

template <size_t N, class RowFn>
void for_each_row(const Shape& shape_in, const std::array<Strides, N>& strides_in, RowFn&& row) {
  // Drop size-1 dims and merge dims that are contiguous in every operand.
  Shape shape;
  std::array<Strides, N> st;
  for (size_t d = 0; d < shape_in.size(); ++d) {
    if (shape_in[d] == 1) continue;
    bool merge = !shape.empty();
    for (size_t k = 0; merge && k < N; ++k) merge = st[k].back() == strides_in[k][d] * shape_in[d];
    if (merge) {
      shape.back() *= shape_in[d];
      for (size_t k = 0; k < N; ++k) st[k].back() = strides_in[k][d];
    } else {
      shape.push_back(shape_in[d]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(strides_in[k][d]);
    }
  }
  for (int64_t d : shape_in)
    if (d == 0) return;
  std::array<int64_t, N> off{}, inc{};
  if (shape.empty()) {  // a single element
    row(off, int64_t{1}, inc);
    return;
  }
  const int64_t n = shape.back();
  for (size_t k = 0; k < N; ++k) inc[k] = st[k].back();
  const int64_t outer = numel_of(shape) / n;
  const int64_t rank = static_cast<int64_t>(shape.size());
  // Few long rows (a contiguous tensor is a single one) are cut into pieces
  // so that they too spread over the threads; a row function sees a piece as
  // a shorter row that starts further along.
  const bool parallel = outer * n >= kParallelGrain;
  int64_t piece = n;
  if (parallel && outer < kMinTasks) {
    const int64_t per_row = (kMinTasks + outer - 1) / outer;
    piece = std::max(kMinPiece, ((n + per_row - 1) / per_row + 63) / 64 * 64);
  }
  const int64_t pieces = (n + piece - 1) / piece;  // per row
#pragma omp parallel for schedule(static) if (parallel && outer * pieces > 1)
  for (int64_t task = 0; task < outer * pieces; ++task) {
    const int64_t r = task / pieces, begin = (task % pieces) * piece;
    std::array<int64_t, N> o{};
    int64_t rem = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      int64_t i = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) o[k] += i * st[k][d];
    }
    for (size_t k = 0; k < N; ++k) o[k] += begin * inc[k];
    row(o, std::min(piece, n - begin), inc);
  }
}

// The strides of tensor geometry (shape, strides) broadcast to `out_shape`:
// missing leading dims and size-1 dims that are expanded get stride 0.
inline Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& out_shape) {
  Strides r(out_shape.size(), 0);
  size_t lead = out_shape.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    r[lead + i] = (shape[i] == 1 && out_shape[lead + i] != 1) ? 0 : strides[i];
  return r;
}

}  // namespace tcn::cpu
