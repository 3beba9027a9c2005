"""Next-edit prediction: from the user's recent edits, the edit they will make next, where it
is due.

    recent edits (lsp_server/next_edit/history.py)
      -> the nearest place where the last edit's old form still stands
         (lsp_server/next_edit/places.py): as many lines as the edit's old ones
      -> a chat prompt: the edits as before/after blocks, then "make the same kind of change
         to the following code", the place's lines, and the answer's opening fence written
      -> the model writes the lines anew (greedy, speculative, exact as always) until the
         closing fence; the smallest edit that turns them into that; unchanged: none
    edits with no old form to look for (a change of spaces): the same with a window of 14 lines
    around the cursor, shown as it was before the last edit (the model makes that one again,
    and then goes on to the others far more often than when it is shown done); the rewrite ends
    once its first change beyond the user's own is made and two lines are copied again, and
    only its changes but the user's own are proposed.
    an old form that stands nowhere: no edit (nothing of its kind is left to do).

The plain chat instruction measured far better on Qwen2.5-Coder-1.5B-Instruct than Qwen's raw
repository format (`<|file_sep|>` blocks), which it kept writing past the window's end.
"""
from __future__ import annotations

import difflib
import functools
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.api import EDIT_CACHE, CompletionEngine, Request
from engine.stats import Stats
from engine.tokenization.tokenizer import Tokenizer
from lsp_server.next_edit.history import Edit, changed_span
from lsp_server.next_edit.places import due_places, pattern_of

# The window the model rewrites: of 20, 17 and 14 lines, the smallest was right most often on
# real edits (a shorter rewrite has fewer places to drift; docs/next_edit.md).
WINDOW_ABOVE = 3  # lines of the window above the cursor's line
WINDOW_LINES = 14  # lines in the window
PROMPT_EDITS = 3  # the most recent edits shown to the model
# Window lines copied again after the rewrite's first change that end it: the next edit is the
# first change (the one after it comes with the next request), and the rest costs no passes.
RESYNC_LINES = 2
FENCE = "```"
SYSTEM = "You are a helpful coding assistant."
ASK = ("Make the same kind of change wherever it is still needed in the following code; "
       "reply with the whole code block.")
ASK_HERE = "Make the same kind of change to the following code; reply with the whole code block."
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


@dataclass(frozen=True)
class Target:
    """The lines the model rewrites, and the edit whose old form stands there (None: the
    window around the cursor, for edits with no old form to look for)."""
    window: Window
    edit: Edit | None


def target_for(text: str, line: int, edits: list[Edit]) -> Target | None:
    """The nearest place where the edits' old form still stands (below the cursor's `line`
    first): as many lines as that edit's old ones. None when the edits have an old form and it
    stands nowhere: nothing of their kind is left to do (the cursor's window then showed edits
    where none was due: docs/next_edit.md). Edits with no old form to look for (a change of
    spaces) get the window around the cursor."""
    found = due_places(text, line, edits)
    if found is None:
        return None if any(pattern_of(edit) for edit in edits) else Target(window_at(text, line), None)
    first, count = found.lines[0], found.edit.before.count("\n") + 1
    return Target(Window(first, "\n".join(text.split("\n")[first:first + count])), found.edit)


@dataclass(frozen=True)
class Shown:
    """The window as the model is shown it."""
    text: str
    # Lines of `text` the user's recent edits made (the last one there undone): the model's
    # changes to them are never proposed (that edit made again, or undone).
    edited: tuple[tuple[int, int], ...]
    undone: tuple[int, int] | None  # the last edit's lines, undone, where it lies inside


def shown_window(window: Window, edits: list[Edit]) -> Shown:
    """The window with the last of `edits` undone where it lies wholly inside, and the lines
    every edit inside it spans."""
    lines = window.text.split("\n")

    def span(edit: Edit) -> tuple[int, int] | None:
        start, count = edit.line - window.first, edit.after.count("\n") + 1
        inside = start >= 0 and lines[start:start + count] == edit.after.split("\n")
        return (start, start + count) if inside else None

    *earlier, last = edits
    where = span(last)
    shift = 0 if where is None else last.before.count("\n") - last.after.count("\n")
    edited = tuple((a + shift, b + shift) if where and a >= where[1] else (a, b)
                   for a, b in filter(None, map(span, earlier)) if not (where and a < where[1] and b > where[0]))
    if where is None:
        return Shown(window.text, edited, None)
    before = last.before.split("\n")
    undone = (where[0], where[0] + len(before))
    return Shown("\n".join(lines[:where[0]] + before + lines[where[1]:]), (*edited, undone), undone)


def _touches(edited: tuple[tuple[int, int], ...], i1: int, i2: int) -> bool:
    """Whether lines [i1, i2) (an insertion where i1 == i2) touch one of the `edited` spans."""
    return any((i1 < end and i2 > first) or (i1 == i2 and first <= i1 <= end) for first, end in edited)


def _line_changes(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
    """old[i1:i2] became new[j1:j2], for each change; a block of lines replaced one for one
    counts line by line (so that one of them touching the user's edit drops only itself)."""
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1:
            out += [(i, i + 1, j1 + i - i1, j1 + i - i1 + 1) for i in range(i1, i2)]
        elif tag != "equal":
            out.append((i1, i2, j1, j2))
    return out


def onto_window(shown: Shown, rewrite: str, window: str) -> str:
    """The rewrite of the shown window turned into one of the current `window`: the model's
    changes but those to the lines the user's recent edits made."""
    old, new, current = shown.text.split("\n"), rewrite.split("\n"), window.split("\n")
    undone_at = len(old) if shown.undone is None else shown.undone[1]  # lines after it shift
    shift = len(current) - len(old)
    out, at = [], 0  # `at`: the current window's next line to copy
    for i1, i2, j1, j2 in _line_changes(old, new):
        if _touches(shown.edited, i1, i2):  # the user's
            continue
        c1, c2 = (i1, i2) if i1 < undone_at else (i1 + shift, i2 + shift)
        out += current[at:c1] + new[j1:j2]
        at = c2
    return "\n".join(out + current[at:])


def keep_layout(window: str, rewrite: str) -> str:
    """The rewrite with the window's own blank lines and trailing whitespace: the model does not
    copy them faithfully, and a change to them alone is no edit worth showing. Lines are matched
    on their text without trailing whitespace, blank lines aside; the window's lines stand where
    they match, the rewrite's where they differ: line for line where a changed block keeps its
    number of lines (the window's blank lines among them stay), else as a block with the
    rewrite's own blank lines in place of the window's."""
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
        if tag == "replace" and i2 - i1 == j2 - j1:
            instead.update((a[i1 + k], [new[b[j1 + k]]]) for k in range(i2 - i1))
            continue
        lines = new[b[j1]:b[j2 - 1] + 1] if j2 > j1 else []
        if i2 > i1:  # the window's lines a[i1]..a[i2 - 1], blank ones among them, give way
            instead[a[i1]] = lines
            instead.update((k, []) for k in range(a[i1] + 1, a[i2 - 1] + 1))
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


def instruction(edits: list[Edit], window: str, lang: str, ask: str = ASK) -> str:
    """The user's message: the recent edits, oldest first, then the request and the window."""
    shown = edits[-PROMPT_EDITS:]
    said = "I just made this change:" if len(shown) == 1 else "I just made these changes:"
    pairs = "\n\n".join(f"{_block(lang, e.before)}\nbecame\n{_block(lang, e.after)}" for e in shown)
    return f"{said}\n{pairs}\n\n{ask}\n{_block(lang, window)}"


@functools.lru_cache(maxsize=4)
def _control_ids(tokenizer: Tokenizer, names: tuple[str, ...]) -> list[int] | None:
    """The ids of control tokens known by their text (they decode to nothing), or None when
    the vocabulary lacks one. Found once per tokenizer."""
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


def _text_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(index, text without trailing whitespace) of the lines that are not blank."""
    return [(i, line.rstrip()) for i, line in enumerate(lines) if line.strip()]


@dataclass(frozen=True)
class Resync:
    """Where a rewrite copies the window again after its first change."""
    cut: int  # the rewrite's text up to here is kept (it ends with a newline)
    resume: int  # the window's lines from here on follow it


def first_change_end(window: str, text: str, edited: tuple[tuple[int, int], ...] = ()) -> Resync | None:
    """Once the rewrite `text` has changed the window and then copied RESYNC_LINES of its lines
    again, its first change is made: the rest of the window is taken as it is. Blank lines and
    trailing whitespace aside (keep_layout restores them); a change only to the `edited` lines
    (the user's own edits) does not count. The earliest such point,
    so that a longer text never undoes it."""
    old = _text_lines(window.split("\n"))
    lines = text.split("\n")[:-1]  # the complete lines
    new = _text_lines(lines)
    k, i = 0, 0  # aligned positions in new and old
    while True:
        while k < len(new) and i < len(old) and new[k][1] == old[i][1]:
            k, i = k + 1, i + 1
        resync = _resync(old, new, k, i)
        if resync is None:
            return None
        n, j = resync
        if not _users(old, i, j, window.count("\n") + 1, edited):
            last = new[n - 1][0]  # the raw line that completed the copied lines
            return Resync(sum(len(line) + 1 for line in lines[:last + 1]), old[j + RESYNC_LINES - 1][0] + 1)
        k, i = n, j + RESYNC_LINES


def _users(old: list[tuple[int, str]], i: int, j: int, lines: int, edited: tuple[tuple[int, int], ...]) -> bool:
    """Whether the change of the window's text lines old[i:j] (an insertion before old[i] when
    j == i) lies within one of the `edited` line spans."""
    if j == i:
        at = old[i][0] if i < len(old) else lines
        return any(first <= at <= end for first, end in edited)
    return any(first <= old[i][0] and old[j - 1][0] < end for first, end in edited)


def _resync(old: list[tuple[int, str]], new: list[tuple[int, str]], k: int, i: int) -> tuple[int, int] | None:
    """After a change at new[k] / old[i]: the first n where new[n - RESYNC_LINES:n] copies
    old[j:j + RESYNC_LINES] for some j >= i (the smallest), as (n, j); None before that."""
    for n in range(k + RESYNC_LINES, len(new) + 1):  # a deletion resyncs on its first line
        tail = [line for _, line in new[n - RESYNC_LINES:n]]
        for j in range(i, len(old) - RESYNC_LINES + 1):
            if [line for _, line in old[j:j + RESYNC_LINES]] == tail:
                return n, j
    return None


def _rewrite_stop(shown: Shown):
    """The rewrite's stop rule: its closing fence, or the window copied again after a change
    other than the user's own edit made again."""
    def stop(text: str) -> int | None:
        fence = _closing_fence(text)
        resync = first_change_end(shown.text, text, shown.edited)
        if resync is not None and (fence is None or resync.cut <= fence):
            return resync.cut
        return fence
    return stop


def utf16_units(s: str) -> int:
    """Length in UTF-16 code units, as LSP positions count."""
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
        return Position(window.first + old.count("\n", 0, offset), utf16_units(old[line_start:offset]))

    return NextEdit(position(start), position(old_end), rewrite[start:new_end])


def predict(engine: CompletionEngine, text: str, line: int, edits: list[Edit], path: str = "",
            mode: str = "lookup", cancel: threading.Event | None = None) -> Prediction:
    """The next edit of document `text` (named `path`), the cursor on `line`, after `edits`
    (oldest first). Call on the model thread."""
    target = target_for(text, line, edits) if edits else None
    if target is None or not target.window.text.strip():
        return Prediction(None, Stats(), None)
    if target.edit is not None:
        return _rewrite_place(engine, target.window, target.edit, edits, path, mode, cancel)
    return _rewrite_window(engine, target.window, edits, path, mode, cancel)


def _rewrite(engine: CompletionEngine, edits: list[Edit], code: str, extra: str, path: str, ask: str, stop,
             mode: str, cancel: threading.Event | None):
    """The model's answer to the edits and `ask` about `code`: greedy, until `stop`, in a KV
    cache of its own (the completions' prompt stays cached for the next keystroke). Room for
    `code` and `extra` (what the answer may add), grown a little."""
    lang = language(path)
    prompt = chat_prompt(engine.tokenizer, instruction(edits, code, lang, ask), f"{FENCE}{lang}\n")
    room = len(engine.tokenizer.encode(code + extra)) * 3 // 2 + 32
    return engine.complete(prompt, Request(min(room, 1024), stop, cancel=cancel, heal=False, cache=EDIT_CACHE), mode)


def _rewrite_place(engine: CompletionEngine, place: Window, edit: Edit, edits: list[Edit], path: str, mode: str,
                   cancel: threading.Event | None) -> Prediction:
    """The lines of a place where `edit`'s old form stands, rewritten alone after the edits:
    with nothing else to copy, the model makes the change it was shown (in a 14-line window
    around the place it mostly copied the place unchanged: docs/next_edit.md)."""
    result = _rewrite(engine, edits, place.text, edit.after, path, ASK_HERE, _closing_fence, mode, cancel)
    if result.stats.stop_reason != "stop":
        return Prediction(None, result.stats, None)
    rewrite = keep_layout(place.text, result.text)
    return Prediction(smallest_edit(place, rewrite), result.stats, rewrite)


def _rewrite_window(engine: CompletionEngine, window: Window, edits: list[Edit], path: str, mode: str,
                    cancel: threading.Event | None) -> Prediction:
    """The window around the cursor rewritten, shown as it was before the last edit, until
    its first change beyond the user's own is made."""
    shown = shown_window(window, edits)
    result = _rewrite(engine, edits, shown.text, "", path, ASK, _rewrite_stop(shown), mode, cancel)
    finished = result.stats.stop_reason == "stop" or (result.stats.stop_reason == "eos" and result.text)
    if not finished:
        return Prediction(None, result.stats, None)
    text = result.text.rstrip("\n") if result.stats.stop_reason == "eos" else result.text
    if (resync := first_change_end(shown.text, text, shown.edited)) is not None:  # the first change made
        text = text[:resync.cut] + "\n".join(shown.text.split("\n")[resync.resume:])  # the rest as it was
    rewrite = onto_window(shown, keep_layout(shown.text, text.removesuffix("\n")), window.text)
    return Prediction(smallest_edit(window, rewrite), result.stats, rewrite)
