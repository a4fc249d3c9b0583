#!/usr/bin/env python3
"""The compiler's resource report for every CUDA kernel of tcn, checked.

Recompiles each cuda/*.cu of a CUDA build (its own compile command, from
BUILD/compile_commands.json) with `-Xptxas -v`, and lists per kernel: registers,
spill bytes (stores + loads), stack frame and static shared memory, for the
build's architecture (sm_90). It fails (exit 1) on what cannot be right on a GPU:
- any spill: registers spilled to local memory, slow in every launch;
- static shared memory over 48 KiB: a launch fails without the opt-in attribute;
- over 255 registers (the hardware's per-thread limit).
With --launches FILE (what the emulated device wrote with TCN_EMU_LAUNCHES=FILE:
each kernel's largest block and dynamic shared memory over a test run) it also
checks each launched kernel's registers x threads per block against 65,536 and
its static plus dynamic shared memory against 48 KiB: the launches ptxas cannot see.

    tools/kernel_resources.py [BUILD] [--launches FILE] [--markdown OUT.md] [--all]   (BUILD: build)
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from atomic_write import check_output_dir, write_atomic  # noqa: E402

SMEM_LIMIT = 48 * 1024


def compile_report(entry, out_dir):
    """One .cu's ptxas report. For a build of one architecture, device code only
    (-cubin for that sm_XX): the same report without the host compilation, in about
    half the time; for several architectures the whole compile command."""
    args = shlex.split(entry["command"])
    out = os.path.join(out_dir, os.path.basename(entry["file"]) + ".o")
    gencode = [a for a in args if a.startswith("--generate-code=")]
    real = re.search(r"sm_(\d+)", gencode[0]) if len(gencode) == 1 else None
    if real and "-c" in args:
        args = [a for a in args if a != "-c"]
        args[args.index(gencode[0])] = "--generate-code=arch=compute_%s,code=sm_%s" % (real.group(1), real.group(1))
        args.append("-cubin")
        out = out[:-2] + ".cubin"
    if "-o" in args:
        args[args.index("-o") + 1] = out
    args += ["-Xptxas", "-v"]
    r = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("kernel_resources: compiling %s failed:\n%s" % (entry["file"], r.stderr[-3000:]))
    return entry["file"], r.stderr


def parse(text):
    """ptxas -v output -> {mangled name: {regs, spill, stack, smem}} (the last architecture's figures)."""
    kernels, current, props = {}, None, {}
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'", line)
        if m:
            current = m.group(1)
            kernels[current] = {"arch": m.group(2), "regs": 0, "spill": 0, "stack": 0, "smem": 0}
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = kernels.get(m.group(1))
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props is not None:
            props["stack"] = int(m.group(1))
            props["spill"] = int(m.group(2)) + int(m.group(3))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current in kernels:
            kernels[current]["regs"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)  # absent when the kernel has none
            kernels[current]["smem"] = int(smem.group(1)) if smem else 0
    return kernels


def demangle(names):
    if not names:
        return {}
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.splitlines() if r.returncode == 0 else names
    return dict(zip(names, out))


def short(name):
    """tcn::cuda::(anonymous namespace)::dropout_fwd_kernel<float>(float*, ...) -> dropout_fwd_kernel<float>."""
    name = name.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    for prefix in ("tcn::cuda::", "tcn::", "void "):
        name = name.replace(prefix, "")
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--markdown", help="also write the table as markdown to this file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--all", action="store_true", help="one row per instantiation, not per kernel template")
    ap.add_argument("--launches", help="the emulated device's launch sizes (TCN_EMU_LAUNCHES)")
    args = ap.parse_args()
    if args.markdown:
        try:
            check_output_dir(args.markdown, "--markdown")  # before minutes of compiling
        except ValueError as e:
            sys.exit("kernel_resources: %s" % e)
    cc_path = os.path.join(args.build, "compile_commands.json")
    if not os.path.exists(cc_path):
        sys.exit("kernel_resources: no %s (a CUDA build configured by CMake, e.g. scripts/setup.sh)" % cc_path)
    entries = [e for e in json.load(open(cc_path))
               if e["file"].endswith(".cu") and "/cuda/" in e["file"] and "nvcc" in e["command"]
               and os.path.exists(e["file"])]
    if not entries:
        sys.exit("kernel_resources: %s compiles no cuda/*.cu with nvcc (TCN_CUDA=ON needed)" % cc_path)
    kernels = {}
    with tempfile.TemporaryDirectory() as out_dir, ThreadPoolExecutor(args.jobs) as pool:
        for path, text in pool.map(lambda e: compile_report(e, out_dir), entries):
            for name, k in parse(text).items():
                k["file"] = os.path.basename(path)
                kernels[name] = k
    names = demangle(sorted(kernels))
    rows, bad = [], []
    for mangled, k in kernels.items():
        name = short(names.get(mangled, mangled))
        problems = []
        if k["spill"]:
            problems.append("spills %d bytes" % k["spill"])
        if k["smem"] > SMEM_LIMIT:
            problems.append("static shared memory %d > %d" % (k["smem"], SMEM_LIMIT))
        if k["regs"] > 255:
            problems.append("%d registers > 255" % k["regs"])
        rows.append((k["file"], name, k["arch"], k["regs"], k["spill"], k["stack"], k["smem"], "; ".join(problems)))
        if problems:
            bad.append((name, problems))
    launches = {}
    if args.launches:
        for line in open(args.launches):
            parts = line.split()
            if len(parts) == 3:
                t, d = launches.get(parts[0], (0, 0))
                launches[parts[0]] = (max(t, int(parts[1])), max(d, int(parts[2])))
        by_base = {}
        for f, name, arch, regs, spill, stack, smem, problem in rows:
            base = name.split("<")[0].split("::")[-1]
            r, m = by_base.get(base, (0, 0))
            by_base[base] = (max(r, regs), max(m, smem))
        for base, (threads, dyn) in sorted(launches.items()):
            if base not in by_base:
                continue  # a launch of a kernel this build does not compile with nvcc (none expected)
            regs, smem = by_base[base]
            if regs * threads > 65536:
                bad.append((base, ["%d registers x %d threads = %d > 65,536 per block" % (regs, threads, regs * threads)]))
            if smem + dyn > SMEM_LIMIT:
                bad.append((base, ["static %d + dynamic %d bytes of shared memory > 48 KiB" % (smem, dyn)]))
        unmatched = sorted(set(launches) - set(by_base))
        print("kernel_resources: launch sizes of %d kernels checked (%s); largest block %d threads; %s"
              % (len(set(launches) & set(by_base)), args.launches, max([t for t, _ in launches.values()] or [0]),
                 "kernels outside cuda/ (tests, tutorial), not checked: " + ", ".join(unmatched) if unmatched else "every launch name matched"))
    rows.sort()
    if args.all:
        header = "| file | kernel | arch | registers | spill bytes | stack bytes | static smem bytes | problem |\n" \
                 "|---|---|---|---|---|---|---|---|"
        table = header + "\n" + "\n".join("| %s | `%s` | %s | %d | %d | %d | %d | %s |" % r for r in rows)
    else:
        # One row per kernel template: its instantiations' largest figures.
        groups = {}
        for f, name, arch, regs, spill, stack, smem, problem in rows:
            key = (f, name.split("<")[0])
            g = groups.setdefault(key, [0, 0, 0, 0, 0, arch])
            g[0] += 1
            g[1], g[2], g[3], g[4] = max(g[1], regs), max(g[2], spill), max(g[3], stack), max(g[4], smem)
        header = "| file | kernel (instantiations) | registers | spill bytes | stack bytes | static smem bytes |\n" \
                 "|---|---|---|---|---|---|"
        table = header + "\n" + "\n".join("| %s | `%s` (%d) | %d | %d | %d | %d |" % (f, n, g[0], g[1], g[2], g[3], g[4])
                                            for (f, n), g in sorted(groups.items()))
    print(table)
    worst = max(rows, key=lambda r: r[3])
    summary = ("kernel_resources: %d kernels in %d files; most registers %d (%s); %d with a stack frame; "
               "largest static shared memory %d bytes; %d problem(s)"
               % (len(rows), len(entries), worst[3], worst[1], sum(1 for r in rows if r[5]),
                  max(r[6] for r in rows), len(bad)))
    print(summary)
    if args.markdown:
        write_atomic(args.markdown, table + "\n\n" + summary + "\n")
    for name, problems in bad:
        print("kernel_resources: %s: %s" % (name, "; ".join(problems)), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
