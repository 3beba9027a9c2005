"""The one loop every mode and peer goes through: each task, each contender in a rotating order
(so machine drift hits all alike), warm and, with --cold, from an empty cache.

A contender is anything that completes a prompt of token ids: a decoding mode of our engine,
a remote server, or a peer library (peers.py). Each decides what "warm" means for itself (its
prompt prefilled untimed, as the server's common-prefix reuse gives it while a user types) and
what "cold" means (an empty cache, the prefill on the clock).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from engine.api import CompletionEngine, Request
from lsp_server.bench.report import Run
from lsp_server.bench.sources import SourceFile
from lsp_server.bench.tasks import Task
from lsp_server.serving.documents import Documents
from lsp_server.completion.suggester import REMEMBER_BEFORE



class Contender(Protocol):
    mode: str

    def run(self, prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        """One timed completion: up to `max_new_tokens` greedy tokens, no stop rule but
        end-of-text. The Run's task, mode and cold fields are filled in by the loop."""
        ...


class EngineMode:
    """A decoding mode of our engine (local, or remote where the server decodes)."""

    def __init__(self, engine: CompletionEngine, mode: str):
        self.engine, self.mode = engine, mode
        self.remote = engine.describe()["kind"] == "remote"

    def run(self, prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        engine = self.engine
        if self.remote:  # a request the server answers with one token leaves the prompt in its cache
            engine.complete(prompt, Request(1))
        elif cold:
            engine.forget_cache()
        else:
            engine.prefill(prompt)  # the untimed prefill
        start = time.perf_counter()
        result = engine.complete(prompt, Request(max_new_tokens), self.mode)
        ms = (time.perf_counter() - start) * 1000
        s = result.stats
        if self.remote:  # ids are not streamed: the server's count of tokens
            return Run(-1, self.mode, [0] * s.new_tokens, result.text, ms, s.new_tokens, None)
        emitted = s.new_tokens + (s.stop_reason == "eos")
        by_source = {source: (n, s.accepted_by_source.get(source, 0)) for source, n in s.drafted_by_source.items()}
        return Run(-1, self.mode, result.tokens, result.text, ms, emitted, s.target_passes, s.drafted,
                   s.accepted, by_source=by_source, model_choices=(s.model_agreed, s.model_tested))


class Workspace:
    """The run's files as the server's workspace index holds them (in the engine and the
    repository), in the store of documents that feeds `engine`. The task's own file is left
    out (latency tasks: its text after the cursor is what we ask for) or open as the editor has
    it (quality tasks: without the line being written); the previous task's change is undone."""

    def __init__(self, engine: CompletionEngine, sources: Sequence[SourceFile], root: Path):
        self.engine = engine
        self.documents = Documents(root)
        self.documents.use(engine)
        self.texts = {_uri(s.path): s.text for s in sources}
        for uri, text in self.texts.items():
            self.documents.file_changed(uri, text)
        self.changed: str | None = None

    def hide(self, path: Path) -> None:
        self._undo()
        self.changed = _uri(path)
        self.documents.file_removed(self.changed)

    def edit(self, path: Path, text: str) -> None:
        """Open `path` with `text` as the editor has it."""
        self._undo()
        self.changed = _uri(path)
        self.documents.open(self.changed, text)

    def _undo(self) -> None:
        if self.changed is None:
            return
        if self.documents.get(self.changed) is not None:
            self.documents.close(self.changed)  # its file takes over again
        else:
            self.documents.file_changed(self.changed, self.texts[self.changed])


def _uri(path: Path) -> str:
    return path.resolve().as_uri()


class Progress:
    """A bar on stderr: redrawn in place on a terminal, one line per tenth otherwise."""

    def __init__(self, total: int, width: int = 30):
        self.total, self.width, self.done = total, width, 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        filled = self.width * self.done // self.total
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            print(f"\r{line:<80}", end="\n" if self.done == self.total else "", file=sys.stderr, flush=True)
        elif self.done * 10 // self.total != (self.done - 1) * 10 // self.total:
            print(line, file=sys.stderr, flush=True)


def rememberable(tasks: list[Task], lines: int = 16) -> list[bool]:
    """Which tasks' outputs may go into the history of earlier outputs for the tasks after them: not one
    near another task of the same file, whose hidden continuation it could hold."""
    return [not any(j != i and t.path == u.path and abs(t.line - u.line) <= lines
                    for j, u in enumerate(tasks)) for i, t in enumerate(tasks)]


def run_all(contenders: list[Contender], tasks: list[Task], prompts: list[list[int]], workspace: Workspace,
            max_new_tokens: int, caches: tuple[bool, ...], progress: Progress) -> list[Run]:
    """Every task in every contender (and cache state). After each task its output (ar's, which
    every exact mode equals) is remembered as an earlier output, as the server remembers a
    suggestion it showed, where `rememberable` allows."""
    workspace.hide(tasks[0].path)
    for c in contenders:  # warm-up: first calls pay for allocations and lazy initialisation
        for cold in caches:
            c.run(prompts[0], min(8, max_new_tokens), cold)
    runs: list[Run] = []
    remember = rememberable(tasks)
    for i, (task, prompt) in enumerate(zip(tasks, prompts)):
        workspace.hide(task.path)
        shift = i % len(contenders)
        for c in contenders[shift:] + contenders[:shift]:
            for cold in caches:
                r = c.run(prompt, max_new_tokens, cold)
                r.task, r.mode, r.cold = i, c.mode, cold
                runs.append(r)
                progress.step(f"{task.workload} {c.mode}{' cold' if cold else ''}")
        if remember[i]:
            shown = next(r for r in runs if r.task == i and r.mode == contenders[0].mode)
            workspace.engine.remember(shown.text, before=task.prefix[-REMEMBER_BEFORE:])
    return runs
