"""`bench --quality N`: is what the model writes right? Next-line completion on the user's code.

A task removes one line of a file after its indentation and puts the cursor there: the text
before is the prefix, the rest of the file (after that line) the suffix, as an editor has it
while someone writes the line. The suggestion comes through the server's own path (the
Suggester: prompt window, FIM, stop rule, clean-up) with the full prompt window, and is scored
against the line the file really has: exact match of the first line, and edit similarity
(1 - Levenshtein distance / the longer length), as CrossCodeEval scores next-line completion.
Speculative modes must score what plain decoding scores: their text is the same.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.api import CompletionEngine
from lsp_server.bench.runner import Documents
from lsp_server.bench.sources import SourceFile
from lsp_server.files import display_name
from lsp_server.options import Settings
from lsp_server.suggester import Suggester, plan

_MIN_CHARS = 6  # shorter lines (`else:`, `pass`, `}`) say little about a model
_MAX_NEW_TOKENS = 48


@dataclass(frozen=True)
class LineTask:
    path: Path
    line: int  # 0-based
    text: str  # the document with the line's code removed (its indentation kept)
    column: int  # the cursor: after the indentation
    expected: str  # the line's code


@dataclass
class Scored:
    task: int
    mode: str
    text: str
    exact: bool
    similarity: float
    ms: float  # the request, prefill included


def line_tasks(sources: list[SourceFile], count: int, seed: int) -> list[LineTask]:
    """Up to `count` lines of code (not comments), the same for the same seed and files."""
    rng = random.Random(f"{seed}:quality")
    candidates = []
    for source in sources:
        lines = source.text.split("\n")
        for number, line in enumerate(lines):
            code = line.strip()
            if number > 0 and len(code) >= _MIN_CHARS and not code.startswith(("#", "//", "/*", "*")):
                candidates.append((source, number))
    tasks = []
    for source, number in rng.sample(candidates, min(count, len(candidates))):
        lines = source.text.split("\n")
        line = lines[number]
        indent = line[:len(line) - len(line.lstrip())]
        text = "\n".join(lines[:number] + [indent] + lines[number + 1:])
        tasks.append(LineTask(source.path, number, text, len(indent), line.strip()))
    return tasks


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(len(a), len(b)); 1.0 for two empty strings."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1 - previous[-1] / max(len(a), len(b))


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def score(engine: CompletionEngine, modes: list[str], tasks: list[LineTask], documents: Documents,
          root: Path | None, step: Callable[[str], None]) -> list[Scored]:
    """Each task in each mode (modes rotated per task), through the Suggester; the task's file
    is the engine's document as the editor has it, without the line."""
    # Always the full window (no shorter cold one): this measures quality, not latency.
    suggester = Suggester(engine, Settings(maxTokens=_MAX_NEW_TOKENS), lambda uri: {}, cold_prefill_s=float("inf"))
    results = []
    for i, task in enumerate(tasks):
        documents.edit(task.path, task.text)
        uri = display_name(task.path.resolve(), root)
        where = plan(uri, task.text, task.line, task.column, suggester.settings)
        shift = i % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            suggester.settings = Settings(maxTokens=_MAX_NEW_TOKENS, mode=mode)
            started = time.perf_counter()
            text = suggester.generate(where, threading.Event()).text
            ms = (time.perf_counter() - started) * 1000
            first = _first_line(text)
            results.append(Scored(i, mode, text, first == task.expected, edit_similarity(first, task.expected), ms))
            step(f"quality {mode}")
    return results


def summarize(results: list[Scored], modes: list[str], baseline: str) -> dict:
    """{mode: numbers}; `same_as_baseline`: the share of suggestions equal to the baseline's."""
    base = {r.task: r.text for r in results if r.mode == baseline}
    out = {}
    for mode in modes:
        mine = [r for r in results if r.mode == mode]
        out[mode] = {
            "tasks": len(mine),
            "exact_match": round(sum(r.exact for r in mine) / len(mine), 4),
            "edit_similarity": round(float(np.mean([r.similarity for r in mine])), 4),
            "p50_ms": round(float(np.percentile([r.ms for r in mine], 50)), 1),
            "p95_ms": round(float(np.percentile([r.ms for r in mine], 95)), 1),
            "same_as_baseline": None if mode == baseline else round(
                sum(r.text == base[r.task] for r in mine) / len(mine), 4),
        }
    return out


def format_quality(numbers: dict, tasks: int) -> str:
    lines = [f"\n\nquality: next line, {tasks} lines of your code, the server's suggestion path "
             "(prefill included in the times)",
             f"{'mode':<12}{'exact':>8}{'edit sim':>10}{'p50 ms':>9}{'p95 ms':>9}{'same as ar':>12}"]
    for mode, m in numbers.items():
        same = "-" if m["same_as_baseline"] is None else f"{m['same_as_baseline']:.2f}"
        lines.append(f"{mode:<12}{m['exact_match']:>8.2f}{m['edit_similarity']:>10.2f}{m['p50_ms']:>9.0f}"
                     f"{m['p95_ms']:>9.0f}{same:>12}")
    return "\n".join(lines)
