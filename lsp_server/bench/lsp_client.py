"""A minimal LSP client over stdio for bench's pause replay and the measuring scripts: raw
JSON-RPC frames, replies timestamped as they arrive, the server's status notifications kept."""
from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time


def setting(text: str) -> tuple[str, object]:
    """A `KEY=JSON` command-line server setting (argparse type), e.g. draft='"qwen2.5-coder-0.5b"'."""
    key, sep, value = text.partition("=")
    try:
        if not key or not sep:
            raise ValueError("no '='")
        return key, json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=JSON ({exc})") from None


class Client:
    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.replies: dict[int, tuple[float, dict]] = {}
        self.status: dict = {}  # the server's last draftline/status notification
        self.notifications: list[dict] = []  # the server's other notifications, until taken
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while header := out.readline():
            if header.startswith(b"Content-Length:"):
                length = int(header.split(b":")[1])
                while out.readline() not in (b"\r\n", b""):
                    pass
                message = json.loads(out.read(length))
                with self.cond:
                    if "id" in message:
                        self.replies[message["id"]] = (time.perf_counter(), message)
                    elif message.get("method") == "draftline/status":
                        self.status = message["params"]
                    elif "method" in message:
                        self.notifications.append(message)
                    self.cond.notify_all()

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def wait(self, msg_id: int, timeout: float = 300) -> dict:
        with self.cond:
            self.cond.wait_for(lambda: msg_id in self.replies, timeout)
        return self.replies[msg_id][1]

    def wait_any(self, timeout: float) -> None:
        """Wait until any message arrives, at most `timeout` seconds."""
        with self.cond:
            self.cond.wait(timeout)

    def take_notifications(self, method: str) -> list[dict]:
        """The params of the `method` notifications received since the last call, oldest first."""
        with self.cond:
            taken = [m.get("params") for m in self.notifications if m["method"] == method]
            self.notifications = [m for m in self.notifications if m["method"] != method]
        return taken

    def request(self, msg_id: int, method: str, params: dict, timeout: float = 300) -> dict:
        self.send({"id": msg_id, "method": method, "params": params})
        return self.wait(msg_id, timeout)

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def wait_status(self, states: tuple[str, ...], timeout: float = 600) -> dict:
        """The server's status once its state is one of `states`."""
        with self.cond:
            self.cond.wait_for(lambda: self.status.get("state") in states, timeout)
        return self.status

    def close(self) -> None:
        if self.proc.poll() is None:
            self.request(-1, "shutdown", None, timeout=30)
            self.notify("exit", None)
            self.proc.wait(30)
