"""One suggestion, from an LSP position to cleaned text: the one orchestrator that the server,
`complete` and `bench --quality` all call.

    position (UTF-16) -> cursor -> plan (suggest here? one line or a block?)
      -> prompt (window around the cursor, snippets of other documents, FIM; a shorter window
         where a cold cache would take too long to prefill)
      -> engine.complete (on the caller's model thread) -> clean-up against what follows
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from engine.api import CompletionEngine, Request, Sampling
from engine.stats import Stats
from lsp_server import postprocess
from lsp_server.context import WINDOW_STEP_LINES, Budget, Cursor, build_prompt, snippets
from lsp_server.options import Settings

# The most a request at a new spot may spend prefilling. A larger window's prompt is
# prefilled in the background once typing pauses, for the requests after it.
COLD_PREFILL_S = 1.0

# Characters before a suggestion remembered with it (Engine.remember): enough for the engine's
# lead of a few tokens.
REMEMBER_BEFORE = 200

# {name: text} of the documents whose snippets may go into the prompt for the document `uri`
# (never `uri` itself, never a file the workspace index refuses: secrets, .gitignore'd).
Others = Callable[[str], dict[str, str]]


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
    """Where and how to complete; None from `plan` means: do not suggest here."""
    uri: str
    cursor: Cursor
    multiline: bool


def plan(uri: str, text: str, line: int, character: int, settings: Settings) -> Plan | None:
    """Whether and how to suggest at an LSP position of document `uri` (its `text`)."""
    cursor = cursor_at(text, line, character)
    if cursor is None or not settings.enabled or not cursor.prefix.strip():
        return None
    if not postprocess.may_suggest(cursor.line_after):
        return None
    return Plan(uri, cursor, postprocess.is_multiline(cursor.line_before, cursor.line_after, settings.multiline))


@dataclass
class Suggestion:
    text: str
    stats: Stats
    # The full-window prompt to prefill once typing pauses, when this request had to use a
    # shorter one (a cold cache); None when it used the full one.
    full_prompt: str | list[int] | None


class Suggester:
    def __init__(self, engine: CompletionEngine, settings: Settings, others: Others,
                 budget: Budget = Budget(), cold_prefill_s: float = COLD_PREFILL_S):
        self.engine = engine
        self.settings = settings  # replaced by the server when its settings change
        self.others = others
        self.budget = budget
        self.cold_prefill_s = cold_prefill_s
        self._snippets: dict[str, tuple[int, str]] = {}  # uri -> (prefix window block, header)

    def forget(self, uri: str) -> None:
        self._snippets.pop(uri, None)

    def snippets_for(self, plan: Plan) -> str:
        """Similar chunks of other documents, recomputed only when the prefix window moves,
        so the prompt's start (and the KV cache) survives typing."""
        block = plan.cursor.prefix.count("\n") // WINDOW_STEP_LINES
        cached = self._snippets.get(plan.uri)
        if cached is not None and cached[0] == block:
            return cached[1]
        header = snippets(plan.cursor, self.others(plan.uri), self.engine.tokenizer, self.budget)
        self._snippets[plan.uri] = (block, header)
        return header

    def prompt_for(self, cursor: Cursor, header: str) -> tuple[str | list[int], str | list[int] | None]:
        """The prompt for this request, and the full-window prompt to prefill later when this
        one had to be shortened (None when it is the full one): a cold 2k-token file on a slow
        CPU would otherwise wait a long time for its first suggestion."""
        engine = self.engine
        full = build_prompt(cursor, engine.tokenizer, engine.max_len, header, self.budget)
        if engine.prefill_seconds(full) <= self.cold_prefill_s:
            return full, None
        fits = int(engine.prefill_tokens_per_s() * self.cold_prefill_s)
        cold = Budget(prefix_tokens=max(32, fits * 4 // 5), suffix_tokens=fits // 5, snippet_tokens=0)
        return build_prompt(cursor, engine.tokenizer, engine.max_len, "", cold), full

    def generate(self, plan: Plan, cancel: threading.Event, sampling: Sampling = Sampling(),
                 on_prefilled: Callable[[], None] | None = None) -> Suggestion:
        """Run the model for `plan` (call on the model thread) and clean its text."""
        settings, cursor = self.settings, plan.cursor
        prompt, full = self.prompt_for(cursor, self.snippets_for(plan))
        request = Request(settings.maxTokens, postprocess.stop_rule(plan.multiline, cursor.line_before),
                          sampling, cancel, on_prefilled)
        result = self.engine.complete(prompt, request, settings.mode)
        text = postprocess.clean(result.text, cursor.line_after, cursor.following_lines())
        return Suggestion(text, result.stats, full)
