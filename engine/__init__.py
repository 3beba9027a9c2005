"""Draftline's inference engine: a target model, cheap drafters, and exact speculative decoding.

Knows nothing about LSP. The entry point is `engine.Engine`.
"""
import os

# torch's OpenMP threads spin while waiting; with 2 cores and an editor beside us that makes
# every pass several times slower. Must be set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engine.engine import Completion, Engine  # noqa: E402
from engine.errors import BackendUnavailable, EngineError, ModelLoadError  # noqa: E402
from engine.request import Request  # noqa: E402
from engine.sampling import Sampling  # noqa: E402
from engine.stats import Stats  # noqa: E402
from engine.tokenization import load_tokenizer  # noqa: E402

__all__ = [
    "BackendUnavailable",
    "Completion",
    "Engine",
    "EngineError",
    "ModelLoadError",
    "Request",
    "Sampling",
    "Stats",
    "load_tokenizer",
]
