"""The interface between decoding and a model: forward new tokens into a KV cache, roll back."""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.execution.pass_logits import PassLogits
from engine.execution.plan import STORED, ExecutionPlan

PREFILL_CHUNK = 256  # the most tokens in one prefill pass
MEASURED_CHUNK = 16  # prefill chunks at least this wide count in the measured prefill rate


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared: what calibration and decoding ask of it."""

    tree: bool = False  # `forward` verifies a token tree (parents) in one pass; else chains only
    device: str = "cpu"  # where its passes run: "cpu" or "cuda"
    # The kernels its passes can run (engine/execution/plan.py): calibration times each for
    # prefill and one-token passes and writes its choice into the plan.
    kernels: tuple[str, ...] = (STORED,)
    threads: bool = False  # it runs each pass width on the plan's thread count
    # Every pass is one call of the C decoder (engine/execution/native/): nothing to set up per pass
    # shape (no warm-up), and a pass costs the same from an empty cache.
    native: bool = False
    tile_from: int = 0  # the narrowest pass that AMX tiles take (amx.c; 0: none)
    caches: int = 1  # KV caches it keeps and switches between (`use_cache`)


class Backend(ABC):
    """A model and its KV cache.

    `tokens` mirrors what the cache holds, so callers can reuse the longest common prefix
    between requests (`sync`) and roll back rejected draft tokens (`truncate`). What it can do
    is `capabilities`; how it runs each pass is `plan`, which calibration fills (`use_plan`).
    """

    vocab_size: int
    max_len: int
    _cache = 0  # which KV cache is in use (`use_cache`)

    def __init__(self) -> None:
        self.tokens: list[int] = []
        # Threads and kernel by pass width (engine/execution/plan.py), filled in by calibration.
        self.plan = ExecutionPlan()
        # Calibration's estimate of the prefill rate (tokens/s), until this process has
        # measured its own (`prefill_rate`).
        self.prefill_estimate = float("inf")
        # Tokens and seconds of the prefill chunks `sync` ran: the real prefill rate, which
        # calibration only estimates (engine/execution/calibrate.py; from narrow passes, it errs low).
        self.prefilled = (0, 0.0)
        # The rate of the last prefill chunk: the next one is sized from it (`prefill_chunk`).
        self._last_chunk_rate: float | None = None

    @property
    def prefill_chunk(self) -> int:
        """Tokens per prefill pass in `sync`: a cancelled prefill stops after the chunk in flight,
        so it is sized to about CANCEL_WAIT_S at the last chunk's rate (calibration's estimate
        before the first). A wider chunk prefills faster (the weights' unpacking is shared by
        more tokens: 16-token chunks of the 1.5B ran at about 60 tokens/s, 48-token ones at
        100), so sizing by the last chunk's rate grows the chunks up to the wait and never
        past it, where a process's average rate would keep them as small as they started."""
        return prefill_chunk_for(self._last_chunk_rate or self.prefill_estimate)

    @property
    def last_chunk_rate(self) -> float | None:
        """Tokens per second of the last full prefill chunk (None before one)."""
        return self._last_chunk_rate

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend can do (calibration and decoding ask nothing else)."""

    @property
    def weight_bytes(self) -> int | None:
        """Bytes read from memory per pass (for the achieved-bandwidth figure); None: unknown."""
        return None

    def cost_key(self) -> str:
        """What its pass costs depend on besides the machine, the model file and the cache size
        (the backend, the weights format, the C decoder's build): calibration is kept under it."""
        return type(self).__name__

    def memory(self, counted: set[int] | None = None) -> dict[str, int]:
        """Bytes by use (TorchLlama.memory); {} where the backend cannot say. Weights whose id
        is in `counted` (another model's, shared) are skipped; its own are added to it."""
        return {}

    def use_plan(self, plan: ExecutionPlan, final: bool = True) -> None:
        """Run passes as `plan` says from now on: a plan calibration is timing (not `final`), or
        its choice, after which the backend may free what only other plans would need."""
        self.plan = plan

    def set_prefill_estimate(self, tokens_per_s: float) -> None:
        """Size prefill chunks from this rate (calibration's estimate) until this process has
        measured its own (`prefill_rate`)."""
        self.prefill_estimate = tokens_per_s

    def time_prefill(self, width: int) -> float:
        """Seconds per token of a prefill pass of `width` tokens with the plan's prefill kernel,
        past the cached tokens (not kept): calibration times each of `capabilities.kernels`
        with it, so a backend that declares more than one implements it."""
        raise NotImplementedError(f"{type(self).__name__} has one kernel: nothing to time")

    @abstractmethod
    def forward(
        self, tokens: Sequence[int], parents: Sequence[int] | None = None, logits: bool = True
    ) -> np.ndarray | None:
        """Append `tokens` to the cache; return float32 logits [len(tokens), vocab] as a numpy
        array (None with logits=False: a prefill skips the output head).

        With `parents` (tree mode) token i attends to the cache, its ancestors and itself;
        parents[i] is the index of its parent among `tokens`, or -1 for the cache's last token.
        """

    def score(self, tokens: Sequence[int], parents: Sequence[int] | None = None) -> PassLogits:
        """`forward`, with the logits left where the pass computed them: decoding verifies
        drafts through this (engine/verification.py), and only token ids and a few
        probabilities cross to the host. A GPU backend overrides it."""
        return PassLogits(self.forward(tokens, parents))

    def keep_head_rows(self, ids: np.ndarray) -> bool:
        """Compute logits for the token `ids` only (sorted; -inf for the rest) where the backend
        can, so the output head reads a fraction of its rows. False: it computes every row."""
        return False

    def set_threads(self, n: int) -> None:
        """How many threads passes the execution plan does not size run on (CPU backends)."""

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

    def use_cache(self, cache: int) -> None:
        """Run passes on KV cache number `cache` (below `capabilities.caches`) from now on; the
        others keep what they hold."""
        if cache != 0:
            raise NotImplementedError(f"{type(self).__name__} keeps one KV cache")

    def tokens_in(self, cache: int) -> list[int]:
        """The tokens KV cache number `cache` holds."""
        return self.tokens if cache == 0 else []

    def resumable(self, cache: int) -> list[int]:
        """The tokens after those KV cache number `cache` holds that a cancelled prefill pass left
        part done there: a prefill that starts with them goes on from where it stopped."""
        return []

    def sync(self, prompt: Sequence[int], cancel: threading.Event | None = None) -> int:
        """Make the cache hold exactly `prompt`, reusing the longest common prefix.

        Returns how many positions were reused (the rest were prefilled). When `cancel` is set
        the prefill stops after the chunk in flight (or within it: `prefill_pass`); the cache then
        holds a prefix of `prompt`. Without `cancel` it runs in the widest chunks."""
        common = common_prefix(self.tokens, prompt)
        self.truncate(common)
        rest = list(prompt[common:])
        while rest:
            if cancel is not None and cancel.is_set():
                break
            # short chunks only where a request may cancel the prefill: nothing waits otherwise
            size = self.prefill_chunk if cancel is not None else PREFILL_CHUNK
            chunk, rest, start = rest[:size], rest[size:], time.perf_counter()
            resumed = common_prefix(self.resumable(self._cache), chunk) > 0
            if not self.prefill_pass(chunk, cancel):
                break
            if len(chunk) >= MEASURED_CHUNK and not resumed:  # a resumed chunk's time is a part's
                took = time.perf_counter() - start
                tokens, seconds = self.prefilled
                self.prefilled = (tokens + len(chunk), seconds + took)
                if len(chunk) == size:  # a prompt's short tail says little of a full chunk's rate
                    self._last_chunk_rate = size / took
        return common

    def prefill_pass(self, tokens: Sequence[int], cancel: threading.Event | None) -> bool:
        """Append `tokens` to the cache without logits, as one pass of `sync`; False where
        `cancel` stopped the pass (nothing appended). This one always runs whole."""
        self.forward(tokens, logits=False)
        return True

    def prefill_rate(self) -> float | None:
        """Tokens per second of this process's prefills, once they add up to a few chunks."""
        tokens, seconds = self.prefilled
        return tokens / seconds if tokens >= 4 * MEASURED_CHUNK else None


def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node (0 for children of the root); parents must precede children."""
    depth: list[int] = []
    for i, p in enumerate(parents):
        if p >= i:
            raise ValueError("token tree parents must come before their children")
        depth.append(0 if p < 0 else depth[p] + 1)
    return depth


def pass_positions(start: int, n: int, parents: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Rotary positions [n] of a pass's tokens at cache position `start`, and which of them each
    may attend to ([n, n] bool: itself and its ancestors): a chain, or a token tree given by its
    parents."""
    if parents is None:
        return np.arange(start, start + n), np.tri(n, dtype=bool)
    local = np.eye(n, dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            local[i] |= local[p]
    return start + np.asarray(tree_depths(parents), dtype=np.int64), local


class ArrayCache(Backend):
    """A backend whose KV cache is two arrays [layers, kv heads, positions, head dim] (numpy or
    torch) and that may record each position's final hidden state (`features`, or None):
    rolling back is forgetting tokens, keeping a tree path is moving its rows together."""

    k_cache: np.ndarray
    v_cache: np.ndarray
    features: np.ndarray | None
    _other_caches: dict | None = None  # the others: number -> (tokens, k, v, features)

    def use_cache(self, cache: int) -> None:
        """Switch the arrays (made on first use, empty: a cache's untouched pages cost no
        memory) and `tokens`; the weights are shared."""
        if cache == self._cache:
            return
        if not 0 <= cache < self.capabilities.caches:
            raise ValueError(f"{type(self).__name__} keeps {self.capabilities.caches} KV caches, not {cache + 1}")
        others = self._other_caches = self._other_caches or {}
        others[self._cache] = (self.tokens, self.k_cache, self.v_cache, self.features)
        if cache not in others:
            others[cache] = ([], _empty_like(self.k_cache), _empty_like(self.v_cache),
                             None if self.features is None else _empty_like(self.features))
        self.tokens, self.k_cache, self.v_cache, self.features = others.pop(cache)
        self._cache = cache
        self._cache_moved()

    def tokens_in(self, cache: int) -> list[int]:
        if cache == self._cache:
            return self.tokens
        return (self._other_caches or {}).get(cache, ([],))[0]

    def _cache_moved(self) -> None:
        """The arrays are others now: what holds their addresses (the C decoder) follows."""

    def kv_cache_bytes(self) -> int:
        """Bytes of every KV cache it has made (a cache's pages cost memory once written)."""
        arrays = [self.k_cache, self.v_cache] + [a for c in (self._other_caches or {}).values() for a in c[1:3]]
        return sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays)

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def _compact(self, start: int, offsets: Sequence[int]) -> None:
        idx = [start + o for o in offsets]  # a list indexes numpy arrays and torch tensors alike
        end = start + len(offsets)
        self.k_cache[:, :, start:end] = self.k_cache[:, :, idx]
        self.v_cache[:, :, start:end] = self.v_cache[:, :, idx]
        if self.features is not None:
            self.features[start:end] = self.features[idx]
        self.tokens[start:] = [self.tokens[start + o] for o in offsets]


def _empty_like(t):
    """An uninitialised array like `t`, numpy or torch."""
    return np.empty_like(t) if isinstance(t, np.ndarray) else t.new_empty(t.shape)


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
    """Tokens per prefill pass at a prefill rate: a chunk of about CANCEL_WAIT_S, in whole
    groups of MEASURED_CHUNK (the AMX route multiplies 16 tokens per tile: a 29-token chunk
    pays for 32), 16 at the least (a 1.5B model on two cores prefills 60-120 tokens/s; at
    29-token chunks 70-95, at 48 85-110), PREFILL_CHUNK at the most."""
    tokens = int(min(tokens_per_s * CANCEL_WAIT_S, PREFILL_CHUNK)) // MEASURED_CHUNK * MEASURED_CHUNK
    return max(MEASURED_CHUNK, tokens)
