"""A suffix automaton over token strings, with live occurrence counts (SAM-Decoding, Hu et al. 2024).

Every substring of the strings added is one path from the root; a state is a class of substrings
that end at the same positions. Three operations drafting needs, each O(1) amortized:

- `extend(last, token)`: append a token to a string (a document, the context, an output).
- `step(state, matched, token)`: the longest suffix of the text read so far that occurs in
  the strings, updated for one more token (matching statistics; suffix links on a mismatch).
- `children(state)`: the tokens that followed that suffix, with how often: the continuations.

Strings can be taken out again (`retract` each position): counts drop, and a state whose count
is 0 no longer matches or continues anything. Its memory stays until the owner rebuilds the
automaton from the live strings (engine/drafters/corpus.py); re-adding text the automaton has
seen (a file saved again with a small edit) reuses its states.

Memory: about 1.4 states and 2.1 transitions per token of code; with typed arrays and a dict
only for states with more than one transition, about 120 bytes per token (measured on the
standard library tokenized for Qwen2.5-Coder).
"""
from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator

ROOT = 0


class SuffixAutomaton:
    def __init__(self) -> None:
        self.length = array("i", [0])  # longest string of each state
        self.link = array("i", [-1])  # suffix link: the state of the longest shorter suffix
        self.count = array("i", [0])  # live end positions of the state's strings
        self.recent = array("i", [0])  # when a position was last added to it (ties go to the newest)
        # Most states have one transition: kept in two arrays; the rest in a dict per state.
        self.first_token = array("i", [-1])
        self.first_target = array("i", [-1])
        self.more: dict[int, dict[int, int]] = {}
        self.clock = 0  # advances with every change of a count
        self._top: dict[int, tuple[int, list[tuple[int, int]]]] = {}  # top_children, until the clock moves
        self._top_clock = 0

    @property
    def states(self) -> int:
        return len(self.length)

    # --- transitions ----------------------------------------------------------------------
    def target(self, state: int, token: int) -> int:
        """Where `token` leads from `state` (-1: nowhere), live or not."""
        if self.first_token[state] == token:
            return self.first_target[state]
        more = self.more.get(state)
        return -1 if more is None else more.get(token, -1)

    def _set(self, state: int, token: int, target: int) -> None:
        first = self.first_token[state]
        if first == -1 or first == token:
            self.first_token[state] = token
            self.first_target[state] = target
        elif (more := self.more.get(state)) is None:
            self.more[state] = {token: target}
        else:
            more[token] = target

    def transitions(self, state: int) -> Iterator[tuple[int, int]]:
        """(token, target) of every transition out of `state`, live or not."""
        if self.first_token[state] != -1:
            yield self.first_token[state], self.first_target[state]
        more = self.more.get(state)
        if more is not None:
            yield from more.items()

    def children(self, state: int) -> list[tuple[int, int]]:
        """(token, target) of the live transitions: what followed the state's strings."""
        count = self.count
        return [(t, s) for t, s in self.transitions(state) if count[s] > 0]

    def top_children(self, state: int, n: int) -> list[tuple[int, int]]:
        """Up to `n` live continuations: the one seen last first (in a prompt that is the
        nearest occurrence), then the most frequent others. Cached until the automaton
        changes: files change far less often than drafting reads them."""
        if self._top_clock != self.clock:
            self._top, self._top_clock = {}, self.clock
        cached = self._top.get(state)
        if cached is not None and cached[0] >= n:
            return cached[1][:n]
        children = self.children(state)
        if len(children) > 1:
            count, recent = self.count, self.recent
            newest = max(children, key=lambda c: recent[c[1]])
            others = heapq.nlargest(n - 1, (c for c in children if c is not newest),
                                    key=lambda c: (count[c[1]], recent[c[1]]))
            children = [newest, *others]
        self._top[state] = (n, children)
        return children

    # --- building -------------------------------------------------------------------------
    def _new(self, length: int, link: int, copy_of: int = -1) -> int:
        self.length.append(length)
        self.link.append(link)
        if copy_of < 0:
            self.count.append(0)
            self.recent.append(0)
            self.first_token.append(-1)
            self.first_target.append(-1)
        else:
            self.count.append(self.count[copy_of])
            self.recent.append(self.recent[copy_of])
            self.first_token.append(self.first_token[copy_of])
            self.first_target.append(self.first_target[copy_of])
            if (more := self.more.get(copy_of)) is not None:
                self.more[len(self.length) - 1] = dict(more)
        return len(self.length) - 1

    def _clone(self, p: int, q: int, token: int) -> int:
        """Split q so that the strings of length <= length[p] + 1 get a state of their own."""
        clone = self._new(self.length[p] + 1, self.link[q], copy_of=q)
        while p != -1 and self.target(p, token) == q:
            self._set(p, token, clone)
            p = self.link[p]
        self.link[q] = clone
        return clone

    def extend(self, last: int, token: int) -> int:
        """Append `token` to the string whose whole text is `last`'s longest string (ROOT for a
        new string); returns the state of the longer string. Generalized: any number of strings,
        sharing states, in any order (the case where the transition exists already)."""
        length, link = self.length, self.link
        q = self.target(last, token)
        if q != -1:
            state = q if length[q] == length[last] + 1 else self._clone(last, q, token)
        else:
            state = self._new(length[last] + 1, ROOT)
            p = last
            while p != -1 and self.target(p, token) == -1:
                self._set(p, token, state)
                p = link[p]
            if p != -1:
                q = self.target(p, token)
                link[state] = q if length[p] + 1 == length[q] else self._clone(p, q, token)
        self._count(state, 1)
        return state

    def _count(self, state: int, delta: int) -> None:
        """A position was added to (or taken from) `state`'s strings and all their suffixes."""
        self.clock += 1
        count, link, recent, clock = self.count, self.link, self.recent, self.clock
        while state > ROOT:
            count[state] += delta
            if delta > 0:
                recent[state] = clock
            state = link[state]

    def retract(self, state: int) -> None:
        """Take one end position away from `state` (the state of a string's prefix) and its
        suffixes: undoes the count of one `extend`."""
        self._count(state, -1)

    def add(self, tokens: list[int] | tuple[int, ...]) -> None:
        """Add a whole string."""
        last = ROOT
        for token in tokens:
            last = self.extend(last, token)

    def remove(self, tokens: list[int] | tuple[int, ...]) -> None:
        """Take out a string added before: each of its prefixes loses that end position."""
        state = ROOT
        for token in tokens:
            state = self.target(state, token)
            self.retract(state)

    # --- matching -------------------------------------------------------------------------
    def step(self, state: int, matched: int, token: int) -> tuple[int, int]:
        """The longest suffix of (text + token) with a live occurrence, from that of `text`
        (`state`, `matched` tokens long)."""
        count, link, length = self.count, self.link, self.length
        while True:
            nxt = self.target(state, token)
            if nxt != -1 and count[nxt] > 0:
                return nxt, matched + 1
            if state == ROOT:
                return ROOT, 0
            state = link[state]
            matched = length[state]

    def match(self, tokens: list[int] | tuple[int, ...]) -> tuple[int, int]:
        """`step` over all of `tokens` from the root."""
        state, matched = ROOT, 0
        for token in tokens:
            state, matched = self.step(state, matched, token)
        return state, matched
