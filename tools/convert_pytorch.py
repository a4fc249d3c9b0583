#!/usr/bin/python3
"""Turns a PyTorch char-LM saved with torch.save (model.pt) into a safetensors
file that `charlm eval`, `charlm generate` and `charlm train --init` load.

    /usr/bin/python3 tools/convert_pytorch.py model.pt model.safetensors \\
        [--code DIR] [--vocab vocab.json | --data data/ptb]

model.pt may hold a whole model (torch.save(model, ...), as locuslab's char_cnn
saves it), a state_dict, or a dict with a "state_dict" or "model" entry. The
tensors are written under the names PyTorch gives them (tcn reads every naming
variant of locuslab's TCN and of nn.LSTM: nn/import.h), in float32, with the
vocabulary in the "vocab" metadata entry when one is given: --vocab (a JSON list
of the tokens in index order) or --data (the characters of ptb.{train,valid,
test}.txt sorted, as locuslab's char_cnn and tcn's trainer build them). The
model's sizes are read from the tensors' shapes when tcn loads the file.

Trust: a torch.save file is a pickle, and unpickling runs code the file names.
This script unpickles it with *your* PyTorch, on your machine, because you ask
it to; tcn itself never reads pickles. Convert only files you trust. A whole
pickled model also needs its classes importable: --code DIR puts the folder
holding them (locuslab's TCN/ and char_cnn/, say) on the import path.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import safetensors_io  # noqa: E402


def state_dict_of(obj, path):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and not isinstance(obj[key], torch.Tensor):
                return state_dict_of(obj[key], path)
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
    sys.exit("%s: holds a %s, not a model or a state_dict" % (path, type(obj).__name__))


def data_vocab(folder):
    seen = set()
    for split in ("train", "valid", "test"):
        name = os.path.join(folder, "ptb.%s.txt" % split)
        with open(name, "rb") as f:
            seen.update(f.read())
    # One byte per token, sorted by byte value, as tcn's trainer (and char_cnn on ASCII text) builds it.
    return [bytes([b]).decode("latin-1") for b in sorted(seen)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="a torch.save file (a model, a state_dict, or a dict holding one)")
    ap.add_argument("output", help="the safetensors file to write")
    ap.add_argument("--code", action="append", default=[], help="a folder with the model's Python classes")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--vocab", help="a JSON list of the tokens in index order")
    group.add_argument("--data", help="a folder with ptb.{train,valid,test}.txt: the vocabulary is its characters")
    args = ap.parse_args(argv)
    for d in args.code:
        sys.path.insert(0, os.path.abspath(d))

    kwargs = {"map_location": "cpu"}
    obj = torch.load(args.input, **kwargs)
    state = state_dict_of(obj, args.input)
    tensors = {}
    for name, t in state.items():
        if not t.is_floating_point():
            print("convert_pytorch: skipping %s (%s, not a parameter)" % (name, t.dtype), file=sys.stderr)
            continue
        tensors[name] = t.detach().to(torch.float32).contiguous().clone()
    metadata = {"converted_from": os.path.basename(args.input), "converted_by": "tools/convert_pytorch.py"}
    if args.vocab:
        with open(args.vocab) as f:
            vocab = json.load(f)
        if not (isinstance(vocab, list) and all(isinstance(v, str) for v in vocab)):
            sys.exit("--vocab %s: expected a JSON list of strings" % args.vocab)
        metadata["vocab"] = json.dumps(vocab)
    elif args.data:
        metadata["vocab"] = json.dumps(data_vocab(args.data))
    safetensors_io.save(args.output, tensors, metadata)
    print("convert_pytorch: %d tensors -> %s%s" % (len(tensors), args.output,
                                                   ", with a vocabulary" if "vocab" in metadata else
                                                   " (no vocabulary: tcn will take the data's)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
