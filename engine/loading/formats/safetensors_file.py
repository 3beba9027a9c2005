"""A safetensors file read tensor by tensor with plain file reads.

The format is an 8-byte header length, a JSON header (name -> dtype, shape, byte range) and the
data. The safetensors package memory-maps the file, and every page it reads stays resident in
the process; reading each tensor into its own buffer keeps the peak to one tensor.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.errors import ModelLoadError

# safetensors dtype -> (numpy dtype to read the bytes as, torch dtype they are)
_DTYPES = {"F32": (np.float32, torch.float32), "F16": (np.float16, torch.float16),
           "BF16": (np.int16, torch.bfloat16)}


@dataclass(frozen=True)
class Entry:
    path: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute, in the file
    nbytes: int


def read_entries(path: Path) -> dict[str, Entry]:
    """name -> Entry for every tensor in the file, from its header; float tensors only."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        size = path.stat().st_size
    except (OSError, struct.error, ValueError) as exc:
        raise ModelLoadError(f"{path}: corrupt safetensors file ({exc})") from exc
    header.pop("__metadata__", None)
    entries = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ModelLoadError(f"{path}: tensor {name} is {info['dtype']}; only float16, bfloat16 "
                                 "and float32 checkpoints are supported")
        begin, end = info["data_offsets"]
        entry = Entry(path, info["dtype"], tuple(info["shape"]), 8 + length + begin, end - begin)
        if entry.offset + entry.nbytes > size:
            raise ModelLoadError(f"{path}: truncated safetensors file (tensor {name} ends past the end)")
        entries[name] = entry
    return entries


def read_tensor(entry: Entry) -> torch.Tensor:
    np_dtype, torch_dtype = _DTYPES[entry.dtype]
    count = entry.nbytes // np.dtype(np_dtype).itemsize
    raw = np.fromfile(entry.path, dtype=np_dtype, count=count, offset=entry.offset)
    return torch.from_numpy(raw).view(torch_dtype).reshape(entry.shape)
