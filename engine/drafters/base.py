"""What every drafter returns, and the interface decoding calls."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.sampling import Sampling


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


class Drafter(Protocol):
    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        """Up to `k` tokens (per branch) that may follow `context` (prompt + output so far)."""
        ...
