"""A draft model's proposal, built one level per model pass.

Greedy: the chain follows the model's top token while the model's probability of the whole path
stays at least `min_path_prob` (its estimate of the chance the target accepts that far,
EAGLE-2); the next most likely tokens whose path probability reaches `sibling_min_prob` are
leaves beside it, free to draft (the same logits) and verified in the same target pass.
Sampling: a chain of drawn tokens, with the distributions they were drawn from. A chain can
start with given tokens (lookup's best guess, read by the model in one pass): the model's
probability of each says how likely it is; where the model prefers another token, lookup's
stays a leaf and the model's own chain goes on from there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.api import Sampling
from engine.draft_length import model_bucket
from engine.drafters.base import Draft, NodeInfo
from engine.execution.pass_logits import largest
from engine.sampling import draw, probabilities, softmax

if TYPE_CHECKING:
    import torch


class ModelTree:
    def __init__(self, min_path_prob: float, sibling_min_prob: float):
        self.min_path_prob, self.sibling_min_prob = min_path_prob, sibling_min_prob
        self.draft = Draft()
        self._dists: list[torch.Tensor] = []
        self._parent, self._path = -1, 1.0
        self._nodes: dict[tuple[int, int], int] = {}  # (parent, token) -> node: no twins

    def _add(self, token: int, p: float, top: bool = True) -> int:
        node = self._nodes.get((self._parent, token))
        if node is None:
            node = self._nodes[(self._parent, token)] = len(self.draft.tokens)
            self.draft.tokens.append(token)
            self.draft.parents.append(self._parent)
            self.draft.info.append(NodeInfo("model", model_bucket(p), p, top))
        return node

    def step(self, logits: torch.Tensor, sampling: Sampling, generator: np.random.Generator,
             siblings: int) -> int | None:
        """Add the next level from the model's logits; returns the chain's new token, or None
        where greedy drafting stops (the path became too unlikely)."""
        if sampling.greedy:
            top_p, top = largest(softmax(logits), 1 + siblings)
            token, p = top[0], top_p[0]
            if self._path * p < self.min_path_prob:
                return None
            node = self._add(token, p)
            for q, alt in zip(top_p[1:], top[1:]):
                if self._path * q >= self.sibling_min_prob:
                    self._add(alt, q, top=False)
        else:
            probs = probabilities(logits, sampling)
            token = draw(probs, generator.random())
            p = float(probs[token])
            self._dists.append(probs)
            node = self._add(token, p)
        self._parent, self._path = node, self._path * p
        return token

    def follow(self, logits: torch.Tensor, token: int) -> bool:
        """Add a given token (lookup's, which the model read) at the next level with the
        model's probability of it. Where it is the model's own first choice the chain goes on
        through it (True); otherwise it stays a leaf, and the caller goes on with `step` from
        the same logits (False)."""
        probs = softmax(logits)
        p = float(probs[token])
        agrees = largest(probs, 1)[1][0] == token
        node = self._add(token, p, top=agrees)
        if agrees:
            self._parent, self._path = node, self._path * p
        return agrees

    def finish(self) -> Draft:
        self.draft.probs = self._dists or None
        return self.draft
