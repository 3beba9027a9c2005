"""How a backend runs a pass of n tokens: on how many threads, with which kernel.

Declared by every backend (`Backend.plan`, what its `Capabilities` allow), filled in by
calibration (engine/execution/calibrate.py, from measured pass costs), shown in stats
(`Engine.describe`). Kernels: "stored" multiplies by the weights in their stored format (the C
decoder of engine/execution/native/ where it runs, else torch's int4/int8/bf16/fp32 kernels); "fp32" and
"bf16" compute through a resident copy of the matrices in that dtype, or one dequantized for
each pass.

Every pass that returns logits runs one kernel, whatever its width: a pass through another
kernel rounds differently, so a verification pass could then disagree with plain decoding's
one-token passes at a near-tie, and speculative output would no longer be plain decoding's.
So every width a backend runs is verified exactly, and nothing caps the width afterwards.
Passes without logits (prefill) may run another: plain and speculative decoding start from
the same prefilled cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field

STORED = "stored"


@dataclass
class ExecutionPlan:
    # by pass width: the entry at min(n, last) applies; empty: the backend's current thread
    # count. threads has one entry past the widest decoding pass, for prefill chunks.
    threads: list[int] = field(default_factory=list)
    decode: str = STORED  # the kernel of every pass with logits
    prefill: str = STORED  # the kernel of passes without logits

    def threads_for(self, n: int) -> int | None:
        return self.threads[min(n, len(self.threads) - 1)] if self.threads else None

    def copy(self) -> str | None:
        """The kernel whose resident copy of the matrices the plan reads (at most one: calibration
        chooses among the stored format and one copy), or None."""
        return next((k for k in (self.decode, self.prefill) if k != STORED), None)

    def describe(self) -> list[dict]:
        """Runs of pass widths that run alike, e.g. [{"widths": "1-3", "kernel": "stored",
        "threads": 1}, ...], then the prefill."""
        runs: list[dict] = []
        for n in range(1, max(len(self.threads) - 1, 2)):
            step = {"kernel": self.decode, "threads": self.threads_for(n)}
            if runs and {k: runs[-1][k] for k in step} == step:
                runs[-1]["last"] = n
            else:
                runs.append({"first": n, "last": n, **step})
        shown = [{"widths": f"{r.pop('first')}-{r.pop('last')}", **r} for r in runs]
        return shown + [{"widths": "prefill", "kernel": self.prefill, "threads": self.threads_for(10**9)}]
