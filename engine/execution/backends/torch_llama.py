"""A Llama-family decoder in plain torch with a preallocated KV cache.

Rotary embeddings (with rope scaling, engine/execution/rope.py), grouped-query attention, tied or untied
head; what differs between families (RMSNorm or LayerNorm, SwiGLU or GELU MLP, biases, q/k
norm) comes from engine/loading/architectures.py. Q/K/V and gate/up are fused into one matmul each:
on a CPU most of a one-token pass is per-op overhead. Runs on the CPU, or on CUDA when asked.
On a CPU the passes of an int4/int8 model run in C where they can (engine/execution/native/): this module
then holds the weights and the KV cache, and runs the other kernels' passes. A GGUF the C
decoder computes where the file is mapped runs without torch (engine/execution/backends/native_llama.py).
On CUDA the passes run on a KV cache of fixed size, one CUDA graph per pass width
(engine/execution/static_passes.py); elsewhere that path runs uncaptured when asked.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F

from engine.loading.architectures import FAMILIES
from engine.execution.backends.base import ArrayCache, Capabilities, pass_positions
from engine.errors import EngineError
from engine.execution.plan import STORED, ExecutionPlan
from engine.execution.pass_logits import TensorPasses
from engine.loading.formats.gguf_blocks import BlockMatrix, BlockStack
from engine.execution.kernels import (QUANTIZED, Int4Weight, Int8Weight, Weight, as_dtype, available_memory,
                                      compute_dtype, fuse, int8_product, linear, prefill_candidates, to_format,
                                      weight_nbytes)
from engine.execution.native import decoder_for
from engine.execution.rope import rope_tables
from engine.execution.static_passes import PassGraphs, PassInputs, StaticCache, attention_bias, cache_positions
from engine.loading.weights import LlamaConfig, LoadedWeights


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    wqkv: Weight
    bqkv: torch.Tensor | None
    wo: Weight
    ffn_norm: torch.Tensor
    w_gate_up: Weight  # gate and up stacked (SwiGLU), or up alone (GELU MLP)
    w_down: Weight
    # None where the family has no such tensor
    attn_norm_bias: torch.Tensor | None = None
    ffn_norm_bias: torch.Tensor | None = None
    bo: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    b_up: torch.Tensor | None = None
    b_down: torch.Tensor | None = None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, kind: str) -> torch.Tensor:
    """RMSNorm ("rms") or LayerNorm ("layer"), as the family's row in engine/loading/architectures.py says."""
    if kind == "rms":
        return rms_norm(x, weight, eps)
    return F.layer_norm(x, weight.shape, weight.to(x.dtype), None if bias is None else bias.to(x.dtype), eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _mapped(w: Weight) -> bool:
    parts = w.parts if isinstance(w, BlockStack) else [w]
    return all(isinstance(p, BlockMatrix) and p.mapped for p in parts)


_MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")
log = logging.getLogger("draftline")
# What a pass does with a layer's new keys and values [kv heads, n, head dim]: write them to
# the cache and return the keys and values the pass attends over.
CacheRows = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class TorchLlama(TensorPasses, ArrayCache):
    CACHES = 2  # KV caches it keeps (completions, next edits)

    def __init__(self, weights: LoadedWeights, dtype: torch.dtype = torch.bfloat16,
                 max_len: int = 4096, device: str = "cpu", head_rows: torch.Tensor | None = None,
                 quant: str | None = None, copy_budget: float = 0.25, static: StaticCache | bool | None = None):
        """head_rows: keep only these rows of the output head (a draft model's reduced
        vocabulary); the logits of every other token are -inf. quant: "int8" or "int4"
        weight-only matrices with bf16 activations (CPU only; engine/execution/kernels.py). A matrix
        already in a mapped GGUF's blocks (the embedded draft shares its target's) stays so,
        for the native decoder. copy_budget: the most of the machine's available memory
        (measured when a copy is made) that a resident copy of the matrices in another
        kernel's dtype may take (`use_plan`). static: run passes on a KV cache of fixed size
        (engine/execution/static_passes.py); None: on CUDA, with its defaults; False: never."""
        super().__init__()
        if quant == "gguf":
            raise EngineError("a mapped GGUF runs on the native backend (engine/execution/backends/native_llama.py)")
        c: LlamaConfig = weights.config
        self.config = c
        self.quant = quant
        self.dtype = torch.bfloat16 if quant else dtype
        self.device = torch.device(device)
        if quant and self.device.type != "cpu":
            raise EngineError(f"{quant} weights are a CPU mode; use bf16 or fp16 on a GPU")
        self.family = FAMILIES[c.family]
        self.vocab_size = c.vocab_size
        # Within a sliding window every position sees all earlier ones, so capping the context
        # at the window computes exactly what the windowed model does.
        self.max_len = min(max_len, c.max_position, c.sliding_window or max_len)
        # A plan's kernel other than STORED reads a resident copy of the matrices in its dtype
        # when it fits (copy_kernel names it), else dequantizes them per pass.
        self.copy_kernel: str | None = None
        self.copy_budget = copy_budget
        self._copy_layers: list[_Layer] | None = None
        self._copy_head: torch.Tensor | None = None
        # The final normed hidden state of every cached position, once `record_features` is
        # called: a feature-conditioned draft (engine/drafters/feature_draft.py) reads them.
        self.features: torch.Tensor | None = None
        self._load_tensors(weights.tensors, quant, head_rows)
        hd = c.head_dim
        if static is None:
            static = StaticCache() if self.device.type == "cuda" else False
        # The static-cache passes (`_static_pass`), bucketed by width; None: the cache's length sets each pass's shapes.
        self.graphs: PassGraphs | None = None
        if static:
            self._make_static(static)
        else:
            shape = (c.n_layers, c.n_kv_heads, self.max_len, hd)
            # empty, not zeros: only positions written are read, and untouched pages cost no memory
            self.k_cache = torch.empty(shape, dtype=self.dtype, device=self.device)
            self.v_cache = torch.empty(shape, dtype=self.dtype, device=self.device)
        cos, sin = rope_tables(self.max_len, hd, c.rope_theta, c.rope_scaling)
        self.cos = torch.from_numpy(cos).to(device=self.device, dtype=self.dtype)
        self.sin = torch.from_numpy(sin).to(device=self.device, dtype=self.dtype)
        self.rotary_pairs = weights.rotary_pairs  # only the native decoder rotates pairs
        # The passes of a quantized model run in C where they can (engine/execution/native/).
        on_cpu = self.device.type == "cpu" and self.dtype == torch.bfloat16
        self.native = decoder_for(self) if quant and on_cpu else None
        if self.native is None and self.rotary_pairs:
            raise EngineError("Q/K rows in llama.cpp's pair order need the native decoder")

    def _make_static(self, static: StaticCache) -> None:
        """Caches of fixed size, zeroed (a static pass attends over every row, masked, and a
        NaN in an unwritten row would survive the mask), as long as fits the free memory, with
        rows past max_len where padded and captured passes write."""
        if self.quant:
            raise EngineError("a static KV cache runs torch's float kernels, not int4/int8 weights")
        c = self.config
        slack = max(static.widths, default=0)
        free = static.free_bytes
        if free is None:
            free = torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else available_memory()
        per_position = 2 * c.n_layers * c.n_kv_heads * c.head_dim * self.dtype.itemsize * self.CACHES
        self.max_len = cache_positions(self.max_len, per_position, free, slack)
        shape = (c.n_layers, c.n_kv_heads, self.max_len + slack, c.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self._columns = torch.arange(shape[2], device=self.device)
        self.graphs = PassGraphs(self._static_pass, self.device, static, self.max_len)

    def _load_tensors(self, t, quant: str | None, head_rows: torch.Tensor | None) -> None:
        """The embedding, head, final norm and layers from the loaded tensors `t`, converted to
        the model's dtype (or `quant`) and device, Q/K/V and gate/up fused."""

        def cast(w: Weight) -> Weight:
            if isinstance(w, QUANTIZED):
                return w
            return torch.as_tensor(w).to(device=self.device, dtype=self.dtype).contiguous()

        def matrix(w: Weight, lookup: bool = False) -> Weight:
            return cast(to_format(w, quant, self.dtype, lookup))

        def fused(*parts: Weight) -> Weight:
            return fuse([matrix(w) for w in parts])

        def optional(name: str) -> torch.Tensor | None:
            return cast(t[name]) if name in t else None

        self.embed = matrix(t["embed"], lookup=True)
        self.head = self.embed if self.config.tie_embeddings else matrix(t["lm_head"], lookup=True)
        # every row of the head, which `keep_head_rows` chooses from (None: rows were given)
        self._all_rows = self.head if head_rows is None else None
        self.head_rows = None
        if head_rows is not None:
            self._choose_rows(self.head, head_rows.to(self.device))
        # `t` may be lazy (engine/loading/weights.py): each lookup reads one tensor, which is converted
        # and dropped before the next, so the source model is never held whole.
        self.norm = cast(t["norm"])
        self.norm_bias = optional("norm_bias")
        self.layers = []
        for i in range(self.config.n_layers):
            p = f"layers.{i}."
            biases = [t.get(p + b) for b in ("bq", "bk", "bv")]
            self.layers.append(_Layer(
                attn_norm=cast(t[p + "attn_norm"]),
                wqkv=fused(t[p + "wq"], t[p + "wk"], t[p + "wv"]),
                bqkv=cast(torch.cat(biases)) if all(b is not None for b in biases) else None,
                wo=matrix(t[p + "wo"]),
                ffn_norm=cast(t[p + "ffn_norm"]),
                # inline, so that no float32 source outlives its conversion
                w_gate_up=fused(t[p + "w_gate"], t[p + "w_up"]) if self.family.mlp == "swiglu"
                else matrix(t[p + "w_up"]),
                w_down=matrix(t[p + "w_down"]),
                attn_norm_bias=optional(p + "attn_norm_bias"),
                ffn_norm_bias=optional(p + "ffn_norm_bias"),
                bo=optional(p + "bo"),
                q_norm=optional(p + "q_norm"),
                k_norm=optional(p + "k_norm"),
                b_up=optional(p + "b_up"),
                b_down=optional(p + "b_down"),
            ))

    @cached_property  # fixed once loaded; read every request
    def capabilities(self) -> Capabilities:
        """Token trees; on a CPU, thread counts per pass width; and where the C decoder does not
        run the passes, torch's kernels for the weights' format (engine/execution/kernels.py)."""
        kernels = (STORED,) if self.native is not None else prefill_candidates(self.dtype, self.quant is not None)
        return Capabilities(tree=True, device=self.device.type, kernels=kernels, threads=self.device.type == "cpu",
                            native=self.native is not None, caches=self.CACHES)

    def use_cache(self, cache: int) -> None:
        """A static cache's new arrays are zeroed, as the first (`_make_static`)."""
        fresh = cache != self._cache and cache not in (self._other_caches or {})
        super().use_cache(cache)
        if fresh and self.graphs is not None:
            self.k_cache.zero_()
            self.v_cache.zero_()

    def _cache_moved(self) -> None:
        if self.native is not None:
            self.native.point_at_cache(self)

    def cost_key(self) -> str:
        build = "" if self.native is None else f"-{self.native.build}"
        return f"TorchLlama-{str(self.dtype).replace('torch.', '')}-{self.quant}{build}"

    @property
    def weight_bytes(self) -> int:
        """Bytes read from memory per pass (for the achieved-bandwidth figure): the head (the
        embedding itself where tied) and every layer; an untied embedding is only looked up."""
        tensors = [self.head, self.norm] + ([] if self.norm_bias is None else [self.norm_bias])
        for layer in self.layers:
            tensors += [w for w in vars(layer).values() if w is not None]
        return sum(weight_nbytes(w) for w in tensors)

    def record_features(self) -> None:
        """Keep the final normed hidden state of each cached position in `features` (as many
        rows as the KV cache: a static one's spare rows take padded passes' states)."""
        if self.features is None:
            self.features = torch.zeros(self.k_cache.shape[2], self.config.hidden_size, dtype=self.dtype,
                                        device=self.device)
            if self.graphs is not None:
                self.graphs.clear()  # their passes write the states too now

    def memory(self, counted: set[int] | None = None) -> dict[str, int]:
        """Bytes by use: weights left in a mapped GGUF's pages (shared with the page cache,
        resident as they are read), weights held in process memory, resident copies for other
        kernels, the KV cache (allocated; its pages count once written) and scratch (the native
        decoder's vectors and tables and its largest pass so far, recorded features). Weights
        whose id is in `counted` (another model's, shared) are skipped; ours are added to it."""
        counted = set() if counted is None else counted
        heads = [] if self.config.tie_embeddings and self.head_rows is None else [self.head]
        tensors = [self.embed, self.norm, self.norm_bias] + heads
        tensors += [w for layer in self.layers for w in vars(layer).values()]
        weights = list({id(w): w for w in tensors if w is not None and id(w) not in counted}.values())
        counted.update(id(w) for w in weights)
        copies = 0
        if self._copy_layers is not None:
            copies = sum(weight_nbytes(getattr(layer, m)) for layer in self._copy_layers
                         for m in _MATRICES) + weight_nbytes(self._copy_head)
        scratch = 0 if self.native is None else self.native.own_bytes + self.native.scratch_bytes
        scratch += 0 if self.features is None else weight_nbytes(self.features)
        return {"weights_mapped": sum(weight_nbytes(w) for w in weights if _mapped(w)),
                "weights_held": sum(weight_nbytes(w) for w in weights if not _mapped(w)),
                "copies": copies, "kv_cache": self.kv_cache_bytes(),
                "scratch": scratch}

    def set_threads(self, n: int) -> None:
        """The thread count of passes the plan does not give one (torch's, which the native
        decoder follows)."""
        torch.set_num_threads(n)

    @torch.inference_mode()
    def _pass(self, tokens: Sequence[int], parents: Sequence[int] | None, logits: bool) -> torch.Tensor | None:
        if self.graphs is None:
            ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
            return self.forward_hidden(self.embed_tokens(ids), tokens, parents, logits)
        n, start = len(tokens), self.length
        self._before_pass(n)
        pos, local = pass_positions(start, n, parents)
        out = self.graphs.run(self._cache, tokens, pos, local, start, logits)
        self.tokens.extend(tokens)
        return out

    def _before_pass(self, n: int) -> None:
        """Refuse a pass that does not fit; set the plan's thread count for its width."""
        if n == 0:
            raise ValueError("forward needs at least one token")
        if self.length + n > self.max_len:
            raise EngineError(f"context full: {self.length + n} tokens > cache of {self.max_len}")
        if (threads := self.plan.threads_for(n)) is not None:
            torch.set_num_threads(threads)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Input vectors in the model's dtype (what a feature draft concatenates them with)."""
        if isinstance(self.embed, BlockMatrix):  # a native target's rows, shared (the embedded draft)
            rows = self.embed.rows(ids.tolist()) if self.native is None else self.native.embed(self.embed, ids.tolist())
            return torch.from_numpy(rows).to(self.dtype)
        if isinstance(self.embed, QUANTIZED):
            return self.embed.embed(ids).to(self.dtype)
        return self.embed[ids]

    @torch.inference_mode()
    def forward_hidden(self, x: torch.Tensor, tokens: Sequence[int],
                       parents: Sequence[int] | None = None, logits: bool = True) -> torch.Tensor | None:
        """`forward` from input vectors x [n, hidden] instead of token embeddings, with torch
        logits; `tokens` are what the cache records for them."""
        n, start = len(tokens), self.length
        self._before_pass(n)
        kernel = self.plan.decode if logits else self.plan.prefill
        if kernel == STORED and self.native is not None:  # returns the final normed states
            pos, local = pass_positions(start, n, parents)
            x, out = self.native.forward(x, start, pos, local, logits, torch.get_num_threads(),
                                         states=self.features is not None)
            x, out = None if x is None else torch.from_numpy(x), None if out is None else torch.from_numpy(out)
        else:
            x, out = self._layers(x, start, parents, len(self.layers), kernel), None
            if logits or self.features is not None:
                x = norm(x, self.norm, self.norm_bias, self.config.rms_eps, self.family.norm).to(self.dtype)
        self.tokens.extend(tokens)
        if self.features is not None:
            self.features[start:start + n] = x
        if not logits:
            return None
        return self._full_vocab(out) if out is not None else self.head_logits(x, kernel)

    def use_plan(self, plan: ExecutionPlan, final: bool = True) -> None:
        """Also keeps a resident copy of the matrices in the dtype of the plan's other kernel
        where it fits (`_make_copy`), and drops any other copy. A final plan that reads no copy
        frees what only other kernels would need (`_release_plain_layouts`)."""
        if self.graphs is not None and (plan.decode, plan.copy()) != (self.plan.decode, self.copy_kernel):
            self.graphs.clear()  # their passes read the kernel's matrices
        super().use_plan(plan, final)
        if plan.copy() != self.copy_kernel:
            self._drop_copy()
            if plan.copy() is not None:
                self._make_copy(plan.copy())
        if final:
            self._release_plain_layouts()

    def _make_copy(self, kernel: str) -> None:
        """A resident copy of the matrices in `kernel`'s dtype, where it fits: at most three
        times the stored weights, so that an int4 or int8 model may get a bf16 copy but not an
        fp32 one, and `copy_budget` of the machine's memory, so that a 7B model gets none.
        Without one, the kernel dequantizes the matrices for each pass."""
        dtype = compute_dtype(kernel, self.dtype)
        size = (math.prod(self.head.shape) + sum(math.prod(getattr(layer, m).shape) for layer in self.layers
                                                 for m in _MATRICES)) * dtype.itemsize
        if size > min(3 * self.weight_bytes, available_memory() * self.copy_budget):
            return
        self._copy_layers = [dataclasses.replace(layer, **{m: as_dtype(getattr(layer, m), dtype) for m in _MATRICES})
                             for layer in self.layers]
        self._copy_head = as_dtype(self.head, dtype)  # for passes with logits
        self.copy_kernel = kernel

    def _release_plain_layouts(self) -> None:
        """Where nothing will dequantize the int4 matrices again (no copy to make, prefill in
        the stored format), keep only torch's packed layout of each, halving an int4 model's
        memory. The embedding keeps its own for row lookups. The native decoder reads the plain
        layout (and torch never packs it then)."""
        if self.plan.copy() is not None or self.native is not None:
            return
        for w in [self.head] + [getattr(layer, m) for layer in self.layers for m in _MATRICES]:
            if isinstance(w, Int4Weight) and w is not self.embed:
                w.release_plain()

    def _drop_copy(self) -> None:
        self.copy_kernel, self._copy_layers, self._copy_head = None, None, None

    @torch.inference_mode()
    def time_prefill(self, width: int, layers: int = 2) -> float:
        """Seconds per token of a prefill pass of `width` tokens with the current prefill
        kernel, estimated from its first `layers` layers. Writes only cache positions past
        `tokens` (not kept). The native decoder runs every layer."""
        width, layers = min(width, self.max_len - self.length), min(layers, len(self.layers))
        x = self.embed_tokens(torch.zeros(width, dtype=torch.long, device=self.device))
        started = time.perf_counter()
        if self.plan.prefill == STORED and self.native is not None:  # one call: all layers
            pos, local = pass_positions(self.length, width, None)
            self.native.forward(x, self.length, pos, local, False, torch.get_num_threads(), states=False)
            return (time.perf_counter() - started) / width
        self._layers(x, self.length, None, layers, self.plan.prefill)
        return (time.perf_counter() - started) / width * len(self.layers) / layers

    def _layers(self, x: torch.Tensor, start: int, parents: Sequence[int] | None, count: int,
                kernel: str) -> torch.Tensor:
        """Run the first `count` layers over x [n, hidden] at cache positions start..start+n,
        writing their keys and values; returns the last hidden state (in the kernel's dtype)."""
        dev, n, end = self.device, len(x), start + len(x)
        pos, local = pass_positions(start, n, parents)
        pos, local = torch.from_numpy(pos).to(dev), torch.from_numpy(local).to(dev)
        # The mask as a bias added to the attention scores (0 or -inf), made once per pass;
        # it sees all of the cache, and one-token passes get an all-zero one, so that every
        # pass computes its scores alike.
        mask = torch.cat([torch.ones(n, start, dtype=torch.bool, device=dev), local], dim=1)
        bias = torch.zeros(n, end, dtype=compute_dtype(kernel, self.dtype), device=dev).masked_fill_(~mask, float("-inf"))

        def rows(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            self.k_cache[i, :, start:end] = k
            self.v_cache[i, :, start:end] = v
            return self.k_cache[i, :, :end], self.v_cache[i, :, :end]

        return self._run_layers(x, pos, bias, count, kernel, rows)

    def _static_pass(self, inputs: PassInputs, logits: bool) -> torch.Tensor | None:
        """A pass over `inputs` (PassGraphs' buffers) whose shapes depend on its width alone:
        it writes the cache rows start.. by index and attends over every row, masked."""
        kernel = self.plan.decode if logits else self.plan.prefill
        rows = inputs.start + self._columns[:inputs.width]
        bias = attention_bias(inputs, rows, self._columns, compute_dtype(kernel, self.dtype))

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            self.k_cache[i].index_copy_(1, rows, k.to(self.k_cache.dtype))
            self.v_cache[i].index_copy_(1, rows, v.to(self.v_cache.dtype))
            return self.k_cache[i], self.v_cache[i]

        x = self._run_layers(self.embed_tokens(inputs.ids), inputs.positions, bias, len(self.layers), kernel, write)
        if not logits and self.features is None:
            return None
        x = norm(x, self.norm, self.norm_bias, self.config.rms_eps, self.family.norm).to(self.dtype)
        if self.features is not None:  # a feature draft reads them (engine/drafters/feature_draft.py)
            self.features.index_copy_(0, rows, x)
        return self.head_logits(x, kernel) if logits else None

    def _run_layers(self, x: torch.Tensor, pos: torch.Tensor, bias: torch.Tensor, count: int, kernel: str,
                    rows: CacheRows) -> torch.Tensor:
        """The first `count` layers over x [n, hidden] at rotary positions `pos` [n], with the
        attention bias [n, cache rows attended] (0 or -inf); `rows` writes each layer's keys
        and values and returns those attended over."""
        c, n = self.config, len(x)
        dtype = compute_dtype(kernel, self.dtype)
        group = c.n_heads // c.n_kv_heads
        bias = bias.expand(group, n, bias.shape[-1]).reshape(1, group * n, bias.shape[-1])
        layers = self._copy_layers if kernel == self.copy_kernel else self.layers
        dequantize = kernel != STORED and layers is self.layers
        x = x.to(dtype)
        cos, sin = self.cos[pos].to(dtype), self.sin[pos].to(dtype)
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        kind, eps = self.family.norm, c.rms_eps
        for i, layer in enumerate(layers[:count]):
            h = norm(x, layer.attn_norm, layer.attn_norm_bias, eps, kind)
            q, k, v = linear(h, layer.wqkv, layer.bqkv, dequantize).split([nh * hd, nkv * hd, nkv * hd], -1)
            q, k = q.view(n, nh, hd), k.view(n, nkv, hd)
            if layer.q_norm is not None:  # Qwen3: per-head RMSNorm before rotary
                q, k = rms_norm(q, layer.q_norm, eps), rms_norm(k, layer.k_norm, eps)
            q, k = q.transpose(0, 1), k.transpose(0, 1)
            q = q * cos + _rotate_half(q) * sin
            keys, values = rows(i, k * cos + _rotate_half(k) * sin, v.view(n, nkv, hd).transpose(0, 1))
            attn = self._attention(q, keys.to(dtype), values.to(dtype), bias)
            x = x + linear(attn, layer.wo, layer.bo, dequantize)
            h = norm(x, layer.ffn_norm, layer.ffn_norm_bias, eps, kind)
            x = x + linear(self._mlp_hidden(h, layer, dequantize), layer.w_down, layer.b_down, dequantize)
        return x

    def _mlp_hidden(self, h: torch.Tensor, layer: _Layer, dequantize: bool) -> torch.Tensor:
        if self.family.mlp == "gelu":
            return F.gelu(linear(h, layer.w_gate_up, layer.b_up, dequantize), approximate="tanh")
        gate, up = linear(h, layer.w_gate_up, None, dequantize).chunk(2, dim=-1)
        return F.silu(gate) * up

    def _choose_rows(self, rows: Weight, ids: torch.Tensor) -> None:
        self.head = rows.select(ids) if isinstance(rows, QUANTIZED) else rows[ids].contiguous()
        self.head_rows = ids

    def keep_head_rows(self, ids: np.ndarray) -> bool:
        """As NativeLlama's: the head becomes a copy of these rows (of those limit_vocab kept).
        Not for a head built with chosen rows, nor beside a resident copy for wide passes, nor
        with static-cache passes: captured ones read the head by its address, and a draft
        meets new tokens (more rows) every few requests."""
        if self._all_rows is None or self._copy_head is not None or self.graphs is not None:
            return False
        ids = np.asarray(ids, dtype=np.int64)
        self._choose_rows(self._all_rows, torch.from_numpy(ids[ids < self._all_rows.shape[0]]).to(self.device))
        if self.native is not None:
            self.native.set_head(self.head)
        return True

    def limit_vocab(self, real: int, width: int | None = None) -> None:
        """Tokens from `real` on (rows that pad the embedding past the tokenizer) get -inf
        logits, so they are never chosen; logits are `width` wide (default: unchanged), so a
        draft's logits line up with a target whose embedding is padded differently."""
        if self.head_rows is not None:
            raise EngineError("limit_vocab: this model's head already keeps chosen rows only")
        width = width or self.vocab_size
        keep = min(real, width)
        if keep < self.vocab_size:  # keep a prefix of the rows: a view, not a copy
            self.head = self._all_rows = self.head.prefix(keep) if isinstance(self.head, QUANTIZED) else self.head[:keep]
            if self._copy_head is not None:
                self._copy_head = self._copy_head[:keep]
            if self.native is not None:
                self.native.set_head(self.head)
        self.vocab_size = width
        if self.graphs is not None:
            self.graphs.clear()  # their passes read the head by its address

    def head_logits(self, features: torch.Tensor, kernel: str = STORED) -> torch.Tensor:
        """float32 logits [n, vocab] from final normed hidden states [n, hidden]."""
        if kernel == STORED and self.native is not None:
            out = torch.from_numpy(self.native.head_logits(features, self.head))
        elif kernel == self.copy_kernel:
            out = linear(features.to(self._copy_head.dtype), self._copy_head).float()
        elif isinstance(self.head, Int8Weight):
            out = int8_product(features, self.head)
        else:
            out = linear(features, self.head).float()
        return self._full_vocab(out)

    def _full_vocab(self, out: torch.Tensor) -> torch.Tensor:
        """Logits [n, vocab] from the head's rows: -inf for rows it does not keep."""
        if self.head_rows is None:
            missing = self.vocab_size - out.shape[-1]  # rows dropped by limit_vocab
            return F.pad(out, (0, missing), value=float("-inf")) if missing else out
        full = torch.full((len(out), self.vocab_size), float("-inf"), device=self.device)
        full[:, self.head_rows] = out
        return full

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   bias: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention as two batched matmuls over the KV heads, with no copies of
        K/V per query head; scaling and masking happen inside the first (baddbmm). (torch's CPU
        SDPA kernel was a quarter of a one-token pass, and slower in bf16.)
        q: [heads, n, d]; k, v: [kv_heads, len, d]; bias: [1, heads / kv_heads * n, len];
        returns [n, heads * d]."""
        nh, n, hd = q.shape
        nkv = k.shape[0]
        q = q.reshape(nkv, nh // nkv * n, hd)  # the query heads sharing a KV head, stacked
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=hd ** -0.5)
        probs = scores.float().softmax(-1).to(v.dtype)
        return (probs @ v).view(nh, n, hd).transpose(0, 1).reshape(n, nh * hd)
