#!/usr/bin/python3
"""Turns a PyTorch char-LM saved with torch.save (model.pt) into a safetensors
file that `charlm eval`, `charlm generate` and `charlm train --init` load.

    /usr/bin/python3 tools/convert_pytorch.py model.pt model.safetensors \\
        [--vocab vocab.json | --data data/ptb] [--trust-pickle [--code DIR]]

model.pt may hold a state_dict, or a dict with a "state_dict" or "model" entry
holding one. The tensors are written under the names PyTorch gives them (tcn
reads every naming variant of locuslab's TCN and of nn.LSTM: nn/import.h), in
float32, with the vocabulary in the "vocab" metadata entry when one is given:
--vocab (a JSON list of the tokens in index order) or --data (the characters of
ptb.{train,valid,test}.txt sorted, as locuslab's char_cnn and tcn's trainer
build them). The model's sizes are read from the tensors' shapes when tcn loads
the file.

Trust: a torch.save file is a pickle, and unpickling runs whatever code the
file names. So the file is read with torch.load(..., weights_only=True)
(PyTorch >= 1.13), which builds tensors, dicts, lists, ints and strings and
refuses anything else, without running it (1.13 refuses floats too: a
checkpoint dict holding a float beside its state_dict needs a newer PyTorch
or --trust-pickle). A whole pickled model (torch.save(model), as
locuslab's char_cnn saves it) is such an "anything else": it is refused with an
error naming the class. --trust-pickle unpickles it fully (weights_only=False),
which runs the code the file names with your rights: only for files you trust.
A whole model also needs its classes importable: --code DIR puts the folder
holding them (locuslab's TCN/ and char_cnn/, say) on the import path. tcn itself
never reads pickles.

PyTorch >= 2.6: there weights_only=True is torch.load's default as well, so a
whole-model pickle fails to load there too. Either pass --trust-pickle here (for
a file you trust), or load the model yourself with your own code and re-save
its weights alone: torch.save(model.state_dict(), "model_state.pt").

Refused, with one line on stderr and a non-zero exit, before anything is
written: a missing, empty or unreadable input, a file that is no torch.save file,
one without tensors, an output path in a missing or unwritable directory, and a
--data corpus with a byte outside ASCII (charlm's vocabulary holds one byte per
character, as a JSON string, and JSON cannot hold a lone byte >= 0x80). The
output is written to a temporary file beside it, flushed to disk and renamed
into place, so a failure leaves any earlier file at that path as it was.
"""

import argparse
import inspect
import io
import json
import os
import pickle
import pickletools
import re
import stat
import sys
import tempfile
import zipfile

PROG = "convert_pytorch"
SPLITS = ("train", "valid", "test")


class ConvertError(Exception):
    """A bad input: main() prints it as one line, `convert_pytorch: error: ...`."""


def one_line(text):
    return " ".join(str(text).split())


# --- Output -----------------------------------------------------------------

def check_output(path):
    """The output's folder must exist and take a new file; the output itself be absent or a regular file."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise ConvertError("output %s: directory %s does not exist" % (path, folder))
    if not os.path.isdir(folder):
        raise ConvertError("output %s: %s is not a directory" % (path, folder))
    if os.path.lexists(path):
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ConvertError("output %s is a directory, not a file" % path)
        if not stat.S_ISREG(st.st_mode):
            raise ConvertError("output %s is not a regular file" % path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConvertError("output %s: directory %s is not writable" % (path, folder))
    return folder


class AtomicOutput:
    """A temporary file beside the output, made at once (so an unwritable folder
    is found before any work); commit() syncs it and renames it over the output;
    discard() removes it. The output is never opened for writing."""

    def __init__(self, path):
        self.path = path
        folder = check_output(path)
        try:
            self.fd, self.tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=folder)
        except OSError as e:
            raise ConvertError("output %s: cannot create a file in %s (%s)" % (path, folder, e.strerror or e))
        self.folder = folder
        try:
            if os.path.exists(path):
                mode = stat.S_IMODE(os.stat(path).st_mode)
            else:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(self.fd, mode)
        except OSError:
            pass  # the temporary file's 0600 is a safe fallback

    def commit(self):
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        os.replace(self.tmp, self.path)
        self.tmp = None
        try:  # the rename itself, durable too
            dfd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def discard(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


# --- Input ------------------------------------------------------------------

def check_input(path):
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConvertError("%s: cannot read (%s)" % (path, e.strerror or e))
    if stat.S_ISDIR(st.st_mode):
        raise ConvertError("%s is a directory, not a torch.save file" % path)
    if not stat.S_ISREG(st.st_mode):
        raise ConvertError("%s is not a regular file" % path)
    if st.st_size == 0:
        raise ConvertError("%s is empty (0 bytes), not a torch.save file" % path)
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise ConvertError("%s: cannot read (%s)" % (path, e.strerror or e))


_STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}


def _globals_of(stream):
    """The module.name of every global one pickle names, read with pickletools
    (which parses opcodes and runs nothing). Raises on anything not a pickle."""
    names, recent, memo = [], [], {}
    for op, arg, _ in pickletools.genops(stream):
        name = op.name
        if name == "GLOBAL" or name == "INST":
            names.append(arg.replace(" ", "."))
            recent.append(None)
        elif name == "STACK_GLOBAL":
            a, b = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            names.append("%s.%s" % (a, b) if isinstance(a, str) and isinstance(b, str) else "?")
            recent.append(None)
        elif name in _STRING_OPS:
            recent.append(arg if isinstance(arg, str) else arg.decode("latin-1") if isinstance(arg, bytes) else None)
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = recent[-1] if recent else None
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            recent.append(memo.get(arg))
        elif name not in ("PROTO", "FRAME"):
            recent.append(None)
        del recent[:-2]
    return names


def pickled_globals(path):
    """The globals that the pickle in a torch.save file names, without unpickling
    it. None if the file is neither a torch.save zip archive nor a pickle."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                pkls = [n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
                if not pkls:
                    return None
                return _globals_of(io.BytesIO(z.read(pkls[0])))
        names = []
        with open(path, "rb") as f:  # the legacy format: a few pickles (magic, protocol, info, object), then data
            for i in range(4):
                if i and not f.peek(1)[:1]:
                    break
                names += _globals_of(f)
        return names
    except Exception:  # noqa: BLE001 - whatever fails to parse is no pickle
        return None


def _allowed_globals(torch):
    try:
        from torch import _weights_only_unpickler
        return set(_weights_only_unpickler._get_allowed_globals())
    except Exception:  # noqa: BLE001 - a private API: fall back to the essentials
        return {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter"}


def refused_pickle(torch, path, err):
    """Why weights_only=True refused the file, in one line."""
    names = pickled_globals(path)
    if names is None:
        raise ConvertError("%s is not a torch.save file (neither a zip archive holding data.pkl nor a pickle)" % path)
    allowed = _allowed_globals(torch)
    foreign = []
    for n in names:
        if n not in allowed and not n.startswith("torch.") and n not in foreign:
            foreign.append(n)
    if not foreign:
        foreign = [n for n in names if n not in allowed]
    if foreign:
        more = " (and %d more)" % (len(foreign) - 1) if len(foreign) > 1 else ""
        raise ConvertError("%s is not a plain state_dict: its pickle names %s%s, which a weights-only load refuses "
                           "(a whole pickled model, as torch.save(model) writes, or other Python objects); unpickling "
                           "it runs code the file names: only for a file you trust, pass --trust-pickle (or re-save "
                           "model.state_dict())" % (path, foreign[0], more))
    detail = one_line(str(err).split("WeightsUnpickler error:")[-1])
    op = re.fullmatch(r"Unsupported operand (\d+)", detail)
    if op and 0 <= int(op.group(1)) < 256:
        code = chr(int(op.group(1))).encode("latin-1")
        name = next((o.name for o in pickletools.opcodes if o.code.encode("latin-1") == code), None)
        if name:
            what = " (a float, e.g. a loss or learning rate saved beside the state_dict)" if "FLOAT" in name else ""
            raise ConvertError("%s: the weights-only loader of this PyTorch (%s) cannot read the pickle opcode %s%s; "
                               "load it with a newer PyTorch, or pass --trust-pickle for a file you trust"
                               % (path, torch.__version__, name, what))
    raise ConvertError("%s: a weights-only load failed (%s)" % (path, detail))


def load(torch, path, trust):
    kwargs = {"map_location": "cpu"}
    if "weights_only" not in inspect.signature(torch.load).parameters:
        raise ConvertError("this PyTorch (%s) has no torch.load(weights_only=...): it needs PyTorch >= 1.13"
                           % torch.__version__)
    kwargs["weights_only"] = not trust
    try:
        return torch.load(path, **kwargs)
    except (ImportError, AttributeError) as e:
        if not trust:
            raise ConvertError("%s: cannot load (%s: %s)" % (path, type(e).__name__, one_line(e)))
        raise ConvertError("%s: the pickle names a class that cannot be imported (%s); put the folder holding its "
                           "code on the path with --code DIR" % (path, one_line(e)))
    except pickle.UnpicklingError as e:
        if not trust:
            refused_pickle(torch, path, e)
        raise ConvertError("%s is not a torch.save file (%s)" % (path, one_line(e)))
    except EOFError:
        raise ConvertError("%s: truncated, or not a torch.save file (ends too early)" % path)
    except MemoryError:
        raise ConvertError("%s: out of memory while loading" % path)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, ValueError, ... for corrupt files
        if not trust and pickled_globals(path) is None:
            raise ConvertError("%s is not a torch.save file (neither a zip archive holding data.pkl nor a pickle)"
                               % path)
        raise ConvertError("%s: cannot load (%s: %s)" % (path, type(e).__name__, one_line(e)))


def state_dict_of(torch, obj, path):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and not isinstance(obj[key], torch.Tensor):
                return state_dict_of(torch, obj[key], path)
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        if not obj:
            raise ConvertError("%s holds an empty dict, not a model or a state_dict" % path)
        raise ConvertError("%s holds a dict of %s (keys %s), not a model or a state_dict (name -> tensor)"
                           % (path, ", ".join(sorted({type(v).__name__ for v in obj.values()})),
                              one_line(", ".join(repr(k) for k in list(obj)[:5]))))
    raise ConvertError("%s holds a %s, not a model or a state_dict" % (path, type(obj).__name__))


# --- Vocabulary -------------------------------------------------------------

def file_vocab(path):
    try:
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except OSError as e:
        raise ConvertError("--vocab %s: cannot read (%s)" % (path, e.strerror or e))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError("--vocab %s: not JSON (%s)" % (path, one_line(e)))
    if not (isinstance(vocab, list) and vocab and all(isinstance(v, str) for v in vocab)):
        raise ConvertError("--vocab %s: expected a JSON list of strings (the tokens in index order)" % path)
    return vocab


def data_vocab(folder):
    seen = set()
    for split in SPLITS:
        name = os.path.join(folder, "ptb.%s.txt" % split)
        try:
            with open(name, "rb") as f:
                text = f.read()
        except OSError as e:
            raise ConvertError("--data %s: cannot read %s (%s)" % (folder, name, e.strerror or e))
        if not text:
            raise ConvertError("--data %s: %s is empty" % (folder, name))
        # charlm's vocabulary holds one byte per character, a JSON string each
        # (examples/charlm/data.cpp), and JSON strings are UTF-8: a byte >= 0x80
        # has no single-byte string, so such a corpus cannot be named here.
        if not text.isascii():
            offset = next(i for i, b in enumerate(text) if b >= 0x80)
            b = text[offset]
            raise ConvertError("--data %s: %s has byte 0x%02x at offset %d, outside ASCII: charlm's character "
                               "vocabulary is one ASCII byte per entry, so it cannot be stored (convert without "
                               "--data to leave the vocabulary to charlm's --data)" % (folder, name, b, offset))
        seen.update(text)
    # One byte per token, sorted by byte value, as tcn's trainer (and char_cnn on ASCII text) builds it.
    return [chr(b) for b in sorted(seen)]


# --- Main -------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConvertError(one_line(message))


def parse(argv):
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                epilog="Without --trust-pickle the file is read with torch.load(weights_only=True): tensors and "
                       "plain containers only, and a whole pickled model is refused. PyTorch >= 2.6 loads with "
                       "weights_only=True by default too; for a whole-model pickle there, pass --trust-pickle (for a "
                       "file you trust) or re-save model.state_dict() yourself. See the docstring of "
                       "tools/convert_pytorch.py.")
    ap.add_argument("input",
                    help="a torch.save file: a state_dict, or a dict holding one under 'state_dict' or 'model'")
    ap.add_argument("output", help="the safetensors file to write (atomically: a temporary file, then a rename)")
    ap.add_argument("--trust-pickle", action="store_true",
                    help="unpickle the file fully (torch.load weights_only=False), as a whole pickled model "
                         "(torch.save(model)) needs. Unpickling runs arbitrary code that the file names, with "
                         "your rights: use it only for files you trust")
    ap.add_argument("--code", action="append", default=[], metavar="DIR",
                    help="with --trust-pickle: a folder holding the model's Python classes (repeatable)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--vocab", metavar="FILE", help="a JSON list of the tokens in index order")
    group.add_argument("--data", metavar="DIR",
                       help="a folder with ptb.{train,valid,test}.txt (ASCII): the vocabulary is its characters, "
                            "sorted")
    return ap.parse_args(argv)


def convert(args):
    out = AtomicOutput(args.output)  # the output's folder is checked first, before any loading
    try:
        check_input(args.input)
        if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
            raise ConvertError("output %s is the input file" % args.output)
        vocab = file_vocab(args.vocab) if args.vocab else data_vocab(args.data) if args.data else None
        try:
            import torch
        except ImportError as e:
            raise ConvertError("needs PyTorch (import torch: %s)" % one_line(e))
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
        import safetensors_io
        for d in args.code:
            sys.path.insert(0, os.path.abspath(d))

        state = state_dict_of(torch, load(torch, args.input, args.trust_pickle), args.input)
        tensors = {}
        for name, t in state.items():
            if not isinstance(name, str):
                raise ConvertError("%s: a state_dict key %r is not a string" % (args.input, name))
            if not t.is_floating_point():
                print("%s: skipping %s (%s, not a parameter)" % (PROG, name, t.dtype), file=sys.stderr)
                continue
            try:
                tensors[name] = t.detach().to("cpu", torch.float32).contiguous().clone()
            except Exception as e:  # noqa: BLE001 - sparse, quantized, meta tensors
                raise ConvertError("%s: tensor %s (%s): cannot convert to float32 (%s)"
                                   % (args.input, name, t.dtype, one_line(e)))
        if not tensors:
            raise ConvertError("%s holds no floating-point tensors" % args.input)
        if vocab is not None:
            emb = next((n for n in ("encoder.weight", "decoder.weight") if n in tensors), None)
            if emb and tensors[emb].dim() == 2 and tensors[emb].shape[0] != len(vocab):
                raise ConvertError("the model has %d tokens (%s), but the vocabulary from %s has %d"
                                   % (tensors[emb].shape[0], emb,
                                      "--vocab " + args.vocab if args.vocab else "--data " + args.data, len(vocab)))
        metadata = {"converted_from": os.path.basename(args.input), "converted_by": "tools/convert_pytorch.py"}
        if vocab is not None:
            metadata["vocab"] = json.dumps(vocab)
        try:
            safetensors_io.save(out.tmp, tensors, metadata)
            out.commit()
        except OSError as e:
            raise ConvertError("output %s: write failed (%s)" % (args.output, e.strerror or one_line(e)))
    finally:
        out.discard()
    print("%s: %d tensors -> %s%s" % (PROG, len(tensors), args.output,
                                      ", with a vocabulary" if vocab is not None else
                                      " (no vocabulary: tcn will take the data's)"))


def main(argv=None):
    try:
        convert(parse(argv))
    except ConvertError as e:
        print("%s: error: %s" % (PROG, one_line(e)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("%s: error: interrupted; nothing written" % PROG, file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - still one line, naming what failed
        print("%s: error: unexpected %s: %s" % (PROG, type(e).__name__, one_line(e)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
