"""The user's recent edits per document, for next-edit predictions (lsp_server/next_edit/rewrite.py).

Each document's text is kept as last seen; a new text is compared with it (common prefix and
suffix, found by bisection on slice comparisons), which gives the changed span whatever the
client sent: keystrokes, a paste, a whole-file replace, an undo. A change that touches a kept
edit's span grows that edit (consecutive keystrokes make one edit), and an edit whose text is
back to what it was (typed then deleted, undone) is forgotten.

Bounded: at most MAX_EDITS edits per document, none larger than MAX_EDIT_CHARS on either side
(a larger one, a huge paste say, is no pattern to repeat and is dropped), and no copy of a
document larger than MAX_DOCUMENT_CHARS or holding NUL characters (binary text): such a
document has no history until its text is ordinary again.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

MAX_EDITS = 8
MAX_EDIT_CHARS = 2_000
MAX_DOCUMENT_CHARS = 2_000_000
MAX_DOCUMENTS = 64  # documents with a history; the least recently changed one is forgotten first


@dataclass(frozen=True)
class Edit:
    """One edit as the whole lines it touched: `before` became `after` (without the last
    line's newline); `line` is its first line in the current text."""
    before: str
    after: str
    line: int


@dataclass(frozen=True)
class _Span:
    """A kept edit: the current text's [start, end) replaced `removed`."""
    start: int
    end: int
    removed: str


def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """(start, old_end, new_end): old[start:old_end] became new[start:new_end], the smallest such
    span (the longest common prefix, then the longest common suffix of the rest)."""
    limit = min(len(old), len(new))
    start = _longest(lambda n: old[:n] == new[:n], limit)
    tail = _longest(lambda n: old[len(old) - n:] == new[len(new) - n:], limit - start)
    return start, len(old) - tail, len(new) - tail


def _longest(equal: Callable[[int], bool], limit: int) -> int:
    """The largest n <= limit with equal(n), for a predicate true up to some n and false after."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if equal(mid):
            low = mid
        else:
            high = mid - 1
    return low


# An LSP range: (start line, start character, end line, end character), characters in UTF-16 units.
Range = tuple[int, int, int, int]


def _offsets(text: str, where: Range) -> tuple[int, int] | None:
    """The string offsets of an LSP range of `text`, or None when it lies outside."""
    out = []
    for line, units in (where[:2], where[2:]):
        start = 0
        for _ in range(line):
            start = text.find("\n", start) + 1
            if start == 0:
                return None
        end = text.find("\n", start)
        content = text[start:len(text) if end < 0 else end]
        cut = content.encode("utf-16-le")[:2 * units].decode("utf-16-le", errors="ignore")
        if len(cut.encode("utf-16-le")) != 2 * units:
            return None
        out.append(start + len(cut))
    return (out[0], out[1]) if out[0] <= out[1] else None


def _ordinary(text: str) -> bool:
    return len(text) <= MAX_DOCUMENT_CHARS and "\0" not in text


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the lines holding text[start:end]."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return first, len(text) if last < 0 else last


class EditHistory:
    """One document's recent edits."""

    def __init__(self, text: str):
        self._text: str | None = text if _ordinary(text) else None
        self._spans: list[_Span] = []  # oldest first

    @property
    def text(self) -> str | None:
        """The text as last seen (None: too large or binary, not kept)."""
        return self._text

    def update(self, text: str) -> None:
        """The document's text is now `text`."""
        old = self._text
        self._text = text if _ordinary(text) else None
        if self._text is None:
            self._spans = []
        elif old is not None and old != text:
            start, old_end, new_end = changed_span(old, text)
            self._record(old, start, old_end, new_end - old_end)

    def _record(self, old: str, start: int, end: int, delta: int) -> None:
        """old[start:end] was replaced, the text's length changing by `delta`."""
        touched = sorted((s for s in self._spans if s.start <= end and s.end >= start), key=lambda s: s.start)
        first = min([start] + [s.start for s in touched])
        last = max([end] + [s.end for s in touched])
        removed, at = [], first  # the original text of old[first:last]
        for span in touched:
            removed += [old[at:span.start], span.removed]
            at = span.end
        removed.append(old[at:last])
        kept = [_Span(s.start + delta, s.end + delta, s.removed) if s.start > end else s
                for s in self._spans if s not in touched]
        merged = _Span(first, last + delta, "".join(removed))
        if len(merged.removed) <= MAX_EDIT_CHARS and merged.end - merged.start <= MAX_EDIT_CHARS \
                and self._text[merged.start:merged.end] != merged.removed:
            kept.append(merged)
        self._spans = kept[-MAX_EDITS:]

    def edits(self) -> list[Edit]:
        """The kept edits, oldest first, as whole lines."""
        text = self._text
        if text is None:
            return []
        out = []
        for span in self._spans:
            first, last = _whole_lines(text, span.start, span.end)
            before = text[first:span.start] + span.removed + text[span.end:last]
            out.append(Edit(before, text[first:last], text.count("\n", 0, first)))
        return out


class EditHistories:
    """The histories of the open documents, by uri."""

    def __init__(self) -> None:
        self._by_uri: dict[str, EditHistory] = {}

    def opened(self, uri: str, text: str) -> None:
        self._by_uri.pop(uri, None)
        self._by_uri[uri] = EditHistory(text)
        while len(self._by_uri) > MAX_DOCUMENTS:
            del self._by_uri[next(iter(self._by_uri))]

    def changed(self, uri: str, text: str, changes: list[tuple[Range | None, str]] = ()) -> None:
        """The document is now `text`, after `changes` (each a range replaced, or None for the
        whole text): each is an edit of its own, though an editor sends several at once."""
        history = self._by_uri.pop(uri, None)
        if history is None:
            self.opened(uri, text)  # its first change is not known: history starts now
            return
        for where, new in changes:
            current = history.text
            span = None if where is None or current is None else _offsets(current, where)
            if span is None:
                break
            history.update(current[:span[0]] + new + current[span[1]:])
        history.update(text)  # the editor's text wins where the changes did not lead to it
        self._by_uri[uri] = history  # most recently changed last

    def closed(self, uri: str) -> None:
        self._by_uri.pop(uri, None)

    def edits(self, uri: str) -> list[Edit]:
        history = self._by_uri.get(uri)
        return [] if history is None else history.edits()


def edits_between(old: str, new: str) -> list[Edit]:
    """The edits that turn `old` into `new`, in the order of the text, as whole lines (what the
    `edit` command reads from a file and its earlier version)."""
    if not (_ordinary(old) and _ordinary(new)):
        return []
    a, b = old.split("\n"), new.split("\n")
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("insert", "delete") and i1 > 0:  # lines added or removed: the line above as context
            i1, j1 = i1 - 1, j1 - 1
        before, after = "\n".join(a[i1:i2]), "\n".join(b[j1:j2])
        if tag != "equal" and len(before) <= MAX_EDIT_CHARS and len(after) <= MAX_EDIT_CHARS:
            out.append(Edit(before, after, j1))
    return out[-MAX_EDITS:]
