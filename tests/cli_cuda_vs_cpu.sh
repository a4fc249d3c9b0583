#!/usr/bin/env bash
# `charlm train --device cuda` against `--device cpu` through the command line:
# both models in fp32 and the TCN in bf16, dropout on, 5 steps on a tiny corpus made here; the printed losses
# (stdout, 3 decimals) and the metrics CSV's (6 decimals) must agree within
# 1e-4 relative plus half a unit of the last printed digit.
# Usage: cli_cuda_vs_cpu.sh CHARLM. Exit 77 (ctest: skipped) when no GPU is usable.
set -euo pipefail
charlm=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Deterministic pseudo-text: random words, one file per split.
bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 3000 600

flags=(--batch_size 4 --emsize 8 --nhid 16 --levels 2 --dropout 0.2
       --emb_dropout 0.2 --clip 0.15 --max_steps 5 --log-interval 1 --eval_batches 1 --eval_batch_size 2
       --data "$dir")

# Two lists of numbers, one per line: same length (5), each pair within tolerance.
compare() {  # file_a file_b abs_tol what
  paste "$1" "$2" | awk -v tol="$3" -v what="$4" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = $2 < 0 ? -$2 : $2;
      if (d > 1e-4 * r + tol) { printf "%s: step %d: cuda %s vs cpu %s\n", what, n, $1, $2; bad = 1 } }
    END { if (n != 5) { printf "%s: %d losses, expected 5\n", what, n; bad = 1 }; exit bad }'
}

status=0
# "-bf16": mixed precision on both devices (bf16 GEMM operands). The LSTM carries each
# stream's state from window to window (--lstm_state carry): windows of 48 that do not overlap.
for run in tcn lstm tcn-bf16 lstm-bf16; do
  model=${run%-bf16}
  precision=fp32
  [ "$run" = "$model" ] || precision=bf16
  windows=(--seq_len 64 --validseqlen 48)
  [ "$model" = lstm ] && windows=(--seq_len 48)
  for dev in cpu cuda; do
    if ! "$charlm" train --model "$model" --device "$dev" --precision "$precision" --metrics "$dir/$run-$dev.csv" \
        "${flags[@]}" "${windows[@]}" \
        > "$dir/$run-$dev.out" 2> "$dir/$run-$dev.err"; then
      if [ "$dev" = cuda ] && grep -q "no usable GPU" "$dir/$run-$dev.err"; then
        echo "skipped: $(cat "$dir/$run-$dev.err")"
        exit 77
      fi
      echo "charlm train --model $model --device $dev --precision $precision failed:"
      cat "$dir/$run-$dev.err"
      exit 1
    fi
    # "| epoch   1 |     1/    6 batches | ... | loss 2.197 | bpc 3.170": the loss field.
    sed -n 's/.*| loss \([0-9.]*\) |.*/\1/p' "$dir/$run-$dev.out" > "$dir/$run-$dev.printed"
    awk -F, '$1 == "train" { print $5 }' "$dir/$run-$dev.csv" > "$dir/$run-$dev.logged"
  done
  echo "$run losses (cuda, cpu):"
  paste "$dir/$run-cuda.logged" "$dir/$run-cpu.logged"
  compare "$dir/$run-cuda.printed" "$dir/$run-cpu.printed" 0.0005 "$run printed" || status=1
  compare "$dir/$run-cuda.logged" "$dir/$run-cpu.logged" 0.0000005 "$run metrics CSV" || status=1
done
exit $status
