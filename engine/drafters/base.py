"""What every drafter returns, and the interface decoding calls."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from engine.execution.backends.base import Backend
from engine.api import Sampling
from engine.draft_length import PassCosts
from engine.stats import Stats

if TYPE_CHECKING:
    import torch

# Where a drafted token came from. "document": the prompt, the output so far and open files;
# "workspace": the workspace's files; "history": this process's earlier outputs; "model": a
# draft model.
SOURCES = ("document", "workspace", "history", "model")


class NodeInfo(NamedTuple):
    """Where a draft node came from and what calibration learns from its fate
    (engine/draft_length.py, Acceptance): its source, a bucket (lookup: the matched length;
    model: its probability) and its raw score (frequency share or probability). `top`: a
    draft model's own first choice at its level (not a leaf beside it)."""
    source: str
    bucket: int
    score: float
    top: bool = True


@dataclass
class Draft:
    """Proposed tokens arranged as a tree rooted at the last committed token.

    parents[i] is the index of token i's parent in `tokens`, or -1 for the root. Parents come
    before children. A chain has parents [-1, 0, 1, ...]. `probs` holds the draft distribution
    each token was sampled from (a [vocab] row each); None means the drafter is deterministic
    (a one-hot distribution, e.g. prompt lookup). `info` says where each node came from
    (empty: not known).
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: Sequence[torch.Tensor] | None = None
    info: list[NodeInfo] = field(default_factory=list)

    @classmethod
    def chain(cls, tokens: Sequence[int], probs: Sequence[torch.Tensor] | None = None,
              info: Sequence[NodeInfo] = ()) -> Draft:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), probs, list(info))

    @property
    def is_chain(self) -> bool:
        return self.parents == list(range(-1, len(self.tokens) - 1))

    def __len__(self) -> int:
        return len(self.tokens)

    def keep(self, nodes: Sequence[int]) -> Draft:
        """The draft of these nodes only, in order; each one's parent must be kept too."""
        index = {-1: -1} | {old: new for new, old in enumerate(nodes)}
        return Draft([self.tokens[i] for i in nodes], [index[self.parents[i]] for i in nodes],
                     None if self.probs is None else [self.probs[i] for i in nodes],
                     [self.info[i] for i in nodes] if self.info else [])

    def count_in(self, stats: Stats, accepted: Sequence[int]) -> None:
        """Count this draft, verified, into `stats`: each node by its source ("unknown" where the
        drafter did not say), the nodes the target kept, and the draft model's first choices
        the target tested (how often the pair agrees)."""
        sources = [i.source for i in self.info] if self.info else ["unknown"] * len(self.tokens)
        model_tested = [i for i in self.tested(accepted) if sources[i] == "model" and self.info[i].top]
        stats.model_tested += len(model_tested)
        stats.model_agreed += len(set(model_tested) & set(accepted))
        stats.drafted += len(sources)
        stats.accepted += len(accepted)
        for source in sources:
            stats.drafted_by_source[source] = stats.drafted_by_source.get(source, 0) + 1
        for node in accepted:
            stats.accepted_by_source[sources[node]] = stats.accepted_by_source.get(sources[node], 0) + 1

    def tested(self, accepted: Sequence[int]) -> list[int]:
        """The nodes whose chance was really tested: children of the root or of an accepted node."""
        open_ = {-1, *accepted}
        return [i for i, p in enumerate(self.parents) if p in open_]

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
                generator: np.random.Generator) -> Draft:
        """Up to `k` tokens deep that may follow `context` (prompt + output so far)."""
        ...

    def observe(self, draft: Draft, accepted: Sequence[int], next_token: int,
                pass_seconds: float = 0.0) -> None:
        """Learn from a verified draft: `accepted` are the node indices the target kept,
        `next_token` the target's own token after them, and `pass_seconds` what the target's
        pass over [current token] + draft took (0: not timed)."""
        ...


class ModelDrafter(Protocol):
    """A drafter with a model and KV cache of its own: what the engine does with one."""

    backend: Backend  # its model: the engine measures its cost per drafted token
    reads_prefix: bool  # does `propose` read lookup's path (`prefix`) first?

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: np.random.Generator, prefix: Sequence[int] = ()) -> Draft:
        """A chain (sampling) or a tree (greedy) up to `k` deep; `info` scores each node by
        the model's probability of it given its parent. Greedy, it may first read `prefix`
        (lookup's likeliest path) and score it; where it parts from that path its own chain
        goes on."""
        ...

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of `context` its cache would have to read before drafting."""
        ...

    def prefill(self, context: Sequence[int]) -> None:
        """Fill its cache for `context` ahead of drafting (out of the timed path)."""
        ...

    def reset(self) -> None:
        """Forget its cache (the target's was emptied)."""
        ...

    def tune(self, costs: PassCosts) -> None:
        """Adapt to the measured costs: how deep and wide drafting pays."""
        ...
