"""Completion tasks for the benchmark: reproducible cursor positions in the user's own files.

`fresh`: the cursor anywhere in the code. `repetitive`: the cursor at the start of a line whose
near-duplicate appears earlier in the same file's prompt window or in another file: another test
case, dict entry, similar call. There the prompt ends with the previous line, before its newline,
so the completion starts with the newline(s) and indentation: a BPE tokenizer merges a newline with
the following spaces, and a prompt cut after them would end in a token the model never saw there.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from engine.tokenization.tokenizer import Tokenizer
from lsp_server.completion.prompt import fim_prompt
from lsp_server.bench.sources import SourceFile

WORKLOADS = ("fresh", "repetitive")
_MIN_DUPLICATE_CHARS = 12  # shorter lines (`return x`, `else:`) repeat by accident
_SIMILARITY = 0.75  # difflib ratio from which two lines count as near-duplicates
_BUCKET_CHARS = 8  # lines in other files are compared only when they start alike
_REFERENCE_LINES = 8


@dataclass(frozen=True)
class Task:
    workload: str
    path: Path
    line: int  # 0-based position of the cursor
    col: int
    prefix: str  # text before the cursor, cut to the context window at a line start
    suffix: str  # text after the cursor (used by FIM models), cut likewise
    reference: str  # what the file actually goes on with: the rest of the line and its block


@dataclass(frozen=True)
class _Line:
    file: int
    number: int
    start: int  # character offset in the file
    text: str

    @property
    def indent(self) -> int:
        return len(self.text) - len(self.text.lstrip())

    @property
    def code(self) -> str:
        return self.text.strip()


def _lines(index: int, text: str) -> list[_Line]:
    out, start = [], 0
    for number, line in enumerate(text.split("\n")):
        out.append(_Line(index, number, start, line))
        start += len(line) + 1
    return out


def _reference(lines: list[_Line], head: _Line, rest: str) -> str:
    """`rest` (of the head line) plus the following lines indented deeper than the head."""
    parts = [rest]
    for line in lines[head.number + 1:head.number + 1 + _REFERENCE_LINES]:
        if line.code and line.indent <= head.indent:
            break
        parts.append(line.text)
    return "\n".join(parts).rstrip()


def _task(workload: str, source: SourceFile, cursor: _Line, col: int, reference: str,
          context_chars: int) -> Task:
    text, offset = source.text, cursor.start + col
    cut = 0
    if offset > context_chars:
        cut = text.find("\n", offset - context_chars, offset) + 1 or offset - context_chars
    end = text.rfind("\n", offset, offset + context_chars // 4)
    return Task(workload, source.path, cursor.number, col, text[cut:offset],
                text[offset:end if end >= 0 else len(text)], reference)


def _similar(a: str, b: str) -> bool:
    if a == b:
        return True
    m = SequenceMatcher(None, a, b, autojunk=False)
    return m.real_quick_ratio() >= _SIMILARITY and m.quick_ratio() >= _SIMILARITY \
        and m.ratio() >= _SIMILARITY


class _Duplicates:
    """Answers: does this line have a near-duplicate the drafter could have seen?"""

    def __init__(self, files: list[list[_Line]]):
        self.files = files
        self.buckets: dict[str, list[_Line]] = defaultdict(list)
        for lines in files:
            for line in lines:
                if len(line.code) >= _MIN_DUPLICATE_CHARS:
                    self.buckets[line.code[:_BUCKET_CHARS]].append(line)

    def has(self, cursor: _Line, context_chars: int) -> bool:
        code = cursor.code
        window_start = cursor.start - context_chars
        earlier = (l for l in reversed(self.files[cursor.file][:cursor.number]) if l.start >= window_start)
        if any(_similar(code, l.code) for l in earlier if len(l.code) >= _MIN_DUPLICATE_CHARS):
            return True
        others = (l for l in self.buckets.get(code[:_BUCKET_CHARS], ()) if l.file != cursor.file)
        return any(_similar(code, l.code) for l in others)


def build_tasks(sources: list[SourceFile], workload: str, count: int, seed: int,
                context_chars: int = 2048) -> list[Task]:
    """Up to `count` tasks of one workload; the same seed and files give the same tasks."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (choose from {', '.join(WORKLOADS)})")
    rng = random.Random(f"{seed}:{workload}")
    files = [_lines(i, s.text) for i, s in enumerate(sources)]
    # A cursor needs something before it to complete from, and code on its line.
    candidates = [l for lines in files for l in lines[1:] if l.code]
    rng.shuffle(candidates)
    tasks: list[Task] = []
    if workload == "fresh":
        for cursor in candidates[:count]:
            col = rng.randint(cursor.indent, len(cursor.text.rstrip()) - 1)  # leave code to write
            reference = _reference(files[cursor.file], cursor, cursor.text[col:])
            tasks.append(_task(workload, sources[cursor.file], cursor, col, reference, context_chars))
        return tasks
    duplicates = _Duplicates(files)
    for cursor in candidates:
        if len(tasks) == count:
            break
        if len(cursor.code) >= _MIN_DUPLICATE_CHARS and duplicates.has(cursor, context_chars):
            lines = files[cursor.file]
            previous = next((l for l in reversed(lines[:cursor.number]) if l.code), None)
            if previous is None:
                continue
            # Blank lines between belong to the completion: the tokenizer merges them too.
            reference = _reference(lines, cursor, "\n" * (cursor.number - previous.number) + cursor.text)
            tasks.append(_task(workload, sources[cursor.file], previous, len(previous.text),
                               reference, context_chars))
    return tasks


def prompt_tokens(task: Task, tokenizer: Tokenizer) -> list[int]:
    """The prefix, or a fill-in-the-middle prompt when the model has FIM tokens."""
    if tokenizer.fim is None:
        return tokenizer.with_bos(tokenizer.encode(task.prefix))
    return fim_prompt(tokenizer, task.prefix, task.suffix)
