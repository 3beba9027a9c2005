"""Passes whose shapes do not depend on the cache's length, and one replayable pass per width.

A static-cache pass (TorchLlama with `StaticCache`) takes its inputs as tensors: the token ids,
their rotary positions, which of the pass's tokens each may attend to, and the cache position
of its first token. It writes its keys and values to the rows those tensors name (index_copy_)
and attends over the whole preallocated cache under a mask built from them on the device. So
every pass of one width runs the same kernels on the same shapes and addresses, whatever the
cache holds, and a CUDA graph captured once replays it: on a GPU an eager pass is bound by
launching its kernels, not by reading the weights (docs/gpu.md).

`PassGraphs` keeps, per KV cache and width bucket, the static input buffers and the pass run
on them: on CUDA a captured graph, elsewhere the same function called on the same buffers. The
CPU suite runs the capture code too, with `StandInGraphs` for CUDA's: the same warm-ups on an
idle pass, then a "graph" that reruns the pass into the output buffer its capture returned. A pass of n tokens runs in the narrowest bucket that holds it,
padded. The padding tokens attend only to the cache and to themselves, so no real token sees
them; they write cache rows past the pass, which no pass reads before writing them again;
their logits are dropped. A pass wider than every bucket (a prefill chunk) runs uncaptured on
inputs of its own width.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.errors import EngineError

log = logging.getLogger("draftline")

# The widths decoding verifies: powers of two, and 33, Engine.MAX_NODES drafted tokens and
# the current one (a test keeps the two in step). A 9-token pass pays for 16, which on a GPU
# costs what 9 cost: its passes are flat up to 16 tokens and beyond.
PASS_WIDTHS = (1, 2, 4, 8, 16, 33)
# Runs of a captured pass before capture: kernels choose their algorithms on first use, and
# that must not happen inside the graph.
WARM_UPS = 2
# The share of the free device memory the fixed KV caches may take; the rest is for each
# graph's activations and a draft model loaded after the target.
CACHE_SHARE = 0.5
MIN_POSITIONS = 256  # a cache shorter than this holds no useful prompt


@dataclass(frozen=True)
class StaticCache:
    """How a TorchLlama runs its static-cache passes."""

    widths: tuple[int, ...] = PASS_WIDTHS  # the buckets; () runs every pass at its own width
    capture: bool = True  # capture each bucket's pass as a CUDA graph, where the device is CUDA
    stand_in: bool = False  # elsewhere, capture with StandInGraphs (the capture code's dry run)
    # bytes free for the caches; None asks the device (tests give a figure)
    free_bytes: int | None = None


def cache_positions(wanted: int, bytes_per_position: int, free_bytes: int, slack: int) -> int:
    """The most positions, at most `wanted`, whose caches (with `slack` rows more, where padded
    passes write) fit in CACHE_SHARE of `free_bytes`. Fewer than wanted is said in one line;
    fewer than MIN_POSITIONS is an error."""
    fit = int(free_bytes * CACHE_SHARE) // bytes_per_position - slack
    if fit >= wanted:
        return wanted
    if fit < MIN_POSITIONS:
        raise EngineError(f"a static KV cache of {MIN_POSITIONS} positions needs "
                          f"{(MIN_POSITIONS + slack) * bytes_per_position / 2**20:.0f} MiB; "
                          f"{free_bytes / 2**20:.0f} MiB are free")
    log.warning("static KV cache: %d positions fit in %.0f%% of the %.2f GiB free, not the %d asked: "
                "contexts are capped at %d", fit, 100 * CACHE_SHARE, free_bytes / 2**30, wanted, fit)
    return fit


class PassInputs:
    """One pass's inputs as views of one int64 buffer on the device, so that the host writes
    them in one copy: ids [w], rotary positions [w], the pass's own mask [w, w] (1: may attend)
    and `start`, the cache position of its first token [1]."""

    def __init__(self, width: int, device: torch.device):
        self.width = width
        self.packed = torch.zeros(width * (width + 2) + 1, dtype=torch.long, device=device)
        self.ids = self.packed[:width]
        self.positions = self.packed[width:2 * width]
        self.local = self.packed[2 * width:-1].view(width, width)
        self.start = self.packed[-1:]
        self._host = np.zeros(self.packed.shape, dtype=np.int64)

    def write(self, tokens: Sequence[int], positions: np.ndarray, local: np.ndarray, start: int) -> None:
        """Copy a pass of len(tokens) <= width in, padded: padding tokens are id 0 at rotary
        position 0 and attend to themselves (and, as every token, to the cache before `start`)."""
        w, n = self.width, len(tokens)
        host = self._host
        host[:] = 0
        host[:n] = tokens
        host[w:w + n] = positions
        mask = host[2 * w:-1].reshape(w, w)
        mask[:n, :n] = local
        mask[range(n, w), range(n, w)] = 1
        host[-1] = start
        self.packed.copy_(torch.from_numpy(host))


def attention_bias(inputs: PassInputs, rows: torch.Tensor, columns: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[w, len(columns)]: 0 where a pass token may attend to a cache row (one before `start`, or
    a row of the pass its mask allows), -inf elsewhere; made on the device. `rows`: the cache
    rows the pass writes (start + 0..w-1); `columns`: 0..len(cache)-1."""
    w = inputs.width
    allowed = (columns < inputs.start).expand(w, -1).clone()
    allowed.scatter_(1, rows.expand(w, w), inputs.local.bool())
    return torch.zeros(allowed.shape, dtype=dtype, device=columns.device).masked_fill_(~allowed, float("-inf"))


Run = Callable[[PassInputs, bool], "torch.Tensor | None"]
Replay = Callable[[], torch.Tensor]


class CudaGraphs:
    """Captures a pass as a CUDA graph; replaying it refills the output buffer it returned."""

    def capture(self, run: Replay) -> Replay:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-ups off the default stream, as capture requires
            for _ in range(WARM_UPS):
                run()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay


class StandInGraphs:
    """CudaGraphs' stand-in where there is no CUDA: the same warm-ups, and a replay that reruns
    the pass and copies its output into the buffer the capture returned, as a graph's does."""

    def capture(self, run: Replay) -> Replay:
        for _ in range(WARM_UPS):
            run()
        out = run()

        def replay() -> torch.Tensor:
            return out.copy_(run())

        return replay


class _Bucket:
    """A width's static inputs and its pass: captured, or the function itself."""

    def __init__(self, run: Run, inputs: PassInputs, graphs: CudaGraphs | StandInGraphs | None, idle_start: int):
        self.inputs = inputs
        self._run = run
        self._replay: Replay | None = None
        if graphs is not None:
            # captured on an idle pass, whose cache rows (from `idle_start`, past every
            # position a context reaches) nothing reads
            w = inputs.width
            inputs.write([0] * w, np.arange(w), np.tri(w, dtype=np.int64), idle_start)
            self._replay = graphs.capture(lambda: run(inputs, True))

    @property
    def captured(self) -> bool:
        return self._replay is not None

    def replay(self, n: int) -> torch.Tensor:
        """The logits of the first n tokens of the pass the inputs hold. A captured pass's
        output buffer is its own, refilled by its next replay: the rows returned are a copy."""
        if self._replay is None:
            return self._run(self.inputs, True)[:n]
        return self._replay()[:n].clone()


class PassGraphs:
    """Static-cache passes bucketed by width. `run(inputs, logits)` is the model's pass over
    PassInputs; `idle_start` a cache position past every context, with a bucket's width of
    rows behind it, where captures write. A bucket is made (captured) at its first pass: a
    loading engine's calibration runs every width, so the graphs are captured at load."""

    def __init__(self, run: Run, device: torch.device, static: StaticCache, idle_start: int):
        self.device, self.widths = device, tuple(sorted(static.widths))
        self.graphs: CudaGraphs | StandInGraphs | None = None
        if static.capture and device.type == "cuda":
            self.graphs = CudaGraphs()
        elif static.stand_in:
            self.graphs = StandInGraphs()
        self._run, self._idle_start = run, idle_start
        self._buckets: dict[tuple[int, int], _Bucket] = {}

    @property
    def captured(self) -> int:
        """How many passes are held captured."""
        return sum(b.captured for b in self._buckets.values())

    def bucket(self, n: int) -> int | None:
        """The narrowest width that holds n tokens; None past the widest."""
        return next((w for w in self.widths if w >= n), None)

    def clear(self) -> None:
        """Forget every bucket: what the passes read (the head, a kernel's copy) has moved."""
        self._buckets.clear()

    def _get(self, cache: int, width: int) -> _Bucket:
        key = (cache, width)
        if key not in self._buckets:
            started = time.perf_counter()
            try:
                self._buckets[key] = _Bucket(self._run, PassInputs(width, self.device), self.graphs, self._idle_start)
            except RuntimeError as exc:  # a driver or library that cannot capture: the same passes, launched
                if self.graphs is None:
                    raise
                log.warning("CUDA graph capture failed (%s): running the static passes uncaptured", exc)
                self.graphs = None
                self._buckets.clear()
                self._buckets[key] = _Bucket(self._run, PassInputs(width, self.device), None, self._idle_start)
            if self.graphs is not None:
                log.debug("captured the %d-token pass (cache %d) in %.0f ms", width, cache,
                          1000 * (time.perf_counter() - started))
        return self._buckets[key]

    def run(self, cache: int, tokens: Sequence[int], positions: np.ndarray, local: np.ndarray, start: int,
            logits: bool = True) -> torch.Tensor | None:
        """One pass on KV cache `cache`: logits [len(tokens), vocab], or None without."""
        n = len(tokens)
        width = self.bucket(n)
        if width is None:
            inputs = PassInputs(n, self.device)
            inputs.write(tokens, positions, local, start)
            return self._run(inputs, logits)
        bucket = self._get(cache, width)
        bucket.inputs.write(tokens, positions, local, start)
        out = bucket.replay(n)
        return out if logits else None
