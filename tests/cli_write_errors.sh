#!/usr/bin/env bash
# Output that cannot be written is one line on stderr and a non-zero exit:
# the metrics CSV hitting a file size limit mid-run (write failure after a good
# open), stdout on a full device, a --save path that is a symlink or a FIFO
# (refused, left as it was); and a killed save's temp file is cleaned up.
# Usage: cli_write_errors.sh CHARLM
set -uo pipefail
charlm=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 6000 1500
flags=(--batch_size 4 --seq_len 40 --validseqlen 30 --emsize 8 --nhid 12 --levels 2 --device cpu
       --eval_batch_size 2 --log-interval 1 --data "$dir")
fail() { echo "FAIL: $*"; exit 1; }

# A 1 KiB file size limit (SIGXFSZ ignored, so the write fails with EFBIG):
# the CSV's rows outgrow it after a few steps.
(trap '' XFSZ; ulimit -f 1; exec "$charlm" train "${flags[@]}" --quiet --metrics "$dir/m.csv" --max_steps 40) 2> "$dir/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "metrics: exit $rc"
[ "$(wc -l < "$dir/err")" -eq 1 ] || fail "metrics: stderr is not one line: $(cat "$dir/err")"
grep -qF "charlm: error: --metrics $dir/m.csv: write failed (File too large)" "$dir/err" ||
  fail "metrics: unexpected stderr: $(cat "$dir/err")"
echo "metrics: exit $rc, $(cat "$dir/err")"

# stdout on a full device.
if [ -w /dev/full ]; then
  "$charlm" train "${flags[@]}" --metrics "$dir/n.csv" --max_steps 2 --quiet > /dev/full 2> "$dir/err"
  rc=$?
  [ $rc -eq 0 ] || fail "--quiet prints nothing, so a full stdout is no error: exit $rc, $(cat "$dir/err")"
  "$charlm" train "${flags[@]}" --metrics "$dir/n.csv" --max_steps 2 > /dev/full 2> "$dir/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "stdout: exit $rc"
  [ "$(wc -l < "$dir/err")" -eq 1 ] && grep -qF "charlm: error: cannot write to standard output" "$dir/err" ||
    fail "stdout: unexpected stderr: $(cat "$dir/err")"
  echo "stdout: exit $rc, $(cat "$dir/err")"
fi
# --save onto a symlink or a FIFO: refused before training, nothing changed.
echo original > "$dir/target"
ln -s "$dir/target" "$dir/link.safetensors"
mkfifo "$dir/fifo.safetensors"
for save in link fifo; do
  "$charlm" train "${flags[@]}" --metrics "$dir/s.csv" --max_steps 1 --save "$dir/$save.safetensors" 2> "$dir/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "save to $save: exit $rc, $(cat "$dir/err")"
  grep -qF "charlm: error: --save $dir/$save.safetensors: cannot write there" "$dir/err" ||
    fail "save to $save: unexpected stderr: $(cat "$dir/err")"
  echo "save to $save: exit $rc, $(cat "$dir/err")"
done
[ -L "$dir/link.safetensors" ] && [ -p "$dir/fifo.safetensors" ] && [ "$(cat "$dir/target")" = original ] ||
  fail "a refused --save changed what was there"

# A save killed mid-write leaves a temp file of a dead process: the next run removes it.
bash -c 'exit 0' & dead=$!
wait $dead
stale="$dir/.m.safetensors.tmp-$dead-0"
echo partial > "$stale"
"$charlm" train "${flags[@]}" --metrics "$dir/t.csv" --max_steps 1 --save "$dir/m.safetensors" > "$dir/out" 2> "$dir/err" ||
  fail "train with a stale temp file: $(cat "$dir/err")"
grep -qF "removed stale temp file $stale" "$dir/out" || fail "stale temp file not reported: $(cat "$dir/out")"
[ ! -e "$stale" ] && [ -f "$dir/m.safetensors" ] || fail "stale temp file not removed, or no checkpoint"
[ -z "$(ls -A "$dir" | grep -F '.tmp-')" ] || fail "temp files left: $(ls -A "$dir")"
echo "stale temp: removed"
exit 0
