#!/usr/bin/env bash
# --profile and --trace through the command line: `train` prints the table
# (every phase, the step's modules by path) and writes a trace that parses as
# JSON; a run too short to profile says so; `bench` profiles each of its rows
# and writes one trace per row; a trace path that cannot be written is refused
# before any training.
# Usage: cli_profile.sh CHARLM
set -uo pipefail
charlm=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 6000 1500
flags=(--batch_size 4 --seq_len 40 --validseqlen 30 --emsize 8 --nhid 12 --levels 2 --device cpu
       --eval_batch_size 2 --eval_batches 2 --log-interval 3 --data "$dir")
base=("${flags[@]}")
flags+=(--metrics "$dir/m.csv")
fail() { echo "FAIL: $*"; exit 1; }
json_ok() { python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1"; }

for model in tcn lstm; do
  protocol=()  # the same windows for both models: the LSTM's from zeros (its default, carry, needs seq_len = validseqlen)
  [ "$model" = lstm ] && protocol=(--lstm_state reset)
  "$charlm" train "${flags[@]}" "${protocol[@]}" --model "$model" --max_steps 6 --profile 3 --trace "$dir/$model.json" \
    > "$dir/out" 2> "$dir/err" || fail "$model: train --profile: $(cat "$dir/err")"
  for want in "profile: 3 step" "| op " "forward" "backward" "optimizer" "data" "peak memory" \
              "trace of the profiled steps written to $dir/$model.json"; do
    grep -qF -- "$want" "$dir/out" || fail "$model: no '$want' in the output: $(cat "$dir/out")"
  done
  json_ok "$dir/$model.json" || fail "$model: the trace is not JSON"
  echo "$model: table and trace ok"
done
grep -qF "tcn.network.1.conv2" "$dir/out" && fail "the lstm table names a TCN module"
"$charlm" train "${flags[@]}" --max_steps 6 --profile 2 > "$dir/out" 2> "$dir/err" || fail "tcn: $(cat "$dir/err")"
grep -qF "tcn.network.1.conv2" "$dir/out" || fail "the tcn table has no tcn.network.1.conv2 row: $(cat "$dir/out")"

# Profiling changes no result: the logged losses equal an unprofiled run's
# (the profiled steps' losses still go into their log interval).
"$charlm" train "${base[@]}" --max_steps 6 --metrics "$dir/plain.csv" > /dev/null 2>&1 ||
  fail "plain run"
"$charlm" train "${base[@]}" --max_steps 6 --profile 2 --metrics "$dir/prof.csv" > /dev/null 2>&1 ||
  fail "profiled run"
losses() { awk -F, '$1 == "train" || $1 == "valid" { print $1, $3, $5 }' "$1"; }
[ "$(losses "$dir/plain.csv")" = "$(losses "$dir/prof.csv")" ] && [ -n "$(losses "$dir/plain.csv")" ] ||
  fail "profiling changed the logged losses: $(losses "$dir/plain.csv") vs $(losses "$dir/prof.csv")"
echo "profiled run logs the same losses"

# The run ends during the profiled steps, or before them.
"$charlm" train "${flags[@]}" --max_steps 4 --profile 5 > "$dir/out" 2> "$dir/err" || fail "short: $(cat "$dir/err")"
grep -qF "(profiled 2 of the 5 steps asked for: the run ended first)" "$dir/out" || fail "short run: $(cat "$dir/out")"
"$charlm" train "${flags[@]}" --max_steps 1 --profile 2 > "$dir/out" 2> "$dir/err" || fail "shorter: $(cat "$dir/err")"
grep -qF "the run ended before the profiled steps" "$dir/out" || fail "shorter run: $(cat "$dir/out")"
echo "short runs: ok"

# An unwritable trace path: one line, before training (no metrics row written).
"$charlm" train "${flags[@]}" --max_steps 3 --trace /etc/passwd/t.json > /dev/null 2> "$dir/err"
rc=$?
[ $rc -ne 0 ] && [ "$(wc -l < "$dir/err")" -eq 1 ] &&
  grep -qF "charlm: error: --trace /etc/passwd/t.json: cannot write there" "$dir/err" ||
  fail "unwritable trace: exit $rc, $(cat "$dir/err")"
echo "unwritable trace: $(cat "$dir/err")"

# bench: a table per row of ours, a trace per row (the row's name in the file name).
"$charlm" bench --torch off --model tcn --precision fp32 --cpu_gemm openblas --batch_size 2 --seq_len 40 \
  --validseqlen 30 --steps 1 --warmup 1 --threads 1 --generate_chars 0 --trace "$dir/b.json" \
  > "$dir/out" 2> "$dir/err" || fail "bench --trace: $(cat "$dir/err")"
grep -qF "profile: 3 step" "$dir/out" || fail "bench: no profile table: $(cat "$dir/out")"
trace=$(ls "$dir"/b-tcn-*.json 2>/dev/null | head -n 1)
[ -n "$trace" ] && json_ok "$trace" || fail "bench: no trace b-tcn-*.json that parses: $(ls "$dir")"
echo "bench: table and $(basename "$trace") ok"
