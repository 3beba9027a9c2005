"""Next-edit cases from real changes: the diff between two released versions of a package's
source (two sdists), file by file.

- A repeated-edit case comes from a run of consecutive hunks that make the same kind of change
  (the same tokens removed and added: a rename, a new argument at every call, the same fix):
  the run's first hunk is applied, the cursor is on its last line, and the next edit due is the
  run's second hunk. Only hunks the model's window can reach are asked for.
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
from lsp_server.next_edit.rewrite import WINDOW_ABOVE, WINDOW_LINES

SUFFIXES = (".py",)
MAX_HUNK_LINES = 4  # lines on either side of a hunk used as an edit
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


def signature(hunk: Hunk) -> tuple:
    """What the hunk removes and adds, as tokens, whatever their place: equal for the same kind
    of change in different places."""
    removed, added = Counter(_TOKEN.findall("\n".join(hunk.old))), Counter(_TOKEN.findall("\n".join(hunk.new)))
    return tuple(sorted((removed - added).items())), tuple(sorted((added - removed).items()))


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
    repeated, i = [], 0
    while i < len(found):
        run = [found[i]]
        while i + len(run) < len(found) and signature(found[i + len(run)]) == signature(found[i]):
            run.append(found[i + len(run)])
        i += len(run)
        if len(run) < 2 or not all(_small(h) for h in run) or not any(signature(run[0])):
            continue
        first = run[0]
        line = first.a1 + max(0, len(first.new) - 1)  # the first edit's last line, in the new text
        shift = len(first.new) - len(first.old)
        window_end = max(0, line - WINDOW_ABOVE) + WINDOW_LINES
        if run[1].a2 + shift > window_end:
            continue
        repeated.append(EditCase(f"{package}/{path}:{line + 1}", path, "\n".join(apply(old, [first])), line,
                                 (_as_edit(old, first, first.a1),), new_text, run[1].a1 + shift))
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
