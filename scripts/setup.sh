#!/usr/bin/env bash
# One-command setup on Debian 12: installs the build dependencies, configures
# and builds tcn (Release, CUDA backend compiled when nvcc is present), and
# puts the Penn Treebank data under data/ptb when a copy is available.
#
#   scripts/setup.sh            # everything
#   SKIP_APT=1 scripts/setup.sh # dependencies already installed
#   SKIP_DATA=1 scripts/setup.sh # no PTB yet is fine (otherwise setup fails, saying how to get it)
#   BUILD_DIR=build-dbg CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug" scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
PACKAGES="build-essential cmake curl libopenblas-dev libopenblas-openmp-dev doctest-dev libcli11-dev nlohmann-json3-dev gnuplot-nox libboost-context-dev libthrust-dev libxxhash-dev libdnnl-dev ocl-icd-opencl-dev clang-14 libclang-rt-14-dev libomp-14-dev libopenmpi-dev openmpi-bin patchelf"

# Only what is missing is installed (a second build directory needs no apt-get at all).
MISSING=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' || MISSING="$MISSING $p"
done
if [ -z "${SKIP_APT:-}" ] && [ -n "$MISSING" ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "== installing Debian packages:$MISSING"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
elif [ -z "${SKIP_APT:-}" ]; then
  echo "== Debian packages: all installed"
fi

echo "== configuring $BUILD_DIR"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E "tcn: (CUDA backend|cuDNN|oneDNN)" "$BUILD_DIR.configure.log" || true
echo "== building ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j"$(nproc)"

# The PTB corpus for step 3 of the README (charlm train): copied or downloaded by get_data.sh.
if ! scripts/get_data.sh; then
  if [ -n "${SKIP_DATA:-}" ]; then
    echo "== built, without the PTB data (SKIP_DATA=1). Run the tests with: scripts/test.sh"
    exit 0
  fi
  echo "setup: built, but data/ptb has no PTB corpus, which training needs: run scripts/get_data.sh DIR (a folder holding ptb.{train,valid,test}.txt), or with internet access scripts/get_data.sh; SKIP_DATA=1 scripts/setup.sh accepts the missing data" >&2
  exit 1
fi
echo "== done. Run the tests with: scripts/test.sh"
