"""Autoregressive decoding and speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Invariant of both loops: the target's cache holds the context except its last token, `current`,
which the next pass feeds first. One speculative step is

    draft   = drafter.propose(context, k)                 # a chain or a token tree
    logits  = target.score([current] + draft)            # one pass scores every draft token
    accepted, next = verify(draft, logits)               # greedy match, or rejection sampling,
                                                         # where the logits are: only ids cross
    target.keep(current + accepted)                      # roll back the rejected tokens
    output += accepted + [next]

so every pass yields at least one token, and greedy output is exactly the target's own.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.execution.backends.base import Backend
from engine.drafters.base import Draft, Drafter
from engine.healing import Healer
from engine.api import Request
from engine.execution.pass_logits import PassLogits
from engine.stats import Stats
from engine.verification import verify


# The random source of a generation: seeded, or fresh when the seed is None (making one takes
# about 0.1 ms). Its draws are made on the host and passed to the device as numbers, so a seed
# gives the same output on every backend. Greedy decoding draws nothing: one serves every request.
_GREEDY = np.random.default_rng(0)


@dataclass(frozen=True)
class Vocabulary:
    """What decoding needs to know about the tokenizer (the same for every request)."""
    eos_ids: frozenset[int]
    decode: Callable[[Sequence[int]], str]
    healer: Healer


class _Output:
    """Tokens committed so far; applies the request's stop rules token by token, in order.

    Their text is decoded once each: `Tokenizer.decode` renders what ids add when continuing a
    sequence, so a text that ends on a whole character is a prefix of every continuation's.
    Only the tokens since the last such end (`_pending`: a character's bytes cut between
    tokens) are decoded again."""

    def __init__(self, request: Request, vocab: Vocabulary, owed: str):
        self.request, self.vocab, self.owed = request, vocab, owed
        self.stats = Stats()
        self.tokens: list[int] = []
        self.stop_reason = ""
        self._settled = ""  # the text of the tokens before `_pending`
        self._pending: list[int] = []
        self.cut = self._stop_at(self.text)  # where the request's stop rule cuts the text, if it does

    @property
    def text(self) -> str:
        """The output's text, less the healed prompt text it starts with."""
        return self._text_with(())

    def _text_with(self, more: Sequence[int]) -> str:
        """The text with `more` tokens appended (not kept)."""
        pending = self._pending + list(more)
        return (self._settled + self.vocab.decode(pending) if pending else self._settled)[len(self.owed):]

    def _stop_at(self, text: str) -> int | None:
        """The request's stop rule: where it cuts `text` (None: it goes on)."""
        return None if self.request.stop is None else self.request.stop(text)

    def would_stop(self, more: Sequence[int]) -> bool:
        """Whether committing `more` would end the output at one of them (every stop rule only
        grows true as the text grows: an end of line, a block's end)."""
        return (not self.vocab.eos_ids.isdisjoint(more)
                or len(self.tokens) + len(more) >= self.request.max_new_tokens
                or self.request.stop is not None and self._stop_at(self._text_with(more)) is not None)

    def commit(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            if self.stop_reason:
                return
            if token in self.vocab.eos_ids:
                self.stop_reason = "eos"
                return
            self.tokens.append(token)
            self._pending.append(token)
            text = self.vocab.decode(self._pending)
            if not text.endswith("\ufffd"):  # else a character's bytes are cut between tokens
                self._settled, self._pending = self._settled + text, []
            self.cut = self._stop_at(self.text)
            if len(self.tokens) >= self.request.max_new_tokens:
                self.stop_reason = "max_tokens"
            elif self.cut is not None:
                self.stop_reason = "stop"

    @property
    def done(self) -> bool:
        """A stop rule ended the output, or the request was cancelled (checked between passes)."""
        if not self.stop_reason and self.request.cancel is not None and self.request.cancel.is_set():
            self.stop_reason = "cancelled"
        return bool(self.stop_reason)


@dataclass
class Generation:
    tokens: list[int]
    text: str  # the tokens' text, less the healed prompt text, cut where the request stops
    stats: Stats


def _ms_since(t: float) -> float:
    return (time.perf_counter() - t) * 1000


def _prefill(target: Backend, prompt: Sequence[int], out: _Output) -> int:
    """Sync the cache to prompt[:-1]; return the last prompt token (fed by the first pass)."""
    if not prompt:
        raise ValueError("the prompt is empty")
    t = time.perf_counter()
    out.stats.prompt_tokens = len(prompt)
    out.stats.reused_tokens = target.sync(prompt[:-1], out.request.cancel)
    out.stats.prefill_ms = _ms_since(t)
    if out.request.on_prefilled is not None:
        out.request.on_prefilled()
    return prompt[-1]


def _target_pass(target: Backend, tokens: Sequence[int], parents: Sequence[int] | None,
                 stats: Stats) -> PassLogits:
    """One target pass, counted and timed apart from the host's work around it."""
    t = time.perf_counter()
    logits = target.score(tokens, parents)
    stats.target_ms += _ms_since(t)
    stats.target_passes += 1
    return logits


def _heal(target: Backend, current: int, out: _Output, generator: np.random.Generator) -> int:
    """Regenerate the prompt's removed last token (`out.owed`) under the healing constraint, a
    pass per token. Every mode runs this same step first, so speculative output still equals
    the baseline's."""
    required, healer, sampling, stats = out.owed, out.vocab.healer, out.request.sampling, out.stats
    while required and not out.done:
        t = time.perf_counter()
        logits = _target_pass(target, [current], None, stats)
        current = logits.pick(-1, sampling, generator, allowed=list(healer.allowed(required)))
        stats.logits_to_host += logits.crossed
        stats.verify_ms += _ms_since(t)
        required = healer.advance(required, current)
        out.commit([current])
    return current


def _begin(target: Backend, prompt: Sequence[int], request: Request, vocab: Vocabulary,
           owed: str) -> tuple[_Output, int, np.random.Generator]:
    """The start both loops share: prefill, then heal. Returns the output so far, the current
    token (not yet in the cache) and the random generator."""
    out = _Output(request, vocab, owed)
    sampling = request.sampling
    generator = _GREEDY if sampling.greedy else np.random.default_rng(sampling.seed)
    current = _prefill(target, prompt, out)
    return out, _heal(target, current, out, generator), generator


def generate_autoregressive(target: Backend, prompt: Sequence[int], request: Request,
                            vocab: Vocabulary, owed: str = "") -> Generation:
    """The baseline: one target pass per token. `owed`: the healed prompt text the output
    must start with."""
    start = time.perf_counter()
    out, current, generator = _begin(target, prompt, request, vocab, owed)
    stats, sampling = out.stats, request.sampling
    while not out.done:
        t = time.perf_counter()
        logits = _target_pass(target, [current], None, stats)
        current = logits.pick(-1, sampling, generator)
        stats.logits_to_host += logits.crossed
        stats.verify_ms += _ms_since(t)
        out.commit([current])
    return _finish(out, stats, start)


def _finish(out: _Output, stats: Stats, start: float) -> Generation:
    stats.new_tokens = len(out.tokens)
    stats.stop_reason = out.stop_reason
    stats.total_ms = _ms_since(start)
    return Generation(out.tokens, out.text[:out.cut], stats)


def generate_speculative(target: Backend, drafter: Drafter, prompt: Sequence[int], request: Request,
                         vocab: Vocabulary, max_depth: int, owed: str = "") -> Generation:
    """Draft, verify in one target pass, keep the accepted prefix plus the target's next token.
    The drafter decides how much to draft (at most `max_depth` deep) and learns from the result."""
    start = time.perf_counter()
    out, current, generator = _begin(target, prompt, request, vocab, owed)
    stats, sampling = out.stats, request.sampling
    use_tree = target.capabilities.tree and sampling.greedy
    while not out.done:
        k = min(max_depth, request.max_new_tokens - len(out.tokens))
        t = time.perf_counter()
        draft = drafter.propose(list(prompt) + out.tokens, k, sampling, generator) if k > 0 else Draft()
        if not use_tree and not draft.is_chain:
            raise ValueError("a tree drafted for a pass that verifies chains only")
        draft = _reachable(draft, out)
        stats.draft_ms += _ms_since(t)

        t = time.perf_counter()
        base = target.length
        logits = _target_pass(target, [current] + draft.tokens, draft.pass_parents(), stats)
        accepted, current = verify(draft, logits, sampling, generator)
        pass_seconds = time.perf_counter() - t  # a GPU's pass ends where verification reads its ids
        stats.logits_to_host += logits.crossed
        target.keep(base, [draft.pass_position(i) for i in [-1, *accepted]])
        stats.verify_ms += _ms_since(t)

        draft.count_in(stats, accepted)
        drafter.observe(draft, accepted, current, pass_seconds)
        out.commit([draft.tokens[i] for i in accepted] + [current])
    return _finish(out, stats, start)


def _reachable(draft: Draft, out: _Output) -> Draft:
    """The draft less the nodes the output can never reach: those after a token at which it
    would stop (a single-line suggestion ends at its newline, where lookup's matches go on into
    the next line). Verifying them would only widen the pass."""
    kept: list[int] = []
    open_: dict[int, list[int]] = {-1: []}  # the root and kept nodes whose path does not stop the output
    for i, (parent, token) in enumerate(zip(draft.parents, draft.tokens)):
        if parent in open_:
            kept.append(i)
            path = open_[parent] + [token]
            if not out.would_stop(path):
                open_[i] = path
    return draft if len(kept) == len(draft) else draft.keep(kept)
