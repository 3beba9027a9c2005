"""Turning logits into a distribution (temperature, top-k, top-p) and drawing from it.

In torch, on whatever device the logits are (a host array is wrapped, not copied): a GPU
backend's verification reads the drafted tokens' probabilities and one drawn id where its
logits are (engine/verification.py). torch is imported where a distribution is made, so greedy
decoding on the native backend runs without it (its import costs a start 1.2-1.5 s)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.api import Sampling

if TYPE_CHECKING:
    import torch


def softmax(logits: torch.Tensor | np.ndarray) -> torch.Tensor:
    """float32 softmax over the last axis (-inf logits get probability 0): a 152k vocabulary
    takes 0.12 ms on the host, where numpy's float64 took 1.5 ms of every drafted token."""
    import torch

    return torch.softmax(torch.as_tensor(logits).float(), dim=-1)


def probabilities(logits: torch.Tensor | np.ndarray, s: Sampling) -> torch.Tensor:
    """The distribution sampling draws from, for every row of `logits` [..., vocab]."""
    import torch

    logits = torch.as_tensor(logits).float() / max(s.temperature, 1e-6)
    if 0 < s.top_k < logits.shape[-1]:
        kth = torch.topk(logits, s.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    probs = softmax(logits)
    if s.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= s.top_p
        kept = torch.zeros_like(probs).scatter_(-1, order, sorted_p.masked_fill(drop, 0.0))
        probs = kept / kept.sum(dim=-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor | np.ndarray, u: float) -> int:
    """The index that a uniform number `u` in [0, 1) picks from these (unnormalized,
    non-negative) weights [vocab]: by their cumulative sum, so only the index leaves the device."""
    import torch

    probs = torch.as_tensor(probs)
    cumulative = torch.cumsum(probs.double(), dim=-1)
    at = int(torch.searchsorted(cumulative, cumulative[-1:] * u, right=True))
    if at < probs.shape[-1]:
        return at
    return int(probs.nonzero()[-1])  # rounding put it past the last weight
