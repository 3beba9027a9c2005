"""Counters for one generation: what was drafted, accepted, and where the time went."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Stats:
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt positions served from the KV cache of the previous call
    new_tokens: int = 0
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tokens_per_target_pass": round(self.tokens_per_pass, 4),
        }
