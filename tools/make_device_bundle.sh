#!/usr/bin/env bash
# Assembles what the lent GPU machine runs, here, and proves it starts there.
#
#   scripts/setup.sh                 (once: packages, patchelf included, and build/;
#                                     TCN_CUDA=AUTO compiles the CUDA backend where nvcc is)
#   tools/make_device_bundle.sh      then the one device call (docs/device_check.md):
#     run(command="tools/device_check.sh", carry=["device_bundle"], timeout_s=380)
#
# 1. Build: the Release CUDA build scripts/setup.sh made (BUILD, default build/;
#    CI's own; TCN_CUDA=ON, or AUTO where it found nvcc), brought up to date for
#    the four programs the device check runs.
#    Its CUDA code is compiled for sm_90 (TCN_CUDA_ARCHS, the H100's and the
#    H200's), and files it reads at run time (tests/golden/, tools/bench_torch.py)
#    are looked up under $TCN_SOURCE_DIR, which the device check sets to the
#    device's checkout.
# 2. Assemble device_bundle/ (git-ignored; carried to the device as one path):
#      tcn_tests, charlm, bench_cudnn, tcn_ckpt   RUNPATH $ORIGIN
#      libopenblas.so.0, libdnnl.so.3, libgomp.so.1, ...
#                                 every shared library they need except CUDA's own
#                                 (libcudart, libcublas, libcublasLt, libcuda,
#                                 libcudnn, libnccl: the device's), glibc's and
#                                 the GCC runtime's (libstdc++, libgcc_s: the
#                                 device's, which must be as new as BUILD_INFO's
#                                 "needs" line says; a copy of this machine's
#                                 would need this machine's glibc anyway)
#      ptb/ptb.{train,valid,test}.txt   the whole Penn Treebank (for the stretch
#                                 training run and the loss checks)
#      ref/                       the CPU's side of the loss checks, computed here:
#                                 the flags (ref/train_flags, ref/rehearse_flags)
#                                 and the metrics CSVs of both models trained with
#                                 them on this CPU, so no GPU time goes to CPU runs
#      unpack.sh, SHA256SUMS      gunzips the .gz files, checks every file
#      BUILD_INFO, SOURCES.sha256 what was built, from which sources
#    Every file over 1 MiB travels gzipped: the working tree and the carried
#    bundle together must stay under 56 MiB (the limit is 64 MiB).
# 3. Self-check, on an unpacked copy, with nothing from this machine's
#    environment (env -i, LD_LIBRARY_PATH = the bundle alone): `ldd` of each
#    program must leave nothing unresolved but CUDA's libraries and resolve
#    nothing but CUDA, glibc and the GCC runtime outside the bundle; the golden
#    tests must pass from the bundle and must fail with TCN_SOURCE_DIR elsewhere
#    (so the device's copy of tests/golden/ is the one read); and the CPU
#    reference runs of step 2 run from the bundle's charlm.
#
# Environment: BUILD (default build), PTB (default ../shared/data/ptb, else
# data/ptb), JOBS (default nproc), MAX_MIB (default 56).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BUNDLE=device_bundle
JOBS=${JOBS:-$(nproc)}
MAX_MIB=${MAX_MIB:-56}
PTB=${PTB:-}
if [ -z "$PTB" ]; then
  for d in ../shared/data/ptb data/ptb; do
    if [ -f "$d/ptb.train.txt" ]; then PTB=$d; break; fi
  done
fi
t_start=$(date +%s)
since() { echo "$(( $(date +%s) - t_start )) s"; }
die() { echo "make_device_bundle: error: $*" >&2; exit 1; }

command -v patchelf >/dev/null || die "patchelf is missing (scripts/setup.sh installs it; or apt-get install -y patchelf)"
[ -f "$PTB/ptb.train.txt" ] || die "no PTB corpus (set PTB=DIR with ptb.{train,valid,test}.txt, or run scripts/get_data.sh)"
[ -f "$BUILD/CMakeCache.txt" ] || die "no build in $BUILD/: run scripts/setup.sh first"
# TCN_CUDA_BUILT is what configuring decided: ON where TCN_CUDA=ON, or AUTO found nvcc and the toolkit.
# Configure again first (seconds), so that the cache says what this tree's CMakeLists.txt decides.
cmake -S . -B "$BUILD" >"$BUILD/bundle-configure.log" 2>&1 || { tail -n 20 "$BUILD/bundle-configure.log"; die "configuring $BUILD/ failed"; }
built=$(sed -n 's/^TCN_CUDA_BUILT:INTERNAL=//p' "$BUILD/CMakeCache.txt")
[ "$built" = ON ] ||
  die "$BUILD/ does not compile the CUDA backend (TCN_CUDA=$(sed -n 's/^TCN_CUDA:STRING=//p' "$BUILD/CMakeCache.txt"), built: ${built:-unknown}): nvcc was not found under /usr/local/cuda; install the CUDA toolkit, or configure with -DTCN_CUDA=ON to see why"
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$BUILD/CMakeCache.txt" || die "$BUILD/ is not a Release build"
archs=$(sed -n 's/^TCN_CUDA_ARCHS:STRING=//p' "$BUILD/CMakeCache.txt")
[[ ";$archs;" == *";90;"* || ";$archs;" == *";90a;"* ]] ||
  die "$BUILD/ compiles CUDA for '$archs', not sm_90 (the H100/H200): configure with -DTCN_CUDA_ARCHS=90"

# --- 1. build (incremental) ---------------------------------------------------
echo "== bring $BUILD/ up to date: tcn_tests charlm bench_cudnn tcn_ckpt (-j$JOBS)"
cmake --build "$BUILD" -j"$JOBS" --target tcn_tests charlm bench_cudnn tcn_ckpt >"$BUILD/bundle-build.log" 2>&1 ||
  { grep -E -m 20 'error|Error' "$BUILD/bundle-build.log"; die "build failed (log: $BUILD/bundle-build.log)"; }
BINS=("$BUILD/tests/tcn_tests" "$BUILD/charlm" "$BUILD/bench_cudnn" "$BUILD/examples/tcn_ckpt")
for b in "${BINS[@]}"; do [ -x "$b" ] || die "missing $b"; done

# --- 2. assemble --------------------------------------------------------------
echo "== assemble $BUNDLE/"
grep -qx '/device_bundle/' .gitignore || die "/device_bundle/ is not in .gitignore"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/ptb" "$BUNDLE/ref"
is_cuda() { case "$1" in libcudart.so*|libcublas.so*|libcublasLt.so*|libcuda.so*|libcudnn*.so*|libnvrtc*.so*|libnccl.so*) return 0;; esac; return 1; }
is_glibc() { case "$1" in linux-vdso.so*|ld-linux-x86-64.so*|libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libresolv.so.2|libutil.so.1) return 0;; esac; return 1; }
is_gcc_rt() { case "$1" in libstdc++.so.6|libgcc_s.so.1) return 0;; esac; return 1; }

declare -A libs=()
for b in "${BINS[@]}"; do
  deps=$(ldd "$b")
  if [[ $deps == *"not found"* ]]; then echo "$deps"; die "$b has unresolved libraries here"; fi
  while read -r name path; do
    if is_cuda "$name" || is_glibc "$name" || is_gcc_rt "$name"; then continue; fi
    libs[$name]=$path
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$deps")
done
for name in "${!libs[@]}"; do
  dest=$BUNDLE/$name
  cp -L "${libs[$name]}" "$dest"
  chmod 644 "$dest"
  patchelf --set-rpath '$ORIGIN' "$dest"
  printf '   %-20s <- %s\n' "$name" "$(readlink -f "${libs[$name]}")"
done
for want in libopenblas.so.0 libgomp.so.1; do [ -f "$BUNDLE/$want" ] || die "expected $want among the programs' libraries"; done
for b in "${BINS[@]}"; do
  cp "$b" "$BUNDLE/"
  patchelf --set-rpath '$ORIGIN' "$BUNDLE/$(basename "$b")"
done
cp "$PTB"/ptb.{train,valid,test}.txt "$BUNDLE/ptb/"

# unpack.sh: gunzips every .gz next to itself (once) and checks every file.
cat >"$BUNDLE/unpack.sh" <<'EOF'
#!/bin/sh
# Unpacks this bundle's gzipped files next to themselves (once) and checks every
# file against SHA256SUMS. Written by tools/make_device_bundle.sh.
set -e
cd "$(dirname "$0")"
for z in $(find . -name '*.gz'); do
  f=${z%.gz}
  [ -e "$f" ] && continue
  if command -v gzip >/dev/null 2>&1; then
    gzip -dc "$z" >"$f.part"
  else
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "$f.part"
  fi
  case "$f" in *.txt|*.csv) chmod 644 "$f.part" ;; *) chmod 755 "$f.part" ;; esac
  mv "$f.part" "$f"
done
sha256sum -c --quiet SHA256SUMS
EOF
chmod 755 "$BUNDLE/unpack.sh"

# What was built, from what: device_check.sh reports a bundle older than the tree.
git ls-files -co --exclude-standard -- CMakeLists.txt core ops autograd nn cuda examples tests |
  grep -v '^tests/golden/' | sort | xargs sha256sum >"$BUNDLE/SOURCES.sha256"
{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(lscpu | sed -n 's/^Model name: *//p' | head -1), $(grep -o -m1 'avx512_bf16\|avx512f' /proc/cpuinfo | head -1 || echo 'no AVX-512'))"
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')"
  echo "build $BUILD/: $(grep -E '^(CMAKE_BUILD_TYPE|TCN_CUDA|TCN_CUDA_ARCHS):' "$BUILD/CMakeCache.txt" | tr '\n' ' ')"
  echo "nvcc $(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*' || echo '?')"
  echo "c++ $(c++ -dumpfullversion)"
  echo "glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
  need() { objdump -T "${BINS[@]}" "$BUNDLE"/*.so* 2>/dev/null | grep -o "$1"'_[0-9.]*' | sort -uV | tail -1; }
  echo "needs $(need GLIBC) $(need GLIBCXX) $(need CXXABI)"
  # The glibc floor, and the files that set it (OpenMPI's libevent_core asks for GLIBC_2.36: a build with
  # -DTCN_MPI=OFF, which the device check never needs, leaves it out).
  floor=$(need GLIBC)
  setters=$(for f in "${BINS[@]}" "$BUNDLE"/*.so*; do
    # grep reads all of objdump's output (no -q): an early exit would kill objdump with
    # SIGPIPE, which pipefail counts as a failed match.
    if objdump -T "$f" 2>/dev/null | grep "${floor}[^.0-9]" >/dev/null; then basename "$f"; fi
  done | tr '\n' ' ')
  echo "glibc floor $floor, set by ${setters% }"
  echo "mpi $(grep -q 'libmpi' <<<"${!libs[*]}" && echo "carried (build with -DTCN_MPI=OFF to leave it and its glibc needs out)" || echo "not carried")"
} >"$BUNDLE/BUILD_INFO"
sed 's/^/   /' "$BUNDLE/BUILD_INFO"

# --- 3. self-check, and the CPU references (from the bundle) -------------------------
echo "== self-check: an unpacked copy, nothing from this environment (env -i)"
scratch=$(mktemp -d /tmp/tcn-bundle-check.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cp -a "$BUNDLE" "$scratch/"
B=$scratch/$BUNDLE
run_clean() { env -i PATH=/usr/bin:/bin HOME="$scratch" LD_LIBRARY_PATH="$B" "$@"; }
bad=0
for bin in tcn_tests charlm bench_cudnn tcn_ckpt; do
  echo "-- ldd $BUNDLE/$bin   (LD_LIBRARY_PATH=<bundle> only)"
  while IFS= read -r line; do
    name=$(awk '{print $1}' <<<"$line")
    path=$(awk '$2 == "=>" {print $3}' <<<"$line")
    if [[ $line == *"not found"* ]]; then
      if is_cuda "$name"; then verdict="ok: CUDA, from the device"; else verdict="UNRESOLVED"; bad=1; fi
    elif [[ $path == "$B"/* ]]; then
      verdict="ok: bundle"
    elif is_cuda "$name"; then
      verdict="ok: CUDA, this machine's here, the device's there"
    elif is_glibc "$name" || [[ $line != *"=>"* ]]; then
      verdict="ok: glibc"
    elif is_gcc_rt "$name"; then
      verdict="ok: GCC runtime, the system's"
    else
      verdict="OUTSIDE THE BUNDLE"; bad=1
    fi
    if [ "$bin" = tcn_tests ] || [[ $verdict != ok* ]]; then
      printf '   %-75s %s\n' "$(sed 's/ (0x[0-9a-f]*)//; s/^[[:space:]]*//' <<<"$line" | sed "s|$B|<bundle>|")" "$verdict"
    fi
  done < <(run_clean ldd "$B/$bin")
done
[ $bad -eq 0 ] || die "the bundle does not resolve on its own (lines above)"

echo "-- the golden tests from the bundle, TCN_SOURCE_DIR=$PWD"
if run_clean TCN_SOURCE_DIR="$PWD" "$B/tcn_tests" -ts=golden >"$scratch/golden.log" 2>&1; then
  grep -E '^\[tcn\]|test cases:' "$scratch/golden.log" | sed 's/^/   /'
else
  tail -n 30 "$scratch/golden.log"; die "tcn_tests -ts=golden failed from the bundle"
fi
if run_clean TCN_SOURCE_DIR="$scratch" "$B/tcn_tests" -ts=golden >"$scratch/golden-elsewhere.log" 2>&1; then
  die "the golden tests passed with TCN_SOURCE_DIR=$scratch: they do not read tests/golden/ from \$TCN_SOURCE_DIR"
fi
echo "   with TCN_SOURCE_DIR elsewhere they fail, as they must: tests/golden/ is read from \$TCN_SOURCE_DIR"

# The loss checks' CPU side. The device check trains with the same flags on
# --device cuda and compares; the rehearsal's flags are small enough for the
# emulated device. Two threads, as CI's tests.
TRAIN_FLAGS="--max_steps 20 --log-interval 1 --eval_batches 4"
REHEARSE_FLAGS="--max_steps 5 --log-interval 1 --eval_batches 1 --batch_size 4"
# The rehearsal's short windows, per model: the TCN reads 100 and scores the last 80; the LSTM
# carries its state (--lstm_state carry) across windows of 80 that do not overlap.
echo "--seq_len 100 --validseqlen 80" >"$BUNDLE/ref/rehearse_windows_tcn"
echo "--seq_len 80" >"$BUNDLE/ref/rehearse_windows_lstm"
echo "$TRAIN_FLAGS" >"$BUNDLE/ref/train_flags"
echo "$REHEARSE_FLAGS" >"$BUNDLE/ref/rehearse_flags"
for m in tcn lstm; do
  for cfg in train rehearse; do
    [ "$cfg" = train ] && flags=$TRAIN_FLAGS || flags="$REHEARSE_FLAGS $(cat "$BUNDLE/ref/rehearse_windows_$m")"
    echo "-- CPU reference: charlm train --model $m --device cpu --threads 2 $flags"
    t=$(date +%s)
    # shellcheck disable=SC2086
    if ! run_clean "$B/charlm" train --model "$m" --device cpu --threads 2 --data "$B/ptb" $flags \
        --metrics "$BUNDLE/ref/cpu_${m}_$cfg.csv" >"$scratch/ref_${m}_$cfg.log" 2>&1; then
      cat "$scratch/ref_${m}_$cfg.log"; die "charlm train --device cpu failed from the bundle"
    fi
    grep -q '| vocab 50 |' "$scratch/ref_${m}_$cfg.log" || die "the corpus's vocabulary is not PTB's 50 characters"
    echo "   $(grep -c '^train,' "$BUNDLE/ref/cpu_${m}_$cfg.csv") steps in $(( $(date +%s) - t )) s; last: $(grep '^train,' "$BUNDLE/ref/cpu_${m}_$cfg.csv" | tail -1)"
  done
done

# Checksums of the files as they are after unpacking, then the gzip.
(cd "$BUNDLE" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
find "$BUNDLE" -type f -size +1M -print0 | xargs -0 -n1 -P"$JOBS" gzip -9
echo "   gzipped: $(cd "$BUNDLE" && find . -name '*.gz' -printf '%P ' )"

bundle_mib=$(du -sb "$BUNDLE" | awk '{printf "%.1f", $1 / 1048576}')
tree_mib=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "%.1f", $1 / 1048576}')
total_mib=$(awk -v a="$bundle_mib" -v b="$tree_mib" 'BEGIN {printf "%.1f", a + b}')
echo "   $BUNDLE/: $bundle_mib MiB; working tree: $tree_mib MiB; would travel: $total_mib MiB (at most $MAX_MIB; the limit is 64)"
awk -v t="$total_mib" -v m="$MAX_MIB" 'BEGIN {exit !(t <= m)}' || die "$total_mib MiB would travel: over $MAX_MIB MiB"

# The packed bundle unpacks to what was checked.
rm -rf "$scratch/packed" && mkdir -p "$scratch/packed" && cp -a "$BUNDLE" "$scratch/packed/"
sh "$scratch/packed/$BUNDLE/unpack.sh" || die "unpack.sh failed on the packed bundle"
echo "   unpack.sh restores every file (SHA256SUMS)"
echo "== $BUNDLE/ ready: $bundle_mib MiB (+ $tree_mib MiB working tree), $(since) in all"
