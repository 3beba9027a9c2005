"""How a backend runs a pass of n tokens: on how many threads, with which kernel.

Declared by the backend (what it can run: `TorchLlama.plan`), filled in by calibration
(engine/calibrate.py, from measured pass costs), shown in stats (`Engine.describe`). Kernels:
"stored" multiplies by the weights in their stored format (the C decoder of engine/native/
where it runs, else torch's int4/int8/bf16/fp32 kernels); "fp32" and "bf16" compute through a
resident copy of the matrices in that dtype, or one dequantized for each pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

STORED = "stored"


@dataclass
class ExecutionPlan:
    # by pass width: the entry at min(n, last) applies; empty: torch's current thread count
    # and the stored format everywhere. threads has one entry past the widest decoding pass,
    # for prefill chunks.
    threads: list[int] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    prefill: str = STORED  # the kernel of passes without logits

    def threads_for(self, n: int) -> int | None:
        return self.threads[min(n, len(self.threads) - 1)] if self.threads else None

    def kernel_for(self, n: int, logits: bool = True) -> str:
        if not logits:
            return self.prefill
        return self.kernels[min(n, len(self.kernels) - 1)] if self.kernels else STORED

    def describe(self) -> list[dict]:
        """Runs of pass widths that run alike, e.g. [{"widths": "1-3", "kernel": "stored",
        "threads": 1}, ...], then the prefill."""
        runs: list[dict] = []
        widest = max(len(self.threads) - 1, len(self.kernels), 2)
        for n in range(1, widest):
            step = {"kernel": self.kernel_for(n), "threads": self.threads_for(n)}
            if runs and {k: runs[-1][k] for k in step} == step:
                runs[-1]["last"] = n
            else:
                runs.append({"first": n, "last": n, **step})
        shown = [{"widths": f"{r.pop('first')}-{r.pop('last')}", **r} for r in runs]
        return shown + [{"widths": "prefill", "kernel": self.prefill, "threads": self.threads_for(10**9)}]
