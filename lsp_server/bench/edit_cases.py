"""Next-edit cases from real changes: the diff between two released versions of a package's
source (two sdists), file by file.

- A repeated-edit case comes from hunks that make the same kind of change (the same tokens
  removed and added: a rename, a new argument at every call, the same fix; or the same once
  names are abstracted: `super(Foo, self)` and `super(Bar, self)` both become `super()`),
  other hunks between them or not: the first is applied, the cursor is on its last line, and
  the next edit due is the next of its kind, at most MAX_DISTANCE lines below. One case per
  kind of change and file: the later ones of a kind are taken.
- A no-edit-due case comes from a file changed by a single hunk: it is applied, and nothing
  more is due.
"""
from __future__ import annotations

import difflib
import re
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lsp_server.next_edit.history import Edit
from lsp_server.next_edit.places import FIXED
from lsp_server.next_edit.rewrite import WINDOW_ABOVE, WINDOW_LINES

SUFFIXES = (".py",)
MAX_HUNK_LINES = 4  # lines on either side of a hunk used as an edit
MAX_DISTANCE = 60  # lines from the cursor to the next edit due, at most
_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Hunk:
    """old lines [a1, a2) became `new` lines."""
    a1: int
    a2: int
    new: tuple[str, ...]
    old: tuple[str, ...]


@dataclass(frozen=True)
class EditCase:
    name: str  # package/path:line
    path: str
    text: str  # the document with the first edit made
    line: int  # the cursor's line: the first edit's last line
    edits: tuple[Edit, ...]  # the recent edits
    release: str  # the file in the newer version: every edit still due made
    next_line: int | None  # where the next edit due starts in `text`; None: no edit due
    one_line: bool = False  # the edit made and the one due each change one line into one line

    @property
    def distance(self) -> int | None:
        """Lines from the cursor to the next edit due."""
        return None if self.next_line is None else self.next_line - self.line

    @property
    def near(self) -> bool:
        """The next edit due lies in the window around the cursor (WINDOW_LINES, WINDOW_ABOVE
        of them above)."""
        return self.next_line is not None and self.next_line < max(0, self.line - WINDOW_ABOVE) + WINDOW_LINES


def read_sdist(path: Path) -> dict[str, str]:
    """{path inside the package: text} of its source files."""
    files = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[-1]
            if member.isfile() and name.endswith(SUFFIXES):
                data = tar.extractfile(member).read()
                if b"\0" not in data:
                    files[name] = data.decode("utf-8", errors="replace")
    return files


def hunks(old: list[str], new: list[str]) -> list[Hunk]:
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [Hunk(i1, i2, tuple(new[j1:j2]), tuple(old[i1:i2]))
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def signature(hunk: Hunk, abstract: bool = False) -> tuple:
    """What the hunk removes and adds, as tokens, whatever their place: equal for the same kind
    of change in different places. `abstract`: the user's names (not keywords or builtins) as
    one token."""
    def count(lines: tuple[str, ...]) -> Counter:
        found = _TOKEN.findall("\n".join(lines))
        return Counter("NAME" if abstract and (t[0].isalpha() or t[0] == "_") and t not in FIXED else t for t in found)
    removed, added = count(hunk.old), count(hunk.new)
    return tuple(sorted((removed - added).items())), tuple(sorted((added - removed).items()))


def same_kind(first: Hunk, other: Hunk) -> bool:
    """The same change, named the same or once names are abstracted (a change of names alone
    abstracts to nothing, and does not count that way)."""
    return any(signature(first, abstract) == signature(other, abstract) and any(signature(first, abstract))
               for abstract in (False, True))


def apply(old: list[str], chosen: list[Hunk]) -> list[str]:
    out, at = [], 0
    for hunk in sorted(chosen, key=lambda h: h.a1):
        out += old[at:hunk.a1] + list(hunk.new)
        at = hunk.a2
    return out + old[at:]


def _as_edit(old: list[str], hunk: Hunk, line: int) -> Edit:
    if not hunk.old or not hunk.new:  # lines added or removed: the line above as context
        above = old[hunk.a1 - 1:hunk.a1] if hunk.a1 > 0 else []
        return Edit("\n".join(above + list(hunk.old)), "\n".join(above + list(hunk.new)), max(0, line - len(above)))
    return Edit("\n".join(hunk.old), "\n".join(hunk.new), line)


def _small(hunk: Hunk) -> bool:
    return len(hunk.old) <= MAX_HUNK_LINES and len(hunk.new) <= MAX_HUNK_LINES


def file_cases(package: str, path: str, old_text: str, new_text: str) -> tuple[list[EditCase], list[EditCase]]:
    """(repeated-edit cases, no-edit-due cases) of one file's change."""
    old, new = old_text.split("\n"), new_text.split("\n")
    found = hunks(old, new)
    if len(found) == 1 and _small(found[0]):
        first = found[0]
        line = first.a1 + max(0, len(first.new) - 1)
        text = "\n".join(apply(old, [first]))
        return [], [EditCase(f"{package}/{path}:{line + 1}", path, text, line, (_as_edit(old, first, first.a1),),
                             text, None)]
    repeated, taken = [], set()
    for i, first in enumerate(found):
        if i in taken or not _small(first):
            continue
        chain = [k for k in range(i + 1, len(found)) if k not in taken and same_kind(first, found[k])]
        taken.update(chain)
        if not chain or not _small(found[chain[0]]):
            continue
        second = found[chain[0]]
        line = first.a1 + max(0, len(first.new) - 1)  # the first edit's last line, in the new text
        shift = len(first.new) - len(first.old)
        if second.a1 + shift - line > MAX_DISTANCE:
            continue
        one_line = all(len(h.old) == len(h.new) == 1 for h in (first, second))
        repeated.append(EditCase(f"{package}/{path}:{line + 1}", path, "\n".join(apply(old, [first])), line,
                                 (_as_edit(old, first, first.a1),), new_text, second.a1 + shift, one_line))
    return repeated, []


def sdist_cases(old_sdist: Path, new_sdist: Path) -> tuple[list[EditCase], list[EditCase]]:
    """(repeated-edit cases, no-edit-due cases) from two versions of a package."""
    before, after = read_sdist(old_sdist), read_sdist(new_sdist)
    package = new_sdist.name.removesuffix(".tar.gz")
    repeated, none_due = [], []
    for path in sorted(before.keys() & after.keys()):
        if before[path] != after[path]:
            r, n = file_cases(package, path, before[path], after[path])
            repeated += r
            none_due += n
    return repeated, none_due
