"""Resumable training state: a module's `params` dict and AdamW's moments, in one safetensors file."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def save_checkpoint(path: Path, params: dict[str, torch.nn.Parameter], opt: torch.optim.Optimizer,
                    step: int) -> None:
    tensors = {f"param.{k}": v.detach() for k, v in params.items()}
    for k, v in params.items():
        for field in ("exp_avg", "exp_avg_sq"):
            if v in opt.state:
                tensors[f"opt.{field}.{k}"] = opt.state[v][field]
    save_file(tensors, str(path) + ".tmp", metadata={"step": str(step)})
    Path(str(path) + ".tmp").replace(path)


def load_checkpoint(path: Path, params: dict[str, torch.nn.Parameter], opt: torch.optim.Optimizer) -> int:
    """Restore params and optimizer moments; returns the step the checkpoint was written at."""
    with safe_open(str(path), "pt") as f:
        step = int(f.metadata()["step"])
    tensors = load_file(path)
    with torch.no_grad():
        for k, v in params.items():
            v.copy_(tensors[f"param.{k}"])
            if f"opt.exp_avg.{k}" in tensors:
                opt.state[v] = {"step": torch.tensor(float(step)),
                                "exp_avg": tensors[f"opt.exp_avg.{k}"],
                                "exp_avg_sq": tensors[f"opt.exp_avg_sq.{k}"]}
    return step
