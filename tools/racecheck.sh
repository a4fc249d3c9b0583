#!/usr/bin/env bash
# Racecheck (docs/emulator.md, "Racecheck"): the whole test suite on the emulated
# device built with clang's ThreadSanitizer (TCN_SANITIZE=thread), which reports
# every pair of accesses that CUDA leaves unordered.
#
#   tools/racecheck.sh                      # configure + build build-emu-tsan if needed, then run
#   tools/racecheck.sh build-emu/launches.txt
#       ... and fail unless every kernel that file lists (the launches of a full
#       emulated run, TCN_EMU_LAUNCHES) also ran here.
#
# What runs: the whole emulated suite (tcn_tests, in three processes, two at a
# time: the device-language suite with the planted races, which must be caught,
# runs in one of its own, since TSan silences a forked child once the process has
# other threads), then every other ctest entry (the command-line checks, the
# tutorial and task programs) built the same way, as many at once as cores. One thread order (forward): TSan
# reasons about happens-before, not about the order the threads ran in.
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
  # -O1, not Release's -O3: cuda/elementwise.cu alone compiles in 45 s instead of 130 s under
  # TSan, the suite runs about as fast (TSan's bookkeeping dominates), and fewer accesses are
  # optimised away before TSan instruments them.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DTCN_CUDA=EMU -DTCN_SANITIZE=thread -DTCN_BUILD_BENCHMARKS=OFF >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
fi
echo "== building everything in $BUILD"
cmake --build "$BUILD" -j"$(nproc)"

export TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1       # TSan cannot see OpenMP's synchronisation (CMakeLists.txt, TCN_TEST_OMP_THREADS)
export OPENBLAS_NUM_THREADS=1  # nor OpenBLAS's own pool's (the cuBLAS stand-in; not instrumented)
launches="$(cd "$BUILD" && pwd)/racecheck_launches.txt"  # absolute: the ctest programs run elsewhere
rm -f "$launches"
export TCN_EMU_LAUNCHES="$launches"

# tcn_tests runs on one thread here, so it runs as two lanes at once, one per
# core, each a sequence of processes: the device-language suite (in a process of
# its own: the planted races fork) then test_cuda_train.cpp, the heaviest file;
# and everything else. The file filters are complements: every test runs once.
part() {  # name doctest-filter...: one tcn_tests process, its output in $BUILD/racecheck_NAME.log
  local name=$1
  shift
  if "$BUILD/tests/tcn_tests" "$@" >"$BUILD/racecheck_$name.log" 2>&1; then
    echo "racecheck: tcn_tests $*: $(grep -E '^\[doctest\] test cases' "$BUILD/racecheck_$name.log")"
  else
    cat "$BUILD/racecheck_$name.log"
    echo "racecheck: tcn_tests $* FAILED (log: $BUILD/racecheck_$name.log)"
    return 1
  fi
}
echo "== racecheck: tcn_tests in two lanes (the device language with its planted races, then test_cuda_train; the rest)"
(part device -sf='*test_device*' && part cuda_train -sf='*test_cuda_train*') &
lane1=$!
part rest -sfe='*test_device*,*test_cuda_train*' &
lane2=$!
failed=0
wait "$lane1" || failed=1
wait "$lane2" || failed=1
[ "$failed" -eq 0 ] || exit 1
echo "== racecheck: every other ctest entry (command-line checks, tutorial and task programs)"
# Except cli_write_errors and task_hostile_input: their file-size limits (ulimit
# -f) kill TSan's own runtime (SIGBUS), and both run on the CPU device only (no kernel).
log="$BUILD/racecheck_ctest.log"
if ! ctest --test-dir "$BUILD" -j"$(nproc)" -E '^(tcn_tests|cli_write_errors|task_hostile_input)$' --output-on-failure \
    >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E "tests passed" "$log"

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
