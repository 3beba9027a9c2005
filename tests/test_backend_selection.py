"""Backend choice on a CPU-only machine: auto picks torch; exllamav2 fails fast and clearly."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from engine.execution.backends.exllamav2 import INSTALL_HINT, unavailable_reason
from engine.errors import BackendUnavailable
from engine.loading.fetch import model_path
from engine.models import choose_backend
from tests.models import SMALL

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="these tests describe a machine without CUDA")


def test_auto_picks_torch_without_cuda(tmp_path: Path) -> None:
    assert choose_backend("auto", model_path(SMALL)) == "torch"
    (tmp_path / "config.json").write_text("{}")
    assert choose_backend("auto", tmp_path) == "torch"  # a model folder is not enough without a GPU
    assert choose_backend("torch", tmp_path) == "torch"


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(BackendUnavailable, match="unknown backend 'vllm'"):
        choose_backend("vllm", model_path(SMALL))


def test_explicit_exllamav2_names_what_is_missing() -> None:
    with pytest.raises(BackendUnavailable) as info:
        choose_backend("exllamav2", model_path(SMALL))
    message = str(info.value)
    assert "\n" not in message
    assert "--backend torch" in message
    if torch.version.cuda is None:  # the CPU-only torch of the default install
        assert "CPU-only build" in message and INSTALL_HINT in message


@pytest.mark.parametrize(("cuda_build", "device", "installed", "expected"), [
    (None, False, False, "CPU-only build"),
    ("12.4", False, True, "sees no CUDA device"),
    ("12.4", True, False, f"not installed: {INSTALL_HINT}"),
])
def test_each_missing_piece_has_its_own_message(cuda_build, device, installed, expected) -> None:
    assert expected in unavailable_reason(cuda_build, device, installed)


def test_nothing_missing_means_no_reason() -> None:
    assert unavailable_reason("12.4", True, True) is None


@pytest.mark.integration  # a process of its own, importing torch
def test_load_fails_before_importing_exllamav2_or_reading_weights() -> None:
    # A fresh interpreter, so that sys.modules shows exactly what the failed load imported.
    script = (
        "import sys\n"
        "from engine.errors import BackendUnavailable\n"
        "from engine.models import load_model\n"
        "try:\n"
        "    load_model('smollm2-135m', backend='exllamav2')\n"
        "except BackendUnavailable:\n"
        "    pass\n"
        "else:\n"
        "    sys.exit('no error')\n"
        "loaded = [m for m in ('exllamav2', 'gguf') if m in sys.modules]\n"  # gguf: the weights reader
        "print(','.join(loaded) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


@pytest.mark.integration  # a process of its own, importing torch
def test_cli_complete_with_exllamav2_fails_with_one_line(tmp_path: Path) -> None:
    source = tmp_path / "a.py"
    source.write_text("def add(a, b):\n    return a + b\n")
    out = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "complete", str(source), "--line", "1",
         "--col", "16", "--backend", "exllamav2", "--threads", "1"],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "exllamav2" in lines[0] and "--backend torch" in lines[0]


@pytest.mark.integration  # the GPU self-check script on the CPU, end to end
def test_gpu_check_script_runs_on_cpu(tmp_path: Path) -> None:
    # The GPU check is run rarely, on borrowed machines: its CPU half must not rot in between.
    summary = tmp_path / "summary.json"
    out = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--cpu-dry-run", "--new-tokens", "24",
         "--summary", str(summary)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(summary.read_text())["results"]
    assert len(results) == 9 and all(r["ok"] for r in results)
    lookups = [r for r in results if r["check"].startswith("lookup")]
    assert all(r["accepted"] > 0 for r in lookups)  # the accept path was exercised
    assert any(r["accepted"] < r["drafted"] for r in lookups)  # and the reject path too


# --- the stdio server asked for exllamav2 on this machine -------------------------------------

def _frame(message: dict) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_frames(stream, frames: queue.Queue) -> None:
    """Parse stdout strictly as LSP frames; anything else is queued as a protocol violation."""
    while True:
        header = stream.readline()
        if not header:
            return
        if not header.startswith(b"Content-Length: "):
            frames.put(("garbage", header))
            return
        length = int(header.split(b":")[1])
        while (line := stream.readline()) not in (b"\r\n", b""):
            if not line.startswith(b"Content-Type: "):
                frames.put(("garbage", line))
                return
        try:
            frames.put(("frame", json.loads(stream.read(length))))
        except ValueError as exc:
            frames.put(("garbage", repr(exc).encode()))
            return


def _wait_for(frames: queue.Queue, seen: list, match) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kind, item = frames.get(timeout=deadline - time.monotonic())
        assert kind == "frame", f"stdout carried something other than LSP frames: {item!r}"
        seen.append(item)
        if match(item):
            return item
    raise AssertionError(f"no matching message; saw {seen}")


@pytest.mark.integration  # the server over stdio
def test_stdio_server_reports_missing_gpu_backend_and_keeps_serving(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lsp_server.cli", "--stdio", "--backend", "exllamav2", "--threads", "1"],
        cwd=ROOT, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    frames: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_frames, args=(proc.stdout, frames), daemon=True)
    reader.start()
    seen: list[dict] = []

    def send(message: dict) -> None:
        proc.stdin.write(_frame(message))
        proc.stdin.flush()

    try:
        uri = (tmp_path / "a.py").as_uri()
        send({"id": 1, "method": "initialize",
              "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}})
        init = _wait_for(frames, seen, lambda m: m.get("id") == 1)
        assert "inlineCompletionProvider" in init["result"]["capabilities"]
        send({"method": "initialized", "params": {}})
        error = _wait_for(frames, seen, lambda m: m.get("method") == "draftline/status"
                          and m["params"]["state"] == "error")
        assert "exllamav2" in error["params"]["message"]
        send({"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "def add(a, b):\n    return "}}})
        send({"id": 2, "method": "textDocument/inlineCompletion", "params": {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 11},
            "context": {"triggerKind": 2}}})
        answer = _wait_for(frames, seen, lambda m: m.get("id") == 2)
        assert "error" not in answer and answer["result"] in (None, [], {"items": []})
        send({"id": 3, "method": "shutdown"})
        _wait_for(frames, seen, lambda m: m.get("id") == 3)
        send({"method": "exit"})
        assert proc.wait(timeout=60) == 0
        reader.join(timeout=10)
        while not frames.empty():  # whatever came after: still only frames
            kind, item = frames.get()
            assert kind == "frame", f"stdout carried something other than LSP frames: {item!r}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stderr = proc.stderr.read().decode(errors="replace")
    assert "exllamav2" in stderr  # the reason is logged for the user, on stderr
