"""Real HTTP servers for the remote-engine tests (no mocks):

- `LlamaServer`: llama.cpp's OpenAI-compatible server through llama-cpp-python (`make test`
  builds it once), serving the embedded GGUF on this CPU. What it finished is counted from its own
  logs: llama.cpp prints `llama_perf_context_print: ... total time` to stderr (verbose) when a
  completion runs to its end (max_tokens, end of text); a stream the client closed stops at the next
  token and prints "Disconnected from client" to stdout instead, without timings.
- `StubServer`: a stdlib http.server on loopback answering /v1/* the ways real servers go wrong
  (401, 500, malformed bodies, a stream that never ends) and a /tokenize for FIM detection.
"""
from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.loading.fetch import model_path
from tests.models import SMALL

HAVE_LLAMA_SERVER = all(importlib.util.find_spec(m) is not None
                        for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context"))
needs_llama_server = pytest.mark.skipif(
    not HAVE_LLAMA_SERVER, reason="llama-cpp-python[server] is not installed (`make test` builds it)")
SERVED_NAME = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, logs: Path, port: int | None = None, api_key: str | None = None):
        self.port = port or free_port()
        self.logs, self.api_key = logs, api_key
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 120) -> LlamaServer:
        self.runs += 1
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path(SMALL)),
               "--model_alias", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", "4096", "--n_threads", "2", "--verbose", "true"]
        if self.api_key:
            cmd += ["--api_key", self.api_key]
        out = open(self.logs / f"llama-{self.port}-{self.runs}.out", "w")
        err = open(self.logs / f"llama-{self.port}-{self.runs}.err", "w")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.stderr()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("llama_cpp.server did not start")

    def _read(self, suffix: str) -> str:
        return "".join((self.logs / f"llama-{self.port}-{i}.{suffix}").read_text(errors="replace")
                       for i in range(1, self.runs + 1))

    def stderr(self) -> str:
        return self._read("err")

    def finished(self) -> int:
        """Completions the server ran to their end (llama.cpp's timing report, one each)."""
        return sum("llama_perf_context_print:" in line and "total time" in line
                   for line in self.stderr().splitlines())

    def disconnected(self) -> int:
        """Streams it stopped because the client closed them."""
        return self._read("out").count("Disconnected from client")

    def completion_requests(self) -> int:
        return (self._read("err") + self._read("out")).count('"POST /v1/completions HTTP/1.1"')

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def complete(self, prompt: str, max_tokens: int) -> str:
        """A plain non-streamed completion straight from the server (the reference)."""
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
        req = urllib.request.Request(self.url + "/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())["choices"][0]["text"]


class StubServer:
    """/v1/models lists one model; /v1/completions answers as `behaviour` says:
    "unauthorized", "error", "malformed" (an event that is not JSON), "no-text" (JSON without
    choices[0].text), "endless" (tokens forever, max_tokens ignored), "silent" (no answer for
    10 s, like a server still prefilling), "ok" (a short stream).
    /tokenize counts "<|fim_prefix|>"-style names as one token when `fim` is true."""

    def __init__(self, behaviour: str = "ok", fim: bool = False):
        self.behaviour, self.fim = behaviour, fim
        self.requests: list[tuple[str, dict | None]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                stub.requests.append((self.path, None))
                if stub.behaviour == "unauthorized":
                    return self._json(401, {"error": {"message": "Invalid API key"}})
                self._json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                stub.requests.append((self.path, body))
                if self.path == "/tokenize":
                    text = body.get("content", "")
                    one = stub.fim and text in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
                    return self._json(200, {"tokens": [1] if one else list(range(len(text) // 2 + 2))})
                if stub.behaviour == "unauthorized":
                    return self._json(401, {"error": {"message": "Invalid API key"}})
                if stub.behaviour == "silent":
                    time.sleep(10)
                if stub.behaviour == "error":
                    return self._json(500, {"error": {"message": "CUDA out of memory"}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self._events()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _event(self, payload: str) -> None:
                data = f"data: {payload}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _events(self):
                token = json.dumps({"choices": [{"text": " x", "index": 0, "finish_reason": None}]})
                if stub.behaviour == "malformed":
                    self._event(token)
                    self._event("{this is not json")
                elif stub.behaviour == "no-text":
                    self._event(json.dumps({"choices": [{"index": 0}]}))
                elif stub.behaviour == "endless":
                    for _ in range(100000):
                        self._event(token)
                        time.sleep(0.001)
                else:
                    for _ in range(3):
                        self._event(token)
                    self._event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
