"""Typed-through reuse: when the user types the first characters of the suggestion that is
on screen, the rest of it is still the answer; no need to ask the model again. Beside it, the
suggestion prefetched for the spot after the shown one as if it were accepted: Tab, then Tab.
Each remembers whether it was written from the whole window: one from a cold window is only
kept until a better-informed answer for the spot is ready."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    prefix: str  # document text before the cursor when the suggestion was made
    suffix: str  # and after it
    text: str  # the suggestion
    whole: bool = True  # written from the full window (else a cold one: a better one may follow)


def next_indent(line: str) -> str:
    """The indentation an editor gives the line after `line`: the same, one level deeper after
    a line that opens a block or a bracket."""
    indent = line[:len(line) - len(line.lstrip())]
    if line.rstrip().endswith((":", "{", "(", "[")):
        indent += "\t" if indent.startswith("\t") else "    "
    return indent


class TypedThroughCache:
    def __init__(self) -> None:
        self._shown: dict[str, Shown] = {}
        self._next: dict[str, Shown] = {}  # made ahead, for the end of the shown suggestion

    def remember(self, uri: str, prefix: str, suffix: str, text: str, whole: bool = True) -> None:
        if text:
            self._shown[uri] = Shown(prefix, suffix, text, whole)
        else:
            self._shown.pop(uri, None)

    def remember_next(self, uri: str, prefix: str, suffix: str, text: str) -> None:
        """The suggestion for the spot where accepting the shown one puts the cursor."""
        if text:
            self._next[uri] = Shown(prefix, suffix, text)

    def lookup(self, uri: str, prefix: str, suffix: str) -> Shown | None:
        """The rest of the suggestion made here (or ahead for here) if the user typed its start
        (or nothing yet), as shown at this cursor; else None."""
        for kept in (self._shown.get(uri), self._next.get(uri)):
            if kept is None or suffix != kept.suffix or not prefix.startswith(kept.prefix):
                continue
            typed = prefix[len(kept.prefix):]
            if kept.text.startswith(typed) and len(typed) < len(kept.text):
                return Shown(prefix, suffix, kept.text[len(typed):], kept.whole)
        return None

    def accepted(self, uri: str) -> None:
        """The shown suggestion was taken: the one made ahead is what comes next."""
        self._shown.pop(uri, None)

    def forget(self, uri: str) -> None:
        self._shown.pop(uri, None)
        self._next.pop(uri, None)
