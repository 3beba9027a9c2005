"""A Tokenizer from a GGUF file's metadata (a full model or a vocab-only file); tensors are not read."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenizers import AddedToken
from tokenizers import Tokenizer as HFTokenizer

from engine.errors import ModelLoadError
from engine.tokenization.gguf_bpe import build as build_bpe
from engine.tokenization.gguf_spm import build as build_spm
from engine.loading.formats.gguf_header import read_header
from engine.tokenization.special_names import BY_KEY, END_OF_GENERATION
from engine.tokenization.tokenizer import FimTokens, Tokenizer

# tokenizer.ggml.model -> (builder, how its pieces spell text)
_MODELS: dict[str, tuple[Callable[[dict[str, Any], Path], tuple[HFTokenizer, bool]], str]] = {
    "gpt2": (build_bpe, "byte_level"),
    "llama": (build_spm, "sentencepiece"),
}
# gguf.TokenType
_UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED = 2, 3, 4, 5
_END_KEYS = ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep")
_OLD_KEYS = {"fim_pre": "prefix", "fim_suf": "suffix", "fim_mid": "middle"}  # before llama.cpp's fim_*


def load_gguf(path: Path) -> Tokenizer:
    meta = read_header(path).fields
    model = meta.get("tokenizer.ggml.model")
    if model not in _MODELS:
        raise ModelLoadError(f"{path}: tokenizer model {model!r} is not supported "
                             "(known: gpt2 = byte-level BPE, llama = SentencePiece)")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ModelLoadError(f"{path}: no tokenizer.ggml.tokens in the metadata")
    build, pieces = _MODELS[model]
    hf, family_adds_bos = build(meta, path)
    types = meta.get("tokenizer.ggml.token_type")
    types = [1] * len(tokens) if types is None else list(types)

    def token_id(key: str) -> int | None:
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        if value is None and key in _OLD_KEYS:
            value = meta.get(f"tokenizer.ggml.{_OLD_KEYS[key]}_token_id")
        return int(value) if value is not None and 0 <= int(value) < len(tokens) else None

    # llama.cpp makes tokens it finds by name control tokens, whatever the file says.
    named = {name for key, names in BY_KEY.items() if token_id(key) is None for name in names}
    for i, token in enumerate(tokens):
        if token in named or token in END_OF_GENERATION:
            types[i] = _CONTROL
    # As llama.cpp without parse_special: control text is never matched, user-defined text always.
    hf.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i, t in enumerate(types) if t in (_CONTROL, _UNKNOWN)])
    hf.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                   for i, t in enumerate(types) if t == _USER_DEFINED])

    ends = {i for key in _END_KEYS if (i := token_id(key)) is not None}
    ends |= {i for i, token in enumerate(tokens) if token in END_OF_GENERATION}
    fim_ids = [token_id(key) for key in ("fim_pre", "fim_suf", "fim_mid")]
    fim = FimTokens(*fim_ids) if None not in fim_ids else None
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", family_adds_bos))
    # llama.cpp's converter pads the token list up to the embedding's rows with UNUSED
    # `[PAD{i}]` entries, which must never be generated.
    in_use = len(tokens)
    while in_use > 0 and types[in_use - 1] == _UNUSED:
        in_use -= 1
    return Tokenizer(hf, ends, fim=fim, bos_id=token_id("bos"), add_bos=add_bos, pieces=pieces,
                     tokens_in_use=in_use)
