"""The target's tokenizer: rebuilt from GGUF metadata, or read from a `tokenizer.json`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from engine.errors import ModelLoadError

# Token texts that end a generation in the model families we load.
_END_TOKENS = ("<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<|file_sep|>")

# Fill-in-the-middle token triples (prefix, suffix, middle) of the families that have them.
_FIM_STYLES = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder / StarCoder2
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),  # CodeLlama
)

_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int


class Tokenizer:
    """Text <-> token ids, plus what generation needs: end tokens and FIM tokens."""

    def __init__(self, hf: HFTokenizer, eos_ids: set[int]):
        self._hf = hf
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)
        self.eos_ids = eos_ids | {i for t in _END_TOKENS if (i := hf.token_to_id(t)) is not None}
        self.fim = self._detect_fim()

    def _detect_fim(self) -> FimTokens | None:
        for style in _FIM_STYLES:
            ids = [self._hf.token_to_id(t) for t in style]
            if all(i is not None for i in ids):
                return FimTokens(*ids)
        return None

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def id_to_token(self, i: int) -> str | None:
        """The vocabulary entry of id `i` (None past the vocabulary)."""
        return self._hf.id_to_token(i)

    def decode(self, ids: list[int]) -> str:
        return self._hf.decode(ids, skip_special_tokens=True)

    def save(self, path: Path) -> None:
        """Write a Hugging Face `tokenizer.json` (e.g. to build a model folder for another backend)."""
        self._hf.save(str(path))

    @classmethod
    def from_gguf_metadata(cls, meta: dict, source: Path) -> Tokenizer:
        if meta.get("tokenizer.ggml.model") != "gpt2":
            raise ModelLoadError(
                f"{source}: tokenizer {meta.get('tokenizer.ggml.model')!r} is not supported "
                "(byte-level BPE GGUFs only)"
            )
        tokens = list(meta["tokenizer.ggml.tokens"])
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
        hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        # SmolLM/StarCoder-style pre-tokenization: digits one by one, then GPT-2 byte-level splits.
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
        hf.decoder = decoders.ByteLevel()
        types = list(meta.get("tokenizer.ggml.token_type") or [])
        special = [tokens[i] for i, t in enumerate(types) if t in (_GGUF_CONTROL, _GGUF_USER_DEFINED)]
        hf.add_special_tokens(special)
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return cls(hf, {int(eos)} if eos is not None else set())

    @classmethod
    def from_folder(cls, folder: Path) -> Tokenizer:
        path = folder / "tokenizer.json"
        try:
            hf = HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception on missing/corrupt files
            raise ModelLoadError(f"{path}: missing or unreadable tokenizer ({exc})") from exc
        eos: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            try:
                value = json.loads((folder / name).read_text()).get("eos_token_id")
            except (OSError, json.JSONDecodeError):
                continue
            eos |= set(value) if isinstance(value, list) else ({value} if value is not None else set())
        return cls(hf, eos)
