"""The model families we run: one row each. Adding a family is adding a row here.

A row says how the decoder computes (norm, MLP, q/k norm) and which tensors it has under which
names in a Hugging Face folder and in a GGUF file. Loaders and the backend read only this table.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# canonical name -> (Hugging Face name, GGUF name); "{i}" is the layer index.
NAMES: dict[str, tuple[str, str]] = {
    "embed": ("model.embed_tokens.weight", "token_embd.weight"),
    "norm": ("model.norm.weight", "output_norm.weight"),
    "norm_bias": ("model.norm.bias", "output_norm.bias"),
    "lm_head": ("lm_head.weight", "output.weight"),
    "layers.{i}.attn_norm": ("model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight"),
    "layers.{i}.attn_norm_bias": ("model.layers.{i}.input_layernorm.bias", "blk.{i}.attn_norm.bias"),
    "layers.{i}.wq": ("model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight"),
    "layers.{i}.wk": ("model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight"),
    "layers.{i}.wv": ("model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight"),
    "layers.{i}.wo": ("model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight"),
    "layers.{i}.bq": ("model.layers.{i}.self_attn.q_proj.bias", "blk.{i}.attn_q.bias"),
    "layers.{i}.bk": ("model.layers.{i}.self_attn.k_proj.bias", "blk.{i}.attn_k.bias"),
    "layers.{i}.bv": ("model.layers.{i}.self_attn.v_proj.bias", "blk.{i}.attn_v.bias"),
    "layers.{i}.bo": ("model.layers.{i}.self_attn.o_proj.bias", "blk.{i}.attn_output.bias"),
    "layers.{i}.q_norm": ("model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"),
    "layers.{i}.k_norm": ("model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"),
    "layers.{i}.ffn_norm": ("model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight"),
    "layers.{i}.ffn_norm_bias": ("model.layers.{i}.post_attention_layernorm.bias", "blk.{i}.ffn_norm.bias"),
    "layers.{i}.w_gate": ("model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight"),
    "layers.{i}.w_up": ("model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight"),
    "layers.{i}.w_down": ("model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight"),
    "layers.{i}.b_up": ("model.layers.{i}.mlp.up_proj.bias", "blk.{i}.ffn_up.bias"),
    "layers.{i}.b_down": ("model.layers.{i}.mlp.down_proj.bias", "blk.{i}.ffn_down.bias"),
}

_ATTENTION = ("layers.{i}.wq", "layers.{i}.wk", "layers.{i}.wv", "layers.{i}.wo")
_SWIGLU = ("layers.{i}.w_gate", "layers.{i}.w_up", "layers.{i}.w_down")
_NORMS = ("norm", "layers.{i}.attn_norm", "layers.{i}.ffn_norm")
_QKV_BIAS = ("layers.{i}.bq", "layers.{i}.bk", "layers.{i}.bv")


@dataclass(frozen=True)
class Family:
    norm: str  # "rms" (RMSNorm) or "layer" (LayerNorm with bias)
    mlp: str  # "swiglu" (silu(gate) * up, down) or "gelu" (tanh GELU of up, down)
    hf_act: str  # config.json's hidden_act the MLP computes
    required: tuple[str, ...]  # canonical names, "{i}" per layer
    optional: tuple[str, ...] = ()  # used when the file has them (e.g. Llama's attention_bias)
    qk_norm: bool = False  # RMSNorm per head on q and k before rotary (Qwen3)
    # llama.cpp's converter permutes Q/K rows for the families its runtime rotates pairwise.
    gguf_permuted_qk: bool = False
    hf_tied: bool = False  # transformers' default for a config.json without tie_word_embeddings
    hf_eps_key: str = "rms_norm_eps"
    gguf_eps_key: str = "attention.layer_norm_rms_epsilon"
    hf_renames: dict[str, str] = field(default_factory=dict)  # canonical -> HF name, over NAMES

    def names(self, fmt: str) -> dict[str, str]:
        """canonical -> name in `fmt` ("hf" or "gguf") of every tensor this family may have."""
        column = 0 if fmt == "hf" else 1
        return {c: (self.hf_renames.get(c) if fmt == "hf" else None) or NAMES[c][column]
                for c in ("lm_head",) + self.required + self.optional}


FAMILIES: dict[str, Family] = {
    # Llama 2/3.x, CodeLlama, DeepSeek-Coder, Mistral
    "llama": Family("rms", "swiglu", "silu", ("embed",) + _NORMS + _ATTENTION + _SWIGLU,
                    optional=_QKV_BIAS + ("layers.{i}.bo",), gguf_permuted_qk=True),
    "qwen2": Family("rms", "swiglu", "silu", ("embed",) + _NORMS + _ATTENTION + _SWIGLU + _QKV_BIAS),
    "qwen3": Family("rms", "swiglu", "silu",
                    ("embed",) + _NORMS + _ATTENTION + _SWIGLU + ("layers.{i}.q_norm", "layers.{i}.k_norm"),
                    optional=_QKV_BIAS, qk_norm=True),
    "starcoder2": Family(
        "layer", "gelu", "gelu_pytorch_tanh",
        ("embed",) + _NORMS + _ATTENTION + ("layers.{i}.w_up", "layers.{i}.w_down"),
        optional=("norm_bias", "layers.{i}.attn_norm_bias", "layers.{i}.ffn_norm_bias", "layers.{i}.bo",
                  "layers.{i}.b_up", "layers.{i}.b_down") + _QKV_BIAS,
        hf_tied=True, hf_eps_key="norm_epsilon", gguf_eps_key="attention.layer_norm_epsilon",
        hf_renames={"layers.{i}.w_up": "model.layers.{i}.mlp.c_fc.weight",
                    "layers.{i}.b_up": "model.layers.{i}.mlp.c_fc.bias",
                    "layers.{i}.w_down": "model.layers.{i}.mlp.c_proj.weight",
                    "layers.{i}.b_down": "model.layers.{i}.mlp.c_proj.bias"}),
}

# config.json "architectures" -> family
HF_ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                    "Qwen3ForCausalLM": "qwen3", "Starcoder2ForCausalLM": "starcoder2"}
# GGUF general.architecture -> family
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                      "starcoder2": "starcoder2"}


def expand(templates: dict[str, str], n_layers: int) -> dict[str, str]:
    """Per-layer names: {"layers.{i}.wq": "blk.{i}.attn_q.weight"} -> one entry per layer."""
    out = {}
    for canonical, source in templates.items():
        if "{i}" in canonical:
            out |= {canonical.format(i=i): source.format(i=i) for i in range(n_layers)}
        else:
            out[canonical] = source
    return out
