"""Latency replay: type a real file into `lsp_server --stdio` character by character, like
an editor (didChange + inlineCompletion per keystroke, single-line, model warm), and report
per-request latency and what the server did (generated / typed-through / cancelled).

  .venv/bin/python scripts/replay_typing.py engine/decoding.py --lines 40:70 --interval-ms 120

Against a server (docs/remote.md): --endpoint URL [--model NAME]; with --server-log FILE (a
llama.cpp / llama-cpp-python verbose log) it also counts the generations the server ran to their
end ("llama_perf_context_print: ... total time") and the streams it stopped because Draftline
closed them ("Disconnected from client", llama-cpp-python's stdout), per 100 keystrokes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from lsp_server.bench.lsp_client import Client


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--lines", default="40:60", help="0-based line range to type, a:b")
    ap.add_argument("--interval-ms", type=float, default=120, help="time between keystrokes")
    ap.add_argument("--sequential", action="store_true",
                    help="wait for each answer before the next keystroke (no cancellations)")
    ap.add_argument("--mode", default="lookup")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--endpoint", default=None, help="an OpenAI-compatible server (docs/remote.md)")
    ap.add_argument("--model", default=None, help="with --endpoint: the served model's name")
    ap.add_argument("--server-log", type=Path, nargs="*", default=[],
                    help="the server's log file(s), to count its finished and stopped generations")
    args = ap.parse_args()
    text = args.file.read_text()
    lines = text.split("\n")
    first, last = (int(x) for x in args.lines.split(":"))
    client = Client([sys.executable, "-m", "lsp_server.cli", "--stdio"])
    uri = args.file.resolve().as_uri()
    options = {"mode": args.mode, "dtype": args.dtype, "multiline": "never"}
    if args.endpoint:
        options |= {"endpoint": args.endpoint} | ({"model": args.model} if args.model else {})
    logged = lambda: [sum(_server_counts(p.read_text(errors="replace"))[i] for p in args.server_log)  # noqa: E731
                      for i in (0, 1)]
    client.send({"id": 0, "method": "initialize", "params": {"capabilities": {},
                 "initializationOptions": options}})
    client.wait(0)
    client.send({"method": "initialized", "params": {}})
    doc = "\n".join(lines[:first]) + "\n"
    client.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": doc}}})
    msg_id, version = 1, 1
    while True:  # wait for the model, then warm up once
        client.send({"id": msg_id, "method": "workspace/executeCommand",
                     "params": {"command": "draftline.stats"}})
        if client.wait(msg_id)["result"]["state"] == "ready":
            break
        msg_id += 1
        time.sleep(0.5)

    def request(line: int, col: int) -> int:
        nonlocal msg_id
        msg_id += 1
        client.send({"id": msg_id, "method": "textDocument/inlineCompletion", "params": {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
            "context": {"triggerKind": 2}}})
        return msg_id

    client.wait(request(first, 0))
    counted = logged()
    sent: dict[int, float] = {}
    for line in range(first, last):
        for col, ch in enumerate(lines[line] + "\n"):
            version += 1
            client.send({"method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": version}, "contentChanges": [{
                    "range": {"start": {"line": line, "character": col},
                              "end": {"line": line, "character": col}}, "text": ch}]}})
            if ch != "\n":
                sent[i := request(line, col + 1)] = time.perf_counter()
                if args.sequential:
                    client.wait(i)
            time.sleep(args.interval_ms / 1000)
    for i in sent:
        client.wait(i)
    latencies = sorted((client.replies[i][0] - t) * 1000 for i, t in sent.items())
    msg_id += 1
    client.send({"id": msg_id, "method": "workspace/executeCommand",
                 "params": {"command": "draftline.stats"}})
    stats = client.wait(msg_id)["result"]
    time.sleep(1.0)  # the server logs a stopped stream at its next token
    finished, stopped = (after - before for after, before in zip(logged(), counted))
    client.send({"id": msg_id + 1, "method": "shutdown"})
    client.wait(msg_id + 1)
    client.send({"method": "exit"})
    client.proc.wait(30)
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))]  # noqa: E731
    print(json.dumps({"keystrokes": len(latencies), "p50_ms_all": round(q(0.5), 1),
                      "p95_ms_all": round(q(0.95), 1),
                      "mean_ms_all": round(statistics.mean(latencies), 1),
                      "server": stats} | ({"remote_finished_per_100_keystrokes": round(
                          100 * finished / len(latencies), 1), "remote_stopped_per_100_keystrokes": round(
                          100 * stopped / len(latencies), 1)} if args.server_log else {}), indent=2))
    return 0


def _server_counts(log: str) -> tuple[int, int]:
    """(generations run to their end, streams stopped by the client) in a llama.cpp log."""
    finished = sum("llama_perf_context_print:" in line and "total time" in line for line in log.splitlines())
    return finished, log.count("Disconnected from client")


if __name__ == "__main__":
    sys.exit(main())
