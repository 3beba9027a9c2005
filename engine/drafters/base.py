"""What every drafter returns, and the interface decoding calls."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.backends.base import Backend
from engine.api import Sampling


@dataclass
class Draft:
    """Proposed tokens arranged as a tree rooted at the last committed token.

    parents[i] is the index of token i's parent in `tokens`, or -1 for the root. Parents come
    before children. A chain has parents [-1, 0, 1, ...]. `probs` holds the draft distribution
    each token was sampled from ([len, vocab]); None means the drafter is deterministic
    (a one-hot distribution, e.g. prompt lookup).
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: torch.Tensor | None = None

    @classmethod
    def chain(cls, tokens: Sequence[int], probs: torch.Tensor | None = None) -> Draft:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), probs)

    @property
    def is_chain(self) -> bool:
        return self.parents == list(range(-1, len(self.tokens) - 1))

    def __len__(self) -> int:
        return len(self.tokens)

    # A verification pass feeds [current token] + tokens: pass position 0 is the root and draft
    # node i sits at pass position i + 1. These two methods are the only places that shift is
    # written (logits rows, tree-mask parents and kept cache offsets all use pass positions).
    @staticmethod
    def pass_position(node: int) -> int:
        """The pass position of draft node `node` (-1: the root)."""
        return node + 1

    def pass_parents(self) -> list[int] | None:
        """Each pass position's parent pass position (-1 for the root: the cache's last token),
        or None for a chain (a plain causal pass)."""
        if self.is_chain:
            return None
        return [-1] + [self.pass_position(p) for p in self.parents]


class Drafter(Protocol):
    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        """Up to `k` tokens (per branch) that may follow `context` (prompt + output so far)."""
        ...


class ModelDrafter(Drafter, Protocol):
    """A drafter with a model and KV cache of its own: what the engine does with one."""

    backend: Backend  # its model: the engine measures its cost per drafted token

    def prefill(self, context: Sequence[int]) -> None:
        """Fill its cache for `context` ahead of drafting (out of the timed path)."""
        ...

    def reset(self) -> None:
        """Forget its cache (the target's was emptied)."""
        ...

    def tune(self, pass_cost: Sequence[float], draft_cost: float) -> None:
        """Adapt to the measured costs: seconds per target pass by width, per drafted token."""
        ...
