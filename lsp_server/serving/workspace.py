"""The workspace's source files, indexed for the prompt-lookup drafter and kept current
with watchdog. Never indexes what .gitignore ignores, binaries, big files or secrets."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pygls.uris import to_fs_path
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from lsp_server.serving.files import SKIP_DIRS, GitIgnore, is_secret, read_text

log = logging.getLogger(__name__)

MAX_BYTES = 512 * 1024
MAX_FILES = 2000  # a huge tree is indexed partially rather than slowly
LOWEST_PRIORITY = 19  # nice value of the indexing threads


def _in_background(work: Callable[[], object]) -> None:
    """Run `work` in a daemon thread at the lowest CPU priority (on Linux, where it is per
    thread; the watcher threads it starts inherit it). Indexing a workspace takes seconds of
    CPU as the model loads and the first requests run, and the model's passes use every core:
    at an equal priority it slowed the first prefill in a session by about half."""
    def run() -> None:
        if sys.platform == "linux":
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        work()

    threading.Thread(target=run, name="draftline-index", daemon=True).start()


class WorkspaceIndex:
    """Feeds `on_set(uri, text)` / `on_remove(uri)` with the indexable files under `root`."""

    def __init__(self, root: Path, on_set: Callable[[str, str], None],
                 on_remove: Callable[[str], None]):
        self.root = root.resolve()
        self._on_set, self._on_remove = on_set, on_remove
        self._gitignore = GitIgnore(self.root)
        self._observer: Observer | None = None
        self.indexed: set[str] = set()
        self.skipped: dict[Path, str] = {}  # files refused for what they hold, and why (logged once)

    def accepts(self, path: Path) -> bool:
        """May this file be indexed (and so have its text sent to the model)?"""
        try:
            rel = path.resolve().relative_to(self.root)
        except ValueError:  # outside the root
            return False
        except (OSError, RuntimeError):  # a symlink loop
            self._skip(path, "a symlink loop")
            return False
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or is_secret(rel.name):
            return False
        return not self._gitignore.ignored(self.root / rel)

    def update(self, path: Path) -> None:
        text, why = read_text(path, MAX_BYTES) if self.accepts(path) and path.is_file() else (None, "")
        if why:
            self._skip(path, why)
        try:
            uri = path.resolve().as_uri()
        except (OSError, RuntimeError):  # a symlink loop: never indexed
            return
        if text is None:
            if uri in self.indexed:
                self.indexed.discard(uri)
                self._on_remove(uri)
            return
        self.indexed.add(uri)
        self._on_set(uri, text)

    def _skip(self, path: Path, why: str) -> None:
        if self.skipped.get(path) != why:
            self.skipped[path] = why
            log.info("workspace index: skipping %s: %s", path, why)

    def replay(self) -> None:
        """Feed every indexed file again (to a new engine), in a background thread."""
        paths = [Path(to_fs_path(uri)) for uri in self.indexed]
        _in_background(lambda: [self.update(p) for p in paths])

    def start(self) -> None:
        """Index everything (in a background thread), then follow changes."""
        _in_background(self._scan_and_watch)

    def scan(self) -> None:
        """Index the files under the root (up to MAX_FILES)."""
        for n, path in enumerate(p for p in self._gitignore.walk() if self.accepts(p)):
            if n >= MAX_FILES:
                log.warning("workspace index: stopped at %d files", MAX_FILES)
                break
            self.update(path)
        log.info("workspace index: %d files from %s", len(self.indexed), self.root)

    def _scan_and_watch(self) -> None:
        self.scan()
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
