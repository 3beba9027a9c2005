"""The raw stdio stream: every byte the server writes to stdout is a framed JSON-RPC
message; unparsable params get an error response; requests before the model is ready get
an empty answer at once; shutdown/exit end the process cleanly."""
import json
import subprocess
import time
import sys

import pytest

pytestmark = pytest.mark.integration  # the server over stdio, as an editor starts it

URI = "file:///tmp/draftline-raw/a.py"


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_stream(data: bytes) -> list[dict]:
    """Strict framing: fails on any byte that is not part of a message."""
    messages = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        fields = dict(line.split(b": ", 1) for line in header.split(b"\r\n"))
        assert sep and set(fields) <= {b"Content-Length", b"Content-Type"}, data[:80]
        length = int(fields[b"Content-Length"])
        messages.append(json.loads(rest[:length]))
        data = rest[length:]
    return messages


def inline(msg_id, trigger_kind: int, line: int = 0) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion",
            "params": {"textDocument": {"uri": URI}, "position": {"line": line, "character": 17},
                       "context": {"triggerKind": trigger_kind}}}


def partial(msg_id, accepted_length: int) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand", "params": {
        "command": "draftline.didPartiallyAcceptCompletion",
        "arguments": [{"uri": URI, "text": "(n - 1)", "acceptedLength": accepted_length}]}}


def test_stdout_is_pure_protocol_and_bad_params_get_errors():
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": "def fibonacci(n):"}}},
        inline(2, 2),  # the model is still loading: an empty answer, not a hang
        inline(3, 0),  # triggerKind 0 does not exist: InvalidParams
        {"jsonrpc": "2.0", "id": 4, "method": "textDocument/inlineCompletion", "params": 5},
        inline(10, 2, line=-1),  # positions are unsigned in LSP: InvalidParams
        partial(7, 2), partial(8, 4), partial(9, -1),  # a second report of one suggestion: +2
        {"jsonrpc": "2.0", "id": 5, "method": "workspace/executeCommand",
         "params": {"command": "draftline.stats"}},  # still serving
        {"jsonrpc": "2.0", "id": 6, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    proc = subprocess.run([sys.executable, "-m", "lsp_server.cli", "--stdio", "--threads", "1", "--model", "smollm2-135m"],
                          input=b"".join(frame(m) for m in messages), capture_output=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    replies = {m["id"]: m for m in parse_stream(proc.stdout) if "id" in m}
    assert replies[1]["result"]["capabilities"]["inlineCompletionProvider"] is not None
    assert replies[2]["result"] is None
    assert replies[3]["error"]["code"] == -32602
    assert replies[4]["error"]["code"] == -32602
    assert replies[10]["error"]["code"] == -32602
    assert replies[5]["result"]["requests"] == 1  # the two malformed ones never ran
    assert replies[9]["error"]["code"] == -32602  # acceptedLength -1
    assert (replies[5]["result"]["partiallyAccepted"], replies[5]["result"]["acceptedChars"]) == (2, 4)
    assert replies[5]["result"]["accepted"] == 0  # partial accepts are not full ones
    assert replies[6]["result"] is None


def test_where_the_cursor_rests_on_a_fresh_start_is_prefilled_once_the_model_is_ready():
    """A file opened as the editor starts the server: the cursor's spot (draftline/cursor)
    arrives while the model loads; the window there is prefilled once it is ready."""
    from lsp_server.bench.lsp_client import Client

    client = Client([sys.executable, "-m", "lsp_server.cli", "--stdio", "--threads", "2",
                     "--model", "smollm2-135m", "--dtype", "fp32"])
    try:
        client.request(1, "initialize", {"capabilities": {}})
        client.notify("initialized", {})
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1,
            "text": "import math\n\n\ndef area(r):\n    return math.pi * r * r\n"}})
        client.notify("draftline/cursor", {"textDocument": {"uri": URI}, "position": {"line": 4, "character": 0}})
        stats = lambda i: client.request(i, "workspace/executeCommand", {"command": "draftline.stats"})["result"]  # noqa: E731
        assert stats(2)["state"] == "loading"  # the spot came before the model
        for i in range(3, 600):
            if (now := stats(i))["state"] == "ready" and now["prefetched"]:
                break
            time.sleep(0.1)
        assert now["prefetched"] == 1, now
    finally:
        client.close()
