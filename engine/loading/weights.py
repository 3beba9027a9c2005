"""Decoder weights as every format's reader returns them (engine/loading/formats/): the model's
hyper-parameters, its tensors under one canonical naming scheme (engine/loading/architectures.py) in
Hugging Face's rotary layout, read lazily, and the checks each reader makes of a file's header.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.loading.architectures import FAMILIES, expand
from engine.errors import ModelLoadError
from engine.execution.rope import RopeScaling

if TYPE_CHECKING:  # a mapped GGUF's path never imports torch
    import torch


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int  # rows of the embedding (may exceed the tokenizer's vocabulary: padding)
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    rope_theta: float
    rms_eps: float  # epsilon of every norm, RMSNorm or LayerNorm
    max_position: int
    tie_embeddings: bool
    head_dim: int = 0  # 0 when constructed: hidden_size // n_heads
    family: str = "llama"  # a key of engine.loading.architectures.FAMILIES
    rope_scaling: RopeScaling | None = None
    sliding_window: int | None = None  # attention span; the backend's context never exceeds it

    def __post_init__(self) -> None:
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.n_heads)


class LazyTensors(Mapping[str, "torch.Tensor"]):
    """canonical name -> tensor, read from the file on each lookup (nothing is cached), so
    that a backend converts one tensor at a time and drops each source as it goes."""

    def __init__(self, names: list[str], read: Callable[[str], torch.Tensor]):
        self._names = dict.fromkeys(names)  # ordered, with constant-time membership
        self._read = read

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        return self._read(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class LoadedWeights:
    config: LlamaConfig
    tensors: Mapping[str, torch.Tensor]  # canonical names (engine/loading/architectures.py), maybe lazy
    source: Path
    # Q/K rows in llama.cpp's interleaved order (a mapped GGUF of the llama family): rotary
    # turns adjacent pairs instead of halves (engine/loading/formats/gguf_mapped.py map_gguf)
    rotary_pairs: bool = False


def expected_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """canonical name -> shape, for every tensor any family may have."""
    h, f, hd = c.hidden_size, c.intermediate_size, c.head_dim
    q, kv = c.n_heads * hd, c.n_kv_heads * hd
    per_layer = {"attn_norm": (h,), "attn_norm_bias": (h,), "ffn_norm": (h,), "ffn_norm_bias": (h,),
                 "wq": (q, h), "wk": (kv, h), "wv": (kv, h), "wo": (h, q),
                 "bq": (q,), "bk": (kv,), "bv": (kv,), "bo": (h,), "q_norm": (hd,), "k_norm": (hd,),
                 "w_gate": (f, h), "w_up": (f, h), "w_down": (h, f), "b_up": (f,), "b_down": (h,)}
    shapes = {"embed": (c.vocab_size, h), "lm_head": (c.vocab_size, h), "norm": (h,), "norm_bias": (h,)}
    return shapes | {f"layers.{i}.{k}": s for i in range(c.n_layers) for k, s in per_layer.items()}


def plan_tensors(config: LlamaConfig, fmt: str, shapes: dict[str, tuple[int, ...]],
                 ignored: Callable[[str], bool], where: Path) -> dict[str, str]:
    """canonical -> name in the file, after checking that the file has every tensor the
    family needs, each of the right shape, and nothing the family would silently ignore.

    shapes: name in the file -> shape (torch order); ignored: names that are not weights."""
    family = FAMILIES[config.family]
    templates = family.names(fmt)
    if config.tie_embeddings:  # a stored head is ignored, as transformers ties it to the embedding
        shapes = {s: shape for s, shape in shapes.items() if s != templates["lm_head"]}
        del templates["lm_head"]
    names = expand(templates, config.n_layers)
    required = set(expand({c: c for c in family.required}, config.n_layers))
    required |= set() if config.tie_embeddings else {"lm_head"}
    missing = sorted(c for c in required if names[c] not in shapes)
    if missing:
        raise ModelLoadError(f"{where}: {len(missing)} weight tensors missing "
                             f"(first: {names[missing[0]]}, {missing[0]})")
    known = set(names.values())
    unexpected = sorted(s for s in shapes if s not in known and not ignored(s))
    if unexpected:
        raise ModelLoadError(f"{where}: tensor {unexpected[0]} is not part of a {config.family} model "
                             f"({len(unexpected)} such tensors)")
    want = expected_shapes(config)
    plan = {c: s for c, s in names.items() if s in shapes}
    for canonical, source in plan.items():
        if tuple(shapes[source]) != want[canonical]:
            raise ModelLoadError(f"{where}: tensor {source} has shape {tuple(shapes[source])}, "
                                 f"the hyper-parameters say {want[canonical]}")
    return plan
