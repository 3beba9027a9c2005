"""What the language server asks of an engine: the local `Engine` (engine/engine.py) and the
remote one (engine/remote/) both offer it, so a suggestion takes one path whichever runs."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.engine import Completion
from engine.request import Request


class CompletionEngine(Protocol):
    tokenizer: object  # encode/with_bos/fim, as context.build_prompt uses them
    calibration: object | None  # local kernels' measurements (None: not measured here)
    dtype: str | None
    problem: str | None  # why it cannot serve now, e.g. its server is unreachable (None: it can)

    @property
    def max_len(self) -> int: ...  # the model's context, in tokens

    @property
    def documents(self) -> int: ...  # documents it holds for prompt lookup

    def set_document(self, doc_id: str, text: str) -> None: ...

    def remove_document(self, doc_id: str) -> None: ...

    def prefill_seconds(self, prompt: str | Sequence[int]) -> float: ...

    def prefill(self, tokens: Sequence[int], cancel=None) -> None: ...

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]: ...

    def complete(self, prompt: str | Sequence[int], request: Request = Request(),
                 mode: str = "lookup") -> Completion: ...
