#!/usr/bin/env bash
# The one GPU check, run on the lent H100/H200 machine, and its rehearsal here.
# It builds nothing on the device (no -dev packages, no internet there): it runs
# what tools/make_device_bundle.sh assembled and self-checked here.
#
#   tools/device_check.sh              on the device (docs/device_check.md):
#     run(command="tools/device_check.sh", carry=["device_bundle"], timeout_s=380)
#   tools/device_check.sh --rehearse   here, in CI: every step with the same
#                                      plumbing, GPU steps on the emulated build
#
# Each step runs in its own process under `timeout`, so a crash inside a library
# hides nothing else; a failure never stops the run; a step that no longer fits
# the budget is skipped and says so. In order of value: steps 0-4 are the core
# evidence (CUDA against the CPU, op by op and over 20 training steps, and the
# speed beside PyTorch); their limits add up to under 4 minutes.
#   0. probe: GPU, driver, CUDA/cuBLAS/cuDNN/NCCL libraries and their versions,
#      PyTorch, compute-sanitizer, the glibc/GLIBCXX the bundle needs vs the
#      device's; LD_LIBRARY_PATH = the bundle + the CUDA folders found (the
#      wheels' cuDNN before a system one: TCN_CUDNN_LIBRARY names it)
#   1. CUDA against the CPU: the op registry (every op, float32 and float64,
#      values and gradients), the device suite and every GPU case outside the
#      cuda suite; then the cuda suite, cuDNN's cases left out
#   2. the cuDNN cases alone; on a GPU cuDNN is required (TCN_REQUIRE_CUDNN=1):
#      one that did not load fails this step and the probe's row
#   3. 20 training steps of the TCN on --conv_impl gemm, graph on and off,
#      compared bit for bit (tcn_ckpt compare ... 0); one TCN run on cuDNN
#      (--conv_impl cudnn --deterministic); 20 steps of the LSTM; each run's
#      losses against the CPU's (ref/*.csv, computed where the bundle was made)
#   4. charlm bench --device cuda beside PyTorch on the same GPU (eager,
#      cudnn.benchmark on)
#   5. the layer benchmarks: bench_cudnn and tools/bench_torch_layers.py
#   6. compute-sanitizer memcheck on a 3-step training run of each model, on
#      --conv_impl gemm (cuDNN's algorithm search stays out of the sanitizer;
#      API errors not reported: some calls fail by design and are handled)
#   7. PyTorch's TCN under torch.compile, if it compiles in time
#   8. the profiler's GPU table beside torch.profiler's, the remaining test
#      suites, racecheck on the reduction kernels
#   9. the stretch run: the reference TCN on the whole PTB with the budget left
#      (at most STRETCH_MAX seconds)
# What comes back from $OUT is the evidence alone, within the device's limits
# (at most 8 files, 16 MiB each, 64 MiB together, two folders deep, names of
# letters, digits, '.', '_', '-'; the last row checks them): summary.md (one
# row per step, the tables, the graph-capture lines, each conv shape's
# cuDNN/GEMM decision), device_check.log (the console), logs.tgz (every step's
# log and CSV), the profiler's trace-*.json and stretch.csv. Checkpoints and
# other bulk stay in a scratch folder outside $OUT.
# Exit 0 when every step is ok (rehearsal: ok or skipped for a reason named).
#
# Rehearsal (--rehearse): the same script, steps and summary on this machine.
# GPU steps run the emulated build's binaries (EMU_BUILD, default build-emu/;
# the emulated device checks logic, so its timings mean nothing) with small
# shapes; steps that need a GPU's libraries (cuDNN's cases run but report
# themselves skipped, compute-sanitizer, PyTorch with CUDA) are skipped with the
# reason; the CPU runs use the bundle's binaries as on the device.
#
# Settings: DEVICE_CHECK_BUDGET (seconds; default 350, rehearsal 900: the
# arithmetic is in docs/device_check.md), STRETCH_MAX (default 90),
# DEVICE_CHECK_LIMITS_PCT (each step's limit in percent, default 100),
# DEVICE_CHECK_STEPS (the steps to run, default "1 2 3 4 5 6 7 8 9"; step 0
# always runs), BENCH_STEPS (timed steps per benchmark row, default 10), OUT
# (default /tmp/device_check_out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ulimit -c 0  # a crash must not spend the window writing a core file

REHEARSE=0
case "${1:-}" in
  "") ;;
  --rehearse) REHEARSE=1 ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "device_check: unknown argument '$1' (use --rehearse or nothing)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/device_check_out}
mkdir -p "$OUT"
if (( REHEARSE )); then BUDGET=${DEVICE_CHECK_BUDGET:-900}; else BUDGET=${DEVICE_CHECK_BUDGET:-350}; fi
STRETCH_MAX=${STRETCH_MAX:-90}
LIMITS_PCT=${DEVICE_CHECK_LIMITS_PCT:-100}
BENCH_STEPS=${BENCH_STEPS:-10}
STEPS=${DEVICE_CHECK_STEPS:-1 2 3 4 5 6 7 8 9}
want() { [[ " $STEPS " == *" $1 "* ]]; }
EMU_BUILD=${EMU_BUILD:-build-emu}
T0=$(date +%s)
LOGS=$(mktemp -d /tmp/device_check.XXXXXX)  # every log and CSV: packed into $OUT/logs.tgz
BULK=$(mktemp -d /tmp/device_check_bulk.XXXXXX)  # checkpoints and data slices: never sent back
B=""  # the unpacked bundle, set in step 0
trap 'rm -rf "$LOGS" "$BULK"; [[ $B == /tmp/tcn_device_bundle.* ]] && rm -rf "$B"' EXIT
CONSOLE=$OUT/device_check.log
SUMMARY=$OUT/summary.md
: >"$CONSOLE"

say() { printf '%s\n' "$*" | tee -a "$CONSOLE"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# Every step's log, packed after each step, so a run cut short still brings them back.
pack() { tar czf "$OUT/logs.tgz.part" -C "$LOGS" . 2>/dev/null && mv -f "$OUT/logs.tgz.part" "$OUT/logs.tgz"; }

ROWS=()      # "| step | result | s | note |"
SECTIONS=()  # further markdown, in order
INFO=()      # "- key: value" lines for the summary's head
write_summary() {
  {
    if (( REHEARSE )); then
      echo "## tcn device check REHEARSAL (no GPU: GPU steps on the EMULATED device, logic only), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s"
    else
      echo "## tcn device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s"
    fi
    echo
    printf '%s\n' "${INFO[@]}"
    echo
    echo "| step | result | s | note |"
    echo "|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    for s in "${SECTIONS[@]}"; do printf '\n%s\n' "$s"; done
  } >"$SUMMARY"
}
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); write_summary; }
skip() { say "-- $1: skipped ($2)"; row "$1" "skipped ($2)" 0 ""; }

# step NAME LIMIT CMD...: runs CMD under `timeout` (LIMIT seconds, less if the
# budget is short), its output in $LOGS/NAME.log; sets RC, STATUS, SECS.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - $(elapsed) - 10 ))
  SECS=0
  if (( left < 10 )); then
    RC=125 STATUS="skipped: out of time"
    say "-- $name: skipped, out of time"
    : >"$LOGS/$name.log"
    return
  fi
  (( limit > left )) && limit=$left
  say "-- $name (limit ${limit} s)"
  local s
  s=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - s ))
  case $RC in
    0) STATUS=ok ;;
    124 | 137) STATUS="TIMEOUT (${limit} s)" ;;
    126 | 127) STATUS="could not start (rc $RC)" ;;
    *) if (( RC > 128 )); then STATUS="CRASHED (signal $(( RC - 128 )))"; else STATUS="FAILED (rc $RC)"; fi ;;
  esac
  say "   $STATUS in $SECS s"
  if (( RC != 0 )); then tail -n 12 "$LOGS/$name.log" | cut -c1-200 | sed 's/^/   | /' | tee -a "$CONSOLE"; fi
  pack
}
# lim GPU EMULATED: a step's limit in seconds, on the GPU and in the rehearsal (where the emulated device
# runs every kernel on the CPU). On the GPU, the limits of steps 1-4 add up to under 4 minutes.
# DEVICE_CHECK_LIMITS_PCT scales them all (a rerun of a step that hit its limit: 200).
lim() { if (( REHEARSE )); then echo "$2"; else echo $(( $1 * LIMITS_PCT / 100 )); fi; }
# The doctest totals of a log, shortened, and where its CUDA tests ran.
doctest_note() {
  local totals where
  totals=$(grep -E 'test cases:' "$1" | tail -1 | sed 's/\[doctest\] test cases: *//; s/ *| */, /g; s/, *$//')
  where=$(grep -m1 '^\[tcn\]' "$1" | sed 's/^\[tcn\] //')
  echo "${totals:-no doctest totals}; ${where:-no [tcn] line}"
}
# A doctest run: its row, failures echoed. A GPU run whose CUDA tests were skipped is not ok.
tests_row() {  # NAME WHAT
  local st=$STATUS
  if (( ! REHEARSE )) && grep -q '^\[tcn\].*SKIPPED' "$LOGS/$1.log"; then st="$st, CUDA SKIPPED"; fi
  row "$2" "$st" "$SECS" "$(doctest_note "$LOGS/$1.log")"
  grep -E 'ERROR|FAILED|test case exceeded' "$LOGS/$1.log" | head -n 20 | cut -c1-200 | sed 's/^/   /' | tee -a "$CONSOLE"
}

# --- 0. probe ----------------------------------------------------------------------
say "== 0. probe ($(date -u +%H:%M:%S) UTC)$( (( REHEARSE )) && echo ': REHEARSAL, no GPU')"
OS=$( (. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}") || echo '?')
GLIBC=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')
say "host: $(uname -srm), $OS, glibc ${GLIBC:-?}, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
INFO+=("- host: $OS, $(nproc) cores")
SMI=$(command -v nvidia-smi || true)
for c in /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi; do [ -z "$SMI" ] && [ -x "$c" ] && SMI=$c; done
GPU=""
if [ -n "$SMI" ]; then
  { timeout 20 "$SMI" 2>&1 || echo "nvidia-smi: rc $?"; } >"$LOGS/nvidia-smi.txt"
  tee -a "$CONSOLE" <"$LOGS/nvidia-smi.txt"
  GPU=$(timeout 20 "$SMI" --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi
INFO+=("- GPU (name, driver, memory): ${GPU:-none found by nvidia-smi}")

ldconfig -p 2>/dev/null | grep -E 'cuda|cublas|cudnn|nccl' >"$LOGS/ldconfig.txt"
PY=$(command -v python3 || true)
ORIG_LD=${LD_LIBRARY_PATH:-}
# Python children (PyTorch) get the environment they came with, not ours.
if [ -n "$ORIG_LD" ]; then PYENV=(env "LD_LIBRARY_PATH=$ORIG_LD"); else PYENV=(env -u LD_LIBRARY_PATH); fi
TORCH_CUDA=0
TORCH="no python3"
PY_DIRS=""
if [ -n "$PY" ]; then
  PY_DIRS=$(timeout 20 "${PYENV[@]}" "$PY" - 2>/dev/null <<'EOF'
import glob, importlib.util, os
dirs = []
try:
    import nvidia
    for p in list(nvidia.__path__):
        dirs += sorted(glob.glob(os.path.join(p, "*", "lib")))
except Exception:
    pass
spec = importlib.util.find_spec("torch")
if spec and spec.origin:
    dirs.append(os.path.join(os.path.dirname(spec.origin), "lib"))
print("\n".join(dirs))
EOF
  )
  TORCH=$(timeout 45 "${PYENV[@]}" "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available(), "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>&1 | tail -1)
  [[ $TORCH == *"cuda True"* ]] && TORCH_CUDA=1
fi
say "python3: ${PY:-none}; torch: $TORCH"
INFO+=("- PyTorch (${PY:-no python3}): $TORCH")

CAND=()
add_cand() { local d; for d in "$@"; do [ -d "$d" ] && CAND+=("$d"); done; }
# The toolkit's first (CUDA 13, what the bundle was built with), then Python's
# nvidia-* wheels (what PyTorch uses), then the system's.
add_cand /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib
for d in /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib; do add_cand "$d"; done
while IFS= read -r d; do [ -n "$d" ] && add_cand "$d"; done <<<"$PY_DIRS"
add_cand /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/lib
IFS=: read -r -a orig_dirs <<<"$ORIG_LD"
for d in "${orig_dirs[@]}"; do [ -n "$d" ] && add_cand "$d"; done
first_with() {  # first_with LIB...: the first candidate folder holding every LIB
  local d l ok
  for d in "${CAND[@]}"; do
    ok=1
    for l in "$@"; do [ -e "$d/$l" ] || ok=0; done
    if (( ok )); then echo "$d"; return; fi
  done
}
version_of() {  # the file a library name resolves to in DIR (its version is in the name)
  [ -n "$2" ] && [ -e "$2/$1" ] && basename "$(readlink -f "$2/$1")"
}
CUBLAS_DIR=$(first_with libcublas.so.13 libcublasLt.so.13)
CUDART_DIR=$(first_with libcudart.so.13 libcublas.so.13 libcublasLt.so.13)
[ -n "$CUDART_DIR" ] || CUDART_DIR=$(first_with libcudart.so.13)
# libcuda (the driver's) and NCCL: from the loader's cache where it has them, else a candidate folder;
# where each came from, said only as found.
LIBCUDA_DIR="" LIBCUDA_FROM="NOT FOUND"
if grep -q 'libcuda\.so\.1 ' "$LOGS/ldconfig.txt"; then LIBCUDA_FROM="from ldconfig"
else LIBCUDA_DIR=$(first_with libcuda.so.1); [ -n "$LIBCUDA_DIR" ] && LIBCUDA_FROM="in $LIBCUDA_DIR"; fi
NCCL_DIR="" NCCL_FROM="nccl NOT FOUND"
if grep -q 'libnccl\.so\.2 ' "$LOGS/ldconfig.txt"; then NCCL_FROM="nccl from ldconfig"
else NCCL_DIR=$(first_with libnccl.so.2); [ -n "$NCCL_DIR" ] && NCCL_FROM="$(version_of libnccl.so.2 "$NCCL_DIR") in $NCCL_DIR"; fi
# cuDNN: the wheel's (what PyTorch runs on) before a system copy, named to tcn by
# TCN_CUDNN_LIBRARY (cuda/cudnn.cu loads it, then its sub-libraries from its folder).
CUDNN_DIR=""
while IFS= read -r d; do
  if [ -n "$d" ] && [ -e "$d/libcudnn.so.9" ]; then CUDNN_DIR=$d; break; fi
done <<<"$PY_DIRS"
[ -n "$CUDNN_DIR" ] || CUDNN_DIR=$(first_with libcudnn.so.9)
if [ -n "$CUDNN_DIR" ]; then export TCN_CUDNN_LIBRARY=$CUDNN_DIR/libcudnn.so.9; fi
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcuda.so.1 libnccl.so.2; do
  hits=()
  for d in "${CAND[@]}"; do [ -e "$d/$lib" ] && hits+=("$d"); done
  say "   $lib: ${hits[*]:-NOT FOUND}"
done
INFO+=("- CUDA libraries: $(version_of libcudart.so.13 "$CUDART_DIR" || echo 'cudart NOT FOUND'), $(version_of libcublas.so.13 "$CUBLAS_DIR" || echo 'cublas NOT FOUND') in ${CUBLAS_DIR:--}; $(version_of libcudnn.so.9 "$CUDNN_DIR" || echo 'cudnn NOT FOUND') in ${CUDNN_DIR:--} (TCN_CUDNN_LIBRARY); $NCCL_FROM; libcuda $LIBCUDA_FROM")

SAN=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
         /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
  [ -z "$SAN" ] && [ -x "$c" ] && SAN=$c
done
say "compute-sanitizer: ${SAN:-not found}"

# The bundle: unpacked into a copy under /tmp (the tree's copy stays packed);
# where /tmp is mounted noexec, into build-device-bundle/ (git-ignored).
unpack_to() {
  rm -rf "$1" && mkdir -p "$1" && cp -a device_bundle/. "$1/" && sh "$1/unpack.sh" >>"$LOGS/unpack.log" 2>&1 &&
    cp /bin/true "$1/.exec_test" && "$1/.exec_test"
}
B=$(mktemp -d /tmp/tcn_device_bundle.XXXXXX)
BUNDLE_OK=0
if [ ! -d device_bundle ]; then
  say "NO device_bundle/: run tools/make_device_bundle.sh here and carry [\"device_bundle\"]"
elif unpack_to "$B" || { B=$PWD/build-device-bundle && unpack_to "$B"; }; then
  say "device_bundle/ unpacked into $B, checksums ok"
  BUNDLE_OK=1
else
  say "unpack FAILED: $(tail -3 "$LOGS/unpack.log" | tr '\n' ' ')"
fi
INFO+=("- bundle: $(head -2 "$B/BUILD_INFO" 2>/dev/null | tr '\n' ';' | sed 's/;$//')")
STALE=$(sha256sum -c --quiet "$B/SOURCES.sha256" 2>/dev/null | grep -c . || true)
if [ "${STALE:-0}" -gt 0 ]; then
  say "WARNING: $STALE source file(s) changed since the bundle was built (rerun tools/make_device_bundle.sh):"
  sha256sum -c --quiet "$B/SOURCES.sha256" 2>&1 | head -5 | sed 's/^/   /' | tee -a "$CONSOLE"
  INFO+=("- **bundle is STALE**: $STALE source file(s) differ from the tree it was built from")
fi
# What the binaries need from the C and C++ runtimes, against what this machine has.
NEEDS=$(sed -n 's/^needs //p' "$B/BUILD_INFO" 2>/dev/null)
FLOOR=$(sed -n 's/^glibc floor //p' "$B/BUILD_INFO" 2>/dev/null)
STDCXX=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
HAS_CXX=$( [ -n "$STDCXX" ] && grep -ao 'GLIBCXX_[0-9.]*[0-9]' "$STDCXX" | sort -uV | tail -1)
INFO+=("- runtimes: the bundle needs ${NEEDS:-?} (glibc floor ${FLOOR:-?}); this machine has GLIBC_${GLIBC:-?} and ${HAS_CXX:-no libstdc++ found}")

# cuDNN's folder too: libcudnn.so.9 loads its sub-libraries (and NVRTC, for its runtime-compiled kernels)
# through the loader's search path.
NVRTC_DIR=$(first_with libnvrtc.so.13)
LDP=$B
for d in "$CUDART_DIR" "$CUBLAS_DIR" "$LIBCUDA_DIR" "$NCCL_DIR" "$CUDNN_DIR" "$NVRTC_DIR"; do
  [ -n "$d" ] && [[ ":$LDP:" != *":$d:"* ]] && LDP=$LDP:$d
done
[ -n "$ORIG_LD" ] && LDP=$LDP:$ORIG_LD
export LD_LIBRARY_PATH=$LDP
ldd "$B/tcn_tests" >"$LOGS/ldd_tcn_tests.txt" 2>&1
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
sed 's/ (0x[0-9a-f]*)//' "$LOGS/ldd_tcn_tests.txt" | sed 's/^/   /' >>"$CONSOLE"
UNRESOLVED=$(grep 'not found' "$LOGS/ldd_tcn_tests.txt" | awk '{print $1}' | sort -u | tr '\n' ' ')
# The files the binaries read at run time (tests/golden/, tools/bench_torch.py): this checkout's.
export TCN_SOURCE_DIR=$PWD

# Which binaries the GPU steps run, and at what size.
CPU_CHARLM=$B/charlm
TRAIN_FLAGS=$(cat "$B/ref/train_flags" 2>/dev/null)
REF=train
if (( REHEARSE )); then
  GPU_TESTS=$EMU_BUILD/tests/tcn_tests GPU_CHARLM=$EMU_BUILD/charlm GPU_BENCH_CUDNN=$EMU_BUILD/bench_cudnn
  TRAIN_FLAGS=$(cat "$B/ref/rehearse_flags" 2>/dev/null)
  REF=rehearse
  SHAPE=(--batch_size 4 --seq_len 100 --validseqlen 80)
  BENCH=(--steps 2 --warmup 1 "${SHAPE[@]}")
  LAYER_SHAPE=(--batch_size 4 --seq_len 100 --reps 1)
  for b in "$GPU_TESTS" "$GPU_CHARLM" "$GPU_BENCH_CUDNN"; do
    [ -x "$b" ] || { say "REHEARSAL needs the emulated build: $b is missing (BUILD_DIR=$EMU_BUILD CMAKE_ARGS=-DTCN_CUDA=EMU scripts/setup.sh)"; UNRESOLVED+="$b "; }
  done
  probe="ok (rehearsal: no GPU; GPU steps on $EMU_BUILD/, the EMULATED device)"
else
  GPU_TESTS=$B/tcn_tests GPU_CHARLM=$B/charlm GPU_BENCH_CUDNN=$B/bench_cudnn
  SHAPE=()
  BENCH=(--steps "$BENCH_STEPS" --warmup 3)
  LAYER_SHAPE=(--reps 10)
  if [ -n "$GPU" ]; then probe=ok; else probe="NO GPU (nvidia-smi)"; fi
fi
(( BUNDLE_OK )) || probe="MISSING BUNDLE"
[ -n "$TRAIN_FLAGS" ] || { probe="MISSING BUNDLE (no ref/ flags)"; TRAIN_FLAGS="--max_steps 20 --log-interval 1 --eval_batches 4"; }
[ -n "$UNRESOLVED" ] && probe="FAILED: unresolved $UNRESOLVED"
[ "$STEPS" = "1 2 3 4 5 6 7 8 9" ] || INFO+=("- steps run: $STEPS (DEVICE_CHECK_STEPS)")
PROBE_SECS=$(elapsed)
PROBE_NOTE="unresolved by ldd: ${UNRESOLVED:-none}; compute-sanitizer: ${SAN:-not found}"
row "0. probe" "$probe" "$PROBE_SECS" "$PROBE_NOTE"
pack

# --- 1. CUDA against the CPU, op by op and suite by suite, each in its own process -------------------
say "== 1. CUDA against the CPU: the op registry, the device suite, every GPU case, the cuda suite"
# Two threads for the CPU side of each comparison, as in CI. The cases outside the cuda suite that need a
# GPU are the ones named for CUDA, and those of the graph, golden, profiler and autocast files.
GPU_FILES='*test_step_graph.cpp,*test_golden.cpp,*test_profiler.cpp,*test_autocast.cpp'
if want 1; then
step tests_ops "$(lim 30 120)" env OMP_NUM_THREADS=2 "$GPU_TESTS" -ts=ops,device --duration=true
tests_row tests_ops "1. the op registry (every op, CUDA vs CPU, float32 and float64, values and gradients) and the device suite"
step tests_named_cuda "$(lim 15 120)" env OMP_NUM_THREADS=2 "$GPU_TESTS" -tse=cuda,ops,device '-tc=*cuda*' "-sfe=$GPU_FILES" --duration=true
tests_row tests_named_cuda "1. the CUDA cases of the other suites (norm, TCN, ...)"
step tests_gpu_files "$(lim 25 120)" env OMP_NUM_THREADS=2 "$GPU_TESTS" -tse=cuda,ops,device "-sf=$GPU_FILES" --duration=true
tests_row tests_gpu_files "1. graph, golden, profiler, autocast"
step tests_cuda "$(lim 30 150)" env OMP_NUM_THREADS=2 "$GPU_TESTS" -ts=cuda '-sfe=*test_cudnn.cpp' --duration=true
tests_row tests_cuda "1. tcn_tests -ts=cuda (without cuDNN's cases)"
fi

# --- 2. cuDNN ---------------------------------------------------------------------------------------
say "== 2. cuDNN's cases$( (( ! REHEARSE )) && echo ': cuDNN required (TCN_REQUIRE_CUDNN=1)')"
if want 2; then
if (( REHEARSE )); then
  step tests_cudnn 90 env OMP_NUM_THREADS=2 "$GPU_TESTS" '-sf=*test_cudnn.cpp' --duration=true
  (( RC == 0 )) && STATUS="ok (rehearsal: cuDNN's GPU cases report themselves skipped: the emulated device has no cuDNN)"
  tests_row tests_cudnn "2. cuDNN's cases"
  # The requirement the GPU run sets must bite: here, where cuDNN cannot load, it must fail and say why.
  step cudnn_required 60 env TCN_REQUIRE_CUDNN=1 "$GPU_TESTS" '-tc=cuDNN loads where the run requires it*'
  if (( RC != 0 )) && grep -q 'cuDNN required but unavailable: ' "$LOGS/cudnn_required.log"; then
    STATUS="ok (fails as it must where cuDNN cannot load)"
  else
    STATUS="FAILED (TCN_REQUIRE_CUDNN=1 did not fail without cuDNN, rc $RC)"
  fi
  row "2. TCN_REQUIRE_CUDNN=1 without cuDNN" "$STATUS" "$SECS" "$(grep -m1 -o 'cuDNN required but unavailable: .*' "$LOGS/cudnn_required.log" | cut -c1-120)"
else
  step tests_cudnn "$(lim 20 0)" env OMP_NUM_THREADS=2 TCN_REQUIRE_CUDNN=1 "$GPU_TESTS" '-sf=*test_cudnn.cpp' --duration=true
  why=$(grep -m1 -o 'cuDNN required but unavailable: .*' "$LOGS/tests_cudnn.log" | cut -c1-160)
  [ -n "$why" ] && STATUS="FAILED (cuDNN did not load)"
  tests_row tests_cudnn "2. cuDNN's cases (TCN_CUDNN_LIBRARY=${TCN_CUDNN_LIBRARY:-unset})"
  if [ -n "$why" ]; then
    # The probe's row said ok before anything loaded cuDNN: it is not.
    ROWS[0]="| 0. probe | FAILED (cuDNN did not load) | $PROBE_SECS | $PROBE_NOTE; $why |"
    write_summary
  fi
fi
fi

# --- 3. training on the device, against the CPU ----------------------------------------------------------
PTB_DIR=$B/ptb
# shellcheck disable=SC2206
TF=($TRAIN_FLAGS)
say "== 3. charlm train --device cuda: $TRAIN_FLAGS; the losses against the CPU's (ref/cpu_*_$REF.csv)"
if want 3; then
train() {  # NAME MODEL EXTRA...: a training run on the device; its CSV in $LOGS, its checkpoints in $BULK
  local name=$1 model=$2
  shift 2
  local windows=()  # the rehearsal's short windows, per model (the bundle's ref/rehearse_windows_*)
  # shellcheck disable=SC2207
  (( REHEARSE )) && windows=($(cat "$B/ref/rehearse_windows_$model" 2>/dev/null))
  step "$name" "$(lim 10 120)" "$GPU_CHARLM" train --model "$model" --device cuda --data "$PTB_DIR" "${TF[@]}" \
    "${windows[@]}" "$@" --metrics "$LOGS/$name.csv" --save "$BULK/$name.safetensors"
  local steps graphline
  steps=$(grep -c '^train,' "$LOGS/$name.csv" 2>/dev/null)
  graphline=$(grep -m1 '^cuda graph:' "$LOGS/$name.log" | cut -c1-120)
  row "3. train $name" "$STATUS" "$SECS" "${steps:-0} steps; ${graphline:-no 'cuda graph:' line}"
}
train tcn_graph tcn --conv_impl gemm --cuda_graph on
train tcn_eager tcn --conv_impl gemm --cuda_graph off
# Graph and eager must agree bit for bit: the losses, and every parameter and optimizer state at the end.
same_losses() { cmp -s <(awk -F, '$1 == "train" {print $3, $5}' "$1") <(awk -F, '$1 == "train" {print $3, $5}' "$2"); }
if [ -f "$BULK/tcn_graph.last.safetensors" ] && [ -f "$BULK/tcn_eager.last.safetensors" ]; then
  step graph_vs_eager "$(lim 5 30)" "$B/tcn_ckpt" compare "$BULK/tcn_graph.last.safetensors" "$BULK/tcn_eager.last.safetensors" 0
  if (( RC == 0 )) && ! same_losses "$LOGS/tcn_graph.csv" "$LOGS/tcn_eager.csv"; then STATUS="DIFFERS (losses)"; fi
  (( RC != 0 )) && [[ $STATUS == FAILED* ]] && STATUS="DIFFERS (parameters or state; tcn_ckpt compare ... 0)"
  row "3. graph == eager, bit for bit" "$STATUS" "$SECS" "tcn_ckpt compare (every tensor, rtol 0) and the logged losses"
else
  row "3. graph == eager, bit for bit" "FAILED (a run left no checkpoint)" 0 ""
fi
if (( REHEARSE )); then
  skip "3. train tcn_cudnn" "rehearsal: the emulated device has no cuDNN"
else
  train tcn_cudnn tcn --conv_impl cudnn --deterministic --cuda_graph on
fi
train lstm_graph lstm --cuda_graph on

# float32 on both, the GEMMs summed in other orders: the CPU and PyTorch agree within 5.3e-5 over 20 steps
# (README), so 1e-3 relative is loose enough for any honest float32 difference and tight enough for a bug.
LOSS_RTOL=1e-3
LOSS_TABLE="### the first training losses, --device cuda vs the CPU (same flags: $TRAIN_FLAGS)

| run | steps (cuda, cpu) | max rel. diff (at step) | loss at step 1, cuda / cpu | last step's loss, cuda / cpu | valid loss, cuda / cpu | ms/step (2..), cuda / cpu |
|---|---|---|---|---|---|---|"
for run in tcn_graph lstm_graph tcn_cudnn; do
  m=${run%%_*}
  ref=$B/ref/cpu_${m}_$REF.csv
  [ -f "$LOGS/$run.csv" ] || continue
  cmp_line=$(awk -F, -v tol="$LOSS_RTOL" '
    FNR == 1 { next }
    { f = FILENAME == ARGV[1] ? 1 : 2 }
    $1 == "train" { l[f, $3] = $5; n[f]++; last[f] = $3; if ($3 > 1) { ms[f] += $7; nm[f]++ } }
    $1 == "valid" { v[f] = $5 }
    function rel(a, b) { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; return b > 0 ? d / b : d }
    END {
      mx = -1; at = "-"
      for (s = 1; s <= last[2]; s++) if (((1, s) in l) && ((2, s) in l)) { r = rel(l[1, s], l[2, s]); if (r > mx) { mx = r; at = s } }
      if (n[1] != n[2] || n[1] == 0 || mx > tol || v[1] == "" || rel(v[1], v[2]) > tol) verdict = "DIFFERS"; else verdict = "ok"
      printf "%s\t| %d, %d | %s (%s) | %s / %s | %s / %s | %s / %s | %s / %s |", verdict,
        n[1], n[2], mx < 0 ? "-" : sprintf("%.2e", mx), at, l[1, 1], l[2, 1], l[1, last[2]], l[2, last[2]],
        v[1] == "" ? "-" : v[1], v[2] == "" ? "-" : v[2],
        nm[1] ? sprintf("%.1f", ms[1] / nm[1]) : "-", nm[2] ? sprintf("%.1f", ms[2] / nm[2]) : "-"
    }' "$LOGS/$run.csv" "$ref" 2>/dev/null)
  verdict=${cmp_line%%$'\t'*}
  [ -f "$ref" ] || verdict="MISSING ref/cpu_${m}_$REF.csv"
  LOSS_TABLE+=$'\n'"| $run ${cmp_line#*$'\t'}"
  worst=$(awk -F'|' '{gsub(/^ +| +$/, "", $3); print $3}' <<<"${cmp_line#*$'\t'}")
  row "3. $run losses vs CPU (rtol $LOSS_RTOL)" "${verdict:-FAILED}" 0 "largest relative difference (at step): ${worst:--}"
done
SECTIONS+=("$LOSS_TABLE")
CAPTURE_LINES=$(cd "$LOGS" && grep -H '^cuda graph:' ./*.log 2>/dev/null | sed 's|^\./||; s|\.log:|: |')
SECTIONS+=("### graph capture, as each run reported it
\`\`\`
${CAPTURE_LINES:-(no 'cuda graph:' lines)}
\`\`\`")
write_summary

fi  # step 3

# --- 4. charlm bench beside PyTorch on the same device ----------------------------------------------
say "== 4. charlm bench --device cuda beside PyTorch (eager)"
if want 4; then
if (( TORCH_CUDA )); then
  step bench "$(lim 60 200)" "$GPU_CHARLM" bench --device cuda "${BENCH[@]}" --generate_chars 0 --python "${PYENV[*]} $PY"
  note="PyTorch eager, cudnn.benchmark on"
else
  step bench "$(lim 60 200)" "$GPU_CHARLM" bench --device cuda "${BENCH[@]}" --generate_chars 0 --torch off
  note="PyTorch not run: $( (( REHEARSE )) && echo 'rehearsal, ')no PyTorch with CUDA here ($TORCH)"
fi
row "4. charlm bench --device cuda" "$STATUS" "$SECS" "$note"
BENCH_TABLE=$(grep -E '^\||^TCN step|per step on|steps: ' "$LOGS/bench.log" 2>/dev/null)
CONV_CHOICES=$(grep -h '^conv1d ' "$LOGS"/*.log 2>/dev/null | sort -u)
SECTIONS+=("### charlm bench --device cuda ${BENCH[*]}$( (( REHEARSE )) && echo ' (EMULATED: counts only, the times mean nothing)')

${BENCH_TABLE:-(no table: see bench.log in logs.tgz)}")
SECTIONS+=("### conv1d: each shape's choice (auto: cuDNN or our GEMM path)
\`\`\`
${CONV_CHOICES:-(no conv1d choice lines)}
\`\`\`")
write_summary
say "   core evidence (steps 0-4) in $OUT after $(elapsed) s"
INFO+=("- core evidence (steps 0-4) written after $(elapsed) s")

fi  # step 4

# --- 5. the layer benchmarks -------------------------------------------------------------------------
say "== 5. bench_cudnn (ours: GEMM/fused vs cuDNN) and tools/bench_torch_layers.py (nn.Conv1d, nn.LSTM)"
if want 5; then
step bench_cudnn "$(lim 40 120)" "$GPU_BENCH_CUDNN" --device cuda --precision all "${LAYER_SHAPE[@]}"
row "5. bench_cudnn" "$STATUS" "$SECS" "$(grep -m1 '^bench_cudnn' "$LOGS/bench_cudnn.log" | cut -c1-120)"
LAYER_TABLE="### conv1d and LSTM layers, forward + backward, ms per call$( (( REHEARSE )) && echo ' (EMULATED: the times mean nothing)')

ours (bench_cudnn):

$(grep -E '^\|' "$LOGS/bench_cudnn.log" 2>/dev/null)"
if (( TORCH_CUDA )); then
  step bench_torch_layers "$(lim 40 0)" "${PYENV[@]}" "$PY" tools/bench_torch_layers.py --device cuda --precision all --reps 10
  row "5. bench_torch_layers.py" "$STATUS" "$SECS" "$(grep -m1 '^bench_torch_layers' "$LOGS/bench_torch_layers.log" | cut -c1-120)"
  LAYER_TABLE+="

PyTorch (tools/bench_torch_layers.py, cudnn.benchmark on):

$(grep -E '^\|' "$LOGS/bench_torch_layers.log" 2>/dev/null)"
else
  skip "5. bench_torch_layers.py" "no PyTorch with CUDA here"
fi
SECTIONS+=("$LAYER_TABLE")
write_summary

fi  # step 5

# --- 6. memcheck on a short training run, our GEMM path --------------------------------------------------
say "== 6. compute-sanitizer memcheck: 3 training steps of each model (--conv_impl gemm)"
if want 6; then
if (( REHEARSE )); then
  skip "6. memcheck, 3 training steps" "rehearsal: compute-sanitizer needs a GPU"
elif [ -z "$SAN" ]; then
  row "6. memcheck, 3 training steps" "FAILED (compute-sanitizer not found)" 0 "PATH, /usr/local/cuda*/bin"
else
  for m in tcn lstm; do
    windows=(--seq_len 200 --validseqlen 160)
    [ "$m" = lstm ] && windows=(--seq_len 160)  # the LSTM carries its state: windows that do not overlap
    # --report-api-errors no: the run makes API calls that fail by design and are handled (a capture that
    # is tried and refused); memory errors are what this looks for. --conv_impl gemm: our kernels, and
    # cuDNN's algorithm search (many trial launches) kept out of the sanitizer's slowdown. The reference
    # model at a quarter of the batch and half the window: the same kernels, in time under memcheck.
    step "memcheck_$m" "$(lim 60 0)" "$SAN" --tool memcheck --report-api-errors no --error-exitcode 86 --print-limit 30 \
      "$GPU_CHARLM" train --model "$m" --device cuda --conv_impl gemm --data "$PTB_DIR" --max_steps 3 --log-interval 1 \
      --batch_size 8 "${windows[@]}" --eval_batches 1 --metrics "$LOGS/memcheck_$m.csv"
    verdict=$(grep -E 'ERROR SUMMARY' "$LOGS/memcheck_$m.log" | tail -1 | sed 's/^========= //')
    (( RC == 86 )) && STATUS="ERRORS FOUND"
    row "6. memcheck, 3 training steps of $m" "$STATUS" "$SECS" "${verdict:-no summary line}"
  done
fi

fi  # step 6

# --- 7. PyTorch under torch.compile ----------------------------------------------------------------------
say "== 7. PyTorch's TCN under torch.compile"
if want 7; then
if (( TORCH_CUDA )); then
  # The TCN only: compiling takes a minute or more, and the LSTM is cuDNN's either way.
  step torch_compile_tcn "$(lim 75 0)" "${PYENV[@]}" "$PY" tools/bench_torch.py --model tcn --device cuda --compile \
    --steps "$BENCH_STEPS" --warmup 3
  # Not compiling within the limit is PyTorch's start-up cost, not a failure of ours.
  [[ $STATUS == TIMEOUT* ]] && STATUS="skipped (torch.compile did not finish within its limit)"
  ms=$(grep -o '"ms_per_step_median": [0-9.]*' "$LOGS/torch_compile_tcn.log" | grep -o '[0-9.]*$')
  row "7. PyTorch tcn, torch.compile" "$STATUS" "$SECS" "median ${ms:--} ms/step (warm-up includes compiling)"
  SECTIONS+=("### PyTorch's TCN with torch.compile: median ${ms:--} ms/step ($STATUS)")
  write_summary
else
  skip "7. PyTorch, torch.compile" "no PyTorch with CUDA here"
fi

fi  # step 7

# --- 8. as time allows: the profiler, the remaining suites, racecheck --------------------------------------
say "== 8. as time allows: the profiler, the remaining suites, racecheck"
if want 8; then
step profile "$(lim 60 120)" "$GPU_CHARLM" bench --device cuda --model tcn "${SHAPE[@]}" --steps 1 --warmup 3 --generate_chars 0 \
  --torch off --profile 3 --trace "$OUT/trace.json"
row "8. bench --profile 3 (TCN)" "$STATUS" "$SECS" "traces: $(cd "$OUT" && ls trace*.json 2>/dev/null | tr '\n' ' ')"
PROFILE_TABLE=$(sed -n '/^### profile/,$p' "$LOGS/profile.log" 2>/dev/null | grep -vE '^trace written')
if (( TORCH_CUDA )); then
  step torch_profile "$(lim 45 0)" "${PYENV[@]}" "$PY" tools/bench_torch.py --model tcn --device cuda --steps 1 --warmup 3 \
    --profile 3 --profile_out "$LOGS/torch_profile.txt"
  row "8. bench_torch.py --profile 3" "$STATUS" "$SECS" ""
  PROFILE_TABLE+=$'\n\n'"torch.profiler (CUDA activities), same model and GPU:"$'\n```\n'"$(head -n 40 "$LOGS/torch_profile.txt" 2>/dev/null)"$'\n```'
else
  skip "8. bench_torch.py --profile 3" "no PyTorch with CUDA here"
fi
SECTIONS+=("### where the TCN step goes on the device (charlm bench --profile 3)$( (( REHEARSE )) && echo ' (EMULATED)')

${PROFILE_TABLE:-(no table: see profile.log in logs.tgz)}")
write_summary

step tests_rest 150 env OMP_NUM_THREADS=2 "$GPU_TESTS" -tse=cuda,device,ops '-tce=*cuda*' \
  "-sfe=*test_cudnn.cpp,$GPU_FILES"
tests_row tests_rest "8. the remaining suites (CPU)"

if (( REHEARSE )); then
  skip "8. racecheck on the reduction kernels" "rehearsal: compute-sanitizer needs a GPU"
elif [ -n "$SAN" ]; then
  step racecheck "$(lim 60 0)" env OMP_NUM_THREADS=2 "$SAN" --tool racecheck --error-exitcode 86 --print-limit 30 "$GPU_TESTS" \
    '-tc=CUDA vs CPU: sums*,CUDA vs CPU: long sums*,a shared-memory tree reduction*'
  verdict=$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOGS/racecheck.log" | tail -1 | sed 's/^========= //')
  (( RC == 86 )) && STATUS="ERRORS FOUND"
  row "8. racecheck on the reduction kernels" "$STATUS" "$SECS" "${verdict:-no summary line}"
fi

fi  # step 8

# --- 9. the stretch run ------------------------------------------------------------------------------------
# The reference TCN on the whole PTB for what the budget has left (at least 60 s, at most STRETCH_MAX), the
# fastest settings verified above (graph on; cuDNN under auto only if its cases passed), valid and test bpc
# at each epoch end; stopped by its limit, it reports the last whole epoch.
say "== 9. the stretch run: the reference TCN on PTB"
if want 9; then
left=$(( BUDGET - $(elapsed) - 15 ))
(( ! REHEARSE && left > STRETCH_MAX )) && left=$STRETCH_MAX
if (( left < 60 )); then
  row "9. stretch: the reference TCN trained on PTB" "skipped: out of time" 0 "${left} s left"
else
  conv=gemm
  if grep -qE '^\| 2\. .*\| ok \|' <<<"$(printf '%s\n' "${ROWS[@]}")" && (( ! REHEARSE )); then conv=auto; fi
  STRETCH=(--model tcn --device cuda --cuda_graph on --conv_impl "$conv" --log-interval 100 --data "$PTB_DIR")
  if (( REHEARSE )); then
    # A small model on a slice, so that two epochs end on the emulated device.
    mkdir -p "$BULK/ptb_slice"
    for s in train valid test; do head -c 6000 "$PTB_DIR/ptb.$s.txt" >"$BULK/ptb_slice/ptb.$s.txt"; done
    STRETCH=(--model tcn --device cuda --cuda_graph on --conv_impl gemm --log-interval 5 --data "$BULK/ptb_slice"
             --nhid 32 --emsize 16 --batch_size 4 --seq_len 100 --validseqlen 80 --epochs 2 --eval_batch_size 4)
  fi
  step stretch "$left" "$GPU_CHARLM" train "${STRETCH[@]}" --metrics "$LOGS/stretch.csv"
  epochs=$(grep -c '^test,' "$LOGS/stretch.csv" 2>/dev/null)
  epochs=${epochs:-0}
  lastv=$(grep '^valid,' "$LOGS/stretch.csv" 2>/dev/null | tail -1 | cut -d, -f6)
  lastt=$(grep '^test,' "$LOGS/stretch.csv" 2>/dev/null | tail -1 | cut -d, -f6)
  steps=$(grep '^train,' "$LOGS/stretch.csv" 2>/dev/null | tail -1 | cut -d, -f3)
  # Stopped by its limit after a whole epoch is what this step is for; stopped before one, it still
  # measured the step rate (the CSV), which is what a short window can give.
  if [[ $STATUS == TIMEOUT* ]] && (( epochs > 0 )); then STATUS="ok (stopped by the budget)"; fi
  if [[ $STATUS == TIMEOUT* ]] && (( ! REHEARSE )) && [ -n "$steps" ]; then STATUS="ok (stopped by the budget before an epoch ended)"; fi
  if [[ $STATUS == ok ]] && (( epochs == 0 )); then STATUS="FAILED (no epoch ended)"; fi
  row "9. stretch: the reference TCN trained on PTB" "$STATUS" "$SECS" \
    "$epochs epoch(s), ${steps:-0} steps; last valid bpc ${lastv:--}, test bpc ${lastt:--} (the paper: 1.31 test, after 100 epochs); ${STRETCH[*]}"
  cp "$LOGS/stretch.csv" "$OUT/stretch.csv" 2>/dev/null
fi

fi  # step 9

# --- summary ------------------------------------------------------------------------------------------
if [ -n "$SMI" ]; then
  timeout 20 "$SMI" --query-gpu=memory.used,utilization.gpu,clocks.sm --format=csv >"$LOGS/nvidia-smi-end.txt" 2>&1
fi
INFO+=("- logs: every step's output in logs.tgz ($(ls "$LOGS" | wc -l) files); total $(elapsed) s of a $BUDGET s budget")
write_summary
pack

# What comes back from $OUT is limited (docs/device_check.md): 8 files, 16 MiB each, 64 MiB together,
# two folders deep, names of letters, digits, '.', '_' and '-'. Checked here so that the rehearsal fails
# where the window would lose its evidence. The console grows by a few lines after this, the summary by
# this row: bytes, against limits of MiB.
out_limits() {
  local n=0 total=0 bad=() f rel size
  while IFS= read -r -d '' f; do
    rel=${f#"$OUT"/}
    n=$(( n + 1 ))
    if [ -L "$f" ] || { [ ! -d "$f" ] && [ ! -f "$f" ]; }; then
      bad+=("$rel: not a plain file or folder (a link, a FIFO, ...)")
    elif [ -d "$f" ]; then
      [[ $rel == */*/* ]] && bad+=("$rel/: more than 2 folders down")
      n=$(( n - 1 ))
    else
      size=$(stat -c %s "$f")
      total=$(( total + size ))
      (( size > 16 * 1048576 )) && bad+=("$rel: $(( size / 1048576 )) MiB, over 16 MiB")
      [[ $rel == */*/*/* ]] && bad+=("$rel: more than 2 folders down")
    fi
    [[ $rel =~ ^[A-Za-z0-9._/-]+$ ]] || bad+=("'$rel': a name with characters other than letters, digits, . _ -")
  done < <(find "$OUT" -mindepth 1 -print0)
  (( n > 8 )) && bad+=("$n files, over 8")
  (( total > 64 * 1048576 )) && bad+=("$(( total / 1048576 )) MiB in all, over 64 MiB")
  OUT_NOTE="$n files, $(awk -v b="$total" 'BEGIN {printf "%.2f", b / 1048576}') MiB: $(cd "$OUT" && find . -type f -printf '%P ' | sort)"
  if (( ${#bad[@]} )); then OUT_STATUS="FAILED (would not come back: ${bad[*]})"; else OUT_STATUS=ok; fi
}
out_limits
row "\$OUT within the device's limits" "$OUT_STATUS" 0 "$OUT_NOTE"
say ""
say "== summary ($SUMMARY)"
tee -a "$CONSOLE" <"$SUMMARY"
# The step table once more, last: the reply shows only the end of the output.
say ""
say "== steps"
printf '%s\n' "| step | result | s | note |" "|---|---|---|---|" "${ROWS[@]}" | cut -c1-300 | tee -a "$CONSOLE"
bad='FAILED|TIMEOUT|CRASHED|ERRORS|could not|DIFFERS|NO GPU|MISSING|SKIPPED'
(( REHEARSE )) && bad="$bad|out of time"
nbad=$(printf '%s\n' "${ROWS[@]}" | awk -F'|' '{print $3}' | grep -cE "$bad" || true)
say "device_check$( (( REHEARSE )) && echo ' --rehearse'): ${#ROWS[@]} steps, $nbad not ok; exit $(( nbad > 0 ))"
exit $(( nbad > 0 ))
