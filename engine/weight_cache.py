"""Converted weights kept between runs, so a second start reads them instead of converting.

Reading a GGUF means dequantizing every block in numpy and, for int8, quantizing again: seconds
for the embedded model, minutes for a 7B one. The result (matrices in their final format,
vectors in the model's dtype) is saved as safetensors in the user's cache directory, keyed by
the model file's content and the dtype; a later start maps it back in a fraction of a second.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from engine.kernels import Int8Weight, Weight
from engine.rope import RopeScaling
from engine.user_cache import cache_dir, content_key, write_atomically
from engine.weights import LlamaConfig, LoadedWeights

log = logging.getLogger("draftline")

FORMAT = 1  # bump when the saved layout changes


def convert(weights: LoadedWeights, dtype: torch.dtype, int8: bool) -> LoadedWeights:
    """Every tensor in its final format, one at a time: matrices int8 (when `int8`), the
    rest in `dtype`. The source tensors are dropped as they are converted."""
    tensors: dict[str, Weight] = {}
    source = weights.tensors
    for name in list(source):
        w = source.pop(name) if isinstance(source, dict) else source[name]
        tensors[name] = Int8Weight.quantize(w) if int8 and w.dim() == 2 else w.to(dtype).contiguous()
    return dataclasses.replace(weights, tensors=tensors)


def _path(model: Path, dtype: str) -> Path:
    return cache_dir("weights") / f"{content_key(model)}-{dtype}-v{FORMAT}.safetensors"


def load(model: Path, dtype: str) -> LoadedWeights | None:
    """The converted weights of `model` from the cache, or None (absent or unreadable)."""
    try:
        path = _path(model, dtype)
        if not path.exists():
            return None
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            # Copies: torch's int8 kernel crashes on the file's (unaligned) memory.
            flat = {name: f.get_tensor(name).clone() for name in f.keys()}
        config = _config(json.loads(meta["config"]))
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring the weight cache for %s (%s)", model.name, exc)
        return None
    tensors: dict[str, Weight] = {}
    for name, tensor in flat.items():
        if name.endswith(".int8"):
            base = name.removesuffix(".int8")
            tensors[base] = Int8Weight(tensor, flat[base + ".scale"])
        elif not name.endswith(".scale"):
            tensors[name] = tensor
    return LoadedWeights(config, tensors, model)


def _config(raw: dict) -> LlamaConfig:
    if raw.get("rope_scaling"):
        scaling = raw["rope_scaling"]
        if scaling.get("freq_divisors") is not None:
            scaling["freq_divisors"] = tuple(scaling["freq_divisors"])
        raw["rope_scaling"] = RopeScaling(**scaling)
    return LlamaConfig(**raw)


def save(weights: LoadedWeights, model: Path, dtype: str) -> None:
    flat = {}
    for name, w in weights.tensors.items():
        if isinstance(w, Int8Weight):
            flat[name + ".int8"], flat[name + ".scale"] = w.q, w.scale
        else:
            flat[name] = w
    meta = {"config": json.dumps(dataclasses.asdict(weights.config))}
    try:
        write_atomically(_path(model, dtype), lambda tmp: save_file(flat, str(tmp), metadata=meta))
    except OSError as exc:  # a full or read-only disk costs the next start time, nothing more
        log.warning("could not cache converted weights: %s", exc)
