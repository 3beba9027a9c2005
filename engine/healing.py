"""Token healing: the prompt's last token is re-chosen by the model.

A prompt cut at the cursor often ends inside what the tokenizer would merge with the next word
("        " before "return"). Prompted with that token the model continues oddly (an extra
space). So the last token is removed, and generation is constrained to produce its text first:
each healing token must start with the remaining text, or be a prefix of it.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import cached_property

from engine.tokenization.tokenizer import Tokenizer


class Healer:
    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    @cached_property
    def _texts(self) -> list[str]:
        return self.tokenizer.token_texts()

    @cached_property
    def _by_first_char(self) -> dict[str, list[int]]:
        index: dict[str, list[int]] = defaultdict(list)
        for i, text in enumerate(self._texts):
            if text and text.isascii():
                index[text[0]].append(i)
        return index

    def split(self, tokens: Sequence[int]) -> tuple[list[int], str]:
        """The prompt without its last token, and that token's text (to be regenerated).
        Control tokens (BOS, FIM markers) have no text, so they are never removed."""
        if len(tokens) < 2:
            return list(tokens), ""
        text = self._texts[tokens[-1]]
        if not text.isascii() or not text or tokens[-1] in self.tokenizer.eos_ids:
            return list(tokens), ""
        return list(tokens[:-1]), text

    def allowed(self, required: str) -> list[int]:
        """Tokens that may come next while `required` text is still owed."""
        return [i for i in self._by_first_char.get(required[0], ())
                if self._texts[i].startswith(required) or required.startswith(self._texts[i])]

    def advance(self, required: str, token: int) -> str:
        """What is still owed after `token`."""
        text = self._texts[token]
        return required[len(text):] if required.startswith(text) else ""
