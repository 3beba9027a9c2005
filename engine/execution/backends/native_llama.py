"""A mapped GGUF computed by the native decoder (engine/execution/native/), with no torch at all.

The weights are the file's own blocks where it is mapped (engine/loading/formats/gguf_mapped.py), the KV
cache is bf16 in numpy arrays, and every pass (prefill, decoding, verification of a chain or a
token tree) is one C call. Nothing here imports torch, so a model that runs this way starts
1.2-1.5 s sooner than through the torch backend (engine/execution/backends/torch_llama.py), which runs
everything else: Hugging Face folders, GPUs, and machines where the decoder does not build.
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from engine.execution.backends.base import ArrayCache, Capabilities, common_prefix, pass_positions
from engine.errors import EngineError
from engine.execution.plan import STORED
from engine.loading.formats.gguf_blocks import BlockMatrix, BlockStack
from engine.execution.native import NativeDecoder, Stopped, load_library
from engine.loading.weights import LoadedWeights


class _Stopped(Exception):
    """A pass that `prefill_pass`'s cancel stopped: nothing was appended."""


@dataclass(frozen=True)
class _Partial:
    """A prefill pass a cancel stopped at cache position `start`: `tokens`' keys and values are
    written in its first `stopped.layers` layers, and `stopped.residual` is their stream after
    them. A prefill that starts with some of these tokens there goes on from that layer."""
    start: int
    tokens: tuple[int, ...]
    stopped: Stopped

    def after(self, n: int) -> _Partial | None:
        """The part past its first `n` tokens (None if none): each token depends only on those
        before it, so the rest stays valid once the first `n` are done."""
        if n >= len(self.tokens):
            return None
        return _Partial(self.start + n, self.tokens[n:], Stopped(self.stopped.layers, self.stopped.residual[n:]))


@dataclass
class _Layer:
    """One layer's tensors, which NativeDecoder describes to decoder.c (engine/execution/native/__init__.py)."""
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    bqkv: np.ndarray | None
    wqkv: BlockStack
    wo: BlockMatrix
    w_gate_up: BlockStack
    w_down: BlockMatrix


class NativeLlama(ArrayCache):
    quant = "gguf"  # the weights format, as `--dtype` names it

    def __init__(self, weights: LoadedWeights, max_len: int = 4096):
        """Raises EngineError where the decoder does not compute this model or cannot run here
        (engine/loading/formats/gguf_mapped.py `runs_mapped` says so beforehand)."""
        super().__init__()
        c = self.config = weights.config
        t = weights.tensors
        self.vocab_size = c.vocab_size
        # Within a sliding window every position sees all earlier ones, so capping the context
        # at the window computes exactly what the windowed model does.
        self.max_len = min(max_len, c.max_position, c.sliding_window or max_len)
        self.threads = len(os.sched_getaffinity(0))  # where the plan does not say
        self.embed = t["embed"]
        self.head = self.embed if c.tie_embeddings else t["lm_head"]
        self.norm = t["norm"]
        self.head_rows: np.ndarray | None = None  # the token ids `head` keeps (None: a prefix of all)
        self._all_rows = self.head

        def biases(p: str) -> np.ndarray | None:
            parts = [t.get(p + b) for b in ("bq", "bk", "bv")]
            return np.concatenate(parts) if all(b is not None for b in parts) else None

        self.layers = [_Layer(t[f"layers.{i}.attn_norm"], t[f"layers.{i}.ffn_norm"], biases(f"layers.{i}."),
                              BlockMatrix.cat([t[f"layers.{i}.{m}"] for m in ("wq", "wk", "wv")]),
                              t[f"layers.{i}.wo"],
                              BlockMatrix.cat([t[f"layers.{i}.w_gate"], t[f"layers.{i}.w_up"]]),
                              t[f"layers.{i}.w_down"])
                       for i in range(c.n_layers)]
        shape = (c.n_layers, c.n_kv_heads, self.max_len, c.head_dim)
        # bf16 bits; empty, not zeros: only positions written are read, and untouched pages cost
        # no memory
        self.k_cache = np.empty(shape, dtype=np.uint16)
        self.v_cache = np.empty(shape, dtype=np.uint16)
        self.rotary_pairs = weights.rotary_pairs
        # The final normed hidden state of every cached position, once `record_features` is
        # called: a feature-conditioned draft (engine/drafters/feature_draft.py) reads them.
        self.features: np.ndarray | None = None
        lib = load_library()
        if lib is None or not NativeDecoder.supports(self):
            raise EngineError(f"{weights.source}: the native decoder cannot compute this model here")
        self.native = NativeDecoder(lib, self)
        # Per KV cache: the prefill pass a cancel stopped there, while nothing else has run in it.
        self._partials: dict[int, _Partial] = {}

    @cached_property  # fixed once loaded; read every request
    def capabilities(self) -> Capabilities:
        """Token trees, thread counts per pass width, every pass one C call in the stored format."""
        return Capabilities(tree=True, kernels=(STORED,), threads=True, native=True,
                            tile_from=self.native.tiles_from(), caches=4)

    def _cache_moved(self) -> None:
        self.native.point_at_cache(self)

    def cost_key(self) -> str:
        return f"NativeLlama-gguf-{self.native.build}{'-repacked' if self.native.repacked.nbytes else ''}"

    def set_threads(self, n: int) -> None:
        """The thread count of passes the plan does not give one."""
        self.threads = n

    @property
    def weight_bytes(self) -> int:
        """Bytes read from memory per pass (for the achieved-bandwidth figure): the head (the
        embedding itself where tied) and every layer; an untied embedding is only looked up."""
        return sum(w.nbytes for w in self._read_every_pass())

    def _read_every_pass(self) -> list:
        return [self.head, self.norm] + [w for layer in self.layers for w in vars(layer).values() if w is not None]

    def memory(self, counted: set[int] | None = None) -> dict[str, int]:
        """Bytes by use, as TorchLlama.memory: the file's pages (weights_mapped), copies of
        chosen rows, matrices repacked at load (native/repack.py) and the float32 vectors
        (weights_held), the KV cache and scratch (rotary tables, the largest pass's buffers,
        recorded features)."""
        counted = set() if counted is None else counted
        tensors = {id(w): w for w in [self.embed, self._all_rows] + self._read_every_pass() if id(w) not in counted}
        counted.update(tensors)
        blocks = [p for w in tensors.values() for p in (w.parts if isinstance(w, BlockStack) else [w])
                  if isinstance(p, BlockMatrix)]
        vectors = sum(w.nbytes for w in tensors.values() if isinstance(w, np.ndarray))
        scratch = self.native.own_bytes + self.native.scratch_bytes
        scratch += 0 if self.features is None else self.features.nbytes
        repacked = self.native.repacked
        mapped = [p for p in blocks if p.mapped and not repacked.holds(p.data)]
        return {"weights_mapped": sum(p.nbytes for p in mapped),
                "weights_held": sum(p.nbytes for p in blocks if not p.mapped) + vectors + repacked.nbytes,
                "copies": 0, "kv_cache": self.kv_cache_bytes(), "scratch": scratch}

    def record_features(self) -> None:
        """Keep the final normed hidden state (float32) of each cached position in `features`."""
        if self.features is None:
            self.features = np.zeros((self.max_len, self.config.hidden_size), dtype=np.float32)

    def embed_tokens(self, ids: Sequence[int]) -> np.ndarray:
        """float32 input vectors [n, hidden] (what a feature draft concatenates them with)."""
        return self.native.embed(self.embed, ids)

    def prefill_pass(self, tokens: Sequence[int], cancel: threading.Event | None) -> bool:
        """One prefill pass, which `cancel` stops after the layer in flight (15-80 ms for the
        1.5B on two cores, where waiting for the chunk took up to CANCEL_WAIT_S): the C code
        reads a flag that a watcher sets from the event. Nothing is appended then, but the
        layers done are kept: the next prefill pass in this cache that starts with these
        tokens goes on from there (a request whose prompt shares the start of an idle prefill
        it cancelled, or that prefill resumed after the request ran in another cache)."""
        if cancel is None:
            self.forward(tokens, logits=False)
            return True
        stop, done = ctypes.c_int(int(cancel.is_set())), threading.Event()

        def watch() -> None:
            while not done.is_set():
                if cancel.wait(0.02):
                    stop.value = 1
                    return

        watcher = threading.Thread(target=watch, name="draftline-cancel", daemon=True)
        watcher.start()
        try:
            self._pass(tokens, None, False, stop)
            return True
        except _Stopped:
            return False
        finally:
            done.set()
            watcher.join()

    def resumable(self, cache: int) -> list[int]:
        partial = self._partials.get(cache)
        return list(partial.tokens) if partial is not None and partial.start == len(self.tokens_in(cache)) else []

    def forward(self, tokens: Sequence[int], parents: Sequence[int] | None = None,
                logits: bool = True) -> np.ndarray | None:
        return self._pass(tokens, parents, logits, None)

    def _pass(self, tokens: Sequence[int], parents: Sequence[int] | None, logits: bool,
              stop: ctypes.c_int | None) -> np.ndarray | None:
        n, start = len(tokens), self.length
        if n == 0:
            raise ValueError("forward needs at least one token")
        if start + n > self.max_len:
            raise EngineError(f"context full: {start + n} tokens > cache of {self.max_len}")
        # Any pass in this cache but the stopped one's continuation overwrites what it left.
        partial = self._partials.pop(self._cache, None)
        shared = 0 if partial is None or parents is not None or logits or partial.start != start \
            else common_prefix(partial.tokens, tokens)
        if 0 < shared < n:  # the stopped pass's tokens first, then the rest from the first layer
            self._partials[self._cache] = partial
            self._pass(tokens[:shared], None, False, stop)
            return self._pass(tokens[shared:], None, False, stop)
        pos, local = pass_positions(start, n, parents)
        threads = self.plan.threads_for(n) or self.threads
        x, first = self.native.embed(self.embed, tokens), 0
        if shared:
            x, first = partial.stopped.residual[:n], partial.stopped.layers
        ran = self.native.forward(x, start, pos, local, logits, threads, stop,
                                  states=self.features is not None, first_layer=first)
        if isinstance(ran, Stopped):
            self._partials[self._cache] = _Partial(start, tuple(tokens), ran)
            raise _Stopped
        if shared and (rest := partial.after(n)) is not None:
            self._partials[self._cache] = rest
        x, out = ran
        self.tokens.extend(tokens)
        if self.features is not None:
            self.features[start:start + n] = x
        if not logits:
            return None
        if self.head_rows is not None:
            full = np.full((n, self.vocab_size), -np.inf, dtype=np.float32)
            full[:, self.head_rows] = out
            return full
        missing = self.vocab_size - out.shape[-1]  # rows dropped by limit_vocab
        return np.pad(out, ((0, 0), (0, missing)), constant_values=-np.inf) if missing else out

    def keep_head_rows(self, ids: np.ndarray) -> bool:
        """The head becomes a copy of these rows (of those limit_vocab kept): a draft's 152k-row
        Q8_0 head was a third of the bytes its passes read."""
        ids = np.asarray(ids, dtype=np.int64)
        ids = ids[ids < self._all_rows.shape[0]]
        self.head, self.head_rows = self._all_rows.select(ids), ids
        self.native.set_head(self.head)
        return True

    def limit_vocab(self, real: int, width: int | None = None) -> None:
        """Tokens from `real` on (rows that pad the embedding past the tokenizer) get -inf
        logits, so they are never chosen; logits are `width` wide (default: unchanged), so a
        draft's logits line up with a target whose embedding is padded differently."""
        width = width or self.vocab_size
        keep = min(real, width)
        if self.head_rows is not None:
            raise EngineError("limit_vocab: this model's head already keeps chosen rows only")
        if keep < self.head.shape[0]:  # keep a prefix of the rows: a view, not a copy
            self.head = self._all_rows = self.head.prefix(keep)
            self.native.set_head(self.head)
        self.vocab_size = width
