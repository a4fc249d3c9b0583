#!/usr/bin/env bash
# The synthetic-task trainers end to end, each on a small configuration:
#  - the training loss falls (the CSV's last train row below its first) and the
#    test rows are there, one per epoch, finite;
#  - --save_init writes the initial weights under PyTorch's names with the
#    config, --dump_batches exactly the samples the planned steps read (what
#    tools/reference/check_tasks.py feeds PyTorch);
#  - the same seed gives the same losses, another seed others.
# Usage: cli_tasks.sh ADDING COPYMEM
set -euo pipefail
adding=$1
copymem=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() { echo "cli_tasks: $*" >&2; exit 1; }

# Column 4 of the CSV is the loss; prints "first last rows" of the train rows.
train_losses() { awk -F, '$1 == "train" { if (!n++) f = $4; l = $4 } END { print f, l, n }' "$1"; }

# ---- adding: 2 epochs of 8 batches, T = 20 ----------------------------------
"$adding" --device cpu --seq_len 20 --levels 3 --ksize 3 --nhid 16 --train_size 256 --test_size 64 \
  --epochs 2 --log-interval 4 --lr 0.01 --metrics "$dir/add.csv" --save_init "$dir/add_init.safetensors" \
  --dump_batches "$dir/add_batches.safetensors" > "$dir/add.out"
cat "$dir/add.out"
grep -q "end of epoch   2" "$dir/add.out" || fail "adding: no end-of-epoch-2 line"
read -r first last rows < <(train_losses "$dir/add.csv")
echo "adding: train loss $first -> $last over $rows log rows"
[ "$rows" -eq 4 ] || fail "adding: $rows train rows in the CSV, expected 4 (16 steps, one every 4)"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.5 * f) }' || fail "adding: the loss did not halve ($first -> $last)"
[ "$(awk -F, '$1 == "test" && $4 + 0 == $4 { n++ } END { print n + 0 }' "$dir/add.csv")" -eq 2 ] ||
  fail "adding: expected 2 finite test rows"

# The files for the PyTorch check: names, shapes and the data of all 16 steps.
for key in '"tcn.network.0.conv1.weight_v"' '"tcn.network.2.conv2.weight_g"' '"linear.weight"' '"config"' \
           '\"task\":\"adding\"'; do
  head -c 4096 "$dir/add_init.safetensors" | grep -aqF -- "$key" || fail "adding: --save_init has no $key"
done
head -c 4096 "$dir/add_init.safetensors" | grep -aq '"tcn.network.0.downsample.weight"' ||
  fail "adding: --save_init has no downsample (2 -> 16 channels needs one)"
head -c 1024 "$dir/add_batches.safetensors" | grep -aqE '"x":\{"dtype":"F32","shape":\[256,20,2\]' ||
  fail "adding: --dump_batches: x is not [256, 20, 2] float32"
head -c 1024 "$dir/add_batches.safetensors" | grep -aqE '"y":\{"dtype":"F32","shape":\[256,1\]' ||
  fail "adding: --dump_batches: y is not [256, 1] float32"

# Same seed, same losses; another seed, other losses.
"$adding" --device cpu --seq_len 20 --levels 3 --ksize 3 --nhid 16 --train_size 256 --test_size 64 \
  --epochs 2 --log-interval 4 --lr 0.01 --metrics "$dir/add2.csv" > /dev/null
"$adding" --device cpu --seq_len 20 --levels 3 --ksize 3 --nhid 16 --train_size 256 --test_size 64 \
  --epochs 2 --log-interval 4 --lr 0.01 --metrics "$dir/add3.csv" --seed 7 > /dev/null
cut -d, -f1-5 "$dir/add.csv" > "$dir/a1"; cut -d, -f1-5 "$dir/add2.csv" > "$dir/a2"; cut -d, -f1-5 "$dir/add3.csv" > "$dir/a3"
cmp -s "$dir/a1" "$dir/a2" || fail "adding: two runs with the same seed logged different losses"
! cmp -s "$dir/a1" "$dir/a3" || fail "adding: --seed 7 logged the same losses as --seed 1111"

# ---- copymem: blank 20, 4 digits, 12 steps with --max_steps -----------------
"$copymem" --device cpu --blank_len 20 --seq_len 4 --levels 3 --ksize 4 --nhid 12 --train_size 128 \
  --test_size 32 --batch_size 16 --max_steps 12 --log-interval 3 --lr 0.01 --metrics "$dir/copy.csv" \
  --save_init "$dir/copy_init.safetensors" --dump_batches "$dir/copy_batches.safetensors" > "$dir/copy.out"
cat "$dir/copy.out"
grep -qE "accuracy 0\.[0-9]+|accuracy 1\.0" "$dir/copy.out" || fail "copymem: no accuracy on the test line"
grep -q "(partial epoch)" "$dir/copy.out" || fail "copymem: 12 of 8-step epochs: the second is partial"
read -r first last rows < <(train_losses "$dir/copy.csv")
echo "copymem: train loss $first -> $last over $rows log rows"
# Rows at steps 3, 6, 8 (the epoch's end), 9 and 12.
[ "$rows" -eq 5 ] || fail "copymem: $rows train rows, expected 5 (12 steps, one every 3 and one at the end of epoch 1)"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "copymem: the loss did not fall ($first -> $last)"
# 12 steps of 16 samples: 192 > 128, so the dump holds the whole (one-epoch) training set, S = 20 + 2 * 4.
head -c 1024 "$dir/copy_batches.safetensors" | grep -aqE '"x":\{"dtype":"F32","shape":\[128,28,1\]' ||
  fail "copymem: --dump_batches: x is not [128, 28, 1] float32"
head -c 1024 "$dir/copy_batches.safetensors" | grep -aqE '"y":\{"dtype":"I64","shape":\[128,28\]' ||
  fail "copymem: --dump_batches: y is not [128, 28] int64"
head -c 4096 "$dir/copy_init.safetensors" | grep -aqF '\"task\":\"copymem\"' || fail "copymem: config names no task"
echo "cli_tasks: adding and copymem passed"
