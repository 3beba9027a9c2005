"""Rules that shape a suggestion around the cursor: whether to suggest at all, single vs
multi-line, where generation stops, and cleaning the text against what follows."""
from __future__ import annotations

from collections.abc import Callable

CLOSERS = set(")]}\"'`")
BLOCK_OPENERS = (":", "{")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def may_suggest(right_of_cursor: str) -> bool:
    """No suggestion in the middle of text: only closing brackets/quotes may follow."""
    return all(c in CLOSERS for c in right_of_cursor.strip())


def is_multiline(line_before_cursor: str, right_of_cursor: str, policy: str) -> bool:
    """auto: multi-line only at the end of a line that opens a block."""
    if policy != "auto":
        return policy == "always"
    return not right_of_cursor.strip() and line_before_cursor.rstrip().endswith(BLOCK_OPENERS)


def stop_rule(multiline: bool, line_before_cursor: str) -> Callable[[str], int | None]:
    """Where to cut the generated text (so generation stops early), or None to go on.

    Single-line: at the first newline. Multi-line: at the first non-blank line indented no
    deeper than the cursor's line, i.e. the end of the block being written."""
    if not multiline:
        def single(text: str) -> int | None:
            i = text.find("\n")
            return None if i < 0 else i
        return single

    block = _indent(line_before_cursor)

    def multi(text: str) -> int | None:
        start = text.find("\n")
        while start >= 0:
            end = text.find("\n", start + 1)
            line = text[start + 1:] if end < 0 else text[start + 1:end]
            if line.strip() and _indent(line) <= block:
                # Judge a line only once its indentation is complete (non-space text seen).
                return start
            start = end
        return None
    return multi


def clean(text: str, right_of_cursor: str, following_lines: list[str]) -> str:
    """Trim what the editor already has: closing characters right of the cursor, and
    trailing lines that repeat the lines after the cursor. Empty means no suggestion."""
    text = text.rstrip()
    right = right_of_cursor.strip()
    if right and "\n" not in text and text.endswith(right):
        text = text[: -len(right)].rstrip()
    lines = text.split("\n")
    upcoming = [ln.strip() for ln in following_lines if ln.strip()]
    # Drop the suggestion's tail where it repeats the next lines of the document.
    for n in range(len(lines), 0, -1):
        tail = [ln.strip() for ln in lines[-n:]]
        if tail == upcoming[:n] and any(tail):
            lines = lines[:-n]
            break
    text = "\n".join(lines).rstrip()
    return text if text.strip() else ""
