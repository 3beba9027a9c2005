"""The engine's public face: load models once, complete text with any decoding mode."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from engine.backends.base import Backend
from engine.backends.torch_llama import TorchLlama
from engine.calibrate import Calibration, load_or_measure, measure_pass_costs
from engine.decoding import Healing, StopRules, generate_autoregressive, generate_speculative
from engine.draft_loading import load_embedded_draft
from engine.drafters.base import ModelDrafter
from engine.drafters.draft_model import DraftModel
from engine.drafters.hybrid import Hybrid
from engine.drafters.prompt_lookup import PromptLookup
from engine.errors import EngineError
from engine.healing import Healer
from engine.models import EMBEDDED, load_model, resolve, resolve_dtype
from engine.sampling import Sampling
from engine.stats import Stats
from engine.tokenizer import Tokenizer
from engine.user_cache import content_key, machine_key

MODES = ("ar", "lookup", "draft", "hybrid")


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # stop strings; the text is cut before them
    # Called with the text so far; returns where to cut it to stop, or None to go on.
    stop_when: Callable[[str], int | None] | None = None
    on_prefilled: Callable[[], None] | None = None  # see decoding.StopRules


@dataclass
class Completion:
    text: str
    tokens: list[int]
    stats: Stats = field(default_factory=Stats)


def _first_cut(text: str, limits: Limits) -> int | None:
    cuts = [i for s in limits.stop if (i := text.find(s)) >= 0]
    if limits.stop_when is not None and (i := limits.stop_when(text)) is not None:
        cuts.append(i)
    return min(cuts) if cuts else None


class Engine:
    """A target model, optional draft model, and a prompt-lookup index over documents.

    `complete` is not reentrant: call it from one worker thread at a time. Documents may be
    set from any thread."""

    K_MAX = 12  # most draft tokens per branch

    def __init__(self, target: Backend, tokenizer: Tokenizer, draft: ModelDrafter | None = None,
                 k_max: int = K_MAX, pass_cost: list[float] | None = None, draft_cost: float = 0.0):
        self.target = target
        self.tokenizer = tokenizer
        self.lookup = PromptLookup()
        self.draft = draft  # a draft model (mode "draft", and the model half of "hybrid")
        self.k_max = k_max
        self.pass_cost = pass_cost  # seconds per target pass by width (draft_length.py)
        self.draft_cost = draft_cost  # seconds per token the draft model drafts
        self.healer = Healer(tokenizer)
        self.calibration: Calibration | None = None  # set by `load`: kernels and pass costs
        self.dtype: str | None = None  # set by `load`: the weights format it resolved to

    @classmethod
    def load(cls, model: str = EMBEDDED, draft: str | None = None, dtype: str | None = None,
             backend: str = "auto", threads: int | None = None, max_len: int = 4096) -> Engine:
        max_threads = set_threads(threads)
        dtype = resolve_dtype(dtype)
        target, tokenizer = load_model(model, dtype, backend, max_len)
        drafter = _load_drafter(draft, target, tokenizer, dtype, max_len)
        calibration = load_or_measure(target, cls.K_MAX + 1, max_threads,
                                      _calibration_key(model, target, max_threads))
        pass_cost = calibration.pass_cost
        draft_cost = 0.0
        if drafter is not None:
            if hasattr(target, "threads_by_width"):
                drafter.backend.threads_by_width = target.threads_by_width  # its passes are 1 token
            draft_cost = measure_pass_costs(drafter.backend, 1)[1]
            drafter.tune(pass_cost, draft_cost)
        engine = cls(target, tokenizer, drafter, pass_cost=pass_cost, draft_cost=draft_cost)
        engine.calibration, engine.dtype = calibration, dtype
        engine.healer.allowed(" ")  # build the token-text tables now, not on the first request
        return engine

    @property
    def modes(self) -> tuple[str, ...]:
        return MODES if self.draft else ("ar", "lookup", "hybrid")

    # --- documents for prompt lookup ------------------------------------------------------
    def set_document(self, doc_id: str, text: str) -> None:
        self.lookup.set_document(doc_id, self.tokenizer.encode(text))

    def remove_document(self, doc_id: str) -> None:
        self.lookup.remove_document(doc_id)

    # --- completion -----------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> None:
        """Fill the caches for a prompt of token ids ahead of `complete` (which reuses them);
        with `cancel` set midway, they hold a prefix of it."""
        self.target.sync(tokens[:-1], cancel)
        if self.draft is not None and not (cancel and cancel.is_set()):
            self.draft.prefill(tokens)

    def forget_cache(self) -> None:
        """Empty the KV caches: the next request starts cold, as in a new process."""
        self.target.truncate(0)
        if self.draft is not None:
            self.draft.reset()

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        return self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def prefill_seconds(self, prompt: str | Sequence[int]) -> float:
        """About how long `complete(prompt)` would spend prefilling, given what is cached."""
        tokens = self.prompt_tokens(prompt)
        cached = 0
        for a, b in zip(self.target.tokens, tokens):
            if a != b:
                break
            cached += 1
        rate = self.calibration.prefill_tokens_per_s if self.calibration else float("inf")
        return (len(tokens) - cached) / rate

    def complete(self, prompt: str | Sequence[int], *, mode: str = "lookup", limits: Limits = Limits(),
                 sampling: Sampling = Sampling(), cancel: threading.Event | None = None,
                 heal: bool = True) -> Completion:
        """Continue `prompt`. Text prompts are token-healed (see engine/healing.py) unless
        heal=False; token-id prompts are used as given."""
        if mode not in MODES:
            raise EngineError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
        if mode == "draft" and self.draft is None:
            raise EngineError("mode 'draft' needs a draft model (--draft)")
        tokens = self.prompt_tokens(prompt)
        if not tokens:
            raise EngineError("the prompt is empty")
        owed = ""
        if heal and isinstance(prompt, str):
            tokens, owed = self.healer.split(tokens)
        healing = Healing(self.healer, owed) if owed else None
        room = self.target.max_len - limits.max_new_tokens - self.k_max - 2
        if room < 1:
            raise EngineError(f"max_new_tokens {limits.max_new_tokens} does not fit the context")
        tokens = tokens[-room:]

        def decode(out: list[int]) -> str:  # the output without the healed prompt text
            return self.tokenizer.decode(out)[len(owed):]

        rules = StopRules(
            max_new_tokens=limits.max_new_tokens,
            eos_ids=frozenset(self.tokenizer.eos_ids),
            should_stop=(lambda out: _first_cut(decode(out), limits) is not None)
            if (limits.stop or limits.stop_when) else None,
            cancel=cancel,
            on_prefilled=limits.on_prefilled,
        )
        if mode == "ar":
            gen = generate_autoregressive(self.target, tokens, rules, sampling, healing)
        else:
            drafter = {"lookup": self.lookup, "draft": self.draft,
                       "hybrid": Hybrid(self.lookup, self.draft)}[mode]
            gen = generate_speculative(self.target, drafter, tokens, rules, sampling, self.k_max, healing,
                                       # In hybrid most drafts are lookup's, which cost nothing; the
                                       # model's own chains stop on its confidence (feature_draft.py).
                                       self.pass_cost, self.draft_cost if mode == "draft" else 0.0)
        text = decode(gen.tokens)
        cut = _first_cut(text, limits)
        return Completion(text if cut is None else text[:cut], gen.tokens, gen.stats)


def _load_drafter(spec: str | None, target: Backend, tokenizer: Tokenizer, dtype: str | None,
                  max_len: int) -> ModelDrafter | None:
    if spec == EMBEDDED:  # a trained layer reading the target's own features
        return load_embedded_draft(target)
    if not spec:
        return None
    backend, draft_tokenizer = load_model(spec, dtype, "torch", max_len)
    return pair_draft(target, tokenizer, backend, draft_tokenizer)


def pair_draft(target: Backend, tokenizer: Tokenizer, draft: TorchLlama, draft_tokenizer: Tokenizer) -> DraftModel:
    """A draft model for `target`, if both share a tokenizer.

    Embeddings are often padded to different row counts (Qwen2.5-Coder: 151936 rows at 0.5B,
    152064 at 7B, for the same 151665 tokens), so the tokens are compared, not the row counts.
    The draft's logits are made as wide as the target's, with -inf for ids it does not have."""
    shared = min(tokenizer.vocab_size, draft_tokenizer.vocab_size)
    for i in range(shared):
        if tokenizer.id_to_token(i) != draft_tokenizer.id_to_token(i):
            raise EngineError(
                f"the draft model's tokenizer differs from the target's (id {i} is "
                f"{draft_tokenizer.id_to_token(i)!r}, not {tokenizer.id_to_token(i)!r}): "
                "they must share a tokenizer")
    draft.limit_vocab(shared, target.vocab_size)
    return DraftModel(draft)


def _calibration_key(model: str, target: Backend, threads: int) -> str:
    """Measurements hold for this machine, model file, weight format and cache size."""
    kind = f"{type(target).__name__}-{getattr(target, 'dtype', '')}-int8={getattr(target, 'int8', False)}"
    return f"{machine_key(threads)}-{content_key(resolve(model))}-{kind}-{target.max_len}".replace("torch.", "")


def set_threads(threads: int | None) -> int:
    """Set torch's thread count on purpose (default: all cores this process may use)."""
    n = threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(n)
    return n
