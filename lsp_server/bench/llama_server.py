"""llama.cpp's own `llama-server`, run as llama.vim and llama.vscode users run it: its own process,
the user's environment (never our OMP_WAIT_POLICY), the flags of its `--fim-qwen-*` presets, on
loopback. bench uses it as a peer (plain, and with a draft model through `-md`) and drives it as
llama.vim does in the pause replay.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from lsp_server.bench.peer_env import peer_environment

# The flags `llama-server --fim-qwen-1.5b-default` (and the -spec presets) set, less the model
# download and the GPU layers: batch and micro-batch of 1024, the model's own context, KV-cache
# chunks of 256 tokens reused at new positions, flash attention.
PRESET_FLAGS = ("-ub", "1024", "-b", "1024", "-c", "0", "--cache-reuse", "256", "-fa")
LOAD_TIMEOUT_S = 300
ENV_BINARY = "DRAFTLINE_LLAMA_SERVER"


class ServerUnavailable(Exception):
    """One sentence: why this peer cannot run here."""


def find_binary() -> Path:
    """$DRAFTLINE_LLAMA_SERVER, else `llama-server` on PATH."""
    named = os.environ.get(ENV_BINARY)
    if named:
        if not os.access(named, os.X_OK):
            raise ServerUnavailable(f"{ENV_BINARY}={named} is not an executable file")
        return Path(named)
    found = shutil.which("llama-server")
    if found is None:
        raise ServerUnavailable(f"llama-server is not on PATH (build llama.cpp's server target, or set {ENV_BINARY})")
    return Path(found)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A running llama-server on 127.0.0.1; `post` sends it JSON. Use as a context manager."""

    def __init__(self, model: Path, threads: int, draft: Path | None = None, binary: Path | None = None):
        binary = binary or find_binary()
        self.port = _free_port()
        cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
               "-t", str(threads), *PRESET_FLAGS]
        if draft is not None:
            cmd += ["-md", str(draft), "-td", str(threads)]
        env = peer_environment()
        # A binary moved out of its build folder finds its shared libraries beside it.
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(binary.parent), env.get("LD_LIBRARY_PATH")]))
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.proc.stderr.read().decode(errors="replace").strip().splitlines()[-1:]
                raise ServerUnavailable(f"llama-server exited at start ({tail[0] if tail else self.proc.returncode})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if json.load(reply).get("status") == "ok":
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        self.close()
        raise ServerUnavailable(f"llama-server did not load the model within {LOAD_TIMEOUT_S} s")

    def post(self, path: str, body: dict, timeout: float = 600) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.load(reply)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.stderr.close()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
