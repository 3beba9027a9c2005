"""The workspace index sends source files to the drafter, never secrets or ignored files."""
import time
from pathlib import Path

from lsp_server.serving.workspace import MAX_BYTES, WorkspaceIndex


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
