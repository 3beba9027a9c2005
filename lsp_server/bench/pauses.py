"""`bench --pauses N`: someone writing real code, a pause after each new line's indentation.

Each of a few of the user's files is written again from a point in it: the file so far is
opened, and the next lines are typed one by one (the newline and the indentation, a pause, then
the rest of the line at --key-ms a character). The first pause comes right after the opening,
as it does when someone starts work in a file. At each pause the contender is asked once, as an
editor asks once (Neovim 0.12 and VS Code do not ask again while the user waits):

- `draftline`: our stdio server (`lsp_server --stdio`, the bench's model and settings), through
  didOpen, didChange and textDocument/inlineCompletion;
- `llama-server`: llama.cpp's server started with its FIM presets' flags in the user's
  environment, asked `POST /infill` the way llama.vim asks it (256 lines above, the rest of
  the line and 64 below, n_predict 256, top_k 40, top_p 0.99, t_max_predict_ms 1500).

Scored per pause: whether ghost text came, its first line against the line the file has (exact,
edit similarity), the time from the request to the answer, and for our server whether the answer
had the full window or a shortened one (the cold rule: the server's `coldWindows` counter, read
after each answer); both see the same pauses, taken in turn, each from a freshly loaded process
with the model already in memory.
"""
from __future__ import annotations

import random
import sys
import time
import urllib.error
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lsp_server.bench.llama_server import LlamaServer, ServerUnavailable
from lsp_server.bench.lsp_client import Client
from lsp_server.bench.quality import edit_similarity, string_lines
from lsp_server.bench.sources import SourceFile
from lsp_server.next_edit.rewrite import utf16_units

PAUSES_PER_FILE = 4
MIN_CODE_CHARS = 6  # `else:`, `pass`, `}` say little
LLAMA_VIM = {"n_predict": 256, "top_k": 40, "top_p": 0.99, "samplers": ["top_k", "top_p", "infill"],
             "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1500, "seed": 0}
LLAMA_VIM_PREFIX_LINES, LLAMA_VIM_SUFFIX_LINES = 256, 64


@dataclass(frozen=True)
class Walk:
    """One file written again from line `first` (0-based): the lines before it exist already."""
    path: Path
    lines: list[str]
    first: int
    pauses: list[int]  # the lines typed after a pause (the others are typed without one)


@dataclass
class Pause:
    contender: str
    path: str
    line: int
    expected: str
    ghost: str  # the first line of what was shown; "" for nothing
    ms: float  # from the request to the answer
    # "full" or "short" (the cold rule shortened it); "none": no generation ended by the answer
    # (no model run, or one the time budget left going); "" where the contender does not say
    window: str
    window_tokens: int | None = None  # the prefix window's tokens the server uses (draftline.stats)

    @property
    def exact(self) -> bool:
        return bool(self.ghost) and self.ghost == self.expected


def _is_code(line: str) -> bool:
    code = line.strip()
    return len(code) >= MIN_CODE_CHARS and not code.startswith(("#", "//", "/*", "*", '"""', "'''"))


def walks(sources: list[SourceFile], count: int, seed: int) -> list[Walk]:
    """`count` pauses over files of at least 60 lines, PAUSES_PER_FILE in each, from a point at
    least 40 lines in, at lines of code (not comments, not inside docstrings); the same for the
    same seed and files."""
    rng = random.Random(f"{seed}:pauses")
    files = sorted((s for s in sources if s.text.count("\n") >= 60), key=lambda s: str(s.path))
    rng.shuffle(files)
    chosen = []
    for source in files:
        if len(chosen) * PAUSES_PER_FILE >= count:
            break
        lines, prose = source.text.split("\n"), string_lines(source)
        starts = [i for i in range(40, len(lines)) if _is_code(lines[i]) and i not in prose]
        if len(starts) < PAUSES_PER_FILE * 2:
            continue
        first = rng.choice(starts[:len(starts) - PAUSES_PER_FILE * 2])
        code = [i for i in range(first, len(lines)) if _is_code(lines[i]) and i not in prose]
        n = min(PAUSES_PER_FILE, count - len(chosen) * PAUSES_PER_FILE)
        chosen.append(Walk(source.path, lines, first, code[:n]))
    return chosen


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


class DraftlineEditor:
    """Our server as an editor drives it over stdio."""
    name = "draftline"

    def __init__(self, server_cmd: list[str], root: Path, settings: dict | None = None):
        """`settings`: what the editor sends as initializationOptions (none: the server's own)."""
        self.client = Client(server_cmd)
        self.ids = iter(range(1, 1 << 30))
        self.client.request(next(self.ids), "initialize", {
            "processId": None, "rootUri": root.resolve().as_uri(), "capabilities": {},
            "initializationOptions": settings or {},
            "workspaceFolders": [{"uri": root.resolve().as_uri(), "name": root.name}]})
        self.client.notify("initialized", {})
        status = self.client.wait_status(("ready", "error"))
        if status.get("state") != "ready":
            raise RuntimeError(f"the server did not load its model: {status.get('message')}")
        self.version = 0
        self.counted = {"generated": 0, "coldWindows": 0}  # the server's counters after the last answer

    def open(self, uri: str, text: str) -> None:
        self.uri, self.version = uri, 1
        self.client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}})

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

    def ask(self, lines: list[str], line: int, column: int) -> tuple[str, str, int | None]:
        """What was shown, whether it came from the full window, and that window's tokens."""
        before = lines[line][:column]
        reply = self.client.request(next(self.ids), "textDocument/inlineCompletion", {
            "textDocument": {"uri": self.uri}, "position": {"line": line, "character": utf16_units(before)},
            "context": {"triggerKind": 2}})
        items = (reply.get("result") or {}).get("items") or []
        stats = self.client.request(next(self.ids), "workspace/executeCommand", {"command": "draftline.stats"})
        now = {key: stats["result"][key] for key in self.counted}
        new = {key: now[key] - self.counted[key] for key in now}
        self.counted = now
        window = "none" if not new["generated"] else "short" if new["coldWindows"] else "full"
        return (items[0]["insertText"][len(before):] if items else ""), window, stats["result"].get("windowTokens")

    def close(self) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})

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

    def open(self, uri: str, text: str) -> None:
        pass

    def insert(self, line: int, character: int, text: str) -> None:
        pass

    def ask(self, lines: list[str], line: int, column: int) -> tuple[str, str, None]:
        before, after = lines[line][:column], lines[line][column:]
        body = LLAMA_VIM | {
            "input_prefix": "".join(f"{s}\n" for s in lines[max(0, line - LLAMA_VIM_PREFIX_LINES):line]),
            "input_suffix": "\n".join([after, *lines[line + 1:line + 1 + LLAMA_VIM_SUFFIX_LINES]]),
            "prompt": before if before.strip() else "", "n_indent": len(_indent(before)), "input_extra": []}
        return self.server.post("/infill", body).get("content", ""), "", None

    def close(self) -> None:
        pass

    def stop(self) -> None:
        pass


def replay(editor, walk: Walk, key_s: float) -> list[Pause]:
    """Write `walk`'s file again in `editor`, pausing at its pauses."""
    lines = walk.lines[:walk.first]
    uri = walk.path.resolve().as_uri()
    editor.open(uri, "\n".join(lines))
    results = []
    for number in range(walk.first, walk.pauses[-1] + 1):
        target = walk.lines[number]
        indent = _indent(target)
        editor.insert(number - 1, utf16_units(lines[-1]), "\n" + indent)
        lines.append(indent)
        if number in walk.pauses:
            started = time.perf_counter()
            ghost, window, window_tokens = editor.ask(lines, number, len(indent))
            results.append(Pause(editor.name, str(walk.path), number, target.strip(), _first_line(ghost),
                                 (time.perf_counter() - started) * 1000, window, window_tokens))
        for character in target[len(indent):]:  # typed key by key
            editor.insert(number, utf16_units(lines[number]), character)
            lines[number] += character
            time.sleep(key_s)
    editor.close()
    return results


def summarize(pauses: list[Pause]) -> dict:
    """{contender: numbers}."""
    out = {}
    for name in dict.fromkeys(p.contender for p in pauses):
        mine = [p for p in pauses if p.contender == name]
        shown = [p.ms for p in mine if p.ghost]
        out[name] = {
            "pauses": len(mine), "with_ghost_text": len(shown),
            "exact_first_line": round(sum(p.exact for p in mine) / len(mine), 4),
            "edit_similarity": round(float(np.mean([edit_similarity(p.ghost, p.expected) for p in mine])), 4),
            "p50_ms": round(float(np.percentile([p.ms for p in mine], 50)), 1),
            "p90_ms": round(float(np.percentile([p.ms for p in mine], 90)), 1),
            "first_in_file_p50_ms": round(float(np.percentile(
                [p.ms for p in mine if p.line == min(q.line for q in mine if q.path == p.path)], 50)), 1),
            "full_window": sum(p.window == "full" for p in mine) if any(p.window for p in mine) else None,
            "window_tokens": max((p.window_tokens for p in mine if p.window_tokens), default=None)}
    return out


def run_pauses(editors: list, chosen: list[Walk], key_s: float) -> list[Pause]:
    """Each walk in each editor, the editors in turn per walk (machine drift hits both alike)."""
    pauses = []
    for i, walk in enumerate(chosen):
        for editor in editors[i % len(editors):] + editors[:i % len(editors)]:
            print(f"lsp_server bench: pauses {walk.path.name} {editor.name}", file=sys.stderr)
            pauses += replay(editor, walk, key_s)
    return pauses


def format_pauses(numbers: dict) -> str:
    lines = ["\n\npauses: ghost text after a pause at a new line's indentation (the first right after opening)",
             f"{'contender':<14}{'pauses':>7}{'shown':>7}{'exact':>7}{'edit sim':>10}{'p50 ms':>9}{'p90 ms':>9}"
             f"{'first p50':>11}{'full window':>13}"]
    for name, m in numbers.items():
        full = "-" if m["full_window"] is None else m["full_window"]
        lines.append(f"{name:<14}{m['pauses']:>7}{m['with_ghost_text']:>7}{m['exact_first_line']:>7.2f}"
                     f"{m['edit_similarity']:>10.2f}{m['p50_ms']:>9.0f}{m['p90_ms']:>9.0f}{m['first_in_file_p50_ms']:>11.0f}"
                     f"{full:>13}")
    lines.append("(ms: from the request to the answer; first: the first pause in each file, right after opening; "
                 "full window: answers from the whole window, not one the cold rule shortened)")
    lines += [f"{name}'s prefix window: {m['window_tokens']} tokens" for name, m in numbers.items() if m["window_tokens"]]
    return "\n".join(lines)


def as_json(pauses: list[Pause]) -> list[dict]:
    return [asdict(p) | {"exact": p.exact} for p in pauses]
