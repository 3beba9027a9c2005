"""A GGUF's 4-bit tensors (Q4_0, Q4_1, Q4_K) as Int4Weight, without a float copy.

Each of these formats is, per group of 32 weights, a 4-bit level times a scale plus an
offset, which is what torch's int4 kernel computes (engine/execution/kernels.py). The layouts are
ggml's (and gguf-py's dequantizers', which the tests compare against):
- Q4_0, 18 bytes per 32 weights: fp16 d, 16 bytes of levels; w = d * (level - 8).
- Q4_1, 20 bytes per 32: fp16 d, fp16 m, 16 bytes of levels; w = d * level + m.
- Q4_K, 144 bytes per 256: fp16 d and dmin, 12 bytes of 6-bit sub-block scales and mins,
  128 bytes of levels; w = d * sc * level - dmin * mn per sub-block of 32.
In a block of 32 (Q4_0, Q4_1) byte j holds weight j in its low nibble and weight j + 16 in
its high one; in each 64 weights of a Q4_K block, byte j holds weights j and j + 32.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.loading.formats.gguf_header import TensorInfo
from engine.execution.kernels import Int4Weight

# ggml type ids (gguf.GGMLQuantizationType): Q4_0, Q4_1, Q4_K
Q4_0, Q4_1, Q4_K = 2, 3, 12
FOUR_BIT = (Q4_0, Q4_1, Q4_K)


def read_int4(path: Path, info: TensorInfo) -> Int4Weight:
    """A 4-bit tensor of the file (ggml_type in FOUR_BIT), its levels and scales as stored."""
    rows = info.shape[0]
    raw = np.fromfile(path, dtype=np.uint8, count=info.nbytes, offset=info.offset).reshape(rows, -1)
    if info.ggml_type == Q4_K:
        return _q4_k(raw, rows)
    blocks = raw.reshape(rows, -1, 18 if info.ggml_type == Q4_0 else 20)
    d = _fp16(blocks[..., 0:2])
    if info.ggml_type == Q4_0:
        zero, qs = torch.zeros_like(d), blocks[..., 2:]
    else:
        zero, qs = _fp16(blocks[..., 2:4]) + 8 * d, blocks[..., 4:]
    return Int4Weight.from_levels(_levels(qs).reshape(rows, -1), d, zero)


def _q4_k(raw: np.ndarray, rows: int) -> Int4Weight:
    blocks = raw.reshape(rows, -1, 144)
    d, dmin = _fp16(blocks[..., 0:2])[..., None], _fp16(blocks[..., 2:4])[..., None]
    s = blocks[..., 4:16].reshape(rows, -1, 3, 4).astype(np.int32)
    low, high, extra = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = np.concatenate([low & 63, (extra & 15) | ((low >> 2) & 48)], axis=-1)
    mn = np.concatenate([high & 63, (extra >> 4) | ((high >> 2) & 48)], axis=-1)
    scale = d * torch.from_numpy(sc).float()
    offset = dmin * torch.from_numpy(mn).float()
    levels = _levels(blocks[..., 16:].reshape(rows, -1, 4, 32))
    return Int4Weight.from_levels(levels.reshape(rows, -1), scale.reshape(rows, -1),
                                  (8 * scale - offset).reshape(rows, -1))


def _fp16(raw: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32))


def _levels(qs: np.ndarray) -> torch.Tensor:
    """Levels in weight order from bytes [..., n] whose low nibbles are the first n weights
    of their group and whose high nibbles the next n."""
    q = torch.from_numpy(np.ascontiguousarray(qs))
    return torch.cat([q & 15, q >> 4], dim=-1)
