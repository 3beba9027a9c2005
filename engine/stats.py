"""Counters for one generation: what was drafted, accepted, and where the time went."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Stats:
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt positions served from the KV cache of the previous call
    new_tokens: int = 0
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    # Drafted and accepted tokens per source (engine/drafters/base.py SOURCES): where the
    # speed came from.
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    # A draft model's first choices the target tested (their parent was accepted), and of
    # those the ones it accepted: the pair's agreement, whatever the tree's shape.
    model_tested: int = 0
    model_agreed: int = 0
    # Elements of the target's logits that verification copied to the host: token ids and a
    # few probabilities, never whole rows (engine/execution/pass_logits.py).
    logits_to_host: int = 0
    prefill_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0  # the target's passes and verifying their logits
    target_ms: float = 0.0  # in the target's passes alone (the device's work, where it waits for it)
    total_ms: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def agreement(self) -> float | None:
        """How often the draft model's first choice was the target's token, where tested
        (None: never)."""
        return self.model_agreed / self.model_tested if self.model_tested else None

    @property
    def new_prompt_tokens(self) -> int:
        """Prompt tokens prefilled by this call: not reused from the KV cache."""
        return self.prompt_tokens - self.reused_tokens

    @property
    def tokens_per_pass(self) -> float:
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    def as_dict(self) -> dict:
        agreement = self.agreement
        return asdict(self) | {
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tokens_per_target_pass": round(self.tokens_per_pass, 4),
            "new_prompt_tokens": self.new_prompt_tokens,
            "agreement": None if agreement is None else round(agreement, 4),
        }
