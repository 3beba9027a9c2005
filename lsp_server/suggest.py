"""One suggestion, from cursor to cleaned text: the part of a request that runs on the
model thread, plus the UTF-16 position arithmetic LSP needs."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from engine import Engine, Limits, Sampling
from engine.stats import Stats
from lsp_server import postprocess
from lsp_server.context import Cursor, build_prompt
from lsp_server.settings import Settings


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def cursor_at(text: str, line: int, character: int) -> Cursor | None:
    """Split `text` at an LSP position (UTF-16 units); None when it is outside the text or
    inside a surrogate pair."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return None
    units, col = 0, 0
    content = lines[line]
    while units < character and col < len(content):
        units += 2 if ord(content[col]) > 0xFFFF else 1
        col += 1
    if units != character:
        return None
    offset = sum(len(s) + 1 for s in lines[:line]) + col
    return Cursor(text[:offset], text[offset:])


@dataclass(frozen=True)
class Plan:
    """How to complete at this cursor; None from `plan` means: do not suggest here."""
    multiline: bool
    cursor: Cursor


def plan(cursor: Cursor, settings: Settings) -> Plan | None:
    if not settings.enabled or not cursor.prefix.strip():
        return None
    if not postprocess.may_suggest(cursor.line_after):
        return None
    return Plan(postprocess.is_multiline(cursor.line_before, cursor.line_after, settings.multiline),
                cursor)


def generate(engine: Engine, p: Plan, settings: Settings, snippets: str,
             cancel: threading.Event, sampling: Sampling = Sampling()) -> tuple[str, Stats]:
    """Run the model for plan `p` (on the model thread) and clean its text."""
    prompt = build_prompt(p.cursor, engine.tokenizer, engine.target.max_len, snippets)
    limits = Limits(max_new_tokens=settings.maxTokens,
                    deadline_ms=settings.timeBudgetMs or None,
                    stop_when=postprocess.stop_rule(p.multiline, p.cursor.line_before))
    result = engine.complete(prompt, mode=settings.mode, limits=limits, sampling=sampling,
                             cancel=cancel)
    text = postprocess.clean(result.text, p.cursor.line_after, p.cursor.following_lines())
    return text, result.stats
