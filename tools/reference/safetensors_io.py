"""Minimal, dependency-free (torch only) safetensors reader/writer.

File layout:
  * 8 bytes: little-endian uint64 N, the length of the JSON header;
  * N bytes: UTF-8 JSON object.  Each tensor name maps to
    {"dtype": "F32"|"F64"|"I64", "shape": [...], "data_offsets": [begin, end]}
    with offsets relative to the start of the data section.  The optional key
    "__metadata__" maps string -> string.  The header is padded with trailing
    spaces so that 8 + N is a multiple of 8;
  * the data section: raw little-endian tensor bytes, tensors stored
    back-to-back in header order.

Only the dtypes this project uses are supported.  Output is deterministic:
the same tensors and metadata always produce the same bytes.
"""

import json
import struct
import sys

from atomic_write import write_atomic

import torch

_TORCH_TO_ST = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int64: "I64",
}
_ST_TO_TORCH = {v: k for k, v in _TORCH_TO_ST.items()}
_ITEMSIZE = {"F32": 4, "F64": 8, "I64": 8}

if sys.byteorder != "little":  # pragma: no cover - all supported hosts are LE
    raise RuntimeError("safetensors_io assumes a little-endian host")


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    # numpy() shares memory with the CPU tensor; tobytes() emits C order.
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    """Write `tensors` (mapping name -> torch.Tensor) to `path`.

    Tensors are written in the mapping's iteration order.  `metadata` is an
    optional mapping str -> str stored under "__metadata__".
    """
    header = {}
    if metadata:
        meta = {}
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata keys and values must be str: %r=%r" % (k, v))
            meta[k] = v
        header["__metadata__"] = meta

    blobs = []
    offset = 0
    for name, t in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError("invalid tensor name %r" % (name,))
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s is not a torch.Tensor" % name)
        if t.dtype not in _TORCH_TO_ST:
            raise TypeError("%s: unsupported dtype %s" % (name, t.dtype))
        data = _tensor_bytes(t)
        dtype = _TORCH_TO_ST[t.dtype]
        expected = _ITEMSIZE[dtype]
        for d in t.shape:
            expected *= int(d)
        assert len(data) == expected, (name, len(data), expected)
        header[name] = {
            "dtype": dtype,
            "shape": [int(d) for d in t.shape],
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)

    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    pad = (8 - (8 + len(hbytes)) % 8) % 8
    hbytes += b" " * pad
    write_atomic(path, b"".join([struct.pack("<Q", len(hbytes)), hbytes] + blobs))


def load(path):
    """Read a safetensors file.  Returns (dict name -> torch.Tensor, metadata dict).

    Tensors are returned in header order (the JSON object order), as fresh,
    writable, contiguous CPU tensors.  The file is validated strictly:
    offsets must be contiguous, in order, and cover the data section exactly.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: file too short" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d exceeds file size" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    data = raw[8 + n:]

    metadata = header.pop("__metadata__", None) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("%s: __metadata__ must map str -> str" % path)

    tensors = {}
    expect_begin = 0
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in _ST_TO_TORCH:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dtype))
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        if begin != expect_begin or end < begin or end > len(data):
            raise ValueError("%s: tensor %s has bad data_offsets %r" % (path, name, [begin, end]))
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * _ITEMSIZE[dtype]:
            raise ValueError("%s: tensor %s byte size mismatch" % (path, name))
        buf = bytearray(data[begin:end])
        if numel == 0:
            t = torch.empty(shape, dtype=_ST_TO_TORCH[dtype])
        else:
            t = torch.frombuffer(buf, dtype=_ST_TO_TORCH[dtype]).reshape(shape).clone()
        tensors[name] = t
        expect_begin = end
    if expect_begin != len(data):
        raise ValueError("%s: %d trailing bytes after the last tensor" % (path, len(data) - expect_begin))
    return tensors, dict(metadata)
