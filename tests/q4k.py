"""A plain Q4_K quantizer (gguf-py only dequantizes K-quants) and a GGUF re-writer using it.

The quantizer is row-wise, like every GGUF quantization: quantizing the permuted Q/K rows of a
GGUF file equals permuting the quantized Hugging Face rows, so a test can build its reference
model from the Hugging Face weights without knowing the permutation.
"""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """float rows [n, k] (k a multiple of 256) -> Q4_K blocks, uint8 [n, k // 256 * 144]."""
    n = w.shape[0]
    sub = w.reshape(-1, 8, 32).astype(np.float32)  # super-blocks of 8 sub-blocks of 32
    lo = np.minimum(sub.min(-1), 0)
    step = (sub.max(-1) - lo) / 15
    d = (step.max(-1, keepdims=True) / 63).astype(np.float16)
    dmin = ((-lo).max(-1, keepdims=True) / 63).astype(np.float16)
    sc = np.clip(np.round(step / np.maximum(d.astype(np.float32), 1e-12)), 0, 63).astype(np.uint8)
    m = np.clip(np.round(-lo / np.maximum(dmin.astype(np.float32), 1e-12)), 0, 63).astype(np.uint8)
    scale = d.astype(np.float32) * sc
    offset = dmin.astype(np.float32) * m
    q = np.clip(np.round((sub + offset[..., None]) / np.maximum(scale, 1e-12)[..., None]), 0, 15).astype(np.uint8)
    scales = np.concatenate([sc[:, :4] | ((sc[:, 4:] >> 4) << 6), m[:, :4] | ((m[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 0xF) | ((m[:, 4:] & 0xF) << 4)], axis=-1)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8), dmin.view(np.uint8), scales, qs], axis=-1)
    return blocks.reshape(n, -1)


def requantize_q4_k(src: Path, dst: Path) -> None:
    """Copy a float GGUF, storing every 2-D tensor whose rows allow it as Q4_K."""
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = GGUFValueType(field.types[0])
        sub = GGUFValueType(field.types[-1]) if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        data = np.asarray(t.data, dtype=np.float32)
        if data.ndim == 2 and data.shape[1] % 256 == 0:
            writer.add_tensor(t.name, quantize_q4_k(data), raw_dtype=GGMLQuantizationType.Q4_K)
        else:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
