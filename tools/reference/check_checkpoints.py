#!/usr/bin/python3
"""Two-way checkpoint interoperability check between PyTorch and the C++ tool.

    /usr/bin/python3 tools/reference/check_checkpoints.py --tool build/examples/tcn_ckpt

For each of the small tcn and lstm configs:
  (a) PyTorch -> tcn: save a PyTorch model as a tcn checkpoint, run
      `TOOL forward CKPT TOKENS OUT` and compare its logits with PyTorch's
      (|a - b| <= atol + rtol * |b| with rtol = 1e-4, atol = 1e-6).
  (b) tcn -> PyTorch: run `TOOL roundtrip CKPT OUT`, load OUT strictly into a
      fresh PyTorch model and require every parameter to be bit-identical and
      the forward logits to be equal.
Prints one PASS/FAIL line per check; exits non-zero if any check fails.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import OrderedDict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import models  # noqa: E402
import safetensors_io  # noqa: E402

RTOL = 1e-4
ATOL = 1e-6

# The small configs of make_golden.py (without batch/sequence fields).  Dropout
# is non-zero on purpose: `TOOL forward` must run in eval mode, so it must not
# change the logits.
CONFIGS = OrderedDict([
    ("tcn", OrderedDict([("vocab_size", 13), ("emsize", 8), ("nhid", 12), ("levels", 3),
                         ("ksize", 3), ("dropout", 0.2), ("emb_dropout", 0.1)])),
    ("lstm", OrderedDict([("vocab_size", 13), ("emsize", 8), ("nhid", 10), ("layers", 2),
                          ("dropout", 0.2), ("emb_dropout", 0.1)])),
])
SEEDS = {"tcn": 31, "lstm": 32}
BATCH, SEQ_LEN = 3, 29


def vocab_chars(n):
    """The first n printable ASCII characters (code points 32, 33, ...)."""
    assert n <= 95
    return [chr(32 + i) for i in range(n)]


def checkpoint_metadata(kind, cfg):
    return OrderedDict([
        ("format", "tcn-checkpoint"),
        ("version", "1"),
        ("model", kind),
        ("config", json.dumps(cfg)),
        ("vocab", json.dumps(vocab_chars(cfg["vocab_size"]))),
    ])


def save_checkpoint(path, model, kind, cfg):
    tensors = OrderedDict((n, t.detach().to(torch.float32).contiguous())
                          for n, t in models.canonical_state_dict(model).items())
    safetensors_io.save(path, tensors, checkpoint_metadata(kind, cfg))


def run_tool(tool, args):
    cmd = [tool] + list(args)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, "could not run %s: %s" % (" ".join(cmd), e)
    if p.returncode != 0:
        msg = "%s exited with %d\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            " ".join(cmd), p.returncode,
            p.stdout.decode(errors="replace")[-4000:], p.stderr.decode(errors="replace")[-4000:])
        return False, msg
    return True, ""


def bits(t):
    """Integer view of a float32 tensor (distinguishes -0.0/0.0 and NaN payloads)."""
    return t.contiguous().view(torch.int32)


class Results:
    def __init__(self):
        self.failures = 0

    def report(self, ok, name, detail):
        print("%s  %-28s %s" % ("PASS" if ok else "FAIL", name, detail))
        sys.stdout.flush()
        if not ok:
            self.failures += 1


def check_forward(tool, tmp, kind, cfg, model, tokens, res):
    """(a) PyTorch -> tcn."""
    name = "%s: pytorch->tcn forward" % kind
    ckpt = os.path.join(tmp, "%s_torch.safetensors" % kind)
    tok_path = os.path.join(tmp, "%s_tokens.safetensors" % kind)
    out_path = os.path.join(tmp, "%s_logits.safetensors" % kind)
    save_checkpoint(ckpt, model, kind, cfg)
    safetensors_io.save(tok_path, OrderedDict([("tokens", tokens)]))
    ok, msg = run_tool(tool, ["forward", ckpt, tok_path, out_path])
    if not ok:
        res.report(False, name, msg)
        return ckpt
    try:
        out, _ = safetensors_io.load(out_path)
    except Exception as e:  # noqa: BLE001
        res.report(False, name, "cannot read %s: %s" % (out_path, e))
        return ckpt
    if "logits" not in out:
        res.report(False, name, "no 'logits' tensor in output (got %s)" % sorted(out))
        return ckpt
    got = out["logits"]
    with torch.no_grad():
        want = model(tokens)
    if got.dtype != torch.float32 or tuple(got.shape) != tuple(want.shape):
        res.report(False, name, "logits dtype/shape %s %s, expected float32 %s"
                   % (got.dtype, tuple(got.shape), tuple(want.shape)))
        return ckpt
    g, w = got.double(), want.double()
    diff = (g - w).abs()
    max_abs = diff.max().item()
    max_rel = (diff / w.abs().clamp_min(ATOL)).max().item()
    worst = (diff / (ATOL + RTOL * w.abs())).max().item()  # <= 1 passes
    finite = bool(torch.isfinite(g).all())
    ok = finite and worst <= 1.0
    res.report(ok, name, "max_abs_err=%.3e max_rel_err=%.3e (rtol=%g atol=%g, worst ratio %.3f)%s"
               % (max_abs, max_rel, RTOL, ATOL, worst, "" if finite else " NON-FINITE"))
    return ckpt


def check_roundtrip(tool, tmp, kind, cfg, model, tokens, ckpt, res):
    """(b) tcn -> PyTorch."""
    name = "%s: tcn->pytorch roundtrip" % kind
    out_path = os.path.join(tmp, "%s_roundtrip.safetensors" % kind)
    ok, msg = run_tool(tool, ["roundtrip", ckpt, out_path])
    if not ok:
        res.report(False, name, msg)
        return
    try:
        tensors, meta = safetensors_io.load(out_path)
    except Exception as e:  # noqa: BLE001
        res.report(False, name, "cannot read %s: %s" % (out_path, e))
        return

    problems = []
    if meta.get("format") != "tcn-checkpoint" or meta.get("version") != "1":
        problems.append("metadata format/version %r/%r" % (meta.get("format"), meta.get("version")))
    if meta.get("model") != kind:
        problems.append("metadata model %r" % meta.get("model"))
    try:
        if json.loads(meta.get("config", "null")) != dict(cfg):
            problems.append("metadata config %s != %s" % (meta.get("config"), json.dumps(cfg)))
        if json.loads(meta.get("vocab", "null")) != vocab_chars(cfg["vocab_size"]):
            problems.append("metadata vocab %s" % meta.get("vocab"))
    except ValueError as e:
        problems.append("metadata JSON: %s" % e)
    for n, t in tensors.items():
        if t.dtype != torch.float32:
            problems.append("%s has dtype %s" % (n, t.dtype))

    # Fresh model with different random weights, then strict load.
    torch.manual_seed(SEEDS[kind] + 1000)
    fresh = models.build_model(kind, cfg)
    fresh.eval()
    try:
        models.load_canonical(fresh, tensors)
    except (KeyError, ValueError) as e:
        problems.append(str(e))
        res.report(False, name, "; ".join(problems))
        return

    orig = models.canonical_state_dict(model)
    new = models.canonical_state_dict(fresh)
    mismatched = [n for n in orig if not torch.equal(bits(orig[n]), bits(new[n]))]
    if mismatched:
        problems.append("parameters not bit-identical: %s" % mismatched)
    if kind == "tcn" and fresh.decoder.weight is not fresh.encoder.weight:
        problems.append("decoder.weight not re-tied")
    with torch.no_grad():
        a = model(tokens)
        b = fresh(tokens)
    if not torch.equal(bits(a), bits(b)):
        problems.append("logits differ (max abs %.3e)" % (a - b).abs().max().item())
    res.report(not problems, name,
               "; ".join(problems) if problems else
               "%d tensors bit-identical, logits equal" % len(orig))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default="build/examples/tcn_ckpt",
                    help="path of the C++ checkpoint tool (default: %(default)s)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory and print its path")
    args = ap.parse_args()

    tool = os.path.abspath(args.tool)
    if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
        print("FAIL  tool not found or not executable: %s" % tool)
        return 2

    res = Results()
    tmp = tempfile.mkdtemp(prefix="tcn_ckpt_check_")
    try:
        for kind, cfg in CONFIGS.items():
            torch.manual_seed(SEEDS[kind])
            model = models.build_model(kind, cfg)
            model.eval()
            tokens = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ_LEN), dtype=torch.int64)
            ckpt = check_forward(tool, tmp, kind, cfg, model, tokens, res)
            check_roundtrip(tool, tmp, kind, cfg, model, tokens, ckpt, res)
    finally:
        if args.keep:
            print("temporary files kept in %s" % tmp)
        else:
            for f in os.listdir(tmp):
                os.remove(os.path.join(tmp, f))
            os.rmdir(tmp)

    if res.failures:
        print("checkpoint interop: %d check(s) FAILED" % res.failures)
        return 1
    print("checkpoint interop: all checks PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
