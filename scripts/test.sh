#!/usr/bin/env bash
# Builds (incrementally) and runs the test suites. Prints which CUDA tests ran
# or why they were skipped. Extra arguments go to doctest, e.g.
#   scripts/test.sh -ts=ops            # one suite (the op registry)
#   scripts/test.sh -tc="*matmul*"     # matching test cases
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "no build in $BUILD_DIR: run scripts/setup.sh first" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j"$(nproc)"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD_DIR/tests/tcn_tests" "$@"
if [ $# -eq 0 ]; then
  # Everything else ctest knows: the command-line checks (cli_*), the
  # tutorial's programs (tutorial_*) and the task trainers (task_*).
  echo "== command-line checks, tutorial and task programs (ctest -E tcn_tests)"
  log="$BUILD_DIR/ctest.log"
  # -j: these are separate programs (each in its own temporary directory), mostly one thread each.
  if ! ctest --test-dir "$BUILD_DIR" -j"$(nproc)" -E '^tcn_tests$' --output-on-failure >"$log" 2>&1; then
    cat "$log"
    exit 1
  fi
  grep -E "tests passed|Skipped|Not Run|\*\*\*Skipped" "$log" || tail -n 3 "$log"
fi
