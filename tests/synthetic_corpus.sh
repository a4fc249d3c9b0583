#!/usr/bin/env bash
# Writes ptb.{train,valid,test}.txt of deterministic pseudo-text (random words)
# into DIR, for the command-line tests. Usage: synthetic_corpus.sh DIR TRAIN_CHARS OTHER_CHARS
set -euo pipefail
make_text() {  # n seed
  awk -v n="$1" -v seed="$2" 'BEGIN {
    srand(seed); k = split("the |cat |sat |on |a |mat |and |dog\n|ran ", w, "|"); s = "";
    while (length(s) < n) s = s w[1 + int(rand() * k)];
    printf "%s", substr(s, 1, n) }'
}
make_text "$2" 1 > "$1/ptb.train.txt"
make_text "$3" 2 > "$1/ptb.valid.txt"
make_text "$3" 3 > "$1/ptb.test.txt"
