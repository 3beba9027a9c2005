"""The draft model as a trainable torch module: a few Llama layers on the target's frozen embedding.

Same arithmetic as engine.backends.torch_llama (RMSNorm, rotary, GQA, SwiGLU), batched and
differentiable. Layers start as copies of chosen target layers; the output head is the target's
tied embedding restricted to `head_rows` and stays frozen, so only the layers and the final norm
are trained and shipped.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.backends.torch_llama import _rotate_half, rms_norm
from engine.weights import LlamaConfig

LAYER_TENSORS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


class DraftNet(nn.Module):
    def __init__(self, config: LlamaConfig, target_tensors: dict[str, torch.Tensor],
                 init_layers: Sequence[int], head_rows: torch.Tensor):
        super().__init__()
        self.config = config
        self.register_buffer("embed", target_tensors["embed"].float(), persistent=False)
        self.register_buffer("head", target_tensors["embed"][head_rows].float(), persistent=False)
        # Canonical names (with dots) as plain dict keys: ParameterDict refuses dots.
        self.params: dict[str, nn.Parameter] = {
            f"layers.{j}.{name}": nn.Parameter(target_tensors[f"layers.{i}.{name}"].float().clone())
            for j, i in enumerate(init_layers) for name in LAYER_TENSORS}
        self.params["norm"] = nn.Parameter(target_tensors["norm"].float().clone())
        self.n_layers = len(init_layers)
        hd = config.dim_per_head
        self.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> logits over head_rows [B, T, R]."""
        c, p = self.config, self.params
        b, t = ids.shape
        hd, nh, nkv = c.dim_per_head, c.n_heads, c.n_kv_heads
        angles = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        angles = torch.cat([angles, angles], -1)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed[ids]
        for j in range(self.n_layers):
            w = lambda name: p[f"layers.{j}.{name}"]  # noqa: E731
            h = rms_norm(x, w("attn_norm"), c.rms_eps)
            q = F.linear(h, w("wq")).view(b, t, nh, hd).transpose(1, 2)
            k = F.linear(h, w("wk")).view(b, t, nkv, hd).transpose(1, 2)
            v = F.linear(h, w("wv")).view(b, t, nkv, hd).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + F.linear(attn.transpose(1, 2).reshape(b, t, nh * hd), w("wo"))
            h = rms_norm(x, w("ffn_norm"), c.rms_eps)
            x = x + F.linear(F.silu(F.linear(h, w("w_gate"))) * F.linear(h, w("w_up")), w("w_down"))
        return F.linear(rms_norm(x, p["norm"], c.rms_eps), self.head)

    def export(self, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
        """The trained tensors under the engine's canonical names."""
        return {name: t.detach().to(dtype).contiguous() for name, t in self.params.items()}
