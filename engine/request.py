"""One generation, described by one object from the engine's API down to the decoding loop
(after exllamav2's ExLlamaV2DynamicJob): how much to write, when to stop, how to choose tokens,
how to interrupt it."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.sampling import Sampling


@dataclass(frozen=True)
class Request:
    # Most new tokens; an end-of-text token also ends the generation.
    max_new_tokens: int = 64
    # Called with the text written so far: the index to cut it at and stop (a stop string, the
    # end of a line, a block's end), or None to go on. The returned text is cut there.
    stop: Callable[[str], int | None] | None = None
    # Greedy by default; temperature/top-k/top-p sampling keeps the target's distribution.
    sampling: Sampling = field(default_factory=Sampling)
    # Set from another thread to stop between passes (and between prefill chunks).
    cancel: threading.Event | None = None
    # Called once the prompt is in the KV cache, before the first new token: a caller that
    # bounds decoding time (the server's time budget) starts its clock then.
    on_prefilled: Callable[[], None] | None = None
    # Re-choose a text prompt's last token (engine/healing.py); token-id prompts are never healed.
    heal: bool = True
