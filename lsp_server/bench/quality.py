"""`bench --quality N`: is what the model writes right? Next-line completion on the user's code.

A task removes one line of a file after its indentation and puts the cursor there: the text
before is the prefix, the rest of the file (after that line) the suffix, as an editor has it
while someone writes the line. The suggestion comes through the server's own path (the
Suggester: repository context, prompt window, FIM, stop rule, clean-up) with the full prompt
window, and is scored against the line the file really has: exact match of the first line, and
edit similarity (1 - Levenshtein distance / the longer length), as CrossCodeEval scores
next-line completion. Speculative modes must score what plain decoding scores: their text is
the same.

Two workloads: cross-file lines use a name defined in another file of the project (by the
same outlines the repository context reads), in-file lines do not. Each runs with the
repository context and without it (--context), from an empty cache (cold: the first request
at a spot, prefill timed) and again at once (warm: its prompt in the KV cache).
"""
from __future__ import annotations

import ast
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.api import CompletionEngine
from lsp_server.bench.runner import Workspace
from lsp_server.bench.sources import SourceFile
from lsp_server.options import Settings
from lsp_server.completion.outline import defined_names, outline
from lsp_server.completion.repo_context import COMMON_NAMES
from lsp_server.completion.suggester import Suggester, plan

_MIN_CHARS = 6  # shorter lines (`else:`, `pass`, `}`) say little about a model
_MAX_NEW_TOKENS = 48
WORKLOADS = ("cross-file", "in-file")
CONTEXTS = {"repo": True, "none": False}  # --context name -> the repoContext setting
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class LineTask:
    path: Path
    line: int  # 0-based
    text: str  # the document with the line's code removed (its indentation kept)
    column: int  # the cursor: after the indentation
    expected: str  # the line's code


@dataclass
class Scored:
    workload: str
    context: str
    task: int
    mode: str
    text: str
    exact: bool
    similarity: float
    cold_ms: float  # the first request at the spot: empty cache, prefill timed
    warm_ms: float  # the same request again: its prompt in the KV cache
    prompt_tokens: int
    warm_new_tokens: int  # prompt tokens the warm request prefilled (not reused)


def _defined_elsewhere(sources: list[SourceFile]) -> dict[str, set[Path]]:
    """name -> the files whose outline defines it."""
    where: dict[str, set[Path]] = {}
    for source in sources:
        for definition in outline(source.text, source.path.suffix in (".py", ".pyi")).definitions:
            where.setdefault(definition.name, set()).add(source.path)
    return where


def string_lines(source: SourceFile) -> set[int]:
    """0-based lines inside a Python file's multi-line strings (docstrings): prose, not code."""
    if source.path.suffix not in (".py", ".pyi"):
        return set()
    try:
        tree = ast.parse(source.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {n for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno > node.lineno
            for n in range(node.lineno - 1, node.end_lineno)}


def lines_by_workload(sources: list[SourceFile]) -> dict[str, list[tuple[SourceFile, int]]]:
    """Every line of code (not comments, imports or docstrings) as (file, 0-based line) per
    workload: cross-file lines use a name another file defines, in-file ones not."""
    where = _defined_elsewhere(sources)
    candidates: dict[str, list] = {w: [] for w in WORKLOADS}
    for source in sources:
        own = defined_names(source.text)
        prose = string_lines(source)
        lines = source.text.split("\n")
        for number, line in enumerate(lines):
            code = line.strip()
            if (number == 0 or len(code) < _MIN_CHARS or number in prose
                    or code.startswith(("#", "//", "/*", "*", "import ", "from "))):
                continue
            names = set(_WORD.findall(code)) - COMMON_NAMES - own
            cross = any(where.get(name, set()) - {source.path} for name in names)
            candidates["cross-file" if cross else "in-file"].append((source, number))
    return candidates


def line_tasks(sources: list[SourceFile], count: int, seed: int) -> dict[str, list[LineTask]]:
    """Up to `count` lines of each workload (lines_by_workload), the same for the same seed and
    files."""
    rng = random.Random(f"{seed}:quality")
    tasks = {}
    for workload, found in lines_by_workload(sources).items():
        tasks[workload] = []
        for source, number in rng.sample(found, min(count, len(found))):
            lines = source.text.split("\n")
            line = lines[number]
            indent = line[:len(line) - len(line.lstrip())]
            text = "\n".join(lines[:number] + [indent] + lines[number + 1:])
            tasks[workload].append(LineTask(source.path, number, text, len(indent), line.strip()))
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


def score(engine: CompletionEngine, modes: list[str], tasks: dict[str, list[LineTask]], contexts: list[str],
          workspace: Workspace, step: Callable[[str], None]) -> list[Scored]:
    """Each task with each context in each mode (contexts and modes rotated per task), through
    the Suggester; the task's file is open as the editor has it, without the line, and every
    source file is in the repository (as the workspace index holds them)."""
    documents = workspace.documents
    remote = engine.describe()["kind"] == "remote"
    suggesters = {c: Suggester(engine, documents) for c in contexts}
    results = []
    for workload, found in tasks.items():
        for i, task in enumerate(found):
            workspace.edit(task.path, task.text)
            doc = documents.get(task.path.resolve().as_uri())
            for context in contexts[i % len(contexts):] + contexts[:i % len(contexts)]:
                suggester = suggesters[context]
                where = plan(doc.uri, doc.text, task.line, task.column, Settings(), doc.name)
                for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
                    # always the full window (coldPrefillMs 0): this measures quality, not the cold rule
                    settings = Settings(maxTokens=_MAX_NEW_TOKENS, mode=mode, repoContext=CONTEXTS[context],
                                        coldPrefillMs=0)
                    if not remote:
                        engine.forget_cache()
                    (text, cold_ms, cold), (_, warm_ms, warm) = (_timed(suggester, where, settings) for _ in range(2))
                    first = _first_line(text)
                    results.append(Scored(workload, context, i, mode, text, first == task.expected,
                                          edit_similarity(first, task.expected), cold_ms, warm_ms,
                                          cold.prompt_tokens, warm.new_prompt_tokens))
                    step(f"quality {workload} {context} {mode}")
    return results


def _timed(suggester: Suggester, where, settings: Settings) -> tuple:
    started = time.perf_counter()
    suggestion = suggester.generate(where, settings, threading.Event())
    return suggestion.text, (time.perf_counter() - started) * 1000, suggestion.stats


def summarize(results: list[Scored], modes: list[str], baseline: str) -> dict:
    """{workload: {context: {mode: numbers}}}; `same_as_baseline`: the share of suggestions
    equal to the baseline mode's."""
    out: dict = {}
    for r in results:
        out.setdefault(r.workload, {}).setdefault(r.context, {})
    for workload, contexts in out.items():
        for context in contexts:
            here = [r for r in results if r.workload == workload and r.context == context]
            base = {r.task: r.text for r in here if r.mode == baseline}
            for mode in modes:
                mine = [r for r in here if r.mode == mode]
                contexts[context][mode] = {
                    "tasks": len(mine),
                    "exact_match": round(sum(r.exact for r in mine) / len(mine), 4),
                    "edit_similarity": round(float(np.mean([r.similarity for r in mine])), 4),
                    "warm_p50_ms": round(float(np.percentile([r.warm_ms for r in mine], 50)), 1),
                    "cold_p50_ms": round(float(np.percentile([r.cold_ms for r in mine], 50)), 1),
                    "prompt_tokens": round(float(np.mean([r.prompt_tokens for r in mine])), 1),
                    "warm_new_prompt_tokens": round(float(np.mean([r.warm_new_tokens for r in mine])), 1),
                    "same_as_baseline": None if mode == baseline else round(
                        sum(r.text == base[r.task] for r in mine) / len(mine), 4),
                }
    return out


def format_quality(numbers: dict) -> str:
    tasks = ", ".join(f"{next(iter(next(iter(c.values())).values()))['tasks']} {w}"
                      for w, c in numbers.items())
    lines = [f"\n\nquality: next line ({tasks} lines of your code), the server's suggestion path; "
             "cold: empty cache, prefill timed; warm: the same request again",
             f"{'workload':<12}{'context':<9}{'mode':<9}{'exact':>7}{'edit sim':>10}{'warm p50':>10}"
             f"{'cold p50':>10}{'prompt':>8}{'new':>6}{'same as ar':>12}"]
    for workload, contexts in numbers.items():
        for context, modes in contexts.items():
            for mode, m in modes.items():
                same = "-" if m["same_as_baseline"] is None else f"{m['same_as_baseline']:.2f}"
                lines.append(f"{workload:<12}{context:<9}{mode:<9}{m['exact_match']:>7.2f}{m['edit_similarity']:>10.2f}"
                             f"{m['warm_p50_ms']:>10.0f}{m['cold_p50_ms']:>10.0f}{m['prompt_tokens']:>8.0f}"
                             f"{m['warm_new_prompt_tokens']:>6.0f}{same:>12}")
    lines.append("(prompt: prompt tokens; new: of those, prefilled by the warm request, not reused from the KV cache)")
    return "\n".join(lines)
