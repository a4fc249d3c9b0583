"""PyTorch reference models mirroring the locuslab TCN char_cnn code.

Canonical parameter names (what golden files and checkpoints use):

TCN (TCNCharLM):
  encoder.weight                       [V, E]   (tied with decoder.weight; stored once)
  tcn.network.{i}.conv1.weight_g       [C_out, 1, 1]
  tcn.network.{i}.conv1.weight_v       [C_out, C_in, k]
  tcn.network.{i}.conv1.bias           [C_out]
  tcn.network.{i}.conv2.weight_g       [C_out, 1, 1]
  tcn.network.{i}.conv2.weight_v       [C_out, C_out, k]
  tcn.network.{i}.conv2.bias           [C_out]
  tcn.network.{i}.downsample.weight    [C_out, C_in, 1]   (only if C_in != C_out)
  tcn.network.{i}.downsample.bias      [C_out]            (only if C_in != C_out)
  decoder.bias                         [V]

LSTM (LSTMCharLM):
  encoder.weight                       [V, E]
  rnn.weight_ih_l{l}                   [4H, E or H]
  rnn.weight_hh_l{l}                   [4H, H]
  rnn.bias_ih_l{l}                     [4H]
  rnn.bias_hh_l{l}                     [4H]
  decoder.weight                       [V, H]
  decoder.bias                         [V]
"""

from collections import OrderedDict

import torch
import torch.nn as nn
from torch_compat import weight_norm  # torch.nn.utils.weight_norm on 1.13 and 2.x alike


class Chomp1d(nn.Module):
    """Drops the last `chomp_size` time steps (turns symmetric padding causal)."""

    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_in, n_out, k, dilation, padding, dropout=0.2):
        super().__init__()
        # Same construction order as locuslab (it determines RNG consumption).
        self.conv1 = weight_norm(nn.Conv1d(n_in, n_out, k, stride=1,
                                           padding=padding, dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)

        self.conv2 = weight_norm(nn.Conv1d(n_out, n_out, k, stride=1,
                                           padding=padding, dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)

        # `net` holds the very same module objects as conv1/conv2 etc.; its
        # state_dict entries (net.0.*, net.4.*) are aliases and never saved.
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_in, n_out, 1) if n_in != n_out else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        # As in locuslab.  For conv1/conv2 this writes into the *derived*
        # `weight` tensor of a weight-normed conv, which the weight_norm
        # pre-forward hook recomputes from weight_g/weight_v before every
        # forward: it has no effect on the model (it only consumes RNG draws).
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, channels, k=2, dropout=0.2):
        super().__init__()
        blocks = []
        for i, c_out in enumerate(channels):
            dilation = 2 ** i
            c_in = num_inputs if i == 0 else channels[i - 1]
            blocks.append(TemporalBlock(c_in, c_out, k, dilation=dilation,
                                        padding=(k - 1) * dilation, dropout=dropout))
        self.network = nn.Sequential(*blocks)

    def forward(self, x):
        return self.network(x)


class TCNCharLM(nn.Module):
    def __init__(self, vocab, emsize, nhid, levels, ksize, dropout=0.1, emb_dropout=0.1):
        super().__init__()
        channels = [nhid] * (levels - 1) + [emsize]
        self.encoder = nn.Embedding(vocab, emsize)
        self.tcn = TemporalConvNet(emsize, channels, ksize, dropout=dropout)
        self.decoder = nn.Linear(emsize, vocab)
        self.decoder.weight = self.encoder.weight  # tied
        self.drop = nn.Dropout(emb_dropout)
        self.init_weights()

    def init_weights(self):
        # Identical to locuslab char_cnn: the tied matrix is drawn twice
        # (encoder, then decoder which is the same tensor); the second draw wins.
        self.encoder.weight.data.uniform_(-0.1, 0.1)
        self.decoder.bias.data.fill_(0)
        self.decoder.weight.data.uniform_(-0.1, 0.1)

    def forward(self, x):
        emb = self.drop(self.encoder(x))            # [B, T, E]
        y = self.tcn(emb.transpose(1, 2))           # [B, E, T]
        return self.decoder(y.transpose(1, 2)).contiguous()  # [B, T, V]


class LSTMCharLM(nn.Module):
    def __init__(self, vocab, emsize, nhid, layers, dropout=0.0, emb_dropout=0.0):
        super().__init__()
        self.layers = layers
        self.encoder = nn.Embedding(vocab, emsize)
        self.drop_emb = nn.Dropout(emb_dropout)
        self.rnn = nn.LSTM(emsize, nhid, layers, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, vocab)

    def forward(self, x):
        return self.forward_with_state(x, None)[0]

    def forward_with_state(self, x, hidden):
        """Logits and the LSTM's (h, c) after the last position, from `hidden` (None: zeros)."""
        emb = self.drop_emb(self.encoder(x))
        out, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(out)), hidden


# --------------------------------------------------------------------------
# Construction from config dicts (keys as in golden/checkpoint metadata).

def build_model(kind, cfg):
    if kind == "tcn":
        return TCNCharLM(cfg["vocab_size"], cfg["emsize"], cfg["nhid"], cfg["levels"],
                         cfg["ksize"], cfg["dropout"], cfg["emb_dropout"])
    if kind == "lstm":
        return LSTMCharLM(cfg["vocab_size"], cfg["emsize"], cfg["nhid"], cfg["layers"],
                          cfg["dropout"], cfg["emb_dropout"])
    raise ValueError("unknown model kind %r" % (kind,))


def model_kind(model):
    if isinstance(model, TCNCharLM):
        return "tcn"
    if isinstance(model, LSTMCharLM):
        return "lstm"
    raise TypeError("unknown model type %s" % type(model).__name__)


# --------------------------------------------------------------------------
# Canonical state dicts.

def canonical_names(model):
    """The canonical parameter names of `model`, in canonical order."""
    kind = model_kind(model)
    names = ["encoder.weight"]
    if kind == "tcn":
        for i, block in enumerate(model.tcn.network):
            p = "tcn.network.%d." % i
            for conv in ("conv1", "conv2"):
                names += [p + conv + ".weight_g", p + conv + ".weight_v", p + conv + ".bias"]
            if block.downsample is not None:
                names += [p + "downsample.weight", p + "downsample.bias"]
        names.append("decoder.bias")
    else:
        for l in range(model.layers):
            names += ["rnn.weight_ih_l%d" % l, "rnn.weight_hh_l%d" % l,
                      "rnn.bias_ih_l%d" % l, "rnn.bias_hh_l%d" % l]
        names += ["decoder.weight", "decoder.bias"]
    return names


def canonical_parameters(model):
    """OrderedDict canonical name -> the live nn.Parameter (each tensor once)."""
    named = model.state_dict(keep_vars=True)
    out = OrderedDict()
    for n in canonical_names(model):
        out[n] = named[n]
    # Every distinct parameter tensor must be covered exactly once.
    ids = [id(p) for p in out.values()]
    assert len(set(ids)) == len(ids), "duplicate tensor among canonical names"
    assert set(ids) == {id(p) for p in model.parameters()}, \
        "canonical names do not cover every parameter"
    return out


def canonical_state_dict(model):
    """OrderedDict canonical name -> detached tensor (shares storage with the model)."""
    sd = model.state_dict()
    out = OrderedDict()
    for n in canonical_names(model):
        out[n] = sd[n]
    if model_kind(model) == "tcn":
        # Sanity: the tied decoder.weight must be the very same storage.
        assert model.decoder.weight is model.encoder.weight
    # Every state_dict entry not saved must be an alias (net.*) or the tie.
    for n in sd:
        if n in out:
            continue
        if model_kind(model) == "tcn" and (n == "decoder.weight" or ".net." in n):
            continue
        raise AssertionError("state_dict entry %s is not canonical" % n)
    return out


def load_canonical(model, tensors):
    """Load a canonical dict into `model` strictly (same names, same shapes)."""
    params = canonical_parameters(model)
    want = set(params)
    have = set(tensors)
    missing = sorted(want - have)
    extra = sorted(have - want)
    if missing or extra:
        raise KeyError("load_canonical: missing %s, unexpected %s" % (missing, extra))
    with torch.no_grad():
        for n, p in params.items():
            t = tensors[n]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError("load_canonical: %s has shape %s, expected %s"
                                 % (n, tuple(t.shape), tuple(p.shape)))
            p.copy_(t.to(p.dtype))
    if model_kind(model) == "tcn":
        model.decoder.weight = model.encoder.weight
    return model


def count_parameters(model, prefix=""):
    return sum(t.numel() for n, t in canonical_state_dict(model).items() if n.startswith(prefix))


def check_parameter_counts():
    """Asserts the full-size parameter counts (vocab 50), tied weight counted once."""
    tcn = TCNCharLM(50, 100, 450, 3, 3, 0.1, 0.1)
    total, in_tcn = count_parameters(tcn), count_parameters(tcn, "tcn.")
    assert total == 2222100, total
    assert in_tcn == 2217050, in_tcn
    assert sum(p.numel() for p in tcn.parameters()) == total
    lstm = LSTMCharLM(50, 100, 700, 1, 0.1, 0.1)
    total_lstm = count_parameters(lstm)
    assert total_lstm == 2285650, total_lstm
    assert sum(p.numel() for p in lstm.parameters()) == total_lstm
    return {"tcn_total": total, "tcn_tcn": in_tcn, "lstm_total": total_lstm}


if __name__ == "__main__":
    print(check_parameter_counts())
