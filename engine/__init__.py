"""Draftline's inference engine: a target model, cheap drafters, and exact speculative decoding.

Knows nothing about LSP. The surface callers use is `engine.api` (torch-free); the local
engine is `engine.Engine`, imported only when asked for, so that a client of a remote server
never loads torch.
"""
import os

# torch's OpenMP threads spin while waiting; with 2 cores and an editor beside us that makes
# every pass several times slower. Must be set before torch is first imported: this is the one
# place it is set, for every process that imports the engine (server, tests, scripts), and
# for the processes they start. A value in the user's environment wins.
# What this sets, so that peers (bench's llama.cpp) can run in the user's environment instead.
SET_FOR_TORCH = {} if "OMP_WAIT_POLICY" in os.environ else {"OMP_WAIT_POLICY": "PASSIVE"}
os.environ.update(SET_FOR_TORCH)


def __getattr__(name: str):
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
