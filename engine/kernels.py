"""How the torch backend multiplies by its weight matrices.

Weights are stored in the model's own format: weight-only int8, bf16 or fp32. A pass that
decodes (one token, or a draft to verify) always uses that format, so every such pass rounds
alike and speculative output equals plain decoding. A prefill pass returns no logits; it may
instead compute in fp32 or bf16, by a resident copy of the layers' matrices in that dtype when
the copy fits a memory budget, else by dequantizing each matrix for the pass. Which is fastest
depends on the CPU: without AVX-512-BF16 or AMX a bf16 GEMM is ~5x slower than fp32, with them
~2x faster; and torch's int8 kernel is built for one-token passes. So the engine measures the
candidates at load (engine/calibrate.py) instead of assuming.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Int8Weight:
    """Weight-only int8 with one scale per output row; activations stay bf16.

    A one-token pass is bound by memory bandwidth, so halving the bytes of bf16 weights
    makes it nearly twice as fast on a CPU (multi-token passes gain less)."""
    q: torch.Tensor  # int8 [out, in]
    scale: torch.Tensor  # bf16 [out]

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


Weight = torch.Tensor | Int8Weight

# A prefill kernel: "native" multiplies by the stored weights; "fp32" and "bf16" compute in
# that dtype (a resident copy, or one dequantized for each pass).
PREFILL_KERNELS = ("native", "fp32", "bf16")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def prefill_candidates(native: torch.dtype, int8: bool) -> tuple[str, ...]:
    """The kernels worth timing for a model stored in `native` (int8 when `int8`): never a
    lower precision than the model's own (an fp32 model is the exact mode of the tests)."""
    if int8:
        return PREFILL_KERNELS
    if native == torch.bfloat16:
        return ("native", "fp32")
    return ("native",)


def compute_dtype(kernel: str, native: torch.dtype) -> torch.dtype:
    return native if kernel == "native" else _DTYPES[kernel]


def linear(x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None,
           dequantize: bool = False) -> torch.Tensor:
    """x @ w.T (+ bias), computed in x's dtype. Int8 weights use torch's weight-only int8
    kernel, or with `dequantize` a copy dequantized to x's dtype for this one product."""
    if isinstance(w, Int8Weight):
        if dequantize:  # the per-row scale applies to the output: fewer products than to w
            y = F.linear(x, w.q.to(x.dtype)) * w.scale.to(x.dtype)
            return y if bias is None else y + bias.to(x.dtype)
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), w.q, w.scale)
        y = y.view(*x.shape[:-1], -1)
        return y if bias is None else y + bias
    if w.dtype != x.dtype:
        w = w.to(x.dtype)
        bias = None if bias is None else bias.to(x.dtype)
    return F.linear(x, w, bias)


def as_dtype(w: Weight, dtype: torch.dtype) -> torch.Tensor:
    return w.dequantize(dtype) if isinstance(w, Int8Weight) else w.to(dtype)


def weight_nbytes(w: Weight) -> int:
    return w.nbytes if isinstance(w, Int8Weight) else w.numel() * w.element_size()
