"""Output that libraries write to fd 1 (from Python or C) must not reach a protocol's stdout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from engine.execution.backends.exllamav2 import keep_torch_threads

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True,
                          timeout=60)


def test_guard_sends_fd1_and_prints_to_stderr_then_restores() -> None:
    out = _run(
        "import ctypes, os\n"
        "from engine.stdout_guard import stdout_to_stderr\n"
        "with stdout_to_stderr():\n"
        "    os.write(1, b'raw-write\\n')\n"
        "    print('python-print')\n"  # buffered: must be flushed before fd 1 comes back
        "    libc = ctypes.CDLL(None)\n"
        "    libc.printf(b'c-printf\\n'); libc.fflush(None)\n"
        "print('after')\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"after\n"
    for text in (b"raw-write", b"python-print", b"c-printf"):
        assert text in out.stderr


def test_guard_restores_stdout_after_an_exception() -> None:
    out = _run(
        "import os\n"
        "from engine.stdout_guard import stdout_to_stderr\n"
        "try:\n"
        "    with stdout_to_stderr():\n"
        "        os.write(1, b'inside\\n')\n"
        "        raise RuntimeError('boom')\n"
        "except RuntimeError:\n"
        "    pass\n"
        "print('after')\n")
    assert out.stdout == b"after\n"
    assert b"inside" in out.stderr


def test_claimed_stdout_carries_only_what_the_protocol_writes() -> None:
    out = _run(
        "import os, threading\n"
        "from engine.stdout_guard import claim_stdout\n"
        "protocol = claim_stdout()\n"
        "protocol.write(b'frame-1\\n')\n"
        "t = threading.Thread(target=lambda: (os.write(1, b'library-noise\\n'), print('stray-print')))\n"
        "t.start(); t.join()\n"
        "protocol.write(b'frame-2\\n')\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"frame-1\nframe-2\n"
    assert b"library-noise" in out.stderr and b"stray-print" in out.stderr


def test_torch_thread_count_is_restored() -> None:
    before = torch.get_num_threads()
    try:
        with keep_torch_threads():
            torch.set_num_threads(1 if before != 1 else 2)  # what exllamav2 does at import
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
