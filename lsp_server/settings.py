"""Server settings from initializationOptions and workspace/didChangeConfiguration (the
options themselves are declared in lsp_server/options.py). Bad values are reported and
ignored, never fatal."""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from lsp_server.options import BY_NAME, SETTINGS, Settings

log = logging.getLogger(__name__)

__all__ = ["Settings", "merge"]


def merge(base: Settings, options: object) -> tuple[Settings, list[str]]:
    """`base` updated from a client's options dict; unknown keys and bad values are skipped
    and described in the returned list of problems."""
    if options is None:
        return base, []
    if not isinstance(options, dict):
        return base, [f"settings must be an object, got {type(options).__name__}"]
    if isinstance(options.get("draftline"), dict):  # VS Code style: {"draftline": {...}}
        options = options["draftline"]
    names = {o.name for o in SETTINGS}
    changes, problems = {}, []
    for name, value in options.items():
        if name not in names:
            problems.append(f"unknown setting {name!r}")
        elif (why := BY_NAME[name].problem(value)) is not None:
            problems.append(f"setting {name}={value!r} ignored: {why}")
        else:
            changes[name] = value
    for p in problems:
        log.warning("%s", p)
    return dataclasses.replace(base, **changes), problems
