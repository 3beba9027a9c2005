"""Turning logits into a distribution (temperature, top-k, top-p) and drawing from it."""
from __future__ import annotations

import torch

from engine.api import Sampling


def generator(s: Sampling) -> torch.Generator:
    """The random source of one generation: seeded, or fresh when `s.seed` is None."""
    g = torch.Generator()
    if s.seed is not None:
        g.manual_seed(s.seed)
    else:
        g.seed()
    return g


def probabilities(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """The distribution sampling draws from, for every row of `logits` [..., vocab]."""
    logits = logits.float() / max(s.temperature, 1e-6)
    if s.top_k > 0 and s.top_k < logits.shape[-1]:
        kth = logits.topk(s.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if s.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= s.top_p
        probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))
