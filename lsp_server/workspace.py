"""The workspace's source files, indexed for the prompt-lookup drafter and kept current
with watchdog. Never indexes what .gitignore ignores, binaries, big files or secrets."""
from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pathspec
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)

MAX_BYTES = 512 * 1024
MAX_FILES = 2000  # a huge tree is indexed partially rather than slowly
SECRETS = (".env*", "*.pem", "*.key", "id_*")
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"}


def is_secret(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in SECRETS)


def read_source(path: Path) -> str | None:
    """The file's text, or None when it is too big, binary or unreadable."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class WorkspaceIndex:
    """Feeds `on_set(uri, text)` / `on_remove(uri)` with the indexable files under `root`."""

    def __init__(self, root: Path, on_set: Callable[[str, str], None],
                 on_remove: Callable[[str], None]):
        self.root = root.resolve()
        self._on_set, self._on_remove = on_set, on_remove
        self._ignore = self._read_gitignore()
        self._observer: Observer | None = None
        self.indexed: set[str] = set()

    def _read_gitignore(self) -> pathspec.PathSpec:
        try:
            lines = (self.root / ".gitignore").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        return pathspec.PathSpec.from_lines("gitwildmatch", lines)

    def accepts(self, path: Path) -> bool:
        """May this file be indexed (and so have its text sent to the model)?"""
        try:
            rel = path.resolve().relative_to(self.root)
        except ValueError:
            return False
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or is_secret(rel.name):
            return False
        return not self._ignore.match_file(rel.as_posix())

    def _files(self) -> Iterator[Path]:
        for folder, dirs, files in os.walk(self.root):
            base = Path(folder)
            # Prune in place so os.walk never descends into skipped or ignored folders.
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not self._ignore.match_file(
                (base / d).relative_to(self.root).as_posix() + "/"))
            for name in sorted(files):
                if self.accepts(base / name):
                    yield base / name

    def update(self, path: Path) -> None:
        uri = path.resolve().as_uri()
        text = read_source(path) if self.accepts(path) and path.is_file() else None
        if text is None:
            if uri in self.indexed:
                self.indexed.discard(uri)
                self._on_remove(uri)
            return
        self.indexed.add(uri)
        self._on_set(uri, text)

    def start(self) -> None:
        """Index everything (in a background thread), then follow changes."""
        threading.Thread(target=self._scan_and_watch, name="draftline-index", daemon=True).start()

    def _scan_and_watch(self) -> None:
        for n, path in enumerate(self._files()):
            if n >= MAX_FILES:
                log.warning("workspace index: stopped at %d files", MAX_FILES)
                break
            self.update(path)
        log.info("workspace index: %d files from %s", len(self.indexed), self.root)
        observer = Observer()
        observer.schedule(_Events(self), str(self.root), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()


_CHANGES = {"created", "modified", "moved", "deleted"}


class _Events(FileSystemEventHandler):
    def __init__(self, index: WorkspaceIndex):
        self.index = index

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Not "opened"/"closed_no_write": reading a file must not trigger re-reading it.
        if event.is_directory or event.event_type not in _CHANGES:
            return
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path:
                self.index.update(Path(path))
