"""The engine's surface is a boundary: a client of a shared server (`--endpoint`) runs the
language server's whole path without loading torch or the local engine."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.remote_servers import StubServer

ROOT = Path(__file__).resolve().parents[1]

# Runs a command of the CLI in a fresh interpreter, then reports what it imported.
PROBE = """
import json, sys
from lsp_server.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers') or m in
               ('engine.engine', 'engine.models', 'engine.execution.backends.torch_llama', 'engine.execution.native'))
print(json.dumps({'code': code, 'heavy': heavy}))
"""


def _probe(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_complete_and_bench_through_an_endpoint_never_import_torch(tmp_path):
    stub = StubServer("ok")
    try:
        done = _probe("--endpoint", stub.url, "complete", "examples/shapes.py", "--line", "24", "--col", "8")
        assert done == {"code": 0, "heavy": []}
        (tmp_path / "code.py").write_text("def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n" * 3)
        done = _probe("bench", str(tmp_path), "--endpoint", stub.url, "--tasks", "1", "--max-new-tokens", "4")
        assert done == {"code": 0, "heavy": []}
    finally:
        stub.close()
    assert any(path == "/v1/completions" for path, _ in stub.requests)  # it really went there


def test_the_local_engine_is_imported_only_when_used():
    out = subprocess.run([sys.executable, "-c", "import sys, engine, engine.api, lsp_server.serving.server; "
                          "print('torch' in sys.modules, 'engine.engine' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


@pytest.mark.integration  # the embedded model loaded in a process of its own
def test_a_model_the_native_decoder_runs_is_served_without_torch():
    """A GGUF the C decoder computes where it is mapped runs on the native backend: numpy and
    ctypes only, so a start does not pay torch's import (1.2-1.5 s on two cores)."""
    from engine.execution import native
    from tests.models import SMALL

    if native.load_library() is None:
        pytest.skip("no native decoder on this machine")
    done = _probe("--model", SMALL, "complete", "examples/shapes.py", "--line", "24", "--col", "8",
                  "--max-new-tokens", "4")
    assert done == {"code": 0, "heavy": ["engine.engine", "engine.execution.native", "engine.models"]}
