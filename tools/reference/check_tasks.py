#!/usr/bin/env python3
"""The synthetic tasks' first training steps, tcn vs PyTorch, from the same weights and data.

Runs our trainer (`adding` or `copymem`) for N steps with --log-interval 1, so its
metrics CSV holds every step's loss, and asks it for its initial weights
(--save_init, PyTorch's parameter names) and for the samples those steps read
(--dump_batches). Then builds the model of locuslab/TCN's reference trainer
(TemporalConvNet + Linear, as TCN/adding_problem/model.py and TCN/copy_memory/model.py),
loads those weights, and trains it on the same batches with the reference's
loop: the mean squared error of the last step's output (adding) or the
cross-entropy over every step (copy memory), the same optimizer
(torch.optim.Adam / RMSprop / SGD with their defaults but lr), the clip when
--clip > 0. Dropout is 0 in both tasks' defaults, so both sides compute the
same function. Compares the losses step by step.

    /usr/bin/python3 tools/reference/check_tasks.py --task adding  --bin build/examples/tasks/adding
    /usr/bin/python3 tools/reference/check_tasks.py --task copymem --bin build/examples/tasks/copymem

Flags after `--` go to the trainer (e.g. `-- --seq_len 600`); the defaults are the
reference's. Prints one line per step and PASS/FAIL (max relative difference <=
--rtol, 1e-4 by default); exit status 0 on PASS.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import safetensors_io  # noqa: E402


class TaskTCN(nn.Module):
    """locuslab's TCN class of both tasks: TemporalConvNet, then a linear layer."""

    def __init__(self, inputs, outputs, nhid, levels, ksize, dropout, last_step_only):
        super().__init__()
        self.tcn = models.TemporalConvNet(inputs, [nhid] * levels, k=ksize, dropout=dropout)
        self.linear = nn.Linear(nhid, outputs)
        self.last_step_only = last_step_only

    def forward(self, x):  # x [N, C, L], channels first as the reference
        y = self.tcn(x)
        if self.last_step_only:  # adding: linear(y1[:, :, -1])
            return self.linear(y[:, :, -1])
        return self.linear(y.transpose(1, 2))  # copy memory: every step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True, choices=["adding", "copymem"])
    ap.add_argument("--bin", help="the trainer (default build/examples/tasks/TASK)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("trainer_flags", nargs="*", help="more flags for the trainer, after --")
    args = ap.parse_args()
    binary = args.bin or os.path.join("build", "examples", "tasks", args.task)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        init_path = os.path.join(tmp, "init.safetensors")
        data_path = os.path.join(tmp, "batches.safetensors")
        metrics = os.path.join(tmp, "metrics.csv")
        cmd = [binary, "--device", "cpu", "--max_steps", str(args.steps), "--log-interval", "1",
               "--metrics", metrics, "--save_init", init_path, "--dump_batches", data_path] + args.trainer_flags
        print("$ " + " ".join(cmd), flush=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        header = [l for l in out.stdout.splitlines() if "parameters" in l]
        print(header[0] if header else out.stdout[-2000:])
        if out.returncode != 0:
            print(out.stdout[-2000:])
            print("FAIL  %s: the trainer exited with %d" % (args.task, out.returncode))
            return 1
        with open(metrics) as f:
            ours = [float(r["loss"]) for r in csv.DictReader(f) if r["event"] == "train"]
        weights, meta = safetensors_io.load(init_path)
        data, dmeta = safetensors_io.load(data_path)

    cfg = json.loads(meta["config"])
    flags = {"optim": cfg["optim"], "lr": cfg["lr"], "clip": cfg["clip"]}  # as the trainer ran
    assert cfg["task"] == args.task, cfg
    assert cfg["dropout"] == 0, "the check needs --dropout 0 (dropout masks differ between the two RNGs)"
    model = TaskTCN(cfg["inputs"], cfg["outputs"], cfg["nhid"], cfg["levels"], cfg["ksize"], cfg["dropout"],
                    last_step_only=args.task == "adding")
    params = dict(model.named_parameters())  # conv1.* before the net.0.* aliases, so canonical names
    missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    if missing or extra:
        print("FAIL  parameter names differ: missing %s, unexpected %s" % (missing, extra))
        return 1
    with torch.no_grad():
        for name, p in params.items():
            assert tuple(weights[name].shape) == tuple(p.shape), (name, weights[name].shape, p.shape)
            p.copy_(weights[name])

    x, y = data["x"], data["y"]
    batch = int(dmeta["batch_size"])
    x = x.transpose(1, 2).contiguous()  # ours are channels-last [N, L, C]; the reference's [N, C, L]
    optim = {"Adam": torch.optim.Adam, "RMSprop": torch.optim.RMSprop, "SGD": torch.optim.SGD}[flags["optim"]]
    opt = optim(model.parameters(), lr=flags["lr"])
    model.train()
    theirs = []
    for i in range(0, x.size(0), batch):
        if len(theirs) == args.steps:
            break
        xb, yb = x[i:i + batch], y[i:i + batch]
        opt.zero_grad()
        out_b = model(xb)
        if args.task == "adding":
            loss = F.mse_loss(out_b, yb)
        else:
            loss = F.cross_entropy(out_b.reshape(-1, cfg["outputs"]), yb.reshape(-1))
        loss.backward()
        if flags["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), flags["clip"])
        opt.step()
        theirs.append(loss.item())

    worst = 0.0
    for step, (a, b) in enumerate(zip(ours, theirs), 1):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        print("step %2d  tcn %.8f  pytorch %.8f  rel %.2e" % (step, a, b, rel))
    ok = len(ours) == len(theirs) == args.steps and worst <= args.rtol and all(map(math.isfinite, ours))
    print("%s  %s: %d training steps (%s lr %g, clip %s), max relative loss difference %.2e (tolerance %.0e)"
          % ("PASS" if ok else "FAIL", args.task, len(ours), flags["optim"], flags["lr"],
             flags["clip"] if flags["clip"] > 0 else "off", worst, args.rtol))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
