"""The interface between decoding and a model: forward new tokens into a KV cache, roll back."""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

PREFILL_CHUNK = 256  # the most tokens in one prefill pass
MEASURED_CHUNK = 16  # prefill chunks at least this wide count in the measured prefill rate


class Backend(ABC):
    """A model and its KV cache.

    `tokens` mirrors what the cache holds, so callers can reuse the longest common prefix
    between requests (`sync`) and roll back rejected draft tokens (`truncate`).
    """

    vocab_size: int
    max_len: int
    supports_tree: bool = False  # can `forward` take a token tree (parents) in one pass?
    # Tokens per prefill pass in `sync`: a cancelled prefill stops after the chunk in flight, so
    # the engine sizes it to this machine's measured prefill rate (`prefill_chunk_for`).
    prefill_chunk: int = PREFILL_CHUNK

    def __init__(self) -> None:
        self.tokens: list[int] = []
        # Tokens and seconds of the prefill chunks `sync` ran: the real prefill rate, which
        # calibration only estimates (engine/calibrate.py; from narrow passes, it errs low).
        self.prefilled = (0, 0.0)

    @property
    def length(self) -> int:
        return len(self.tokens)

    @abstractmethod
    def forward(
        self, tokens: Sequence[int], parents: Sequence[int] | None = None, logits: bool = True
    ) -> torch.Tensor | None:
        """Append `tokens` to the cache; return float32 logits [len(tokens), vocab]
        (None with logits=False: a prefill skips the output head).

        With `parents` (tree mode) token i attends to the cache, its ancestors and itself;
        parents[i] is the index of its parent among `tokens`, or -1 for the cache's last token.
        """

    @abstractmethod
    def truncate(self, n: int) -> None:
        """Keep only the first `n` cached positions."""

    def keep(self, start: int, offsets: Sequence[int]) -> None:
        """After a tree pass at cache position `start`, keep the nodes at `offsets` (a root-to-leaf
        path, in order) contiguously and drop the rest."""
        if list(offsets) == list(range(len(offsets))):
            self.truncate(start + len(offsets))
        else:
            self._compact(start, offsets)

    def _compact(self, start: int, offsets: Sequence[int]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot compact a token tree")

    def cached_prefix(self, prompt: Sequence[int]) -> int:
        """How many of `prompt`'s first tokens the cache already holds."""
        return common_prefix(self.tokens, prompt)

    def sync(self, prompt: Sequence[int], cancel: threading.Event | None = None) -> int:
        """Make the cache hold exactly `prompt`, reusing the longest common prefix.

        Returns how many positions were reused (the rest were prefilled). When `cancel` is set
        the prefill stops after the chunk in flight; the cache then holds a prefix of `prompt`."""
        common = self.cached_prefix(prompt)
        self.truncate(common)
        rest = list(prompt[common:])
        for i in range(0, len(rest), self.prefill_chunk):
            if cancel is not None and cancel.is_set():
                break
            chunk, start = rest[i:i + self.prefill_chunk], time.perf_counter()
            self.forward(chunk, logits=False)
            if len(chunk) >= MEASURED_CHUNK:
                tokens, seconds = self.prefilled
                self.prefilled = (tokens + len(chunk), seconds + time.perf_counter() - start)
        return common

    def prefill_rate(self) -> float | None:
        """Tokens per second of this session's prefills, once they add up to a few chunks."""
        tokens, seconds = self.prefilled
        return tokens / seconds if tokens >= 4 * MEASURED_CHUNK else None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token sequences, compared in slices at
    C speed rather than token by token (drafting compares a 4k-token context every step)."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if list(a[low:mid]) == list(b[low:mid]):
            low = mid
        else:
            high = mid
    return low


# Long prefills in chunks bound the size of the attention scores and the logits tensor.
# A request that cancels a background prefill waits for the chunk in flight: at most about this long.
CANCEL_WAIT_S = 0.5


def prefill_chunk_for(tokens_per_s: float) -> int:
    """Tokens per prefill pass at a measured prefill rate: a chunk of about CANCEL_WAIT_S, 16 at
    the least (a 1.5B model on two cores prefills ~40 tokens/s, and its passes of 16-256 tokens
    run at the same rate), PREFILL_CHUNK at the most."""
    return max(16, min(PREFILL_CHUNK, int(tokens_per_s * CANCEL_WAIT_S)))
