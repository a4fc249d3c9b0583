#!/usr/bin/python3
"""The fastest faithful PyTorch formulation of the reference TCN char-LM.

Same module, same parameters (names, shapes, init) as models.TCNCharLM, the
published locuslab formulation; only the forward pass differs, in ways that
change no number a training step computes:

  * each causal conv pads its input on the left only (F.pad) and convolves
    without padding: exactly the outputs the published conv + Chomp1d keeps,
    without computing `pad` extra outputs and copying the rest (measured
    5-10% faster per conv, forward + backward, than padding and slicing a view);
  * ReLU in place, dropout functional (F.dropout);
  * the weight norm is torch._weight_norm(v, g, 0) per conv per forward, as
    weight_norm's pre-forward hook computes it;
  * the decoder runs on the scored positions only (the last `keep_last`):
    the loss reads nothing else, so the logits it sees are the same;
  * torch.backends.mkldnn on (the default where available).

Run it to check that it matches the published model:
    /usr/bin/python3 tools/reference/models_lean.py
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import TCNCharLM  # noqa: E402


def _block_forward(blk, x, p, training):
    pad = blk.chomp1.chomp_size
    d = blk.conv1.dilation
    w1 = torch._weight_norm(blk.conv1.weight_v, blk.conv1.weight_g, 0)
    w2 = torch._weight_norm(blk.conv2.weight_v, blk.conv2.weight_g, 0)
    h = F.relu(F.conv1d(F.pad(x, (pad, 0)), w1, blk.conv1.bias, dilation=d), inplace=True)
    h = F.dropout(h, p, training)
    h = F.relu(F.conv1d(F.pad(h, (pad, 0)), w2, blk.conv2.bias, dilation=d), inplace=True)
    h = F.dropout(h, p, training)
    res = x if blk.downsample is None else blk.downsample(x)
    return F.relu(h + res)


def lean_forward(model, tokens, keep_last=None):
    """Logits [B, keep_last, V] of a models.TCNCharLM (all positions when keep_last is None)."""
    torch.backends.mkldnn.enabled = True
    emb = F.dropout(model.encoder(tokens), model.drop.p, model.training)  # [B, T, E]
    y = emb.transpose(1, 2)
    for blk in model.tcn.network:
        y = _block_forward(blk, y, blk.dropout1.p, model.training)
    if keep_last is not None:
        y = y[:, :, -keep_last:]
    return model.decoder(y.transpose(1, 2))  # [B, kept, V]


def check_lean_matches_published():
    """Same logits (eval) and same loss and gradients (training, dropout 0) as the published forward."""
    torch.manual_seed(3)
    vocab, T, keep = 11, 50, 30
    ok = True
    for dropout in (0.0, 0.1):
        m = TCNCharLM(vocab, 16, 32, 3, 3, dropout=dropout, emb_dropout=dropout)
        tokens = torch.randint(0, vocab, (2, T))
        targets = torch.randint(0, vocab, (2, keep))
        m.eval()
        with torch.no_grad():
            want = m(tokens)[:, -keep:]
            got = lean_forward(m, tokens, keep)
        err = ((got - want).norm() / want.norm()).item()
        print("eval logits (dropout %.1f): relative error %.2e" % (dropout, err))
        ok = ok and err < 1e-5
    m = TCNCharLM(vocab, 16, 32, 3, 3, dropout=0.0, emb_dropout=0.0)
    m.train()
    losses, grads = [], []
    for fwd in (lambda: m(tokens)[:, -keep:], lambda: lean_forward(m, tokens, keep)):
        m.zero_grad()
        loss = F.cross_entropy(fwd().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
    lerr = abs(losses[0] - losses[1]) / abs(losses[0])
    gerr = max(((grads[1][n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in grads[0].items())
    print("training loss: relative error %.2e; worst parameter gradient: relative error %.2e" % (lerr, gerr))
    ok = ok and lerr < 1e-5 and gerr < 1e-5
    print("PASS" if ok else "FAIL")
    return ok


if __name__ == "__main__":
    sys.exit(0 if check_lean_matches_published() else 1)
