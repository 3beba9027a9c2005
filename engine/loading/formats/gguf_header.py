"""The header of a GGUF file: key/values and tensor descriptions, without touching the data.

gguf-py's GGUFReader builds numpy views for every item of every array: 9 s for a 150k-token
vocabulary here. This reads the same header in a fraction of a second, so that a file we cannot
run is refused at once.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelLoadError

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
# (values per block, bytes per block) of the ggml types people download; any other type's
# size comes from gguf-py (importing it costs 0.15 s of a start)
_BLOCK_SIZES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
                10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # torch order (rows first)
    ggml_type: int  # gguf.GGMLQuantizationType
    offset: int  # absolute, in the file
    nbytes: int


@dataclass(frozen=True)
class Header:
    fields: dict[str, Any]
    tensors: dict[str, TensorInfo]


class _Cursor:
    def __init__(self, buf: mmap.mmap):
        self.buf, self.at = buf, 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        return self.strings(1)[0]

    def strings(self, n: int) -> list[str]:
        """`n` strings in a row (a vocabulary's 150k tokens and merges) in one tight loop: one
        call per string took 0.24-0.4 s for them, this 0.19 s."""
        buf, at, length, out = self.buf, self.at, _U64.unpack_from, [""] * n
        for i in range(n):
            end = at + 8 + length(buf, at)[0]
            out[i] = buf[at + 8:end].decode("utf-8", errors="replace")
            at = end
        if at > len(buf):
            raise struct.error("string past the end of the file")
        self.at = at
        return out

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, n = self.unpack("<I"), self.unpack("<Q")
            if item_type == _STRING:
                return self.strings(n)
            if item_type not in _SCALARS:
                raise struct.error(f"unsupported array item type {item_type}")
            dtype = np.dtype(_SCALARS[item_type])
            items = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.at)
            self.at += n * dtype.itemsize
            return items.tolist()
        if vtype not in _SCALARS:
            raise struct.error(f"unknown value type {vtype}")
        return self.unpack(_SCALARS[vtype])


def read_header(path: Path) -> Header:
    """The file's header; read once per file version (a start asks for it several times: the
    dtype, the tokenizer, the weights)."""
    stat = Path(path).stat()
    return _read_header(Path(path), stat.st_mtime_ns, stat.st_size)


def _block_size(ggml_type: int) -> tuple[int, int] | None:
    if ggml_type in _BLOCK_SIZES:
        return _BLOCK_SIZES[ggml_type]
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    known = ggml_type in GGMLQuantizationType._value2member_map_
    return GGML_QUANT_SIZES.get(GGMLQuantizationType(ggml_type)) if known else None


@lru_cache(maxsize=4)
def _read_header(path: Path, mtime_ns: int, size: int) -> Header:
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != _MAGIC:
                raise ModelLoadError(f"{path}: not a valid GGUF file (no GGUF magic)")
            c = _Cursor(buf)
            c.at = 4
            version = c.unpack("<I")
            if version not in (2, 3):
                raise ModelLoadError(
                    f"{path}: not a valid GGUF file (version {version}; 2 and 3, little-endian, are read)")
            n_tensors, n_fields = c.unpack("<Q"), c.unpack("<Q")
            fields = {}
            for _ in range(n_fields):
                key = c.string()
                fields[key] = c.value(c.unpack("<I"))
            infos = []
            for _ in range(n_tensors):
                name = c.string()
                dims = [c.unpack("<Q") for _ in range(c.unpack("<I"))]
                infos.append((name, dims, c.unpack("<I"), c.unpack("<Q")))
            alignment = int(fields.get("general.alignment", 32))
            data_start = -(-c.at // alignment) * alignment
            size = len(buf)
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise ModelLoadError(f"{path}: not a valid GGUF file (corrupt or truncated header: {exc})") from exc
    tensors = {}
    for name, dims, ggml_type, offset in infos:
        sizes = _block_size(ggml_type)
        if sizes is None:
            raise ModelLoadError(f"{path}: tensor {name} has unknown type {ggml_type}")
        block, type_size = sizes
        nbytes = int(np.prod(dims)) // block * type_size
        info = TensorInfo(name, tuple(reversed(dims)), ggml_type, data_start + offset, nbytes)
        if info.offset + nbytes > size:
            raise ModelLoadError(f"{path}: truncated GGUF file (tensor {name} ends past the end of the file)")
        tensors[name] = info
    return Header(fields, tensors)
