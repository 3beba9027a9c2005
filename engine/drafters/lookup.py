"""Lookup that remembers: draft what followed the longest earlier occurrence of the context's
end, in the context itself, open files, the workspace and this process's earlier outputs.

Each source is a suffix automaton (engine/drafters/suffix_automaton.py). Per decoding step a
walker per source reads the tokens the target accepted and keeps the longest suffix of the
context that occurs in that source, in O(1) amortized (SAM-Decoding). From each match the
continuations are explored best first, as SuffixDecoding's frequency-scored trees: a
continuation's chance is the share of the match's occurrences it followed, calibrated by the
match length and source (how often such tokens were accepted, engine/draft_length.py), times
its parent's chance. All sources grow one token tree, so the longest, most frequent
continuations come first whichever source has them. In a fill-in-the-middle prompt the rest of
the suffix is a candidate too, while the output copies it (engine/drafters/fim_suffix.py).

Memory is bounded per source (`Corpus`: least recently set files or outputs are dropped past a
token budget): see BUDGETS.
"""
from __future__ import annotations

import heapq
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from engine.draft_length import FIM_SUFFIX, NEWEST, Acceptance, calibrated, match_bucket
from engine.drafters.base import NodeInfo
from engine.drafters.context_index import ContextIndex
from engine.drafters.corpus import Corpus
from engine.drafters.fim_suffix import SuffixAnchor
from engine.drafters.suffix_automaton import ROOT, SuffixAutomaton
from engine.drafters.tree import TokenTree

# Live tokens kept per source: about 120 bytes each in the automaton, 50 MB for all three
# full; removed text is reclaimed by a rebuild before the automaton reaches 1.8x that.
BUDGETS = {"document": 128_000, "workspace": 256_000, "history": 32_000}
HISTORY_CONTEXT = 64  # tokens before a remembered output kept with it, so matches can start there
_RESYNC = 64  # a walker that lost track re-reads this many of the context's last tokens
_BRANCHES = 3  # continuations explored per matched state: the newest, then the most frequent


@dataclass
class _Walker:
    state: int = ROOT
    matched: int = 0
    seen: int = 0  # context tokens read
    version: int = -1  # of the corpus when it last read


class Lookup:
    def __init__(self, acceptance: Acceptance | None = None, budgets: dict[str, int] | None = None,
                 fim: tuple[int, int] | None = None):
        """`fim`: the tokenizer's fill-in-the-middle suffix and middle tokens, if it has them."""
        self.acceptance = acceptance or Acceptance()
        self.context = ContextIndex()
        self.anchor = SuffixAnchor(*fim) if fim else None
        self._kept = 0  # context tokens unchanged since the previous step
        self.corpora = {source: Corpus(tokens) for source, tokens in (budgets or BUDGETS).items()}
        self._walkers = {source: _Walker() for source in self.corpora}
        self._where: dict[str, str] = {}  # document id -> its source
        self._outputs = 0
        self._lock = threading.Lock()  # documents change on the event loop, drafting runs in a worker

    # --- what it remembers ----------------------------------------------------------------
    def set_document(self, doc_id: str, tokens: Sequence[int], source: str = "document") -> None:
        """An open file ("document") or a workspace file ("workspace"), new or changed."""
        if source not in ("document", "workspace"):
            raise ValueError(f"unknown document source {source!r}")
        with self._lock:
            old = self._where.get(doc_id)
            if old is not None and old != source:
                self.corpora[old].remove(doc_id)
            for dropped in self.corpora[source].set(doc_id, tokens):
                del self._where[dropped]
            self._where[doc_id] = source

    def remove_document(self, doc_id: str) -> None:
        with self._lock:
            source = self._where.pop(doc_id, None)
            if source is not None:
                self.corpora[source].remove(doc_id)

    def remember(self, tokens: Sequence[int]) -> None:
        """An output of this process (generated or accepted), with the tokens before it."""
        with self._lock:
            self._outputs += 1
            self.corpora["history"].set(f"output {self._outputs}", tokens)

    @property
    def documents(self) -> int:
        return len(self._where)

    # --- drafting -------------------------------------------------------------------------
    def prefill(self, context: Sequence[int]) -> None:
        """Read a new prompt now (out of the timed path), as the KV caches do."""
        with self._lock:
            self._follow(context)

    def _follow(self, context: Sequence[int]) -> list[tuple[str, SuffixAutomaton, int, int, int]]:
        """Update every match for `context`: (source, automaton, state, matched, occurrences
        to leave out) per source with a match, the context's own first."""
        common = self._kept = self.context.sync(context)
        state, matched = self.context.match()
        found = [("document", self.context.automaton, state, matched, 1)] if matched else []
        for source, corpus in self.corpora.items():
            w = self._walkers[source]
            automaton = corpus.automaton
            if w.version != corpus.version or w.seen > common or len(context) - w.seen > _RESYNC:
                start = max(0, len(context) - _RESYNC)
                w.state, w.matched = automaton.match(context[start:])
            else:
                for token in context[w.seen:]:
                    w.state, w.matched = automaton.step(w.state, w.matched, token)
            w.seen, w.version = len(context), corpus.version
            if w.matched:
                found.append((source, automaton, w.state, w.matched, 0))
        return found

    def grow(self, tree: TokenTree, context: Sequence[int], depth: int, max_nodes: int,
             floor: float = 0.01) -> None:
        """Add to `tree` the most likely continuations of `context` from every source, best
        first, up to `depth` tokens deep and `max_nodes` nodes, none less likely than `floor`."""
        if depth < 1 or not context:
            return
        with self._lock:
            heap: list = []
            serial = 0
            for source, automaton, state, matched, exclude in self._follow(context):
                serial = self._push(heap, serial, -1, 1.0, source, automaton, state, matched, 0,
                                    exclude, floor)
            if self.anchor is not None:
                self._add_suffix(tree, context, depth, floor)
            added = 0
            while heap and added < max_nodes:
                negative, _, parent, token, info, automaton, state, matched, level = heapq.heappop(heap)
                chance = -negative
                if chance < floor:
                    break
                node = tree.add(parent, token, chance, info)
                added += 1
                if level + 1 < depth and added < max_nodes:  # room for its children
                    serial = self._push(heap, serial, node, chance, info.source, automaton, state,
                                        matched, level + 1, 0, floor)

    def _add_suffix(self, tree: TokenTree, context: Sequence[int], depth: int, floor: float) -> None:
        """The rest of a fill-in-the-middle suffix the output has copied so far, as a chain."""
        matched, rest = self.anchor.continuation(context, self._kept, depth)
        parent, chance = -1, 1.0
        for i, token in enumerate(rest):
            info = NodeInfo("document", FIM_SUFFIX + match_bucket(matched + i), 1.0)
            chance *= self.acceptance.chance(info.source, info.bucket, info.score)
            if chance < floor:
                break
            parent = tree.add(parent, token, chance, info)

    def _push(self, heap: list, serial: int, parent: int, chance: float, source: str,
              automaton: SuffixAutomaton, state: int, matched: int, level: int, exclude: int,
              floor: float) -> int:
        """Queue the most frequent continuations of `state` (the match, `matched` tokens long)."""
        total = automaton.count[state] - exclude
        bucket = match_bucket(matched)
        factor = self.acceptance.factor(source, bucket)
        newest_factor = self.acceptance.factor(source, bucket + NEWEST)
        if total <= 0 or chance * max(factor, newest_factor) < floor:
            return serial  # not even a certain continuation would do
        children = automaton.top_children(state, _BRANCHES)
        count = automaton.count
        for i, (token, child) in enumerate(children):
            # Among several, the continuation seen last is its own kind of guess (the nearest
            # occurrence: a fill-in-the-middle suffix, the line just written), calibrated apart.
            if i == 0 and len(children) > 1:
                info, p = NodeInfo(source, bucket + NEWEST, 1.0), chance * calibrated(1.0, newest_factor)
            else:
                score = count[child] / total
                info, p = NodeInfo(source, bucket, score), chance * calibrated(score, factor)
            heapq.heappush(heap, (-p, serial, parent, token, info, automaton, child, matched + 1, level))
            serial += 1
        return serial
