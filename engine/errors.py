"""Errors the engine raises on bad input. Each carries one clear, user-facing line."""


class EngineError(Exception):
    """Base class: a problem the caller can fix (bad model, bad position, bad option)."""


class ModelLoadError(EngineError):
    """The model file or folder is missing, corrupt, or of an unsupported kind."""


class BackendUnavailable(EngineError):
    """The requested backend cannot run on this machine (e.g. ExLlamaV2 without CUDA)."""
