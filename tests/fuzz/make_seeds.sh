#!/usr/bin/env bash
# The fuzzer's seed corpus: small real checkpoints written by `charlm train
# --save` (TCN and LSTM, SGD and Adam, best and .last files), so mutations
# start from files that pass every check.
# Usage: make_seeds.sh CHARLM OUTDIR
set -euo pipefail
charlm=$1
out=$2
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$(dirname "$0")/../synthetic_corpus.sh" "$work" 3000 800
common=(--batch_size 2 --seq_len 20 --emsize 4 --eval_batch_size 2 --eval_batches 2
        --log-interval 1 --device cpu --data "$work" --quiet --threads 1)
for model in tcn lstm; do
  for optim in SGD Adam; do
    size=(--nhid 6 --levels 2 --ksize 2 --validseqlen 15)
    [ $model = lstm ] && size=(--nhid 5)  # carries its state (carry.h, carry.c) across windows of 20
    name=$model-$optim
    "$charlm" train "${common[@]}" "${size[@]}" --model $model --optim $optim --lr 0.01 --max_steps 3 \
      --save_every 2 --metrics "$work/$name.csv" --save "$work/$name.safetensors" >/dev/null
    for f in "$work/$name".*safetensors; do cp "$f" "$out/"; done
  done
done
# PyTorch state_dicts without our metadata, in each naming variant (nn/import.h).
for f in "$(dirname "$0")"/../golden/foreign/*_*.safetensors; do cp "$f" "$out/foreign-$(basename "$f")"; done
ls -l "$out"
