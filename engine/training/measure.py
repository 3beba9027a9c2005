"""Measure the embedded draft model against the target on held-out standard-library code.

    python -m engine.training.measure --threads 2

Prints (stdout, this is a CLI) teacher-forced greedy agreement, the cost of one draft token
against one target pass, and median wall time of ar / draft / hybrid on fresh held-out prompts.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import torch

from engine.engine import Engine
from engine.api import MODES, Request
from engine.execution.backends.base import Backend
from engine.engine import Completion
from engine.training.data import stdlib_files


def agreement(engine: Engine, files: Sequence, tokens_per_file: int) -> float:
    """Fraction of positions where the draft's first-token argmax equals the target's
    (teacher-forced: every position reads the target's true features)."""
    draft = engine.draft
    hits = total = 0
    for path in files:
        ids = engine.tokenizer.encode(path.read_text(encoding="utf-8"))[:tokens_per_file]
        engine.target.truncate(0)
        want = engine.target.forward(ids).argmax(-1)[1:]
        got = draft.teacher_forced_logits(ids).argmax(-1)
        hits += int((want == got).sum())
        total += len(want)
    return hits / total


def one_token_ms(backend: Backend, context: list[int], repeats: int) -> float:
    backend.sync(context)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        backend.forward([context[-1]])
        times.append((time.perf_counter() - t) * 1000)
        backend.truncate(len(context))
    return statistics.median(times)


def prompts(engine: Engine, files: Sequence, n: int, length: int) -> list[list[int]]:
    """Prompts that end at a line break about `length` tokens into held-out files."""
    out = []
    for path in files[:n]:
        text = path.read_text(encoding="utf-8")
        ids = engine.tokenizer.encode(text)[:length]
        cut = engine.tokenizer.decode(ids).rfind("\n")
        out.append(engine.tokenizer.encode(text[:cut + 1]))
    return out


def run(engine: Engine, mode: str, prompt: list[int], new_tokens: int) -> Completion:
    """One completion as the server makes it (measured pass costs, draft length, hybrid)."""
    engine.target.truncate(0)  # cold cache for every run: no mode profits from the previous one
    engine.draft.reset()
    return engine.complete(prompt, Request(max_new_tokens=new_tokens), mode)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--prompts", type=int, default=10)
    p.add_argument("--new-tokens", type=int, default=48)
    args = p.parse_args()
    engine = Engine.load("smollm2-135m", draft="embedded", dtype=args.dtype, threads=args.threads)
    _, held = stdlib_files()
    held = [f for f in held if 4_000 < f.stat().st_size]
    print(f"teacher-forced greedy agreement (512 tokens x 12 held-out files): "
          f"{agreement(engine, held[-12:], 512):.4f}")
    context = prompts(engine, held, 1, 256)[0]
    t_ms = one_token_ms(engine.target, context, 20)
    d_ms = one_token_ms(engine.draft.backend, context, 20)
    print(f"one-token pass at 256 context: target {t_ms:.1f} ms, draft {d_ms:.1f} ms "
          f"({d_ms / t_ms:.1%})")
    modes = list(MODES)
    ms: dict[str, list[float]] = {m: [] for m in modes}
    acc: dict[str, list[int]] = {m: [0, 0, 0, 0] for m in modes}  # accepted, drafted, tokens, passes
    same: dict[str, int] = {m: 0 for m in modes}
    for prompt in prompts(engine, held, args.prompts, 600):
        ref = None
        for mode in modes:  # interleaved: load on the machine hits every mode alike
            gen = run(engine, mode, prompt, args.new_tokens)
            ms[mode].append(gen.stats.total_ms - gen.stats.prefill_ms)
            acc[mode][0] += gen.stats.accepted
            acc[mode][1] += gen.stats.drafted
            acc[mode][2] += gen.stats.new_tokens
            acc[mode][3] += gen.stats.target_passes
            ref = gen.tokens if ref is None else ref
            same[mode] += gen.tokens == ref
    base = statistics.median(ms["ar"])
    print(f"{args.prompts} held-out prompts, {args.new_tokens} new tokens, decode ms (after prefill):")
    for mode in modes:
        med = statistics.median(ms[mode])
        rate = acc[mode][0] / acc[mode][1] if acc[mode][1] else 0.0
        print(f"  {mode:7s} median {med:6.0f} ms  speed-up {base / med:4.2f}x  "
              f"tokens/pass {acc[mode][2] / acc[mode][3]:.2f}  acceptance {rate:.3f}  "
              f"same output as ar {same[mode]}/{args.prompts}")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
