"""The contenders of the pause replay, each driven as its editor drives it, on the user's clock.

An editor holds the document and a screen: the ghost text shown at the cursor. The replay calls
`edit` for each keystroke and `step` until the clock's next event; the editor sends its requests
and takes its answers in between, and is never waited for.

- `DraftlineEditor`: our stdio server as Neovim 0.12's native inline completion and our plugin ask
  it: where the cursor is as a file opens (`draftline/cursor`), a request 200 ms after the last
  keystroke (earlier ones are not cancelled by the client: the server supersedes them), again on
  `draftline/suggestionReady` at the cursor.
- `LlamaVimEditor`: llama-server as llama.vim asks it: a request on every keystroke, one at a time
  (a keystroke while one is in flight asks again when it returns, with the text as it is then),
  `POST /infill` with llama.vim's fields.

Both show an answer only if the text has not changed since its request, and both keep a shown
suggestion while the user types what it says (llama.vim's cache and our clients' ghost text do).
"""
from __future__ import annotations

import queue
import threading
import time
import urllib.error
from pathlib import Path

from lsp_server.bench.llama_server import LlamaServer, ServerUnavailable
from lsp_server.bench.lsp_client import Client
from lsp_server.next_edit.rewrite import utf16_units

NEOVIM_DEBOUNCE_S = 0.2  # vim.lsp.inline_completion's debounce
LLAMA_VIM_RETRY_S = 0.1  # llama.vim's timer while a request is in flight: it asks again within this
LLAMA_VIM = {"n_predict": 256, "top_k": 40, "top_p": 0.99, "samplers": ["top_k", "top_p", "infill"],
             "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1500, "seed": 0}
LLAMA_VIM_PREFIX_LINES, LLAMA_VIM_SUFFIX_LINES = 256, 64
SUGGESTION_READY = "draftline/suggestionReady"


class Screen:
    """The document as the editor has it, the cursor at the end of line `line`, and the ghost text
    shown there."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.version = 0
        self.ghost = ""  # what is shown after the cursor; "" for nothing
        self._typed = ""  # typed since `ghost` was shown, as it says

    @property
    def cursor(self) -> tuple[int, int]:
        return len(self.lines) - 1, len(self.lines[-1])

    def type(self, text: str) -> None:
        """The user typed `text` at the cursor: the ghost text stays while it is typed through."""
        if text.startswith("\n"):
            self.lines.append(text[1:])
        else:
            self.lines[-1] += text
        self.version += 1
        if self.ghost.startswith(text):
            self.ghost = self.ghost[len(text):]
        else:
            self.ghost = ""

    def show(self, text: str, version: int) -> None:
        """An answer for the text as it was at `version`: shown if nothing was typed since."""
        if version == self.version:
            self.ghost = text


class DraftlineEditor:
    """Our server over stdio, as Neovim 0.12's native inline completion and our plugin drive it."""

    def __init__(self, server_cmd: list[str], root: Path | None, settings: dict | None = None,
                 name: str = "draftline"):
        """`root`: the workspace folder (None: no workspace, the file alone, as an editor opened on
        one file has it). `settings`: what the editor sends as initializationOptions (none: the
        server's own)."""
        self.name = name
        self.client = Client(server_cmd)
        self.ids = iter(range(1, 1 << 30))
        folders = [] if root is None else [{"uri": root.resolve().as_uri(), "name": root.name}]
        self.client.request(next(self.ids), "initialize", {
            "processId": None, "rootUri": folders[0]["uri"] if folders else None, "capabilities": {},
            "initializationOptions": settings or {}, "workspaceFolders": folders or None})
        self.client.notify("initialized", {})
        status = self.client.wait_status(("ready", "error"))
        if status.get("state") != "ready":
            raise RuntimeError(f"the server did not load its model: {status.get('message')}")
        self.version = 0
        self.screen = Screen()
        self._ask_at: float | None = None  # when the debounced request goes
        self._waiting: dict[int, int] = {}  # request id -> the screen's version it asks for

    def open(self, uri: str, text: str) -> None:
        self.uri, self.version = uri, 1
        self.screen = Screen()
        self.screen.lines = text.split("\n")
        self.client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}})
        self.client.notify("draftline/cursor", {"textDocument": {"uri": uri}, "position": {
            "line": len(self.screen.lines) - 1, "character": 0}})  # the plugin, as a buffer opens

    def insert(self, line: int, character: int, text: str) -> None:
        self.replace((line, character), (line, character), text)

    def replace(self, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
        """Replace the document's (line, character) range [start, end) with `text`."""
        self.version += 1
        self.client.notify("textDocument/didChange", {
            "textDocument": {"uri": self.uri, "version": self.version},
            "contentChanges": [{"range": {"start": {"line": start[0], "character": start[1]},
                                          "end": {"line": end[0], "character": end[1]}}, "text": text}]})

    def send(self, method: str, params: dict) -> int:
        """Send a request without waiting for its reply (`client.wait(id)` waits); its id."""
        msg_id = next(self.ids)
        self.client.send({"id": msg_id, "method": method, "params": params})
        return msg_id

    def type(self, text: str) -> None:
        """A keystroke at the end of the document's last line (a newline with its indentation, or
        one character)."""
        line, column = self.screen.cursor
        self.insert(line, utf16_units(self.screen.lines[-1]), text)
        self.screen.type(text)
        self._ask_at = time.perf_counter() + NEOVIM_DEBOUNCE_S

    def step(self, until: float) -> None:
        """Ask and take answers until `until` (perf_counter seconds)."""
        while True:
            now = time.perf_counter()
            if self._ask_at is not None and self._ask_at <= now:
                self._ask_at = None
                self._ask()
            for msg_id in [i for i in self._waiting if i in self.client.replies]:
                items = (self.client.replies.pop(msg_id)[1].get("result") or {}).get("items") or []
                text = items[0]["insertText"] if items else ""
                column = len(self.screen.lines[-1])
                self.screen.show(text[column:] if text.startswith(self.screen.lines[-1]) else "",
                                 self._waiting.pop(msg_id))
            for note in self.client.take_notifications(SUGGESTION_READY):
                if (note["position"]["line"], note["position"]["character"]) == \
                        (len(self.screen.lines) - 1, utf16_units(self.screen.lines[-1])):
                    self._ask_at = min(self._ask_at or now + NEOVIM_DEBOUNCE_S, now + NEOVIM_DEBOUNCE_S)
            wake = min(until, self._ask_at or until)
            if now >= until:
                return
            self.client.wait_any(max(0.0, min(wake - now, 0.05)))

    def _ask(self) -> None:
        line = len(self.screen.lines) - 1
        msg_id = self.send("textDocument/inlineCompletion", {
            "textDocument": {"uri": self.uri},
            "position": {"line": line, "character": utf16_units(self.screen.lines[-1])},
            "context": {"triggerKind": 2}})
        self._waiting[msg_id] = self.screen.version

    def answer(self, uri: str, text: str, timeout: float = 600) -> str:
        """The server's suggestion at the end of document `text`, waited for (the editor's screen
        and clock play no part): the document is opened, asked about and closed."""
        self.open(uri, text)
        line = text.count("\n")
        reply = self.client.request(next(self.ids), "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": utf16_units(self.screen.lines[-1])},
            "context": {"triggerKind": 1}}, timeout)
        self.close()
        items = (reply.get("result") or {}).get("items") or []
        inserted, line = (items[0]["insertText"] if items else ""), self.screen.lines[-1]
        return inserted[len(line):] if inserted.startswith(line) else ""

    def stats(self) -> dict:
        return self.client.request(next(self.ids), "workspace/executeCommand", {"command": "draftline.stats"})["result"]

    def close(self) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})
        self._waiting.clear()
        self._ask_at = None

    def stop(self) -> None:
        self.client.close()


class LlamaVimEditor:
    """llama-server asked as llama.vim asks it; the document lives in the editor (here)."""
    name = "llama-server"

    def __init__(self, server: LlamaServer):
        self.server = server
        try:
            server.post("/infill", {"input_prefix": "", "input_suffix": "", "n_predict": 0})
        except urllib.error.HTTPError as exc:
            raise ServerUnavailable(f"llama-server does not fill in the middle with this model ({exc.code} "
                                    f"{exc.reason}: it has no FIM tokens)") from None
        self.screen = Screen()
        self._answers: queue.Queue[tuple[int, str]] = queue.Queue()
        self._in_flight = False
        self._pending = False  # the text changed since the last request: ask when none is in flight

    def open(self, uri: str, text: str) -> None:
        self.screen = Screen()
        self.screen.lines = text.split("\n")

    def type(self, text: str) -> None:
        self.screen.type(text)
        self._pending = True

    def step(self, until: float) -> None:
        while True:
            if self._pending and not self._in_flight:
                self._pending = False
                self._ask()
            now = time.perf_counter()
            if now >= until:
                return
            try:
                version, text = self._answers.get(timeout=min(until - now, LLAMA_VIM_RETRY_S))
            except queue.Empty:
                continue
            self._in_flight = False
            self.screen.show(text, version)

    def _ask(self) -> None:
        lines, version = list(self.screen.lines), self.screen.version
        line, before = len(lines) - 1, lines[-1]
        body = LLAMA_VIM | {
            "input_prefix": "".join(f"{s}\n" for s in lines[max(0, line - LLAMA_VIM_PREFIX_LINES):line]),
            "input_suffix": "", "prompt": before if before.strip() else "",
            "n_indent": len(before) - len(before.lstrip()), "input_extra": []}
        self._in_flight = True

        def post() -> None:
            try:
                content = self.server.post("/infill", body).get("content", "")
            except (OSError, ValueError):
                content = ""
            self._answers.put((version, content))

        threading.Thread(target=post, daemon=True).start()

    def close(self) -> None:
        while self._in_flight:  # the next file's first request waits for this one, as in the editor
            self.step(time.perf_counter() + LLAMA_VIM_RETRY_S)
        self._pending = False

    def stop(self) -> None:
        pass
