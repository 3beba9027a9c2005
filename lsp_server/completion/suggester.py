"""One suggestion, from an LSP position to cleaned text: the one orchestrator that the server,
`complete` and `bench --quality` all call.

    position (UTF-16) -> cursor -> plan (suggest here? one line or a block?)
      -> prompt (other files first: the repository's context, else similar chunks of open
         documents; then the window around the cursor, FIM; a shorter window and no other
         files where a cold cache would take too long to prefill)
      -> engine.complete (on the caller's model thread) -> clean-up against what follows
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from engine.api import CompletionEngine, Request, Sampling
from engine.stats import Stats
from lsp_server.completion import cleanup
from lsp_server.completion.prompt import (
    WINDOW_STEP_LINES, Block, Budget, Cursor, build_prompt, fit, neighbourhood, similar_snippets)
from lsp_server.completion.cold_window import cold_head, cold_prompt, grown_prompt, settled_part, warm_start
from lsp_server.options import Settings
from lsp_server.completion.repo_context import Repository, choose, names_near

# Prompt tokens besides the window, the suffix, other files and the answer: the template, the
# path, a draft tree's nodes.
PROMPT_MARGIN = 64

# windowTokens null: the window this machine prefills in WINDOW_FILL_S (whole by a new spot's
# second or third pause), at least the default and at most MAX_AUTO_WINDOW, about llama.vim's 256
# lines: with the window whole, 2,560 tokens were as often right as llama.vim on the pause
# replay, 1,024 three quarters as often (docs/server.md). A 2-core CPU keeps 1,024; a GPU 2,560.
WINDOW_FILL_S = 4.0
MAX_AUTO_WINDOW = 2560


def auto_window(prefill_tokens_per_s: float) -> int:
    """The prefix window's tokens for a machine that prefills at this rate."""
    return int(max(Budget.prefix_tokens, min(MAX_AUTO_WINDOW, prefill_tokens_per_s * WINDOW_FILL_S)))


# The least a cold window holds, however slow the machine or short coldPrefillMs: the cursor's
# line and a few above it (an empty prompt is no suggestion at all).
MIN_COLD_TOKENS = 32

# Cold windows kept to grow at the next spot: a request's, and the wider one written after it.
COLD_WINDOWS_KEPT = 2
# The wider of them is grown where its prefill costs at most this much more than the other's: a
# few tokens' more, not a wider window's prefill left half done.
GROWN_SLACK_S = 0.15

# Characters before a suggestion remembered with it (Engine.remember): enough for the engine's
# lead of a few tokens.
REMEMBER_BEFORE = 200


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
    path: str  # the document's name in prompts: relative to the workspace's root


def plan(uri: str, text: str, line: int, character: int, settings: Settings,
         path: str | None = None) -> Plan | None:
    """Whether and how to suggest at an LSP position of document `uri` (its `text`, named
    `path` in prompts, else by its uri)."""
    cursor = cursor_at(text, line, character)
    if cursor is None or not settings.enabled or not cursor.prefix.strip():
        return None
    if not cleanup.may_suggest(cursor.line_after):
        return None
    return Plan(uri, cursor, cleanup.is_multiline(cursor.line_before, cursor.line_after, settings.multiline),
                uri if path is None else path)


@dataclass
class Suggestion:
    text: str
    stats: Stats
    # The full-window prompt to prefill once typing pauses, when this request had to use a
    # shorter one (a cold cache); None when it used the full one.
    full_prompt: str | list[int] | None


class Sources(Protocol):
    """What a prompt may show of other files (serving's Documents is one): the open documents
    that may be shared with `uri`'s prompt, and the workspace's repository."""
    repository: Repository

    def shareable(self, uri: str) -> dict[str, str]: ...


class Suggester:
    def __init__(self, engine: CompletionEngine, documents: Sources, budget: Budget = Budget()):
        """`documents`: the open documents whose snippets a prompt may show (never a file the
        workspace index refuses) and the workspace's files (its repository)."""
        self.engine = engine
        self.documents = documents
        self.budget = budget
        self._context: dict[str, tuple[tuple, list[Block]]] = {}  # uri -> (what it was chosen for, blocks)
        self._auto_window: int | None = None  # chosen once: a window that moved would empty the cache
        # The last cold windows, newest first: the document's path in prompts, the lines each
        # showed and the other files before them (grown at the next spot, it keeps both: they
        # are cached).
        self._colds: list[tuple[str, tuple[int, ...], list[int]]] = []
        # The last window chosen afresh (`widen`), with what it was chosen for: asked again for
        # the same spot, it is the same window, though the measured prefill rate that sized it
        # has moved since (its prefill, say, is what moved it).
        self._widened: tuple[tuple, tuple[str | list[int], str | list[int] | None]] | None = None

    def forget(self, uri: str) -> None:
        self._context.pop(uri, None)

    def context_for(self, plan: Plan, settings: Settings) -> list[Block]:
        """Other files' pieces for the prompt, chosen once per region of the file (the prefix
        window's step), for the names near the cursor where the region was first asked: they come
        first in the prompt, so choosing them again as the names change would empty the KV cache
        at every line the user writes."""
        repo = bool(settings.repoContext)
        key = (plan.cursor.prefix.count("\n") // WINDOW_STEP_LINES, repo)
        cached = self._context.get(plan.uri)
        if cached is not None and cached[0] == key:
            return cached[1]
        names = names_near(plan.cursor) if repo else ()
        others = self.documents.shareable(plan.uri)
        if repo:
            picked = choose(plan.path, plan.cursor, others, self.documents.repository, names).blocks
        else:
            picked = similar_snippets(neighbourhood(plan.cursor), others)
        blocks = fit(picked, self.engine.tokenizer, self.budget.repo_tokens if repo else self.budget.snippet_tokens)
        self._context[plan.uri] = (key, blocks)
        return blocks

    def window_tokens(self, settings: Settings) -> int:
        """The prefix window's tokens under `settings`. It gives way to the rest of the prompt
        and the answer: the model's context never cuts off the prompt's start (its FIM and
        repository tokens)."""
        if self._auto_window is None:
            self._auto_window = auto_window(self.engine.prefill_tokens_per_s())
        rest = self.budget.suffix_tokens + max(self.budget.repo_tokens, self.budget.snippet_tokens) + PROMPT_MARGIN
        return max(64, min(settings.windowTokens or self._auto_window, self.engine.max_len - settings.maxTokens - rest))

    def prompt_for(self, cursor: Cursor, blocks: list[Block], path: str = "", settings: Settings = Settings(),
                   widen: bool = False) -> tuple[str | list[int], str | list[int] | None]:
        """The prompt for this request, and the full-window prompt to prefill later when this
        one had to be shortened (None when it is the full one): a cold 2k-token file on a slow
        CPU would otherwise wait a long time for its first suggestion. The window is
        `settings.windowTokens` long (null: `auto_window` of this machine's prefill rate), and a
        request may prefill for `settings.coldPrefillMs` (0: as long as the full window takes).
        Shortened, in this order: the last cold window of the document grown down to the cursor
        (while it prefills in time and stays shorter than the full prompt; the one before it where
        that prefills in much less time: the last one's prefill was cut short), the cached start of
        the full prompt with a cold window of the rest, a cold window (after the best of the
        other files' definitions: `cold_head`). `widen`: a window chosen afresh, never the last
        cold window grown (at the same spot, that is the same window)."""
        if not widen:
            return self._choose(cursor, blocks, path, settings, widen)
        spot = (cursor, path, settings)
        if self._widened is None or self._widened[0] != spot:
            self._widened = (spot, self._choose(cursor, blocks, path, settings, widen))
        return self._widened[1]

    def _choose(self, cursor: Cursor, blocks: list[Block], path: str, settings: Settings,
                widen: bool) -> tuple[str | list[int], str | list[int] | None]:
        engine, name = self.engine, self.documents.repository.name
        budget = replace(self.budget, prefix_tokens=self.window_tokens(settings))
        full = build_prompt(cursor, engine.tokenizer, engine.max_len, blocks, budget, path, name)
        allowed_s = settings.coldPrefillMs / 1000
        if not allowed_s or engine.prefill_seconds(full) <= allowed_s:
            return full, None
        fits = max(MIN_COLD_TOKENS, int(engine.prefill_tokens_per_s() * allowed_s))
        full_tokens, grown = len(engine.prompt_tokens(full)), []
        for kept in ([] if widen else [c for c in self._colds if c[0] == path]):
            window = grown_prompt(cursor, engine.tokenizer, fits, kept[1], kept[2])
            if window is not None:
                tokens = engine.prompt_tokens(window[0])
                if len(tokens) <= full_tokens and (seconds := engine.prefill_seconds(tokens)) <= allowed_s:
                    grown.append((seconds, window, kept))
        if grown:  # the newest (widest) window that costs little more than the quickest to grow
            quickest = min(seconds for seconds, _, _ in grown)
            _, window, kept = next(g for g in grown if g[0] <= quickest + GROWN_SLACK_S)
            self._keep_cold((path, window[1], kept[2]), kept)
            return window[0], full
        warm = warm_start(full, engine.cached_tokens(full), cursor, engine.tokenizer, fits)
        if warm is not None:
            return warm, full
        head = cold_head(blocks, engine.tokenizer, fits, path, name)
        prompt, shown = cold_prompt(cursor, engine.tokenizer, fits, head)
        self._keep_cold((path, shown, head))
        return prompt, full

    def _keep_cold(self, window: tuple[str, tuple[int, ...], list[int]], replaces: tuple | None = None) -> None:
        """Keep a cold window to grow at the next spot, newest first, with the one before it: a
        wider window written in idle time may be cut short before its prefill (an edit stops
        it), and the request's window, still cached, is then the one to grow."""
        self._colds = [window, *(c for c in self._colds if c is not replaces and c != window)][:COLD_WINDOWS_KEPT]

    def prefill(self, plan: Plan, settings: Settings, cancel: threading.Event) -> bool:
        """Prefill for `plan` ahead of a request (call on the model thread): where the full window
        would not be ready in time, the window a request there would get now and then, in
        another of the engine's caches, the full one. A request on the next line, however soon,
        then grows a window whose start is cached (the first pause in a file just opened has
        something to grow from), and the full one takes over once whole. An engine with one
        cache gets the full window alone. False where `cancel` stopped it first."""
        prompt, full = self.prompt_for(plan.cursor, self.context_for(plan, settings), plan.path, settings)
        prompts = (prompt,) if full is None else (prompt, full) if self.engine.completion_caches > 1 else (full,)
        for tokens in prompts:
            self.engine.prefill(self.engine.prompt_tokens(tokens), cancel)
        return not cancel.is_set()

    def prefill_settled(self, plan: Plan, settings: Settings, cancel: threading.Event) -> None:
        """Prefill the window chosen afresh for `plan` under `settings` (a wider one, after a cold
        answer) up to the cursor's line, on the model thread: the user typing on leaves that part
        as it is, so the next line's request grows the window from a cached start (`prompt_for`)
        rather than the shorter one before it."""
        prompt, _ = self.prompt_for(plan.cursor, self.context_for(plan, settings), plan.path, settings, widen=True)
        tokens = self.engine.prompt_tokens(prompt)
        self.engine.prefill(tokens[:settled_part(tokens, self.engine.tokenizer)], cancel)

    def generate(self, plan: Plan, settings: Settings, cancel: threading.Event, sampling: Sampling = Sampling(),
                 on_prefilled: Callable[[], None] | None = None, whole: bool = False,
                 widen: bool = False) -> Suggestion:
        """Run the model for `plan` with `settings` (call on the model thread) and clean its text.
        `whole`: from the full window however long its prefill takes; `widen`: from a window
        chosen afresh for `settings` (the better-informed answers that follow a cold one)."""
        cursor = plan.cursor
        prompt, full = self.prompt_for(cursor, self.context_for(plan, settings), plan.path, settings, widen)
        if whole and full is not None:
            prompt, full = full, None
        request = Request(settings.maxTokens, cleanup.stop_rule(plan.multiline, cursor.line_before),
                          sampling, cancel, on_prefilled)
        result = self.engine.complete(prompt, request, settings.mode)
        text = cleanup.clean(result.text, cursor.line_after, cursor.following_lines())
        return Suggestion(text, result.stats, full)
