"""Read a GGUF file's key/value metadata, never its tensors.

gguf.GGUFReader parses every field into numpy views: 7 s for Qwen2's 152k-token vocabulary on
this machine, 18 s for Command-R's. The tokenizer needs only the key/values, which sit at the start
of the file, so this reads them directly (0.1-0.5 s) and a bad file fails at once.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelLoadError

# GGUF value types (gguf.GGUFValueType): scalar struct formats, and numpy dtypes for arrays.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    def __init__(self, buf: mmap.mmap):
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError("string runs past the end of the file")
        text = self.buf[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.unpack("<I"), self.unpack("<Q")
            if item == _STRING:
                return [self.string() for _ in range(n)]
            if item in _SCALARS:
                dtype = np.dtype(_SCALARS[item])
                out = np.frombuffer(self.buf, dtype, count=n, offset=self.pos).copy()
                self.pos += n * dtype.itemsize
                return out
            return [self.value(item) for _ in range(n)]  # nested arrays: rare, small
        raise ValueError(f"unknown value type {kind}")


def read_metadata(path: Path) -> dict[str, Any]:
    """All key/values of a GGUF file (v2 or v3). Raises ModelLoadError with one line if the file
    is not a valid little-endian GGUF."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != b"GGUF":
                raise ValueError("no GGUF magic number")
            cur = _Cursor(buf)
            cur.pos = 4
            version = cur.unpack("<I")
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} (this reader knows 2 and 3, little-endian)")
            cur.unpack("<Q")  # tensor count: not needed for the tokenizer
            n_kv = cur.unpack("<Q")
            meta = {}
            for _ in range(n_kv):
                key = cur.string()
                meta[key] = cur.value(cur.unpack("<I"))
            return meta
    except (OSError, ValueError, struct.error, MemoryError) as exc:
        raise ModelLoadError(f"{path}: not a valid GGUF file ({exc})") from exc
