"""Whether this machine has a CUDA device, asked without importing torch where it cannot have one."""
from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA device. Without an NVIDIA driver the answer is no, and torch
    (1.2-1.5 s to import) is not asked: a model the native decoder runs starts without it."""
    if not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists()):
        return False
    import torch

    return torch.cuda.is_available()


def gpu_name() -> str:
    """The first CUDA device's name, or "" without one."""
    if not cuda_available():
        return ""
    import torch

    return torch.cuda.get_device_name()
