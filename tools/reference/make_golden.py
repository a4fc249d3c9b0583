#!/usr/bin/python3
"""Writes the PyTorch golden files compared against by the C++ test-suite.

    /usr/bin/python3 tools/reference/make_golden.py

produces tests/golden/tcn_small.safetensors and tests/golden/lstm_small.safetensors
(see tools/reference/README.md for the key list).  The output is bit-for-bit
reproducible on the same machine / torch build.
"""

import json
import os
import sys
from collections import OrderedDict

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import models  # noqa: E402
import safetensors_io  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(REPO, "tests", "golden")

STEPS = 5
CLIP = 0.15

TCN_CONFIG = OrderedDict([
    ("vocab_size", 13), ("emsize", 8), ("nhid", 12), ("levels", 3), ("ksize", 3),
    ("dropout", 0.0), ("emb_dropout", 0.0),
    ("batch_size", 2), ("seq_len", 24), ("validseqlen", 16),
])
LSTM_CONFIG = OrderedDict([
    ("vocab_size", 13), ("emsize", 8), ("nhid", 10), ("layers", 2),
    ("dropout", 0.0), ("emb_dropout", 0.0),
    ("batch_size", 2), ("seq_len", 24), ("validseqlen", 16),
])
SEEDS = {"tcn": 1111, "lstm": 2222}

# name -> (constructor, kwargs); all other arguments are PyTorch defaults.
OPTIMIZERS = OrderedDict([
    ("sgd", (torch.optim.SGD, {"lr": 4.0})),
    ("sgdm", (torch.optim.SGD, {"lr": 0.5, "momentum": 0.9, "weight_decay": 1e-4})),
    ("adam", (torch.optim.Adam, {"lr": 0.01})),
])


def lm_loss(logits, targets, seq_len, validseqlen):
    """Mean cross-entropy over the last `validseqlen` positions only."""
    v = logits.size(-1)
    start = seq_len - validseqlen
    return F.cross_entropy(logits[:, start:].reshape(-1, v),
                           targets[:, start:].reshape(-1))


def fresh_model(kind, cfg, seed, init):
    torch.manual_seed(seed)
    m = models.build_model(kind, cfg)
    models.load_canonical(m, init)
    m.eval()  # dropout is 0 anyway; eval makes it explicit
    return m


def generate(kind, cfg):
    seed = SEEDS[kind]
    B, T, VL = cfg["batch_size"], cfg["seq_len"], cfg["validseqlen"]
    V = cfg["vocab_size"]

    torch.manual_seed(seed)
    model = models.build_model(kind, cfg)
    model.eval()
    seq = torch.randint(0, V, (B, T + 1), dtype=torch.int64)
    tokens = seq[:, :-1].contiguous()
    targets = seq[:, 1:].contiguous()

    init = OrderedDict((n, t.detach().clone())
                       for n, t in models.canonical_state_dict(model).items())

    out = OrderedDict()
    out["tokens"] = tokens
    out["targets"] = targets
    for n, t in init.items():
        out["param." + n] = t

    # Initial forward / backward.
    logits = model(tokens)
    loss = lm_loss(logits, targets, T, VL)
    loss.backward()
    out["logits"] = logits.detach().clone()
    out["loss"] = loss.detach().clone().reshape([])
    for n, p in models.canonical_parameters(model).items():
        assert p.grad is not None, n
        out["grad." + n] = p.grad.detach().clone()

    # Training runs, each from the same initial weights.
    for oname, (ctor, kwargs) in OPTIMIZERS.items():
        m = fresh_model(kind, cfg, seed, init)
        params = list(models.canonical_parameters(m).values())
        opt = ctor(params, **kwargs)
        losses, norms = [], []
        for _ in range(STEPS):
            opt.zero_grad()
            lg = m(tokens)
            l = lm_loss(lg, targets, T, VL)
            l.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
            opt.step()
            losses.append(float(l.item()))
            norms.append(float(norm.item()))
        out[oname + ".losses"] = torch.tensor(losses, dtype=torch.float32)
        out[oname + ".grad_norms"] = torch.tensor(norms, dtype=torch.float32)
        for n, t in models.canonical_state_dict(m).items():
            out[oname + ".final." + n] = t.detach().clone()

    for n, t in out.items():
        assert t.dtype in (torch.float32, torch.int64), (n, t.dtype)
        assert torch.isfinite(t.double()).all(), n

    opt_meta = OrderedDict()
    for oname, (ctor, kwargs) in OPTIMIZERS.items():
        opt_meta[oname] = OrderedDict([("type", ctor.__name__)] + list(kwargs.items()))
    meta = OrderedDict([
        ("format", "tcn-golden"),
        ("version", "1"),
        ("model", kind),
        ("config", json.dumps(cfg)),
        ("torch_version", torch.__version__),
        ("generated_by", "tools/reference/make_golden.py"),
        ("training", json.dumps(OrderedDict([("steps", STEPS), ("clip", CLIP),
                                             ("optimizers", opt_meta)]))),
    ])
    return out, meta


def main():
    # Single-threaded so reductions (and therefore the bytes) are reproducible.
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for kind, cfg in (("tcn", TCN_CONFIG), ("lstm", LSTM_CONFIG)):
        tensors, meta = generate(kind, cfg)
        path = os.path.join(OUT_DIR, "%s_small.safetensors" % kind)
        safetensors_io.save(path, tensors, meta)
        # Read back and verify.
        back, back_meta = safetensors_io.load(path)
        assert list(back) == list(tensors) and back_meta == dict(meta)
        for n in tensors:
            assert back[n].dtype == tensors[n].dtype and torch.equal(back[n], tensors[n]), n
        print("wrote %s (%d tensors, %d bytes) loss=%.6f sgd.losses=%s"
              % (os.path.relpath(path, REPO), len(tensors), os.path.getsize(path),
                 tensors["loss"].item(),
                 ["%.4f" % x for x in tensors["sgd.losses"].tolist()]))
    counts = models.check_parameter_counts()
    print("parameter counts OK:", counts)


if __name__ == "__main__":
    main()
