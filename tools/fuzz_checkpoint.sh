#!/usr/bin/env bash
# Fuzz the checkpoint reader (tests/fuzz/fuzz_checkpoint.cpp) for SECONDS with
# libFuzzer + ASan + UBSan: builds build-fuzz with clang-14 (CPU only), makes
# the seed corpus from real checkpoints, fuzzes, and fails on any finding.
# The corpus grows in build-fuzz/corpus and is reused by the next run;
# findings (crash-*, leak-*, timeout-*, oom-*) land in build-fuzz/findings/.
#
#   tools/fuzz_checkpoint.sh 60            # as CI runs it
#   JOBS=2 tools/fuzz_checkpoint.sh 1800   # 30 minutes on 2 processes
#   build-fuzz/fuzz_checkpoint build-fuzz/findings/crash-...   # replay one input
#
# Needs clang-14, libclang-rt-14-dev and libomp-14-dev (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=${JOBS:-1}
build=${BUILD_DIR:-build-fuzz}

# oneDNN off: it uses GNU OpenMP, clang's builds use LLVM's; one process should not load both.
# A build already configured is reused as it is (CI configures build-fuzz with the test suites
# too, runs them, then fuzzes: .ci/run).
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DTCN_CUDA=OFF -DTCN_ONEDNN=OFF -DTCN_FUZZ=ON -DTCN_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j"$(nproc)" --target fuzz_checkpoint charlm >/dev/null

mkdir -p "$build/corpus" "$build/findings"
if [ ! -d "$build/seeds" ] || [ -z "$(ls -A "$build/seeds")" ]; then
  ASAN_OPTIONS=detect_leaks=0 bash tests/fuzz/make_seeds.sh "$build/charlm" "$build/seeds" >/dev/null
fi
echo "== fuzzing the checkpoint reader for $seconds s ($jobs process(es)); seeds: $(ls "$build/seeds" | wc -l) files," \
     "corpus: $(ls "$build/corpus" | wc -l) inputs"
# -timeout 5: an input that takes over 5 s is a finding (a reader must not hang on any input).
# -rss_limit_mb / -malloc_limit_mb: an input that makes a huge allocation is a finding.
args=(-max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536
      -dict=tests/fuzz/safetensors.dict -artifact_prefix="$build/findings/" -print_final_stats=1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export OMP_NUM_THREADS=1
log="$build/fuzz.log"
if [ "$jobs" -gt 1 ]; then
  "$build/fuzz_checkpoint" "${args[@]}" -jobs="$jobs" -workers="$jobs" "$build/corpus" "$build/seeds" >"$log" 2>&1 || rc=$?
  cat fuzz-*.log >>"$log" 2>/dev/null && rm -f fuzz-*.log
else
  "$build/fuzz_checkpoint" "${args[@]}" "$build/corpus" "$build/seeds" >"$log" 2>&1 || rc=$?
fi
rc=${rc:-0}
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|Done [0-9]+ runs" "$log" || true
if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$build/findings")" ]; then
  tail -60 "$log"
  echo "== FUZZER FINDING (exit $rc): inputs in $build/findings/"
  exit 1
fi
echo "== no finding in $seconds s; corpus now $(ls "$build/corpus" | wc -l) inputs"
