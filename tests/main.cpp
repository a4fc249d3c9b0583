// Test runner: doctest's main, plus one first line saying where the CUDA tests
// run (a GPU, the emulated device) or why they do not (they are then reported
// as skipped, never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/devices.h"
#ifdef TCN_CUDA_EMU
#include "cuda/emu/emu.h"
#endif

int main(int argc, char** argv) {
#ifdef TCN_CUDA_EMU
  std::printf("[tcn] CUDA tests run on the EMULATED device (TCN_CUDA=EMU, TCN_EMU_ORDER=%s, %d thread(s)): "
              "kernels execute on the CPU to check their logic; this is not a GPU\n",
              tcn::emu::order_name(tcn::emu::order()), tcn::emu::threads());
#else
  if (tcn::cuda::is_available())
    std::printf("[tcn] CUDA tests run on %d GPU(s)\n", tcn::cuda::device_count());
  else
    std::printf("[tcn] CUDA tests are SKIPPED: %s\n", tcn::cuda::unavailable_reason().c_str());
#endif
  doctest::Context context(argc, argv);
  return context.run();
}
