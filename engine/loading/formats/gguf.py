"""GGUF files (llama.cpp): any tensor type gguf-py can dequantize, K-quants included.

`open_gguf`: tensors read with plain file reads and dequantized (in row chunks, so numpy's
temporaries stay small even for a 150k-row output head), for the torch kernels. Where the
native decoder runs the file, it is mapped instead (engine/loading/formats/gguf_mapped.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.loading.architectures import FAMILIES, GGUF_ARCHITECTURES
from engine.errors import ModelLoadError
from engine.loading.formats.gguf_header import TensorInfo, read_header
from engine.loading.formats.gguf_int4 import FOUR_BIT, read_int4
from engine.loading.formats.gguf_mapped import ROPE_FREQS, header_config
from engine.execution.kernels import QUANTIZED, Int8Weight, Weight
from engine.loading.weights import LazyTensors, LoadedWeights, plan_tensors

_CHUNK_ELEMENTS = 1 << 24  # dequantize this many weights at a time
_PERMUTED = (".wq", ".wk", ".bq", ".bk")
_FLOAT_TYPES = (0, 1, 30)  # ggml F32, F16, BF16


def open_gguf(path: Path, four_bit: bool = False) -> LoadedWeights:
    """The file's tensors, read lazily as float; with `four_bit`, its Q4_0/Q4_1/Q4_K matrices
    as Int4Weight and its other quantized matrices as Int8Weight (more than 4 bits each: int8
    keeps nearly all of them)."""
    header = read_header(path)
    config = header_config(header, path)
    shapes = {name: t.shape for name, t in header.tensors.items()}
    plan = plan_tensors(config, "gguf", shapes, lambda name: name == ROPE_FREQS, path)
    _check_types(path, [header.tensors[name] for name in plan.values()])
    permuted = FAMILIES[config.family].gguf_permuted_qk

    def read(canonical: str) -> Weight:
        info = header.tensors[plan[canonical]]
        if four_bit and info.ggml_type in FOUR_BIT:
            w = read_int4(path, info)
        else:
            w = _read_tensor(path, info)
            if four_bit and len(info.shape) == 2 and info.ggml_type not in _FLOAT_TYPES:
                w = Int8Weight.quantize(w)
        if permuted and canonical.endswith(_PERMUTED):
            heads = config.n_heads if canonical.endswith((".wq", ".bq")) else config.n_kv_heads
            order = _unpermute_rotary(torch.arange(info.shape[0]), heads)
            w = w.select(order) if isinstance(w, QUANTIZED) else w[order]
        return w

    return LoadedWeights(config, LazyTensors(list(plan), read), path)


def stored_in_4_bits(path: Path) -> bool:
    """Whether most of the layers' matrices are 4-bit blocks (a Q4_0, Q4_1 or Q4_K_M file)."""
    matrices = [t for name, t in read_header(path).tensors.items()
                if name.startswith("blk.") and len(t.shape) == 2]
    return sum(t.ggml_type in FOUR_BIT for t in matrices) * 2 > len(matrices)


def _check_types(path: Path, tensors: list[TensorInfo]) -> None:
    """Dequantize one row of each quantization type now, so that a type gguf-py cannot read
    fails before the model is half loaded."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quant_shape_to_byte_shape

    first = {t.ggml_type: t for t in reversed(tensors)}
    for ggml_type, t in first.items():
        qtype = GGMLQuantizationType(ggml_type)
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            continue
        row_bytes = quant_shape_to_byte_shape(t.shape, qtype)[-1]
        try:
            dequantize(np.fromfile(path, dtype=np.uint8, count=row_bytes, offset=t.offset)[None], qtype)
        except (ValueError, NotImplementedError) as exc:
            raise ModelLoadError(f"{path}: tensor type {qtype.name} is not supported ({exc})") from exc


def _read_tensor(path: Path, info: TensorInfo) -> torch.Tensor:
    """One tensor as float32 (float16 stays float16: the backend casts it once)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quant_shape_to_byte_shape

    qtype = GGMLQuantizationType(info.ggml_type)
    plain = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}
    if qtype in plain:
        raw = np.fromfile(path, dtype=plain[qtype], count=int(np.prod(info.shape)), offset=info.offset)
        return torch.from_numpy(raw.reshape(info.shape))
    row_bytes = quant_shape_to_byte_shape(info.shape, qtype)[-1]
    rows = np.fromfile(path, dtype=np.uint8, count=info.nbytes, offset=info.offset).reshape(-1, row_bytes)
    out = torch.empty(info.shape, dtype=torch.float32)
    flat = out.view(rows.shape[0], -1)
    step = max(1, _CHUNK_ELEMENTS // flat.shape[1])
    try:
        for r in range(0, rows.shape[0], step):
            flat[r:r + step] = torch.from_numpy(dequantize(rows[r:r + step], qtype))
    except (ValueError, NotImplementedError) as exc:
        raise ModelLoadError(f"{path}: cannot read tensor {info.name} ({exc})") from exc
    return out


def _unpermute_rotary(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's converter permutes Q/K rows for its pairwise rotary; undo it (HF layout)."""
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)
