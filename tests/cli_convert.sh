#!/usr/bin/env bash
# tools/convert_pytorch.py, run by Debian's PyTorch (/usr/bin/python3) on
# fixtures this script makes with torch itself (tools/reference/models.py):
#  - good input: a TCN state_dict, the same model pickled whole (with
#    --trust-pickle), a whole model whose class needs --code, an LSTM checkpoint
#    dict with --vocab; each loads in `charlm eval`, the pickled model to the
#    state_dict's bpc, and the --data vocabulary is the one charlm builds;
#  - refused, without --trust-pickle: a whole-model pickle and pickles whose
#    __reduce__ calls os.system (the marker file it would touch stays absent;
#    with --trust-pickle it appears, so the fixture really runs code);
#  - bad input: missing, empty, garbage, a directory, no tensors in it, a class
#    that cannot be imported, an output in a missing, non-directory or read-only
#    directory (checked before the input is loaded), a write failure, a corpus
#    byte outside ASCII (charlm's vocabulary cannot hold it).
# Each refusal: a non-zero exit, exactly one line on stderr, no traceback, and
# the output path as it was (an earlier file unchanged, no temporary left).
# Exit 77 (skipped) when /usr/bin/python3 cannot import torch.
# Usage: cli_convert.sh CHARLM [SOURCE_DIR]
set -euo pipefail
charlm=$1
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
py=/usr/bin/python3
conv=$src/tools/convert_pytorch.py
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "cli_convert: skipped: $py cannot import torch (Debian: apt-get install python3-torch)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
dir=$(mktemp -d)
trap 'chmod -R u+w "$dir" 2>/dev/null || true; rm -rf "$dir"' EXIT
marker=$dir/MARKER

# Fixtures. A corpus of 11 characters (newline, space, a-i); the same with
# "café naïve" appended to ptb.valid.txt (16 bytes: n, v, 0xc3, 0xa9, 0xaf more).
"$py" - "$dir" "$src/tools/reference" "$marker" <<'EOF'
import os, pickle, random, sys
import torch
d, ref, marker = sys.argv[1:4]
sys.path.insert(0, ref)
from models import LSTMCharLM, TCNCharLM

for sub in ("data", "utf8", "code", "out", "ro"):
    os.makedirs(os.path.join(d, sub))
rng = random.Random(5)
for split in ("train", "valid", "test"):
    lines = [" ".join("".join(rng.choice("abcdefghi") for _ in range(rng.randint(1, 5))) for _ in range(8))
             for _ in range(60)]
    text = ("abcdefghi\n" + "\n".join(lines) + "\n").encode()
    open(os.path.join(d, "data", "ptb.%s.txt" % split), "wb").write(text)
    if split == "valid":
        open(os.path.join(d, "valid_ascii_size"), "w").write(str(len(text)))
        text += "café naïve\n".encode("utf-8")
    open(os.path.join(d, "utf8", "ptb.%s.txt" % split), "wb").write(text)

torch.manual_seed(1)
tcn = TCNCharLM(11, 8, 12, 2, 3)
torch.save(tcn.state_dict(), os.path.join(d, "tcn.pt"))
torch.save(tcn, os.path.join(d, "whole.pt"))
torch.save(TCNCharLM(16, 8, 12, 2, 3).state_dict(), os.path.join(d, "tcn16.pt"))
lstm = LSTMCharLM(11, 8, 12, 1)
torch.save({"state_dict": lstm.state_dict(), "epoch": 3}, os.path.join(d, "lstm.pt"))
open(os.path.join(d, "vocab.json"), "w").write('["\\n", " ", "a", "b", "c", "d", "e", "f", "g", "h", "i"]')
open(os.path.join(d, "bad_vocab.json"), "w").write('["\\n", " ", "a", "b", "c", "d", "e", "f", "g", "h", "\\u00e9"]')

# A class that only --code DIR makes importable.
open(os.path.join(d, "code", "fixture_models.py"), "w").write(
    "from models import TCNCharLM\n\nclass Wrapped(TCNCharLM):\n    pass\n")
sys.path.insert(0, os.path.join(d, "code"))
import fixture_models
torch.save(fixture_models.Wrapped(11, 8, 12, 2, 3), os.path.join(d, "wrapped.pt"))

class Evil:
    def __reduce__(self):
        return (os.system, ("touch '%s'" % marker,))
torch.save({"encoder.weight": torch.zeros(2, 2), "x": Evil()}, os.path.join(d, "evil.pt"))
with open(os.path.join(d, "evil_plain.pkl"), "wb") as f:
    pickle.dump(Evil(), f)

torch.save([1, 2, 3], os.path.join(d, "list.pt"))
torch.save({}, os.path.join(d, "emptydict.pt"))
torch.save({"epoch": 3, "name": "tcn"}, os.path.join(d, "nontensors.pt"))
torch.save({"state_dict": tcn.state_dict(), "epoch": 3, "lr": 0.5}, os.path.join(d, "with_float.pt"))
open(os.path.join(d, "empty.pt"), "wb").close()
open(os.path.join(d, "garbage.pt"), "wb").write(random.Random(7).randbytes(4096))
EOF
[ ! -e "$marker" ] || { echo "the fixtures ran the malicious pickle"; exit 1; }

status=0
bad() { echo "FAIL: $*"; status=1; }
# An earlier output that every failed conversion must leave as it was.
printf 'an earlier conversion\n' >"$dir/keep.orig"
cp "$dir/keep.orig" "$dir/out/keep.safetensors"
keep=$dir/out/keep.safetensors
check_keep() {
  cmp -s "$dir/keep.orig" "$keep" || bad "$1: the earlier output was changed"
  [ "$(ls -A "$dir/out")" = keep.safetensors ] || bad "$1: left in the output folder: $(ls -A "$dir/out" | tr '\n' ' ')"
}

# refused CASE TEXT ARGS...: a non-zero exit, one line on stderr holding TEXT,
# no traceback. $wrap (an array) runs before the converter when set.
wrap=()
refused() {
  local case=$1 want=$2 rc=0
  shift 2
  "${wrap[@]}" "$py" "$conv" "$@" >"$dir/$case.out" 2>"$dir/$case.err" || rc=$?
  local err
  err=$(cat "$dir/$case.err")
  echo "$case: exit $rc: $err"
  if [ $rc -eq 0 ]; then bad "$case: exit status 0"; fi
  if [ "$(wc -l <"$dir/$case.err")" -ne 1 ]; then bad "$case: not exactly one line on stderr"; fi
  if grep -q Traceback "$dir/$case.err"; then bad "$case: a traceback"; fi
  if ! grep -q '^convert_pytorch: error: ' "$dir/$case.err"; then bad "$case: no 'convert_pytorch: error: '"; fi
  if ! grep -qF -- "$want" "$dir/$case.err"; then bad "$case: no '$want' on stderr"; fi
}
converts() {
  local case=$1
  shift
  "$py" "$conv" "$@" >"$dir/$case.out" 2>"$dir/$case.err" || bad "$case: failed: $(cat "$dir/$case.err")"
}
eval_flags=(--batch_size 2 --device cpu --threads 2)
windows=(--seq_len 40 --validseqlen 30)  # the TCN's; an LSTM carries its state across windows that do not overlap
# bpc CASE CHECKPOINT ARGS...: charlm eval's bpc in $B (empty if none), its stderr in $dir/CASE.eval.err.
bpc() {
  local case=$1 ckpt=$2
  shift 2
  B=""
  if ! "$charlm" eval --checkpoint "$ckpt" "${eval_flags[@]}" "${windows[@]}" "$@" >"$dir/$case.eval.out" 2>"$dir/$case.eval.err"; then
    bad "$case: charlm eval failed: $(cat "$dir/$case.eval.err")"
    return 0
  fi
  B=$(sed -n 's/.*| bpc \([0-9.]*\) |.*/\1/p' "$dir/$case.eval.out")
  [ -n "$B" ] || bad "$case: no bpc in: $(cat "$dir/$case.eval.out")"
}

# --help says what --trust-pickle means.
"$py" "$conv" --help >"$dir/help.out" 2>&1 || bad "--help failed: $(cat "$dir/help.out")"
for want in --trust-pickle "arbitrary code" "files you trust" "weights_only=True" "2.6" "model.state_dict()"; do
  grep -qF -- "$want" <(tr -s ' \n' ' ' <"$dir/help.out") || bad "--help: no '$want'"
done

# Good input: the state_dict with its vocabulary; charlm loads it without the
# vocabulary warning, to the bpc it gets from the data's own vocabulary.
converts tcn "$dir/tcn.pt" "$dir/tcn.safetensors" --data "$dir/data"
bpc tcn "$dir/tcn.safetensors" --data "$dir/data"
b_tcn=$B
grep -q 'a PyTorch tcn state_dict (no tcn metadata): vocab_size 11, emsize 8, nhid 12, levels 2, ksize 3' \
  "$dir/tcn.eval.err" || bad "tcn: no config line: $(cat "$dir/tcn.eval.err")"
if grep -q warning "$dir/tcn.eval.err"; then bad "tcn: a vocabulary warning despite --data"; fi
converts novocab "$dir/tcn.pt" "$dir/novocab.safetensors"
bpc novocab "$dir/novocab.safetensors" --data "$dir/data"
b_novocab=$B
grep -q 'warning: a state_dict holds no vocabulary' "$dir/novocab.eval.err" || bad "novocab: no vocabulary warning"
echo "tcn: bpc $b_tcn (with the data's vocabulary: $b_novocab)"
[ -n "$b_tcn" ] && [ "$b_tcn" = "$b_novocab" ] || bad "tcn: bpc '$b_tcn' != '$b_novocab'"

# The whole model: refused, then converted with --trust-pickle to the same bpc.
refused whole "whole pickled model" "$dir/whole.pt" "$keep" --data "$dir/data"
grep -qF 'models.TCNCharLM' "$dir/whole.err" || bad "whole: the class is not named"
grep -qF -- '--trust-pickle' "$dir/whole.err" || bad "whole: --trust-pickle is not named"
check_keep whole
converts whole_trusted "$dir/whole.pt" "$dir/whole.safetensors" --data "$dir/data" --trust-pickle
bpc whole "$dir/whole.safetensors" --data "$dir/data"
b_whole=$B
echo "whole --trust-pickle: bpc $b_whole"
[ -n "$b_whole" ] && [ "$b_whole" = "$b_tcn" ] || bad "whole: bpc '$b_whole' != '$b_tcn'"

# A class outside the import path: refused even trusted, until --code names its folder.
refused wrapped_nocode "cannot be imported" "$dir/wrapped.pt" "$keep" --trust-pickle --data "$dir/data"
grep -qF "fixture_models" "$dir/wrapped_nocode.err" || bad "wrapped_nocode: the module is not named"
check_keep wrapped_nocode
converts wrapped "$dir/wrapped.pt" "$dir/wrapped.safetensors" --trust-pickle --code "$dir/code" --data "$dir/data"
bpc wrapped "$dir/wrapped.safetensors" --data "$dir/data"

# An LSTM checkpoint dict ("state_dict" plus an int) with --vocab, over an earlier file.
cp "$dir/keep.orig" "$dir/lstm.safetensors"
converts lstm "$dir/lstm.pt" "$dir/lstm.safetensors" --vocab "$dir/vocab.json"
windows=(--seq_len 40)
bpc lstm "$dir/lstm.safetensors" --data "$dir/data"
windows=(--seq_len 40 --validseqlen 30)
grep -q 'a PyTorch lstm state_dict (no tcn metadata): vocab_size 11, emsize 8, nhid 12, layers 1' \
  "$dir/lstm.eval.err" || bad "lstm: no config line: $(cat "$dir/lstm.eval.err")"
if grep -q warning "$dir/lstm.eval.err"; then bad "lstm: a vocabulary warning despite --vocab"; fi
[ "$(find "$dir" -maxdepth 1 -name '.lstm*')" = "" ] || bad "lstm: a temporary file was left"

# Malicious pickles: refused unrun; trusted, the code runs (the fixture is real).
refused evil "posix.system" "$dir/evil.pt" "$keep"
grep -qF -- '--trust-pickle' "$dir/evil.err" || bad "evil: --trust-pickle is not named"
[ ! -e "$marker" ] || bad "evil: the pickle's os.system ran without --trust-pickle"
check_keep evil
refused evil_plain "posix.system" "$dir/evil_plain.pkl" "$keep"
[ ! -e "$marker" ] || bad "evil_plain: the pickle's os.system ran without --trust-pickle"
check_keep evil_plain
"$py" "$conv" "$dir/evil.pt" "$keep" --trust-pickle >/dev/null 2>&1 || true
[ -e "$marker" ] || bad "evil --trust-pickle: the marker is absent, so the fixture proves nothing"
check_keep evil_trusted
rm -f "$marker"

# Output paths, checked before the input is loaded: with the malicious pickle,
# trusted, as input, nothing may run.
refused out_missing_dir "does not exist" "$dir/evil.pt" "$dir/nonexistent/x.safetensors" --trust-pickle
refused out_under_file "is not a directory" "$dir/evil.pt" "$dir/keep.orig/x.safetensors" --trust-pickle
refused out_directory "is a directory" "$dir/evil.pt" "$dir/out" --trust-pickle
cp "$dir/tcn.pt" "$dir/tcn.pt.orig"
refused out_is_input "is the input file" "$dir/tcn.pt" "$dir/tcn.pt"
chmod 555 "$dir/ro"
if touch "$dir/ro/probe" 2>/dev/null; then  # privileged (root): a user namespace drops that
  rm -f "$dir/ro/probe"
  if unshare -U true 2>/dev/null; then wrap=(unshare -U); else wrap=(skip); fi
fi
if [ "${wrap[*]-}" = skip ]; then
  echo "out_read_only: skipped: privileged, and no user namespace (unshare -U) to drop the privilege"
else
  refused out_read_only "is not writable" "$dir/evil.pt" "$dir/ro/x.safetensors" --trust-pickle
  [ -z "$(ls -A "$dir/ro")" ] || bad "out_read_only: something was written"
fi
wrap=()
[ ! -e "$marker" ] || bad "an output check came after loading: the pickle's os.system ran"
cmp -s "$dir/tcn.pt" "$dir/tcn.pt.orig" || bad "out_is_input: the input was changed"

# A write that fails (a 4 KiB file size limit; the output is ~15 KiB): the earlier file stays.
wrap=(bash -c 'ulimit -f 4; exec "$@"' _)
refused write_fails "write failed" "$dir/tcn.pt" "$keep" --data "$dir/data"
wrap=()
check_keep write_fails

# Bad input files.
refused missing "No such file or directory" "$dir/nonexistent.pt" "$keep"
refused empty "is empty" "$dir/empty.pt" "$keep"
refused garbage "not a torch.save file" "$dir/garbage.pt" "$keep"
refused garbage_trusted "not a torch.save file" "$dir/garbage.pt" "$keep" --trust-pickle
refused input_directory "is a directory" "$dir/data" "$keep"
refused list "holds a list" "$dir/list.pt" "$keep"
refused empty_dict "holds an empty dict" "$dir/emptydict.pt" "$keep"
refused no_tensors "not a model or a state_dict" "$dir/nontensors.pt" "$keep"
refused bad_flag "unrecognized arguments: --bogus" "$dir/tcn.pt" "$keep" --bogus
refused vocab_size "the model has 16 tokens (encoder.weight), but the vocabulary from --vocab" \
  "$dir/tcn16.pt" "$keep" --vocab "$dir/vocab.json"
check_keep bad_input
# A float beside the state_dict: PyTorch 1.13's weights-only loader reads none
# (BINFLOAT); the error says so and names --trust-pickle, which converts it.
if "$py" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) >= 2)'; then
  refused with_float "cannot read the pickle opcode BINFLOAT" "$dir/with_float.pt" "$keep" --data "$dir/data"
  grep -qF -- '--trust-pickle' "$dir/with_float.err" || bad "with_float: --trust-pickle is not named"
  check_keep with_float
  converts with_float_trusted "$dir/with_float.pt" "$dir/with_float.safetensors" --data "$dir/data" --trust-pickle
else
  converts with_float "$dir/with_float.pt" "$dir/with_float.safetensors" --data "$dir/data"
fi
bpc with_float "$dir/with_float.safetensors" --data "$dir/data"
[ "$B" = "$b_tcn" ] || bad "with_float: bpc '$B' != '$b_tcn'"

# A corpus byte outside ASCII: refused in the converter, naming the byte, the
# file and its offset (valid's ASCII part, then "caf": offset + 3) ...
offset=$(($(cat "$dir/valid_ascii_size") + 3))
refused non_ascii "$dir/utf8/ptb.valid.txt has byte 0xc3 at offset $offset" "$dir/tcn16.pt" "$keep" --data "$dir/utf8"
check_keep non_ascii
# ... because charlm accepts no vocabulary entry but single bytes, which JSON
# can only give for ASCII ("\u00e9" is two bytes in UTF-8) ...
"$charlm" eval --checkpoint "$dir/novocab.safetensors" --vocab "$dir/bad_vocab.json" "${eval_flags[@]}" \
  --data "$dir/data" >/dev/null 2>"$dir/bad_vocab.err" && bad "charlm accepted a vocabulary entry outside ASCII"
grep -q 'vocabulary entry 10 is not a single byte character' "$dir/bad_vocab.err" ||
  bad "charlm on a non-ASCII vocabulary entry: $(cat "$dir/bad_vocab.err")"
# ... while without --data the file loads, charlm taking the bytes of its own --data, as the error suggests.
converts tcn16 "$dir/tcn16.pt" "$dir/tcn16.safetensors"
bpc tcn16 "$dir/tcn16.safetensors" --data "$dir/utf8" --split valid
echo "tcn16 without --data, on the UTF-8 corpus: bpc $B"

[ $status -eq 0 ] && echo "cli_convert: ok"
exit $status
