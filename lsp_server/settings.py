"""Server settings: the client-facing contract, read from initializationOptions and
workspace/didChangeConfiguration. Bad values are reported and ignored, never fatal."""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from engine.engine import MODES
from engine.models import BACKENDS, DTYPES

log = logging.getLogger(__name__)

MULTILINE = ("auto", "always", "never")
# Changing one of these means loading a different model.
MODEL_KEYS = ("model", "draft", "dtype", "backend")


@dataclass(frozen=True)
class Settings:
    model: str = "embedded"
    draft: str | None = None
    mode: str = "lookup"  # measured fastest here (README, Measured)
    dtype: str | None = None
    backend: str = "auto"
    maxTokens: int = 64
    multiline: str = "auto"
    timeBudgetMs: float = 400
    debounceMs: float = 0
    enabled: bool = True

    def model_key(self) -> tuple:
        return tuple(getattr(self, k) for k in MODEL_KEYS)


def _problem(name: str, value: object) -> str | None:
    """Why `value` is not acceptable for setting `name`, or None when it is."""
    choices = {"mode": MODES, "dtype": (None, *sorted(DTYPES)), "backend": BACKENDS,
               "multiline": MULTILINE}
    if name in choices:
        return None if value in choices[name] else f"choose from {choices[name]}"
    if name == "model":
        return None if isinstance(value, str) and value else "a model name or path"
    if name == "draft":
        return None if value is None or (isinstance(value, str) and value) else "null or a path"
    if name == "enabled":
        return None if isinstance(value, bool) else "true or false"
    if name == "maxTokens":
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1024
        return None if ok else "an integer in 1..1024"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return None if ok else "a number >= 0"


def merge(base: Settings, options: object) -> tuple[Settings, list[str]]:
    """`base` updated from a client's options dict; unknown keys and bad values are skipped
    and described in the returned list of problems."""
    if options is None:
        return base, []
    if not isinstance(options, dict):
        return base, [f"settings must be an object, got {type(options).__name__}"]
    if isinstance(options.get("draftline"), dict):  # VS Code style: {"draftline": {...}}
        options = options["draftline"]
    names = {f.name for f in dataclasses.fields(Settings)}
    changes, problems = {}, []
    for name, value in options.items():
        if name not in names:
            problems.append(f"unknown setting {name!r}")
        elif (why := _problem(name, value)) is not None:
            problems.append(f"setting {name}={value!r} ignored: {why}")
        else:
            changes[name] = value
    for p in problems:
        log.warning("%s", p)
    return dataclasses.replace(base, **changes), problems
