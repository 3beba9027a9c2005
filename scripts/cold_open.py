"""Cold-start measurement, as a user meets it: start `lsp_server --stdio`, open a file the
server has never seen, and ask for a suggestion at new spots in it. Reports the seconds from
process start to ready, and for each spot the time to the answer, the suggestion and the
line the file really has there.

A spot is a line of the file cut after its first "(" (else in its middle); the document sent
is the file with the rest of that line removed. `--pause` seconds pass between spots (the
server prefills the full window in the background once typing pauses). With `--rest S` the
line is first missing, the cursor rests on the line above for S seconds (the client sends
`draftline/cursor`, as both plugins do), then the line's start is written and the request comes.

  .venv/bin/python scripts/cold_open.py /usr/lib/python3.11/json/encoder.py --spots 200,120,300
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lsp_server.bench.lsp_client import Client, setting


def cut(line: str) -> int:
    return line.index("(") + 1 if "(" in line else len(line) // 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--spots", default="200", help="0-based lines, comma-separated")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between spots")
    ap.add_argument("--rest", type=float, help="seconds the cursor rests on the line above each spot first")
    ap.add_argument("--option", action="append", default=[], type=setting, metavar="KEY=JSON",
                    help="a server setting, e.g. --option dtype='\"bf16\"'")
    args = ap.parse_args()
    lines = args.file.read_text().split("\n")
    options = {"multiline": "never"} | dict(args.option)
    started = time.perf_counter()
    client = Client([sys.executable, "-m", "lsp_server.cli", "--stdio"])
    client.request(0, "initialize", {"capabilities": {}, "initializationOptions": options})
    client.send({"method": "initialized", "params": {}})
    uri = args.file.resolve().as_uri()
    msg_id = 1
    while client.request(msg_id, "workspace/executeCommand",
                         {"command": "draftline.stats"})["result"]["state"] == "loading":
        msg_id += 1
        time.sleep(0.05)
    report = {"ready_s": round(time.perf_counter() - started, 2), "spots": []}
    for version, spot in enumerate(int(s) for s in args.spots.split(",")):
        col = cut(lines[spot])
        text = "\n".join(lines[:spot] + [lines[spot][:col]] + lines[spot + 1:])
        texts = [text] if args.rest is None else ["\n".join(lines[:spot] + lines[spot + 1:]), text]
        for i, sent in enumerate(texts):
            if version == 0 and i == 0:
                client.send({"method": "textDocument/didOpen", "params": {"textDocument": {
                    "uri": uri, "languageId": "python", "version": 1, "text": sent}}})
            else:
                time.sleep(args.pause if i == 0 else 0)
                client.send({"method": "textDocument/didChange", "params": {
                    "textDocument": {"uri": uri, "version": 2 * version + i + 2},
                    "contentChanges": [{"text": sent}]}})
            if i == 0 and args.rest is not None:
                client.send({"method": "draftline/cursor", "params": {
                    "textDocument": {"uri": uri}, "position": {"line": spot - 1, "character": 0}}})
                time.sleep(args.rest)
        msg_id += 1
        asked = time.perf_counter()
        reply = client.request(msg_id, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": spot, "character": col},
            "context": {"triggerKind": 2}})
        items = (reply.get("result") or {}).get("items") or []
        report["spots"].append({
            "line": spot, "ms": round((time.perf_counter() - asked) * 1000),
            "suggestion": items[0]["insertText"][col:] if items else None,
            "real": lines[spot][col:]})
    msg_id += 1
    report["server"] = client.request(msg_id, "workspace/executeCommand",
                                      {"command": "draftline.stats"})["result"]
    client.request(msg_id + 1, "shutdown", {})
    client.send({"method": "exit"})
    client.proc.wait(30)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
