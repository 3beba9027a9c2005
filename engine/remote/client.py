"""A small client for OpenAI-compatible completion servers (vLLM, SGLang, llama.cpp's
llama-server, Ollama, LM Studio, TGI): `/v1/models`, streaming `/v1/completions`, and the
servers' own `/tokenize` endpoints. Standard library only (http.client), so that a stream can be
closed from another thread the moment its request is superseded: closing the socket is what
tells the server to stop generating.

Errors are `RemoteError`s with one line a user can act on. Only connection errors (refused,
reset, connect timeout, before any answer arrived) are retried, a bounded number of times with
back-off; an HTTP error or a bad answer is reported at once.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.api import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from engine.errors import EngineError

RETRIES = 2  # extra attempts after a connection error
BACKOFF_S = (0.1, 0.4)  # wait before each retry
CANCEL_POLL_S = 0.02  # how often a stream's watcher looks at the request's cancel flag


class RemoteError(EngineError):
    """The endpoint could not be used for this request: one clear line, never a secret."""


class Cancelled(Exception):
    """The request was cancelled while connecting or waiting to retry."""


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Endpoint:
    """Where the server is and how to talk to it. `base` ends in /v1."""
    base: str
    api_key: str | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    read_timeout_s: float = READ_TIMEOUT_S

    @classmethod
    def parse(cls, url: str, api_key_env: str | None = None, allow_insecure: bool = False,
              connect_timeout_s: float = CONNECT_TIMEOUT_S, read_timeout_s: float = READ_TIMEOUT_S) -> Endpoint:
        """Check the URL and the key's environment variable; the key itself is read here and
        appears in no message."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"endpoint {url!r} is not an http:// or https:// URL")
        api_key = None
        if api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise RemoteError(f"the API key's environment variable ${api_key_env} is not set "
                                  "(or empty) in the server's environment")
            if parts.scheme == "http" and not is_loopback(parts.hostname) and not allow_insecure:
                raise RemoteError(
                    f"refusing to send the API key over plain http to {parts.hostname}: use "
                    "https, or allowInsecure (--allow-insecure) on a network you trust")
        path = parts.path.rstrip("/")
        if not path.endswith("/v1"):
            path += "/v1"
        return cls(f"{parts.scheme}://{parts.netloc}{path}", api_key, connect_timeout_s, read_timeout_s)

    @property
    def root(self) -> str:
        """The server's own paths (/tokenize, /infill) hang off the URL without /v1."""
        return self.base[:-len("/v1")]

    def describe(self) -> str:
        return self.base


class Connection:
    """One HTTP request and its answer on a fresh connection. `close()` may be called from any
    thread: it shuts the socket, so a read blocked in another thread returns at once."""

    def __init__(self, endpoint: Endpoint, url: str):
        self.endpoint = endpoint
        parts = urlsplit(url)
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        self.conn = cls(parts.hostname, parts.port, timeout=endpoint.connect_timeout_s, **kwargs)
        self._closed = threading.Event()
        self.connected = False  # the TCP (and TLS) connection was made

    def open(self, method: str, body: dict | None) -> http.client.HTTPResponse:
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "draftline"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        self.conn.connect()
        self.connected = True
        self.conn.sock.settimeout(self.endpoint.read_timeout_s)
        self.conn.request(method, self.path, body=data, headers=headers)
        return self.conn.getresponse()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


def _wait_or_cancel(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.wait(seconds):
        raise Cancelled
    if cancel is None:
        time.sleep(seconds)


def _error_detail(resp: http.client.HTTPResponse) -> str:
    """The server's own words about an error, shortened: {"error": {"message"}} (OpenAI),
    {"detail"} (FastAPI), {"message"}, or the start of the body."""
    try:
        raw = resp.read(4096).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""
    try:
        body = json.loads(raw)
    except ValueError:
        return " ".join(raw.split())[:200]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            for key in ("message", "detail", "error"):
                if isinstance(err.get(key), str):
                    return err[key][:200]
        if isinstance(body.get("detail"), (str, list)):
            return str(body["detail"])[:200]
        if isinstance(err, str):
            return err[:200]
    return " ".join(raw.split())[:200]


def http_error(endpoint: Endpoint, path: str, status: int, detail: str) -> RemoteError:
    where = f"{endpoint.root}{path}"
    said = f": {detail}" if detail else ""
    if status in (401, 403):
        hint = " (set the key's variable with apiKeyEnv / --api-key-env)" if not endpoint.api_key else \
            " (the API key was refused)"
        return RemoteError(f"{where} answered {status} unauthorized{hint}{said}")
    if status == 404:
        return RemoteError(f"{where} answered 404 not found: is {endpoint.base} an OpenAI-compatible "
                           f"server's /v1 URL?{said}")
    return RemoteError(f"{where} answered HTTP {status}{said}")


def request(endpoint: Endpoint, method: str, url: str, body: dict | None = None,
            cancel: threading.Event | None = None, opened=None) -> tuple[Connection, http.client.HTTPResponse]:
    """Send one request; retry connection errors only. Returns the open connection and a
    2xx response; raises RemoteError for anything else (Cancelled when `cancel` is set).
    `opened(connection)` is called with each connection before it is used, so that another
    thread can close it (a cancel while the server is still prefilling)."""
    path = url[len(endpoint.root):]
    for attempt in range(RETRIES + 1):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        conn = Connection(endpoint, url)
        if opened is not None:
            opened(conn)
        try:
            resp = conn.open(method, body)
        except OSError as exc:  # refused, reset, unknown host, timeouts (TimeoutError is one)
            conn.close()
            if cancel is not None and cancel.is_set():
                raise Cancelled from None
            if isinstance(exc, socket.timeout) and conn.connected:
                # Connected and sent, but no answer within the read timeout: not retried
                # (the server may be working on it).
                raise RemoteError(f"{endpoint.root}{path} did not answer within "
                                  f"{endpoint.read_timeout_s:g} s (readTimeoutS)") from None
            if attempt == RETRIES:
                raise RemoteError(f"cannot reach {endpoint.root}{path}: {_reason(exc)} "
                                  f"({RETRIES + 1} attempts)") from None
            _wait_or_cancel(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)], cancel)
            continue
        except http.client.HTTPException as exc:  # something answered, but not HTTP
            conn.close()
            if cancel is not None and cancel.is_set():
                raise Cancelled from None
            raise RemoteError(f"{endpoint.root}{path} did not answer HTTP ({type(exc).__name__})") from None
        if 200 <= resp.status < 300:
            return conn, resp
        detail = _error_detail(resp)
        conn.close()
        raise http_error(endpoint, path, resp.status, detail)
    raise AssertionError("unreachable")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "connection timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return exc.strerror or type(exc).__name__ if isinstance(exc, OSError) else str(exc)


def get_json(endpoint: Endpoint, url: str, body: dict | None = None,
             cancel: threading.Event | None = None) -> object:
    """A whole JSON answer (GET without a body, POST with one)."""
    conn, resp = request(endpoint, "POST" if body is not None else "GET", url, body, cancel)
    try:
        raw = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise RemoteError(f"{url}: the answer was cut off ({_reason(exc)})") from None
    finally:
        conn.close()
    try:
        return json.loads(raw)
    except ValueError:
        raise RemoteError(f"{url} did not answer JSON: {' '.join(raw[:120].decode('utf-8', 'replace').split())!r}") from None


@dataclass
class Chunk:
    text: str
    finish_reason: str | None = None
    completion_tokens: int | None = None  # the server's usage count, when it reports one


def _chunk(url: str, data: object) -> Chunk:
    """One completion object (streamed or whole) -> its text, finish reason and usage."""
    try:
        usage = data.get("usage") or {}
        choices = data["choices"]
        if not choices:  # a usage-only chunk (stream_options.include_usage)
            return Chunk("", None, usage.get("completion_tokens"))
        choice = choices[0]
        text = choice["text"]
        if not isinstance(text, str):
            raise TypeError
        return Chunk(text, choice.get("finish_reason"), usage.get("completion_tokens"))
    except (AttributeError, KeyError, IndexError, TypeError):
        raise RemoteError(f"{url}: malformed completion (no choices[0].text): "
                          f"{json.dumps(data)[:120]}") from None


def stream_completion(endpoint: Endpoint, body: dict, cancel: threading.Event | None,
                      max_events: int) -> Iterator[Chunk]:
    """The completion's chunks as they arrive (server-sent events). Closing the generator, or
    setting `cancel`, closes the connection at once, so the server stops generating. More than
    `max_events` events (a stream that does not end at max_tokens) is an error."""
    url = endpoint.base + "/completions"
    done, current = threading.Event(), []

    def watch() -> None:  # the worker may be blocked in recv: shut the socket under it
        while not done.is_set():
            if cancel.wait(CANCEL_POLL_S):
                for c in current:
                    c.close()
                return

    if cancel is not None:
        threading.Thread(target=watch, daemon=True, name="draftline-remote-cancel").start()
    try:
        conn, resp = request(endpoint, "POST", url, dict(body, stream=True), cancel, current.append)
    except BaseException:
        done.set()
        raise
    try:
        if "text/event-stream" in (resp.getheader("Content-Type") or ""):
            yield from _events(url, endpoint, conn, resp, max_events)
        else:  # a server that ignores `stream` answers one JSON object
            yield from _whole_answer(url, conn, resp)
    finally:
        done.set()
        conn.close()


def _whole_answer(url: str, conn, resp) -> Iterator[Chunk]:
    """The one chunk of an answer that is a single JSON object (none if we closed it)."""
    try:
        raw = resp.read()
    except (OSError, http.client.HTTPException, AttributeError) as exc:
        if conn.closed:
            return
        raise RemoteError(f"{url}: the answer broke off ({_reason(exc)})") from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise RemoteError(f"{url}: expected a stream of events or JSON, got "
                          f"{' '.join(raw[:120].decode('utf-8', 'replace').split())!r}") from None
    yield _chunk(url, data)


def _events(url: str, endpoint: Endpoint, conn, resp, max_events: int) -> Iterator[Chunk]:
    """The chunks of a stream of server-sent events, up to [DONE] (or until we close it)."""
    events = 0
    while True:
        try:
            line = resp.readline()
        except TimeoutError:  # socket.timeout; never let it pass as the server's budget timeout
            raise RemoteError(f"{url}: no data for {endpoint.read_timeout_s:g} s mid-stream "
                              "(readTimeoutS)") from None
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
            # AttributeError: http.client reading a response whose connection another
            # thread (the cancel watcher) has just closed.
            if conn.closed:
                return  # cancelled: we closed it
            raise RemoteError(f"{url}: the stream broke off ({_reason(exc)})") from None
        if not line:
            if conn.closed:
                return
            raise RemoteError(f"{url}: the stream ended without [DONE] (server stopped?)")
        line = line.strip()
        if not line:
            continue
        events += 1
        if events > max_events:
            raise RemoteError(f"{url}: the stream did not end after {max_events} events "
                              "(the server ignores max_tokens?); closed it")
        if not line.startswith(b"data:"):
            continue  # comments (": ping"), event names, ids
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError:
            raise RemoteError(f"{url}: malformed event in the stream: "
                              f"{payload[:120].decode('utf-8', 'replace')!r}") from None
        if isinstance(data, dict) and "error" in data and "choices" not in data:
            err = data["error"]
            raise RemoteError(f"{url}: the server reported an error mid-stream: "
                              f"{(err.get('message') if isinstance(err, dict) else err)!s:.200}")
        yield _chunk(url, data)
