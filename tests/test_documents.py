"""The one store of documents: what the engine holds, what a prompt may show, and what a newly
loaded engine gets, with the real workspace index (its rules and its watchdog thread)."""
from __future__ import annotations

import time
from pathlib import Path

from lsp_server.serving.documents import Documents
from lsp_server.serving.workspace import WorkspaceIndex


class HeldDocuments:
    """The document side of an engine (engine/api.py's CompletionEngine): {id: text} of what it
    was given, as the lookup drafter keeps it."""

    def __init__(self):
        self.texts: dict[str, str] = {}
        self.sources: dict[str, str] = {}  # lookup's source of each: its budget and acceptance

    def set_document(self, doc_id: str, text: str, source: str = "document") -> None:
        self.texts[doc_id], self.sources[doc_id] = text, source

    def remove_document(self, doc_id: str) -> None:
        self.texts.pop(doc_id, None)


def _workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("GENERATED = 1\n")
    (root / ".env").write_text("TOKEN = 'secret'\n")
    (root / "app.py").write_text("def main():\n    return 1\n")
    return root


def _indexed(root: Path) -> tuple[Documents, HeldDocuments]:
    documents, engine = Documents(root), HeldDocuments()
    documents.use(engine)
    WorkspaceIndex(root, documents.file_changed, documents.file_removed).scan()
    return documents, engine


def _wait_for(condition, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def test_secrets_and_ignored_files_are_never_shared_even_when_open(tmp_path):
    root = _workspace(tmp_path)
    documents, engine = _indexed(root)
    for path, text in ((root / ".env", "TOKEN = 'secret'\n"), (root / "build" / "gen.py", "GENERATED = 1\n"),
                       (root / "app.py", "def main():\n    return 2\n"), (tmp_path / "id_rsa", "KEY\n"),
                       (tmp_path / "notes.py", "NOTE = 1\n")):
        documents.open(path.as_uri(), text)
    documents.open("untitled:1", "draft = 1\n")
    current = (root / "main.py").as_uri()
    assert documents.shareable(current) == {  # named from the root, or by file name outside it
        "app.py": "def main():\n    return 2\n", "notes.py": "NOTE = 1\n", "untitled:1": "draft = 1\n"}
    assert "app.py" not in documents.shareable((root / "app.py").as_uri())  # never the document itself
    # Lookup may still draft from them: drafts only speed up what the model writes anyway.
    assert engine.texts[(root / ".env").as_uri()] == "TOKEN = 'secret'\n"


def test_an_open_document_wins_over_its_file_and_closing_it_gives_the_file_back(tmp_path):
    root = _workspace(tmp_path)
    documents, engine = _indexed(root)
    app, elsewhere = (root / "app.py").as_uri(), (tmp_path / "notes.py").as_uri()
    files = {app: "def main():\n    return 1\n", (root / ".gitignore").as_uri(): "build/\n"}
    assert engine.texts == files  # nothing refused was indexed
    assert set(engine.sources.values()) == {"workspace"}
    documents.open(app, "def main():\n    return 2\n", version=3)
    assert engine.sources[app] == "document"
    documents.open(elsewhere, "NOTE = 1\n")
    documents.file_changed(app, "def main():\n    return 1  # saved elsewhere\n")
    assert engine.texts[app] == "def main():\n    return 2\n"
    assert documents.get(app).version == 3 and documents.get(app).name == "app.py"

    documents.file_removed(app)  # deleted on disk while open: the live text stays
    assert engine.texts[app] == "def main():\n    return 2\n"
    documents.file_changed(app, "def main():\n    return 1  # saved elsewhere\n")  # and back
    documents.change(app, "def main():\n    return 22\n", version=4, lines=((1, 1),))
    assert engine.texts[app] == "def main():\n    return 2\n"  # until it is fed (typing pauses)
    assert documents.repository.recent_edits() == [("app.py", 1, 1)]
    documents.feed(app)
    assert engine.texts[app] == "def main():\n    return 22\n"

    documents.close(app)
    documents.close(elsewhere)
    assert engine.texts == files | {app: "def main():\n    return 1  # saved elsewhere\n"}  # the file took over
    assert engine.sources[app] == "workspace"
    assert documents.get(app) is None and documents.shareable("untitled:2") == {}
    assert documents.repository.recent_edits() == []
    documents.file_removed(app)
    assert app not in engine.texts and documents.repository.paths() == [".gitignore"]
    documents.open(elsewhere, "NOTE = 2\n")
    another = HeldDocuments()
    documents.use(another)  # files fed by hand (no index watching) go to a new engine too
    assert another.texts == {(root / ".gitignore").as_uri(): "build/\n", elsewhere: "NOTE = 2\n"}
    assert another.sources == {(root / ".gitignore").as_uri(): "workspace", elsewhere: "document"}


def test_unknown_uris_change_nothing(tmp_path):
    documents, engine = Documents(tmp_path), HeldDocuments()
    documents.use(engine)
    unknown = (tmp_path / "never_opened.py").as_uri()
    documents.change(unknown, "x = 1\n", version=2, lines=((0, 0),))
    documents.feed(unknown)
    documents.close(unknown)
    assert documents.get(unknown) is None and engine.texts == {}
    assert documents.repository.recent_edits() == [] and documents.shareable(unknown) == {}


def test_a_new_engine_gets_the_open_documents_at_once_and_the_files_after(tmp_path):
    root = _workspace(tmp_path)
    documents = Documents(root, watch=True)
    app, draft = (root / "app.py").as_uri(), "untitled:1"
    documents.open(draft, "draft = 1\n")  # before any engine: kept for the first one
    first = HeldDocuments()
    documents.use(first)
    try:
        assert first.texts[draft] == "draft = 1\n"  # at once
        _wait_for(lambda: app in first.texts)  # the index's scan, in its thread
        documents.open(app, "def main():\n    return 2\n")
        documents.use(None)  # a model loads: nothing to feed
        documents.close(draft)
        second = HeldDocuments()
        documents.use(second)
        assert second.texts[app] == "def main():\n    return 2\n"  # at once, with the live text
        _wait_for(lambda: (root / ".gitignore").as_uri() in second.texts)  # the files, replayed in a thread
        (root / "new.py").write_text("NEW = 1\n")
        new = (root / "new.py").as_uri()
        _wait_for(lambda: new in second.texts)  # the index follows the workspace for the new engine
        assert second.texts[app] == "def main():\n    return 2\n" and draft not in second.texts
    finally:
        documents.stop()
