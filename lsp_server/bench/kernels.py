"""`lsp_server bench --kernels`: this CPU's limits, and the native decoder's passes against them.

Two probes (engine/execution/native/probe.c), run on every core at once: the int8 peak of the
products' own instruction on registers, and the rate at which memory is read. Then, on the
model: prefills of PREFILL tokens, and passes of WIDTHS tokens over a CONTEXT-token cache, the
median of `ROUNDS` each. Every pass is given as a share of the peak (its int8 operations: a
multiply and an add per weight and token; attention left out) and of the read floor (the
weights' bytes at the read rate). A pass of few tokens is bound by the read, a wide one by the
arithmetic, so the two shares say how far each is from what this CPU allows.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from lsp_server.bench.machine import cpu_name
from lsp_server.bench.report import write_json

WIDTHS = (1, 2, 4, 8, 16)
PREFILL = 512
CONTEXT = 256
ROUNDS = 5
_PEAK_ROUNDS = 50_000_000  # about a second of products per core
_READ_BYTES = 2**30


def _on_every_core(call, cores: int) -> float:
    """The sum of `call(i)` run on `cores` threads at once (ctypes lets go of the GIL)."""
    with ThreadPoolExecutor(cores) as pool:
        return sum(pool.map(call, range(cores)))


def probe(lib, cores: int) -> dict:
    """The int8 peak (operations per second) and the read rate (bytes per second) of `cores` cores."""
    memory = np.ones(_READ_BYTES, dtype=np.uint8)  # written, so its pages exist
    share = _READ_BYTES // cores // 128 * 128
    read = max(_on_every_core(lambda i: lib.draftline_read_rate(memory.ctypes.data + i * share, share), cores)
               for _ in range(3))
    peak = max(_on_every_core(lambda _: lib.draftline_int8_peak(_PEAK_ROUNDS), cores) for _ in range(2))
    return {"int8_ops_per_s": peak, "read_bytes_per_s": read}


def _matrices(model) -> list:
    return [model.head] + [w for layer in model.layers for w in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)]


def measure(model) -> dict:
    """Medians of ROUNDS prefills and passes (seconds), the rounds interleaved."""
    rng = np.random.default_rng(0)
    prefills, passes = [], {w: [] for w in WIDTHS}
    context = rng.integers(100, 20_000, CONTEXT).tolist()
    for _ in range(ROUNDS):
        model.truncate(0)
        start = time.perf_counter()
        model.forward(rng.integers(100, 20_000, PREFILL).tolist(), logits=False)
        prefills.append(time.perf_counter() - start)
        model.truncate(0)
        model.forward(context, logits=False)
        for width in WIDTHS:
            model.truncate(CONTEXT)
            start = time.perf_counter()
            model.forward([context[-1]] * width)
            passes[width].append(time.perf_counter() - start)
    model.truncate(0)
    return {"prefill_s": statistics.median(prefills), "prefill_range_s": [min(prefills), max(prefills)],
            "pass_s": {w: statistics.median(t) for w, t in passes.items()},
            "pass_range_s": {w: [min(t), max(t)] for w, t in passes.items()}}


def report(limits: dict, times: dict, weights: int, weight_bytes: int) -> dict:
    """Each pass's rate and its shares of the peak and of the read floor."""
    def shares(tokens: int, seconds: float) -> dict:
        ops = 2 * weights * tokens / seconds
        return {"ms": 1e3 * seconds, "tokens_per_s": tokens / seconds, "int8_ops_per_s": ops,
                "share_of_peak": ops / limits["int8_ops_per_s"],
                "share_of_read_floor": weight_bytes / limits["read_bytes_per_s"] / seconds}
    one = times["pass_s"][1]
    return {"prefill": {"tokens": PREFILL, **shares(PREFILL, times["prefill_s"])},
            "passes": {w: {**shares(w, s), "of_one_token_pass": s / one} for w, s in times["pass_s"].items()}}


def run(args: argparse.Namespace) -> int:
    from engine.execution.backends.native_llama import NativeLlama
    from engine.models import load_model, resolve
    from lsp_server.options import model_settings

    name = model_settings(args)["model"]
    model, _ = load_model(resolve(name), dtype="gguf")
    if not isinstance(model, NativeLlama):
        raise SystemExit("bench --kernels: the native decoder does not run this model here")
    cores = len(os.sched_getaffinity(0))
    model.set_threads(cores)
    weights = sum(w.shape[0] * w.shape[1] for w in _matrices(model))
    limits = probe(model.native.lib, cores)
    times = measure(model)
    result = {"cpu": cpu_name(), "cores": cores, "build": model.native.build, "model": str(name),
              "weights": weights, "weight_bytes": model.weight_bytes, "context": CONTEXT, "rounds": ROUNDS,
              "limits": limits, "times": times, **report(limits, times, weights, model.weight_bytes)}
    sys.stdout.write(format_kernels(result))  # the report is the command's output
    if args.json:
        write_json(result, Path(args.json))
    return 0


def format_kernels(result: dict) -> str:
    """The probes and the passes as lines of text."""
    limits, p = result["limits"], result["prefill"]
    lines = [f"{result['cpu']}, {result['cores']} cores: int8 peak {limits['int8_ops_per_s'] / 1e9:.0f} GOP/s, "
             f"read {limits['read_bytes_per_s'] / 1e9:.1f} GB/s",
             f"prefill {PREFILL}: {p['tokens_per_s']:.1f} tok/s, {p['share_of_peak']:.0%} of peak"]
    lines += [f"{width:2d} tokens: {s['ms']:6.1f} ms ({s['of_one_token_pass']:.2f} x one), "
              f"{s['share_of_peak']:.0%} of peak, {s['share_of_read_floor']:.0%} of the read floor"
              for width, s in result["passes"].items()]
    return "\n".join(lines) + "\n"
