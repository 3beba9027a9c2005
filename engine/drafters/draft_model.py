"""A small model that shares the target's tokenizer drafts tokens one at a time.

Its KV cache is kept in sync with the target's context by common-prefix rollback: every call
first drops whatever the target rejected last time and reads what it has not seen. Greedy drafts
are a tree (engine/drafters/model_tree.py): the chain goes on while the model's probability of
the whole path is above what a token must be worth to pay for drafting and verifying it (set
from the measured costs by `tune`); where it is unsure, its next most likely tokens are leaves
beside the chain, costing only their place in the verification pass.
"""
from __future__ import annotations

from collections.abc import Sequence

from typing import TYPE_CHECKING

import numpy as np

from engine.api import Sampling
from engine.execution.backends.base import Backend, common_prefix
from engine.draft_length import PassCosts
from engine.drafters.base import Draft
from engine.drafters.model_tree import ModelTree

if TYPE_CHECKING:
    import torch

# New tokens read together with the first drafted one in one pass (logits for each): more are
# read in a pass of their own, without logits.
_READ_WITH_LOGITS = 4
# The draft proposes only the token ids below this (BPE vocabularies number tokens in the order
# their merges were learnt, so the frequent ones come first) and those its context has had: its
# head then reads a fifth of its rows (FR-Spec, Zhao et al. 2025, which ranks by counted
# frequency instead). Its proposals can only be wrong more often, never inexact.
SHORTLIST = 32768


class DraftModel:
    reads_prefix = True  # it reads lookup's likeliest path in its first pass

    def __init__(self, backend: Backend, min_path_prob: float = 0.1, sibling_min_prob: float = 0.1,
                 siblings: int = 2):
        self.backend = backend
        self.min_path_prob = min_path_prob  # the chain stops below this path probability
        self.sibling_min_prob = sibling_min_prob  # a sibling leaf needs this path probability
        self.siblings = siblings
        self._proposable: np.ndarray | None = None  # which ids its head keeps (None: all)
        if SHORTLIST < backend.vocab_size:
            proposable = np.zeros(backend.vocab_size, dtype=bool)
            proposable[:SHORTLIST] = True
            if backend.keep_head_rows(np.flatnonzero(proposable)):
                self._proposable = proposable

    def tune(self, costs: PassCosts) -> None:
        """A chain token must pay for its draft pass and its place in the target's pass; a
        sibling only for its place."""
        self.min_path_prob = costs.break_even()
        self.sibling_min_prob = costs.break_even(draft_cost=0.0)

    def reset(self) -> None:
        """Forget the cache."""
        self.backend.truncate(0)

    def prefill(self, context: Sequence[int]) -> None:
        """Fill the cache for `context` now, out of the timed path."""
        self._admit(context)
        self.backend.sync(context[:-1])

    def _admit(self, tokens: Sequence[int]) -> None:
        """Tokens it reads become ones it may propose (a rare new one copies its head again)."""
        if self._proposable is None or not tokens:
            return
        ids = np.asarray(tokens)
        new = ids[~self._proposable[ids]]
        if new.size:
            self._proposable[new] = True
            self.backend.keep_head_rows(np.flatnonzero(self._proposable))

    def behind(self, context: Sequence[int]) -> int:
        return len(context) - common_prefix(self.backend.tokens, context[:-1])

    def _read(self, context: Sequence[int], prefix: Sequence[int]) -> torch.Tensor:
        """Drop the cache past the common prefix and read the rest, then `prefix`: the logits
        after context[-1] and after each prefix token (len(prefix) + 1 rows)."""
        common = common_prefix(self.backend.tokens, context[:-1])
        self.backend.truncate(common)
        rest = list(context[common:])
        self._admit(rest)
        if len(rest) > _READ_WITH_LOGITS:
            self.backend.sync(context[:-1])
            rest = rest[-1:]
        return self.backend.score(rest + list(prefix)).rows[len(rest) - 1:]  # where its pass left them

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: np.random.Generator, prefix: Sequence[int] = ()) -> Draft:
        tree = ModelTree(self.min_path_prob, self.sibling_min_prob)
        prefix = list(prefix)[:k - 1] if sampling.greedy else []
        rows = self._read(context, prefix)
        agreed = 0  # lookup's tokens the model would have chosen itself
        while agreed < len(prefix) and tree.follow(rows[agreed], prefix[agreed]):
            agreed += 1
        if agreed < len(prefix):  # its own chain goes on where it parts from lookup's path
            self.backend.truncate(self.backend.length - len(prefix) + agreed)
        logits, token = rows[agreed], None
        for level in range(agreed, k):
            if level > agreed:
                logits = self.backend.score([token]).rows[-1]
            token = tree.step(logits, sampling, generator, self.siblings)
            if token is None:
                break
        return tree.finish()
