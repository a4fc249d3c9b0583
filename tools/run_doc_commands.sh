#!/usr/bin/env bash
# Runs the commands of a doc's code block literally, so that CI fails when the
# doc's instructions stop working (CI is a fresh clone on a fresh machine).
#
#   tools/run_doc_commands.sh DOC HEADING
#
# The block is the first ```bash fence after the first heading line of DOC that
# contains HEADING. Each line of it is one command, run by bash from the
# repository root in order, echoed first; the first one that fails stops the
# run with its exit status. Trailing comments are bash comments.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: tools/run_doc_commands.sh DOC HEADING" >&2
  exit 2
fi
doc=$1 heading=$2
[ -f "$doc" ] || { echo "run_doc_commands: no file '$doc'" >&2; exit 2; }
block=$(awk -v h="$heading" '
  !found && /^#+ / && index($0, h) { found = 1; next }
  found && !inblock && /^```bash[[:space:]]*$/ { inblock = 1; next }
  inblock && /^```/ { exit }
  inblock { print }
' "$doc")
if [ -z "$block" ]; then
  echo "run_doc_commands: no \`\`\`bash block after a heading containing '$heading' in $doc" >&2
  exit 2
fi
n=0
while IFS= read -r line; do
  [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
  n=$(( n + 1 ))
  echo "== $doc, command $n: $line"
  bash -c "set -euo pipefail; $line" </dev/null || {
    rc=$?
    echo "run_doc_commands: $doc, command $n failed (rc $rc): $line" >&2
    exit "$rc"
  }
done <<<"$block"
echo "== $doc: $n commands ran"
