"""The VS Code extension (editors/vscode): compile it and run its `node --test` suite, in which the
real vscode-languageclient starts the real `lsp_server --stdio` behind a stand-in `vscode` module
(VS Code itself cannot be downloaded here)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # Node.js and the VS Code extension

REPO = Path(__file__).resolve().parents[1]
EXTENSION = REPO / "editors" / "vscode"
SERVER = REPO / ".venv" / "bin" / "lsp_server"


def _run(*cmd: str, timeout: int) -> None:
    proc = subprocess.run(cmd, cwd=EXTENSION, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def _dependencies_current() -> bool:
    installed = EXTENSION / "node_modules" / ".package-lock.json"
    lock = EXTENSION / "package-lock.json"
    return installed.is_file() and installed.stat().st_mtime >= lock.stat().st_mtime


def test_extension_builds_and_drives_the_server() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js/npm not found: the VS Code extension's tests need Node.js >= 20 "
                    "(e.g. `apt-get install nodejs npm`)")
    if not SERVER.is_file():
        pytest.skip(f"{SERVER} not found: run `make install`")
    if not _dependencies_current():
        _run("npm", "ci", "--no-audit", "--no-fund", timeout=600)
    _run("npm", "run", "build", timeout=300)
    _run("npm", "test", timeout=400)
