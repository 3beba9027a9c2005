"""A GGUF file's matrices in their own blocks, where the file is mapped: no conversion, no copy.

The native decoder (engine/execution/native/) multiplies these blocks directly, so a model is ready as
soon as its file is mapped, and its weights take the file's bytes, shared with the page cache.
Rows are only read (dequantized) here for tests; the decoder reads its embedding rows itself.
numpy only: this path never imports torch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# ggml types the native decoder multiplies in place (gguf.GGMLQuantizationType values)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
NATIVE_TYPES = frozenset((F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16))


@dataclass
class BlockMatrix:
    """Rows of ggml blocks of one type: `data` is uint8 [rows, bytes per row], a view of the
    mapped file (or, after `select`, a copy of the chosen rows)."""
    ggml_type: int
    data: np.ndarray
    cols: int
    mapped: bool = True  # False for a copy of chosen rows

    @property
    def shape(self) -> tuple[int, int]:
        return (self.data.shape[0], self.cols)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @classmethod
    def cat(cls, parts: list[BlockMatrix]) -> BlockStack:
        """Stacked by rows, each part in its own type (a Q4_K_M file's Q/K/V may mix Q4_K and Q6_K)."""
        return BlockStack(parts)

    def select(self, rows: Sequence[int] | np.ndarray) -> BlockMatrix:
        """A copy of these rows (a CPU torch tensor of indices is read as an array)."""
        return BlockMatrix(self.ggml_type, np.ascontiguousarray(self.data[np.asarray(rows)]), self.cols, mapped=False)

    def prefix(self, rows: int) -> BlockMatrix:
        return BlockMatrix(self.ggml_type, self.data[:rows], self.cols, self.mapped)  # a view

    def rows(self, ids: Sequence[int] | slice) -> np.ndarray:
        """float32 rows, dequantized by gguf-py (ggml's reference formulas)."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        picked = self.data[ids if isinstance(ids, slice) else np.asarray(ids)]
        values = dequantize(picked, GGMLQuantizationType(self.ggml_type))
        return np.ascontiguousarray(values, dtype=np.float32).reshape(-1, self.cols)


@dataclass
class BlockStack:
    """BlockMatrix parts stacked by rows (fused Q/K/V or gate/up), each kept as it is."""
    parts: list[BlockMatrix]

    @property
    def shape(self) -> tuple[int, int]:
        return (sum(p.shape[0] for p in self.parts), self.parts[0].cols)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)
