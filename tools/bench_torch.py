#!/usr/bin/python3
"""Times full training steps of the reference PyTorch char-LMs.

Used by `charlm bench` for a side-by-side comparison: it runs this script,
then parses the single JSON line printed on stdout.  Progress goes to stderr.

Run with Debian's python (/usr/bin/python3), which sees the system PyTorch.
`--device cuda` (what `charlm bench --device cuda` passes) runs the steps on the
GPU, synchronising before and after each timed step, with
torch.backends.cudnn.benchmark on (--cudnn_benchmark off to compare without);
--compile runs the model through torch.compile (tools/device_check.sh times it
when it compiles within its step's limit).

--variant published (default) times the models of tools/reference/models.py,
the locuslab formulation; --variant lean times the TCN through
tools/reference/models_lean.py (same parameters and numbers, no chomp copies,
functional dropout, decoder on the scored positions only; its self-check:
/usr/bin/python3 tools/reference/models_lean.py). The LSTM is nn.LSTM either
way (lean = published). --precision bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16), backward outside it, master
weights fp32, as PyTorch recommends.
"""

import argparse
import json
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "reference"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import LSTMCharLM, TCNCharLM  # noqa: E402
from models_lean import lean_forward  # noqa: E402
from torch_compat import tf32_state  # noqa: E402
from atomic_write import check_output_dir, write_atomic  # noqa: E402


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Benchmark training steps of the reference PyTorch char-LMs.")
    ap.add_argument("--model", choices=("tcn", "lstm"), required=True)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--seq_len", type=int, default=400)
    ap.add_argument("--validseqlen", type=int, default=320)
    ap.add_argument("--vocab", type=int, default=50)
    ap.add_argument("--emsize", type=int, default=100)
    ap.add_argument("--nhid", type=int, default=None,
                    help="hidden size (default 450 for tcn, 700 for lstm)")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--ksize", type=int, default=3)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--emb_dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=4.0)
    ap.add_argument("--clip", type=float, default=0.15)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1111)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--variant", choices=("published", "lean"), default="published")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--profile", type=int, default=0,
                    help="after the timed steps, run this many under torch.profiler and print its table "
                         "(to stderr, or to --profile_out); docs/profiling.md compares it with ours")
    ap.add_argument("--profile_out", default=None, help="file for the --profile table")
    ap.add_argument("--cudnn_benchmark", choices=("on", "off"), default="on",
                    help="on CUDA, torch.backends.cudnn.benchmark (on: cuDNN times its algorithms per shape "
                         "and keeps the fastest, as PyTorch users set it for speed)")
    ap.add_argument("--compile", action="store_true",
                    help="run the model through torch.compile (its compilation happens in the warm-up steps)")
    args = ap.parse_args(argv)
    if args.nhid is None:
        args.nhid = 450 if args.model == "tcn" else 700
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if not 0 < args.validseqlen <= args.seq_len:
        ap.error("--validseqlen must be in (0, seq_len]")
    if args.vocab < 1 or args.batch_size < 1:
        ap.error("--vocab and --batch_size must be >= 1")
    if args.profile_out:
        try:
            check_output_dir(args.profile_out, "--profile_out")  # before any step runs
        except ValueError as e:
            ap.error(str(e))
    return args


def build(args):
    if args.model == "tcn":
        return TCNCharLM(args.vocab, args.emsize, args.nhid, args.levels, args.ksize,
                         args.dropout, args.emb_dropout)
    return LSTMCharLM(args.vocab, args.emsize, args.nhid, args.layers,
                      args.dropout, args.emb_dropout)


def profile_steps(args, step, sync, device):
    """torch.profiler over --profile steps: the table its users read, sorted by self time."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync()
    t0 = time.perf_counter()
    with profile(activities=activities, profile_memory=True) as prof:
        for _ in range(args.profile):
            step()
        sync()
    ms = (time.perf_counter() - t0) * 1e3 / args.profile
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=25)
    text = ("torch.profiler, %d step(s) of %s (%s, %s) on %s, %.1f ms per step under the profiler;"
            " times are totals over the steps\n%s\n"
            % (args.profile, args.model, args.variant, args.precision, device, ms, table))
    if args.profile_out:
        write_atomic(args.profile_out, text)
        log("bench_torch: profile table written to %s" % args.profile_out)
    else:
        log(text)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log("bench_torch: --device %s but torch.cuda.is_available() is False" % args.device)
        return 1

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    model = build(args).to(device)
    model.train()
    run_model = torch.compile(model) if args.compile else model
    # model.parameters() yields each tensor once, so the tied TCN
    # encoder/decoder matrix is counted a single time.
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    optimizer = torch.optim.SGD(params, lr=args.lr)

    data = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1),
                         dtype=torch.int64).to(device)
    inp = data[:, :-1].contiguous()
    tgt = data[:, 1:].contiguous()
    eff = args.seq_len - args.validseqlen
    tgt_flat = tgt[:, eff:].reshape(-1)

    lean = args.variant == "lean" and args.model == "tcn"
    if args.precision == "bf16" and device.type != "cpu":
        log("bench_torch: --precision bf16 is the CPU autocast row; use fp32 on %s" % device)
        return 1

    def forward_loss():
        if lean:
            logits = lean_forward(model, inp, args.validseqlen)
        else:
            logits = run_model(inp)[:, eff:]
        return F.cross_entropy(logits.reshape(-1, args.vocab), tgt_flat)

    def step():
        optimizer.zero_grad()
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = forward_loss()
        else:
            loss = forward_loss()
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        optimizer.step()
        return loss.item()

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    log("bench_torch: torch %s, model %s (%s, %s%s), %d params, device %s%s, threads %d, batch %d x seq %d%s"
        % (torch.__version__, args.model, args.variant, args.precision, ", torch.compile" if args.compile else "",
           n_params, device,
           " (%s)" % gpu if gpu else "",
           torch.get_num_threads(), args.batch_size, args.seq_len,
           ", cudnn %s (benchmark %s), tf32 matmul %s / cudnn %s" % ((torch.backends.cudnn.version(),
                                                        torch.backends.cudnn.benchmark) + tf32_state())
           if gpu else ""))

    loss = float("nan")
    for i in range(args.warmup):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        log("  warmup %d/%d: %.1f ms, loss %.4f"
            % (i + 1, args.warmup, (time.perf_counter() - t0) * 1e3, loss))

    times_ms = []
    for i in range(args.steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        times_ms.append(ms)
        log("  step %d/%d: %.1f ms, loss %.4f" % (i + 1, args.steps, ms, loss))

    if args.profile > 0:
        profile_steps(args, step, sync, device)

    result = {
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "model": args.model,
        "variant": args.variant,
        "variant_note": ("" if args.model == "tcn" or args.variant == "published"
                         else "the LSTM is nn.LSTM in both variants"),
        "precision": args.precision,
        "threads": args.threads,
        "device": str(device),
        "gpu": gpu,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "tf32_matmul": tf32_state()[0],
        "tf32_cudnn": tf32_state()[1],
        "cudnn_benchmark": torch.backends.cudnn.benchmark if device.type == "cuda" else None,
        "compile": args.compile,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "ms_per_step_median": round(statistics.median(times_ms), 3),
        "ms_per_step_min": round(min(times_ms), 3),
        "ms_per_step_all": [round(t, 3) for t in times_ms],
        "params": n_params,
        "final_loss": loss,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
