"""Read Llama-family weights from GGUF files or Hugging Face safetensors folders.

Only formats that cannot execute code are accepted: GGUF and safetensors, never pickle.
Weights come back under one canonical naming scheme, in Hugging Face's rotary layout.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.errors import ModelLoadError

SUPPORTED_HF_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    rope_theta: float
    rms_eps: float
    max_position: int
    tie_embeddings: bool
    head_dim: int = 0  # 0: hidden_size // n_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.n_heads


@dataclass
class LoadedWeights:
    config: LlamaConfig
    tensors: dict[str, torch.Tensor]  # canonical names, see _HF_NAMES
    source: Path
    gguf_metadata: dict | None = None  # the GGUF key/values, for rebuilding the tokenizer


# canonical name -> Hugging Face name ("{i}" is the layer index)
_HF_NAMES = {
    "embed": "model.embed_tokens.weight",
    "norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "layers.{i}.attn_norm": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.wq": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.wk": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.wv": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.bq": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.bk": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.bv": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.wo": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.w_gate": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.w_up": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.w_down": "model.layers.{i}.mlp.down_proj.weight",
}

# canonical name -> GGUF name
_GGUF_NAMES = {
    "embed": "token_embd.weight",
    "norm": "output_norm.weight",
    "lm_head": "output.weight",
    "layers.{i}.attn_norm": "blk.{i}.attn_norm.weight",
    "layers.{i}.wq": "blk.{i}.attn_q.weight",
    "layers.{i}.wk": "blk.{i}.attn_k.weight",
    "layers.{i}.wv": "blk.{i}.attn_v.weight",
    "layers.{i}.bq": "blk.{i}.attn_q.bias",
    "layers.{i}.bk": "blk.{i}.attn_k.bias",
    "layers.{i}.bv": "blk.{i}.attn_v.bias",
    "layers.{i}.wo": "blk.{i}.attn_output.weight",
    "layers.{i}.ffn_norm": "blk.{i}.ffn_norm.weight",
    "layers.{i}.w_gate": "blk.{i}.ffn_gate.weight",
    "layers.{i}.w_up": "blk.{i}.ffn_up.weight",
    "layers.{i}.w_down": "blk.{i}.ffn_down.weight",
}


def load_weights(path: Path) -> LoadedWeights:
    """Load a `.gguf` file or a Hugging Face folder; raise ModelLoadError with a clear reason."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"model not found: {path}")
    if path.is_dir():
        return _load_hf_folder(path)
    if path.suffix == ".gguf":
        return _load_gguf(path)
    raise ModelLoadError(
        f"unsupported model file {path.name}: give a .gguf file or a folder with config.json "
        "and *.safetensors (pickled .bin/.pt checkpoints are refused)"
    )


def _rename(names: dict[str, str], n_layers: int, present: set[str]) -> dict[str, str]:
    """canonical -> source name for every tensor present in the source."""
    out = {}
    for canonical, source in names.items():
        for i in range(n_layers) if "{i}" in canonical else [None]:
            c, s = (canonical.format(i=i), source.format(i=i)) if i is not None else (canonical, source)
            if s in present:
                out[c] = s
    return out


def _check_complete(tensors: dict[str, torch.Tensor], config: LlamaConfig, path: Path) -> None:
    required = ["embed", "norm"] + [
        n.format(i=i)
        for i in range(config.n_layers)
        for n in ("layers.{i}.attn_norm", "layers.{i}.wq", "layers.{i}.wk", "layers.{i}.wv",
                  "layers.{i}.wo", "layers.{i}.ffn_norm", "layers.{i}.w_gate", "layers.{i}.w_up",
                  "layers.{i}.w_down")
    ]
    if not config.tie_embeddings:
        required.append("lm_head")
    missing = [n for n in required if n not in tensors]
    if missing:
        raise ModelLoadError(f"{path}: {len(missing)} weight tensors missing (first: {missing[0]})")


# --- Hugging Face folders -------------------------------------------------------------------

def _load_hf_folder(folder: Path) -> LoadedWeights:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config_file = folder / "config.json"
    files = sorted(folder.glob("*.safetensors"))
    if not config_file.exists() or not files:
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" (found {pickled[0]}: pickled checkpoints are refused)" if pickled else ""
        raise ModelLoadError(f"{folder}: need config.json and *.safetensors{hint}")
    try:
        raw = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{config_file}: unreadable config.json ({exc})") from exc
    arch = (raw.get("architectures") or ["?"])[0]
    if arch not in SUPPORTED_HF_ARCHITECTURES:
        raise ModelLoadError(
            f"{folder}: architecture {arch} is not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_HF_ARCHITECTURES))})"
        )
    if raw.get("rope_scaling"):
        raise ModelLoadError(f"{folder}: rope_scaling {raw['rope_scaling']} is not supported yet")
    config = LlamaConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        n_layers=raw["num_hidden_layers"],
        n_heads=raw["num_attention_heads"],
        n_kv_heads=raw.get("num_key_value_heads", raw["num_attention_heads"]),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position=raw.get("max_position_embeddings", 4096),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        head_dim=raw.get("head_dim") or 0,
    )
    source: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            source.update(load_file(f))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelLoadError(f"{f}: corrupt safetensors file ({exc})") from exc
    names = _rename(_HF_NAMES, config.n_layers, set(source))
    tensors = {c: source[s] for c, s in names.items()}
    _check_complete(tensors, config, folder)
    return LoadedWeights(config, tensors, folder)


# --- GGUF -----------------------------------------------------------------------------------

def _gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _unpermute_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """GGUF stores Q/K rows permuted for llama.cpp's interleaved rotary; undo it (HF layout)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _load_gguf(path: Path) -> LoadedWeights:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # the reader raises bare ValueError/struct errors on garbage
        raise ModelLoadError(f"{path}: not a valid GGUF file ({exc})") from exc
    arch = _gguf_field(reader, "general.architecture")
    if arch not in ("llama", "qwen2", "mistral"):
        raise ModelLoadError(f"{path}: GGUF architecture {arch!r} is not supported (llama, qwen2)")
    get = lambda key, default=None: _gguf_field(reader, f"{arch}.{key}", default)  # noqa: E731
    present = {t.name for t in reader.tensors}
    n_heads = int(get("attention.head_count"))
    config = LlamaConfig(
        vocab_size=int(get("vocab_size", 0) or len(_gguf_field(reader, "tokenizer.ggml.tokens", []))),
        hidden_size=int(get("embedding_length")),
        intermediate_size=int(get("feed_forward_length")),
        n_layers=int(get("block_count")),
        n_heads=n_heads,
        n_kv_heads=int(get("attention.head_count_kv", n_heads)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position=int(get("context_length", 4096)),
        tie_embeddings="output.weight" not in present,
    )
    by_name = {t.name: t for t in reader.tensors}
    tensors = {}
    try:
        for canonical, name in _rename(_GGUF_NAMES, config.n_layers, present).items():
            t = by_name[name]
            w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
            if arch == "llama" and canonical.endswith((".wq", ".wk", ".bq", ".bk")):
                heads = config.n_heads if canonical.endswith((".wq", ".bq")) else config.n_kv_heads
                w = _unpermute_rotary(w, heads)
            tensors[canonical] = torch.from_numpy(np.array(w, dtype=np.float32))  # writable copy
    except (ValueError, IndexError, NotImplementedError) as exc:
        raise ModelLoadError(f"{path}: corrupt or unsupported GGUF tensor data ({exc})") from exc
    _check_complete(tensors, config, path)
    metadata = {k: _gguf_field(reader, k) for k in reader.fields if k.startswith("tokenizer.ggml.")}
    return LoadedWeights(config, tensors, path, gguf_metadata=metadata)
