#!/usr/bin/env bash
# Builds (incrementally) and runs the test suites. Prints which CUDA tests ran
# or why they were skipped. Extra arguments go to doctest, e.g.
#   scripts/test.sh -ts=gradcheck      # one suite
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
  echo "== command-line checks (ctest -R cli_)"
  ctest --test-dir "$BUILD_DIR" -R '^cli_' --output-on-failure | tail -n 3
fi
