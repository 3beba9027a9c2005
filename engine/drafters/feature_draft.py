"""A draft that reads the target's own features (EAGLE, Li et al. 2024).

The draft is one Llama layer. At cache position j its input is fc([e(token j+1); f_j]), where f_j
is the target's final normed hidden state at j (what the target's head turns into logits);
its output predicts f_{j+1}, and the target's head (its most frequent rows) turns that into the
next draft token. So the draft mostly learns to extrapolate the target's own state one step,
which a single layer does far better than a small model reading tokens alone.

Its KV cache mirrors the target's, one position behind in tokens: position j needs f_j and
token j+1. Positions computed from true target features are kept across calls (common-prefix
reuse, like the target's); positions computed from the draft's own predicted features are
dropped at the next call.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from engine.api import Sampling
from engine.execution.backends.base import PREFILL_CHUNK, Backend, common_prefix
from engine.execution.backends.torch_llama import TorchLlama
from engine.draft_length import PassCosts
from engine.drafters.base import Draft
from engine.drafters.model_tree import ModelTree


class FeatureDraft:
    reads_prefix = False  # past the context there are no target features to read

    def __init__(self, target: Backend, backend: TorchLlama, fc: torch.Tensor, fc_bias: torch.Tensor,
                 min_path_prob: float = 0.2, siblings: int = 2, sibling_levels: int = 2,
                 sibling_min_prob: float = 0.1):
        target.record_features()
        backend.record_features()
        self.target = target
        self.backend = backend
        self.fc = fc
        self.fc_bias = fc_bias
        # Greedy drafting stops where the draft's own probability of the whole path so far falls
        # below this: an estimate of the chance the target accepts that far (EAGLE-2). Engine.load
        # sets it from the measured pass costs (`tune`).
        self.min_path_prob = min_path_prob
        self.siblings, self.sibling_levels, self.sibling_min_prob = siblings, sibling_levels, sibling_min_prob
        self._inputs: list[int] = []  # the context tokens behind the draft's true-feature positions

    def tune(self, costs: PassCosts) -> None:
        """Chains stop where the path probability no longer pays for the longer pass."""
        self.min_path_prob = costs.break_even()

    def behind(self, context: Sequence[int]) -> int:
        return len(context) - common_prefix(self._inputs, context)

    def reset(self) -> None:
        """Forget the cache (e.g. after the target's cache was emptied)."""
        self.backend.truncate(0)
        self._inputs = []

    @torch.inference_mode()
    def teacher_forced_logits(self, ids: Sequence[int]) -> torch.Tensor:
        """The draft's logits from the target's true features at every position of `ids` (which
        the target's cache must hold): [len(ids) - 1, vocab], row j guessing what follows
        ids[j + 1], as the target's own row j + 1 does."""
        self.reset()
        return self.backend.forward_hidden(self._input(ids[1:], self.target.features[:len(ids) - 1]), ids[1:])

    def _input(self, tokens: Sequence[int], features: torch.Tensor) -> torch.Tensor:
        """fc([e(next tokens); features]) for positions whose next tokens are `tokens`. The
        target's vectors (numpy on the native backend) are read in the draft's dtype."""
        ids = torch.tensor(tokens, dtype=torch.long, device=self.backend.device)
        vectors = [torch.as_tensor(v).to(self.fc.dtype) for v in (self.target.embed_tokens(ids), features)]
        return F.linear(torch.cat(vectors, -1), self.fc, self.fc_bias)

    @torch.inference_mode()
    def catch_up(self, context: Sequence[int]) -> torch.Tensor:
        """Bring the draft's cache to the target's (which holds context[:-1]); return the logits of
        its last position: the draft's guess at the token after context[-1]. Drafting calls it
        first; `prefill` calls it ahead, out of the timed path."""
        end = self.target.length
        start = max(common_prefix(self._inputs, context[:end + 1]) - 1, 0)
        self.backend.truncate(start)
        for i in range(start, end, PREFILL_CHUNK):
            j = min(i + PREFILL_CHUNK, end)
            x = self._input(context[i + 1:j + 1], self.target.features[i:j])
            self.backend.forward_hidden(x, context[i + 1:j + 1], logits=False)
        self._inputs = list(context[:end + 1])
        return self.backend.head_logits(self.backend.features[end - 1:end])[0]

    def prefill(self, context: Sequence[int]) -> None:
        """Read the target's features for `context` (whose cache holds context[:-1]) now."""
        if self.target.length:
            self.catch_up(context)

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: np.random.Generator, prefix: Sequence[int] = ()) -> Draft:
        """A chain of up to k tokens. Greedy drafts are a tree: the chain follows the draft's
        top token while its path probability stays above `min_path_prob`; on the first
        `sibling_levels` levels the next most likely tokens (path probability at least
        `sibling_min_prob`) are leaves beside it, free to add (they come from the same logits)
        and verified in the same target pass. It drafts from the context's end only (`prefix`
        is not read): past it there are no target features to read."""
        if self.target.length == 0:  # no target feature to start from yet
            return Draft()
        logits = self.catch_up(context)
        tree = ModelTree(self.min_path_prob, self.sibling_min_prob)
        for level in range(k):
            token = tree.step(logits, sampling, generator, self.siblings if level < self.sibling_levels else 0)
            if token is None:
                break
            if level + 1 < k:
                feature = self.backend.features[self.backend.length - 1:self.backend.length]
                logits = self.backend.forward_hidden(self._input([token], feature), [token])[-1]
        return tree.finish()
