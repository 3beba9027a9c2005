"""The feature-conditioned draft (EAGLE, Li et al. 2024) as a trainable torch module.

At position j the draft sees the target's final normed hidden state f_j and the embedding of
the token that followed, e_{j+1}; one Llama layer turns fc([e_{j+1}; f_j]) into a prediction of
f_{j+1}, and the target's head (restricted to `head_rows`) turns that into next-token logits.
Same arithmetic as engine.execution.backends.torch_llama, batched and differentiable; the embedding and
head are frozen target tensors, only fc, the layer and the final norm are trained and shipped.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.execution.backends.torch_llama import _rotate_half, rms_norm
from engine.loading.weights import LlamaConfig

LAYER_TENSORS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


class FeatureDraftNet(nn.Module):
    def __init__(self, config: LlamaConfig, target_tensors: dict[str, torch.Tensor],
                 init_layer: int, head_rows: torch.Tensor):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.register_buffer("embed", target_tensors["embed"].float(), persistent=False)
        self.register_buffer("head", target_tensors["embed"][head_rows].float(), persistent=False)
        fc = nn.Linear(2 * h, h)
        with torch.no_grad():  # start as "the feature, plus a little of the token"
            fc.weight.mul_(0.1)
            fc.weight[:, h:] += torch.eye(h)
        # Canonical names (with dots) as plain dict keys: ParameterDict refuses dots.
        self.params: dict[str, nn.Parameter] = {
            f"layers.0.{name}": nn.Parameter(target_tensors[f"layers.{init_layer}.{name}"].float().clone())
            for name in LAYER_TENSORS}
        self.params["fc"] = nn.Parameter(fc.weight.detach().clone())
        self.params["fc_bias"] = nn.Parameter(fc.bias.detach().clone())
        self.params["norm"] = nn.Parameter(target_tensors["norm"].float().clone())
        hd = config.head_dim
        self.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """features [B, T, H] (f_0..f_{T-1}), next_ids [B, T] (tokens 1..T) -> predicted features
        f_1..f_T [B, T, H] (normed, what the head sees)."""
        c, p = self.config, self.params
        b, t, _ = features.shape
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        angles = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        angles = torch.cat([angles, angles], -1)
        cos, sin = angles.cos(), angles.sin()
        x = F.linear(torch.cat([self.embed[next_ids], features], -1), p["fc"], p["fc_bias"])
        w = lambda name: p[f"layers.0.{name}"]  # noqa: E731
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
        return rms_norm(x, p["norm"], c.rms_eps)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over head_rows for (predicted or target) features."""
        return F.linear(features, self.head)

    def export(self, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
        return {name: t.detach().to(dtype).contiguous() for name, t in self.params.items()}
