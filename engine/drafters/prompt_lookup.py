"""Prompt lookup: draft the tokens that followed the last n-gram elsewhere.

Looks in the context itself first (the prompt and the output so far, most recent match first),
then in an index of other documents (open files, the workspace). The index maps each n-gram to
the latest place it occurs; a document's entries are rewritten when it changes, and entries that
a change made stale are detected at lookup time, so updates never scan other documents.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from engine.drafters.base import Draft
from engine.api import Sampling


class PromptLookup:
    def __init__(self, ngram_sizes: Sequence[int] = (4, 3, 2), max_document_tokens: int = 2_000_000,
                 context_window: int = 4096):
        self.ngram_sizes = sorted(ngram_sizes, reverse=True)  # longest match first
        self.max_document_tokens = max_document_tokens
        self.context_window = context_window
        self._docs: OrderedDict[str, np.ndarray] = OrderedDict()  # least recently set first
        self._index: dict[tuple[int, ...], tuple[str, int]] = {}  # n-gram -> (doc, end offset)
        self._lock = threading.Lock()  # documents change on the event loop, lookups run in a worker

    # --- documents ------------------------------------------------------------------------
    def set_document(self, doc_id: str, tokens: Sequence[int]) -> None:
        arr = np.asarray(tokens, dtype=np.int64)
        keys = [(tuple(arr[i - n:i].tolist()), i) for n in self.ngram_sizes for i in range(n, len(arr))]
        with self._lock:
            self._docs.pop(doc_id, None)
            self._docs[doc_id] = arr
            for key, end in keys:
                self._index[key] = (doc_id, end)
            self._evict()

    def remove_document(self, doc_id: str) -> None:
        with self._lock:
            self._docs.pop(doc_id, None)  # its index entries become stale and are skipped

    @property
    def documents(self) -> int:
        return len(self._docs)

    @property
    def document_tokens(self) -> int:
        return sum(len(d) for d in self._docs.values())

    def _evict(self) -> None:
        """Keep memory bounded: drop the least recently set documents, then stale entries."""
        while len(self._docs) > 1 and self.document_tokens > self.max_document_tokens:
            self._docs.popitem(last=False)
        if len(self._index) > 2 * len(self.ngram_sizes) * max(self.document_tokens, 1):
            self._index = {k: v for k, v in self._index.items() if self._valid(k, *v)}

    def _valid(self, key: tuple[int, ...], doc_id: str, end: int) -> bool:
        doc = self._docs.get(doc_id)
        n = len(key)
        return doc is not None and end <= len(doc) and tuple(doc[end - n:end].tolist()) == key

    # --- drafting -------------------------------------------------------------------------
    def candidates(self, context: Sequence[int], k: int, limit: int = 4) -> list[list[int]]:
        """Up to `limit` distinct continuations of length <= k, best first."""
        ctx = np.asarray(context[-self.context_window:], dtype=np.int64)
        found: list[list[int]] = []
        for n in self.ngram_sizes:
            if len(ctx) < n:
                continue
            key = ctx[-n:]
            if len(ctx) > n:
                windows = sliding_window_view(ctx[:-1], n)
                for start in np.flatnonzero((windows == key).all(axis=1))[::-1]:
                    self._add(found, ctx[start + n:start + n + k].tolist(), limit)
            key_tuple = tuple(key.tolist())
            with self._lock:
                hit = self._index.get(key_tuple)
                if hit and self._valid(key_tuple, *hit):
                    doc_id, end = hit
                    self._add(found, self._docs[doc_id][end:end + k].tolist(), limit)
            if len(found) >= limit:
                break
        return found

    @staticmethod
    def _add(found: list[list[int]], continuation: list[int], limit: int) -> None:
        if continuation and len(found) < limit and continuation not in found:
            found.append(continuation)

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                generator: torch.Generator) -> Draft:
        best = self.candidates(context, k, limit=1)
        return Draft.chain(best[0] if best else [])
