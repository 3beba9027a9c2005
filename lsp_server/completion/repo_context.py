"""Which parts of the repository go into the prompt for the line at the cursor, best first:

1. definitions (outlines: lsp_server/completion/outline.py) of the names from elsewhere, nearest use to
   the cursor first: in Python the names the file imports and the attributes (`x.name`) used
   near the cursor (its other names are local), in other languages the names used near the
   cursor; a file the import names comes first, then files nearer the current one in the tree;
2. the regions of the other open documents edited last;
3. chunks of the other open documents similar to the code around the cursor.

Deterministic for the same files and cursor. The work is bounded whatever the workspace's size:
a table of which file defines which name (a regex per file, kept as files change) picks the
candidates, and at most MAX_OUTLINED files are outlined per choice."""
from __future__ import annotations

import builtins
import keyword
import re
import threading
from collections import deque
from dataclasses import dataclass
from itertools import count
from pathlib import PurePosixPath

from lsp_server.completion.prompt import Block, Cursor, neighbourhood, similar_snippets
from lsp_server.completion.outline import Outline, defined_names, imports, outline

MAX_OUTLINED = 24  # files outlined per choice
FILES_PER_NAME = 2  # a name defined in several files: the likeliest two
EDITS_PER_DOCUMENT = 4  # the ring of edited line ranges kept per document
EDIT_MARGIN = 2  # lines shown around an edited range
NEAR_LINES = 8  # lines around the cursor whose names count as near

_WORD = re.compile(r"[A-Za-z_]\w*")
_ATTRIBUTE = re.compile(r"\.\s*([A-Za-z_]\w*)")
_IMPORT_STATEMENT = re.compile(r"^[ \t]*(?:from[ \t]+\S+[ \t]+import[ \t]*\([^)]*\)|(?:from|import)\b[^\n]*)", re.M)
_PYTHON = (".py", ".pyi")
# Names whose definitions say nothing about this repository.
COMMON_NAMES = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | {"self", "cls"}


class Repository:
    """The workspace files the index accepts ({path: text}, paths relative to the root), the
    names each seems to define, and the line ranges edited last in each document. Fed from the
    index's thread and read from the model's: a lock keeps the two apart."""

    def __init__(self, name: str = ""):
        self.name = name  # the project's folder name
        self._texts: dict[str, str] = {}
        self._defines: dict[str, set[str]] = {}  # name -> paths
        self._edits: dict[str, deque] = {}  # path -> (stamp, first, last) ring
        self._stamps = count()
        self._lock = threading.Lock()

    def set(self, path: str, text: str) -> None:
        with self._lock:
            self._forget(path)
            self._texts[path] = text
            for name in defined_names(text):
                self._defines.setdefault(name, set()).add(path)

    def remove(self, path: str) -> None:
        with self._lock:
            self._forget(path)

    def _forget(self, path: str) -> None:
        text = self._texts.pop(path, None)
        for name in defined_names(text) if text is not None else ():
            paths = self._defines.get(name)
            if paths is not None:
                paths.discard(path)
                if not paths:
                    del self._defines[name]

    def text(self, path: str) -> str | None:
        return self._texts.get(path)

    def paths(self) -> list[str]:
        with self._lock:
            return sorted(self._texts)

    def defining(self, name: str) -> set[str]:
        with self._lock:
            return set(self._defines.get(name, ()))

    def edited(self, path: str, first: int, last: int) -> None:
        """Lines first..last of document `path` were just edited; typing on along the same
        lines widens the last range rather than filling the ring."""
        with self._lock:
            ring = self._edits.setdefault(path, deque(maxlen=EDITS_PER_DOCUMENT))
            if ring and ring[-1][1] - 1 <= last and first <= ring[-1][2] + 1:
                _, a, b = ring.pop()
                first, last = min(a, first), max(b, last)
            ring.append((next(self._stamps), first, last))

    def recent_edits(self) -> list[tuple[str, int, int]]:
        """(path, first line, last line) of the edited ranges, the latest first."""
        with self._lock:
            stamped = [(s, path, a, b) for path, ring in self._edits.items() for s, a, b in ring]
        return [(path, a, b) for _, path, a, b in sorted(stamped, reverse=True)]

    def forget_edits(self, path: str) -> None:
        with self._lock:
            self._edits.pop(path, None)


@dataclass(frozen=True)
class Choice:
    blocks: list[Block]  # best first
    outlined: int  # files outlined to choose them (the work done)


def _near(cursor: Cursor) -> list[str]:
    """The text around the cursor, nearest first: the cursor's line up to its last whole word
    (not the one being typed, so that it stays put while a word grows), the lines above from
    the nearest, then the lines below."""
    above = cursor.prefix.split("\n")[:-1][-NEAR_LINES:]
    return [re.sub(r"\w+$", "", cursor.line_before), *reversed(above), *cursor.following_lines(NEAR_LINES // 2)]


def names_near(cursor: Cursor) -> tuple[str, ...]:
    """Identifiers around the cursor, nearest first (the cursor's line from the cursor back);
    builtins and keywords are left out."""
    line, *rest = _near(cursor)
    found = _WORD.findall(line)[::-1]
    for text in rest:
        found += _WORD.findall(text)
    return tuple(n for n in dict.fromkeys(found) if n not in COMMON_NAMES and len(n) > 1)


def module_paths(module: str, importer: str) -> tuple[str, ...]:
    """Where a module imported by the file `importer` may be: paths relative to the root for a
    relative import, path tails for an absolute one (a src/ layout still matches)."""
    level = len(module) - len(module.lstrip("."))
    parts = [p for p in module.lstrip(".").split(".") if p]
    if level:
        parents = PurePosixPath(importer).parents
        if level > len(parents):
            return ()
        stem = parents[level - 1].joinpath(*parts)
        return (f"{stem}/__init__.py",) if not parts else (f"{stem}.py", f"{stem}/__init__.py")
    stem = "/".join(parts)
    return (f"{stem}.py", f"{stem}/__init__.py") if parts else ()


def _without_imports(text: str) -> str:
    """`text` with its import statements blanked out (same length: positions still hold)."""
    return _IMPORT_STATEMENT.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)


def _distance(name: str, before: str, after: str) -> tuple[int, str]:
    """Characters from the cursor to the nearest use of `name` in the code `before` and
    `after` it, then the name: the same order for the same text."""
    uses = re.compile(rf"\b{re.escape(name)}\b")
    distances = [len(before) - m.end() for m in uses.finditer(before)]
    if (first := uses.search(after)) is not None:
        distances.append(first.start())
    return min(distances, default=len(before) + len(after)), name


def _matches(path: str, candidates: tuple[str, ...]) -> bool:
    return any(path == c or path.endswith("/" + c) for c in candidates)


def _closeness(path: str, current: str) -> int:
    """Folders the two paths share: a sibling file is likelier than a far one."""
    shared = 0
    for a, b in zip(PurePosixPath(path).parts[:-1], PurePosixPath(current).parts[:-1]):
        if a != b:
            break
        shared += 1
    return shared


class _Outlines:
    """The outlines of the files one choice reads, at most MAX_OUTLINED of them; open
    documents' live texts win over the files on disk."""

    def __init__(self, others: dict[str, str], repository: Repository):
        self.others, self.repository, self.count = others, repository, 0

    def __call__(self, path: str) -> Outline | None:
        text = self.others[path] if path in self.others else self.repository.text(path)
        if text is None or self.count == MAX_OUTLINED:
            return None
        self.count += 1
        return outline(text, path.endswith(_PYTHON), path)


def choose(path: str, cursor: Cursor, others: dict[str, str], repository: Repository,
           names: tuple[str, ...]) -> Choice:
    """The repository's context for the document `path` at `cursor`, best first. `others`:
    the other open documents' live texts; `names`: names_near(cursor)."""
    text = cursor.prefix + cursor.suffix
    own = defined_names(text)
    imported = imports(text) if path.endswith(_PYTHON) else []
    source = {name: imp.module for imp in imported for name in imp.names}
    # `x.name`: name may be a method or attribute of a class defined elsewhere.
    attributes = set(_ATTRIBUTE.findall("\n".join(_near(cursor))))
    if path.endswith(_PYTHON):
        # A Python name from elsewhere is imported (or an attribute of what is): the other
        # names near the cursor are local. The imported ones nearest the cursor come first.
        before, after = _without_imports(cursor.prefix), _without_imports(cursor.suffix)
        wanted = sorted({n for n in names if n in attributes} | source.keys(), key=lambda n: _distance(n, before, after))
    else:
        wanted = list(names)
    wanted = [n for n in wanted if n not in own and n not in COMMON_NAMES]
    open_defines: dict[str, set[str]] = {}
    for other, other_text in others.items():
        for name in defined_names(other_text):
            open_defines.setdefault(name, set()).add(other)

    read, blocks = _Outlines(others, repository), []
    for name in wanted:
        defining = (open_defines.get(name, set()) | repository.defining(name)) - {path}
        if defining:
            home = module_paths(source[name], path) if name in source else ()
            ranked = sorted(defining, key=lambda p: (not _matches(p, home), -_closeness(p, path), p))
            blocks += _definitions(name, ranked, read, name in attributes)
        elif name in source:  # `from package import module`: what the module offers
            module = source[name] + ("" if source[name].endswith(".") else ".") + name
            where = module_paths(module, path)
            found = next((p for p in [*others, *repository.paths()] if _matches(p, where)), None)
            if found is not None and (summary := read(found)) is not None:
                blocks.append(Block(found, summary.summary()))
    blocks = list(dict.fromkeys(blocks))  # a class found for two of its members: once
    blocks += _edited_regions(path, others, repository)
    blocks += similar_snippets(neighbourhood(cursor), others)
    return Choice(blocks, read.count)


def _definitions(name: str, files: list[str], read: _Outlines, member: bool) -> list[Block]:
    """The definitions of `name` in the likeliest FILES_PER_NAME of `files` (likeliest first)."""
    blocks = []
    for candidate in files:
        if len(blocks) == FILES_PER_NAME or read.count == MAX_OUTLINED:
            break
        found = read(candidate)
        definition = found.find(name, member) if found is not None else None
        if definition is not None:
            blocks.append(Block(candidate, definition.text))
    return blocks


def _edited_regions(path: str, others: dict[str, str], repository: Repository) -> list[Block]:
    """The ranges edited last in the other open documents (the current one is in the window)."""
    blocks = []
    for other, first, last in repository.recent_edits():
        if other != path and other in others:
            lines = others[other].split("\n")
            region = "\n".join(lines[max(0, first - EDIT_MARGIN):last + 1 + EDIT_MARGIN]).strip("\n")
            if region.strip():
                blocks.append(Block(other, region))
    return blocks
