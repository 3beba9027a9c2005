"""The tokenizer kept between runs: reading a GGUF's vocabulary with gguf-py takes seconds
(it builds an array view per token), loading a saved `tokenizer.json` takes milliseconds."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from engine.tokenizer import Tokenizer
from engine.user_cache import cache_dir, content_key, write_atomically

log = logging.getLogger("draftline")

FORMAT = 1


def _paths(model: Path) -> tuple[Path, Path]:
    base = cache_dir("tokenizers") / f"{content_key(model)}-v{FORMAT}"
    return base.with_suffix(".json"), base.with_suffix(".ids.json")


def load(model: Path) -> Tokenizer | None:
    vocab, ids = _paths(model)
    if not (vocab.exists() and ids.exists()):
        return None
    try:
        meta = json.loads(ids.read_text())
        return Tokenizer(HFTokenizer.from_file(str(vocab)), set(meta["eos_ids"]))
    except Exception as exc:  # tokenizers raises plain Exception on a corrupt file
        log.warning("ignoring unreadable tokenizer cache %s (%s)", vocab, exc)
        return None


def save(tokenizer: Tokenizer, model: Path) -> None:
    vocab, ids = _paths(model)
    try:
        write_atomically(vocab, tokenizer.save)
        write_atomically(ids, lambda tmp: tmp.write_text(json.dumps({"eos_ids": sorted(tokenizer.eos_ids)})))
    except OSError as exc:
        log.warning("could not cache the tokenizer: %s", exc)
