"""The context (prompt + output so far) in a suffix automaton that follows it as the KV cache
does: a new request keeps the common prefix with the last one, drops the rest and appends its
own tokens; each decoding step appends the tokens the target accepted.

Its match is the longest suffix of the context that also occurs earlier in it: on the suffix
link path from the whole context's state, the first state whose strings end at two or more
live positions (one of them is the end itself).
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.execution.backends.base import common_prefix
from engine.drafters.suffix_automaton import ROOT, SuffixAutomaton

_REBUILD_STATES_PER_TOKEN = 4.0
_REBUILD_SLACK = 4096


class ContextIndex:
    def __init__(self) -> None:
        self.automaton = SuffixAutomaton()
        self.tokens: list[int] = []
        self._prefix_states = [ROOT]  # the state of tokens[:i], for i = 0..len

    def sync(self, context: Sequence[int]) -> int:
        """Hold exactly `context`; returns how many tokens were kept from before."""
        common = common_prefix(self.tokens, context)
        retracted = len(self.tokens) > common
        while len(self.tokens) > common:  # undo the positions past the common prefix
            self.tokens.pop()
            self.automaton.retract(self._prefix_states.pop())
        # Retracted positions leave their states behind: rebuilt when they pile up, only at a
        # new request's first sync (its prompt is read before the timed drafting, where
        # growing by a few tokens a pass never piles them up).
        if retracted and self.automaton.states > _REBUILD_STATES_PER_TOKEN * len(context) + _REBUILD_SLACK:
            self.automaton, self.tokens, self._prefix_states = SuffixAutomaton(), [], [ROOT]
            common = 0
        for token in context[len(self.tokens):]:
            self._prefix_states.append(self.automaton.extend(self._prefix_states[-1], token))
            self.tokens.append(token)
        return common

    def match(self) -> tuple[int, int]:
        """(state, length) of the longest suffix that occurred before; (ROOT, 0) if none."""
        count, link = self.automaton.count, self.automaton.link
        state = self._prefix_states[-1]
        while state != ROOT and count[state] < 2:
            state = link[state]
        return state, self.automaton.length[state]
