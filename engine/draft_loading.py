"""The embedded draft: one trained layer that reads the target's features (engine/drafters/feature_draft.py).

The shipped file holds only the draft's layer, its input projection `fc`, final norm and reduced
output vocabulary (`head_rows`); the 49152 x 576 embedding and tied head come from the already
loaded target, so no second copy of them is read from disk or kept in memory.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from engine.execution.backends.base import Backend
from engine.execution.backends.native_llama import NativeLlama
from engine.execution.backends.torch_llama import TorchLlama
from engine.drafters.feature_draft import FeatureDraft
from engine.errors import ModelLoadError
from engine.loading.weights import LoadedWeights

EMBEDDED_DRAFT_DIR = Path(__file__).parent / "data" / "draft-smollm2"


def load_embedded_draft(target: Backend, folder: Path = EMBEDDED_DRAFT_DIR) -> FeatureDraft:
    """Build the draft on top of `target` (the embedded model, on the native backend or the
    torch one on a CPU). On the native backend the draft's layer runs in bf16 with int8
    matrices, as it does beside an int4/int8 target."""
    if not isinstance(target, (TorchLlama, NativeLlama)):
        raise ModelLoadError("--draft embedded reads the target's features: it needs the native or torch backend")
    try:
        meta = json.loads((folder / "config.json").read_text())
        tensors = load_file(folder / "model.safetensors")
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot read the embedded draft model in {folder}: {e}") from e
    c = target.config
    if (meta["hidden_size"], meta["vocab_size"]) != (c.hidden_size, c.vocab_size):
        raise ModelLoadError(
            f"the embedded draft was trained for hidden size {meta['hidden_size']} and vocabulary "
            f"{meta['vocab_size']}; the target has {c.hidden_size} and {c.vocab_size}")
    head_rows = tensors.pop("head_rows")
    dtype = target.dtype if isinstance(target, TorchLlama) else torch.bfloat16
    device = str(target.device) if isinstance(target, TorchLlama) else "cpu"
    fc, fc_bias = (tensors.pop(name).to(device=device, dtype=dtype) for name in ("fc", "fc_bias"))
    tensors["embed"] = target.embed  # shared, not copied: same dtype and device
    weights = LoadedWeights(replace(c, n_layers=meta["n_layers"]), tensors, folder)
    net = TorchLlama(weights, dtype, max_len=target.max_len, device=device,
                     head_rows=head_rows, quant="int8" if target.quant else None)
    return FeatureDraft(target, net, fc, fc_bias)
