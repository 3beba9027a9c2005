"""Prompt lookup and a draft model together, in one verification pass.

Lookup candidates cost nothing to make, and where they exist they are usually long and right:
their trie is the draft, and the draft model is not run (measured: running it beside them costs
more draft passes than its extra branch earns, docs/draft_model.md). Where lookup finds
nothing, the draft model's token tree is the draft. Sampling uses a single chain (rejection
sampling is proven exact for chains): the lookup match if there is one, else the model's.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.draft_length import break_even_probability
from engine.drafters.base import Draft, Drafter
from engine.drafters.prompt_lookup import PromptLookup
from engine.drafters.tree import merge_candidates
from engine.api import Sampling


def lookup_branches(pass_cost: Sequence[float] | None) -> int:
    """How many lookup candidates a tree takes. Each alternative adds two nodes to the pass,
    which pays only where a node costs little next to a one-token pass. Measured with the
    native int4 decoder (a node ~18% of a one-token pass, docs/bench.md): one candidate gave
    1.32x / 1.39x over plain decoding (fresh / repetitive), three 1.21x / 1.30x."""
    if not pass_cost:
        return 3
    return 3 if break_even_probability(pass_cost, 0.0) < 0.1 else 1


class Hybrid:
    def __init__(self, lookup: PromptLookup, model: Drafter | None, max_nodes: int = 16,
                 lookup_candidates: int = 3):
        self.lookup = lookup
        self.model = model
        self.max_nodes = max_nodes
        self.lookup_candidates = lookup_candidates

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        limit = self.lookup_candidates if sampling.greedy else 1
        found = self.lookup.candidates(context, k, limit=limit)
        if found:
            if not sampling.greedy:
                return Draft.chain(found[0])
            # k is the chain length the measured pass costs make worth verifying; each
            # alternative branch adds two nodes beyond it (its point of difference, and one more).
            return merge_candidates(found, min(self.max_nodes, k + 2 * (len(found) - 1)))
        if self.model is None:
            return Draft()
        return self.model.propose(context, k, sampling, generator)
