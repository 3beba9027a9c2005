"""The workspace index sends source files to the drafter, never secrets or ignored files."""
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from pygls.uris import to_fs_path

from lsp_server.serving.workspace import LOWEST_PRIORITY, MAX_BYTES, WorkspaceIndex


def test_index_skips_secrets_ignored_binary_and_big_files_and_follows_changes(tmp_path: Path):
    (tmp_path / ".gitignore").write_text("build/\n*.log\n")
    files = {"src/app.py": "print('hi')\n", "build/out.py": "x = 1\n", "debug.log": "log\n",
             ".env.local": "TOKEN=1\n", "key.pem": "---\n", "id_rsa": "k\n", "a.key": "k\n",
             ".git/config": "[core]\n", "big.txt": "x" * (MAX_BYTES + 1)}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2")
    seen: dict[str, str] = {}
    index = WorkspaceIndex(tmp_path, seen.__setitem__, seen.pop)
    index.start()
    try:
        app = (tmp_path / "src/app.py").resolve().as_uri()
        for _ in range(100):
            if app in seen and index._observer is not None:
                break
            time.sleep(0.05)
        assert set(seen) == {(tmp_path / ".gitignore").resolve().as_uri(), app}
        (tmp_path / "src/new.py").write_text("y = 2\n")
        (tmp_path / "src/app.py").unlink()
        new = (tmp_path / "src/new.py").resolve().as_uri()
        for _ in range(100):
            if new in seen and app not in seen:
                break
            time.sleep(0.05)
        assert seen.get(new) == "y = 2\n" and app not in seen
    finally:
        index.stop()


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own priority is Linux's")
def test_the_index_is_fed_at_the_lowest_cpu_priority_the_requests_at_theirs(tmp_path: Path):
    """Indexing a workspace takes seconds of CPU as the first requests run, on the cores the
    model's passes use: its threads (the scan and the watcher's, which feed later changes) run
    at the lowest priority, and the process's other threads keep theirs."""
    (tmp_path / "a.py").write_text("x = 1\n")
    priorities: dict[str, int] = {}

    def on_set(uri: str, text: str) -> None:
        priorities[Path(to_fs_path(uri)).name] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    index = WorkspaceIndex(tmp_path, on_set, lambda uri: None)
    index.start()
    try:
        for _ in range(100):
            if "a.py" in priorities and index._observer is not None:
                break
            time.sleep(0.05)
        (tmp_path / "b.py").write_text("y = 2\n")
        for _ in range(100):
            if "b.py" in priorities:
                break
            time.sleep(0.05)
    finally:
        index.stop()
    assert priorities == {"a.py": LOWEST_PRIORITY, "b.py": LOWEST_PRIORITY}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < LOWEST_PRIORITY
