#!/usr/bin/env bash
# Data-parallel training with MPI (nn/distributed.h), on the CPU:
#  1. `mpirun -np 2 charlm train` for 5 steps of each model (dropout on) logs
#     the same losses as one process with the same global batch, and ends with
#     the same parameters and train state, within 1e-5 relative;
#  2. a run resumed with 2 processes from a 1-process checkpoint ends where an
#     uninterrupted 1-process run does (checkpoints do not depend on N), and
#     `eval` under mpirun prints one result, the one-process one;
#  3. a batch that does not split is an error; a diverging run stops every
#     rank at the same step with the error; a rank killed by a signal brings
#     the job down instead of leaving the other waiting;
#  4. with EMU=ON (the emulated-device build), the same as 1. for the TCN on
#     CUDA tensors (both ranks on the one emulated device; no NCCL there, so
#     the gradients go through host memory and MPI).
# Usage: cli_mpi.sh MPIRUN CHARLM TCN_CKPT [EMU]
set -euo pipefail
mpirun=$1
charlm=$2
ckpt=$3
emu=${4:-OFF}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 20000 3000
export OMP_NUM_THREADS=1
# Root in CI containers; more ranks than cores; shared memory without ptrace.
mpi=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)

fail() { echo "cli_mpi: $*" >&2; exit 1; }

# The largest relative difference between the train losses of two metrics CSVs (column 5).
compare_losses() {
  paste -d, <(awk -F, '$1 == "train" { print $5 }' "$1") <(awk -F, '$1 == "train" { print $5 }' "$2") |
    awk -F, '{ n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r }
             END { printf "%d losses, largest relative difference %.3g\n", n, w; exit !(n == 5 && w <= 1e-5) }'
}
# The train_state metadata of a checkpoint (epoch, step, lr, dropout RNG position, ...).
train_state() { head -c 65536 "$1" | grep -ao '"train_state":"[^"]*\(\\"[^"]*\)*"' | head -n 1; }

for model in tcn lstm; do
  # The LSTM carries each stream's state (--lstm_state carry): every rank its own streams, gathered into the checkpoint.
  windows=(--seq_len 40 --validseqlen 32)
  [ "$model" = lstm ] && windows=(--seq_len 32)
  flags=(train --data "$dir" --device cpu --model "$model" --batch_size 8 "${windows[@]}" --emsize 16
         --nhid 24 --levels 2 --dropout 0.2 --emb_dropout 0.1 --max_steps 5 --log-interval 1 --eval_batches 4 --threads 1)
  "$charlm" "${flags[@]}" --metrics "$dir/$model.1.csv" --save "$dir/$model.1.safetensors" > "$dir/$model.1.out"
  "${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --metrics "$dir/$model.2.csv" --save "$dir/$model.2.safetensors" \
    > "$dir/$model.2.out" 2>&1 || { cat "$dir/$model.2.out"; fail "$model: mpirun -np 2 failed"; }
  grep -q "data-parallel: 2 processes" "$dir/$model.2.out" || { cat "$dir/$model.2.out"; fail "$model: not data-parallel"; }
  [ "$(grep -c "^| epoch" "$dir/$model.2.out")" -eq 5 ] || { cat "$dir/$model.2.out"; fail "$model: rank 0 alone should print the 5 log lines"; }
  echo -n "$model, 2 processes vs 1: "
  compare_losses "$dir/$model.2.csv" "$dir/$model.1.csv" || fail "$model: losses differ"
  echo -n "$model, final parameters: "
  "$ckpt" compare "$dir/$model.2.safetensors" "$dir/$model.1.safetensors" 1e-5 || fail "$model: parameters differ"
  [ "$(train_state "$dir/$model.2.safetensors")" = "$(train_state "$dir/$model.1.safetensors")" ] ||
    fail "$model: train state differs: $(train_state "$dir/$model.2.safetensors") vs $(train_state "$dir/$model.1.safetensors")"
done

# eval under mpirun: the windows shared out, the sums reduced, one line from rank 0.
one=$("$charlm" eval --checkpoint "$dir/tcn.1.safetensors" --data "$dir" --device cpu --split valid --seq_len 40 \
      --validseqlen 32 --batch_size 2)
two=$("${mpi[@]}" -np 2 "$charlm" eval --checkpoint "$dir/tcn.1.safetensors" --data "$dir" --device cpu --split valid \
      --seq_len 40 --validseqlen 32 --batch_size 2 2>&1) || { echo "$two"; fail "eval under mpirun failed"; }
[ "$(echo "$two" | grep -c "valid: loss")" -eq 1 ] || { echo "$two"; fail "eval under mpirun: not one result line"; }
[ "$(echo "$one" | grep -o 'loss [0-9.]*')" = "$(echo "$two" | grep -o 'loss [0-9.]*')" ] ||
  fail "eval: one process says '$one', two say '$two'"
echo "eval, 2 processes vs 1: $(echo "$two" | grep -o 'loss [0-9.]*') both"

# Resume with another number of processes: 3 steps alone, then 2 more with 2 ranks.
flags=(train --data "$dir" --device cpu --seq_len 40 --validseqlen 32 --emsize 16 --nhid 24 --levels 2
       --log-interval 1 --eval_batches 4 --threads 1 --save_every 3)
"$charlm" "${flags[@]}" --max_steps 3 --metrics "$dir/r.csv" --save "$dir/r.safetensors" > /dev/null
"${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --max_steps 5 --metrics "$dir/r2.csv" --save "$dir/r2.safetensors" \
  --resume "$dir/r.last.safetensors" > "$dir/r2.out" 2>&1 || { cat "$dir/r2.out"; fail "resume with 2 processes failed"; }
"$charlm" "${flags[@]}" --max_steps 5 --metrics "$dir/u.csv" --save "$dir/u.safetensors" > /dev/null
echo -n "resumed with 2 processes from a 1-process checkpoint vs uninterrupted: "
"$ckpt" compare "$dir/r2.last.safetensors" "$dir/u.last.safetensors" 1e-5 || fail "the resumed run ends elsewhere"

# Errors. A global batch that does not split:
out=$("${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --batch_size 7 --max_steps 1 --metrics "$dir/e.csv" 2>&1) &&
  fail "--batch_size 7 over 2 processes was accepted"
echo "$out" | grep -q "must be a multiple of the 2 processes" || { echo "$out"; fail "no message for --batch_size 7"; }
# A loss that blows up: every rank stops at the same step, the job fails with the message.
out=$(timeout 120 "${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --lr 1e30 --max_steps 20 --metrics "$dir/n.csv" 2>&1) &&
  fail "a diverging run succeeded"
echo "$out" | grep -qE "error: \[rank [01] of 2\] step [0-9]+ .*loss is -?(nan|inf)" || { echo "$out"; fail "no NaN message"; }
echo "diverging run: $(echo "$out" | grep -oE "\[rank [01] of 2\] step [0-9]+[^;]*" | head -n 1)"
# A rank killed by a signal: the job ends (non-zero) instead of hanging in the next all-reduce.
"${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --max_steps 1000000 --epochs 1000000 --metrics "$dir/k.csv" \
  > "$dir/k.out" 2>&1 &
job=$!
for _ in $(seq 100); do  # wait for both ranks to be training
  [ "$(pgrep -f -- "--metrics $dir/k.csv" | wc -l)" -ge 3 ] && [ -s "$dir/k.csv" ] && break
  sleep 0.2
done
victim=$(pgrep -f -- "$charlm train .*--metrics $dir/k.csv" | tail -n 1)
[ -n "$victim" ] || fail "no rank to kill"
kill -KILL "$victim"
for _ in $(seq 150); do kill -0 "$job" 2> /dev/null || break; sleep 0.2; done
if kill -0 "$job" 2> /dev/null; then
  kill -KILL "$job"; pkill -KILL -f -- "--metrics $dir/k.csv" || true
  fail "the job hung for 30 s after a rank was killed"
fi
rc=0; wait "$job" || rc=$?
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank was killed"
echo "a rank killed with SIGKILL: the job ended with status $rc"

if [ "$emu" = ON ]; then
  flags=(train --data "$dir" --device cuda:0 --batch_size 8 --seq_len 40 --validseqlen 32 --emsize 16 --nhid 24
         --levels 2 --dropout 0.2 --max_steps 5 --log-interval 1 --eval_batches 2 --threads 1)
  "$charlm" "${flags[@]}" --metrics "$dir/c.1.csv" --save "$dir/c.1.safetensors" > /dev/null 2>&1
  "${mpi[@]}" -np 2 "$charlm" "${flags[@]}" --metrics "$dir/c.2.csv" --save "$dir/c.2.safetensors" \
    > "$dir/c.2.out" 2>&1 || { cat "$dir/c.2.out"; fail "emulated CUDA: mpirun -np 2 failed"; }
  grep -q "MPI through host memory" "$dir/c.2.out" || { cat "$dir/c.2.out"; fail "emulated CUDA: not data-parallel"; }
  echo -n "tcn on the EMULATED CUDA device, 2 processes vs 1: "
  compare_losses "$dir/c.2.csv" "$dir/c.1.csv" || fail "emulated CUDA: losses differ"
  echo -n "tcn on the EMULATED CUDA device, final parameters: "
  "$ckpt" compare "$dir/c.2.safetensors" "$dir/c.1.safetensors" 1e-5 || fail "emulated CUDA: parameters differ"
fi
echo "cli_mpi: data-parallel training passed"
