#!/usr/bin/env bash
# Racecheck (docs/emulator.md, "Racecheck"): the kernels' tests on the emulated
# device built with clang's ThreadSanitizer (TCN_SANITIZE=thread), which reports
# every pair of accesses that CUDA leaves unordered.
#
#   tools/racecheck.sh                      # configure + build build-emu-tsan if needed, then run
#   tools/racecheck.sh build-emu/launches.txt
#       ... and fail unless every kernel that file lists (the launches of a full
#       emulated run, TCN_EMU_LAUNCHES) also ran here.
#
# What runs: the device-language suite (with the planted races, which must be
# caught), every per-op CUDA-vs-CPU test, the optimizer and weight-norm tests,
# and tutorial chapter 5's kernels. Not the whole suite: a TSan fiber context per
# CUDA thread costs ~5 us and the whole suite runs ~65 million CUDA threads (over
# 30 minutes here); the coverage check says which kernels this leaves unchecked.
# Any report fails the run (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${RACECHECK_BUILD_DIR:-build-emu-tsan}
FULL_LAUNCHES=${1:-}
if [ -n "$FULL_LAUNCHES" ] && [ ! -s "$FULL_LAUNCHES" ]; then
  echo "racecheck: $FULL_LAUNCHES is missing or empty: write it with TCN_EMU_LAUNCHES=<file> on a full emulated run" >&2
  exit 2
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "== configuring $BUILD (clang-14, TCN_CUDA=EMU, TCN_SANITIZE=thread)"
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTCN_CUDA=EMU \
    -DTCN_SANITIZE=thread >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
fi
echo "== building tcn_tests and tutorial_05_cuda_kernel in $BUILD"
cmake --build "$BUILD" -j"$(nproc)" --target tcn_tests tutorial_05_cuda_kernel

export TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1  # TSan cannot see OpenMP's synchronisation (CMakeLists.txt, TCN_TEST_OMP_THREADS)
launches="$PWD/$BUILD/racecheck_launches.txt"
rm -f "$launches"
export TCN_EMU_LAUNCHES="$launches"

echo "== racecheck: device language (planted races included), per-op CUDA tests, runtime"
"$BUILD/tests/tcn_tests" -sf='*test_device*,*test_cuda_ops*,*test_cuda_runtime*'
echo "== racecheck: the op registry's CUDA mode (every op against the CPU)"
"$BUILD/tests/tcn_tests" -tc='ops: CUDA against the CPU*'
echo "== racecheck: optimizers, gradient clipping, loss watch, weight-normed layers"
"$BUILD/tests/tcn_tests" \
  -tc='CUDA vs CPU: SGD*,CUDA vs CPU: clipping*,CUDA vs CPU: RMSprop*,LossWatch*,CUDA vs CPU: weight-normed*'
echo "== racecheck: tutorial chapter 5's kernels"
"$BUILD/examples/tutorial/tutorial_05_cuda_kernel" | tail -n 1

checked=$(awk '{print $1}' "$launches" | sort -u)
echo "racecheck: $(echo "$checked" | wc -l) kernels ran, no race reported"
if [ -n "$FULL_LAUNCHES" ]; then
  # The planted races (racy_*) run only in child processes here, which record nothing.
  missing=$(comm -23 <(awk '{print $1}' "$FULL_LAUNCHES" | grep -v '^racy_' | sort -u) <(echo "$checked"))
  if [ -n "$missing" ]; then
    echo "racecheck: kernels the full emulated run launched that never ran under racecheck:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    exit 1
  fi
  echo "racecheck: every kernel of $FULL_LAUNCHES ran under racecheck"
fi
