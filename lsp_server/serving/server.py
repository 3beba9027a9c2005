"""The stdio language server: LSP handlers around the engine (pygls 2)."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from engine.api import CompletionEngine, Sampling
from engine.errors import EngineError
from engine.stdout_guard import claim_stdout
from lsp_server.completion.prompt import Cursor
from lsp_server.serving.documents import Documents
from lsp_server.engines import open_engine
from lsp_server.serving.metrics import Metrics
from lsp_server.serving.next_edits import NEXT_EDIT, NextEdits, json_field, parse as parse_next_edit
from lsp_server.serving.protocol import AnsweringProtocol
from lsp_server.serving.scheduler import Interrupt, Job, Scheduler, Superseded
from lsp_server.options import Settings, merge, model_settings
from lsp_server.completion.suggester import REMEMBER_BEFORE, Plan, Suggester, Suggestion, plan as plan_at
from lsp_server.completion.typed_through import TypedThroughCache, next_indent

log = logging.getLogger(__name__)

STATUS = "draftline/status"
SUGGESTION_READY = "draftline/suggestionReady"  # {uri, position}: ask again there
# From our clients: {textDocument: {uri}, position}, where the cursor came to rest (editors send
# no position with didOpen or didChange).
CURSOR = "draftline/cursor"
INDEX_DELAY_S = 0.5  # re-index a changed document once typing pauses
EXTEND_IDLE_S = 0.25  # follow a cold window's answer with the full window's after this long without requests
# Before the full window, a cold answer is followed by one from a window of this many times
# coldPrefillMs: on a 2-core CPU the full window takes 15-25 s, longer than most pauses, while
# three times the cold window is on screen within a pause of a few seconds.
WIDER_STAGE = 3
ALTERNATIVE = Sampling(temperature=0.8, top_k=40, top_p=0.95, seed=0)  # for invoked requests


class DraftlineServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("draftline", "0.1.0", protocol_cls=AnsweringProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.engine: CompletionEngine | None = None  # the one current engine; None while loading or failed
        self.suggester: Suggester | None = None  # over the current engine
        self._load_running = False  # a load_model is in flight
        self._load_error: str | None = None  # why the last load failed
        self._failure: str | None = None  # why completions fail now (a remote server down); said once
        self.scheduler = Scheduler()
        self.next_edits = NextEdits(self.scheduler)
        self.metrics = Metrics()
        self.typed = TypedThroughCache()
        self.threads: int | None = None  # torch threads (--threads)
        self.documents = Documents()  # replaced at `initialize`, which names the workspace
        self._pending_index: dict[str, asyncio.TimerHandle] = {}
        self._rests: dict[str, int] = {}  # uri -> how many times the cursor came to rest there
        self._resting: tuple[str, int] | None = None  # (uri, line) where it rests now: prefilled once a model loads
        self._edits: dict[str, Interrupt] = {}  # uri -> what an edit of it stops in its idle work
        self._idle: dict[str, object] = {}  # uri -> the spot of the idle work last asked for it

    # --- status and model -----------------------------------------------------------------
    def status(self, message: str = "") -> None:
        cal = self.engine.describe().get("calibration") if self.engine is not None else None
        self.protocol.notify(STATUS, {
            "state": self.state, "message": message,
            "lastLatencyMs": self.metrics.last_latency_ms,
            "acceptanceRate": self.metrics.acceptance_rate,
            # The kernels chosen on this machine (engine/execution/calibrate.py).
            "prefillKernel": cal and cal["plan"]["prefill"],
            "prefillTokensPerS": cal and round(cal["prefill_tokens_per_s"])})

    @property
    def state(self) -> str:
        if self._load_running or (self.engine is None and self._load_error is None):
            return "loading"
        if self.engine is None or self._failure is not None:
            return "error"
        return "ready" if self.settings.enabled else "disabled"

    async def load_model(self) -> None:
        """Load the model the settings name and make it the current engine. A change of model
        while one loads is not dropped: the load in flight is followed by the newest one."""
        if self._load_running:
            return  # the load in flight checks the settings again when it ends
        self.engine, self._load_running = None, True
        self.documents.use(None)
        while True:
            s = self.settings
            self.status(f"loading {s.model}")
            try:
                engine = await self.scheduler.call(
                    lambda: open_engine(dataclasses.asdict(s) | {"threads": self.threads}))
                error = None
            except EngineError as exc:
                engine, error = None, str(exc)
                log.error("model failed to load: %s", exc)
            if self.settings.model_key() == s.model_key():
                break
        self.engine, self._load_error, self._load_running = engine, error, False
        self.suggester = engine and Suggester(engine, self.documents)
        self._failure = engine and engine.problem
        if self._failure:
            log.warning("%s", self._failure)
        self.documents.use(engine)
        if self._resting is not None:  # a file opened while the model loaded: its first spot
            self.prefetch(*self._resting)
        self.status(error or self._failure or f"{s.model}{f' at {s.endpoint}' if s.endpoint else ''} ready")

    def failed(self, message: str) -> None:
        """A completion failed (e.g. the remote server is down): the status says so once, when
        failures start, not on every keystroke; stats' state stays "error" until one succeeds."""
        log.error("completion failed: %s", message)
        starting, self._failure = self._failure is None, message
        if starting:
            self.status(message)

    # --- documents ------------------------------------------------------------------------
    def index_document(self, uri: str) -> None:
        self._pending_index.pop(uri, None)
        self.documents.feed(uri)

    def index_later(self, uri: str) -> None:
        if (handle := self._pending_index.pop(uri, None)) is not None:
            handle.cancel()
        loop = asyncio.get_running_loop()
        self._pending_index[uri] = loop.call_later(INDEX_DELAY_S, self.index_document, uri)

    def edited(self, uri: str) -> None:
        """The document changed: its idle work stops what the edit made stale."""
        if (interrupt := self._edits.pop(uri, None)) is not None:
            interrupt.set()

    def close_document(self, uri: str) -> None:
        """Forget what was kept for an open document; the workspace's copy of the file, if it
        has one, takes over in the engine."""
        self.typed.forget(uri)
        self.scheduler.cancel(uri)
        self.next_edits.closed(uri)
        if self.suggester is not None:
            self.suggester.forget(uri)
        if (handle := self._pending_index.pop(uri, None)) is not None:
            handle.cancel()
        self.documents.close(uri)
        self._rests.pop(uri, None)
        self._idle.pop(uri, None)
        self._edits.pop(uri, None)
        if self._resting is not None and self._resting[0] == uri:
            self._resting = None

    # --- suggestions ----------------------------------------------------------------------
    async def suggestions(self, uri: str, position: types.Position, alternatives: int
                          ) -> tuple[Cursor | None, list[str]]:
        """Texts to insert at `position` (best first), and the cursor they belong to."""
        started = time.perf_counter()
        self.metrics.requests += 1
        doc = self.documents.get(uri)
        suggester, settings = self.suggester, self.settings
        if doc is None or suggester is None:
            return None, []  # unknown document, or still loading (or failed): answer at once
        plan = plan_at(uri, doc.text, position.line, position.character, settings, doc.name)
        if plan is None:
            self.typed.forget(uri)
            return None, []
        cursor = plan.cursor
        # An invoked request asks for alternatives: the model runs again.
        kept = self.typed.lookup(uri, cursor.prefix, cursor.suffix) if alternatives == 1 else None
        if kept is not None:
            self.metrics.cache_hits += 1
            self.typed.remember(uri, cursor.prefix, cursor.suffix, kept.text, kept.whole)
            if not kept.whole:  # from a cold window: it stands only until the full window's is ready
                self._improve_later(plan, position, doc.version, kept.text)
            self.metrics.answered((time.perf_counter() - started) * 1000)
            return cursor, [kept.text]

        def work(job: Job) -> list[Suggestion]:
            runs = [suggester.generate(plan, settings, job.cancel, on_prefilled=job.mark_prefilled)]
            if alternatives > 1 and not job.cancel.is_set():
                runs.append(suggester.generate(plan, settings, job.cancel, ALTERNATIVE))
            if runs[0].text and not job.cancel.is_set():  # lookup drafts from it later (source "history")
                suggester.engine.remember(runs[0].text, cursor.prefix[-REMEMBER_BEFORE:])
            return runs

        try:
            await self.scheduler.debounce(uri, settings.debounceMs / 1000)
            job, created = self.scheduler.submit(uri, (cursor, alternatives, settings), work)
            if created:
                job.future.add_done_callback(lambda f: self._finished(plan, position, doc.version, job))
            runs = await self.scheduler.wait(job, settings.timeBudgetMs / 1000 or None)
        except Superseded:
            self.metrics.cancelled += 1
            return cursor, []
        except asyncio.CancelledError:
            self.metrics.cancelled += 1
            raise
        except TimeoutError:  # never a fragment: the job goes on, and the client hears when it is ready
            self.metrics.continued += 1
            job.future.add_done_callback(lambda f: self._ready_later(uri, position, job))
            return cursor, []
        except EngineError as exc:
            self.failed(str(exc))
            return cursor, []
        texts = list(dict.fromkeys(run.text for run in runs if run.text))  # distinct, best first
        self.metrics.answered((time.perf_counter() - started) * 1000)
        recovered, self._failure = self._failure, None
        self.status(f"{self.settings.endpoint or self.settings.model} answers again" if recovered else "")
        return cursor, texts

    def _ready_later(self, uri: str, position: types.Position, job: Job) -> None:
        """A suggestion whose request was answered empty at the time budget is ready: editors do
        not ask again while the user waits, so tell the client, which asks again if its cursor
        is still there (the typed-through cache then answers at once)."""
        if job.future.cancelled() or job.future.exception() is not None or job.cancel.is_set():
            return
        if job.future.result()[0].text:
            self.protocol.notify(SUGGESTION_READY, {"uri": uri, "position": {"line": position.line, "character": position.character}})

    def _finished(self, plan: Plan, position: types.Position, version: int, job: Job) -> None:
        """A suggestion job ended, answered in time or in the background: count it, keep its
        text for the next request there, and follow a cold window with the full one once
        requests pause."""
        if job.future.cancelled() or job.future.exception() is not None or job.cancel.is_set():
            return
        runs, uri, cursor = job.future.result(), plan.uri, plan.cursor
        self.metrics.generated += 1
        for run in runs:
            self.metrics.drafted_tokens += run.stats.drafted
            self.metrics.accepted_tokens += run.stats.accepted
        self.typed.remember(uri, cursor.prefix, cursor.suffix, runs[0].text, whole=runs[0].full_prompt is None)
        if runs[0].full_prompt is not None:
            self.metrics.cold_windows += 1
            self._improve_later(plan, position, version, runs[0].text)
        elif runs[0].text:
            self._idle_later(uri, ("next", cursor.prefix), lambda job: self._next_after(plan, runs[0].text, job))

    def prefetch(self, uri: str, line: int) -> None:
        """The cursor rests on `line`: prefill the full window at its end in the background, so
        that the first request there, or on a new line below it, finds the prompt cached rather
        than getting a cold window. Idle work for other spots stands down; any request cancels it
        within a layer; a suggestion still being written for the document is left alone. While
        the model loads, the spot is kept for when it is ready."""
        self._resting = (uri, line)
        self._rests[uri] = self._rests.get(uri, 0) + 1  # an idle prefill for an earlier spot stands down
        doc, suggester, settings = self.documents.get(uri), self.suggester, self.settings
        lines = doc.text.split("\n") if doc is not None else []
        if suggester is None or not line < len(lines) or self.scheduler.busy(uri):
            return
        plan = plan_at(uri, doc.text, line, len(lines[line].encode("utf-16-le")) // 2, settings, doc.name)
        if plan is None:
            return
        self.scheduler.cancel_idle()
        job, created = self.scheduler.submit(uri, ("prefetch", plan.cursor.prefix),
                                             lambda job: suggester.prefill(plan, settings, job.cancel), idle=True)
        if created:
            job.future.add_done_callback(self._prefetched)

    def _prefetched(self, done: asyncio.Future) -> None:
        if not done.cancelled() and done.exception() is None and done.result():
            self.metrics.prefetched += 1

    def _idle_later(self, uri: str, spot: object, work: Callable[[Job], None]) -> None:
        """Run `work` on the model thread as idle work (any request cancels it) once requests for
        `uri` have paused EXTEND_IDLE_S, unless one came, the cursor moved to rest elsewhere, the
        document was closed, the model changed or newer idle work for `uri` was asked for
        meanwhile. Cancelled by other background work (a next-edit prediction the editor asked
        for at the same pause), it starts again after it on the same terms."""
        arrivals, rests, engine = self.scheduler.arrivals(uri), self._rests.get(uri, 0), self.engine
        self._idle[uri] = spot

        def still_wanted() -> bool:
            return (self.documents.get(uri) is not None and self._idle.get(uri) == spot
                    and (self.scheduler.arrivals(uri), self._rests.get(uri, 0), self.engine) == (arrivals, rests, engine))

        def start() -> None:
            if still_wanted():
                job, created = self.scheduler.submit(uri, spot, work, idle=True)
                if created:
                    job.future.add_done_callback(_log_failure)
                    job.future.add_done_callback(lambda _: job.cancel.is_set() and still_wanted() and again())

        def again() -> None:
            asyncio.get_running_loop().call_later(EXTEND_IDLE_S, start)

        again()

    def _improve_later(self, plan: Plan, position: types.Position, version: int, shown: str) -> None:
        """An answer from a cold window is on screen at `position` (document `version`), written
        there or typed through to it: as idle work, write the suggestion again from a window
        WIDER_STAGE times as long to prefill, then prefill the full window (its start stays
        cached for the next request when one cuts it short) and write it from that, each while
        the document has not changed. Where an answer differs from the one on screen, it replaces
        it in the typed-through cache and the client is told to ask again: the screen gets better
        while the user waits, and again when the full window is ready. An edit stops the answers
        it makes stale at once (a prefill under way goes on: its start is the next request's)."""
        engine, suggester, settings, loop = self.engine, self.suggester, self.settings, asyncio.get_running_loop()
        wider = dataclasses.replace(settings, coldPrefillMs=settings.coldPrefillMs * WIDER_STAGE)

        def unchanged(job: Job) -> bool:
            doc = self.documents.get(plan.uri)
            return not job.cancel.is_set() and doc is not None and doc.version == version

        def improve(job: Job) -> None:
            on_screen, edit = shown, Interrupt(job.cancel)
            self._edits[plan.uri] = edit
            # The wider window up to the cursor's line stays as the user types on, so an edit
            # does not stop its prefill: the next line's request grows it from a cached start.
            suggester.prefill_settled(plan, wider, job.cancel)
            if not unchanged(job):  # edited meanwhile, or before the flag was kept
                return
            widened = suggester.generate(plan, wider, edit, widen=True)
            if edit.is_set():
                return
            whole = widened.full_prompt is None  # the full window prefilled within the wider stage
            loop.call_soon_threadsafe(self._improved, plan, position, on_screen, widened.text, whole)
            if whole:
                return
            on_screen = widened.text or on_screen
            engine.prefill(engine.prompt_tokens(widened.full_prompt), job.cancel)
            if not unchanged(job):
                return
            better = suggester.generate(plan, settings, edit, whole=True)
            if not edit.is_set():
                loop.call_soon_threadsafe(self._improved, plan, position, on_screen, better.text, True)

        self._idle_later(plan.uri, ("improve", plan.cursor.prefix), improve)

    def _improved(self, plan: Plan, position: types.Position, shown: str, text: str, whole: bool) -> None:
        """An answer from a wider window than the one on screen (`whole`: the full one)."""
        if whole:
            self.metrics.improved_windows += 1
        else:
            self.metrics.widened_windows += 1
        if text and (text != shown or whole):  # the same text, now known to be the full window's
            self.typed.remember(plan.uri, plan.cursor.prefix, plan.cursor.suffix, text, whole)
        if text and text != shown:
            self.protocol.notify(SUGGESTION_READY, {"uri": plan.uri, "position": {
                "line": position.line, "character": position.character}})
        if text and whole:
            self._idle_later(plan.uri, ("next", plan.cursor.prefix), lambda job: self._next_after(plan, text, job))

    def _next_after(self, plan: Plan, text: str, job: Job) -> None:
        """On the model thread: the suggestion for where accepting `text` at `plan` puts the
        cursor (and, where it ends a line, Enter with the editor's indentation), kept for the
        request there: Tab, Enter, Tab without waiting."""
        doc, suggester = self.documents.get(plan.uri), self.suggester
        cursor = plan.cursor
        if doc is None or suggester is None or doc.text != cursor.prefix + cursor.suffix:
            return
        ahead = cursor.prefix + text
        if not text.endswith("\n"):  # the suggestion ends its line: next comes Enter, and the indentation
            ahead += "\n" + next_indent(ahead[ahead.rfind("\n") + 1:])
        lines = ahead.split("\n")
        after = plan_at(plan.uri, ahead + cursor.suffix, len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2,
                        self.settings, doc.name)
        if after is None:
            return
        made = suggester.generate(after, self.settings, job.cancel, whole=True)
        if made.text and not job.cancel.is_set():
            job.future.get_loop().call_soon_threadsafe(self._made_ahead, plan.uri, ahead, cursor.suffix, made.text)

    def _made_ahead(self, uri: str, prefix: str, suffix: str, text: str) -> None:
        self.typed.remember_next(uri, prefix, suffix, text)
        self.metrics.prefetched_next += 1


server = DraftlineServer()


def _log_failure(done: asyncio.Future) -> None:
    """Idle work has no request to answer with its error: the log gets it."""
    if not done.cancelled() and done.exception() is not None:
        log.error("idle work failed: %r", done.exception(), exc_info=done.exception())


def _accept_command(uri: str, text: str) -> types.Command:
    return types.Command(title="Accept Draftline suggestion", command="draftline.didAccept",
                         arguments=[{"uri": uri, "text": text}])


@server.feature(types.INITIALIZE)
def initialize(ls: DraftlineServer, params: types.InitializeParams) -> None:
    ls.settings, _ = merge(ls.settings, params.initialization_options)
    folders = params.workspace_folders or []
    root_uri = folders[0].uri if folders else params.root_uri
    if root_uri and root_uri.startswith("file:"):
        ls.documents = Documents(Path(to_fs_path(root_uri)).resolve(), watch=True)


@server.feature(types.INITIALIZED)
def initialized(ls: DraftlineServer, params: types.InitializedParams) -> None:
    asyncio.ensure_future(ls.load_model())


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: DraftlineServer, params: types.DidChangeConfigurationParams) -> None:
    before = ls.settings
    ls.settings, problems = merge(before, params.settings)
    for problem in problems:
        ls.window_log_message(types.LogMessageParams(types.MessageType.Warning, problem))
    if ls.settings.model_key() != before.model_key():
        asyncio.ensure_future(ls.load_model())
    elif ls.settings.enabled != before.enabled:
        ls.status()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DraftlineServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    ls.next_edits.opened(doc.uri, doc.text)
    ls.documents.open(doc.uri, doc.text, doc.version)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DraftlineServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = ls.workspace.text_documents.get(uri)  # pygls has applied the changes
    if doc is None:
        return
    lines = tuple((c.range.start.line, c.range.start.line + c.text.count("\n")) for c in params.content_changes
                  if isinstance(c, types.TextDocumentContentChangePartial))  # not a whole new text
    ls.documents.change(uri, doc.source, doc.version, lines)
    ls.next_edits.changed(uri, doc.source, params.content_changes)
    ls.edited(uri)
    ls.index_later(uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DraftlineServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.close_document(params.text_document.uri)


@server.feature(CURSOR)
def cursor_rests(ls: DraftlineServer, params: object) -> None:
    uri, line = json_field(json_field(params, "textDocument"), "uri"), json_field(json_field(params, "position"), "line")
    if not isinstance(uri, str) or isinstance(line, bool) or not isinstance(line, int) or line < 0:
        log.warning("%s: expected {\"textDocument\": {\"uri\": string}, \"position\": {\"line\": integer >= 0}}", CURSOR)
        return
    ls.prefetch(uri, line)


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(ls: DraftlineServer, params: types.InlineCompletionParams
                            ) -> types.InlineCompletionList | None:
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    cursor, texts = await ls.suggestions(params.text_document.uri, params.position,
                                         alternatives=2 if invoked else 1)
    if not texts:
        return None
    # Replace from the line start: the item stays valid when the user backspaces.
    start = types.Position(params.position.line, 0)
    line = cursor.line_before
    items = [types.InlineCompletionItem(
        insert_text=line + text, filter_text=line + text,
        range=types.Range(start, params.position), command=_accept_command(
            params.text_document.uri, text)) for text in texts]
    return types.InlineCompletionList(items)


@server.feature(NEXT_EDIT)
async def next_edit(ls: DraftlineServer, params: object) -> dict | None:
    ask = parse_next_edit(params)
    doc = ls.documents.get(ask.uri)
    return await ls.next_edits.answer(ask, doc and doc.text, doc and doc.version, ls.documents.name(ask.uri),
                                      ls.settings, ls.engine)


@server.feature(types.TEXT_DOCUMENT_COMPLETION)
async def completion(ls: DraftlineServer, params: types.CompletionParams
                     ) -> types.CompletionList | None:
    _, texts = await ls.suggestions(params.text_document.uri, params.position, alternatives=1)
    if not texts:
        return None
    text = texts[0]
    item = types.CompletionItem(
        label=text.split("\n", 1)[0], insert_text=text, kind=types.CompletionItemKind.Text,
        # Insert at the cursor (empty range): the typed word is kept, not replaced.
        text_edit=types.TextEdit(types.Range(params.position, params.position), text),
        command=_accept_command(params.text_document.uri, text))
    return types.CompletionList(is_incomplete=True, items=[item])


def _report(args: tuple) -> dict:
    """The {"uri", "text", ...} object clients pass to the report commands."""
    if len(args) != 1 or not isinstance(args[0], dict) or not isinstance(args[0].get("text"), str):
        raise JsonRpcInvalidParams('expected one argument {"uri": ..., "text": ...}')
    return args[0]


@server.command("draftline.stats")
def stats(ls: DraftlineServer, *args) -> dict:
    engine = ls.engine
    described = engine.describe() if engine is not None else {}
    return ls.metrics.as_dict(ls.state) | {  # and what the current engine is and holds
        "model": engine and ls.settings.model, "dtype": described.get("dtype"),
        "documents": engine and engine.documents, "endpoint": ls.settings.endpoint,
        "windowTokens": ls.suggester and ls.suggester.window_tokens(ls.settings),
        "engine": described or None}


@server.command("draftline.didAccept")
def did_accept(ls: DraftlineServer, *args) -> None:
    report = _report(args)
    ls.metrics.accepted += 1
    ls.typed.accepted(report.get("uri", ""))


@server.command("draftline.didShowCompletion")
def did_show(ls: DraftlineServer, *args) -> None:
    _report(args)
    ls.metrics.shown += 1


@server.command("draftline.didPartiallyAcceptCompletion")
def did_partially_accept(ls: DraftlineServer, *args) -> None:
    report = _report(args)
    length = report.get("acceptedLength")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise JsonRpcInvalidParams("acceptedLength must be an integer >= 0")
    ls.metrics.partially_accepted_at(report.get("uri", ""), report["text"], length)


@server.command("draftline.toggle")
def toggle(ls: DraftlineServer, *args) -> dict:
    ls.settings = merge(ls.settings, {"enabled": not ls.settings.enabled})[0]
    ls.status()
    return {"enabled": ls.settings.enabled}


def serve_stdio(args: argparse.Namespace) -> int:
    """Serve LSP on stdio; the command line's model options are the settings' defaults.
    The real stdout is kept for the protocol alone and fd 1 points at stderr, so stray prints
    (ours, a library's, or C code's) cannot corrupt the stream."""
    flags = model_settings(args)
    server.threads = flags.pop("threads")
    server.settings = Settings(**flags)
    logging.getLogger("pygls").setLevel(logging.WARNING)  # not every message on stderr
    server.start_io(sys.stdin.buffer, claim_stdout())
    server.scheduler.shutdown()
    server.documents.stop()
    return 0
