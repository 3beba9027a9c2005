"""Prompt lookup and a draft model together: their candidates share one token tree.

Lookup candidates cost nothing to make, so they go first; the draft model's chain fills the
rest of the node budget. When lookup already has a full-length match the draft model is not
run at all. Sampling uses a single chain (rejection sampling is proven exact for chains).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.drafters.base import Draft
from engine.drafters.draft_model import DraftModel
from engine.drafters.prompt_lookup import PromptLookup
from engine.drafters.tree import merge_candidates
from engine.sampling import Sampling


class Hybrid:
    def __init__(self, lookup: PromptLookup, model: DraftModel | None, max_nodes: int = 16,
                 lookup_candidates: int = 3):
        self.lookup = lookup
        self.model = model
        self.max_nodes = max_nodes
        self.lookup_candidates = lookup_candidates

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        found = self.lookup.candidates(context, k, limit=1 if not sampling.greedy else self.lookup_candidates)
        if not sampling.greedy:
            if found or self.model is None:
                return Draft.chain(found[0] if found else [])
            return self.model.propose(context, k, sampling, generator)
        if self.model is not None and not (found and len(found[0]) >= k):
            found.append(self.model.propose(context, k, sampling, generator).tokens)
        return merge_candidates(found, self.max_nodes)
