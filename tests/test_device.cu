// The device language and runtime themselves: barriers, warp collectives,
// atomics, shared memory, launch checks, streams, events, stream capture and
// graph replay. Valid CUDA: built by nvcc these run on a GPU (and check that
// the emulator's rules are the GPU's); built with TCN_CUDA=EMU they run on the
// emulated device, together with the emulator-only checks at the end (the
// deferred queue, counters, and the bugs it must catch: divergent barriers,
// deadlocked warps, host pointers passed to kernels, kernel faults).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/common.h"
#include "cuda/device.cuh"
#include "core/devices.h"
#ifdef TCN_CUDA_EMU
#include "helpers.h"
#include "cuda/emu/emu.h"
#endif

namespace {

// ---- kernels --------------------------------------------------------------------------------
// out[blockIdx.x] = sum of in over the block's slice, by a shared-memory tree.
__global__ void block_sum_kernel(int64_t* out, const int64_t* in, int n) {
  __shared__ int64_t sh[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  sh[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

#ifdef TCN_CUDA_EMU
// The same tree without the barrier after the first write: a race (its tests are the emulator's).
__global__ void racy_block_sum_kernel(int64_t* out, const int64_t* in, int n) {
  __shared__ int64_t sh[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  sh[threadIdx.x] = i < n ? in[i] : 0;  // planted: block-sum write
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];  // planted: block-sum read
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}
#endif

__global__ void barrier_votes_kernel(int* out) {
  const int odd = threadIdx.x % 2;
  out[0] = __syncthreads_count(odd);
  out[1] = __syncthreads_and(threadIdx.x < 1000);
  out[2] = __syncthreads_or(threadIdx.x == 77);
}

// Per warp: the sum by __shfl_down_sync, a butterfly max by __shfl_xor_sync, a
// broadcast of lane 3, an inclusive scan by __shfl_up_sync, votes.
__global__ void warp_kernel(int* sums, int* maxes, int* bcast, int* scan, unsigned* ballots, int* any_all) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int v = static_cast<int>(threadIdx.x) * 3 + 1;
  int s = v;
  for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
  if (lane == 0) sums[warp] = s;
  int m = v;
  for (int d = 1; d < 32; d <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, d));
  maxes[threadIdx.x] = m;
  bcast[threadIdx.x] = __shfl_sync(0xffffffffu, v, 3);
  int x = v;
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  scan[threadIdx.x] = x;
  const unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
  if (lane == 0) ballots[warp] = b;
  const int a = __any_sync(0xffffffffu, lane == 31), l = __all_sync(0xffffffffu, lane < 31);
  if (lane == 0) any_all[warp] = a * 10 + l;
}

// Shuffles within segments of 8 lanes, and a partial mask (the low half-warp).
__global__ void warp_width_kernel(int* seg_sums, int* half) {
  const int lane = threadIdx.x % 32;
  int s = lane;
  for (int d = 4; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d, 8);
  seg_sums[threadIdx.x] = s;
  if (lane < 16) half[lane] = __shfl_sync(0x0000ffffu, lane * 10, 15);
}

__global__ void atomics_kernel(float* fsum, unsigned long long* count, int* imax, int* cas_winner) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(fsum, 0.5f);
  atomicAdd(count, 1ull);
  atomicMax(imax, g);
  atomicCAS(cas_winner, -1, g);  // exactly one thread wins
}

__global__ void dynamic_smem_kernel(float* out) {
  float* sh = tcn::cuda::dynamic_shared<float>();
  sh[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

__global__ void coords_kernel(int* out) {
  const int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = static_cast<int>(blockIdx.x * 1000000 + blockIdx.y * 100000 + blockIdx.z * 10000 +
                                     threadIdx.x * 100 + threadIdx.y * 10 + threadIdx.z);
}

__global__ void add_kernel(int* x, int v) { x[threadIdx.x] += v; }

template <class T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

const bool kNoDevice = !tcn::cuda::is_available();

}  // namespace

TEST_SUITE("device") {

TEST_CASE("a shared-memory tree reduction with barriers, over many blocks" * doctest::skip(kNoDevice)) {
  const int n = 256 * 37 + 11, blocks = 38;
  std::vector<int64_t> h(n);
  for (int i = 0; i < n; ++i) h[i] = i % 1000 - 300;
  int64_t* in = device_alloc<int64_t>(n);
  int64_t* out = device_alloc<int64_t>(blocks);
  CUDA_CHECK(cudaMemcpy(in, h.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
  TCN_LAUNCH(blocks, 256, 0, nullptr, block_sum_kernel)(out, in, n);
  CUDA_CHECK(cudaGetLastError());
  std::vector<int64_t> got = download(out, blocks);
  for (int b = 0; b < blocks; ++b) {
    int64_t want = 0;
    for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) want += h[i];
    CHECK(got[b] == want);
  }
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
}

TEST_CASE("__syncthreads_count / _and / _or reduce over the block" * doctest::skip(kNoDevice)) {
  int* out = device_alloc<int>(3);
  TCN_LAUNCH(1, 300, 0, nullptr, barrier_votes_kernel)(out);
  CUDA_CHECK(cudaGetLastError());
  CHECK(download(out, 3) == std::vector<int>{150, 1, 1});
  CUDA_CHECK(cudaFree(out));
}

TEST_CASE("warp shuffles and votes" * doctest::skip(kNoDevice)) {
  const int nt = 64;
  int *sums = device_alloc<int>(2), *maxes = device_alloc<int>(nt), *bcast = device_alloc<int>(nt);
  int *scan = device_alloc<int>(nt), *any_all = device_alloc<int>(2);
  unsigned* ballots = device_alloc<unsigned>(2);
  TCN_LAUNCH(1, nt, 0, nullptr, warp_kernel)(sums, maxes, bcast, scan, ballots, any_all);
  CUDA_CHECK(cudaGetLastError());
  auto hs = download(sums, 2), hm = download(maxes, nt), hb = download(bcast, nt), hc = download(scan, nt);
  auto hv = download(ballots, 2);
  auto ha = download(any_all, 2);
  unsigned every_third = 0;
  for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
  for (int w = 0; w < 2; ++w) {
    int want = 0, run = 0;
    for (int l = 0; l < 32; ++l) want += (w * 32 + l) * 3 + 1;
    CHECK(hs[w] == want);
    CHECK(hv[w] == every_third);
    CHECK(ha[w] == 10);  // any(lane == 31) = 1, all(lane < 31) = 0
    for (int l = 0; l < 32; ++l) {
      const int t = w * 32 + l;
      run += t * 3 + 1;
      CHECK(hm[t] == (w * 32 + 31) * 3 + 1);
      CHECK(hb[t] == (w * 32 + 3) * 3 + 1);
      CHECK(hc[t] == run);
    }
  }
  for (void* p : {static_cast<void*>(sums), static_cast<void*>(maxes), static_cast<void*>(bcast),
                  static_cast<void*>(scan), static_cast<void*>(any_all), static_cast<void*>(ballots)})
    CUDA_CHECK(cudaFree(p));
}

TEST_CASE("shuffles within a width, and with a partial mask" * doctest::skip(kNoDevice)) {
  int* seg = device_alloc<int>(32);
  int* half = device_alloc<int>(16);
  TCN_LAUNCH(1, 32, 0, nullptr, warp_width_kernel)(seg, half);
  CUDA_CHECK(cudaGetLastError());
  auto hs = download(seg, 32), hh = download(half, 16);
  for (int l = 0; l < 32; l += 8) CHECK(hs[l] == 8 * l + 28);  // lanes l..l+7 summed into the segment's first
  for (int l = 0; l < 16; ++l) CHECK(hh[l] == 150);
  CUDA_CHECK(cudaFree(seg));
  CUDA_CHECK(cudaFree(half));
}

TEST_CASE("atomics from many blocks" * doctest::skip(kNoDevice)) {
  float* fsum = device_alloc<float>(1);
  unsigned long long* count = device_alloc<unsigned long long>(1);
  int *imax = device_alloc<int>(1), *winner = device_alloc<int>(1);
  CUDA_CHECK(cudaMemset(fsum, 0, sizeof(float)));
  CUDA_CHECK(cudaMemset(count, 0, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemset(imax, 0, sizeof(int)));
  CUDA_CHECK(cudaMemset(winner, 0xFF, sizeof(int)));  // -1
  const int blocks = 64, threads = 128;
  TCN_LAUNCH(blocks, threads, 0, nullptr, atomics_kernel)(fsum, count, imax, winner);
  CUDA_CHECK(cudaGetLastError());
  CHECK(download(fsum, 1)[0] == doctest::Approx(0.5 * blocks * threads));
  CHECK(download(count, 1)[0] == static_cast<unsigned long long>(blocks * threads));
  CHECK(download(imax, 1)[0] == blocks * threads - 1);
  const int w = download(winner, 1)[0];
  CHECK(w >= 0);
  CHECK(w < blocks * threads);
  for (void* p : {static_cast<void*>(fsum), static_cast<void*>(count), static_cast<void*>(imax),
                  static_cast<void*>(winner)})
    CUDA_CHECK(cudaFree(p));
}

TEST_CASE("dynamic shared memory and 3-D grids" * doctest::skip(kNoDevice)) {
  float* out = device_alloc<float>(100);
  TCN_LAUNCH(1, 100, 100 * sizeof(float), nullptr, dynamic_smem_kernel)(out);
  CUDA_CHECK(cudaGetLastError());
  auto h = download(out, 100);
  for (int t = 0; t < 100; ++t) CHECK(h[t] == static_cast<float>(99 - t));
  CUDA_CHECK(cudaFree(out));

  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int total = 12 * 24;
  int* c = device_alloc<int>(total);
  TCN_LAUNCH(grid, block, 0, nullptr, coords_kernel)(c);
  CUDA_CHECK(cudaGetLastError());
  auto hc = download(c, total);
  int i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx)
              CHECK(hc[i++] == static_cast<int>(bx * 1000000 + by * 100000 + bz * 10000 + tx * 100 + ty * 10 + tz));
  CUDA_CHECK(cudaFree(c));
}

TEST_CASE("launch configurations are checked as the GPU checks them" * doctest::skip(kNoDevice)) {
  int* x = device_alloc<int>(1024);
  TCN_LAUNCH(1, 1025, 0, nullptr, add_kernel)(x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  TCN_LAUNCH(0, 32, 0, nullptr, add_kernel)(x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  TCN_LAUNCH(dim3(1, 65536), 32, 0, nullptr, add_kernel)(x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  TCN_LAUNCH(1, dim3(2, 2, 65), 0, nullptr, add_kernel)(x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  TCN_LAUNCH(1, 32, 1 << 20, nullptr, dynamic_smem_kernel)(reinterpret_cast<float*>(x));
  CHECK(cudaGetLastError() != cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);  // those errors are not sticky
  CUDA_CHECK(cudaFree(x));
}

TEST_CASE("streams, events and pinned copies" * doctest::skip(kNoDevice)) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), 32 * sizeof(int)));
  for (int i = 0; i < 32; ++i) pinned[i] = i;
  int* d = device_alloc<int>(32);
  CUDA_CHECK(cudaEventRecord(a, s));
  CUDA_CHECK(cudaMemcpyAsync(d, pinned, 32 * sizeof(int), cudaMemcpyHostToDevice, s));
  TCN_LAUNCH(1, 32, 0, s, add_kernel)(d, 100);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaEventRecord(b, s));
  CUDA_CHECK(cudaEventSynchronize(b));
  for (int i = 0; i < 32; ++i) CHECK(pinned[i] == i + 100);
  float ms = -1;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(ms >= 0);
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("stream capture records launches with their arguments; a graph replays them" * doctest::skip(kNoDevice)) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  int* d = device_alloc<int>(8);
  CUDA_CHECK(cudaMemsetAsync(d, 0, 8 * sizeof(int), s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int v = 1;
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, v);
  v = 1000;  // parameters were copied at the launch: the graph keeps adding 1
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 2);
  CUDA_CHECK(cudaGetLastError());
  cudaStreamCaptureStatus status;
  CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes == 2);
  CHECK(download(d, 8) == std::vector<int>(8, 0));  // capturing ran nothing
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 3; ++r) CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(download(d, 8) == std::vector<int>(8, 9));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("calls that CUDA forbids during capture fail and invalidate it" * doctest::skip(kNoDevice)) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  int* d = device_alloc<int>(8);
  std::vector<int> host(8);
  auto forbidden = [&](const char* what, auto call) {
    INFO(what);
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 1);
    CHECK(call() != cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();
  };
  forbidden("cudaMalloc", [] {
    void* p = nullptr;
    return cudaMalloc(&p, 64);
  });
  forbidden("synchronous cudaMemcpy", [&] {
    return cudaMemcpy(host.data(), d, 8 * sizeof(int), cudaMemcpyDeviceToHost);
  });
  forbidden("cudaStreamSynchronize", [&] { return cudaStreamSynchronize(s); });
  forbidden("cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); });
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaStreamDestroy(s));
}

#ifdef TCN_CUDA_EMU
// ---- emulator-only: what a GPU does not promise, or would not survive -------------------------

TEST_CASE("emulated: queued work runs only when the host waits for it") {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), 8 * sizeof(int)));
  int* d = device_alloc<int>(8);
  CUDA_CHECK(cudaMemsetAsync(d, 0, 8 * sizeof(int), s));
  for (int i = 0; i < 8; ++i) pinned[i] = -7;
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 5);
  CUDA_CHECK(cudaMemcpyAsync(pinned, d, 8 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(pinned[0] == -7);  // read before the stream was waited for: stale, as a GPU may show
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(pinned[0] == 5);
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("emulated: counters of launches, host syncs, uploads and allocations") {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  int* d = device_alloc<int>(8);
  std::vector<int> host(8, 1);
  tcn::emu::reset_counters();
  CUDA_CHECK(cudaMemcpyAsync(d, host.data(), 8 * sizeof(int), cudaMemcpyHostToDevice, s));  // pageable: staged
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 1);
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 1);
  tcn::emu::Counters c = tcn::emu::counters();
  CHECK(c.launches == 2);
  CHECK(c.kernels_run == 0);  // queued, not run
  CHECK(c.host_syncs == 0);
  CHECK(c.pageable_uploads == 1);
  CHECK(download(d, 8) == std::vector<int>(8, 3));
  c = tcn::emu::counters();
  CHECK(c.kernels_run == 2);
  CHECK(c.host_syncs == 1);
  CHECK(c.sync_d2h_copies == 1);

  cudaGraph_t g;
  cudaGraphExec_t e;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  TCN_LAUNCH(1, 8, 0, s, add_kernel)(d, 1);
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  tcn::emu::reset_counters();
  CUDA_CHECK(cudaGraphLaunch(e, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  c = tcn::emu::counters();
  CHECK(c.launches == 0);
  CHECK(c.graph_launches == 1);
  CHECK(c.kernels_run == 1);
  CHECK(c.stream_syncs == 1);
  CHECK(c.allocations == 0);
  CHECK(tcn::emu::format_counters(c).find("1 graph launches") != std::string::npos);
  CUDA_CHECK(cudaGraphExecDestroy(e));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("emulated: a missing barrier is caught by some resume order") {
  const int n = 256;
  std::vector<int64_t> h(n, 1);
  int64_t* in = device_alloc<int64_t>(n);
  int64_t* out = device_alloc<int64_t>(1);
  CUDA_CHECK(cudaMemcpy(in, h.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
  const tcn::emu::Order saved = tcn::emu::order();
  int wrong = 0;
  for (auto o : {tcn::emu::Order::Forward, tcn::emu::Order::Reverse, tcn::emu::Order::Random}) {
    tcn::emu::set_order(o);
    TCN_LAUNCH(1, n, 0, nullptr, block_sum_kernel)(out, in, n);
    CHECK(download(out, 1)[0] == n);  // the correct kernel is right in every order
    if (tcn::emu::racecheck()) continue;  // there the race is reported in a child (the racecheck test case)
    TCN_LAUNCH(1, n, 0, nullptr, racy_block_sum_kernel)(out, in, n);
    wrong += download(out, 1)[0] != n;
  }
  tcn::emu::set_order(saved);
  if (tcn::emu::racecheck())
    MESSAGE("racecheck build: the racy kernel runs only in the racecheck test case's child processes");
  else
    CHECK(wrong >= 1);
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
}

TEST_CASE("emulated: copies are checked against where their pointers live") {
  std::vector<float> host(16, 1.0f), back(16, 0.0f);
  float* d = device_alloc<float>(16);
  CHECK(cudaMemcpy(host.data(), back.data(), 16 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d, host.data(), 16 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  cudaGetLastError();
  CUDA_CHECK(cudaMemcpy(d, host.data(), 16 * sizeof(float), cudaMemcpyDefault));  // inferred: host to device
  CUDA_CHECK(cudaMemcpy(back.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(back == host);
  CUDA_CHECK(cudaFree(d));
}

TEST_CASE("emulated: out of memory is a clear error") {
  const size_t saved = tcn::emu::memory_limit();
  tcn::emu::set_memory_limit(size_t{1} << 20);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, size_t{2} << 20) == cudaErrorMemoryAllocation);
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)).find("cudaMalloc of 2097152 bytes") !=
        std::string::npos);
  cudaGetLastError();
  tcn::emu::set_memory_limit(saved);
}

namespace {

__global__ void trap_kernel(int* x) {
  if (threadIdx.x == 3) __trap();
  x[threadIdx.x] = 1;
}

__global__ void divergent_barrier_kernel(int* x) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1;
}

__global__ void exited_lane_kernel(int* x) {
  if (threadIdx.x == 5) return;
  x[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0);
}

// Runs `body` in a child process; returns what it wrote to stderr, and whether
// it died by SIGABRT.
std::string in_child(void (*body)(), bool* aborted) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  tcn::emu::before_fork();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL);  // not doctest's crash handler: the child must die of it
    dup2(fds[1], 2);
    close(fds[0]);
    tcn::emu::set_threads(1);  // no OpenMP pool in a forked child
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  ssize_t k;
  while ((k = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(k));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return err;
}

// ---- planted races, each beside its correct twin (racecheck builds) ----
// A block reads what the next block of the same launch writes: blocks are unordered.
__global__ void racy_blocks_kernel(int* x, int* out) {
  if (threadIdx.x == 0) x[blockIdx.x] = static_cast<int>(blockIdx.x);          // planted: blocks write
  if (threadIdx.x == 0) out[blockIdx.x] = x[(blockIdx.x + 1) % gridDim.x];  // planted: blocks read
}
__global__ void write_blocks_kernel(int* x) {
  if (threadIdx.x == 0) x[blockIdx.x] = static_cast<int>(blockIdx.x);
}
__global__ void read_blocks_kernel(const int* x, int* out) {  // a second launch: ordered after the first
  if (threadIdx.x == 0) out[blockIdx.x] = x[(blockIdx.x + 1) % gridDim.x];
}
// Lanes read their neighbour's shared slot without a __syncwarp between.
__global__ void racy_warp_kernel(int* out) {
  __shared__ int sh[32];
  const unsigned lane = threadIdx.x % 32;
  sh[lane] = static_cast<int>(lane);  // planted: warp write
  out[blockIdx.x * 32 + lane] = sh[(lane + 1) % 32];  // planted: warp read
}
__global__ void synced_warp_kernel(int* out) {
  __shared__ int sh[32];
  const unsigned lane = threadIdx.x % 32;
  sh[lane] = static_cast<int>(lane);
  __syncwarp();
  out[blockIdx.x * 32 + lane] = sh[(lane + 1) % 32];
}

tcn::emu::Order g_child_order = tcn::emu::Order::Forward;

template <class Launch>
void run_on_fresh_memory(int ints, Launch launch) {
  tcn::emu::set_order(g_child_order);
  int *a = nullptr, *b = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&a), ints * sizeof(int));
  cudaMalloc(reinterpret_cast<void**>(&b), ints * sizeof(int));
  launch(a, b);
  cudaDeviceSynchronize();
}
void run_racy_block_sum() {
  run_on_fresh_memory(256, [](int*, int*) {
    int64_t *in = nullptr, *out = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&in), 256 * sizeof(int64_t));
    cudaMalloc(reinterpret_cast<void**>(&out), sizeof(int64_t));
    cudaMemset(in, 0, 256 * sizeof(int64_t));
    TCN_LAUNCH(1, 256, 0, nullptr, racy_block_sum_kernel)(out, in, 256);
  });
}
void run_block_sum() {
  run_on_fresh_memory(256, [](int*, int*) {
    int64_t *in = nullptr, *out = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&in), 512 * sizeof(int64_t));
    cudaMalloc(reinterpret_cast<void**>(&out), 2 * sizeof(int64_t));
    cudaMemset(in, 0, 512 * sizeof(int64_t));
    TCN_LAUNCH(2, 256, 0, nullptr, block_sum_kernel)(out, in, 512);
  });
}
void run_racy_blocks() {
  run_on_fresh_memory(8, [](int* x, int* out) { TCN_LAUNCH(8, 32, 0, nullptr, racy_blocks_kernel)(x, out); });
}
void run_ordered_blocks() {
  run_on_fresh_memory(8, [](int* x, int* out) {
    TCN_LAUNCH(8, 32, 0, nullptr, write_blocks_kernel)(x);
    TCN_LAUNCH(8, 32, 0, nullptr, read_blocks_kernel)(x, out);
  });
}
void run_racy_warp() {
  run_on_fresh_memory(64, [](int*, int* out) { TCN_LAUNCH(2, 32, 0, nullptr, racy_warp_kernel)(out); });
}
void run_synced_warp() {
  run_on_fresh_memory(64, [](int*, int* out) { TCN_LAUNCH(2, 32, 0, nullptr, synced_warp_kernel)(out); });
}

volatile int g_sink = 0;  // volatile: the read below must happen
void run_host_reads_device_memory() {
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(int));
  cudaMemset(d, 0, 64 * sizeof(int));
  cudaDeviceSynchronize();
  g_sink = d[10];  // a host dereference of device memory: a segmentation fault on a GPU
}

void run_divergent_barrier() {
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(int));
  TCN_LAUNCH(1, 32, 0, nullptr, divergent_barrier_kernel)(d);
  cudaDeviceSynchronize();
}

void run_exited_lane() {
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(int));
  TCN_LAUNCH(1, 32, 0, nullptr, exited_lane_kernel)(d);
  cudaDeviceSynchronize();
}

}  // namespace

TEST_CASE("emulated: divergent barriers and deadlocked warps abort with their sites") {
  bool aborted = false;
  std::string err = in_child(run_divergent_barrier, &aborted);
  CHECK(aborted);
  CHECK(err.find("divergent __syncthreads") != std::string::npos);
  CHECK(err.find("divergent_barrier_kernel") != std::string::npos);
  CHECK(err.find("test_device.cu:") != std::string::npos);
  CHECK(err.find("threads 0-15") != std::string::npos);

  err = in_child(run_exited_lane, &aborted);
  CHECK(aborted);
  CHECK(err.find("deadlock") != std::string::npos);
  CHECK(err.find("lane 5") != std::string::npos);
}

// Skipped (and counted so) outside a racecheck build (TCN_SANITIZE=thread): .ci/run's racecheck stage runs it.
TEST_CASE("emulated racecheck: planted races are reported with the kernel and both lines, their fixes are not" *
          doctest::skip(!tcn::emu::racecheck())) {
  struct Planted {
    void (*racy)();
    void (*fixed)();
    const char* kernel;
    std::vector<std::string> lines;  // "file:line" of both accesses
  };
  // The accesses' lines, found by their markers above, so that edits to this file keep the test true.
  const std::string here = tcn::test::source_path("tests/test_device.cu");
  auto line_of = [&](const char* marker) {
    return "test_device.cu:" + std::to_string(tcn::test::line_containing(here, std::string("// planted: ") + marker));
  };
  const Planted cases[] = {
      {run_racy_block_sum, run_block_sum, "racy_block_sum_kernel",
       {line_of("block-sum write"), line_of("block-sum read")}},
      {run_racy_blocks, run_ordered_blocks, "racy_blocks_kernel", {line_of("blocks write"), line_of("blocks read")}},
      {run_racy_warp, run_synced_warp, "racy_warp_kernel", {line_of("warp write"), line_of("warp read")}},
  };
  // TSan silences the child of a process that had other threads when it forked
  // (an OpenMP or OpenBLAS pool left by an earlier test): tools/racecheck.sh runs
  // this suite in a process of its own.
  int os_threads = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) os_threads += e.exists() ? 1 : 0;
  REQUIRE_MESSAGE(os_threads == 1, "this process has ", os_threads,
                  " threads, so TSan would silence the forked children: run this test in a process of its own");
  const tcn::emu::Order saved = tcn::emu::order();
  for (const Planted& c : cases) {
    for (auto o : {tcn::emu::Order::Forward, tcn::emu::Order::Reverse, tcn::emu::Order::Random}) {
      INFO(c.kernel, " in ", tcn::emu::order_name(o), " order");
      g_child_order = o;
      bool aborted = false;
      const std::string report = in_child(c.racy, &aborted);
      CHECK(report.find("ThreadSanitizer: data race") != std::string::npos);
      CHECK(report.find(c.kernel) != std::string::npos);
      for (const std::string& line : c.lines) {
        INFO("expected the access at ", line, " in the report:\n", report);
        CHECK(report.find(line) != std::string::npos);
      }
      const std::string clean = in_child(c.fixed, &aborted);
      INFO("the fixed kernel's run:\n", clean);
      CHECK(clean.find("ThreadSanitizer") == std::string::npos);
      CHECK_FALSE(aborted);
    }
  }
  tcn::emu::set_order(saved);
}

TEST_CASE("emulated: host code touching device memory faults, naming the allocation; pinned memory does not" *
          doctest::skip(!tcn::emu::protects_device_memory())) {
  bool aborted = false;
  const std::string err = in_child(run_host_reads_device_memory, &aborted);
  CHECK(aborted);
  INFO(err);
  CHECK(err.find("host code accessed device memory at 0x") != std::string::npos);
  CHECK(err.find("byte 40 of the device allocation of 256 bytes") != std::string::npos);
  CHECK(err.find("allocated at:") != std::string::npos);
  CHECK(err.find("the access, at:") != std::string::npos);

  // Pinned host memory stays accessible, and device memory is usable through the runtime.
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(int)));
  pinned[3] = 7;
  int* d = device_alloc<int>(16);
  CUDA_CHECK(cudaMemcpy(d, pinned, 16 * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(download(d, 16)[3] == 7);
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFreeHost(pinned));
}

TEST_CASE("emulated: a host pointer passed to a kernel, and a __trap, are sticky errors") {
  std::vector<int> host(32);
  TCN_LAUNCH(1, 32, 0, nullptr, add_kernel)(host.data(), 1);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);  // sticky: the context is lost
  CHECK(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("argument 0") != std::string::npos);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorIllegalAddress);
  tcn::emu::clear_sticky_error();

  int* d = device_alloc<int>(32);
  TCN_LAUNCH(1, 32, 0, nullptr, trap_kernel)(d);
  CHECK(cudaGetLastError() == cudaSuccess);  // the fault shows when the kernel runs
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  CHECK(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("__trap() at") != std::string::npos);
  tcn::emu::clear_sticky_error();
  CUDA_CHECK(cudaFree(d));
}

std::string join_ints(const std::vector<int>& v) {
  std::string r;
  for (int x : v) r += (r.empty() ? "" : " ") + std::to_string(x);
  return r;
}

// out[0] after `issue` (work that adds 5 to d and copies d to out) in 16
// interleaved schedules, seeds 1..16, d and out zeroed before each: 5 where the
// copy saw the add.
std::vector<int> over_16_schedules(int* d, int* out, const std::function<void()>& issue) {
  std::vector<int> seen;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    tcn::emu::set_streams(tcn::emu::Streams::Interleave, seed);
    CUDA_CHECK(cudaMemset(d, 0, 32 * sizeof(int)));
    CUDA_CHECK(cudaMemset(out, 0, 32 * sizeof(int)));
    CUDA_CHECK(cudaDeviceSynchronize());
    issue();
    CUDA_CHECK(cudaDeviceSynchronize());
    seen.push_back(download(out, 32)[0]);
  }
  return seen;
}

// A producer on stream `a` adds 5 to d; a consumer on stream `b` copies d to
// out, after waiting for the producer's event or not (over_16_schedules).
std::vector<int> interleaved_results(unsigned flags_a, bool wait, bool legacy_consumer) {
  cudaStream_t a, b;
  CUDA_CHECK(cudaStreamCreateWithFlags(&a, flags_a));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaStream_t consumer = legacy_consumer ? nullptr : b;
  cudaEvent_t produced;
  CUDA_CHECK(cudaEventCreate(&produced));
  int* d = device_alloc<int>(32);
  int* out = device_alloc<int>(32);
  const std::vector<int> seen = over_16_schedules(d, out, [&] {
    TCN_LAUNCH(1, 32, 0, a, add_kernel)(d, 5);
    CUDA_CHECK(cudaEventRecord(produced, a));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(consumer, produced, 0));
    CUDA_CHECK(cudaMemcpyAsync(out, d, 32 * sizeof(int), cudaMemcpyDeviceToDevice, consumer));
  });
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(cudaEventDestroy(produced));
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
  return seen;
}

TEST_CASE("emulated interleaved streams: a missing cudaStreamWaitEvent gives a wrong result; the wait, or the legacy "
          "stream's order, prevents it") {
  const tcn::emu::Streams saved = tcn::emu::streams();
  const auto count = [](const std::vector<int>& v, int x) { return std::count(v.begin(), v.end(), x); };
  const std::vector<int> missing = interleaved_results(cudaStreamNonBlocking, false, false);
  INFO("without the wait, out[0] per seed: ", join_ints(missing));
  CHECK(count(missing, 0) > 0);  // the copy ran before the producer
  CHECK(count(missing, 5) > 0);  // and after it: the order is chosen, not fixed
  CHECK(count(missing, 0) + count(missing, 5) == 16);
  CHECK(count(interleaved_results(cudaStreamNonBlocking, true, false), 5) == 16);
  // The legacy stream waits for earlier work of blocking streams, not of non-blocking ones.
  CHECK(count(interleaved_results(cudaStreamDefault, false, true), 5) == 16);
  CHECK(count(interleaved_results(cudaStreamNonBlocking, false, true), 0) > 0);
  tcn::emu::set_streams(saved, tcn::emu::seed());
}

TEST_CASE("emulated interleaved streams: a wait follows an event's latest record, not an earlier one that has run") {
  // The earlier record runs (stream b's sync drains the queue up to it) while the latest is still queued: a wait
  // issued then must still wait for the latest, so the copy always sees the producer's add.
  const tcn::emu::Streams saved = tcn::emu::streams();
  cudaStream_t a, b, c;
  for (cudaStream_t* s : {&a, &b, &c}) CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreate(&e));
  int* d = device_alloc<int>(32);
  int* out = device_alloc<int>(32);
  const std::vector<int> seen = over_16_schedules(d, out, [&] {
    CUDA_CHECK(cudaEventRecord(e, a));                         // the earlier record
    CUDA_CHECK(cudaMemsetAsync(out, 0, 32 * sizeof(int), b));  // b's work, issued after it
    TCN_LAUNCH(1, 32, 0, a, add_kernel)(d, 5);
    CUDA_CHECK(cudaEventRecord(e, a));                         // the latest record, after the producer
    CUDA_CHECK(cudaStreamSynchronize(b));                      // runs the earlier record, not the latest
    CUDA_CHECK(cudaStreamWaitEvent(c, e, 0));
    CUDA_CHECK(cudaMemcpyAsync(out, d, 32 * sizeof(int), cudaMemcpyDeviceToDevice, c));
  });
  INFO("out[0] per seed: ", join_ints(seen));
  CHECK(std::count(seen.begin(), seen.end(), 5) == 16);
  tcn::emu::set_streams(saved, tcn::emu::seed());
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(cudaEventDestroy(e));
  for (cudaStream_t s : {a, b, c}) CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("emulated interleaved streams: a captured fork runs its branches in any order; a captured wait orders them") {
  const tcn::emu::Streams saved = tcn::emu::streams();
  cudaStream_t origin, side;
  CUDA_CHECK(cudaStreamCreate(&origin));
  CUDA_CHECK(cudaStreamCreate(&side));
  cudaEvent_t fork, produced, join;
  for (cudaEvent_t* e : {&fork, &produced, &join}) CUDA_CHECK(cudaEventCreate(e));
  int* d = device_alloc<int>(32);
  int* out = device_alloc<int>(32);
  for (bool wait : {false, true}) {
    const std::string what = wait ? "the side branch waits for the producer" : "no wait between the branches";
    INFO(what);
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaEventRecord(fork, origin));
    CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));  // side joins the capture
    TCN_LAUNCH(1, 32, 0, origin, add_kernel)(d, 5);
    CUDA_CHECK(cudaEventRecord(produced, origin));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(side, produced, 0));
    CUDA_CHECK(cudaMemcpyAsync(out, d, 32 * sizeof(int), cudaMemcpyDeviceToDevice, side));
    CUDA_CHECK(cudaEventRecord(join, side));
    CUDA_CHECK(cudaStreamWaitEvent(origin, join, 0));
    CUDA_CHECK(cudaStreamEndCapture(origin, &graph));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const std::vector<int> seen = over_16_schedules(d, out, [&] { CUDA_CHECK(cudaGraphLaunch(exec, origin)); });
    INFO("out[0] per seed: ", join_ints(seen));
    const auto fives = std::count(seen.begin(), seen.end(), 5);
    if (wait) CHECK(fives == 16);
    else CHECK((fives > 0 && fives < 16));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  tcn::emu::set_streams(saved, tcn::emu::seed());
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFree(out));
  for (cudaEvent_t e : {fork, produced, join}) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaStreamDestroy(origin));
  CUDA_CHECK(cudaStreamDestroy(side));
}
#endif  // TCN_CUDA_EMU

}  // TEST_SUITE
