"""Next-edit suggestions in real headless Neovim 0.12 against the real server
(tests/editors/nvim_next_edit_test.lua): the preview appears after a pause, Esc dismisses it,
Tab makes it; an edit out of view (tests/editors/nvim_next_edit_jump_test.lua) is marked, the
first Tab jumps to it, the next makes it and asks for the next one at once. Here the buffer
after Tab is checked against the server's own answer applied by this process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lsp_server.bench.next_edits import apply_edit
from lsp_server.next_edit.rewrite import NextEdit, Position
from tests.test_editor_nvim import INIT, REPO, _run

SCRIPT = REPO / "tests" / "editors" / "nvim_next_edit_test.lua"
JUMP_SCRIPT = REPO / "tests" / "editors" / "nvim_next_edit_jump_test.lua"
NEOVIM_DELAY_MS = 600  # the plugin's next_edit.delay_ms (editors/nvim/lua/draftline/config.lua)

pytestmark = pytest.mark.integration  # headless Neovim against the server


def _play(script: Path, tmp_path: Path) -> tuple[dict, NextEdit]:
    """What the Lua script saw in headless Neovim 0.12, and the edit the server offered."""
    result = tmp_path / "result.json"
    _run("0.12", "-u", str(INIT), "-c", f"luafile {script}", env={"DRAFTLINE_RESULT": str(result)})
    seen = json.loads(result.read_text())
    e = seen["edit"]
    return seen, NextEdit(Position(**e["start"]), Position(**e["end"]), e["text"])


def test_the_next_edit_is_previewed_dismissed_and_made(tmp_path: Path) -> None:
    seen, edit = _play(SCRIPT, tmp_path)
    assert seen["before"].startswith("def area(w, h):\n    return w * h")
    assert seen["after"] == apply_edit(seen["before"], edit)


def test_an_edit_away_from_the_view_is_marked_jumped_to_and_made(tmp_path: Path) -> None:
    seen, edit = _play(JUMP_SCRIPT, tmp_path)
    assert seen["row"] == edit.start.line > seen["bottom"]  # marked where it is, out of view
    assert seen["jumped"] == edit.start.line  # the first Tab moved the cursor there
    assert seen["before"].startswith("class Shape:\n") and seen["after"] == apply_edit(seen["before"], edit)
    assert 0 <= seen["asked_after_ms"] < NEOVIM_DELAY_MS / 2  # asked at once, not after the pause
