"""How the torch backend multiplies by its weight matrices, where the native decoder
(engine/execution/native/, C) does not run the model: on CPUs without AVX2, without a C compiler, or for
families it does not compute. Int4/int8 models elsewhere only keep their weights here.

Weights are stored in the model's own format: weight-only int8 or int4 (a GGUF's 4-bit blocks
as they are), bf16 or fp32. A one-token decoding pass uses that format: it is bound by the
bytes it reads. Wider passes are bound by arithmetic, where torch's int8 and int4 kernels
cost ~3x more at 13 tokens than at one; a prefill pass (no logits) may instead compute in fp32
or bf16, through a resident copy of the matrices in that dtype when it fits a memory budget
(else dequantizing each matrix per pass). Which is fastest depends on the CPU: without
AVX-512-BF16 or AMX a bf16 GEMM is ~5x slower than fp32, with them ~2x faster. So the engine
measures the candidates at load (engine/execution/calibrate.py) instead of assuming. Each
kernel computes every row of a pass on its own, so passes of any width round alike in one
kernel; a pass in another kernel rounds differently, so every pass with logits runs one
(engine/execution/plan.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.execution.plan import STORED
from engine.loading.formats.gguf_blocks import BlockMatrix, BlockStack


@dataclass
class Int8Weight:
    """Weight-only int8 with one scale per output row; activations stay bf16.

    A one-token pass is bound by memory bandwidth, so halving the bytes of bf16 weights
    makes it nearly twice as fast on a CPU (multi-token passes gain less)."""
    q: torch.Tensor  # int8 [out, in]
    scale: torch.Tensor  # bf16 [out]
    format: ClassVar[str] = "int8"  # what the native decoder reads it as (engine/execution/native/)

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int8Weight:
        w = w.float()
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scale.to(torch.bfloat16))

    @classmethod
    def cat(cls, parts: list[Int8Weight]) -> Int8Weight:
        """Stack row blocks (per-row scales make this the same as quantizing the whole)."""
        return cls(torch.cat([p.q for p in parts]), torch.cat([p.scale for p in parts]))

    def select(self, rows: torch.Tensor) -> Int8Weight:
        return Int8Weight(self.q[rows].contiguous(), self.scale[rows].contiguous())

    def prefix(self, rows: int) -> Int8Weight:
        return Int8Weight(self.q[:rows], self.scale[:rows])  # views, not copies

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.q[ids].to(torch.bfloat16) * self.scale[ids, None]

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        return self.q.to(dtype) * self.scale.to(dtype)[:, None]

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    @property
    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * 2


GROUP = 32  # weights per int4 scale/zero pair (llama.cpp's Q4_0/Q4_1 blocks, Q4_K's sub-blocks)


@dataclass
class Int4Weight:
    """Weight-only 4-bit with a scale and zero per group of 32 along each row:
    w = (level - 8) * scale + zero, as torch's int4 kernel computes it. That form holds
    llama.cpp's Q4_0 (zero 0), Q4_1 (zero = min + 8 scale) and Q4_K (per-sub-block) blocks,
    so a GGUF's 4-bit tensors are computed with the file's own levels. Scales and zeros are
    bf16, the only dtype torch's CPU kernel vectorizes (fp32 ran 15x slower): the file's fp16
    scales lose their last 3 bits, a relative change under 0.4%.

    `q` keeps the levels in a plain layout (two per byte, even column in the low nibble), for
    the weight cache, embedding lookups and dequantization; torch's own packing, which may
    differ by CPU, is made once, at first use. Once nothing needs the plain layout any more
    (`release_plain`), only the packed one stays: half the memory."""
    q: torch.Tensor | None  # uint8 [out, in / 2]; None once released
    format: ClassVar[str] = "int4"
    scale: torch.Tensor  # bf16 [out, in / GROUP]
    zero: torch.Tensor  # bf16 [out, in / GROUP]
    _packed: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)
    shape: torch.Size = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shape = torch.Size((self.scale.shape[0], self.scale.shape[1] * GROUP))

    @classmethod
    def from_levels(cls, levels: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> Int4Weight:
        """levels: integers 0..15 [out, in]."""
        levels = levels.to(torch.uint8)
        return cls((levels[:, 0::2] | (levels[:, 1::2] << 4)).contiguous(),
                   scale.to(torch.bfloat16).contiguous(), zero.to(torch.bfloat16).contiguous())

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int4Weight:
        """Round a float matrix to 4 bits per weight, min to max in each group (as Q4_1)."""
        groups = w.float().reshape(w.shape[0], -1, GROUP)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=1e-8)
        levels = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15)
        return cls.from_levels(levels.reshape(w.shape), scale, low + 8 * scale)

    def levels(self, rows: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        if self.q is None:
            raise ValueError("this int4 matrix keeps only torch's packed layout (released)")
        q = self.q[rows]
        return torch.stack([q & 15, q >> 4], dim=-1).reshape(q.shape[0], -1)

    @classmethod
    def cat(cls, parts: list[Int4Weight]) -> Int4Weight:
        return cls(*(torch.cat([getattr(p, f) for p in parts]) for f in ("q", "scale", "zero")))

    def select(self, rows: torch.Tensor) -> Int4Weight:
        return Int4Weight(self.q[rows].contiguous(), self.scale[rows].contiguous(), self.zero[rows].contiguous())

    def prefix(self, rows: int) -> Int4Weight:
        return Int4Weight(self.q[:rows], self.scale[:rows], self.zero[:rows])  # views, not copies

    def _rows(self, rows: torch.Tensor | slice, dtype: torch.dtype) -> torch.Tensor:
        level = self.levels(rows).float().view(-1, self.scale.shape[1], GROUP) - 8
        w = level * self.scale[rows, :, None].float() + self.zero[rows, :, None].float()
        return w.view(level.shape[0], -1).to(dtype)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self._rows(ids, torch.bfloat16)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        return self._rows(slice(None), dtype)

    def packed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """torch's packed levels and [in / GROUP, out, 2] scales and zeros, made once."""
        if self._packed is None:  # the kernel takes rows in multiples of 16: pad with zeros
            pad = -self.shape[0] % 16
            levels = F.pad(self.levels().int(), (0, 0, 0, pad))
            scales_zeros = torch.stack([self.scale.t(), self.zero.t()], dim=-1)
            self._packed = (torch._convert_weight_to_int4pack_for_cpu(levels, 1),
                            F.pad(scales_zeros, (0, 0, 0, pad)).contiguous())
        return self._packed

    def release_plain(self) -> None:
        """Keep only torch's packed layout (made now if needed)."""
        self.packed()
        self.q = None

    @property
    def nbytes(self) -> int:
        return self.shape.numel() // 2 + (self.scale.numel() + self.zero.numel()) * 2


Weight = torch.Tensor | Int8Weight | Int4Weight | BlockMatrix | BlockStack
QUANTIZED = (Int8Weight, Int4Weight, BlockMatrix, BlockStack)

# The quantized formats: weight-only int8 and int4 (activations bf16), and a GGUF's own blocks
# where the file is mapped (engine/loading/formats/gguf_blocks.py; the native decoder computes them).
QUANT = ("int8", "int4", "gguf")


def to_format(w: Weight, quant: str | None, dtype: torch.dtype, lookup: bool = False) -> Weight:
    """A matrix in the model's format. A quantized one stays as the file holds it. A float
    one becomes int8, or 4-bit groups for int4 except where rows are looked up (`lookup`:
    the embedding and an untied head, kept int8 for the logits' precision, as llama.cpp's
    Q4_K_M keeps its head in 6 bits), else `dtype`."""
    if isinstance(w, QUANTIZED):
        return w
    if quant == "int8" or (quant == "int4" and lookup):
        return Int8Weight.quantize(w)
    if quant == "int4":
        return Int4Weight.quantize(w)
    return w.to(dtype).contiguous()


def fuse(parts: list[Weight]) -> Weight:
    """Matrices stacked by rows (Q/K/V, gate/up). A mapped GGUF's parts stay as they are, each in
    its own type (BlockStack; the native decoder reads them so); for torch's kernels, parts of
    mixed formats (a Q4_K_M file keeps some V and down matrices in 6 bits) all become int8."""
    kinds = {type(p) for p in parts}
    if len(kinds) > 1:
        parts = [p if isinstance(p, Int8Weight) else Int8Weight.quantize(as_dtype(p, torch.float32))
                 for p in parts]
    kind = type(parts[0])
    return kind.cat(parts) if kind in QUANTIZED else torch.cat(parts)


# A prefill kernel (engine/execution/plan.py): STORED multiplies by the stored weights; "fp32"
# and "bf16" compute in that dtype (a resident copy, or one dequantized for each pass).
PREFILL_KERNELS = (STORED, "fp32", "bf16")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def prefill_candidates(native: torch.dtype, quantized: bool) -> tuple[str, ...]:
    """The kernels worth timing for a model stored in `native` (int8 or int4 matrices when
    `quantized`): never a lower precision than the model's own (an fp32 model is the exact
    mode of the tests)."""
    if quantized:
        return PREFILL_KERNELS
    if native == torch.bfloat16:
        return (STORED, "fp32")
    return (STORED,)


def compute_dtype(kernel: str, native: torch.dtype) -> torch.dtype:
    return native if kernel == STORED else _DTYPES[kernel]


def linear(x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None,
           dequantize: bool = False) -> torch.Tensor:
    """x @ w.T (+ bias), computed in x's dtype. Int8 weights use torch's weight-only int8
    kernel, or with `dequantize` a copy dequantized to x's dtype for this one product."""
    if isinstance(w, Int4Weight):
        if dequantize:
            return F.linear(x, w.dequantize(x.dtype), None if bias is None else bias.to(x.dtype))
        packed, scales_zeros = w.packed()
        y = torch._weight_int4pack_mm_for_cpu(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), packed,
                                              GROUP, scales_zeros)
        y = y[:, :w.shape[0]].to(x.dtype).view(*x.shape[:-1], -1)
        return y if bias is None else y + bias
    if isinstance(w, Int8Weight):
        if dequantize:  # the per-row scale applies to the output: fewer products than to w
            y = F.linear(x, w.q.to(x.dtype)) * w.scale.to(x.dtype)
            return y if bias is None else y + bias.to(x.dtype)
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), w.q, w.scale)
        y = y.view(*x.shape[:-1], -1)
        return y if bias is None else y + bias
    # in x's dtype (`to` is free where it already is); biases are kept in float32, bf16 models too
    return F.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))


def int8_product(x: torch.Tensor, w: Int8Weight) -> torch.Tensor:
    """float32 x @ w.T in integer arithmetic, for the output head: x [n, in] is split into two
    int8 parts with a scale per row (the second holds the first's rounding error, so together
    they keep about 14 bits, more than bf16's 8) and multiplied in one torch._int_mm (VNNI;
    2.5-4x faster than _weight_int8pack_mm on a 49k-row head, at any width). Integer sums are
    exact and each row is scaled on its own, so a row's result never depends on the others."""
    x = x.float()
    parts, scales = [], []
    for _ in range(2):
        scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-30) / 127
        part = (x / scale).round()
        parts.append(part)
        scales.append(scale)
        x = x - part * scale
    y = torch._int_mm(torch.cat(parts).to(torch.int8), w.q.t()).float()
    n = len(parts[0])
    return (y[:n] * scales[0] + y[n:] * scales[1]) * w.scale.float()


def as_dtype(w: Weight, dtype: torch.dtype) -> torch.Tensor:
    return w.dequantize(dtype) if isinstance(w, QUANTIZED) else w.to(dtype)


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), else all of it."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def weight_nbytes(w: Weight) -> int:
    return w.nbytes if isinstance(w, QUANTIZED) else w.numel() * w.element_size()
