"""The engine's surface: what a caller asks of an engine and what it gets back.

Torch-free on purpose: the remote engine (engine/remote/), the language server and the
command line import only this, so a client of a shared server never loads the local stack.
The local `Engine` (engine/engine.py) and `RemoteEngine` both implement `CompletionEngine`.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.stats import Stats

# Decoding modes: ar (plain), lookup (prompt lookup drafts), draft (a draft model), hybrid (both).
MODES = ("ar", "lookup", "draft", "hybrid")
DEFAULT_MODE = "lookup"  # an engine that decodes elsewhere (a remote server) ignores the mode
# How long a remote engine waits to connect, and for each part of an answer (seconds).
CONNECT_TIMEOUT_S: float = 3
READ_TIMEOUT_S: float = 30
# Weights formats (engine/models.py maps them to torch dtypes); backends that run a model.
DTYPES = ("gguf", "int4", "int8", "bf16", "fp16", "fp32")
BACKENDS = ("auto", "torch", "exllamav2")
# Why a generation ended (Stats.stop_reason), the same for every engine.
STOP_REASONS = ("eos", "max_tokens", "stop", "cancelled")


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k cut
    top_p: float = 1.0
    seed: int | None = None  # None: a fresh random seed per generation

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


COMPLETION_CACHE, EDIT_CACHE = 0, 1  # Request.cache: the KV caches an engine may keep


@dataclass(frozen=True)
class Request:
    """One generation, from the engine's API down to the decoding loop (after exllamav2's
    ExLlamaV2DynamicJob): how much to write, when to stop, how to choose tokens, how to
    interrupt it."""
    # Most new tokens; an end-of-text token also ends the generation.
    max_new_tokens: int = 64
    # Called with the text written so far: the index to cut it at and stop (a stop string, the
    # end of a line, a block's end), or None to go on. The returned text is cut there.
    stop: Callable[[str], int | None] | None = None
    # Greedy by default; temperature/top-k/top-p sampling keeps the target's distribution.
    sampling: Sampling = field(default_factory=Sampling)
    # Set from another thread to stop between passes (and between prefill chunks).
    cancel: threading.Event | None = None
    # Called once the prompt is in the KV cache, before the first new token: a caller that
    # bounds decoding time (the server's time budget) starts its clock then.
    on_prefilled: Callable[[], None] | None = None
    # Re-choose a text prompt's last token (engine/healing.py); token-id prompts are never healed.
    heal: bool = True
    # Which KV cache it runs in, where the backend keeps more than one: next-edit predictions
    # run in their own (EDIT_CACHE), so the editor's completions find their prompt still cached.
    cache: int = 0


@dataclass
class Completion:
    text: str
    tokens: list[int]  # empty where the engine does not see token ids (a remote server)
    stats: Stats = field(default_factory=Stats)


class PromptTokenizer(Protocol):
    """What prompt assembly needs of a tokenizer (engine/tokenization/tokenizer.py, or a remote stand-in)."""
    fim: object | None  # FimTokens(prefix, suffix, middle) ids, or None without FIM
    repo: object | None  # RepoTokens(name, file_sep) ids of a repository format, or None
    add_bos: bool

    def encode(self, text: str) -> list: ...

    def decode(self, tokens: Sequence) -> str: ...

    def with_bos(self, tokens: list) -> list: ...


class CompletionEngine(Protocol):
    """What the language server, `complete` and `bench` ask of an engine."""
    tokenizer: PromptTokenizer
    problem: str | None  # why it cannot serve now, e.g. its server is unreachable (None: it can)
    modes: tuple[str, ...]  # decoding modes it offers

    @property
    def max_len(self) -> int: ...  # the model's context, in tokens

    @property
    def documents(self) -> int: ...  # documents it holds for prompt lookup

    @property
    def completion_caches(self) -> int: ...  # prompts whose KV it keeps at once, each in a cache

    def describe(self) -> dict:
        """What runs, for stats and reports: {"kind": "local"|"remote", "dtype", "backend",
        ...}; JSON-serialisable."""
        ...

    # An open file (source "document") or a workspace index file ("workspace"), new or changed.
    def set_document(self, doc_id: str, text: str, source: str = "document") -> None: ...

    def remove_document(self, doc_id: str) -> None: ...

    # A suggestion shown or accepted, with the text before it: later drafts may reuse it.
    def remember(self, text: str, before: str = "") -> None: ...

    def prefill_seconds(self, prompt: str | Sequence[int]) -> float:
        """About how long `complete(prompt)` would spend prefilling, given what is cached."""
        ...

    def prefill_tokens_per_s(self) -> float:
        """How many prompt tokens a second it prefills (inf where it cannot tell)."""
        ...

    def cached_tokens(self, prompt: str | Sequence[int]) -> int:
        """How many of the prompt's first tokens its KV cache holds now."""
        ...

    def prefill(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> None: ...

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list: ...

    def complete(self, prompt: str | Sequence[int], request: Request = Request(),
                 mode: str = DEFAULT_MODE) -> Completion: ...
