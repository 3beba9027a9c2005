"""Training text: the CPython standard library on this machine (PSF licence), split by path hash.

Held-out files are chosen by a hash of their path relative to the library root, so the split
is fixed across machines and runs and needs no list to be shipped.
"""
from __future__ import annotations

import hashlib
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

from engine.tokenization.tokenizer import Tokenizer

HELD_OUT_PERCENT = 5
# Tests, third-party packages and generated tables are not the code people complete.
_SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "encodings"}
_MAX_FILE_BYTES = 200_000


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_held_out(relpath: str) -> bool:
    digest = hashlib.sha1(relpath.encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < HELD_OUT_PERCENT


def stdlib_files(root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """(training files, held-out files), each sorted by path."""
    root = root or stdlib_root()
    train: list[Path] = []
    held: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIP_PARTS & set(rel.parts) or path.stat().st_size > _MAX_FILE_BYTES:
            continue
        (held if is_held_out(rel.as_posix()) else train).append(path)
    return train, held


def tokenize_files(files: list[Path], tokenizer: Tokenizer, separator: int) -> np.ndarray:
    """All files' tokens in one int32 stream, each file followed by `separator`."""
    out: list[int] = []
    for path in files:
        out += tokenizer.encode(path.read_text(encoding="utf-8", errors="replace"))
        out.append(separator)
    return np.asarray(out, dtype=np.int32)


def frequent_tokens(stream: np.ndarray, n: int, always: set[int]) -> torch.Tensor:
    """The n most frequent token ids in `stream` (plus `always`), sorted: the draft's vocabulary."""
    counts = np.bincount(stream, minlength=int(stream.max()) + 1)
    counts[list(always)] = sys.maxsize // 2
    top = np.argsort(-counts, kind="stable")[:n]
    return torch.from_numpy(np.sort(top).astype(np.int64))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def corpus(work: Path, tokenizer: Tokenizer, separator: int) -> tuple[np.ndarray, np.ndarray]:
    """(training stream, held-out stream), tokenized once and cached in `work`."""
    cache = work / "tokens.npz"
    if cache.exists():
        data = np.load(cache, allow_pickle=False)
        return data["train"], data["held"]
    train_files, held_files = stdlib_files()
    log(f"tokenizing {len(train_files)} training and {len(held_files)} held-out files")
    train = tokenize_files(train_files, tokenizer, separator)
    held = tokenize_files(held_files, tokenizer, separator)
    np.savez(cache, train=train, held=held)
    return train, held


def shuffled_chunks(stream: np.ndarray, chunk: int, seed: int) -> np.ndarray:
    """Every non-overlapping chunk of `stream` [n, chunk], in a seeded random order."""
    starts = np.arange(0, len(stream) - chunk, chunk)
    starts = starts[np.random.default_rng(seed).permutation(len(starts))]
    return np.stack([stream[s:s + chunk] for s in starts])
