#!/usr/bin/env bash
# Builds what the lent GPU machine runs, here, and proves it starts there.
#
#   tools/make_device_bundle.sh          then, on the device: tools/device_check.sh
#                                        (its header says how a session calls it)
#
# 1. Build: Release, -DTCN_CUDA=ON -DTCN_CUDA_ARCHS=90 into build-gpu/ (JOBS=2
#    parallel jobs; a clean build takes several minutes on 2 cores). The run-time
#    file lookups (tests/golden/, tools/bench_torch.py) are compiled relative to
#    the working directory ("."), so the binaries work from the root of any
#    checkout, the device's copy included.
# 2. Assemble device_bundle/ (git-ignored; carried to the device as one path):
#      tcn_tests, charlm, tcn_ckpt.gz    RUNPATH $ORIGIN
#      libopenblas.so.0.gz, libgfortran.so.5, libgomp.so.1, libquadmath.so.0, ...
#                                        every shared library the binaries need
#                                        except CUDA's own (libcudart, libcublas,
#                                        libcublasLt, libcuda: the device's) and
#                                        glibc's; RUNPATH $ORIGIN
#      fallback/libstdc++.so.6, fallback/libgcc_s.so.1
#                                        used only where the device's own are older
#      ptb/ptb.{train,valid,test}.txt    a slice of PTB with the full vocabulary
#      unpack.sh, SHA256SUMS             gunzips the .gz files in place, checks all
#      BUILD_INFO, SOURCES.sha256        what was built, from which sources
#    The largest files (OpenBLAS, oneDNN, tcn_ckpt) travel gzipped, to keep the
#    carried size small (the carry limit is 64 MiB).
# 3. Self-check, on an unpacked copy, with nothing from this machine's
#    environment: `ldd` of each binary with LD_LIBRARY_PATH = the bundle alone
#    must leave nothing unresolved but CUDA's libraries and resolve nothing but
#    CUDA, glibc and the GCC runtime outside it; then
#    `env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=<bundle> <bundle>/tcn_tests` from
#    the repo root must pass (the CUDA tests are reported skipped: no GPU here),
#    and two training steps on the PTB slice must run.
#
# Environment: JOBS (default 2), PTB (default ../shared/data/ptb, else data/ptb),
# SKIP_BUILD=1 (reassemble from the existing build-gpu/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
BUNDLE=device_bundle
JOBS=${JOBS:-2}
PTB=${PTB:-}
if [ -z "$PTB" ]; then
  for d in ../shared/data/ptb data/ptb; do
    if [ -f "$d/ptb.train.txt" ]; then PTB=$d; break; fi
  done
fi
t_start=$(date +%s)
since() { echo "$(( $(date +%s) - t_start )) s"; }
die() { echo "make_device_bundle: error: $*" >&2; exit 1; }

command -v patchelf >/dev/null || die "patchelf is missing (apt-get install -y patchelf)"
[ -f "$PTB/ptb.train.txt" ] || die "no PTB corpus (set PTB=DIR with ptb.{train,valid,test}.txt)"

# --- 1. build ---------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== configure $BUILD (Release, CUDA sm_90, run-time paths relative to the cwd)"
  mkdir -p "$BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTCN_CUDA=ON -DTCN_CUDA_ARCHS=90 \
    '-DCMAKE_CXX_FLAGS=-UTCN_SOURCE_DIR -DTCN_SOURCE_DIR=\".\"' >"$BUILD/bundle-configure.log" 2>&1 ||
    { tail -n 30 "$BUILD/bundle-configure.log"; die "configure failed (log: $BUILD/bundle-configure.log)"; }
  echo "== build tcn_tests charlm tcn_ckpt (-j$JOBS)"
  t_build=$(date +%s)
  cmake --build "$BUILD" -j"$JOBS" --target tcn_tests charlm tcn_ckpt >"$BUILD/bundle-build.log" 2>&1 ||
    { grep -E -m 20 'error|Error' "$BUILD/bundle-build.log"; die "build failed (log: $BUILD/bundle-build.log)"; }
  echo "   built in $(( $(date +%s) - t_build )) s"
fi
# The override must have reached the compiler: an absolute path here would
# point the device's tests at a folder that does not exist there.
grep -qF -- '-DTCN_SOURCE_DIR=\\\".\\\"' "$BUILD/compile_commands.json" ||
  die "$BUILD was not configured with TCN_SOURCE_DIR=\".\" (rm -rf $BUILD and rerun)"
grep -q '^TCN_CUDA:STRING=ON' "$BUILD/CMakeCache.txt" || die "$BUILD is not a CUDA build"

BINS=("$BUILD/tests/tcn_tests" "$BUILD/charlm" "$BUILD/examples/tcn_ckpt" "$BUILD/bench_cudnn")
for b in "${BINS[@]}"; do [ -x "$b" ] || die "missing $b"; done

# --- 2. assemble --------------------------------------------------------------
echo "== assemble $BUNDLE/"
grep -qx '/device_bundle/' .gitignore || die "/device_bundle/ is not in .gitignore"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/fallback" "$BUNDLE/ptb"
is_cuda() { case "$1" in libcudart.so*|libcublas.so*|libcublasLt.so*|libcuda.so*|libcudnn*.so*|libnvrtc*.so*) return 0;; esac; return 1; }
is_glibc() { case "$1" in linux-vdso.so*|ld-linux-x86-64.so*|libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libresolv.so.2|libutil.so.1) return 0;; esac; return 1; }
is_gcc_rt() { case "$1" in libstdc++.so.6|libgcc_s.so.1) return 0;; esac; return 1; }

declare -A libs=()
for b in "${BINS[@]}"; do
  while read -r name path; do
    if is_cuda "$name" || is_glibc "$name"; then continue; fi
    libs[$name]=$path
  done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  deps=$(ldd "$b")
  if [[ $deps == *"not found"* ]]; then echo "$deps"; die "$b has unresolved libraries here"; fi
done
for name in "${!libs[@]}"; do
  if is_gcc_rt "$name"; then dest=$BUNDLE/fallback/$name; else dest=$BUNDLE/$name; fi
  cp -L "${libs[$name]}" "$dest"
  chmod 644 "$dest"
  patchelf --set-rpath '$ORIGIN' "$dest"
  printf '   %-20s <- %s\n' "$name" "$(readlink -f "${libs[$name]}")"
done
for want in libopenblas.so.0 libgomp.so.1; do [ -f "$BUNDLE/$want" ] || die "expected $want among the binaries' libraries"; done
for b in "${BINS[@]}"; do
  cp "$b" "$BUNDLE/"
  patchelf --set-rpath '$ORIGIN' "$BUNDLE/$(basename "$b")"
done

# The PTB slice: the head of each split, large enough for 20 training steps in
# one epoch (32 streams x (20 x 320 + 80 + 1) characters) and for the full
# 50-character vocabulary (the rarest, '*', first appears at byte 136595 of
# ptb.valid.txt).
head -c 262144 "$PTB/ptb.train.txt" >"$BUNDLE/ptb/ptb.train.txt"
head -c 163840 "$PTB/ptb.valid.txt" >"$BUNDLE/ptb/ptb.valid.txt"
head -c 163840 "$PTB/ptb.test.txt" >"$BUNDLE/ptb/ptb.test.txt"
vocab() { cat "$@" | od -An -v -tu1 | tr -s ' ' '\n' | grep -v '^$' | sort -un | tr '\n' ' '; }
v_full=$(vocab "$PTB"/ptb.{train,valid,test}.txt)
v_slice=$(vocab "$BUNDLE"/ptb/ptb.{train,valid,test}.txt)
n_full=$(wc -w <<<"$v_full"); n_slice=$(wc -w <<<"$v_slice")
[ "$v_full" = "$v_slice" ] || die "the PTB slice has $n_slice characters, the corpus $n_full: enlarge the slice"
echo "   PTB slice: $(du -cb "$BUNDLE"/ptb/*.txt | tail -1 | cut -f1) bytes, vocabulary $n_slice characters = the full corpus's"

# Checksums of the files as they must be after unpacking, then the gzip.
(cd "$BUNDLE" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
gzip -9 "$BUNDLE/libopenblas.so.0" "$BUNDLE/tcn_ckpt"
# oneDNN (40 MB, 11 MB gzipped) when the build links it.
if [ -f "$BUNDLE/libdnnl.so.2" ]; then gzip -9 "$BUNDLE/libdnnl.so.2"; fi
cat >"$BUNDLE/unpack.sh" <<'EOF'
#!/bin/sh
# Unpacks this bundle's gzipped files next to themselves (once) and checks every
# file against SHA256SUMS. Written by tools/make_device_bundle.sh.
set -e
cd "$(dirname "$0")"
for z in *.gz; do
  [ -e "$z" ] || continue
  f=${z%.gz}
  [ -e "$f" ] && continue
  if command -v gzip >/dev/null 2>&1; then
    gzip -dc "$z" >"$f.part"
  else
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "$f.part"
  fi
  chmod 755 "$f.part"
  mv "$f.part" "$f"
done
sha256sum -c --quiet SHA256SUMS
EOF
chmod 755 "$BUNDLE/unpack.sh"

# What was built, from what: device_check.sh reports a bundle older than the tree.
git ls-files -co --exclude-standard -- CMakeLists.txt core ops autograd nn cuda examples tests |
  grep -v '^tests/golden/' | sort | xargs sha256sum >"$BUNDLE/SOURCES.sha256"
{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')"
  echo "cmake -DCMAKE_BUILD_TYPE=Release -DTCN_CUDA=ON -DTCN_CUDA_ARCHS=90 -DCMAKE_CXX_FLAGS='-UTCN_SOURCE_DIR -DTCN_SOURCE_DIR=\".\"'"
  echo "nvcc $(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*' || echo '?')"
  echo "c++ $(c++ -dumpfullversion)"
  echo "glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
  need() { objdump -T "$BUNDLE/tcn_tests" "$BUNDLE/charlm" 2>/dev/null | grep -o "$1"'_[0-9.]*' | sort -uV | tail -1; }
  echo "needs $(need GLIBC) $(need GLIBCXX) $(need CXXABI)"
} >"$BUNDLE/BUILD_INFO"
sed 's/^/   /' "$BUNDLE/BUILD_INFO"

bundle_mib=$(du -sb "$BUNDLE" | awk '{printf "%.1f", $1 / 1048576}')
tree_mib=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "%.1f", $1 / 1048576}')
total_mib=$(awk -v a="$bundle_mib" -v b="$tree_mib" 'BEGIN {printf "%.1f", a + b}')
echo "   $BUNDLE/: $bundle_mib MiB (PTB slice included); working tree: $tree_mib MiB; travels: $total_mib MiB of 64"
awk -v t="$total_mib" 'BEGIN {exit !(t < 48)}' || die "$total_mib MiB would travel: too close to the 64 MiB limit"

# --- 3. self-check ---------------------------------------------------------------
echo "== self-check: an unpacked copy, nothing from this environment (env -i)"
scratch=$(mktemp -d /tmp/tcn-bundle-check.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cp -a "$BUNDLE" "$scratch/"
B=$scratch/$BUNDLE
sh "$B/unpack.sh" || die "unpack.sh failed"
run_clean() { env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$B" "$@"; }
bad=0
for bin in tcn_tests charlm tcn_ckpt; do
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
      verdict="ok: GCC runtime, the system's (fallback/ in the bundle)"
    else
      verdict="OUTSIDE THE BUNDLE"; bad=1
    fi
    printf '   %-75s %s\n' "$(sed 's/ (0x[0-9a-f]*)//; s/^[[:space:]]*//' <<<"$line" | sed "s|$B|<bundle>|")" "$verdict"
  done < <(run_clean ldd "$B/$bin")
done
[ $bad -eq 0 ] || die "the bundle does not resolve on its own (lines above)"

echo "-- env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=<bundle> <bundle>/tcn_tests   (from the repo root)"
t_tests=$(date +%s)
if run_clean "$B/tcn_tests" >"$scratch/tests.log" 2>&1; then rc=0; else rc=$?; fi
grep -E '^\[tcn\]' "$scratch/tests.log" | sed 's/^/   /'
grep -E 'test cases:|assertions:|Status:' "$scratch/tests.log" | sed 's/^/   /'
echo "   rc=$rc in $(( $(date +%s) - t_tests )) s"
[ $rc -eq 0 ] || { grep -E -B2 -A8 'ERROR|FAILED' "$scratch/tests.log" | head -n 60; die "tcn_tests failed from the bundle"; }

# The golden files must be looked up relative to the cwd: from a folder without
# tests/golden/ the golden test fails, from the repo root it passed above.
if (cd "$scratch" && run_clean "$B/tcn_tests" -sf='*test_golden.cpp' >"$scratch/golden.log" 2>&1); then
  die "the golden test passed outside the repo root: tests/golden/ is not looked up relative to the cwd"
fi
echo "   tests/golden/ is read relative to the working directory: ok"

echo "-- charlm train on the PTB slice (2 steps, CPU)"
if run_clean "$B/charlm" train --device cpu --data "$B/ptb" --max_steps 2 --log-interval 1 --eval_batches 1 \
  --metrics "$scratch/train.csv" >"$scratch/train.log" 2>&1; then
  grep -E 'vocab|^\| epoch|end of epoch' "$scratch/train.log" | sed 's/^/   /'
else
  cat "$scratch/train.log"; die "charlm train failed from the bundle"
fi
grep -q '| vocab 50 |' "$scratch/train.log" || die "the slice's vocabulary is not the corpus's 50 characters"

echo "== $BUNDLE/ ready: $bundle_mib MiB (+ $tree_mib MiB working tree), $(since) in all"
