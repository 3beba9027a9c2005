"""How many tokens to draft: the length that maximises expected tokens per second of verification.

With a per-token acceptance rate a, a chain of k draft tokens yields 1 + a + ... + a^k tokens from
one target pass of k + 1 tokens (Leviathan et al. 2023, eq. 1). What that pass costs depends on
the machine: on this CPU in bf16 a 9-token pass costs about as much as a 1-token pass, so long
drafts pay; in fp32 or int8 it costs nearly twice as much, and only confident drafts pay. So the
cost per pass width is measured on the backend once (engine/calibrate.py), and k is chosen from
it and from the running acceptance rate; k = 0 (no draft) wins while drafts keep failing.
"""
from __future__ import annotations

from collections.abc import Sequence


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one pass yields from a k-token chain: 1 + a + ... + a^k."""
    return sum(acceptance ** i for i in range(k + 1))


def break_even_probability(pass_cost: Sequence[float], draft_cost: float, width: int = 8) -> float:
    """The chance of acceptance at which one more draft token pays for itself: what it adds to
    the pass (the mean extra cost per token of widening a pass to `width`) plus drafting it,
    over what an accepted token saves (a one-token pass)."""
    w = min(width, len(pass_cost) - 2)
    extra = (pass_cost[w + 1] - pass_cost[1]) / w + draft_cost
    return min(0.9, max(0.05, extra / pass_cost[1]))


class DraftLength:
    """Adaptive k from the running acceptance rate and the measured cost of each pass width.

    The rate is estimated from decayed counts: a pass that accepted m of k drafts saw m hits and,
    if m < k, one miss (the maximum-likelihood estimate for a geometric run). While k = 0 wins,
    a one-token draft is still tried every `probe_every` passes, so a drafter that starts
    matching again is noticed."""

    def __init__(self, k_max: int, pass_cost: Sequence[float] | None = None, prior: float = 0.6,
                 memory: float = 0.8, probe_every: int = 4, draft_cost: float = 0.0):
        self.cost = list(pass_cost) if pass_cost else [1.0] * (k_max + 2)  # flat if unmeasured
        self.draft_cost = draft_cost  # per drafted token (a draft model's pass), same unit
        self.k_max = min(k_max, len(self.cost) - 2)
        self.hits, self.misses = 2 * prior, 2 * (1 - prior)
        self.memory, self.probe_every = memory, probe_every
        self.idle = 0

    @property
    def acceptance(self) -> float:
        return self.hits / (self.hits + self.misses)

    def next(self) -> int:
        a = self.acceptance
        k = max(range(self.k_max + 1),
                key=lambda k: expected_tokens(a, k) / (self.cost[k + 1] + k * self.draft_cost))
        if k > 0:
            self.idle = 0
            return k
        self.idle += 1
        if self.idle >= self.probe_every:
            self.idle = 0
            return 1
        return 0

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.hits = self.hits * self.memory + accepted
        self.misses = self.misses * self.memory + (accepted < drafted)
