"""Named token strings (files, outputs) in one suffix automaton, within a memory budget.

Setting a string that exists replaces it; the least recently set strings are dropped once the
live tokens exceed `max_tokens`. A removed string's counts are taken out at once (it no longer
matches), and its states stay until dead states outnumber live ones enough to pay for a rebuild
from the live strings, which costs about 3 microseconds per token. So memory stays within about
1.8x the automaton of `max_tokens` tokens (~120 bytes per token) plus the strings (4 bytes per token).
"""
from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

from engine.drafters.suffix_automaton import SuffixAutomaton

# Rebuild once the automaton holds this many states per live token (about 1.4 when clean).
_REBUILD_STATES_PER_TOKEN = 2.5
_REBUILD_SLACK = 4096


class Corpus:
    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.automaton = SuffixAutomaton()
        self._strings: OrderedDict[str, array] = OrderedDict()  # least recently set first
        self.tokens = 0  # live tokens
        self.version = 0  # changes with every edit: matches found before must be redone

    def __len__(self) -> int:
        return len(self._strings)

    def __contains__(self, key: str) -> bool:
        return key in self._strings

    def set(self, key: str, tokens: Sequence[int]) -> list[str]:
        """Add or replace a string; returns the keys dropped to stay within the budget."""
        old = self._strings.get(key)
        if old is not None and len(old) == len(tokens) and old.tolist() == list(tokens):
            self._strings.move_to_end(key)
            return []
        self._drop(key)
        stored = array("i", tokens)
        self._strings[key] = stored
        self.tokens += len(stored)
        self.automaton.add(stored)
        dropped = []
        while self.tokens > self.max_tokens and len(self._strings) > 1:
            dropped.append(next(iter(self._strings)))
            self._drop(dropped[-1])
        self._maybe_rebuild()
        self.version += 1
        return dropped

    def remove(self, key: str) -> None:
        if key in self._strings:
            self._drop(key)
            self._maybe_rebuild()
            self.version += 1

    def _drop(self, key: str) -> None:
        old = self._strings.pop(key, None)
        if old is not None:
            self.automaton.remove(old)
            self.tokens -= len(old)

    def _maybe_rebuild(self) -> None:
        if self.automaton.states > _REBUILD_STATES_PER_TOKEN * self.tokens + _REBUILD_SLACK:
            self.automaton = SuffixAutomaton()
            for tokens in self._strings.values():
                self.automaton.add(tokens)
