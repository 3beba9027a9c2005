"""The environment a peer runs in: the user's, without what the engine set for torch.

OMP_WAIT_POLICY=PASSIVE (engine/__init__.py) makes ggml's OpenMP threads sleep between graph
nodes: llama.cpp then decodes about 1.5x slower than its users see it."""
from __future__ import annotations

import os

from engine import SET_FOR_TORCH


def peer_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SET_FOR_TORCH}
