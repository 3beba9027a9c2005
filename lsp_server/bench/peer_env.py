"""The environment a peer runs in: the user's, less what Draftline sets for torch.

OMP_WAIT_POLICY=PASSIVE (engine/__init__.py, the Makefile) makes ggml's OpenMP threads sleep
between graph nodes: llama.cpp then decodes about 1.5x slower than its users see it."""
from __future__ import annotations

import os

SET_FOR_TORCH = ("OMP_WAIT_POLICY",)


def peer_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SET_FOR_TORCH}
