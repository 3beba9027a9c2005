"""`draftline/nextEdit`: the server's side of next-edit suggestions.

It keeps each open document's recent edits (lsp_server/next_edit/history.py) and answers a request
    {"textDocument": {"uri"}, "position": {"line", "character"}, "version"}
with the next edit for that version of the document,
    {"start": {"line", "character"}, "end": {...}, "text": ..., "version": ...},
or null: none due, the feature off, no model yet, or the document no longer at that version.

A prediction never delays inline completion: it runs as a background job on the model thread,
which any completion request cancels (lsp_server/serving/scheduler.py), and typing in the document
cancels it too. The model is the loaded one, or `editModel`, loaded on first use.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from engine.api import CompletionEngine
from engine.errors import EngineError
from lsp_server.next_edit.history import EditHistories
from lsp_server.engines import open_engine
from lsp_server.next_edit.rewrite import predict
from lsp_server.options import Settings
from lsp_server.serving.scheduler import Job, Scheduler, Superseded

log = logging.getLogger(__name__)

NEXT_EDIT = "draftline/nextEdit"


@dataclasses.dataclass(frozen=True)
class Ask:
    uri: str
    line: int
    version: int


def json_field(obj: object, name: str) -> object:
    """A field of a JSON object as pygls hands it over (a namedtuple of its fields) or as a dict."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def parse(params: object) -> Ask:
    """The request's params, or JsonRpcInvalidParams saying what is wrong."""
    uri = json_field(json_field(params, "textDocument"), "uri")
    line, version = json_field(json_field(params, "position"), "line"), json_field(params, "version")
    if not isinstance(uri, str) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (line, version)):
        raise JsonRpcInvalidParams('expected {"textDocument": {"uri": string}, "position": {"line": integer >= 0, '
                                   '"character"}, "version": integer >= 0}')
    return Ask(uri, line, version)


class NextEdits:
    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self.histories = EditHistories()
        self._jobs: dict[str, Job] = {}  # uri -> its prediction in flight
        self._edit_engine: tuple[str, CompletionEngine | None] | None = None  # (editModel, engine or None: failed)
        self._loading = False

    # --- what the document handlers report ------------------------------------------------
    def opened(self, uri: str, text: str) -> None:
        self.histories.opened(uri, text)

    def changed(self, uri: str, text: str, changes: Sequence[types.TextDocumentContentChangeEvent]) -> None:
        """Typing: the document's history grows (by each change the editor sent) and its
        prediction in flight is cancelled."""
        self.histories.changed(uri, text, [
            (None, c.text) if isinstance(c, types.TextDocumentContentChangeWholeDocument) else
            ((c.range.start.line, c.range.start.character, c.range.end.line, c.range.end.character), c.text)
            for c in changes])
        self._cancel(uri)

    def closed(self, uri: str) -> None:
        self.histories.closed(uri)
        self._cancel(uri)

    def _cancel(self, uri: str) -> None:
        if (job := self._jobs.pop(uri, None)) is not None:
            job.cancel.set()

    # --- the request -----------------------------------------------------------------------
    async def answer(self, ask: Ask, text: str | None, version: int | None, path: str, settings: Settings,
                     engine: CompletionEngine | None) -> dict | None:
        """The next edit for `ask`, given the document's current `text` and `version` (None: not
        open) and the loaded engine."""
        if text is None or version != ask.version or not settings.nextEdit:
            return None
        edits = self.histories.edits(ask.uri)
        engine = self._engine_for(settings, engine)
        if not edits or engine is None or engine.problem:
            return None

        def work(job: Job):
            return predict(engine, text, ask.line, edits, path, settings.mode, job.cancel)

        job, _ = self.scheduler.submit(f"{ask.uri}#nextEdit", (ask.version, ask.line), work, background=True)
        self._jobs[ask.uri] = job
        try:
            prediction = await self.scheduler.wait(job, None)
        except Superseded:
            return None
        except EngineError as exc:
            log.warning("next edit failed: %s", exc)
            return None
        finally:
            if self._jobs.get(ask.uri) is job:
                del self._jobs[ask.uri]
        if prediction.edit is None or job.cancel.is_set():
            return None
        return prediction.edit.as_dict() | {"version": ask.version}

    def _engine_for(self, settings: Settings, loaded: CompletionEngine | None) -> CompletionEngine | None:
        """The loaded engine, or editModel's (None while it loads or when it failed to)."""
        name = settings.editModel
        if not name or name == settings.model:
            return loaded
        if self._edit_engine is not None and self._edit_engine[0] == name:
            return self._edit_engine[1]
        if not self._loading:
            asyncio.ensure_future(self._load(settings))
        return None

    async def _load(self, settings: Settings) -> None:
        self._loading = True
        name = settings.editModel
        options = dataclasses.asdict(settings) | {"model": name, "draft": None}
        try:
            engine = await self.scheduler.call(lambda: open_engine(options))
        except EngineError as exc:
            log.error("editModel %s failed to load: %s", name, exc)
            engine = None
        self._edit_engine, self._loading = (name, engine), False

