"""A small model that shares the target's tokenizer drafts tokens one at a time.

Its KV cache is kept in sync with the target's context by common-prefix rollback: every call
starts with `sync`, which drops whatever the target rejected last time.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.backends.base import Backend
from engine.drafters.base import Draft
from engine.api import Sampling
from engine.sampling import draw, probabilities


class DraftModel:
    def __init__(self, backend: Backend, min_confidence: float = 0.1):
        self.backend = backend
        # Greedy drafting stops at a token the draft itself doubts: it would likely be rejected.
        self.min_confidence = min_confidence

    def tune(self, pass_cost: Sequence[float], draft_cost: float) -> None:
        """Nothing to tune: it stops on its own confidence (min_confidence)."""

    def reset(self) -> None:
        """Forget the cache."""
        self.backend.truncate(0)

    def prefill(self, context: Sequence[int]) -> None:
        """Fill the cache for `context` now, out of the timed path."""
        self.backend.sync(context[:-1])

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        self.backend.sync(context[:-1])
        token = context[-1]
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for _ in range(k):
            logits = self.backend.forward([token])[-1]
            if sampling.greedy:
                probs = torch.softmax(logits, -1)
                token = int(probs.argmax())
                if tokens and float(probs[token]) < self.min_confidence:
                    break
            else:
                probs = probabilities(logits, sampling)
                token = draw(probs, generator)
                dists.append(probs)
            tokens.append(token)
        return Draft.chain(tokens, torch.stack(dists) if dists else None)
