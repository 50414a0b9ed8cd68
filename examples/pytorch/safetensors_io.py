"""Reading and writing safetensors files with json + numpy only (Debian's python3-torch 1.13 has no
`safetensors` package). The format: 8-byte little-endian header length, a JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the raw
little-endian tensor bytes.

    from safetensors_io import load_file, save_file, torch_state_dict
    tensors, meta = load_file("ckpt/ckpt-0000000100.safetensors")   # name -> numpy array, metadata
    model.load_state_dict(torch_state_dict(tensors), strict=True)     # drops dptrain's extra keys
    save_file("init.safetensors", model.state_dict())

dptrain checkpoints carry, besides the model's state_dict, SGD's momentum as "optimizer.momentum.<name>"
tensors; load_state_dict(strict=True) would reject those keys, so torch_state_dict() drops every key
starting with "optimizer." or "dptrain.".
"""
import json
import struct

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "F16": np.float16,
          "U8": np.uint8}
NAMES = {np.dtype(v).str: k for k, v in DTYPES.items()}
DPTRAIN_PREFIXES = ("optimizer.", "dptrain.")


def load_file(path):
    """Returns ({name: numpy array}, {metadata}); raises ValueError naming the file when damaged."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: not a safetensors file (too short)" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError("%s: truncated (header of %d bytes)" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
        out[name] = arr.astype(dt.newbyteorder("="))
    return out, meta


def save_file(path, tensors, metadata=None):
    """tensors: name -> torch tensor or numpy array (written in that order)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        a = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
        a = np.array(a, order="C", copy=True)  # not ascontiguousarray: it makes 0-d arrays 1-d
        key = a.dtype.newbyteorder("<").str if a.dtype.byteorder != "|" else a.dtype.str
        dtype = NAMES.get(key) or NAMES.get(a.dtype.str)
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def torch_state_dict(tensors):
    """The model's own keys as torch tensors (dptrain's optimizer./dptrain. keys dropped)."""
    import torch
    return {k: torch.from_numpy(np.array(v)) for k, v in tensors.items() if not k.startswith(DPTRAIN_PREFIXES)}
