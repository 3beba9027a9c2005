"""The one store of documents that the server, `complete`, `edit` and `bench` feed.

It holds the editor's open documents (their live text, the name prompts give them) over the
workspace's files (as the workspace index reads them from disk), and keeps the engine's copy
and the repository context's copy in step with both:

  - the engine's lookup drafts from every open document and workspace file; an open
    document's live text wins over its file on disk, and a closed one's file takes over again;
  - the repository holds the workspace's files (and the lines edited last in open documents);
  - a prompt's snippets come only from open documents the workspace index would accept:
    never a secret or a .gitignore'd file, even one the user has open.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pygls.uris import to_fs_path

from engine.api import CompletionEngine
from lsp_server.serving.files import display_name, is_secret
from lsp_server.completion.repo_context import Repository
from lsp_server.serving.workspace import WorkspaceIndex


@dataclass(frozen=True)
class Document:
    uri: str
    name: str  # in prompts: the path relative to the workspace's root, never where it lives here
    text: str
    version: int


class Documents:
    def __init__(self, root: Path | None = None, watch: bool = False):
        """`root`: the workspace's folder (None: no workspace; names are file names). `watch`:
        index the files under it (lsp_server/serving/workspace.py) once an engine is there to feed;
        either way its rules decide which open documents a prompt may show."""
        self.root = root
        self.repository = Repository(root.name if root is not None else "")
        self._index = None if root is None else WorkspaceIndex(root, self.file_changed, self.file_removed)
        self._watch, self._watching = watch, False
        self._engine: CompletionEngine | None = None
        self._open: dict[str, Document] = {}  # uri -> document; changed on the event loop
        self._files: dict[str, str] = {}  # uri -> text of the workspace's files (the repository's strings)

    # --- the engine ---------------------------------------------------------------------
    def use(self, engine: CompletionEngine | None) -> None:
        """Feed `engine` from now on (None: none, while a model loads): a new one gets the open
        documents at once and the workspace's files (read again from disk in the background
        where the index watches them)."""
        self._engine = engine
        if engine is None:
            return
        for doc in list(self._open.values()):
            engine.set_document(doc.uri, doc.text)
        if self._watching:
            self._index.replay()
        elif self._watch and self._index is not None:
            self._index.start()
            self._watching = True
        else:
            for uri, text in list(self._files.items()):
                if uri not in self._open:
                    engine.set_document(uri, text, "workspace")

    def stop(self) -> None:
        """Stop following the workspace's files."""
        if self._watching:
            self._index.stop()

    # --- open documents -----------------------------------------------------------------
    def get(self, uri: str) -> Document | None:
        return self._open.get(uri)

    def open(self, uri: str, text: str, version: int = 0) -> None:
        self._open[uri] = Document(uri, self.name(uri), text, version)
        self.feed(uri)

    def change(self, uri: str, text: str, version: int = 0, lines: tuple[tuple[int, int], ...] = ()) -> None:
        """The document's new text; `lines`: the (first, last) line ranges the edit touched, for
        the repository context's recent edits. The engine gets the text at `feed`, which a
        caller may put off while the user types."""
        doc = self._open.get(uri)
        if doc is None:
            return
        self._open[uri] = Document(uri, doc.name, text, version)
        for first, last in lines:
            self.repository.edited(doc.name, first, last)

    def feed(self, uri: str) -> None:
        """Give the engine the open document's current text."""
        doc = self._open.get(uri)
        if self._engine is not None and doc is not None:
            self._engine.set_document(uri, doc.text)

    def close(self, uri: str) -> None:
        """Forget an open document; its workspace file, if it has one, takes over in the engine."""
        doc = self._open.pop(uri, None)
        if doc is None:
            return
        self.repository.forget_edits(doc.name)
        if self._engine is None:
            return
        on_disk = self._files.get(uri)
        if on_disk is None:
            self._engine.remove_document(uri)
        else:
            self._engine.set_document(uri, on_disk, "workspace")

    # --- the workspace's files (the index's thread, or a caller that reads them itself) ---
    def file_changed(self, uri: str, text: str) -> None:
        """A workspace file, new or changed on disk. An open document's live text stays in the
        engine (the repository context, too, prefers it where it picks a file)."""
        self._files[uri] = text
        self.repository.set(self.name(uri), text)
        if self._engine is not None and uri not in self._open:
            self._engine.set_document(uri, text, "workspace")

    def file_removed(self, uri: str) -> None:
        """A workspace file gone from disk (or now refused); an open document keeps its text."""
        self._files.pop(uri, None)
        self.repository.remove(self.name(uri))
        if self._engine is not None and uri not in self._open:
            self._engine.remove_document(uri)

    # --- what a prompt may show ---------------------------------------------------------
    def shareable(self, uri: str) -> dict[str, str]:
        """{name: text} of the open documents other than `uri` whose text may go into a prompt
        (which may leave the machine): not a file the workspace index would refuse (secrets,
        .gitignore'd, virtualenvs). Called from the model's thread: it reads a snapshot."""
        return {doc.name: doc.text for doc in list(self._open.values())
                if doc.uri != uri and self._shareable(doc.uri)}

    def _shareable(self, uri: str) -> bool:
        path = _path(uri)
        if path is None:
            return True  # unsaved buffers
        if is_secret(path.name):
            return False
        inside = self._index is not None and path.is_relative_to(self._index.root)
        return not inside or self._index.accepts(path)

    def name(self, uri: str) -> str:
        """How prompts name the document: its path relative to the root, else its file name;
        a uri that is not a file's (an unsaved buffer) as it is."""
        path = _path(uri)
        return uri if path is None else display_name(path, self.root)


def _path(uri: str) -> Path | None:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return None if path is None else Path(path)
