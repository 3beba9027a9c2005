"""The engine's public face: load models once, complete text with any decoding mode."""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from engine.execution.backends.base import Backend, common_prefix
from engine.execution.calibrate import Calibration, keep, load_or_measure, measure_pass_costs
from engine.decoding import Vocabulary, generate_autoregressive, generate_speculative
from engine.draft_length import Acceptance, PassCosts
from engine.execution.plan import ExecutionPlan
from engine.drafters.base import ModelDrafter
from engine.drafters.draft_model import DraftModel
from engine.drafters.hybrid import Hybrid
from engine.drafters.lookup import HISTORY_CONTEXT, Lookup
from engine.errors import EngineError
from engine.healing import Healer
from engine.loading.catalog import DEFAULT
from engine.models import load_model, resolve, resolve_dtype
from engine.api import COMPLETION_CACHE, DEFAULT_MODE, EDIT_CACHE, MODES, Completion, Request
from engine.tokenization.tokenizer import Tokenizer
from engine.loading.user_cache import content_key, machine_key

# Completions' KV caches, where the backend keeps that many: the prompts of the last few spots
# (another file, another window of this one) stay cached, so going back to one prefills nothing.
COMPLETION_SLOTS = 3


class Engine:
    """A target model, optional draft model, and a lookup index over documents, the workspace
    and this process's outputs.

    `complete` is not reentrant: call it from one worker thread at a time. Documents may be
    set, and outputs remembered, from any thread."""

    K_MAX = 24  # widest pass whose cost is measured (draft_length.py extrapolates beyond)
    KEEP_COSTS_EVERY = 200  # timed passes between keeping the corrected pass costs
    MAX_NODES = 32  # most draft tokens in one verification pass
    problem: str | None = None  # why it cannot serve now (a local engine always can)

    def __init__(self, target: Backend, tokenizer: Tokenizer, draft: ModelDrafter | None = None,
                 max_nodes: int = MAX_NODES, pass_cost: list[float] | None = None, draft_cost: float = 0.0,
                 learn_costs: bool = False, timed_passes: Sequence[float] = ()):
        """pass_cost, draft_cost: seconds (engine/draft_length.py); with `learn_costs`, timed
        passes correct them (`timed_passes` had corrected them before)."""
        self.target = target
        self.tokenizer = tokenizer
        self.acceptance = Acceptance()  # how often each source's drafts are accepted: learnt
        fim = tokenizer.fim
        self.lookup = Lookup(self.acceptance, fim=(fim.suffix, fim.middle) if fim else None)
        self.draft = draft  # a draft model (mode "draft", and the model half of "hybrid")
        self.max_nodes = max_nodes
        self.costs = PassCosts(pass_cost, draft_cost, learn=learn_costs, timed=timed_passes)
        self.healer = Healer(tokenizer)
        self.vocabulary = Vocabulary(frozenset(tokenizer.eos_ids), tokenizer.decode, self.healer)
        self.calibration: Calibration | None = None  # set by `load`: kernels and pass costs
        self._calibration_key: str | None = None  # set by `load`: where the calibration is kept
        self._kept_costs = 0  # the pass costs' version last kept
        self.dtype: str | None = None  # set by `load`: the weights format it resolved to
        caches = target.capabilities.caches
        self._slots = [COMPLETION_CACHE, *range(EDIT_CACHE + 1, caches)][:COMPLETION_SLOTS]
        self._slot_used = dict.fromkeys(self._slots, 0)  # when each was last chosen (a count)

    @classmethod
    def load(cls, model: str = DEFAULT, draft: str | None = None, dtype: str | None = None,
             backend: str = "auto", threads: int | None = None, max_len: int = 4096,
             copy_budget: float = 0.25) -> Engine:
        """copy_budget: the most of the machine's available memory that resident bf16/fp32
        copies of the matrices may take, where the torch kernels run a model and a copy
        measured faster (the native decoder never makes one)."""
        max_threads = threads or len(os.sched_getaffinity(0))  # default: all cores this process may use
        dtype = resolve_dtype(dtype, model)
        target, tokenizer = load_model(model, dtype, backend, max_len, copy_budget)
        target.set_threads(max_threads)
        drafter = _load_drafter(draft, target, tokenizer, dtype, max_len)
        key = _calibration_key(model, target, max_threads)
        calibration = load_or_measure(target, cls.K_MAX + 1, max_threads, key)
        draft_cost = 0.0 if drafter is None else _draft_pass_cost(drafter.backend, max_threads)
        engine = cls(target, tokenizer, drafter, pass_cost=calibration.pass_cost, draft_cost=draft_cost,
                     learn_costs=True, timed_passes=calibration.timed_passes)
        engine.calibration, engine.dtype, engine._calibration_key = calibration, dtype, key
        engine.healer.allowed(" ")  # build the token-text tables now, not on the first request
        return engine

    @property
    def costs(self) -> PassCosts:
        """Seconds per target pass by width and per drafted token: how much drafting pays."""
        return self._costs

    @costs.setter
    def costs(self, costs: PassCosts) -> None:
        self._costs = costs
        self._drafters = {}
        if self.draft is not None:
            self.draft.tune(costs)

    @property
    def max_len(self) -> int:
        return self.target.max_len

    def memory(self) -> dict[str, int]:
        """Bytes by use (TorchLlama.memory: weights_mapped, weights_held, copies, kv_cache,
        scratch), the draft model's included; {} for a backend that does not say."""
        backends = [self.target] + ([self.draft.backend] if self.draft is not None else [])
        total: dict[str, int] = {}
        counted: set[int] = set()  # an embedded draft shares the target's embedding
        for backend in backends:
            for use, size in backend.memory(counted).items():
                total[use] = total.get(use, 0) + size
        return total

    @property
    def completion_caches(self) -> int:
        """Completions' prompts whose KV caches it keeps at once (the last spots')."""
        return len(self._slots)

    @property
    def documents(self) -> int:
        """Documents (open files and workspace files) in the lookup index."""
        return self.lookup.documents

    @property
    def modes(self) -> tuple[str, ...]:
        return MODES if self.draft else ("ar", "lookup", "hybrid")

    def describe(self) -> dict:
        """What runs here (engine/api.py): the target's backend and weights, the kernels this
        machine chose, the draft."""
        capabilities = self.target.capabilities
        return {"kind": "local", "dtype": self.dtype, "backend": type(self.target).__name__,
                "device": capabilities.device, "weight_bytes": self.target.weight_bytes,
                # the C decoder of quantized models (engine/execution/native/), where it runs
                "native_decoder": capabilities.native,
                "draft": type(self.draft).__name__ if self.draft else None,
                "calibration": self.calibration.as_dict() if self.calibration else None,
                # seconds per pass by width, as timed passes have corrected the calibration's
                "pass_cost": [round(c, 5) for c in self.costs.cost],
                # threads and kernel per pass width (engine/execution/plan.py), target then draft
                "execution_plan": [b.plan.describe()
                                   for b in [self.target] + ([self.draft.backend] if self.draft else [])]}

    def prefill_tokens_per_s(self) -> float:
        """This process's prefill rate once it has prefilled enough, else calibration's estimate."""
        measured = self.target.prefill_rate()
        if measured is not None:
            return measured
        return self.calibration.prefill_tokens_per_s if self.calibration else float("inf")

    # --- what lookup drafts from --------------------------------------------------------
    def set_document(self, doc_id: str, text: str, source: str = "document") -> None:
        """An open file (source "document") or a file of the workspace index ("workspace"),
        new or changed; the same id moves between them."""
        self.lookup.set_document(doc_id, self.tokenizer.encode(text), source)

    def remove_document(self, doc_id: str) -> None:
        self.lookup.remove_document(doc_id)

    def remember(self, text: str, before: str = "") -> None:
        """A suggestion shown or accepted in this process, and the text before it (a line or
        two is enough): later requests draft from it (source "history"), e.g. after an edit
        near it or in similar code."""
        lead = self.tokenizer.encode(before)[-HISTORY_CONTEXT:] if before else []
        self.lookup.remember(lead + self.tokenizer.encode(text))

    # --- completion -----------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> None:
        """Fill the caches for a prompt of token ids ahead of `complete` (which reuses them);
        with `cancel` set midway, they hold a prefix of it."""
        self._use_slot(tokens)
        self.target.sync(tokens[:-1], cancel)
        if cancel and cancel.is_set():
            return
        self.lookup.prefill(tokens)
        if self.draft is not None:
            self.draft.prefill(tokens)

    def forget_cache(self) -> None:
        """Empty the KV caches: the next request starts cold, as in a new process."""
        for cache in range(self.target.capabilities.caches):
            if self.target.tokens_in(cache):  # one never used keeps no arrays: none are made
                self.target.use_cache(cache)
                self.target.truncate(0)
        self.target.use_cache(COMPLETION_CACHE)
        if self.draft is not None:
            self.draft.reset()

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """The ids `complete` feeds the model for `prompt` (before healing): a text prompt gets
        the BOS the model expects."""
        if not isinstance(prompt, str):
            return list(prompt)
        tokens = self.tokenizer.encode(prompt)
        return self.tokenizer.with_bos(tokens) if self.tokenizer.add_bos else tokens

    def cached_tokens(self, prompt: str | Sequence[int]) -> int:
        """How many of the prompt's first tokens the KV cache it would run in holds now."""
        return self._slot_for(self.prompt_tokens(prompt))[1]

    def _slot_for(self, tokens: Sequence[int]) -> tuple[int, int]:
        """The completions' KV cache for a prompt, and how many of its first tokens it holds:
        the one that holds the most of it, where that is at least half of what it holds (the
        prompt goes on from a cached one; a cancelled prefill's part-done tokens count as
        held); else an empty one, else the one chosen longest ago.
        So a new spot's prompt does not evict the window of the spot before it."""
        kept = {slot: self.target.tokens_in(slot) + self.target.resumable(slot) for slot in self._slots}
        held = {slot: common_prefix(kept[slot], tokens) for slot in self._slots}
        going_on = [s for s in self._slots if held[s] and 2 * held[s] >= len(kept[s])]
        if going_on:
            slot = max(going_on, key=held.get)
        else:
            slot = min(self._slots, key=lambda s: (bool(kept[s]), self._slot_used[s]))
        return slot, held[slot]

    def _use_slot(self, tokens: Sequence[int]) -> None:
        slot = self._slot_for(tokens)[0]
        self._slot_used[slot] = max(self._slot_used.values()) + 1
        self.target.use_cache(slot)

    def prefill_seconds(self, prompt: str | Sequence[int]) -> float:
        """About how long `complete(prompt)` would spend prefilling, given what is cached."""
        return (len(self.prompt_tokens(prompt)) - self.cached_tokens(prompt)) / self.prefill_tokens_per_s()

    def complete(self, prompt: str | Sequence[int], request: Request = Request(),
                 mode: str = DEFAULT_MODE) -> Completion:
        """Continue `prompt` as `request` says, decoding in `mode`. Text prompts are
        token-healed unless request.heal is False, and get the BOS the model expects; token-id
        prompts are used as given."""
        if mode not in MODES:
            raise EngineError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
        if mode == "draft" and self.draft is None:
            raise EngineError("mode 'draft' needs a draft model (--draft)")
        tokens = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise EngineError("the prompt is empty")
        owed = ""
        if request.heal and isinstance(prompt, str):
            tokens, owed = self.healer.split(tokens)
        room = self.target.max_len - request.max_new_tokens - self.max_nodes - 2
        if room < 1:
            raise EngineError(f"max_new_tokens {request.max_new_tokens} does not fit the context")
        bos = isinstance(prompt, str) and self.tokenizer.add_bos
        tokens = tokens[max(0, len(tokens) - room + bos):]
        if bos:  # added after healing and trimming, so that neither removes it
            tokens = self.tokenizer.with_bos(tokens)
        # A next-edit prediction in its own cache where the backend keeps one; a completion in
        # the completions' cache that holds the most of its prompt.
        if request.cache == EDIT_CACHE and EDIT_CACHE < self.target.capabilities.caches:
            self.target.use_cache(EDIT_CACHE)
        else:
            self._use_slot(tokens)
        if mode == "ar":
            gen = generate_autoregressive(self.target, tokens, request, self.vocabulary, owed)
        else:
            gen = generate_speculative(self.target, self._drafter(mode), tokens, request,
                                       self.vocabulary, self.max_nodes, owed)
            self._keep_learned()
        return Completion(gen.text, gen.tokens, gen.stats)

    def measure_prefill(self, tokens: int = 320) -> None:
        """Prefill `tokens` tokens in the chunks a server's prefill uses (they grow to about half
        a second), and keep the last full chunk's rate with the calibration. `lsp_server fetch`
        runs this, so a first start sizes its first chunk and cold window from a real prefill
        rate, not from calibration's 25-token pass."""
        self.target.truncate(0)
        self.target.sync([0] * tokens, threading.Event())
        self.target.truncate(0)
        if (rate := self.target.last_chunk_rate) is not None and self._calibration_key is not None:
            self.calibration.prefill_tokens_per_s = rate
            self.target.set_prefill_estimate(rate)
            keep(self.calibration, self._calibration_key)

    def _keep_learned(self) -> None:
        """Now and then the corrected pass costs and this process's prefill rate replace the
        kept calibration's, so the next start begins from what passes and prefills really cost,
        not from a first start's estimate (its prefill rate comes from a 25-token pass: on AMX,
        about half what prefill chunks run at, which would halve the first cold window)."""
        if self._calibration_key is None or self.costs.version < self._kept_costs + self.KEEP_COSTS_EVERY:
            return
        self._kept_costs = self.costs.version
        self.calibration.pass_cost, self.calibration.timed_passes = list(self.costs.cost), self.costs.timed
        if (rate := self.target.prefill_rate()) is not None:
            self.calibration.prefill_tokens_per_s = rate
        keep(self.calibration, self._calibration_key)

    def _drafter(self, mode: str) -> Hybrid:
        """One per mode, kept: what it learns about the model's first tokens carries over."""
        if mode not in self._drafters:
            self._drafters[mode] = Hybrid(self.lookup if mode != "draft" else None,
                                          self.draft if mode != "lookup" else None,
                                          self.costs, self.acceptance, self.max_nodes,
                                          trees=self.target.capabilities.tree)
        return self._drafters[mode]


def _draft_pass_cost(draft: Backend, max_threads: int) -> float:
    """Seconds per one-token pass of the draft model, on the thread count it runs fastest
    with (kept for it): its shape is not the target's, so the target's choice may not suit it."""
    caps = draft.capabilities
    if not caps.threads:
        return measure_pass_costs(draft, 1)[1]
    # C passes need no cache behind them to be timed fairly (no kernel set-up to amortize)
    context = 0 if caps.native else None
    costs = {}
    for threads in sorted({1, max_threads}):
        draft.use_plan(ExecutionPlan(threads=[threads]), final=False)
        costs[threads] = (measure_pass_costs(draft, 1) if context is None
                          else measure_pass_costs(draft, 1, context=context))[1]
    # not final: a draft keeps every layout of its head, which `keep_head_rows` chooses rows from
    draft.use_plan(ExecutionPlan(threads=[min(costs, key=costs.get)]), final=False)
    return min(costs.values())


def _load_drafter(spec: str | None, target: Backend, tokenizer: Tokenizer, dtype: str | None,
                  max_len: int) -> ModelDrafter | None:
    if spec == "embedded":  # a trained layer reading the target's own features (torch)
        from engine.draft_loading import load_embedded_draft

        return load_embedded_draft(target)
    if not spec:
        return None
    backend, draft_tokenizer = load_model(spec, dtype, "torch", max_len)
    return pair_draft(target, tokenizer, backend, draft_tokenizer)


def pair_draft(target: Backend, tokenizer: Tokenizer, draft: Backend, draft_tokenizer: Tokenizer) -> DraftModel:
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
    """Measurements hold for this machine, model file, backend and weight format, C decoder
    build (a new kernel changes what passes cost) and cache size."""
    return f"{machine_key(threads)}-{content_key(resolve(model))}-{target.cost_key()}-{target.max_len}"
