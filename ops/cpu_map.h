// cpu_map: out[i] = f(in_0[i], in_1[i], ...) over out's shape, each input
// broadcast to it, every operand with its own strides. The elementwise ops,
// their backward kernels, copies and in-place updates are all one cpu_map.
#pragma once

#include <array>
#include <utility>

#include "tcn/core/tensor.h"
#include "tcn/ops/cpu_loops.h"

namespace tcn::cpu {

namespace detail {
template <class T, size_t K, class F, size_t... I>
inline void map_row(T* out, const std::array<const T*, K>& in, const std::array<int64_t, K + 1>& off,
                    int64_t n, const std::array<int64_t, K + 1>& inc, F& f, std::index_sequence<I...>) {
  T* o = out + off[0];
  const std::array<const T*, K> p{(in[I] + off[I + 1])...};
  if (inc[0] == 1 && ((inc[I + 1] == 1) && ...)) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(p[I][i]...);  // the vectorisable case
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * inc[0]] = f(p[I][i * inc[I + 1]]...);
  }
}
}  // namespace detail

template <class T, class F, class... In>
void cpu_map(const Tensor& out, F f, const In&... in) {
  constexpr size_t K = sizeof...(In);
  const Shape& shape = out.shape();
  std::array<Strides, K + 1> st{out.strides(), broadcast_strides(in.shape(), in.strides(), shape)...};
  T* o = out.data<T>();
  const std::array<const T*, K> p{in.template data<T>()...};
  for_each_row<K + 1>(shape, st, [&](const auto& off, int64_t n, const auto& inc) {
    detail::map_row<T, K>(o, p, off, n, inc, f, std::make_index_sequence<K>{});
  });
}

}  // namespace tcn::cpu
