#!/usr/bin/env bash
# Do two builds train the same? 20 CPU training steps of every model with
# each build's programs, then the losses of every step and every tensor of the
# final state (parameters, optimizer state, carried LSTM state) must be equal,
# bit for bit. For changes that should move no number: a refactoring, a new
# layout of the code. Both builds run on this machine, one after the other.
#
#   tools/check_same_steps.sh OLD_BUILD NEW_BUILD [PTB_DIR]     (PTB_DIR: data/ptb)
#
# OLD_BUILD is, for example, a build of the commit before the change:
#   git worktree add /tmp/old HEAD~1 && cmake -S /tmp/old -B /tmp/old-build -DTCN_CUDA=OFF \
#     -DTCN_BUILD_TESTS=OFF -DTCN_BUILD_BENCHMARKS=OFF && cmake --build /tmp/old-build -j2
# Runs: charlm TCN, LSTM carrying its state, LSTM reset; wordlm TCN and LSTM;
# adding, copymem and forecast (these save no final state: their per-step
# losses are compared, and forecast's predictions file). Takes a few minutes on 2 cores.
set -euo pipefail
old=${1:?usage: check_same_steps.sh OLD_BUILD NEW_BUILD [PTB_DIR]}
new=${2:?usage: check_same_steps.sh OLD_BUILD NEW_BUILD [PTB_DIR]}
data=${3:-data/ptb}
for b in "$old" "$new"; do
  for p in charlm wordlm examples/tcn_ckpt examples/tasks/adding examples/tasks/copymem examples/tasks/forecast; do
    [ -x "$b/$p" ] || { echo "check_same_steps: $b/$p is missing: build $b first" >&2; exit 2; }
  done
done
[ -f "$data/ptb.train.txt" ] || { echo "check_same_steps: no $data/ptb.train.txt (scripts/get_data.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

awk 'BEGIN { srand(7); print "date,value";
             for (i = 0; i < 400; i++) {
               v = 300 + 0.05 * i + 3 * sin(2 * 3.14159265 * i / 12) + 0.3 * (rand() - 0.5);
               if (i % 97 == 50) print 19000000 + i ","; else printf "%d,%.4f\n", 19000000 + i, v } }' > "$work/series.csv"

steps="--max_steps 20 --log_interval 1 --device cpu --quiet"
# name | program | flags (each run writes $work/<side>/<name>.csv and, for the LMs, <name>.last.safetensors)
runs=(
  "charlm_tcn|charlm train|--model tcn --conv_impl gemm --data $data $steps --eval_batches 2 --save @.safetensors"
  "charlm_lstm|charlm train|--model lstm --data $data $steps --eval_batches 2 --save @.safetensors"
  "charlm_lstm_reset|charlm train|--model lstm --lstm_state reset --data $data $steps --eval_batches 2 --save @.safetensors"
  "wordlm_tcn|wordlm train|--model tcn --conv_impl gemm --data $data $steps --eval_batches 2 --save @.safetensors"
  "wordlm_lstm|wordlm train|--model lstm --data $data $steps --eval_batches 2 --save @.safetensors"
  "adding|examples/tasks/adding|--max_steps 20 --log_interval 1 --device cpu --train_size 640 --test_size 64"
  "copymem|examples/tasks/copymem|--max_steps 20 --log_interval 1 --device cpu --train_size 640 --test_size 64"
  "forecast|examples/tasks/forecast|--device cpu --data $work/series.csv --window 24 --horizon 2 --season 12 --levels 3 --nhid 8 --ksize 3 --epochs 3 --log-interval 1 --lr 0.01 --predictions @.predictions.csv"
)
fail=0
for run in "${runs[@]}"; do
  IFS='|' read -r name program flags <<< "$run"
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    mkdir -p "$work/$side"
    # shellcheck disable=SC2086  # flags are words
    set -- $program
    "$b/$1" "${@:2}" ${flags//@/$work/$side/$name} --metrics "$work/$side/$name.csv" > "$work/$side/$name.out" 2>&1 ||
      { echo "check_same_steps: $name failed with $b:"; tail -5 "$work/$side/$name.out"; fail=1; continue 2; }
  done
  # The losses: every column but the timings.
  for side in old new; do
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i !~ /ms_per|per_sec|elapsed|_s$/) keep[i] = 1 }
             { line = ""; for (i = 1; i <= NF; i++) if (keep[i]) line = line $i ","; print line }' \
      "$work/$side/$name.csv" > "$work/$side/$name.losses"
  done
  rows=$(($(wc -l < "$work/new/$name.losses") - 1))
  if ! cmp -s "$work/old/$name.losses" "$work/new/$name.losses"; then
    echo "check_same_steps: $name: the losses differ"; diff "$work/old/$name.losses" "$work/new/$name.losses" | head -6
    fail=1; continue
  fi
  state="losses equal ($rows rows)"
  if [ -f "$work/new/$name.predictions.csv" ]; then  # forecast's: the TCN's and the baselines' forecasts
    if ! cmp -s "$work/old/$name.predictions.csv" "$work/new/$name.predictions.csv"; then
      echo "check_same_steps: $name: the predictions differ"; fail=1; continue
    fi
    state="$state; predictions equal ($(($(wc -l < "$work/new/$name.predictions.csv") - 1)) rows)"
  fi
  if [ -f "$work/new/$name.last.safetensors" ]; then
    if "$new/examples/tcn_ckpt" compare "$work/new/$name.last.safetensors" "$work/old/$name.last.safetensors" 0 \
         > "$work/$name.compare" 2>&1; then
      state="$state; final state: $(cat "$work/$name.compare")"
    else
      echo "check_same_steps: $name: the final state differs: $(cat "$work/$name.compare")"
      fail=1; continue
    fi
  fi
  echo "check_same_steps: $name: $state"
done
[ $fail = 0 ] && echo "check_same_steps: the two builds train the same" || echo "check_same_steps: DIFFERENT"
exit $fail
