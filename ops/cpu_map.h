// cpu_map: out[i] = f(in_0[i], in_1[i], ...) over out's shape, each input
// broadcast to it, every operand with its own strides. The elementwise ops,
// their backward kernels, copies and in-place updates are all one cpu_map.
#pragma once

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "core/tensor.h"
#include "core/math/cpu_loops.h"

namespace tcn::cpu {

namespace detail {
template <class T, size_t K, class F, size_t... I>
inline void map_row(T* out, const std::array<const T*, K>& in, const std::array<int64_t, K + 1>& off,
                    int64_t n, const std::array<int64_t, K + 1>& inc, const F& f_in, std::index_sequence<I...>) {
  T* o = out + off[0];
  const std::array<const T*, K> p{(in[I] + off[I + 1])...};
  // A local copy: the functor's scalars (a slope, an alpha) stay in registers
  // instead of being reloaded after every store through o.
  const F f = f_in;
  if (inc[0] == 1 && ((inc[I + 1] == 1) && ...)) {
    // The contiguous case, vectorised even where f branches (the activations'
    // two sides become a blend). Elementwise, so the values do not change.
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = f(p[I][i]...);
    return;
  }
  if constexpr (K > 0) {
    if (inc[0] == 1 && ((inc[I + 1] <= 1) && ...)) {
      // Some operands broadcast along the row (step 0, e.g. a scalar gradient
      // times dy): each is copied into a chunk-long buffer, so that every operand
      // is contiguous and the chunk's loop vectorises like the one above.
      constexpr int64_t kChunk = 256;
      alignas(64) T bcast[K][kChunk];
      std::array<const T*, K> q{};
      ((q[I] = inc[I + 1] == 1 ? p[I] : bcast[I]), ...);
      ((inc[I + 1] == 0 ? (void)std::fill_n(bcast[I], kChunk, p[I][0]) : (void)0), ...);
      for (int64_t start = 0; start < n; start += kChunk) {
        const int64_t len = n - start < kChunk ? n - start : kChunk;
        T* oc = o + start;
        const std::array<const T*, K> qc{(q[I] + (inc[I + 1] == 1 ? start : 0))...};
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) oc[i] = f(qc[I][i]...);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) o[i * inc[0]] = f(p[I][i * inc[I + 1]]...);  // strided
}
}  // namespace detail

// The same, with `rows(n, o, p...)` computing each contiguous row instead of
// the inline loop: a row function compiled per ISA (core/math/simd.h) for a hot op.
// cpu_map passes InlineRows: every row through detail::map_row.
struct InlineRows {};

template <class T, class F, class Rows, class... In>
void cpu_map_rows(const Tensor& out, F f, Rows rows, const In&... in) {
  constexpr size_t K = sizeof...(In);
  const Shape& shape = out.shape();
  std::array<Strides, K + 1> st{out.strides(), broadcast_strides(in.shape(), in.strides(), shape)...};
  T* o = out.data<T>();
  const std::array<const T*, K> p{in.template data<T>()...};
  for_each_row<K + 1>(shape, st, [&](const auto& off, int64_t n, const auto& inc) {
    if constexpr (!std::is_same_v<Rows, InlineRows>) {
      bool contiguous = true;
      for (int64_t step : inc) contiguous = contiguous && step == 1;
      if (contiguous) {
        [&]<size_t... I>(std::index_sequence<I...>) { rows(n, o + off[0], (p[I] + off[I + 1])...); }(
            std::make_index_sequence<K>{});
        return;
      }
    }
    detail::map_row<T, K>(o, p, off, n, inc, f, std::make_index_sequence<K>{});
  });
}

template <class T, class F, class... In>
void cpu_map(const Tensor& out, F f, const In&... in) {
  cpu_map_rows<T>(out, f, InlineRows{}, in...);
}

}  // namespace tcn::cpu
