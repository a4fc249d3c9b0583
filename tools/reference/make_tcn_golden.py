#!/usr/bin/python3
"""Golden files of pytorch-tcn's TCN class for tests/test_tcn.cpp.

pytorch-tcn is pinned at 1.2.3 (it runs on Debian's PyTorch 1.13) and installed
outside the build, in the tools venv, without its dependencies (they would pull
another torch):

    /usr/bin/python3 -m venv --system-site-packages build/tools-venv
    build/tools-venv/bin/pip install --no-deps pytorch-tcn==1.2.3
    build/tools-venv/bin/python tools/reference/make_tcn_golden.py

For each configuration of the matrix below it builds pytorch-tcn's TCN in
float64 from float32 weights, runs one forward and backward of
loss = sum(y * dy), and writes tests/golden/tcn/<name>.safetensors:

    <state_dict name>       the weights and buffers, float32 (batch norm's
                            num_batches_tracked int64), as pytorch-tcn names them,
                            without the streaming buffers (*.padder.buffer)
    golden.x, golden.dy     input and output gradient, float32, in the layout
                            of input_shape
    golden.emb.<i>          conditioning embeddings, float32: [B, E] or
                            time-varying in the layout of input_shape ([B, E, T]
                            for NCL, [B, T, E] for NLC)
    golden.y                the output, float64
    golden.grad.x, golden.grad.emb.<i>, golden.grad.<parameter name>   float64
    golden.after.<buffer>   batch norm's running statistics after the forward
                            (train mode)

__metadata__: "kwargs" (the TCN's keyword arguments as JSON, dropout 0),
"mode" ("train" or "eval"), "pytorch_tcn" and "torch" (versions).

Seeds are fixed and the output is reproducible on the same machine.
"""

import json
import os
import sys
import warnings
from collections import OrderedDict
from importlib.metadata import version

import torch

warnings.filterwarnings("ignore")  # pytorch-tcn warns that torch 1.13's weight_norm is the old one

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402

try:
    from pytorch_tcn import TCN
except ImportError:
    sys.exit("pytorch-tcn is not installed: see this script's docstring for the two commands")

PINNED = "1.2.3"
REPO = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(REPO, "tests", "golden", "tcn")
B, T = 2, 19

BASE = dict(num_inputs=3, num_channels=[5, 5, 4], kernel_size=3, dropout=0.0)

# name -> (keyword arguments over BASE, mode). Every option at least once, and
# the pairs that interact: causal with skip connections, the gate with each
# norm, batch norm in train and eval, embeddings with the gate and a norm.
MATRIX = OrderedDict([
    ("default", ({}, "train")),  # weight_norm, relu, causal, NCL
    ("noncausal_k4_none_tanh", (dict(causal=False, kernel_size=4, use_norm=None, activation="tanh"), "train")),
    ("batch_norm_train", (dict(use_norm="batch_norm"), "train")),
    ("batch_norm_eval", (dict(use_norm="batch_norm"), "eval")),
    ("batch_norm_noncausal_eval", (dict(use_norm="batch_norm", causal=False, activation="elu"), "eval")),
    ("layer_norm_gate", (dict(use_norm="layer_norm", use_gate=True), "train")),
    ("batch_norm_gate_train", (dict(use_norm="batch_norm", use_gate=True), "train")),
    ("weight_norm_gate", (dict(use_gate=True, activation="selu"), "train")),
    ("skip_causal", (dict(use_skip_connections=True), "train")),
    ("skip_noncausal_gelu", (dict(use_skip_connections=True, causal=False, activation="gelu",
                                  use_norm="layer_norm"), "train")),
    ("skip_equal_widths_sigmoid", (dict(num_channels=[4, 4, 4], use_skip_connections=True,
                                        activation="sigmoid", use_norm=None), "train")),
    ("nlc_leaky_relu", (dict(input_shape="NLC", activation="leaky_relu",
                             kernel_initializer="kaiming_uniform"), "train")),
    ("embeddings_add", (dict(embedding_shapes=[[2], [3, T]], embedding_mode="add"), "train")),
    ("embeddings_concat_nlc", (dict(embedding_shapes=[[3, T], [2]], embedding_mode="concat",
                                    input_shape="NLC"), "train")),
    ("embeddings_gate_layer_norm", (dict(embedding_shapes=[[2]], use_gate=True, use_norm="layer_norm"), "train")),
    ("dilations", (dict(dilations=[1, 3, 2], kernel_size=2), "train")),
    ("dilation_reset", (dict(num_channels=[4, 4, 4, 4, 4], dilation_reset=2), "train")),
    ("output_projection", (dict(output_projection=2, output_activation="tanh"), "train")),
    ("kernel_1_elu", (dict(kernel_size=1, activation="elu", use_norm=None), "train")),
])


def layout(t, kwargs):
    """Our layout for a time-varying [B, C, T] tensor: NLC puts time second."""
    return t.transpose(1, 2).contiguous() if kwargs.get("input_shape", "NCL") == "NLC" else t


def build(name, kw, mode, seed):
    kwargs = dict(BASE, **kw)
    torch.manual_seed(seed)
    model = TCN(**kwargs)
    state = OrderedDict((k, v) for k, v in model.state_dict().items() if not k.endswith(".padder.buffer"))
    with torch.no_grad():
        for k, v in state.items():
            # Batch norm's affine parameters and running statistics away from 1 / 0.
            if ".norm" in k and k.endswith((".weight", ".running_var")):
                v.uniform_(0.5, 1.5)
            elif ".norm" in k and k.endswith((".bias", ".running_mean")):
                v.uniform_(-0.5, 0.5)
            elif k.endswith("num_batches_tracked"):
                v.fill_(3)
    state = OrderedDict((k, v.clone()) for k, v in model.state_dict().items() if not k.endswith(".padder.buffer"))
    model = model.double()
    model.train(mode == "train")

    C, L = kwargs["num_inputs"], T
    x = torch.randn(B, C, L)
    embs = []
    for shape in kwargs.get("embedding_shapes") or []:
        embs.append(torch.randn(B, shape[0], L) if len(shape) == 2 else torch.randn(B, shape[0]))
    xd = x.double().requires_grad_()
    ed = [e.double().requires_grad_() for e in embs]
    x_in = xd.transpose(1, 2) if kwargs.get("input_shape", "NCL") == "NLC" else xd
    y = model(x_in, embeddings=ed if ed else None)
    dy = torch.randn(y.shape)
    (y * dy.double()).sum().backward()

    out = OrderedDict(state)
    out["golden.x"] = layout(x, kwargs)
    out["golden.dy"] = dy
    out["golden.y"] = y.detach()
    out["golden.grad.x"] = layout(xd.grad, kwargs)
    for i, (e, g) in enumerate(zip(embs, ed)):
        out["golden.emb.%d" % i] = layout(e, kwargs) if e.dim() == 3 else e
        out["golden.grad.emb.%d" % i] = layout(g.grad, kwargs) if e.dim() == 3 else g.grad
    for k, p in model.named_parameters():
        # add mode leaves embedding_projection_2 unused (pytorch-tcn creates it anyway): gradient 0
        out["golden.grad." + k] = p.grad.detach() if p.grad is not None else torch.zeros_like(p.detach())
    if mode == "train":
        for k, b in model.named_buffers():
            if ".norm" in k:
                out["golden.after." + k] = b.detach()
    meta = {"kwargs": json.dumps(kwargs), "mode": mode, "pytorch_tcn": version("pytorch-tcn"),
            "torch": torch.__version__}
    return out, meta


def main():
    if version("pytorch-tcn") != PINNED:
        sys.exit("pytorch-tcn %s is installed; the golden files are made with %s" % (version("pytorch-tcn"), PINNED))
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for i, (name, (kw, mode)) in enumerate(MATRIX.items()):
        tensors, meta = build(name, kw, mode, 4000 + i)
        path = os.path.join(OUT_DIR, name + ".safetensors")
        safetensors_io.save(path, tensors, meta)
        back, back_meta = safetensors_io.load(path)
        assert back_meta == meta and all(torch.equal(back[k], v) for k, v in tensors.items()), path
        print("%-28s %-5s %2d tensors  y %s" % (name, mode, len(tensors), list(tensors["golden.y"].shape)))


if __name__ == "__main__":
    main()
