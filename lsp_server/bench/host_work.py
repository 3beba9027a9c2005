"""`bench --host-work`: the host's work per target pass, with passes that cost nothing.

On a GPU a 1.5B model's pass takes about 3 ms, so what the host does around each pass
(drafting, building the tree, verification's bookkeeping, the stop rules) decides how much of
speculation's gain is kept. Each task is decoded again against a replayed target (engine/
execution/backends/replay.py) that answers with the real target's recorded output: drafts are
accepted and rejected as with the real model, and all the time left is the host's. The
drafting policy gets flat pass costs (a GPU's: a wider pass costs nothing more), so trees grow
to HOST_WORK_NODES. Modes with a draft model are left out: its passes are device work.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.api import Request
from engine.engine import Engine
from engine.execution.backends.replay import ReplayBackend
from engine.tokenization.tokenizer import Tokenizer
from lsp_server.bench.runner import Workspace
from lsp_server.bench.sources import SourceFile
from lsp_server.bench.tasks import Task

HOST_WORK_NODES = 16  # draft tokens in a verification pass at most
MODES = ("ar", "lookup")


def measure(tokenizer: Tokenizer, files: Sequence[SourceFile], root: Path, tasks: Sequence[Task],
            prompts: Sequence[list[int]], outputs: Sequence[list[int]], max_new_tokens: int) -> dict[str, dict]:
    """Per mode: the p50 and p90 over tasks of host milliseconds per target pass, tokens per
    pass and logits elements copied to the host per pass (over all tasks). `outputs`: the real
    target's greedy tokens after each prompt."""
    replay = ReplayBackend(tokenizer.vocab_size)
    end = min(tokenizer.eos_ids)  # after the output: it ended there (at end-of-text, or at max_new_tokens)
    engine = Engine(replay, tokenizer, max_nodes=HOST_WORK_NODES)
    workspace = Workspace(engine, files, root)
    per_mode: dict[str, list[tuple[float, int, int, int]]] = {m: [] for m in MODES}
    for task, prompt, output in zip(tasks, prompts, outputs):
        workspace.hide(task.path)
        replay.record(prompt + output + [end])
        for mode in MODES:
            engine.prefill(prompt)
            done = engine.complete(prompt, Request(max_new_tokens), mode)
            if done.tokens != output:
                raise AssertionError(f"mode {mode} left the recorded output of task {task.path}:{task.line}")
            s = done.stats
            host_ms = s.total_ms - s.prefill_ms - s.target_ms
            per_mode[mode].append((host_ms / s.target_passes, s.target_passes, s.new_tokens, s.logits_to_host))
    return {mode: _summary(rows) for mode, rows in per_mode.items() if rows}


def _summary(rows: list[tuple[float, int, int, int]]) -> dict:
    """Host time: the p50 and p90 of each task's mean per pass; the rest: totals over totals."""
    host, passes, tokens, crossed = (np.array(column) for column in zip(*rows))
    return {"host_ms_per_pass_p50": round(float(np.median(host)), 4),
            "host_ms_per_pass_p90": round(float(np.percentile(host, 90)), 4),
            "tokens_per_pass": round(float(tokens.sum() / passes.sum()), 3),
            "logits_to_host_per_pass": round(float(crossed.sum() / passes.sum()), 2), "tasks": len(rows)}


def format_host_work(summary: dict[str, dict], vocab: int) -> str:
    lines = [f"\nHost work per target pass (a replayed target: passes cost nothing; up to {HOST_WORK_NODES} "
             f"draft tokens a pass; vocabulary {vocab})",
             f"{'mode':<8} {'p50 ms':>8} {'p90 ms':>8} {'tokens/pass':>12} {'logits to host/pass':>20}"]
    for mode, s in summary.items():
        lines.append(f"{mode:<8} {s['host_ms_per_pass_p50']:>8.3f} {s['host_ms_per_pass_p90']:>8.3f} "
                     f"{s['tokens_per_pass']:>12.2f} {s['logits_to_host_per_pass']:>20.1f}")
    return "\n".join(lines) + "\n"
