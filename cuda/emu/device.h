// The CUDA device language for the host compiler (TCN_CUDA=EMU): what a .cu
// file of cuda/ needs to compile with g++ and run on the emulated device.
//
//   - __global__ / __device__ / __host__ / __forceinline__ / __launch_bounds__ vanish;
//   - __shared__ becomes `thread_local`: at block scope that is a static, one copy
//     per OS thread, and an OS thread runs one block at a time, so every CUDA
//     thread of a block sees the same array (as on the GPU) and each kernel has
//     its own;
//   - threadIdx / blockIdx / blockDim / gridDim are thread_local variables that
//     the scheduler (cuda/emu/scheduler.cpp) sets before it runs or resumes a
//     CUDA thread;
//   - __syncthreads, __syncwarp, shuffles and votes suspend the calling CUDA
//     thread (a fiber) until its block or warp has arrived, and check that all
//     of them arrived at the same call site with the same mask;
//   - atomics are std::atomic_ref, relaxed, as CUDA's are.
//
// Dynamic shared memory is `tcn::cuda::dynamic_shared<T>()` (cuda/device.cuh),
// valid CUDA as well, instead of `extern __shared__ T x[]` (which g++ cannot
// give per-kernel storage).
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __constant__
#define __launch_bounds__(...)
#define __shared__ thread_local
#define __align__(n) alignas(n)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// Set by the scheduler; read-only for kernels.
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
constexpr int warpSize = 32;

namespace tcn::emu {

enum class WarpOp { Sync, Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All };
enum class BarrierOp { Sync, Count, And, Or };

// Suspends the current CUDA thread at a block barrier; returns the barrier's
// reduction of `pred` (count, and, or) over the block.
int block_barrier(BarrierOp op, int pred, const char* file, int line);
// A warp collective over the lanes of `mask` (which must include the caller):
// returns this lane's result (the shuffled value's bits, or the vote).
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);
// The block's dynamic shared memory (the launch's `smem` bytes, poisoned with 0xFF).
void* dynamic_shared_memory();
unsigned active_mask();
// __trap(): the kernel stops and the device gets a sticky error.
[[noreturn]] void trap(const char* file, int line);

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffle of a type wider than 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace tcn::emu

// ---- barriers and warp collectives ------------------------------------------------
// Each takes its caller's file and line as defaulted arguments (what
// std::source_location gives, in a form clang 14 with libstdc++ 12 accepts too),
// for the emulator's messages about divergent barriers and deadlocks.
#define TCN_EMU_CALL_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()
inline void __syncthreads(TCN_EMU_CALL_SITE) {
  tcn::emu::block_barrier(tcn::emu::BarrierOp::Sync, 0, file, line);
}
inline int __syncthreads_count(int pred, TCN_EMU_CALL_SITE) {
  return tcn::emu::block_barrier(tcn::emu::BarrierOp::Count, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, TCN_EMU_CALL_SITE) {
  return tcn::emu::block_barrier(tcn::emu::BarrierOp::And, pred != 0, file, line);
}
inline int __syncthreads_or(int pred, TCN_EMU_CALL_SITE) {
  return tcn::emu::block_barrier(tcn::emu::BarrierOp::Or, pred != 0, file, line);
}
namespace tcn::emu {
template <class T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char* file, int line) {
  return from_bits<T>(warp_collective(op, mask, to_bits(v), arg, width, file, line));
}
inline uint64_t vote(WarpOp op, unsigned mask, int pred, const char* file, int line) {
  return warp_collective(op, mask, pred != 0, 0, warpSize, file, line);
}
}  // namespace tcn::emu

inline void __syncwarp(unsigned mask = 0xffffffffu, TCN_EMU_CALL_SITE) {
  tcn::emu::vote(tcn::emu::WarpOp::Sync, mask, 0, file, line);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = warpSize, TCN_EMU_CALL_SITE) {
  return tcn::emu::shuffle(tcn::emu::WarpOp::Shfl, mask, v, src, width, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize, TCN_EMU_CALL_SITE) {
  return tcn::emu::shuffle(tcn::emu::WarpOp::ShflUp, mask, v, static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize, TCN_EMU_CALL_SITE) {
  return tcn::emu::shuffle(tcn::emu::WarpOp::ShflDown, mask, v, static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, TCN_EMU_CALL_SITE) {
  return tcn::emu::shuffle(tcn::emu::WarpOp::ShflXor, mask, v, lane_mask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, TCN_EMU_CALL_SITE) {
  return static_cast<unsigned>(tcn::emu::vote(tcn::emu::WarpOp::Ballot, mask, pred, file, line));
}
inline int __any_sync(unsigned mask, int pred, TCN_EMU_CALL_SITE) {
  return static_cast<int>(tcn::emu::vote(tcn::emu::WarpOp::Any, mask, pred, file, line));
}
inline int __all_sync(unsigned mask, int pred, TCN_EMU_CALL_SITE) {
  return static_cast<int>(tcn::emu::vote(tcn::emu::WarpOp::All, mask, pred, file, line));
}
inline unsigned __activemask() { return tcn::emu::active_mask(); }
[[noreturn]] inline void __trap(TCN_EMU_CALL_SITE) {
  tcn::emu::trap(file, line);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- atomics (relaxed, as CUDA's; they return the old value) ------------------------
template <class T>
T atomicAdd(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <class T>
T atomicSub(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_sub(v, std::memory_order_relaxed);
}
template <class T>
T atomicExch(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed);
}
template <class T>
T atomicCAS(T* p, std::type_identity_t<T> expected, std::type_identity_t<T> desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;  // the old value either way
}
template <class T>
T atomicMax(T* p, std::type_identity_t<T> v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
T atomicMin(T* p, std::type_identity_t<T> v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
T atomicOr(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_or(v, std::memory_order_relaxed);
}
template <class T>
T atomicAnd(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_and(v, std::memory_order_relaxed);
}
template <class T>
T atomicXor(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_xor(v, std::memory_order_relaxed);
}

// ---- math intrinsics: computed by the host's libm (rounding differs from the GPU's) --
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline double __fma_rn(double x, double y, double z) { return std::fma(x, y, z); }
// Products and sums rounded on their own, never fused into an FMA: on a GPU nvcc
// never contracts these. The .cu files are compiled with -ffp-contract=fast
// (CMakeLists.txt), so the empty asm makes the operation's result a value of
// its own that a later add or multiply cannot fuse with.
template <class T>
inline T emu_rounded(T r) {
  asm("" : "+x"(r));
  return r;
}
inline float __fmul_rn(float x, float y) { return emu_rounded(x * y); }
inline float __fadd_rn(float x, float y) { return emu_rounded(x + y); }
inline double __dmul_rn(double x, double y) { return emu_rounded(x * y); }
inline double __dadd_rn(double x, double y) { return emu_rounded(x + y); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
// CUDA's global min/max overloads for arithmetic types.
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
