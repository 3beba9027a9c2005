"""In a fill-in-the-middle prompt (prefix, suffix, then the middle to write) the middle often
runs into the suffix: a model asked for more than the gap holds writes the suffix's text again
(in the bench 11 of 48 real-pair completions copied all 32 tokens of it, and about half
started with its first token). While the output so far is the start of the suffix, the rest
of the suffix is a candidate; no suffix automaton finds it, since the output's first tokens
follow the middle token, which occurs nowhere else."""
from __future__ import annotations

from collections.abc import Sequence


class SuffixAnchor:
    def __init__(self, suffix_token: int, middle_token: int):
        self.suffix_token, self.middle_token = suffix_token, middle_token
        self._span: tuple[int, int] | None = None  # the suffix's text: context[start:end]

    def _find(self, context: Sequence[int]) -> tuple[int, int] | None:
        tokens = list(context)
        try:
            end = len(tokens) - 1 - tokens[::-1].index(self.middle_token)
            start = end - 1 - tokens[end - 1::-1].index(self.suffix_token)
        except ValueError:
            return None
        return start + 1, end

    def continuation(self, context: Sequence[int], kept: int, depth: int) -> tuple[int, list[int]]:
        """How many tokens the anchored match spans (the middle token and the output so far),
        and up to `depth` suffix tokens that would follow; (0, []) where the output left the
        suffix. `kept`: how many context tokens are unchanged since the last call."""
        if self._span is None or kept <= self._span[1]:
            self._span = self._find(context)
        if self._span is None:
            return 0, []
        start, end = self._span
        written = list(context[end + 1:])
        if len(written) >= end - start or list(context[start:start + len(written)]) != written:
            return 0, []
        return len(written) + 1, list(context[start + len(written):min(end, start + len(written) + depth)])
