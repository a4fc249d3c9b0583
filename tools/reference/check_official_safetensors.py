"""Our checkpoints in the official safetensors library, and back.

1. `charlm train` writes a TCN and an LSTM checkpoint (a few steps on a small
   synthetic corpus); the official package opens each (safe_open: metadata and
   every tensor; load_file), and PyTorch's reference model (models.py) loads
   the parameters strictly.
2. The files of tests/golden/foreign/ (saved by the official package) load in
   `charlm eval`.

Needs the official package, pinned (see make_foreign.py):

    build/tools-venv/bin/python tools/reference/check_official_safetensors.py --charlm build/charlm
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from models import build_model, load_canonical  # noqa: E402

try:
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError:
    sys.exit("check_official_safetensors.py needs the official safetensors package: see its docstring")


def corpus(folder):
    rng = random.Random(3)
    for split, lines in (("train", 400), ("valid", 60), ("test", 60)):
        with open(os.path.join(folder, "ptb.%s.txt" % split), "w") as f:
            for _ in range(lines):
                f.write(" ".join("".join(rng.choice("abcdefghi") for _ in range(rng.randint(1, 6)))
                                 for _ in range(8)) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--charlm", default="build/charlm")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        corpus(d)
        # The LSTM carries its state across windows of 40 (charlm's --lstm_state carry), the TCN scores 30 of 40.
        for model, size in (("tcn", ["--nhid", "12", "--emsize", "8", "--levels", "2", "--validseqlen", "30"]),
                            ("lstm", ["--nhid", "12", "--emsize", "8", "--layers", "2"])):
            path = os.path.join(d, model + ".safetensors")
            subprocess.run([args.charlm, "train", "--model", model, "--data", d, "--device", "cpu", "--max_steps", "3",
                            "--batch_size", "2", "--seq_len", "40", "--eval_batches", "1",
                            "--save", path, "--metrics", os.path.join(d, model + ".csv"), "--quiet"] + size,
                           check=True)
            last = os.path.join(d, model + ".last.safetensors")
            with safe_open(last, framework="pt") as f:
                meta = f.metadata()
                names = list(f.keys())
                tensors = {k: f.get_tensor(k) for k in names}
            assert meta["format"] == "tcn-checkpoint" and meta["model"] == model, meta
            cfg = json.loads(meta["config"])
            vocab = json.loads(meta["vocab"])
            flat = load_file(last)
            assert sorted(flat) == sorted(names)
            # Besides the parameters: the optimizer's state and, mid-epoch, the LSTM's carried state.
            params = {k: v for k, v in tensors.items() if not k.startswith(("optim.", "carry."))}
            ref = build_model(model, cfg)
            load_canonical(ref, params)  # strict: every parameter, the right shapes
            print("%s: safe_open ok (%d tensors, %d parameters, metadata %s), load_file ok, PyTorch %s loads it "
                  "strictly; vocab %d" % (model, len(names), len(params), sorted(meta), type(ref).__name__,
                                         len(vocab)))
        gold = os.path.join(_HERE, "..", "..", "tests", "golden", "foreign")
        for name in sorted(os.listdir(gold)):
            if name == "expected.safetensors":
                continue
            vocab = os.path.join(d, "vocab.json")
            with open(vocab, "w") as f:
                json.dump(["\n", " "] + list("abcdefghi"), f)
            windows = ["--seq_len", "40"] if name.startswith("lstm") else ["--seq_len", "40", "--validseqlen", "30"]
            r = subprocess.run([args.charlm, "eval", "--checkpoint", os.path.join(gold, name), "--data", d, "--vocab",
                                vocab, "--device", "cpu"] + windows,
                               capture_output=True, text=True)
            if r.returncode != 0:
                ok = False
            print("%s: charlm eval %s" % (name, "ok: " + r.stdout.strip() if r.returncode == 0 else
                                          "FAILED: " + r.stderr.strip()))
    print("check_official_safetensors: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
