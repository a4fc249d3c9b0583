#!/usr/bin/env bash
# The library as a user's project sees it (examples/consumer/):
#  1. installed: `cmake --install` of an existing build into a temporary
#     prefix, then a separate project finds it with find_package(tcn) and
#     links tcn::tcn;
#  2. as a subproject: the same project builds tcn's source tree through
#     add_subdirectory (CPU-only, to keep it short).
# Each consumer trains a small model and fails unless it learned.
#   tests/consumer.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "tests/consumer.sh: no build in $BUILD_DIR: run scripts/setup.sh first" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

echo "== consumer 1: installed package (from $BUILD_DIR)"
cmake --install "$BUILD_DIR" --prefix "$work/prefix" >"$work/install.log"
cmake -S examples/consumer -B "$work/installed" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure1.log" 2>&1 ||
  { cat "$work/configure1.log"; exit 1; }
grep "consumer: tcn" "$work/configure1.log"
cmake --build "$work/installed" -j"$(nproc)" >"$work/build1.log" 2>&1 || { cat "$work/build1.log"; exit 1; }
"$work/installed/consumer"

echo "== consumer 2: add_subdirectory of the source tree (TCN_CUDA=OFF)"
cmake -S examples/consumer -B "$work/subproject" -DTCN_SOURCE_TREE="$PWD" -DTCN_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=Release >"$work/configure2.log" 2>&1 || { cat "$work/configure2.log"; exit 1; }
cmake --build "$work/subproject" -j"$(nproc)" >"$work/build2.log" 2>&1 || { cat "$work/build2.log"; exit 1; }
"$work/subproject/consumer"
echo "== consumers passed"
