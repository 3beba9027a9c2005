"""Which files Draftline may read: the rules the workspace index and the benchmark share.

Nothing that git ignores (every `.gitignore` applies below its own folder), no secrets even
when a repository forgot to ignore them, no binaries, no huge or non-UTF-8 files.
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pathspec

SECRETS = (".env*", "*.pem", "*.key", "*.p12", "id_*")
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"})


def is_secret(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in SECRETS)


def display_name(path: Path, root: Path | None) -> str:
    """How a file is named in a prompt: its path relative to the project's root when it lies
    inside it, else its file name (never where it lives on this machine)."""
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return path.name


def read_text(path: Path, max_bytes: int) -> tuple[str | None, str]:
    """The file's text, or None and why not (unreadable, too large, binary, not UTF-8)."""
    try:
        if path.stat().st_size > max_bytes:
            return None, "too large"
        data = path.read_bytes()
    except OSError:
        return None, "unreadable"
    if b"\0" in data[:8192]:
        return None, "binary"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "not UTF-8"


@lru_cache(maxsize=4096)
def _spec(directory: Path, mtime: float) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = (directory / ".gitignore").read_text(errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _spec_at(directory: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        mtime = (directory / ".gitignore").stat().st_mtime  # a changed .gitignore is re-read
    except OSError:
        return None
    return _spec(directory, mtime)


class GitIgnore:
    """The `.gitignore` rules of the tree under `root`."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def ignored(self, path: Path, is_dir: bool = False) -> bool:
        """Is `path` (under root) ignored? The closest .gitignore with a matching rule decides,
        so a folder's `!pattern` re-includes what a parent's rule ignored, as in git."""
        path = Path(os.path.abspath(path))  # not resolve(): a link may point outside the tree
        rel = path.relative_to(self.root)
        base, ignored = self.root, False
        for part in (None, *rel.parts[:-1]):
            base = base / part if part else base
            spec = _spec_at(base)
            target = path.relative_to(base).as_posix() + ("/" if is_dir else "")
            if spec is not None and (verdict := spec.check_file(target).include) is not None:
                ignored = verdict
        return ignored

    def walk(self) -> Iterator[Path]:
        """Files under root that git would not ignore, in sorted order, outside SKIP_DIRS."""
        for folder, dirs, files in os.walk(self.root):
            here = Path(folder)
            # Prune in place so os.walk never descends into skipped or ignored folders.
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not self.ignored(here / d, True))
            yield from (here / f for f in sorted(files) if not self.ignored(here / f))
