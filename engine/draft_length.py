"""How much to draft: the tree that maximises expected tokens per second of verification.

A draft node i that the target accepts with probability p_i (its path's chance: every node
above it accepted too) adds p_i tokens to what one pass yields; the pass then costs more, and a
draft model spends time producing it. So the nodes are ranked by p_i (parents come first: a
child's chance is at most its parent's) and the verified tree is the prefix of that ranking
that maximises (1 + p_1 + ... + p_n) / (cost of an (n + 1)-token pass + drafting time) (for a
chain with per-token rate a this is Leviathan et al. 2023, eq. 1, over the pass cost).

Everything machine-dependent is measured: the target's pass cost by width
(engine/execution/calibrate.py) and a draft model's cost per token. On this CPU a wide pass costs a few
one-token passes, so only likely nodes pay; where passes of every width cost about the same (a
GPU), long chains and wide trees do. The p_i come from the drafters' raw scores (how often a
continuation followed the matched text, a draft model's probability), calibrated per source
and match length by how often the target actually accepted such nodes (`Acceptance`).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

# Lookup calibration buckets: the matched suffix had at least this many tokens. The
# continuation seen last (among several) is calibrated apart, from NEWEST on, and the rest of
# a fill-in-the-middle suffix the output has copied so far (drafters/fim_suffix.py) from
# FIM_SUFFIX on.
MATCH_BUCKETS = (1, 2, 3, 5, 9, 17, 33)
NEWEST = len(MATCH_BUCKETS)
FIM_SUFFIX = 2 * len(MATCH_BUCKETS)
# Prior chance a lookup continuation is accepted, per bucket (per unit of frequency share):
# long matches in code almost always go on as they did before.
LOOKUP_PRIORS = (0.25, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95)
# Draft-model calibration buckets by its own probability of the token.
MODEL_BUCKETS = (0.0, 0.4, 0.7, 0.9)
# Pass widths whose costs the timed passes correct (interpolated between), how many timed
# passes the kept costs count as, the least share of the log error one pass moves them by, and
# the largest log error one pass counts with (2x).
_KNOTS = (1, 2, 4, 8, 16)
_PRIOR = 2.0
_LEARN = 0.1
_CLIP = math.log(2.0)


def match_bucket(length: int) -> int:
    return bisect_right(MATCH_BUCKETS, length) - 1


def model_bucket(probability: float) -> int:
    return bisect_right(MODEL_BUCKETS, probability) - 1


class PassCosts:
    """Seconds per target pass by width (measured up to some width, extrapolated linearly
    beyond it) and seconds per token a draft model drafts. Unmeasured: every width costs 1.

    With `learn`, every timed verification pass (`observe`) corrects the measured costs: a
    calibration timed once at first start, while something else ran, priced 8- and 16-token
    passes at 1.9x and 2.2x what they took in decoding, and so kept drafts short for good."""

    def __init__(self, pass_cost: Sequence[float] | None = None, draft_cost: float = 0.0,
                 learn: bool = False, timed: Sequence[float] = ()):
        """timed: how many passes had corrected the kept costs at each of _KNOTS (`timed`)."""
        cost = list(pass_cost) if pass_cost and len(pass_cost) > 2 else [0.0, 1.0, 1.0]
        self.measured = _monotone(cost)
        self.draft_cost = draft_cost
        self.learn = learn
        last = len(cost) - 1
        # Corrections are kept at a few widths (log factors), interpolated between them and
        # flat past the widest, so the measured shape (e.g. AMX tiles: 9-16 tokens cost alike)
        # stays and its level moves.
        self._knots = [w for w in _KNOTS if w <= last] or [1]
        self._log_factor = [0.0] * len(self._knots)
        # passes timed at each knot (one between two knots counts for both, in shares)
        self._timed = list(timed) if len(timed) == len(self._knots) else [0.0] * len(self._knots)
        self.version = 0  # counts corrections: what derives from the costs is refreshed on a change
        self._apply()

    def observe(self, width: int, seconds: float) -> None:
        """A verification pass over `width` tokens took `seconds`: move the costs at the widths
        around it toward that by the (clipped) log error, a step of at least _LEARN: a running
        mean over the first passes, so that a few wide passes correct a width's cost, and a
        step of _LEARN after, so a pass slowed by something else running moves it little."""
        if not self.learn or seconds <= 0 or not 1 <= width < len(self.cost):
            return
        error = max(-_CLIP, min(_CLIP, math.log(seconds / self.cost[width])))
        i = bisect_right(self._knots, width) - 1
        if self._knots[i] == width or i == len(self._knots) - 1:
            shares = [(i, 1.0)]
        else:
            share = (width - self._knots[i]) / (self._knots[i + 1] - self._knots[i])
            shares = [(i, 1 - share), (i + 1, share)]
        for knot, share in shares:
            # a running mean of the errors (the kept cost counting as _PRIOR passes) until it
            # weighs them less than an average with a fixed step would
            self._timed[knot] += share
            self._log_factor[knot] += share * max(_LEARN, 1 / (self._timed[knot] + _PRIOR)) * error
        self._apply()
        self.version += 1

    @property
    def timed(self) -> list[float]:
        """How many timed passes have corrected the costs at each of the widths _KNOTS."""
        return list(self._timed)

    def untimed_width(self, enough: float) -> int | None:
        """The narrowest width, wider than every one that `enough` timed passes have corrected,
        that fewer have (None: there is none, or nothing is learnt). Decoding seldom chooses
        passes that the costs price high, so such a width is timed only if a pass is made that
        wide on purpose."""
        if not self.learn:
            return None
        timed = [i for i, n in enumerate(self._timed) if n >= enough]
        after = timed[-1] + 1 if timed else len(self._knots)
        return self._knots[after] if after < len(self._knots) else None

    def _apply(self) -> None:
        factors = [0.0] + [math.exp(_interpolate(self._knots, self._log_factor, w))
                           for w in range(1, len(self.measured))]
        self.cost = _monotone([c * f for c, f in zip(self.measured, factors)])
        last = len(self.cost) - 1
        base = max(1, last - 5)  # a wide baseline: single widths are noisy
        self.slope = max(0.0, (self.cost[last] - self.cost[base]) / (last - base))

    def verify(self, width: int) -> float:
        """A target pass over `width` tokens."""
        last = len(self.cost) - 1
        return self.cost[width] if width <= last else self.cost[last] + (width - last) * self.slope

    def least_useful_chance(self, max_nodes: int) -> float:
        """No node less likely than this can be worth its place in a pass of up to
        `max_nodes` + 1 tokens: the cheapest widening of a pass, in one-token passes (an
        accepted token is worth at most one)."""
        cheapest = min(self.verify(w + 1) - self.verify(w) for w in range(1, max_nodes + 1))
        return min(0.5, max(0.005, cheapest / self.verify(1)))

    def break_even(self, draft_cost: float | None = None, width: int = 8) -> float:
        """The chance of acceptance at which one more node pays for itself against plain
        decoding: what it adds to the pass (the mean extra cost per token of widening a
        pass to `width`) plus drafting it, over what an accepted token saves (a one-token
        pass)."""
        d = self.draft_cost if draft_cost is None else draft_cost
        extra = (self.verify(width + 1) - self.verify(1)) / width + d
        return min(0.9, max(0.02, extra / self.verify(1)))


def _monotone(cost: list[float]) -> list[float]:
    """A wider pass never costs less than a narrower one: a timing above a wider pass's was
    slowed by something else running (load only ever adds time), so the wider one's holds."""
    cost = list(cost)
    for width in range(len(cost) - 2, 0, -1):
        cost[width] = min(cost[width], cost[width + 1])
    return cost


def _interpolate(xs: Sequence[int], ys: Sequence[float], x: int) -> float:
    """ys at x, linear between the xs around it (flat outside them)."""
    i = bisect_right(xs, x) - 1
    if i < 0:
        return ys[0]
    if i >= len(xs) - 1:
        return ys[-1]
    share = (x - xs[i]) / (xs[i + 1] - xs[i])
    return ys[i] + share * (ys[i + 1] - ys[i])


def best_prefix(probabilities: Sequence[float], costs: PassCosts, spent: float = 0.0) -> tuple[int, float]:
    """How many of the nodes (ranked by chance, best first) to verify, and the rate that
    gives, in expected tokens per second: max over n of (1 + sum of the first n chances) /
    (pass of n + 1 tokens + `spent` drafting). Zero nodes is a plain one-token pass."""
    best_n, best_rate = 0, 1.0 / (costs.verify(1) + spent)
    expected = 1.0
    for n, p in enumerate(probabilities, start=1):
        expected += p
        rate = expected / (costs.verify(n + 1) + spent)
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n, best_rate


def chain_length(acceptance: float, costs: PassCosts, k_max: int) -> int:
    """The chain length a model with per-token acceptance `acceptance` should draft: max over
    k of (1 + a + ... + a^k) / (pass of k + 1 tokens + k draft tokens)."""
    best_k, best_rate, expected = 0, 1.0 / costs.verify(1), 1.0
    for k in range(1, k_max + 1):
        expected += acceptance ** k
        rate = expected / (costs.verify(k + 1) + k * costs.draft_cost)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


@dataclass
class _Rate:
    hits: float
    expected: float  # sum of the raw scores of the nodes tested


class Acceptance:
    """How often the target accepts a drafted node, given it was tested (its parent was
    accepted), relative to the drafter's raw score for it: one factor per (source, bucket).
    Counts decay, so the factor follows the code being written; a prior worth `strength`
    observations keeps it sane before there are any."""

    def __init__(self, memory: float = 0.98, strength: float = 4.0):
        self.memory, self.strength = memory, strength
        self._rates: dict[tuple[str, int], _Rate] = {}
        # What running a draft model is expected to bring: how often a run drafted a first
        # token and it was the target's next one (a run too unsure to draft anything counts as
        # a miss: it cost its time and brought nothing), and how often its chain's next token
        # was right where the chain was right so far.
        self._first = _Rate(0.0, 0.0)
        self._next = _Rate(0.0, 0.0)

    def _mean(self, r: _Rate, prior: float) -> float:
        return (r.hits + self.strength * prior) / (r.expected + self.strength)

    @property
    def model_first(self) -> float:
        return self._mean(self._first, 0.6)

    @property
    def model_next(self) -> float:
        return self._mean(self._next, 0.75)

    def observe_model(self, first: bool, next_tokens: Sequence[bool]) -> None:
        self._count(self._first, first)
        for hit in next_tokens:
            self._count(self._next, hit)

    def _count(self, r: _Rate, hit: bool, score: float = 1.0) -> None:
        r.hits = r.hits * self.memory + hit
        r.expected = r.expected * self.memory + score

    def factor(self, source: str, bucket: int) -> float:
        prior = 1.0 if source == "model" else LOOKUP_PRIORS[bucket % NEWEST]
        r = self._rates.get((source, bucket))
        return prior if r is None else self._mean(r, prior)

    def chance(self, source: str, bucket: int, score: float) -> float:
        """The calibrated chance a tested node with this raw score is accepted."""
        return calibrated(score, self.factor(source, bucket))

    def observe(self, source: str, bucket: int, score: float, accepted: bool) -> None:
        self._count(self._rates.setdefault((source, bucket), _Rate(0.0, 0.0)), accepted, score)


def calibrated(score: float, factor: float) -> float:
    """A raw score scaled by its (source, bucket)'s factor: the chance of acceptance."""
    return min(0.99, score * factor)
