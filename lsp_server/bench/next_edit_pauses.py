"""`bench --next-edit ... --through-server`: each next-edit case through our stdio server, asked
as Neovim's plugin asks it, timed from the pause.

Per case: the file is opened as it was before the user's edit, and an inline request at the
edit's line finds the spot (the user goes there); MOVE_S later the edit is made by one
didChange, and that is the pause: an inline request at once, as editors send one after a
change, and the next-edit request NEOVIM_DELAY_S later (the plugin's `next_edit.delay_ms`). The
server puts the inline completion first, so the time from the pause to the next edit holds both
that and the prediction (its prompt new after the edit).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lsp_server.bench.edit_cases import EditCase
from lsp_server.bench.pause_editors import DraftlineEditor
from lsp_server.next_edit.rewrite import NextEdit, Position, utf16_units

MOVE_S = 1.5
NEOVIM_DELAY_S = 0.6


@dataclass(frozen=True)
class Served:
    edit: NextEdit | None  # what the server proposed
    inline_s: float  # from the pause to the inline answer
    edit_s: float  # from the pause to the next-edit answer


def before_edit(case: EditCase) -> str:
    """The case's document as it was before its last edit."""
    edit, lines = case.edits[-1], case.text.split("\n")
    return "\n".join(lines[:edit.line] + edit.before.split("\n") + lines[edit.line + edit.after.count("\n") + 1:])


def serve_case(editor: DraftlineEditor, case: EditCase, uri: str) -> Served:
    edit, lines = case.edits[-1], case.text.split("\n")
    editor.open(uri, before_edit(case))
    where = {"textDocument": {"uri": uri}, "context": {"triggerKind": 2}}
    editor.client.wait(editor.send("textDocument/inlineCompletion", where | {
        "position": {"line": edit.line, "character": 0}}))
    time.sleep(MOVE_S)
    before = edit.before.split("\n")
    editor.replace((edit.line, 0), (edit.line + len(before) - 1, utf16_units(before[-1])), edit.after)
    paused = time.perf_counter()
    cursor = {"line": case.line, "character": utf16_units(lines[case.line])}
    inline = editor.send("textDocument/inlineCompletion", where | {"position": cursor})
    time.sleep(NEOVIM_DELAY_S)
    asked = editor.send("draftline/nextEdit", {"textDocument": {"uri": uri}, "position": cursor,
                                               "version": editor.version})
    answer = editor.client.wait(asked).get("result")
    editor.client.wait(inline)
    editor.close()
    (inline_at, _), (edit_at, _) = editor.client.replies[inline], editor.client.replies[asked]
    proposed = answer and NextEdit(Position(**answer["start"]), Position(**answer["end"]), answer["text"])
    return Served(proposed or None, inline_at - paused, edit_at - paused)


def run_served(server_cmd: list[str], root: Path, cases: list[EditCase]) -> list[Served]:
    """Every case in one server (the model loaded once), one document at a time."""
    editor = DraftlineEditor(server_cmd, root)
    try:
        results = []
        for i, case in enumerate(cases, 1):
            results.append(serve_case(editor, case, (root / f"{i}" / case.path).as_uri()))
            print(f"lsp_server bench: next edit through the server {i}/{len(cases)} {case.name}", file=sys.stderr)
        return results
    finally:
        editor.stop()
