#!/usr/bin/env python3
"""The general TCN's ops on the CPU, tcn (build/bench_ops) against PyTorch, in
alternating rounds on one machine: per op, the ratio tcn / PyTorch of the best
forward + backward time of each round, then the median and range of the
ratios over the rounds. Run with Debian's PyTorch:

    /usr/bin/python3 tools/bench_ops_vs_torch.py --rounds 5 --threads 2
"""
import argparse
import statistics
import subprocess
import sys
import time


def torch_times(torch, F, B, T, C, reps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, C, generator=g)  # N(0, 1): both sides of every activation's kink
    x2 = torch.randn(B, T, 2 * C, generator=g)
    gamma, beta = torch.rand(C, generator=g), torch.rand(C, generator=g)
    dy = torch.rand(B, T, C, generator=g)
    ops = {
        "relu": lambda v: F.relu(v),
        "gelu": lambda v: F.gelu(v),
        "elu": lambda v: F.elu(v),
        "selu": lambda v: F.selu(v),
        "leaky_relu": lambda v: F.leaky_relu(v, 0.01),
        "glu": lambda v: F.glu(v, -1),
        "layer_norm": lambda v: F.layer_norm(v, [C], gamma, beta, 1e-5),
    }
    out = {}
    for name, f in ops.items():
        inp = (x2 if name == "glu" else x).detach().requires_grad_(True)
        best = float("inf")
        for r in range(reps + 1):
            inp.grad = None
            t0 = time.perf_counter()
            (f(inp) * dy).sum().backward()
            ms = (time.perf_counter() - t0) * 1e3
            if r > 0:
                best = min(best, ms)
        out[name] = best
    return out


def tcn_times(binary, threads, B, T, C, reps):
    text = subprocess.run([binary, "--threads", str(threads), "--reps", str(reps), "--batch_size", str(B),
                           "--seq_len", str(T), "--channels", str(C)], check=True, capture_output=True,
                          text=True).stdout
    out = {}
    for line in text.splitlines()[1:]:
        name, ms, _ = line.split()
        out[name] = float(ms)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="build/bench_ops")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--seq_len", type=int, default=400)
    ap.add_argument("--channels", type=int, default=128)
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit(f"bench_ops_vs_torch: error: PyTorch is not importable ({e}); use /usr/bin/python3")
    torch.set_num_threads(a.threads)
    B, T, C = a.batch_size, a.seq_len, a.channels
    print(f"bench_ops_vs_torch: [B {B}, T {T}, C {C}] float32, {a.threads} thread(s), PyTorch {torch.__version__}, "
          f"{a.rounds} alternating rounds, best of {a.reps} calls per round")
    ratios, tcn_ms, torch_ms = {}, {}, {}
    for r in range(a.rounds):
        ours = tcn_times(a.binary, a.threads, B, T, C, a.reps)
        theirs = torch_times(torch, F, B, T, C, a.reps)
        for name in theirs:
            ratios.setdefault(name, []).append(ours[name] / theirs[name])
            tcn_ms.setdefault(name, []).append(ours[name])
            torch_ms.setdefault(name, []).append(theirs[name])
    print(f"{'op':<12} {'tcn ms':>9} {'torch ms':>9} {'tcn/torch':>10} {'range':>15}")
    for name, rs in ratios.items():
        print(f"{name:<12} {statistics.median(tcn_ms[name]):9.3f} {statistics.median(torch_ms[name]):9.3f} "
              f"{statistics.median(rs):10.2f} {min(rs):7.2f}-{max(rs):<7.2f}")


if __name__ == "__main__":
    main()
