"""Files kept between runs in the user's cache directory: models, converted weights, measurements.

The directory is $DRAFTLINE_CACHE_DIR, else $XDG_CACHE_HOME/draftline, else ~/.cache/draftline.
Every entry is written to a temporary file and renamed into place, so two processes writing
the same entry at once leave one whole file, and a reader never sees half of one.
"""
from __future__ import annotations

import hashlib
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path

_SAMPLE = 1 << 20  # bytes hashed at each sampled offset of a model file
_SAMPLES = 16


def cache_dir(kind: str) -> Path:
    root = os.environ.get("DRAFTLINE_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "draftline"
    path = Path(root) / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a fresh temporary file beside `path`, then rename it to `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def content_key(path: Path) -> str:
    """A key that changes when a model file's (or folder's) content changes: a hash of each
    file's size and of 1 MiB at 16 evenly spaced offsets (header, tensors and tail included).
    Hashing every byte of a 4 GB model would cost seconds at every start."""
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for file in files:
        size = file.stat().st_size
        h.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as f:
            for i in range(_SAMPLES):
                f.seek(max(0, size - _SAMPLE) * i // (_SAMPLES - 1))
                h.update(f.read(_SAMPLE))
    return h.hexdigest()


def machine_key(threads: int) -> str:
    """What makes a timing measured here valid elsewhere: processor, instruction sets, GPU,
    torch build, and the thread count."""
    from importlib.metadata import PackageNotFoundError, version

    from engine.execution.devices import gpu_name

    cpu = platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
        cpu = "\n".join(dict.fromkeys(lines))  # the first of each kind: all cores alike
    except OSError:
        pass
    try:
        torch = version("torch")  # not imported: a model the native decoder runs needs no torch
    except PackageNotFoundError:
        torch = ""
    text = f"{cpu}|{gpu_name()}|{torch}|{threads}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
