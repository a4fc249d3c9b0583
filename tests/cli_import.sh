#!/usr/bin/env bash
# charlm eval / generate / train --init on PyTorch state_dicts without our
# metadata (tests/golden/foreign/, made by tools/reference/make_foreign.py from
# the published structures with the official safetensors package). The doctest
# cases of tests/test_import.cpp check each file against PyTorch's logits; here
# the command line: every TCN naming variant of one model must evaluate to the
# same bpc, the config line and the vocabulary warning are printed, --init
# trains from one, and mismatches are refused with the tensor named.
# Usage: cli_import.sh CHARLM SOURCE_DIR
set -euo pipefail
charlm=$1
golden=$2/tests/golden/foreign
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# A corpus of exactly the models' 11 characters (newline, space, a-i).
for split in train valid test; do
  awk -v seed="${#split}" 'BEGIN { srand(seed); s = "abcdefghi";
    for (l = 0; l < 60; l++) { line = ""; for (w = 0; w < 8; w++) { n = 1 + int(rand() * 5); word = "";
      for (i = 0; i < n; i++) word = word substr(s, 1 + int(rand() * 9), 1); line = line (w ? " " : "") word }
      print line } }' >"$dir/ptb.$split.txt"
done
eval_flags=(--data "$dir" --seq_len 40 --validseqlen 30 --batch_size 2 --device cpu --threads 2)

bpc() { sed -n 's/.*| bpc \([0-9.]*\) |.*/\1/p' "$1"; }
status=0
ref=""
for f in tcn_save_model tcn_all_names tcn_parametrized; do
  "$charlm" eval --checkpoint "$golden/$f.safetensors" "${eval_flags[@]}" >"$dir/$f.out" 2>"$dir/$f.err"
  grep -q 'a PyTorch tcn state_dict (no tcn metadata): vocab_size 11, emsize 8, nhid 12, levels 3, ksize 3' "$dir/$f.err" ||
    { echo "$f: no config line"; cat "$dir/$f.err"; status=1; }
  grep -q 'warning: a state_dict holds no vocabulary; using the 11 characters' "$dir/$f.err" ||
    { echo "$f: no vocabulary warning"; cat "$dir/$f.err"; status=1; }
  b=$(bpc "$dir/$f.out")
  echo "$f: bpc $b"
  [ -n "$b" ] || { echo "$f: no bpc in: $(cat "$dir/$f.out")"; status=1; }
  if [ -z "$ref" ]; then ref=$b; elif [ "$b" != "$ref" ]; then echo "$f: bpc $b differs from $ref"; status=1; fi
done
# An LSTM carries its state from window to window (--lstm_state carry): windows of 40 that do not overlap.
"$charlm" eval --checkpoint "$golden/lstm_save_model.safetensors" --data "$dir" --seq_len 40 --batch_size 2 \
  --device cpu --threads 2 >"$dir/lstm.out" 2>"$dir/lstm.err"
grep -q 'a PyTorch lstm state_dict (no tcn metadata): vocab_size 11, emsize 8, nhid 12, layers 2' "$dir/lstm.err" ||
  { echo "lstm: no config line"; cat "$dir/lstm.err"; status=1; }
echo "lstm_save_model: bpc $(bpc "$dir/lstm.out")"

# A vocabulary given as a file: no warning; one of the wrong size: refused.
printf '["\\n", " ", "a", "b", "c", "d", "e", "f", "g", "h", "i"]' >"$dir/vocab.json"
"$charlm" eval --checkpoint "$golden/tcn_bare.safetensors" --vocab "$dir/vocab.json" "${eval_flags[@]}" \
  >"$dir/bare.out" 2>"$dir/bare.err"
if grep -q warning "$dir/bare.err"; then echo "--vocab given, yet a warning"; status=1; fi
printf '["a", "b"]' >"$dir/short.json"
if "$charlm" eval --checkpoint "$golden/tcn_bare.safetensors" --vocab "$dir/short.json" "${eval_flags[@]}" \
    >/dev/null 2>"$dir/short.err"; then echo "a 2-token vocabulary was accepted"; status=1; fi
grep -q 'the model has 11 tokens (encoder.weight), but the vocabulary from --vocab' "$dir/short.err" ||
  { echo "short vocab: $(cat "$dir/short.err")"; status=1; }
# A --vocab file that does not exist is named as such (not as a data directory without ptb.train.txt).
if "$charlm" eval --checkpoint "$golden/tcn_bare.safetensors" --vocab "$dir/none.json" "${eval_flags[@]}" \
    >/dev/null 2>"$dir/none.err"; then echo "a missing --vocab file was accepted"; status=1; fi
grep -q -- "--vocab $dir/none.json: cannot open: No such file or directory" "$dir/none.err" ||
  { echo "missing vocab: $(cat "$dir/none.err")"; status=1; }

# generate from one, and --init: trains with matching flags, refuses others.
"$charlm" generate --checkpoint "$golden/tcn_parametrized.safetensors" --data "$dir" --prompt "abc" -n 20 \
  >"$dir/gen.out" 2>"$dir/gen.err" || { echo "generate failed: $(cat "$dir/gen.err")"; status=1; }
train_flags=(--data "$dir" --emsize 8 --levels 3 --ksize 3 --batch_size 2 --seq_len 40 --validseqlen 30
             --max_steps 2 --log-interval 1 --eval_batches 1 --device cpu --threads 2 --metrics "$dir/init.csv")
"$charlm" train --init "$golden/tcn_save_model.safetensors" "${train_flags[@]}" --nhid 12 >"$dir/init.out" 2>"$dir/init.err" ||
  { echo "train --init failed: $(cat "$dir/init.err")"; status=1; }
[ "$(grep -c '^train,' "$dir/init.csv" 2>/dev/null)" = 2 ] || { echo "train --init: not 2 steps"; status=1; }
if "$charlm" train --init "$golden/tcn_save_model.safetensors" "${train_flags[@]}" --nhid 13 \
    >/dev/null 2>"$dir/bad.err"; then echo "--init with --nhid 13 was accepted"; status=1; fi
grep -q -- '--nhid 13 was given, but the file.s tensors say 12 (tcn.network.0.conv1.weight_v \[12, 8, 3\])' "$dir/bad.err" ||
  { echo "--nhid 13: $(cat "$dir/bad.err")"; status=1; }
[ $status -eq 0 ] && echo "cli_import: ok"
exit $status
