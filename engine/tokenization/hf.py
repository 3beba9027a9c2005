"""A Tokenizer from a Hugging Face model folder: tokenizer.json as `tokenizers` loads it, with BOS
and end tokens from tokenizer_config.json, config.json and generation_config.json."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from engine.errors import ModelLoadError
from engine.tokenization.special_names import BY_KEY, END_OF_GENERATION
from engine.tokenization.tokenizer import Tokenizer


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


_NAMED = {name for names in BY_KEY.values() for name in names} | END_OF_GENERATION


def _looks_special(text: str) -> bool:
    """llama.cpp's conversion and loader make these control tokens even when tokenizer.json does
    not mark them special (Qwen2.5-Coder's FIM tokens): their text in a user's file stays text."""
    return text in _NAMED or any(text.startswith(a) and text.endswith(b)
                                 for a, b in (("<|", "|>"), ("<｜", "｜>")))


def _continuation_decoder(decoder: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decoder without its SentencePiece dummy-prefix removal: decode() renders
    continuations, whose leading space is real."""
    if decoder is None:
        return None
    if decoder.get("type") == "Metaspace":
        return {**decoder, "prepend_scheme": "never"}
    if decoder.get("type") == "Sequence":
        steps = [d for d in decoder["decoders"]
                 if not (d.get("type") == "Strip" and d.get("content") == " " and d.get("start") == 1)]
        return {**decoder, "decoders": [_continuation_decoder(d) for d in steps]}
    return decoder


def _pieces(decoder: dict[str, Any] | None) -> str | None:
    kinds = {d.get("type") for d in (decoder or {}).get("decoders", [decoder or {}])}
    if "ByteLevel" in kinds:
        return "byte_level"
    if kinds & {"Metaspace", "ByteFallback"}:
        return "sentencepiece"
    return None


def _template_bos(post_processor: dict[str, Any] | None) -> str | None:
    """The special token a TemplateProcessing (alone or in a Sequence, as Llama 3.1's) puts first."""
    for step in (post_processor or {}).get("processors", [post_processor or {}]):
        template = step.get("single") or []
        if step.get("type") == "TemplateProcessing" and template and "SpecialToken" in template[0]:
            return template[0]["SpecialToken"]["id"]
    return None


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _ids(value: Any) -> set[int]:
    return set(value) if isinstance(value, list) else ({value} if isinstance(value, int) else set())


def load_folder(folder: Path) -> Tokenizer:
    path = folder / "tokenizer.json"
    spec = _json(path)
    if "model" not in spec:
        raise ModelLoadError(f"{path}: missing or unreadable tokenizer")
    for token in spec.get("added_tokens", []):
        token["special"] = token.get("special", False) or _looks_special(token["content"])
    spec["decoder"] = _continuation_decoder(spec.get("decoder"))
    try:
        hf = HFTokenizer.from_str(json.dumps(spec))
    except Exception as exc:  # tokenizers raises plain Exception on a spec it cannot build
        raise ModelLoadError(f"{path}: unsupported tokenizer ({exc})") from exc
    config = _json(folder / "tokenizer_config.json")
    model_config = {**_json(folder / "config.json"), **_json(folder / "generation_config.json")}
    special = {t["content"]: t["id"] for t in spec.get("added_tokens", []) if t["special"]}

    eos = _ids(model_config.get("eos_token_id"))
    eos_name = _token_text(config.get("eos_token"))
    eos |= {i for name, i in special.items() if name in END_OF_GENERATION or name == eos_name}
    # BOS: the one tokenizer_config names, else the one the post-processor puts first.
    first = _template_bos(spec.get("post_processor"))
    bos_name = _token_text(config.get("bos_token")) or first
    bos_id = hf.token_to_id(bos_name) if bos_name else None
    add_bos = config.get("add_bos_token", first is not None and first == bos_name)
    return Tokenizer(hf, eos, bos_id=bos_id, add_bos=bool(add_bos), pieces=_pieces(spec["decoder"]))
