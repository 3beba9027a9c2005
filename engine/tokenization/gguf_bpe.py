"""Byte-level BPE from a GGUF (`tokenizer.ggml.model == "gpt2"`): GPT-2, Llama 3, Qwen2, StarCoder,
DeepSeek, ... told apart by `tokenizer.ggml.pre` (see pretokenizers.py)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tokenizers import Regex
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from engine.errors import ModelLoadError
from engine.tokenization.pretokenizers import PRE_TOKENIZERS, PreTokenizer
from engine.tokenization.token_texts import BYTE_LEVEL_ALPHABET

log = logging.getLogger("draftline")


def _pre_tokenizer(meta: dict[str, Any], path: Path) -> PreTokenizer:
    name = meta.get("tokenizer.ggml.pre")
    if name is None:  # old conversions: llama.cpp falls back to its default splits, and warns
        log.warning("%s: no tokenizer.ggml.pre; using llama.cpp's default pre-tokenizer", path.name)
        name = "default"
    if name not in PRE_TOKENIZERS:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise ModelLoadError(f"{path}: unknown pre-tokenizer {name!r} (known: {known})")
    return PRE_TOKENIZERS[name]


def _missing_ascii(tokens: list[str]) -> list[str]:
    """A regex isolating the ASCII bytes the vocabulary lacks (Falcon's lacks the vertical tab and
    other control bytes). llama.cpp drops such a byte but never merges across it; `tokenizers` drops it
    before merging, so its neighbours would merge."""
    vocab = set(tokens)
    missing = [byte for byte in range(128) if BYTE_LEVEL_ALPHABET[byte] not in vocab]
    return ["[" + "".join(f"\\x{byte:02x}" for byte in missing) + "]"] if missing else []


def build(meta: dict[str, Any], path: Path) -> tuple[HFTokenizer, bool]:
    """The tokenizer, and whether its family wants a BOS when the GGUF does not say."""
    pre = _pre_tokenizer(meta, path)
    tokens = meta["tokenizer.ggml.tokens"]
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        raise ModelLoadError(f"{path}: byte-level BPE vocabulary without tokenizer.ggml.merges")
    # llama.cpp splits a merge at its first space after the first character.
    pairs = [(m[:i], m[i + 1:]) for m in merges if (i := m.find(" ", 1)) > 0]
    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=pairs,
                                ignore_merges=pre.ignore_merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated")
         for r in (*pre.regexes, *_missing_ascii(tokens))]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    return hf, pre.add_bos
