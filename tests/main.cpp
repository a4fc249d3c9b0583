// Test runner: doctest's main, plus one line saying whether the CUDA tests ran
// and, when they did not, why (they are reported as skipped, never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda/runtime.h"

int main(int argc, char** argv) {
  if (tcn::cuda::is_available())
    std::printf("[tcn] CUDA tests run on %d device(s)\n", tcn::cuda::device_count());
  else
    std::printf("[tcn] CUDA tests are SKIPPED: %s\n", tcn::cuda::unavailable_reason().c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
