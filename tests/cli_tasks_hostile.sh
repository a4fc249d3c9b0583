#!/usr/bin/env bash
# The task programs (forecast, adding, copymem) on hostile input: every case is
# refused with one line on stderr that names the problem, a non-zero exit and
# nothing half-written, before any training. CI runs this under ASan + UBSan
# too (the sanitizer builds run every ctest entry), which is where a read past
# the end of the data shows.
#  - forecast's CSV: every value missing, a FIFO (no hang), /dev/zero, a
#    directory, inf / -inf / 1e999, a 16 MB number, a NUL inside a value, a
#    value or a change past +-1e150 (its square overflows);
#  - forecast's --predictions: a missing parent directory is made; a write that
#    fails (a file size limit) leaves the earlier file as it was and no
#    temporary behind;
#  - --tcn (all three programs): an integer past int64, a key given twice,
#    embedding_shapes (no task has conditioning inputs), a model past the
#    parameter limit.
# Usage: cli_tasks_hostile.sh FORECAST ADDING COPYMEM
set -euo pipefail
forecast=$1
adding=$2
copymem=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "cli_tasks_hostile: $*" >&2; exit 1; }

# refused NAME EXPECTED PROGRAM ARGS...: exit non-zero within 20 s, one stderr line containing EXPECTED,
# nothing on stdout.
refused() {
  local name=$1 expected=$2
  shift 2
  local rc=0
  timeout 20 "$@" >"$dir/out" 2>"$dir/err" </dev/null || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: accepted (exit 0)"
  [ "$rc" -ne 124 ] || fail "$name: still running after 20 s (a read that never ends?)"
  [ "$(wc -l <"$dir/err")" -eq 1 ] || { cat "$dir/err" >&2; fail "$name: expected one line on stderr"; }
  grep -qF -- "$expected" "$dir/err" || fail "$name: '$(cat "$dir/err")' does not say '$expected'"
  [ ! -s "$dir/out" ] || fail "$name: wrote to stdout: $(head -c 200 "$dir/out")"
  echo "ok: $name: $(cut -c1-160 "$dir/err")"
}

# A series the small settings below train on (as tests/cli_forecast.sh).
awk 'BEGIN { srand(7); print "date,value";
             for (i = 0; i < 200; i++) printf "%d,%.4f\n", 19000000 + i, 300 + 0.05 * i + 3 * sin(2 * 3.14159265 * i / 12) }' \
  >"$dir/s.csv"
small=(--device cpu --window 24 --horizon 2 --season 12 --levels 2 --nhid 4 --ksize 3 --epochs 1 --log-interval 50
       --metrics "$dir/m.csv")

# ---- forecast's data ---------------------------------------------------------------------------------
{ echo "d,v"; for i in $(seq 1 64); do echo "$i,"; done; } >"$dir/all_missing.csv"
refused "every value missing" "0 value(s) in 64 row(s)" "$forecast" "${small[@]}" --data "$dir/all_missing.csv"
mkfifo "$dir/fifo"
refused "a FIFO" "is not a regular file (a FIFO)" "$forecast" "${small[@]}" --data "$dir/fifo"
refused "/dev/zero" "is not a regular file (a character device)" "$forecast" "${small[@]}" --data /dev/zero
mkdir "$dir/adir"
refused "a directory" "is not a regular file (a directory)" "$forecast" "${small[@]}" --data "$dir/adir"
for v in inf -inf 1e999 Infinity; do
  { head -n 100 "$dir/s.csv"; echo "19009999,$v"; tail -n 99 "$dir/s.csv"; } >"$dir/inf.csv"
  refused "value $v" "line 101: value '$v' is infinite" "$forecast" "${small[@]}" --data "$dir/inf.csv"
done
{ head -n 100 "$dir/s.csv"; printf '19009999,1'; head -c 16000000 /dev/zero | tr '\0' '0'; echo; } >"$dir/long.csv"
refused "a 16 MB number" "(16000001 bytes)' is infinite" "$forecast" "${small[@]}" --data "$dir/long.csv"
{ head -n 100 "$dir/s.csv"; printf '19009999,5\0junk\n'; tail -n 99 "$dir/s.csv"; } >"$dir/nul.csv"
refused "a NUL in a value" "line 101: value '5?junk' is not a number" "$forecast" "${small[@]}" --data "$dir/nul.csv"
{ head -n 100 "$dir/s.csv"; echo "19009999,1e200"; tail -n 99 "$dir/s.csv"; } >"$dir/big.csv"
refused "a value of 1e200" "line 101: value '1e200' is too large" "$forecast" "${small[@]}" --data "$dir/big.csv"
awk 'BEGIN { print "d,v"; for (i = 0; i < 200; i++) print i "," (i % 2 ? "1e150" : "-1e150") }' >"$dir/steps.csv"
refused "changes of 2e150" "is 2e+150, past +-1e+150" "$forecast" "${small[@]}" --data "$dir/steps.csv"

# ---- forecast's predictions ---------------------------------------------------------------------------
"$forecast" "${small[@]}" --data "$dir/s.csv" --predictions "$dir/new/sub/p.csv" >"$dir/out"
[ -s "$dir/new/sub/p.csv" ] || fail "--predictions in a missing directory: no file"
echo "ok: --predictions in a missing directory: made, $(wc -l <"$dir/new/sub/p.csv") lines"
cp "$dir/new/sub/p.csv" "$dir/before.csv"
# 2 KiB: enough for the metrics CSV (about 120 bytes), not for the predictions (about 3.7 KB); SIGXFSZ
# ignored, so write() fails.
rc=0
(ulimit -f 2; trap '' XFSZ; exec "$forecast" "${small[@]}" --data "$dir/s.csv" --predictions "$dir/new/sub/p.csv") \
  >"$dir/out" 2>"$dir/err" || rc=$?
[ "$rc" -ne 0 ] || fail "a failed --predictions write exited 0"
grep -qF "is unchanged" "$dir/err" || fail "failed write: $(cat "$dir/err")"
cmp -s "$dir/before.csv" "$dir/new/sub/p.csv" || fail "a failed --predictions write changed the earlier file"
[ -z "$(find "$dir/new/sub" -name '.p.csv.tmp-*')" ] || fail "a failed --predictions write left its temporary file"
echo "ok: a failed --predictions write: $(tail -n 1 "$dir/err" | cut -c1-160); the earlier file unchanged"

# ---- --tcn, every program ------------------------------------------------------------------------------
for prog in "$forecast" "$adding" "$copymem"; do
  name=$(basename "$prog")
  data=()
  [ "$name" = forecast ] && data=(--data "$dir/s.csv")
  refused "$name --tcn past int64" "kernel_size is out of range, got 18446744073709551615" \
    "$prog" --device cpu "${data[@]}" --tcn '{"kernel_size": 18446744073709551615}'
  refused "$name --tcn a key twice" "--tcn: the key 'kernel_size' appears twice" \
    "$prog" --device cpu "${data[@]}" --tcn '{"kernel_size": 3, "kernel_size": 5}'
  refused "$name --tcn embedding_shapes" "embedding_shapes asks for conditioning inputs" \
    "$prog" --device cpu "${data[@]}" --tcn '{"embedding_shapes": [[4]]}'
  refused "$name --tcn past the parameter limit" "more than the limit of 2147483648" \
    "$prog" --device cpu "${data[@]}" --tcn '{"num_channels": [60000, 60000, 60000, 60000]}'
done
echo "cli_tasks_hostile: ok"
