// Elementwise kernels: one strided map kernel for up to four operands (the
// output first), each with its own element strides (0 on broadcast dims), and
// the functors of core/math/functors.h for the math, shared with the CPU.
//
// Before a launch the geometry is simplified: size-1 dims are dropped and
// neighbouring dims merged wherever every operand steps through them as one,
// so a contiguous tensor is one dim, and a narrowed or broadcast one keeps only
// the dims it must. Index math is 64-bit division, the dearest part of a strided
// kernel on a GPU, so fewer dims is faster. When every operand is contiguous
// the kernel does no index math at all and moves 16 bytes per load and store
// where the pointers allow (map_contiguous_kernel).
#include <array>
#include <type_traits>

#include "cuda/context.cuh"
#include "cuda/kernels.h"
#include "core/math/cpu_loops.h"
#include "core/math/functors.h"

namespace tcn::cuda {

namespace {

constexpr int kMaxDims = 8;

// Shape and per-operand strides, passed to the kernel by value.
template <int N>
struct Geometry {
  int rank = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
};

template <int N>
__device__ __forceinline__ void element_offsets(const Geometry<N>& g, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t idx = i % g.sizes[d];
    i /= g.sizes[d];
    for (int k = 0; k < N; ++k) off[k] += idx * g.strides[k][d];
  }
}

// out[i] = f(in_0[i], ..., in_{K-1}[i]) over n elements.
template <class T, int K, class F>
__global__ void map_kernel(T* out, std::array<const T*, K> in, Geometry<K + 1> g, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[K + 1];
    element_offsets(g, i, off);
    if constexpr (K == 0) out[off[0]] = f();
    if constexpr (K == 1) out[off[0]] = f(in[0][off[1]]);
    if constexpr (K == 2) out[off[0]] = f(in[0][off[1]], in[1][off[2]]);
    if constexpr (K == 3) out[off[0]] = f(in[0][off[1]], in[1][off[2]], in[2][off[3]]);
  }
}

// The geometry of shape as seen through each operand's strides, simplified as
// the file's comment says.
template <int N>
Geometry<N> make_geometry(const Shape& shape, const std::array<Strides, N>& st) {
  TCN_CHECK(static_cast<int>(shape.size()) <= kMaxDims, "CUDA elementwise: rank ", shape.size(), " exceeds ", kMaxDims);
  Geometry<N> g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // contributes nothing to any offset
    const int r = g.rank - 1;
    bool merge = r >= 0;  // dim d continues dim r for every operand: one dim of size sizes[r] * shape[d]
    for (int k = 0; k < N && merge; ++k) merge = g.strides[k][r] == st[k][d] * shape[d];
    if (merge) {
      g.sizes[r] *= shape[d];
      for (int k = 0; k < N; ++k) g.strides[k][r] = st[k][d];
      continue;
    }
    g.sizes[g.rank] = shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][g.rank] = st[k][d];
    ++g.rank;
  }
  return g;
}

// Every operand reads or writes element i at offset i.
template <int N>
bool all_contiguous(const Geometry<N>& g) {
  if (g.rank == 0) return true;
  for (int k = 0; k < N; ++k)
    if (g.rank != 1 || g.strides[k][0] != 1) return false;
  return true;
}

// V consecutive elements, loaded or stored as one 16-byte access (V = 1: one element).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// f applied to element j of each operand's pack.
template <class T, int V, int K, class F>
__device__ __forceinline__ T apply_at(const F& f, const std::array<Pack<T, V>, K>& a, int j) {
  if constexpr (K == 0) return f();
  if constexpr (K == 1) return f(a[0].v[j]);
  if constexpr (K == 2) return f(a[0].v[j], a[1].v[j]);
  if constexpr (K == 3) return f(a[0].v[j], a[1].v[j], a[2].v[j]);
}

// out[i] = f(in_0[i], ...) for contiguous operands, V elements per access; the
// last n % V elements one at a time.
template <class T, int V, int K, class F>
__global__ void map_contiguous_kernel(T* out, std::array<const T*, K> in, int64_t n, F f) {
  const int64_t packs = n / V;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t p = first; p < packs; p += step) {
    std::array<Pack<T, V>, K> a;
    for (int k = 0; k < K; ++k) a[k] = reinterpret_cast<const Pack<T, V>*>(in[k])[p];
    Pack<T, V> r;
    for (int j = 0; j < V; ++j) r.v[j] = apply_at<T, V, K>(f, a, j);
    reinterpret_cast<Pack<T, V>*>(out)[p] = r;
  }
  for (int64_t i = packs * V + first; i < n; i += step) {
    std::array<Pack<T, 1>, K> a;
    for (int k = 0; k < K; ++k) a[k].v[0] = in[k][i];
    out[i] = apply_at<T, 1, K>(f, a, 0);
  }
}

template <class T, class F, class... In>
void launch_map(const Tensor& out, F f, const In&... in) {
  constexpr int K = sizeof...(In);
  const Shape& shape = out.shape();
  const Geometry<K + 1> g = make_geometry<K + 1>(
      shape, std::array<Strides, K + 1>{out.strides(), cpu::broadcast_strides(in.shape(), in.strides(), shape)...});
  const int64_t n = out.numel();
  if (n == 0) return;
  T* o = static_cast<T*>(out.raw_data());
  std::array<const T*, K> ptrs{static_cast<const T*>(in.raw_data())...};
  const int block = 256;
  cudaStream_t s = stream(out.device().index);
  if (all_contiguous(g)) {
    constexpr int V = sizeof(T) < 16 ? 16 / sizeof(T) : 1;
    bool aligned = reinterpret_cast<uintptr_t>(o) % 16 == 0;
    for (const T* p : ptrs) aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
    if (aligned)
      TCN_LAUNCH(grid_for((n + V - 1) / V, block), block, 0, s, map_contiguous_kernel<T, V, K>)(o, ptrs, n, f);
    else
      TCN_LAUNCH(grid_for(n, block), block, 0, s, map_contiguous_kernel<T, 1, K>)(o, ptrs, n, f);
  } else {
    TCN_LAUNCH(grid_for(n, block), block, 0, s, map_kernel<T, K>)(o, ptrs, g, n, f);
  }
  CUDA_CHECK(cudaGetLastError());
}

// The unary functor for an op, handed to fn (its scalar, if it takes one, is p).
template <class F>
F unary_functor(double p) {
  if constexpr (std::is_empty_v<F>) return F{};
  else return F{p};
}
template <class Fn>
void with_unary(UnaryOp op, double p, Fn&& fn) {
  switch (op) {
#define TCN_UNARY_CASE(Name) \
  case UnaryOp::Name: return fn(unary_functor<fn::Name>(p));
    TCN_UNARY_OPS(TCN_UNARY_CASE)
#undef TCN_UNARY_CASE
  }
}

template <class Op, class T>
struct UnaryFwd {
  Op op;
  __device__ T operator()(T x) const { return op.template fwd<T>(x); }
};
template <class Op, class T>
struct UnaryBwd {
  Op op;
  __device__ T operator()(T g, T x, T y) const { return op.template bwd<T>(g, x, y); }
};
template <class F, class T>
struct BinaryFn {
  F f;
  __device__ T operator()(T a, T b) const { return f(a, b); }
};
template <class T>
struct Identity {
  __device__ T operator()(T v) const { return v; }
};
template <class T>
struct Constant {
  T v;
  __device__ T operator()() const { return v; }
};
template <class T>
struct Axpy {
  T alpha;
  __device__ T operator()(T x, T y) const { return x + alpha * y; }
};
template <class T>
struct Scale {
  T s;
  __device__ T operator()(T x) const { return x * s; }
};

template <class D, class S>
__global__ void convert_kernel(D* out, const S* in, Geometry<2> g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    element_offsets(g, i, off);
    if constexpr (std::is_same_v<D, bfloat16> || std::is_same_v<S, bfloat16>)
      out[off[0]] = static_cast<D>(static_cast<float>(in[off[1]]));  // bf16 converts through float
    else
      out[off[0]] = static_cast<D>(in[off[1]]);
  }
}

template <class Fn>
void all_types(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    case DType::I64: return fn(int64_t{});
    case DType::BF16: return fn(bfloat16{});  // a storage type: converted through float
  }
  TCN_FAIL("CUDA convert: unknown dtype");
}

}  // namespace

void convert(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const Geometry<2> g = make_geometry<2>(dst.shape(), std::array<Strides, 2>{dst.strides(), src.strides()});
  all_types(dst.dtype(), [&](auto dtag) {
    all_types(src.dtype(), [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      TCN_LAUNCH(grid_for(n, 256), 256, 0, stream(dst.device().index), convert_kernel<D, S>)(
          static_cast<D*>(dst.raw_data()), static_cast<const S*>(src.raw_data()), g, n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void unary_forward(UnaryOp op, double p, const Tensor& y, const Tensor& x) {
  dispatch_float(x.dtype(), "cuda::unary_forward", [&]<class T>() {
    with_unary(op, p, [&](auto f) { launch_map<T>(y, UnaryFwd<decltype(f), T>{f}, x); });
  });
}

void unary_backward(UnaryOp op, double p, const Tensor& gx, const Tensor& g, const Tensor& x, const Tensor& y) {
  const Tensor& xs = x.defined() ? x : g;  // not read by ops that do not need them
  const Tensor& ys = y.defined() ? y : g;
  dispatch_float(g.dtype(), "cuda::unary_backward", [&]<class T>() {
    with_unary(op, p, [&](auto f) { launch_map<T>(gx, UnaryBwd<decltype(f), T>{f}, g, xs, ys); });
  });
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_float(a.dtype(), "cuda::binary", [&]<class T>() {
    switch (op) {
#define TCN_BINARY_CASE(Name) \
  case BinaryOp::Name: return launch_map<T>(out, BinaryFn<fn::Name, T>{}, a, b);
      TCN_BINARY_OPS(TCN_BINARY_CASE)
#undef TCN_BINARY_CASE
    }
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  switch (dst.dtype()) {
    case DType::F32: return launch_map<float>(dst, Identity<float>{}, src);
    case DType::F64: return launch_map<double>(dst, Identity<double>{}, src);
    case DType::I64: return launch_map<int64_t>(dst, Identity<int64_t>{}, src);
    case DType::BF16: return launch_map<bfloat16>(dst, Identity<bfloat16>{}, src);
  }
  TCN_FAIL("copy: unknown dtype");
}

void fill(const Tensor& x, double value) {
  switch (x.dtype()) {
    case DType::F32: return launch_map<float>(x, Constant<float>{static_cast<float>(value)});
    case DType::F64: return launch_map<double>(x, Constant<double>{value});
    case DType::I64: return launch_map<int64_t>(x, Constant<int64_t>{static_cast<int64_t>(value)});
    case DType::BF16: return launch_map<bfloat16>(x, Constant<bfloat16>{bfloat16(static_cast<float>(value))});
  }
  TCN_FAIL("fill: unknown dtype");
}

void add_inplace(const Tensor& x, const Tensor& y, double alpha) {
  dispatch_float(x.dtype(), "cuda::add_inplace", [&]<class T>() {
    launch_map<T>(x, Axpy<T>{static_cast<T>(alpha)}, x, y);
  });
}

void mul_inplace(const Tensor& x, const Tensor& s) { binary(BinaryOp::Mul, x, x, s); }

void mul_inplace(const Tensor& x, double s) {
  dispatch_float(x.dtype(), "cuda::mul_inplace", [&]<class T>() {
    launch_map<T>(x, Scale<T>{static_cast<T>(s)}, x);
  });
}

}  // namespace tcn::cuda
