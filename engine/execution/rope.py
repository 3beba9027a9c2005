"""Rotary position tables, with the rope scalings of Hugging Face transformers.

Each formula follows transformers' `modeling_rope_utils` step by step in float32, so that the
cos/sin tables, and hence the logits, equal transformers' for the same checkpoint (cos and sin
of each float32 angle are rounded from float64: within an ulp of torch's). numpy, not torch:
the native decoder's path never imports torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SCALINGS = ("linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    kind: str  # one of SCALINGS
    factor: float = 1.0
    original_max_position: int = 0  # the context the model was pretrained on (llama3, yarn)
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    # llama3 from a GGUF: llama.cpp stores the per-frequency divisors as `rope_freqs.weight`.
    freq_divisors: tuple[float, ...] | None = None
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float | None = None  # yarn; None: derived from factor (and mscale)
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn: round the correction range to whole dimensions


_F32 = np.float32


def _power(theta: float, dim: int) -> np.ndarray:
    """theta ** (2i / dim) in float32, the exponent rounded as torch's and the power rounded
    from float64 (numpy's float32 pow differs from torch's in the last bit, and a position's
    angle multiplies that error by the position)."""
    exponent = np.arange(0, dim, 2).astype(_F32) / _F32(dim)
    return (np.float64(theta) ** exponent.astype(np.float64)).astype(_F32)


def _default_inv_freq(dim: int, theta: float) -> np.ndarray:
    return _F32(1.0) / _power(theta, dim)


def _llama3(inv_freq: np.ndarray, s: RopeScaling) -> np.ndarray:
    if s.freq_divisors is not None:
        return inv_freq / np.asarray(s.freq_divisors, dtype=_F32)
    low_wavelen = s.original_max_position / s.low_freq_factor
    high_wavelen = s.original_max_position / s.high_freq_factor
    wavelen = _F32(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / _F32(s.factor), inv_freq)
    smooth = ((_F32(s.original_max_position) / wavelen - _F32(s.low_freq_factor))
              / _F32(s.high_freq_factor - s.low_freq_factor))
    smoothed = (_F32(1) - smooth) * scaled / _F32(s.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(_F32)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(dim: int, theta: float, s: RopeScaling) -> tuple[np.ndarray, float]:
    attention = s.attention_factor
    if attention is None:
        attention = (float(_yarn_mscale(s.factor, s.mscale) / _yarn_mscale(s.factor, s.mscale_all_dim))
                     if s.mscale and s.mscale_all_dim else _yarn_mscale(s.factor))

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(s.original_max_position / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: avoid dividing by zero
    ramp = np.clip((np.arange(dim // 2, dtype=_F32) - _F32(low)) / _F32(high - low), 0, 1)
    pos_freqs = _power(theta, dim)
    extrapolation = _F32(1) / pos_freqs
    interpolation = _F32(1) / (_F32(s.factor) * pos_freqs)
    keep = _F32(1) - ramp  # 1: high frequencies keep their original rotation
    return (interpolation * (_F32(1) - keep) + extrapolation * keep).astype(_F32), attention


def inverse_frequencies(dim: int, theta: float, scaling: RopeScaling | None) -> tuple[np.ndarray, float]:
    """float32 inverse frequencies [dim // 2], and the factor cos and sin are multiplied by."""
    if scaling is None:
        return _default_inv_freq(dim, theta), 1.0
    if scaling.kind == "linear":
        return _default_inv_freq(dim, theta) / scaling.factor, 1.0
    if scaling.kind == "llama3":
        return _llama3(_default_inv_freq(dim, theta), scaling), 1.0
    if scaling.kind == "yarn":
        return _yarn(dim, theta, scaling)
    raise ValueError(f"unknown rope scaling {scaling.kind!r}")


def rope_tables(length: int, dim: int, theta: float,
                scaling: RopeScaling | None = None) -> tuple[np.ndarray, np.ndarray]:
    """float32 cos and sin [length, dim] in Hugging Face's half-split layout."""
    inv_freq, attention = inverse_frequencies(dim, theta, scaling)
    angles = np.arange(length, dtype=_F32)[:, None] * inv_freq.astype(_F32)  # rounded as torch's
    angles = np.concatenate([angles, angles], axis=-1).astype(np.float64)
    return ((np.cos(angles).astype(_F32) * _F32(attention)).astype(_F32),
            (np.sin(angles).astype(_F32) * _F32(attention)).astype(_F32))
