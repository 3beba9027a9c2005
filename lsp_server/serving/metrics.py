"""Counters behind the `draftline.stats` command and the status notification."""
from __future__ import annotations

from collections import deque


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


class Metrics:
    def __init__(self, window: int = 1000) -> None:
        self.requests = 0  # inline/completion requests received
        self.generated = 0  # answered by running the model
        self.cancelled = 0  # superseded or cancelled by the client
        self.cache_hits = 0  # answered from the typed-through cache
        self.continued = 0  # answered empty at the time budget; finished in the background
        self.cold_windows = 0  # answered from a shortened window: the full one would not prefill in time
        self.prefetched = 0  # full windows prefilled where the cursor rested, before a request
        self.improved_windows = 0  # cold answers followed by one from the full window at the same spot
        self.widened_windows = 0  # cold answers followed by one from a wider window at the same spot
        self.prefetched_next = 0  # suggestions made ahead for the end of a shown one, as if accepted
        self.accepted = 0  # suggestions the client reported as taken whole
        self.partially_accepted = 0  # partial accepts (a word, a line) the client reported
        self.accepted_chars = 0  # UTF-16 code units of suggestions taken by partial accepts
        self._partial: dict[str, tuple[str, int]] = {}  # uri -> (suggestion, length taken so far)
        self.shown = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.latencies_ms: deque[float] = deque(maxlen=window)  # answered requests only
        self.last_latency_ms: float | None = None

    def answered(self, ms: float) -> None:
        self.latencies_ms.append(ms)
        self.last_latency_ms = round(ms, 1)

    def partially_accepted_at(self, uri: str, text: str, length: int) -> None:
        """The client took the first `length` units of suggestion `text` at `uri`. `length`
        counts what is taken so far (as VS Code's acceptedLength does), so a second partial
        accept of the same suggestion adds only what it took beyond the first."""
        last_text, last_length = self._partial.get(uri, ("", 0))
        before = last_length if last_text == text else 0
        self.partially_accepted += 1
        self.accepted_chars += max(0, length - before)
        self._partial[uri] = (text, max(length, before))

    @property
    def acceptance_rate(self) -> float | None:
        """Draft tokens the target accepted / drafted (speculative decoding's hit rate)."""
        return round(self.accepted_tokens / self.drafted_tokens, 4) if self.drafted_tokens else None

    def as_dict(self, state: str) -> dict:
        lat = list(self.latencies_ms)
        return {"requests": self.requests, "generated": self.generated,
                "cancelled": self.cancelled, "cacheHits": self.cache_hits, "continued": self.continued,
                "coldWindows": self.cold_windows, "improvedWindows": self.improved_windows,
                "widenedWindows": self.widened_windows,
                "prefetchedNext": self.prefetched_next,
                "prefetched": self.prefetched,
                "accepted": self.accepted, "partiallyAccepted": self.partially_accepted,
                "acceptedChars": self.accepted_chars, "shown": self.shown,
                "acceptanceRate": self.acceptance_rate, "p50Ms": _percentile(lat, 0.5),
                "p95Ms": _percentile(lat, 0.95), "lastLatencyMs": self.last_latency_ms,
                "state": state}
