"""The target's tokenizer: text <-> token ids, plus what generation needs: end, FIM and BOS tokens.

Built by engine.tokenization.load_tokenizer from a GGUF's metadata or a tokenizer.json folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from engine.tokenization.special_names import BY_KEY
from engine.tokenization.token_texts import token_texts


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int


@dataclass(frozen=True)
class RepoTokens:
    """Qwen2.5-Coder's repository format: `<|repo_name|>name` then `<|file_sep|>path` before
    each file's text."""
    name: int
    file_sep: int


class Tokenizer:
    """Text <-> token ids, plus what generation needs: end tokens, FIM tokens and the BOS token.

    `pieces` says how a vocabulary entry spells its text ("byte_level" or "sentencepiece"), so
    token_texts() can map the whole vocabulary at once; None asks the decoder token by token."""

    def __init__(self, hf: HFTokenizer, eos_ids: set[int], *, fim: FimTokens | None = None,
                 bos_id: int | None = None, add_bos: bool = False, pieces: str | None = None,
                 tokens_in_use: int | None = None):
        self._hf = hf
        # "<|fim_prefix|>" typed in a user's file is text, not a control token (llama.cpp's
        # parse_special=false); user-defined tokens (not special) are still matched.
        hf.encode_special_tokens = True
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)
        # ids from here on are padding (never generated): a GGUF's trailing UNUSED entries
        self.tokens_in_use = self.vocab_size if tokens_in_use is None else tokens_in_use
        self.eos_ids = set(eos_ids)
        self.fim = fim or self._fim_by_name()
        self.repo = self._repo_by_name()
        self.bos_id = bos_id
        self.add_bos = add_bos and bos_id is not None
        self._pieces = pieces
        self._texts: list[str] | None = None
        # User-defined tokens stand for their text as written; the byte-level decoder would
        # misread DeepSeek-Coder's "ö" token as the byte 0xF6.
        self._literal = {i: t.content for i, t in hf.get_added_tokens_decoder().items() if not t.special}

    def _fim_by_name(self) -> FimTokens | None:
        ids = [next((i for name in BY_KEY[key] if (i := self._hf.token_to_id(name)) is not None), None)
               for key in ("fim_pre", "fim_suf", "fim_mid")]
        return FimTokens(*ids) if None not in ids else None

    def _repo_by_name(self) -> RepoTokens | None:
        ids = [self._hf.token_to_id(name) for name in ("<|repo_name|>", "<|file_sep|>")]
        return RepoTokens(*ids) if None not in ids else None

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text: no BOS, special-token text not parsed."""
        return self._hf.encode(text, add_special_tokens=False).ids

    def with_bos(self, ids: list[int]) -> list[int]:
        """A prompt as the model expects it: BOS first when the vocabulary asks for one."""
        return [self.bos_id, *ids] if self.add_bos else ids

    def id_to_token(self, i: int) -> str | None:
        """The vocabulary entry of id `i` (None past the vocabulary)."""
        return self._hf.id_to_token(i)

    def decode(self, ids: list[int]) -> str:
        """The text these ids contribute when continuing a sequence: control tokens skipped,
        user-defined tokens kept, and no SentencePiece dummy-prefix space removed."""
        if self._literal.keys().isdisjoint(ids):
            return self._hf.decode(ids, skip_special_tokens=True)
        out, run = [], []
        for i in ids:
            if i in self._literal:
                out += [self._hf.decode(run, skip_special_tokens=True), self._literal[i]]
                run = []
            else:
                run.append(i)
        return "".join(out) + self._hf.decode(run, skip_special_tokens=True)

    def token_texts(self) -> list[str]:
        """Each id's text in the middle of a sequence ("" for control tokens; U+FFFD for a lone
        piece of a multi-byte character). Computed once."""
        if self._texts is None:
            self._texts = token_texts(self._hf, self._pieces)
        return self._texts

    def save(self, path: Path) -> None:
        """Write a Hugging Face `tokenizer.json` (e.g. to build a model folder for another backend)."""
        self._hf.save(str(path))
