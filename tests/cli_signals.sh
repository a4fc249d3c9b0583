#!/usr/bin/env bash
# SIGINT / SIGTERM during `charlm train --save`: the run finishes its step,
# writes the latest checkpoint, prints one line on stderr and exits 130 / 143;
# the checkpoint loads (`charlm eval` on it) and resumes. Without --save the
# line says so. A second signal exits at once with the same code.
# Usage: cli_signals.sh CHARLM
set -uo pipefail
charlm=$1
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 6000 1500

flags=(--batch_size 4 --seq_len 40 --validseqlen 30 --emsize 8 --nhid 12 --levels 2 --device cpu
       --eval_batch_size 2 --eval_batches 2 --log-interval 1 --epochs 1000000 --data "$dir")
fail() { echo "FAIL: $*"; for f in "$dir"/*.out "$dir"/*.err; do echo "--- $f"; tail -5 "$f"; done; exit 1; }

# Starts a training run in the background and waits for its first logged step.
# Sets $pid. (Bash starts background jobs with SIGINT ignored; charlm installs
# its own handler, so the signal still reaches it.)
start() {  # name extra-flags...
  local name=$1
  shift
  "$charlm" train "${flags[@]}" --metrics "$dir/$name.csv" "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q '^| epoch' "$dir/$name.out" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name: exited before its first step"
    sleep 0.05
  done
  fail "$name: no logged step within 30 s"
}

# Waits for $pid with a time limit; sets $rc to its exit status.
finish() {
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$pid" 2>/dev/null && fail "still running 30 s after the signal"
  wait "$pid"
  rc=$?
  pid=
}

for sig in INT TERM; do
  want=$([ $sig = INT ] && echo 130 || echo 143)
  name=save_$sig
  start $name --save "$dir/$name.safetensors"
  kill -s $sig "$pid"
  finish
  [ "$rc" = "$want" ] || fail "$name: exit $rc, expected $want"
  [ "$(wc -l < "$dir/$name.err")" -eq 1 ] || fail "$name: stderr is not one line"
  grep -qE "^charlm: interrupted at step [0-9]+; checkpoint saved to $dir/$name.last.safetensors\$" "$dir/$name.err" ||
    fail "$name: unexpected stderr: $(cat "$dir/$name.err")"
  [ -f "$dir/$name.last.safetensors" ] || fail "$name: no checkpoint"
  ls -A "$dir" | grep -q '\.tmp-' && fail "$name: a temp file was left behind"
  "$charlm" eval --checkpoint "$dir/$name.last.safetensors" --data "$dir" --split valid --seq_len 40 \
    --validseqlen 30 --device cpu --max_batches 2 > "$dir/$name.eval.out" 2> "$dir/$name.eval.err" ||
    fail "$name: eval of the checkpoint failed: $(cat "$dir/$name.eval.err")"
  step=$(sed -n 's/.*at step \([0-9]*\);.*/\1/p' "$dir/$name.err")
  "$charlm" train "${flags[@]}" --metrics "$dir/$name.csv" --resume "$dir/$name.last.safetensors" \
    --max_steps $((step + 2)) --quiet > "$dir/$name.resume.out" 2> "$dir/$name.resume.err" ||
    fail "$name: resuming from the checkpoint failed: $(cat "$dir/$name.resume.err")"
  # The interrupted and resumed run's losses equal an uninterrupted run's.
  "$charlm" train "${flags[@]}" --metrics "$dir/$name.ref.csv" --max_steps $((step + 2)) --quiet \
    > /dev/null 2>&1 || fail "$name: the reference run failed"
  train_rows() { awk -F, '$1 == "train" { print $1, $2, $3, $4, $5 }' "$1"; }
  [ "$(train_rows "$dir/$name.csv")" = "$(train_rows "$dir/$name.ref.csv")" ] ||
    fail "$name: the resumed run's losses differ from an uninterrupted run's"
  echo "SIG$sig: exit $rc, $(cat "$dir/$name.err"); eval works; resume continues exactly"
done

# Without --save: the line says so.
start nosave
kill -s INT "$pid"
finish
[ "$rc" = 130 ] || fail "nosave: exit $rc, expected 130"
[ "$(wc -l < "$dir/nosave.err")" -eq 1 ] && grep -qE '^charlm: interrupted at step [0-9]+; no --save given$' "$dir/nosave.err" ||
  fail "nosave: unexpected stderr: $(cat "$dir/nosave.err")"
echo "no --save: exit $rc, $(cat "$dir/nosave.err")"

# Two signals in a row: exit 143 either way (at once, or after saving).
start twice --save "$dir/twice.safetensors"
kill -s TERM "$pid"
kill -s TERM "$pid"
finish
[ "$rc" = 143 ] || fail "twice: exit $rc, expected 143"
echo "two SIGTERMs: exit $rc"
exit 0
