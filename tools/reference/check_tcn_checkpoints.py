#!/usr/bin/python3
"""nn::TCN checkpoints and pytorch-tcn's state_dicts, both ways, for every
configuration of make_tcn_golden.py's matrix:

  ours -> pytorch-tcn   tcn_ckpt tcn-init writes a fresh nn::TCN; pytorch-tcn's
                        TCN(**kwargs) loads it with load_state_dict(strict=True)
                        (its streaming buffers *.padder.buffer, which ours does
                        not have, added as the zeros they start as)
  pytorch-tcn -> ours   pytorch-tcn's state_dict (batch norm's running statistics
                        moved away from their init) saved as safetensors;
                        tcn_ckpt tcn-forward loads it strictly

and in both directions the two models' eval-mode outputs on the same input
agree within 1e-5 of their scale (float32 on both sides).

    build/tools-venv/bin/python tools/reference/check_tcn_checkpoints.py --tool build/examples/tcn_ckpt

(pytorch-tcn in the tools venv: see make_tcn_golden.py.)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tcn_golden  # noqa: E402  (the matrix; exits when pytorch-tcn is missing)
import safetensors_io  # noqa: E402
from pytorch_tcn import TCN  # noqa: E402

TOL = 1e-5


def inputs(kwargs, seed):
    g = torch.Generator().manual_seed(seed)
    B, T = 2, 23
    x = torch.randn(B, kwargs["num_inputs"], T, generator=g)
    embs = [torch.randn(B, s[0], T, generator=g) if len(s) == 2 else torch.randn(B, s[0], generator=g)
            for s in kwargs.get("embedding_shapes") or []]
    return x, embs


def ours_layout(t, kwargs):
    return t.transpose(1, 2).contiguous() if kwargs.get("input_shape", "NCL") == "NLC" else t


def torch_forward(model, kwargs, x, embs):
    model.eval()
    with torch.no_grad():
        x_in = x.transpose(1, 2) if kwargs.get("input_shape", "NCL") == "NLC" else x
        return model(x_in, embeddings=embs if embs else None)


def tcn_forward(tool, ckpt, kwargs, x, embs, tmp):
    inp, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    tensors = {"x": ours_layout(x, kwargs)}
    for i, e in enumerate(embs):
        tensors["emb.%d" % i] = ours_layout(e, kwargs) if e.dim() == 3 else e
    safetensors_io.save(inp, tensors)
    subprocess.run([tool, "tcn-forward", ckpt, inp, out], check=True)
    return safetensors_io.load(out)[0]["y"]


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default="build/examples/tcn_ckpt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, (kw, _mode)) in enumerate(make_tcn_golden.MATRIX.items()):
            kwargs = dict(make_tcn_golden.BASE, **kw)
            x, embs = inputs(kwargs, 100 + i)
            # ours -> pytorch-tcn
            ckpt = os.path.join(tmp, "ours.safetensors")
            subprocess.run([args.tool, "tcn-init", json.dumps(kwargs), str(7 + i), ckpt], check=True)
            state, meta = safetensors_io.load(ckpt)
            model = TCN(**kwargs)
            for k, v in model.state_dict().items():
                if k.endswith(".padder.buffer"):
                    state[k] = torch.zeros_like(v)
            model.load_state_dict(state, strict=True)
            e1 = rel(tcn_forward(args.tool, ckpt, kwargs, x, embs, tmp), torch_forward(model, kwargs, x, embs))
            # pytorch-tcn -> ours
            torch.manual_seed(200 + i)
            model = TCN(**kwargs)
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    if k.endswith("running_mean"):
                        v.uniform_(-0.5, 0.5)
                    elif k.endswith("running_var"):
                        v.uniform_(0.5, 1.5)
            theirs = os.path.join(tmp, "theirs.safetensors")
            safetensors_io.save(theirs, {k: v for k, v in model.state_dict().items()
                                         if not k.endswith(".padder.buffer")}, {"kwargs": json.dumps(kwargs)})
            e2 = rel(tcn_forward(args.tool, theirs, kwargs, x, embs, tmp), torch_forward(model, kwargs, x, embs))
            ok = e1 <= TOL and e2 <= TOL
            worst = max(worst, e1, e2)
            print("%-28s ours->pytorch-tcn %.2e  pytorch-tcn->ours %.2e  %s" % (name, e1, e2, "ok" if ok else "FAIL"))
    print("largest relative difference %.2e, tolerance %.0e: %s" % (worst, TOL, "PASS" if worst <= TOL else "FAIL"))
    sys.exit(0 if worst <= TOL else 1)


if __name__ == "__main__":
    main()
