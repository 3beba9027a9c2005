"""Next-edit prediction: from the user's recent edits, the edit they will make next near the
cursor.

    recent edits (lsp_server/edit_history.py) + a window of lines around the cursor
      -> a chat prompt: the edits as before/after blocks, then "make the same kind of change
         wherever it is still needed in the following code; reply with the whole code block",
         the window, and the answer's opening fence already written
      -> the model rewrites the window (greedy, speculative: prompt lookup drafts the window's
         lines from the prompt, so a mostly copied rewrite takes few passes; exact as always)
      -> the smallest edit turning the window into the rewrite; an unchanged window: none

The plain chat instruction measured far better on Qwen2.5-Coder-1.5B-Instruct than Qwen's raw
repository format (`<|file_sep|>` blocks), which it kept writing past the window's end.
"""
from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.api import CompletionEngine, Request
from engine.stats import Stats
from engine.tokenization.tokenizer import Tokenizer
from lsp_server.edit_history import Edit, changed_span

WINDOW_ABOVE = 5  # lines of the window above the cursor's line
WINDOW_LINES = 20  # lines in the window
PROMPT_EDITS = 3  # the most recent edits shown to the model
FENCE = "```"
SYSTEM = "You are a helpful coding assistant."
ASK = ("Make the same kind of change wherever it is still needed in the following code; "
       "reply with the whole code block.")
# A file's extension -> the code fence's language name (others: the extension itself).
LANGUAGES = {"py": "python", "js": "javascript", "ts": "typescript", "tsx": "tsx", "rs": "rust",
             "rb": "ruby", "sh": "bash", "h": "c", "hpp": "cpp", "cc": "cpp", "md": "markdown",
             "kt": "kotlin", "cs": "csharp", "yml": "yaml"}


@dataclass(frozen=True)
class Position:
    line: int
    character: int  # UTF-16 code units, as LSP counts

    def as_dict(self) -> dict:
        return {"line": self.line, "character": self.character}


@dataclass(frozen=True)
class NextEdit:
    """Replace [start, end) of the document with `text`."""
    start: Position
    end: Position
    text: str

    def as_dict(self) -> dict:
        return {"start": self.start.as_dict(), "end": self.end.as_dict(), "text": self.text}


@dataclass
class Prediction:
    edit: NextEdit | None  # None: no edit due (or the rewrite did not finish)
    stats: Stats
    rewrite: str | None  # the model's new window (None: it did not finish one)


@dataclass(frozen=True)
class Window:
    first: int  # its first line in the document
    text: str  # whole lines, without the last one's newline


def window_at(text: str, line: int) -> Window:
    """About WINDOW_LINES lines around `line`, without blank lines at either end (a code block's
    answer does not keep them)."""
    lines = text.split("\n")
    first = max(0, min(line - WINDOW_ABOVE, len(lines) - WINDOW_LINES))
    end = min(len(lines), first + WINDOW_LINES)
    while first < end and not lines[first].strip():
        first += 1
    while end > first and not lines[end - 1].strip():
        end -= 1
    return Window(first, "\n".join(lines[first:end]))


def keep_layout(window: str, rewrite: str) -> str:
    """The rewrite with the window's own blank lines and trailing whitespace: the model does not
    copy them faithfully, and a change to them alone is no edit worth showing. Lines are matched
    on their text without trailing whitespace, blank lines aside; the window's lines stand where
    they match, the rewrite's (with the blank lines among them) where they differ."""
    old, new = window.split("\n"), rewrite.split("\n")
    a = [i for i, line in enumerate(old) if line.strip()]
    b = [j for j, line in enumerate(new) if line.strip()]
    matcher = difflib.SequenceMatcher(None, [old[i].rstrip() for i in a], [new[j].rstrip() for j in b],
                                      autojunk=False)
    instead: dict[int, list[str]] = {}  # a window line -> the lines that take its place
    before: dict[int, list[str]] = {}  # a window line -> lines inserted before it
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        lines = new[b[j1]:b[j2 - 1] + 1] if j2 > j1 else []
        if i2 > i1:
            instead[a[i1]] = lines
            instead.update((a[k], []) for k in range(i1 + 1, i2))
        else:  # inserted right after the window's previous text line
            before[a[i1 - 1] + 1 if i1 > 0 else 0] = lines
    out: list[str] = []
    for i, line in enumerate(old):
        out += before.get(i, []) + instead.get(i, [line])
    return "\n".join(out + before.get(len(old), []))


def language(path: str) -> str:
    ext = PurePosixPath(path).suffix.lstrip(".").lower()
    return LANGUAGES.get(ext, ext)


def _block(lang: str, text: str) -> str:
    return f"{FENCE}{lang}\n{text}\n{FENCE}"


def instruction(edits: list[Edit], window: str, lang: str) -> str:
    """The user's message: the recent edits, oldest first, then the request and the window."""
    shown = edits[-PROMPT_EDITS:]
    said = "I just made this change:" if len(shown) == 1 else "I just made these changes:"
    pairs = "\n\n".join(f"{_block(lang, e.before)}\nbecame\n{_block(lang, e.after)}" for e in shown)
    return f"{said}\n{pairs}\n\n{ASK}\n{_block(lang, window)}"


def _control_ids(tokenizer: Tokenizer, names: tuple[str, ...]) -> list[int] | None:
    """The ids of control tokens known by their text (they decode to nothing), or None when
    the vocabulary lacks one."""
    found = {tokenizer.id_to_token(i): i for i, t in enumerate(tokenizer.token_texts()) if t == ""}
    ids = [found.get(name) for name in names]
    return None if None in ids else ids


def chat_prompt(tokenizer, user: str, answer_start: str) -> str | list[int]:
    """ChatML (Qwen's and SmolLM2's template) with the assistant's answer begun: token ids for
    a local tokenizer; text with the control tokens written out for a remote model, whose
    server reads them."""
    system, turn = f"system\n{SYSTEM}", f"user\n{user}"
    ids = _control_ids(tokenizer, ("<|im_start|>", "<|im_end|>")) if isinstance(tokenizer, Tokenizer) else None
    if ids is None:
        return (f"<|im_start|>{system}<|im_end|>\n<|im_start|>{turn}<|im_end|>\n"
                f"<|im_start|>assistant\n{answer_start}")
    start, end = ids
    nl = tokenizer.encode("\n")
    return tokenizer.with_bos([start, *tokenizer.encode(system), end, *nl, start, *tokenizer.encode(turn), end,
                               *nl, start, *tokenizer.encode(f"assistant\n{answer_start}")])


def _closing_fence(text: str) -> int | None:
    at = text.find("\n" + FENCE)
    return None if at < 0 else at


def _utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def smallest_edit(window: Window, rewrite: str) -> NextEdit | None:
    """The one edit that turns the window into `rewrite`, as small as can be; None when they
    are equal."""
    old = window.text
    start, old_end, new_end = changed_span(old, rewrite)
    if start == old_end == new_end:
        return None

    def position(offset: int) -> Position:
        line_start = old.rfind("\n", 0, offset) + 1
        return Position(window.first + old.count("\n", 0, offset), _utf16(old[line_start:offset]))

    return NextEdit(position(start), position(old_end), rewrite[start:new_end])


def predict(engine: CompletionEngine, text: str, line: int, edits: list[Edit], path: str = "",
            mode: str = "lookup", cancel: threading.Event | None = None) -> Prediction:
    """The next edit of document `text` (named `path`), the cursor on `line`, after `edits`
    (oldest first). Call on the model thread."""
    window = window_at(text, line)
    if not edits or not window.text.strip():
        return Prediction(None, Stats(), None)
    lang = language(path)
    prompt = chat_prompt(engine.tokenizer, instruction(edits, window.text, lang), f"{FENCE}{lang}\n")
    room = len(engine.tokenizer.encode(window.text)) * 3 // 2 + 32  # the window, changed a little
    result = engine.complete(prompt, Request(min(room, 1024), _closing_fence, cancel=cancel, heal=False), mode)
    finished = result.stats.stop_reason == "stop" or (result.stats.stop_reason == "eos" and result.text)
    if not finished:
        return Prediction(None, result.stats, None)
    rewrite = keep_layout(window.text, result.text.rstrip("\n") if result.stats.stop_reason == "eos" else result.text)
    return Prediction(smallest_edit(window, rewrite), result.stats, rewrite)
