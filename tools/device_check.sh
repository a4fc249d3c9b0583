#!/usr/bin/env bash
# The one GPU check, run on the lent H200 machine. It builds nothing there (that
# machine has no -dev packages and no internet): it runs what
# tools/make_device_bundle.sh built and self-checked here.
#
# How a session runs it:
#   1. here, no GPU needed (about 5 minutes from clean on 2 cores, seconds after):
#        tools/make_device_bundle.sh
#   2. the device call, once (the script keeps itself under 470 s):
#        run(command="tools/device_check.sh", carry=["device_bundle"], timeout_s=540)
#   3. the summary table is the end of the reply; $OUT/summary.md,
#      $OUT/device_check.log (the console) and $OUT/logs.tgz (every step's full
#      log and metrics CSV) come back.
#
# Steps (each under its own `timeout`; a failure never stops the run; a step
# that no longer fits in the budget is skipped and says so):
#   a. probe: nvidia-smi, ldconfig, where libcudart/libcublas/libcublasLt/
#      libcudnn/libcuda are, PyTorch; then LD_LIBRARY_PATH = the bundle + the
#      CUDA library folders found (PyTorch keeps the environment it came with)
#   b. tcn_tests -ts=cuda,device (the GPU's test suites), then the whole suite
#   c. compute-sanitizer memcheck, racecheck, initcheck on a short CUDA subset
#   d. the first 20 training losses of both models, --device cuda vs cpu, on
#      the carried PTB slice (device_bundle/ptb)
#   e. charlm bench --device cuda: tcn and PyTorch training steps on the same GPU
#   e3. bench_cudnn: conv1d (GEMM path, cuDNN, cuDNN deterministic, auto) and
#      the LSTM (fused, cuDNN) layer by layer; tools/bench_torch_layers.py: PyTorch's
#      nn.Conv1d (deterministic too) and nn.LSTM at the same shapes
#   e2. charlm bench --device cuda --profile 3 (the TCN's per-op GPU table, a
#      trace in $OUT) and torch.profiler's table for PyTorch's TCN on the same GPU
#   (time left: memcheck on all the CUDA suites)
#   f. the summary (markdown), printed last and written to $OUT/summary.md;
#      the exit status is 1 when any step is not ok, 0 when all are
#
# Settings: DEVICE_CHECK_BUDGET (seconds, default 470), CUDA_SUITES (the doctest
# suites of step b, default cuda,device), SAN_FILTER (the doctest test-case
# filter of step c), BENCH_STEPS (default 20).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/device_check_out}
mkdir -p "$OUT"
BUDGET=${DEVICE_CHECK_BUDGET:-470}
SAN_FILTER=${SAN_FILTER:-CUDA vs CPU: elementwise*,CUDA vs CPU: long sums*,a shared-memory tree reduction*}
CUDA_SUITES=${CUDA_SUITES:-cuda,device}
BENCH_STEPS=${BENCH_STEPS:-20}
T0=$(date +%s)
LOGS=$(mktemp -d /tmp/device_check.XXXXXX)
B=""  # the unpacked bundle, set in step a
trap 'rm -rf "$LOGS"; [[ $B == /tmp/tcn_device_bundle.* ]] && rm -rf "$B"' EXIT
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
    echo "## tcn device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s"
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

# step NAME LIMIT CMD...: runs CMD under `timeout` (LIMIT seconds, less if the
# budget is short), its output in $LOGS/NAME.log; sets RC, STATUS, SECS.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - $(elapsed) - 15 ))
  SECS=0
  if (( left < 10 )); then
    RC=125 STATUS="skipped: out of time"
    say "-- $name: skipped, out of time"
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
# The doctest totals of a log, shortened.
doctest_totals() {
  grep -E 'test cases:' "$1" | tail -1 | sed 's/\[doctest\] test cases: *//; s/ *| */, /g; s/, *$//'
}

# --- a. probe ----------------------------------------------------------------------
say "== a. probe ($(date -u +%H:%M:%S) UTC)"
OS=$( (. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}") || echo '?')
GLIBC=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')
say "host: $(uname -srm), $OS, glibc ${GLIBC:-?}, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
INFO+=("- host: $OS, glibc ${GLIBC:-?}, $(nproc) cores")
SMI=$(command -v nvidia-smi || true)
for c in /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi; do [ -z "$SMI" ] && [ -x "$c" ] && SMI=$c; done
SMI=${SMI:-nvidia-smi}
{
  timeout 20 "$SMI" 2>&1 || echo "nvidia-smi: rc $?"
} >"$LOGS/nvidia-smi.txt"
tee -a "$CONSOLE" <"$LOGS/nvidia-smi.txt"
GPU=$(timeout 20 "$SMI" --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
INFO+=("- GPU: ${GPU:-none found by nvidia-smi}")

ldconfig -p 2>/dev/null | grep -E 'cuda|cublas|cudnn' >"$LOGS/ldconfig.txt"
say "ldconfig -p | grep -E 'cuda|cublas|cudnn': $(wc -l <"$LOGS/ldconfig.txt") entries"
head -n 30 "$LOGS/ldconfig.txt" | sed 's/^/   /' | tee -a "$CONSOLE"

PY=$(command -v python3 || true)
ORIG_LD=${LD_LIBRARY_PATH:-}
# Python children (PyTorch) get the environment they came with, not ours.
if [ -n "$ORIG_LD" ]; then PYENV=(env "LD_LIBRARY_PATH=$ORIG_LD"); else PYENV=(env -u LD_LIBRARY_PATH); fi
PY_DIRS=""
if [ -n "$PY" ]; then
  PY_DIRS=$(timeout 30 "${PYENV[@]}" "$PY" - 2>/dev/null <<'EOF'
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
fi
CAND=()
add_cand() { local d; for d in "$@"; do [ -d "$d" ] && CAND+=("$d"); done; }
# The toolkit's first (nvcc 13.0, the version this bundle was built with), then
# Python's nvidia-* wheels (what PyTorch uses), then the system's.
add_cand /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib
for d in /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib; do add_cand "$d"; done
while IFS= read -r d; do [ -n "$d" ] && add_cand "$d"; done <<<"$PY_DIRS"
add_cand /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/lib
IFS=: read -r -a orig_dirs <<<"$ORIG_LD"
for d in "${orig_dirs[@]}"; do [ -n "$d" ] && add_cand "$d"; done
say "library search: ${CAND[*]}"
first_with() {  # first_with LIB...: the first candidate folder holding every LIB
  local d l ok
  for d in "${CAND[@]}"; do
    ok=1
    for l in "$@"; do [ -e "$d/$l" ] || ok=0; done
    if (( ok )); then echo "$d"; return; fi
  done
}
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcuda.so.1 libnccl.so.2; do
  hits=()
  for d in "${CAND[@]}"; do [ -e "$d/$lib" ] && hits+=("$d"); done
  say "   $lib: ${hits[*]:-NOT FOUND}"
done
CUBLAS_DIR=$(first_with libcublas.so.13 libcublasLt.so.13)
CUDART_DIR=$(first_with libcudart.so.13 libcublas.so.13 libcublasLt.so.13)
[ -n "$CUDART_DIR" ] || CUDART_DIR=$(first_with libcudart.so.13)
LIBCUDA_DIR=""
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then LIBCUDA_DIR=$(first_with libcuda.so.1); fi
# NCCL is loaded by tcn when first used (the one-rank NCCL test of the cuda suite):
# the system's, else PyTorch's nvidia-nccl wheel.
NCCL_DIR=""
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then NCCL_DIR=$(first_with libnccl.so.2); fi
# cuDNN likewise (cuda/cudnn.cu loads libcudnn.so.9, which loads its sub-libraries
# from the same search path): the system's, else PyTorch's nvidia-cudnn wheel.
CUDNN_DIR=""
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then CUDNN_DIR=$(first_with libcudnn.so.9); fi
INFO+=("- CUDA libraries: cudart ${CUDART_DIR:-NOT FOUND}, cublas/cublasLt ${CUBLAS_DIR:-NOT FOUND}, libcuda ${LIBCUDA_DIR:-from ldconfig}, libnccl ${NCCL_DIR:-from ldconfig or NOT FOUND}, libcudnn ${CUDNN_DIR:-from ldconfig or NOT FOUND}")

TORCH="no python3"
if [ -n "$PY" ]; then
  TORCH=$(timeout 90 "${PYENV[@]}" "$PY" -c 'import torch; print(torch.__version__, torch.cuda.is_available(), torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>&1 | tail -1)
fi
say "python3: ${PY:-none}; torch version, cuda available, cudnn, GPU: $TORCH"
INFO+=("- PyTorch (${PY:-no python3}): $TORCH")

SAN=$(command -v compute-sanitizer || true)
if [ -z "$SAN" ]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    if [ -x "$c" ]; then SAN=$c; break; fi
  done
fi
say "compute-sanitizer: ${SAN:-not found}"

# The bundle: unpacked into a copy under /tmp (the tree's copy stays packed, so
# that a dry run here leaves nothing large to carry), every file checked.
# Where /tmp is mounted noexec, build-device-bundle/ in the tree (git-ignored) instead.
unpack_to() {
  rm -rf "$1" && mkdir -p "$1" && cp -a device_bundle/. "$1/" && sh "$1/unpack.sh" >>"$LOGS/unpack.log" 2>&1 &&
    cp /bin/true "$1/.exec_test" && "$1/.exec_test"
}
B=$(mktemp -d /tmp/tcn_device_bundle.XXXXXX)
if [ ! -d device_bundle ]; then
  say "NO device_bundle/: run tools/make_device_bundle.sh here and carry [\"device_bundle\"]"
elif unpack_to "$B" || { B=$PWD/build-device-bundle && unpack_to "$B"; }; then
  say "device_bundle/ unpacked into $B, checksums ok"
else
  say "unpack FAILED: $(tail -3 "$LOGS/unpack.log" | tr '\n' ' ')"
fi
INFO+=("- bundle: $(head -2 "$B/BUILD_INFO" 2>/dev/null | tr '\n' ';' | sed 's/;$//')")
STALE=$(sha256sum -c --quiet "$B/SOURCES.sha256" 2>/dev/null | grep -c . || true)
if [ "${STALE:-0}" -gt 0 ]; then
  say "WARNING: $STALE source file(s) changed since the bundle was built (rerun tools/make_device_bundle.sh):"
  sha256sum -c --quiet "$B/SOURCES.sha256" 2>&1 | head -5 | sed 's/^/   /' | tee -a "$CONSOLE"
  INFO+=("- **bundle is STALE**: $STALE source file(s) differ from the tree it was built from")
else
  INFO+=("- bundle matches the working tree's sources")
fi

LDP=$B
for d in "$CUDART_DIR" "$CUBLAS_DIR" "$LIBCUDA_DIR" "$NCCL_DIR" "$CUDNN_DIR"; do
  [ -n "$d" ] && [[ ":$LDP:" != *":$d:"* ]] && LDP=$LDP:$d
done
[ -n "$ORIG_LD" ] && LDP=$LDP:$ORIG_LD
export LD_LIBRARY_PATH=$LDP
ldd "$B/tcn_tests" >"$LOGS/ldd_tcn_tests.txt" 2>&1
if grep -q 'not found' "$LOGS/ldd_tcn_tests.txt" && [ -d "$B/fallback" ]; then
  say "unresolved with the system's GCC runtime; adding $B/fallback"
  export LD_LIBRARY_PATH=$B:$B/fallback:${LDP#"$B":}
  ldd "$B/tcn_tests" >"$LOGS/ldd_tcn_tests.txt" 2>&1
fi
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
say "ldd tcn_tests:"
sed 's/ (0x[0-9a-f]*)//' "$LOGS/ldd_tcn_tests.txt" | sed 's/^/   /' | tee -a "$CONSOLE"
UNRESOLVED=$(grep 'not found' "$LOGS/ldd_tcn_tests.txt" | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ -n "$GPU" ]; then probe=ok; else probe="NO GPU (nvidia-smi)"; fi
row "probe" "$probe" "$(elapsed)" "unresolved by ldd: ${UNRESOLVED:-none}; compute-sanitizer: ${SAN:-not found}"
pack

# --- b. tests ------------------------------------------------------------------------
say "== b. tcn_tests"
# The thread count the CPU suites run with in CI (ctest).
step tests_cuda 150 env OMP_NUM_THREADS=2 "$B/tcn_tests" "-ts=$CUDA_SUITES" --duration=true
where=$(grep -m1 '^\[tcn\]' "$LOGS/tests_cuda.log" | sed 's/^\[tcn\] //')
[[ $where == *SKIPPED* ]] && STATUS="$STATUS, CUDA SKIPPED"
row "tcn_tests -ts=$CUDA_SUITES" "$STATUS" "$SECS" "$(doctest_totals "$LOGS/tests_cuda.log"); ${where:-no [tcn] line}"
grep -E 'ERROR|FAILED|test case exceeded' "$LOGS/tests_cuda.log" | head -n 20 | cut -c1-200 | sed 's/^/   /' | tee -a "$CONSOLE"
step tests_all 240 env OMP_NUM_THREADS=2 "$B/tcn_tests"
row "tcn_tests (all)" "$STATUS" "$SECS" "$(doctest_totals "$LOGS/tests_all.log")"

# --- c. compute-sanitizer ----------------------------------------------------------------
say "== c. compute-sanitizer on -tc='$SAN_FILTER'"
for tool in memcheck racecheck initcheck; do
  if [ -z "$SAN" ]; then
    row "sanitizer $tool" "skipped" 0 "compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"
    continue
  fi
  step "san_$tool" 90 env OMP_NUM_THREADS=2 "$SAN" --tool "$tool" --error-exitcode 86 --print-limit 30 \
    "$B/tcn_tests" "-tc=$SAN_FILTER"
  verdict=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|INITCHECK SUMMARY' "$LOGS/san_$tool.log" | tail -1 | sed 's/^========= //')
  [ "$RC" -eq 86 ] && STATUS="ERRORS FOUND"
  row "sanitizer $tool" "$STATUS" "$SECS" "${verdict:-no summary line}; $(doctest_totals "$LOGS/san_$tool.log")"
done

# --- d. training losses, cuda vs cpu ----------------------------------------------------
say "== d. 20 training steps of each model, --device cuda vs cpu, on $B/ptb"
TRAIN_TABLE="### training on the PTB slice: the first 20 losses, --device cuda vs --device cpu

| model | steps (cuda, cpu) | max rel. diff of the losses (at step) | loss at step 1, cuda / cpu | loss at step 20, cuda / cpu | valid loss, cuda / cpu | ms/step (2-20), cuda / cpu |
|---|---|---|---|---|---|---|"
for m in tcn lstm; do
  for d in cuda cpu; do
    step "train_${m}_$d" 150 "$B/charlm" train --model "$m" --device "$d" --data "$B/ptb" --max_steps 20 \
      --log-interval 1 --eval_batches 4 --metrics "$LOGS/train_${m}_$d.csv"
    row "train $m --device $d" "$STATUS" "$SECS" "$(grep -c '^train,' "$LOGS/train_${m}_$d.csv" 2>/dev/null || echo 0) steps logged"
  done
  touch "$LOGS/train_${m}_cuda.csv" "$LOGS/train_${m}_cpu.csv"
  cmp=$(awk -F, '
    FNR == 1 { next }
    { f = FILENAME == ARGV[1] ? 1 : 2 }
    $1 == "train" { l[f, $3] = $5; n[f]++; if ($3 > 1) { ms[f] += $7; nm[f]++ } }
    $1 == "valid" { v[f] = $5 }
    function rel(a, b) { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; return b > 0 ? d / b : d }
    END {
      mx = -1; at = "-"
      for (s = 1; s <= 20; s++) if (((1, s) in l) && ((2, s) in l)) { r = rel(l[1, s], l[2, s]); if (r > mx) { mx = r; at = s } }
      printf "| %d, %d | %s (%s) | %s / %s | %s / %s | %s / %s | %s / %s |",
        n[1], n[2], mx < 0 ? "-" : sprintf("%.2e", mx), at,
        l[1, 1] == "" ? "-" : l[1, 1], l[2, 1] == "" ? "-" : l[2, 1],
        l[1, 20] == "" ? "-" : l[1, 20], l[2, 20] == "" ? "-" : l[2, 20],
        v[1] == "" ? "-" : v[1], v[2] == "" ? "-" : v[2],
        nm[1] ? sprintf("%.1f", ms[1] / nm[1]) : "-", nm[2] ? sprintf("%.1f", ms[2] / nm[2]) : "-"
    }' "$LOGS/train_${m}_cuda.csv" "$LOGS/train_${m}_cpu.csv")
  TRAIN_TABLE+=$'\n'"| $m $cmp"
done
SECTIONS+=("$TRAIN_TABLE")
write_summary

# --- e. benchmark -------------------------------------------------------------------------
say "== e. charlm bench --device cuda (PyTorch on the same GPU)"
if [ -n "$PY" ]; then
  py_cmd="${PYENV[*]} $PY"
  step bench 200 "$B/charlm" bench --device cuda --steps "$BENCH_STEPS" --warmup 3 --generate_chars 0 --python "$py_cmd"
else
  step bench 200 "$B/charlm" bench --device cuda --steps "$BENCH_STEPS" --warmup 3 --generate_chars 0 --torch off
fi
row "bench --device cuda" "$STATUS" "$SECS" "$(grep -m1 '^charlm bench' "$LOGS/bench.log" | cut -c1-120)"
BENCH_TABLE=$(grep -E '^\||^TCN step' "$LOGS/bench.log" 2>/dev/null)
if [ "$RC" -ne 0 ] && [ -n "$PY" ]; then
  # Ours failed: PyTorch's numbers alone, still worth having.
  BENCH_TABLE+=$'\n'"PyTorch alone (tools/bench_torch.py --device cuda), median ms/step:"
  for m in tcn lstm; do
    step "bench_torch_$m" 90 "${PYENV[@]}" "$PY" tools/bench_torch.py --model "$m" --device cuda \
      --steps "$BENCH_STEPS" --warmup 3
    ms=$(grep -o '"ms_per_step_median": [0-9.]*' "$LOGS/bench_torch_$m.log" | grep -o '[0-9.]*$')
    row "bench_torch.py --model $m --device cuda" "$STATUS" "$SECS" "median ${ms:--} ms/step"
    BENCH_TABLE+=" $m ${ms:--}"
  done
fi
torch_line=$(grep -m2 '^bench_torch:' "$LOGS/bench.log" 2>/dev/null | tr '\n' ' ')
SECTIONS+=("### charlm bench --device cuda, $BENCH_STEPS timed steps after 3 warm-up, batch 32 x 400

${BENCH_TABLE:-(no table: see bench.log in logs.tgz)}

${torch_line:-}")
write_summary

# --- e3. cuDNN beside our CUDA paths, layer by layer, and PyTorch's layers ---------------------
say "== e3. bench_cudnn (ours: GEMM/fused vs cuDNN) and tools/bench_torch_layers.py (nn.Conv1d, nn.LSTM)"
step bench_cudnn 120 "$B/bench_cudnn" --device cuda --precision all --reps 10
row "bench_cudnn" "$STATUS" "$SECS" "$(grep -m1 '^bench_cudnn' "$LOGS/bench_cudnn.log" | cut -c1-120)"
LAYER_TABLE="### conv1d and LSTM layers, forward + backward, ms per call (batch 32 x 400)

ours (build/bench_cudnn):

$(grep -E '^\|' "$LOGS/bench_cudnn.log" 2>/dev/null)"
if [ -n "$PY" ]; then
  step bench_torch_layers 90 "${PYENV[@]}" "$PY" tools/bench_torch_layers.py --device cuda --precision all --reps 10
  row "bench_torch_layers.py" "$STATUS" "$SECS" "$(grep -m1 '^bench_torch_layers' "$LOGS/bench_torch_layers.log" | cut -c1-120)"
  LAYER_TABLE+="

PyTorch (tools/bench_torch_layers.py, cudnn.benchmark on):

$(grep -E '^\|' "$LOGS/bench_torch_layers.log" 2>/dev/null)"
fi
SECTIONS+=("$LAYER_TABLE")
write_summary

# --- e2. where the GPU step goes: our profiler (device clock) beside torch.profiler --------
say "== e2. charlm bench --device cuda --profile 3 (TCN, fp32 and tf32) and torch.profiler"
step profile 120 "$B/charlm" bench --device cuda --model tcn --steps 1 --warmup 3 --generate_chars 0 --torch off \
  --profile 3 --trace "$OUT/trace.json"
row "bench --device cuda --profile 3" "$STATUS" "$SECS" "traces: $(cd "$OUT" && ls trace-*.json 2>/dev/null | tr '\n' ' ')"
PROFILE_TABLE=$(sed -n '/^### profile/,$p' "$LOGS/profile.log" 2>/dev/null | grep -vE '^trace written')
if [ -n "$PY" ]; then
  step torch_profile 90 "${PYENV[@]}" "$PY" tools/bench_torch.py --model tcn --device cuda --steps 1 --warmup 3 \
    --profile 3 --profile_out "$LOGS/torch_profile.txt"
  row "bench_torch.py --profile 3 --device cuda" "$STATUS" "$SECS" ""
  PROFILE_TABLE+=$'\n\n'"torch.profiler (CUDA activities), same model and GPU:"$'\n```\n'"$(head -n 40 "$LOGS/torch_profile.txt" 2>/dev/null)"$'\n```'
fi
SECTIONS+=("### where the TCN step goes on the GPU (charlm bench --profile 3)

${PROFILE_TABLE:-(no table: see profile.log in logs.tgz)}")
write_summary

# Last, if time is left: memcheck over every CUDA test case.
if [ -n "$SAN" ] && (( BUDGET - $(elapsed) > 120 )); then
  say "== extra: compute-sanitizer memcheck on -ts=$CUDA_SUITES"
  step san_memcheck_all 100 env OMP_NUM_THREADS=2 "$SAN" --tool memcheck --error-exitcode 86 --print-limit 30 \
    "$B/tcn_tests" "-ts=$CUDA_SUITES"
  verdict=$(grep -E 'ERROR SUMMARY' "$LOGS/san_memcheck_all.log" | tail -1 | sed 's/^========= //')
  [ "$RC" -eq 86 ] && STATUS="ERRORS FOUND"
  row "sanitizer memcheck -ts=$CUDA_SUITES" "$STATUS" "$SECS" "${verdict:-no summary line}"
fi

# --- f. summary ------------------------------------------------------------------------------
timeout 20 "$SMI" --query-gpu=memory.used,utilization.gpu,clocks.sm --format=csv >"$LOGS/nvidia-smi-end.txt" 2>&1
INFO+=("- logs: every step's output in logs.tgz ($(ls "$LOGS" | wc -l) files); total $(elapsed) s of a $BUDGET s budget")
write_summary
pack
say ""
say "== f. summary ($SUMMARY)"
tee -a "$CONSOLE" <"$SUMMARY"
nbad=$(printf '%s\n' "${ROWS[@]}" | grep -cE 'FAILED|TIMEOUT|CRASHED|ERRORS|could not|SKIPPED|NO GPU' || true)
say "device_check: $nbad step(s) not ok; exit $(( nbad > 0 ))"
exit $(( nbad > 0 ))
