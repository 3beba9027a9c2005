"""What the machine under a benchmark is and can do: its CPU, and how fast it moves memory.

Two rates, because they answer different questions: a copy reads and writes every byte, while
decoding only reads the weights, so the floor of a one-token pass is the weights' size over the
read rate (a copy rate made it look reachable when it was not, and vice versa).
"""
from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np

_BYTES = 256 * 2**20


def _best_seconds(run, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def copy_bandwidth_gb_s() -> float:
    """Bytes copied per second (each read once and written once), best of a few."""
    src = np.ones(_BYTES // 8)
    dst = np.empty_like(src)
    return _BYTES / _best_seconds(lambda: np.copyto(dst, src)) / 1e9


def read_bandwidth_gb_s() -> float:
    """Bytes read per second by one thread summing integers (no writes), best of a few."""
    src = np.ones(4 * _BYTES // 8, dtype=np.int64)  # 1 GiB: well past any cache
    return src.nbytes / _best_seconds(lambda: np.add.reduce(src)) / 1e9


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
