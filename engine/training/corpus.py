"""The tokenized training corpus, cached in a work folder, and its seeded chunking."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from engine.tokenizer import Tokenizer
from engine.training.data import chunk_starts, stdlib_files, tokenize_files


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
    starts = chunk_starts(len(stream), chunk)
    starts = starts[np.random.default_rng(seed).permutation(len(starts))]
    return np.stack([stream[s:s + chunk] for s in starts])
