"""Typed-through reuse: when the user types the first characters of the suggestion that is
on screen, the rest of it is still the answer; no need to ask the model again."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    prefix: str  # document text before the cursor when the suggestion was made
    suffix: str  # and after it
    text: str  # the suggestion


class TypedThroughCache:
    def __init__(self) -> None:
        self._shown: dict[str, Shown] = {}

    def remember(self, uri: str, prefix: str, suffix: str, text: str) -> None:
        if text:
            self._shown[uri] = Shown(prefix, suffix, text)
        else:
            self._shown.pop(uri, None)

    def lookup(self, uri: str, prefix: str, suffix: str) -> str | None:
        """The rest of the suggestion made here if the user typed its start (or nothing yet),
        else None."""
        shown = self._shown.get(uri)
        if shown is None or suffix != shown.suffix or not prefix.startswith(shown.prefix):
            return None
        typed = prefix[len(shown.prefix):]
        if not shown.text.startswith(typed) or len(typed) >= len(shown.text):
            return None
        return shown.text[len(typed):]

    def forget(self, uri: str) -> None:
        self._shown.pop(uri, None)
