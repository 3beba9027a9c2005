"""Measuring what a target pass costs on this machine, by width and by thread count.

Decoding chooses draft lengths from these costs (engine/draft_length.py). On a small CPU a
one-token pass is fastest on one thread (two threads spend more on synchronising the small
matmuls than they save), while a 9-token pass is fastest on all cores; so the torch backend
switches its thread count per pass width to whichever was measured faster.
"""
from __future__ import annotations

import time

import torch

from engine.backends.base import Backend


def measure_pass_costs(backend: Backend, max_width: int, context: int = 256,
                       repeats: int = 3) -> list[float]:
    """Seconds per pass for widths 0..max_width (index = tokens in the pass; [0] is unused),
    measured at a few widths and interpolated linearly."""
    widths = sorted({1, 2, 4, 8, 12, 16, 24, max_width} & set(range(1, max_width + 1)))
    backend.truncate(0)
    backend.forward([0] * context, logits=False)
    measured = {}
    for width in widths:
        times = []
        for _ in range(repeats):
            backend.truncate(context)
            start = time.perf_counter()
            backend.forward([0] * width)
            times.append(time.perf_counter() - start)
        measured[width] = sorted(times)[repeats // 2]
    backend.truncate(0)
    costs = [0.0]
    for width in range(1, max_width + 1):
        low = max(w for w in widths if w <= width)
        high = min(w for w in widths if w >= width)
        frac = 0.0 if high == low else (width - low) / (high - low)
        costs.append(measured[low] + frac * (measured[high] - measured[low]))
    return costs


def calibrate(backend: Backend, max_width: int, max_threads: int) -> list[float]:
    """Pass costs by width at the best thread count for each width; a backend with a
    `threads_by_width` table (the torch backend) is told which count that is."""
    if not hasattr(backend, "threads_by_width") or max_threads <= 1:
        return measure_pass_costs(backend, max_width)
    by_threads = {}
    for threads in sorted({1, max_threads}):
        torch.set_num_threads(threads)
        by_threads[threads] = measure_pass_costs(backend, max_width)
    best = [min(by_threads, key=lambda t: by_threads[t][width]) for width in range(max_width + 1)]
    backend.threads_by_width = best
    return [by_threads[best[width]][width] for width in range(max_width + 1)]
