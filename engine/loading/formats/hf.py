"""Hugging Face folders: config.json plus *.safetensors (pickled checkpoints are refused)."""
from __future__ import annotations

import json
from pathlib import Path

from engine.loading.architectures import FAMILIES, HF_ARCHITECTURES
from engine.errors import ModelLoadError
from engine.loading.formats.safetensors_file import read_entries, read_tensor
from engine.execution.rope import SCALINGS, RopeScaling
from engine.loading.weights import LazyTensors, LlamaConfig, LoadedWeights, plan_tensors


def open_hf_folder(folder: Path) -> LoadedWeights:
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
    config = hf_config(raw, folder)
    entries = {name: entry for f in files for name, entry in read_entries(f).items()}
    shapes = {name: entry.shape for name, entry in entries.items()}
    plan = plan_tensors(config, "hf", shapes, lambda name: name.endswith("rotary_emb.inv_freq"), folder)
    return LoadedWeights(config, LazyTensors(list(plan), lambda c: read_tensor(entries[plan[c]])), folder)


def hf_config(raw: dict, folder: Path) -> LlamaConfig:
    """The hyper-parameters of config.json, or ModelLoadError for what we do not compute."""
    arch = (raw.get("architectures") or ["?"])[0]
    if arch not in HF_ARCHITECTURES:
        raise ModelLoadError(f"{folder}: architecture {arch} is not supported "
                             f"(supported: {', '.join(sorted(HF_ARCHITECTURES))})")
    family_name = HF_ARCHITECTURES[arch]
    family = FAMILIES[family_name]
    act = raw.get("hidden_act", family.hf_act)
    if act != family.hf_act:
        raise ModelLoadError(f"{folder}: activation {act!r} is not supported for {arch} "
                             f"(expects {family.hf_act})")
    if raw.get("mlp_bias"):
        raise ModelLoadError(f"{folder}: MLP biases are not supported for {arch}")
    try:
        n_heads = raw["num_attention_heads"]
        max_position = raw.get("max_position_embeddings", 4096)
        theta, scaling = _rope(raw, max_position, folder)
        # Qwen configs carry a sliding_window that only `use_sliding_window` turns on.
        window = raw.get("sliding_window") if raw.get("use_sliding_window", True) else None
        return LlamaConfig(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            n_layers=raw["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=raw.get("num_key_value_heads") or n_heads,
            rope_theta=theta,
            rms_eps=float(raw.get(family.hf_eps_key, 1e-6)),
            max_position=max_position,
            tie_embeddings=bool(raw.get("tie_word_embeddings", family.hf_tied)),
            head_dim=raw.get("head_dim") or 0,
            family=family_name,
            rope_scaling=scaling,
            sliding_window=window,
        )
    except KeyError as exc:
        raise ModelLoadError(f"{folder}: config.json lacks {exc.args[0]}") from exc


def _rope(raw: dict, max_position: int, folder: Path) -> tuple[float, RopeScaling | None]:
    """rope_theta and scaling, from transformers 5's `rope_parameters` or the older
    `rope_theta` + `rope_scaling` that downloaded checkpoints carry."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ModelLoadError(f"{folder}: partial rotary embeddings are not supported")
    if kind == "default":
        return theta, None
    if kind not in SCALINGS:
        raise ModelLoadError(f"{folder}: rope scaling {kind!r} is not supported "
                             f"(supported: {', '.join(SCALINGS)})")
    # transformers prefers a top-level original_max_position_embeddings (Phi-3 style).
    original = raw.get("original_max_position_embeddings") or params.get(
        "original_max_position_embeddings", max_position)
    factor = params.get("factor")
    if factor is None and kind != "yarn":
        raise ModelLoadError(f"{folder}: rope scaling {kind!r} without a factor")
    if factor is None:  # yarn derives it, as transformers does
        factor = max_position / original
    return theta, RopeScaling(
        kind=kind, factor=float(factor), original_max_position=int(original),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        beta_fast=float(params.get("beta_fast") or 32), beta_slow=float(params.get("beta_slow") or 1),
        attention_factor=params.get("attention_factor"), mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"), truncate=params.get("truncate", True))
