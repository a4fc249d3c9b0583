#!/usr/bin/env python3
"""Checks the direction of includes between the library's folders.

The library is meant to stand in layers, each using only the ones below it:

    core  <-  cuda  <-  autograd  <-  ops  <-  nn  <-  examples, tests

(core: tensors, storage, the device runtime's interface, the math both devices
share; cuda: the device runtime and kernels; autograd: the tape that ops record
onto; ops: the primitives; nn: modules, models, checkpoints, the Trainer). An
include from a folder to one above it (core including ops/ops.h, say) is an
upward include: it ties a lower layer to a higher one, so neither can be read,
tested or replaced alone, and with the downward includes it makes the two
folders a loop. What a lower layer needs from a higher one is declared in the
lower one and defined in the higher (core/devices.h, implemented in cuda/;
the tape's gradient sums and the step graph's Philox updates, defined in ops/).

No include points up. KNOWN (below) is where an exception would be listed, as
(including file, included header), with the reason in the commit that adds it;
it is empty, and the check fails on any upward include not in it, and on a
listed one that is gone. The emulated device's internals (cuda/emu/) are
outside the layers.

It also checks that every include names a file: a quoted include is a path
from the repository root ("ops/ops.h") or from the including file's folder
("helpers.h"), and the prefix <tcn/...> is left to the programs that use the
library from outside (examples/tutorial/, examples/consumer/): inside the
tree it would reach the build's staged copy of a header (CMakeLists.txt, "the
headers"), a second copy beside the real one.

    python3 tools/check_layers.py          # exit 1 on a new or a stale entry, or an include of no file
    python3 tools/check_layers.py --list   # every folder-to-folder include, counted
"""

import argparse
import os
import re
import subprocess
import sys
from collections import Counter

LAYERS = ["core", "cuda", "autograd", "ops", "nn"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
SOURCE = re.compile(r"\.(h|cpp|cu|cuh)$")

# The upward includes allowed, (including file, included header): none.
KNOWN: set = set()


QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
PREFIXED = re.compile(r'^\s*#\s*include\s+[<"]tcn/[^">]+[">]', re.M)
OUTSIDE = ("examples/tutorial/", "examples/consumer/")


def unresolved_includes(root):
    """(file, include, why) for each include of the tree's sources that names no file."""
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True)
    bad = []
    for rel in out.stdout.split():
        if not SOURCE.search(rel):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        outside = rel.startswith(OUTSIDE)
        for name in QUOTED.findall(text):
            if outside and name.startswith("tcn/"):
                continue
            beside = os.path.join(root, os.path.dirname(rel), name)
            if not (os.path.isfile(beside) or os.path.isfile(os.path.join(root, name))):
                bad.append((rel, name, "names no file (from the repository root or beside the file)"))
        if not outside:
            for line in PREFIXED.findall(text):
                bad.append((rel, line.split("include", 1)[1].strip(),
                            "the tcn/ prefix is for programs outside the tree: write the path from the root"))
    return bad


def library_files(root):
    """The tracked sources of the layered folders (cuda/emu/ aside)."""
    out = subprocess.run(["git", "-C", root, "ls-files", *LAYERS], capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split() if SOURCE.search(f) and not f.startswith("cuda/emu/")]


def includes(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return [(folder, f"{folder}/{name}") for folder, name in INCLUDE.findall(f.read())]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--list", action="store_true", help="print every folder-to-folder include, counted")
    args = parser.parse_args()

    upward, edges = set(), Counter()
    for rel in library_files(args.root):
        src = rel.split("/")[0]
        for folder, header in includes(args.root, rel):
            if folder == src or folder not in RANK:
                continue
            edges[(src, folder)] += 1
            if RANK[folder] > RANK[src]:
                upward.add((rel, header))
    if args.list:
        for (src, dst), n in sorted(edges.items()):
            print(f"{src:9} -> {dst:9} {n:3}  {'UPWARD' if RANK[dst] > RANK[src] else ''}")
    unresolved = unresolved_includes(args.root)
    for rel, name, why in unresolved:
        print(f"{rel}: #include {name}: {why}")
    new, stale = sorted(upward - KNOWN), sorted(KNOWN - upward)
    for rel, header in new:
        print(f"{rel}: includes {header}, a layer above it ({' <- '.join(LAYERS)}): pass what it needs "
              "down as an argument or an interface instead")
    for rel, header in stale:
        print(f"{rel}: no longer includes {header}: remove the pair from KNOWN in tools/check_layers.py")
    print(f"check_layers: {len(upward)} upward include(s), {len(KNOWN)} known; {len(new)} new, {len(stale)} stale; "
          f"{len(unresolved)} include(s) of no file", file=sys.stderr)
    return 1 if new or stale or unresolved else 0


if __name__ == "__main__":
    sys.exit(main())
