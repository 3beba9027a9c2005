"""What `scripts/gpu_shapes.py` measures our backends against: exllamav2's own generator and the
bandwidth floor, and the summary that sets them side by side.

- The peer: exllamav2's dynamic generator, greedy, on the model our exllamav2 backend loaded
  (the same weights, cache and config), timed from its first token to its last. Its output
  must be our plain decoding's. A dry run has no exllamav2: a plain greedy loop over the
  backend's one-token passes stands in, so that the harness runs on a CPU.
- The floor: the weights read once per token at the rate a device copy moves bytes.
- `speed`: per backend and target, plain decoding's and the default mode's tokens/s (drafts from
  a document holding the greedy output: always right until it ends) against the peer's.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from engine.api import DEFAULT_MODE
from engine.execution.backends.base import Backend

PEER = "exllamav2 generator"
STAND_IN = "plain greedy loop (dry-run stand-in)"

# (backend, prompt, new tokens, eos ids) -> (tokens, seconds from the first token to the last)
Generate = Callable[[Backend, list[int], int, set[int]], tuple[list[int], float]]


def copy_rate(device: str) -> float:
    """Bytes per second a device-to-device copy moves (read and write), best of 5."""
    size = (1 << 30) if device == "cuda" else (64 << 20)
    source = torch.ones(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    best = float("inf")
    for _ in range(5):
        sync()
        start = time.perf_counter()
        target.copy_(source)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size / best


def floor_ms(weight_bytes: int, rate: float) -> float:
    """Milliseconds to read the weights once at `rate` bytes/s: no pass can be faster."""
    return round(1000 * weight_bytes / rate, 4)


def exllamav2_generation(backend: Backend, prompt: list[int], new_tokens: int,
                         eos: set[int]) -> tuple[list[int], float]:
    """exllamav2's dynamic generator, greedy, on the backend's model and cache (paged where its
    flash-attn allows, else its unpaged mode). The backend's cache mirror is emptied first:
    the generator writes the cache from position 0."""
    from exllamav2 import ExLlamaV2Tokenizer
    from exllamav2.generator import ExLlamaV2DynamicGenerator, ExLlamaV2DynamicJob, ExLlamaV2Sampler

    backend.truncate(0)
    model, cache = backend.model, backend.cache
    tokenizer = ExLlamaV2Tokenizer(model.config)
    try:
        generator = ExLlamaV2DynamicGenerator(model=model, cache=cache, tokenizer=tokenizer, max_batch_size=1)
    except AssertionError:  # paged mode needs flash-attn >= 2.5.7
        generator = ExLlamaV2DynamicGenerator(model=model, cache=cache, tokenizer=tokenizer, max_batch_size=1,
                                              paged=False)
    job = ExLlamaV2DynamicJob(input_ids=torch.tensor([prompt]), max_new_tokens=new_tokens,
                              gen_settings=ExLlamaV2Sampler.Settings.greedy(), stop_conditions=sorted(eos),
                              decode_special_tokens=True)
    generator.enqueue(job)
    tokens: list[int] = []
    first = None
    while generator.num_remaining_jobs():
        for result in generator.iterate():
            if result.get("stage") == "streaming" and "token_ids" in result:
                first = first or time.perf_counter()
                tokens += result["token_ids"][0].tolist()
    seconds = time.perf_counter() - (first or time.perf_counter())
    backend.truncate(0)
    return [t for t in tokens if t not in eos], seconds


def plain_greedy_loop(backend: Backend, prompt: list[int], new_tokens: int,
                      eos: set[int]) -> tuple[list[int], float]:
    """The dry run's stand-in for exllamav2's generator: one-token passes and their argmax."""
    backend.truncate(0)
    backend.sync(prompt[:-1])
    token, tokens, first = prompt[-1], [], None
    for _ in range(new_tokens):
        token = int(backend.forward([token])[-1].argmax())
        first = first or time.perf_counter()
        if token in eos:
            break
        tokens.append(token)
    seconds = time.perf_counter() - first
    backend.truncate(0)
    return tokens, seconds


def peer_runs(generate: Generate, backend: Backend, prompts: list[list[int]], greedy: list[list[int]],
              new_tokens: int, eos: set[int]) -> dict:
    """The peer on every prompt (after one run that warms it up), against our plain decoding's
    tokens `greedy`: tokens/s from its first token to its last."""
    generate(backend, prompts[0], 4, eos)
    runs = []
    for i, (prompt, ours) in enumerate(zip(prompts, greedy)):
        tokens, seconds = generate(backend, prompt, new_tokens, eos)
        runs.append({"prompt": i, "tokens": len(tokens), "identical": tokens == ours,
                     "tokens_per_s": round((len(tokens) - 1) / seconds, 2) if len(tokens) > 1 else None})
    rates = [r["tokens_per_s"] for r in runs if r["tokens_per_s"]]
    rate = statistics.median(rates) if rates else None
    return {"peer": PEER if generate is exllamav2_generation else STAND_IN, "runs": runs,
            "identical": all(r["identical"] for r in runs), "tokens_per_s": rate,
            "ms_per_token": round(1000 / rate, 4) if rate else None}


def _median(rows: list[dict], mode: str, document: str) -> float | None:
    rates = [r["tokens_per_s"] for r in rows if r["mode"] == mode and r["document"] == document]
    return round(statistics.median(rates), 2) if rates else None


def speed(backends: dict, peers: dict) -> list[dict]:
    """Per backend and target: plain decoding's tokens/s, the default mode's with drafts from
    the greedy output, and both over the peer's on that target (None where it was not run)."""
    out = []
    for backend, targets in backends.items():
        for target, entry in targets.items():
            rows = entry.get("generations", [])
            peer = (peers.get(target) or {}).get("tokens_per_s")
            ar, default = _median(rows, "ar", "none"), _median(rows, DEFAULT_MODE, "greedy output")
            out.append({"backend": backend, "target": target, "ar_tokens_per_s": ar,
                        f"{DEFAULT_MODE}_greedy_document_tokens_per_s": default, "peer_tokens_per_s": peer,
                        "ar_over_peer": round(ar / peer, 3) if ar and peer else None,
                        f"{DEFAULT_MODE}_over_peer": round(default / peer, 3) if default and peer else None})
    return out
