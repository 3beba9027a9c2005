"""A target whose passes cost nothing: it answers with a recorded greedy output.

Given the tokens the real target wrote after a prompt (plain decoding), every pass "predicts"
the recorded token after each of its positions, so speculative decoding accepts and rejects
drafts exactly as with the real model, and all the time a generation takes is the host's:
drafting, building the tree, verification's bookkeeping, stop rules. `bench --host-work`
measures that, on any machine, for the passes a GPU would run in a few milliseconds.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.api import Sampling
from engine.errors import EngineError
from engine.execution.backends.base import Backend, Capabilities, tree_depths
from engine.execution.pass_logits import PassLogits


class RecordedLogits(PassLogits):
    """A pass's argmax ids, without rows: greedy verification's view of a real pass."""

    def __init__(self, ids: list[int]):
        super().__init__(np.empty((len(ids), 0), dtype=np.float32))
        self.ids = ids

    def argmax(self) -> list[int]:
        self.crossed += len(self.ids)
        return self.ids

    def pick(self, position: int, sampling: Sampling, generator: np.random.Generator,
             allowed: Sequence[int] | None = None) -> int:
        if not sampling.greedy or allowed is not None:
            raise EngineError("a replayed target only decodes greedily, without healing")
        self.crossed += 1
        return self.ids[position]


class ReplayBackend(Backend):
    """`record(tokens)` sets the sequence (prompt and output) the next generation follows."""

    def __init__(self, vocab_size: int, max_len: int = 1 << 16):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self._record: list[int] = []

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(tree=True)

    def record(self, tokens: Sequence[int]) -> None:
        self._record = list(tokens)

    def forward(self, tokens: Sequence[int], parents: Sequence[int] | None = None,
                logits: bool = True) -> np.ndarray | None:
        if logits:
            raise EngineError("a replayed target has no logits: verify through `score`")
        self.tokens.extend(tokens)
        return None

    def score(self, tokens: Sequence[int], parents: Sequence[int] | None = None) -> RecordedLogits:
        """Each position's next token in the record, at the position its depth in the tree
        puts it (past the record's end: the last recorded token)."""
        start = self.length
        depths = range(len(tokens)) if parents is None else tree_depths(parents)
        last = len(self._record) - 1
        ids = [self._record[min(start + d + 1, last)] for d in depths]
        self.tokens.extend(tokens)
        return RecordedLogits(ids)

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def _compact(self, start: int, offsets: Sequence[int]) -> None:
        self.tokens[start:] = [self.tokens[start + o] for o in offsets]
