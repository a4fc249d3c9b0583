// The CUDA runtime: no GPU is a normal state with a reason, never a crash.
// Tests that need a GPU are skipped (and reported as skipped) without one.
#include "core/caching_allocator.h"
#include "helpers.h"

using namespace tcn;

TEST_SUITE("cuda") {

TEST_CASE("device discovery never crashes") {
  int n = cuda::device_count();
  CHECK(n >= 0);
  if (n == 0) CHECK_FALSE(cuda::unavailable_reason().empty());
#ifdef TCN_WITH_CUDA
  CHECK(cuda::built_with_cuda());
#else
  CHECK_FALSE(cuda::built_with_cuda());
#endif
}

TEST_CASE("host <-> device round trip" * doctest::skip(!cuda::is_available())) {
  Tensor x = test::rand_tensor({3, 5}, 1, false, -1, 1, DType::F32);
  Tensor g = x.to(Device::cuda(0));
  CHECK(g.device() == Device::cuda(0));
  CHECK(g.to(Device::cpu()).to_vector<float>() == x.to_vector<float>());
  Tensor h = empty({3, 5}, {DType::F32, Device::cuda(0)});
  copy_(h, g);
  CHECK(h.to_vector<float>() == x.to_vector<float>());
  CHECK(memory_stats(Device::cuda(0)).in_use >= 2 * 15 * sizeof(float));  // the caching allocator counts them
}

}  // TEST_SUITE
