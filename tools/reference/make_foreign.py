"""State_dicts as PyTorch users really save them, for tests/test_import.cpp.

Writes tests/golden/foreign/: small char-LMs of the published structures
(models.py: locuslab's TemporalBlock with its `net` aliases, the tied decoder,
weight norm; nn.LSTM), saved by the official `safetensors` package, with none
of tcn's metadata, in every naming variant tcn must read (nn/import.h):

  tcn_save_model.safetensors     safetensors.torch.save_model(model): it keeps one
                                 name of each alias pair, by its own rules
  tcn_all_names.safetensors      save_file of the whole state_dict, every alias
                                 (net.0/net.4, decoder.weight) present, cloned
  tcn_parametrized.safetensors   as PyTorch >= 2.1 names weight norm:
                                 X.parametrizations.weight.original0 / original1
                                 (this PyTorch, 1.13, writes weight_g / weight_v,
                                 so the names are rewritten here, as 2.1 writes them)
  tcn_bare.safetensors           weight norm removed (remove_weight_norm): plain
                                 conv weights, a model of its own
  lstm_save_model.safetensors    the nn.LSTM char-LM, two layers

and expected.safetensors (tcn's own writer format, tools/reference/safetensors_io.py):
the tokens and, per model, PyTorch's logits and mean cross-entropy on them
(eval mode), which tcn must reproduce within 1e-5 relative.

Needs the official package, pinned, outside the build (the framework and its
tests never need it):

    /usr/bin/python3 -m venv --system-site-packages build/tools-venv
    build/tools-venv/bin/pip install safetensors==0.4.5
    build/tools-venv/bin/python tools/reference/make_foreign.py
"""

import os
import sys

import torch
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from models import LSTMCharLM, TCNCharLM  # noqa: E402
import safetensors_io  # noqa: E402

try:
    import safetensors
    from safetensors.torch import load_file, save_file, save_model
except ImportError:
    sys.exit("make_foreign.py needs the official safetensors package: see this file's docstring")

OUT = os.path.join(_HERE, "..", "..", "tests", "golden", "foreign")
VOCAB = 11
TCN_CFG = dict(vocab=VOCAB, emsize=8, nhid=12, levels=3, ksize=3)
LSTM_CFG = dict(vocab=VOCAB, emsize=8, nhid=12, layers=2)


def randomize(model, seed):
    """Every parameter random, weight_g included (PyTorch starts it at |v|, which would hide a g/v mix-up)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight_g"):
                p.copy_(torch.rand(p.shape, generator=g) * 0.8 + 0.4)
            else:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * 0.4)


def loss_and_logits(model, tokens):
    model.eval()
    with torch.no_grad():
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    return logits.contiguous(), loss.reshape(1)


def cloned(state):
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    tokens = torch.randint(0, VOCAB, (2, 31), generator=torch.Generator().manual_seed(5))
    expected = {"tokens": tokens}

    tcn = TCNCharLM(TCN_CFG["vocab"], TCN_CFG["emsize"], TCN_CFG["nhid"], TCN_CFG["levels"], TCN_CFG["ksize"])
    randomize(tcn, 11)
    expected["tcn_logits"], expected["tcn_loss"] = loss_and_logits(tcn, tokens)
    save_model(tcn, os.path.join(OUT, "tcn_save_model.safetensors"))
    full = cloned(tcn.state_dict())
    assert "tcn.network.0.net.0.weight_v" in full and "decoder.weight" in full, sorted(full)
    save_file(full, os.path.join(OUT, "tcn_all_names.safetensors"))
    renamed = {}
    for k, v in full.items():
        if k.endswith(".weight_g"):
            k = k[: -len(".weight_g")] + ".parametrizations.weight.original0"
        elif k.endswith(".weight_v"):
            k = k[: -len(".weight_v")] + ".parametrizations.weight.original1"
        renamed[k] = v
    save_file(renamed, os.path.join(OUT, "tcn_parametrized.safetensors"))

    for block in tcn.tcn.network:
        torch.nn.utils.remove_weight_norm(block.conv1)
        torch.nn.utils.remove_weight_norm(block.conv2)
    expected["tcn_bare_logits"], expected["tcn_bare_loss"] = loss_and_logits(tcn, tokens)
    save_model(tcn, os.path.join(OUT, "tcn_bare.safetensors"))

    lstm = LSTMCharLM(LSTM_CFG["vocab"], LSTM_CFG["emsize"], LSTM_CFG["nhid"], LSTM_CFG["layers"])
    randomize(lstm, 22)
    expected["lstm_logits"], expected["lstm_loss"] = loss_and_logits(lstm, tokens)
    save_model(lstm, os.path.join(OUT, "lstm_save_model.safetensors"))

    safetensors_io.save(os.path.join(OUT, "expected.safetensors"), expected, {
        "made_by": "tools/reference/make_foreign.py",
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
    })
    for name in sorted(os.listdir(OUT)):
        if name != "expected.safetensors":
            print("%-32s %3d tensors: %s" % (name, len(load_file(os.path.join(OUT, name))),
                                            ", ".join(sorted(load_file(os.path.join(OUT, name)))[:4]) + ", ..."))
    print("tcn loss %.6f, tcn_bare loss %.6f, lstm loss %.6f"
          % (expected["tcn_loss"].item(), expected["tcn_bare_loss"].item(), expected["lstm_loss"].item()))


if __name__ == "__main__":
    main()
