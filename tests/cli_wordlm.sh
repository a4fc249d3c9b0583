#!/usr/bin/env bash
# `wordlm` end to end on a tiny synthetic word corpus: train a small model for
# 12 steps (the loss must fall), evaluate it (a perplexity is printed), and
# generate words from it (only vocabulary words come out); then a word LSTM that carries its
# state across windows, trained and evaluated.
# Usage: cli_wordlm.sh WORDLM
set -euo pipefail
wordlm=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bash "$(dirname "$0")/synthetic_corpus.sh" "$dir" 20000 3000

"$wordlm" train --data "$dir" --device cpu --batch_size 4 --seq_len 16 --validseqlen 8 --emsize 16 --nhid 16 \
  --levels 2 --lr 1 --max_steps 12 --log-interval 4 --eval_batches 2 --save "$dir/w.safetensors" \
  --metrics "$dir/w.csv" > "$dir/train.out"
cat "$dir/train.out"
grep -q "tokens word" "$dir/train.out" || { echo "no 'tokens word' in the header"; exit 1; }
grep -q "ppl" "$dir/train.out" || { echo "no perplexity in the log"; exit 1; }
# The CSV's training losses (column 5, one row per log interval of 4 steps): the last below the first.
awk -F, '$1 == "train" { if (!n++) first = $5; last = $5 }
         END { printf "first loss %s, last %s over %d log intervals\n", first, last, n;
               exit !(n == 3 && last < first) }' "$dir/w.csv"

"$wordlm" eval --checkpoint "$dir/w.safetensors" --data "$dir" --device cpu --seq_len 16 --validseqlen 8 \
  --batch_size 2 > "$dir/eval.out"
cat "$dir/eval.out"
grep -Eq "ppl [0-9]+" "$dir/eval.out" || { echo "eval printed no perplexity"; exit 1; }

"$wordlm" generate --checkpoint "$dir/w.safetensors" --prompt "the cat" -n 20 > "$dir/gen.out"
cat "$dir/gen.out"
# Every generated word is one of the corpus's words.
bad=$(tr -s ' \n' '\n\n' < "$dir/gen.out" | grep -Ev '^(the|cat|sat|on|a|mat|and|dog|ran|)$' || true)
[ -z "$bad" ] || { echo "words outside the vocabulary: $bad"; exit 1; }

# The word-level LSTM carries its state from window to window (--lstm_state carry, its default
# too): --validseqlen alone sets both lengths; eval follows the checkpoint's protocol.
"$wordlm" train --model lstm --data "$dir" --device cpu --batch_size 4 --validseqlen 8 --emsize 16 --nhid 16 --lr 1 \
  --max_steps 6 --log-interval 3 --eval_batches 2 --save "$dir/l.safetensors" --metrics "$dir/l.csv" > "$dir/lstm.out"
grep -q "(seq_len 8, validseqlen 8); the LSTM's state carried" "$dir/lstm.out" ||
  { cat "$dir/lstm.out"; echo "the word LSTM does not carry its state"; exit 1; }
"$wordlm" eval --checkpoint "$dir/l.safetensors" --data "$dir" --device cpu --validseqlen 8 --batch_size 2 \
  > "$dir/leval.out"
cat "$dir/leval.out"
grep -q "state carried (--lstm_state carry)" "$dir/leval.out" ||
  { echo "eval did not carry the word LSTM's state"; exit 1; }
echo "wordlm: train, eval and generate passed; the word LSTM carries its state"
