"""One suggestion, from cursor to cleaned text: the part of a request that runs on the
model thread, plus the UTF-16 position arithmetic LSP needs."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from engine import Request, Sampling
from engine.surface import CompletionEngine
from engine.stats import Stats
from lsp_server import postprocess
from lsp_server.context import Budget, Cursor, build_prompt
from lsp_server.settings import Settings


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


# The most a request at a new spot may spend prefilling. A larger window's prompt is
# prefilled in the background once typing pauses, for the requests after it.
COLD_PREFILL_S = 1.0


def prompt_for(engine: CompletionEngine, cursor: Cursor, snippets: str) -> tuple[str | list[int], str | list[int] | None]:
    """The prompt for this request, and the full-window prompt to prefill later when this
    one had to be shortened (None when it is the full one): a cold 2k-token file on a slow
    CPU would otherwise wait a minute for its first suggestion."""
    tokenizer, max_len = engine.tokenizer, engine.max_len
    full = build_prompt(cursor, tokenizer, max_len, snippets)
    if engine.prefill_seconds(full) <= COLD_PREFILL_S:
        return full, None
    fits = int(engine.calibration.prefill_tokens_per_s * COLD_PREFILL_S)
    budget = Budget(prefix_tokens=max(32, fits * 4 // 5), suffix_tokens=fits // 5, snippet_tokens=0)
    return build_prompt(cursor, tokenizer, max_len, "", budget), full


@dataclass
class Suggestion:
    text: str
    stats: Stats
    full_prompt: str | list[int] | None  # see prompt_for


def generate(engine: CompletionEngine, p: Plan, settings: Settings, snippets: str,
             cancel: threading.Event, sampling: Sampling = Sampling(),
             on_prefilled: Callable[[], None] | None = None) -> Suggestion:
    """Run the model for plan `p` (on the model thread) and clean its text."""
    prompt, full = prompt_for(engine, p.cursor, snippets)
    request = Request(settings.maxTokens, postprocess.stop_rule(p.multiline, p.cursor.line_before),
                      sampling, cancel, on_prefilled)
    result = engine.complete(prompt, request, settings.mode)
    text = postprocess.clean(result.text, p.cursor.line_after, p.cursor.following_lines())
    return Suggestion(text, result.stats, full)
