"""SentencePiece vocabularies from a GGUF (`tokenizer.ggml.model == "llama"`): Llama 2, CodeLlama,
Phi-3, Mistral v1, ...

llama.cpp tokenizes them by score-based BPE: adjacent pieces merge, highest-scoring result first,
while the result is a token; what is left falls back to <0xNN> byte tokens. A `tokenizers` BPE whose
merge ranks follow the scores of the merged tokens does the same.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers

from engine.errors import ModelLoadError

_NORMAL = 1  # gguf.TokenType.NORMAL: the only pieces merges may build (not <s>, <0x0A>, ...)


def _merges(tokens: list[str], scores: Any, types: Any) -> list[tuple[str, str]]:
    ids = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for i, token in enumerate(tokens):
        if types is not None and types[i] != _NORMAL:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                ranked.append((-float(scores[i]), ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def build(meta: dict[str, Any], path: Path) -> tuple[HFTokenizer, bool]:
    """The tokenizer, and True: SentencePiece models want a BOS when the GGUF does not say."""
    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise ModelLoadError(f"{path}: SentencePiece vocabulary without one score per token")
    types = meta.get("tokenizer.ggml.token_type")
    unk = int(meta.get("tokenizer.ggml.unknown_token_id", 0))
    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                merges=_merges(tokens, scores, types), byte_fallback=True,
                                unk_token=tokens[unk] if 0 <= unk < len(tokens) else None))
    steps = [normalizers.Replace(" ", "▁")]
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        steps.insert(0, normalizers.Prepend("▁"))
    hf.normalizer = normalizers.Sequence(steps)
    # No Strip of the dummy-prefix space: decode() renders continuations, which keep their space.
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return hf, True
