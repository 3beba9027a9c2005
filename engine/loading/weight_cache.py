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

from engine.execution.kernels import QUANTIZED, Int4Weight, Int8Weight, Weight, to_format
from engine.execution.rope import RopeScaling
from engine.loading.user_cache import cache_dir, content_key, write_atomically
from engine.loading.weights import LlamaConfig, LoadedWeights

log = logging.getLogger("draftline")

FORMAT = 2  # bump when the saved layout changes
_LOOKUP = ("embed", "lm_head")  # matrices whose rows are looked up (engine/execution/kernels.to_format)
# How a quantized matrix is saved: one entry per field, named <matrix>.<suffix>.
_FIELDS = {Int8Weight: {"int8": "q", "scale": "scale"},
           Int4Weight: {"int4": "q", "int4scale": "scale", "int4zero": "zero"}}


def convert(weights: LoadedWeights, dtype: torch.dtype, quant: str | None) -> LoadedWeights:
    """Every tensor in its final format, one at a time: matrices in `quant` (int8, int4 or
    None: engine/execution/kernels.to_format), the rest in `dtype`. The source tensors are dropped as
    they are converted."""
    tensors: dict[str, Weight] = {}
    source = weights.tensors
    for name in list(source):
        w = source.pop(name) if isinstance(source, dict) else source[name]
        matrix = isinstance(w, QUANTIZED) or w.dim() == 2
        tensors[name] = (to_format(w, quant, dtype, lookup=name in _LOOKUP) if matrix
                         else w.to(dtype).contiguous())
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
        base, _, suffix = name.rpartition(".")
        for kind, fields in _FIELDS.items():
            if suffix == next(iter(fields)):  # the first field names the matrix's format
                tensors[base] = kind(**{f: flat[f"{base}.{s}"] for s, f in fields.items()})
        if not any(suffix in fields for fields in _FIELDS.values()):
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
        if isinstance(w, QUANTIZED):
            flat.update({f"{name}.{s}": getattr(w, f) for s, f in _FIELDS[type(w)].items()})
        else:
            flat[name] = w
    meta = {"config": json.dumps(dataclasses.asdict(weights.config))}
    try:
        write_atomically(_path(model, dtype), lambda tmp: save_file(flat, str(tmp), metadata=meta))
    except OSError as exc:  # a full or read-only disk costs the next start time, nothing more
        log.warning("could not cache converted weights: %s", exc)
