"""Measuring, on the machine it runs on, what the target's passes cost, and choosing kernels.

The result is the backend's execution plan (engine/execution_plan.py): threads and kernel per
pass width, and the prefill kernel.

- Prefill kernel: the torch backend can run prefill passes in its stored format ("stored":
  the C decoder of engine/native/ where it runs, else torch's kernels) or in fp32 or bf16
  (engine/kernels.py). Which is fastest differs 5-10x between CPUs of the same family, so each
  candidate is timed (torch's on two layers).
- Pass costs by width, thread count and kernel: decoding chooses draft lengths from them
  (engine/draft_length.py). On a small CPU a one-token pass is fastest on one thread (two
  threads spend more on synchronising the small matmuls than they save), while a 9-token
  pass is fastest on all cores; so the torch backend switches its thread count per width.
  Likewise the kernel: a one-token pass is fastest in the stored int8/int4 format (fewest
  bytes), while torch's int8 and int4 kernels cost ~3x more at 13 tokens, where the prefill
  kernel's resident bf16 copy may be faster.

Measuring takes a few seconds, so the result is kept per machine, model and dtype in the
user's cache directory; later starts only warm the pass shapes up.

A model the native decoder runs (engine/native/) has nothing to choose but thread counts: C
runs every pass, prefill included, in the stored format (no copies: a prefill computes each
token bitwise as decoding does), and needs no warm-up. Its calibration is one pass of each of
_NATIVE_WIDTHS tokens from an empty cache (after one untimed pass), about 0.4 s for a 1.5B
model on two cores, kept per machine, model and C decoder build.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from dataclasses import dataclass, field

from engine.backends.base import PREFILL_CHUNK, Backend
from engine.execution_plan import STORED, ExecutionPlan
from engine.native import TILE_TOKENS
from engine.user_cache import cache_dir, write_atomically

log = logging.getLogger("draftline")

FORMAT = 8  # bump when what is measured changes
_CONTEXT = 256  # cache length the pass costs are measured at
# A decoding pass through the copy rounds differently from the one-token passes of plain
# decoding, so speculative output may then differ from it at near-ties (identical_to_ar in
# bench: 0.7-0.8 instead of 1.0 for int8 with bf16 wide passes, for no end-to-end gain); so
# does a prompt prefilled through it. The copy is used for a width, or for prefill, only
# where it is this much faster.
COPY_MARGIN = 1.25


@dataclass
class Calibration:
    pass_cost: list[float]  # seconds per decoding pass by width (index = tokens; [0] unused)
    prefill_tokens_per_s: float  # a real prefill (of _CONTEXT tokens) with the chosen kernel
    plan: ExecutionPlan = field(default_factory=ExecutionPlan)
    kernel_tokens_per_s: dict[str, float] = field(default_factory=dict)  # each candidate's rate
    prefill_copy: bool = False  # a resident copy of the matrices (in copy_kernel's dtype) is kept
    copy_kernel: str | None = None  # for prefill or for wide decoding passes
    # how many timed decoding passes have corrected pass_cost since, by width (PassCosts.timed)
    timed_passes: list[float] = field(default_factory=list)

    def apply(self, backend: Backend) -> None:
        if hasattr(backend, "use_prefill_kernel"):
            if self.copy_kernel:
                backend.use_prefill_kernel(self.copy_kernel)
            backend.use_prefill_kernel(self.plan.prefill)
        if hasattr(backend, "plan"):
            backend.plan = self.plan
        if hasattr(backend, "release_plain_layouts"):
            backend.release_plain_layouts()

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        return cls(**{**data, "plan": ExecutionPlan(**data["plan"])})


def _median_time(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def measure_pass_costs(backend: Backend, max_width: int, repeats: int = 3,
                       widths: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 24), context: int = _CONTEXT) -> list[float]:
    """Seconds per pass for widths 0..max_width (index = tokens in the pass; [0] is unused),
    measured at a few widths over a `context`-token cache and interpolated linearly."""
    widths = sorted({*widths, max_width} & set(range(1, max_width + 1)))
    context = min(context, backend.max_len - max_width)
    backend.truncate(0)
    if context:
        backend.forward([0] * context, logits=False)

    def one(width: int) -> None:
        backend.truncate(context)
        backend.forward([0] * width)

    measured = {w: _median_time(lambda: one(w), repeats) for w in widths}
    backend.truncate(0)
    costs = [0.0]
    for width in range(1, max_width + 1):
        low = max(w for w in widths if w <= width)
        high = min(w for w in widths if w >= width)
        frac = 0.0 if high == low else (width - low) / (high - low)
        costs.append(measured[low] + frac * (measured[high] - measured[low]))
    return costs


def time_prefill_kernels(backend, candidates: tuple[str, ...], width: int = 128) -> dict[str, float]:
    """Tokens per second of a prefill pass with each candidate kernel (best of 3 runs on two
    layers, after one run that pays each kernel's one-time set-up)."""
    rates = {}
    for kernel in candidates:
        backend.use_prefill_kernel(kernel)
        backend.time_prefill(8)
        rates[kernel] = 1 / min(backend.time_prefill(width) for _ in range(3))
    return rates


# The widths a native model's calibration times (the rest interpolated): a 2-token pass costs
# little more than a one-token pass (it reads the weights once: narrow.c) while 3 and 4 tokens
# cost about twice as much on a small CPU; interpolating 2 between 1 and 4 made the cheapest
# speculation look too dear to draft.
_NATIVE_WIDTHS = (1, 2, 4, 8)

# A native model's one-token pass shorter than this may be faster on one thread than on all:
# only then are both measured.
_SHORT_PASS = 0.02


def _beyond(costs: list[float], max_width: int) -> list[float]:
    """`costs` extended to max_width in proportion to the widest measured pass: wider passes
    take the wide route (matmul.c), bound by arithmetic, so a token there costs at least what
    it does in the widest measured pass (on the 1.5B: 0.455 s measured for 25 tokens, 0.459 s
    estimated from 8; a smaller model's wide route is up to 30% cheaper, so this errs high)."""
    last = len(costs) - 1
    return costs + [costs[last] * w / last for w in range(last + 1, max_width + 1)]


def _native_costs(backend, max_width: int) -> list[float]:
    """Pass costs of widths 0..max_width: _NATIVE_WIDTHS timed, the widths between interpolated,
    wider ones estimated (_beyond). Where AMX tiles take the wide passes (amx.c), a pass of
    TILE_TOKENS tokens is timed too and the passes from the tiles' first width up to it cost
    as much: a tile's time does not depend on how many of its tokens are used."""
    tiles_from = backend.native.tiles_from() if backend.native is not None else 0
    widths = _NATIVE_WIDTHS + ((TILE_TOKENS,) if tiles_from else ())
    widest = min(max_width, max(widths))
    costs = measure_pass_costs(backend, widest, repeats=1, widths=widths, context=0)
    if tiles_from and widest >= tiles_from:
        costs[tiles_from:] = [costs[widest]] * (widest + 1 - tiles_from)
    return _beyond(costs, max_width)


def measure_native(backend, max_width: int, max_threads: int) -> Calibration:
    """Pass costs of a model the native decoder runs, from an empty cache (_native_costs), on all
    threads, and on one thread too where a one-token pass is short (timing a 25-token pass was
    half of a first start's calibration, so few widths are timed). The prefill rate is
    estimated from the widest pass (a prefill multiplies in the same tiles; its unpacking is
    shared by more tokens, so this errs low)."""
    threads = [max_threads]
    costs = {}
    backend.truncate(0)
    backend.forward([0])  # untimed: the first pass after loading pays one-time costs (5x a pass, seen)
    for n in [max_threads, 1]:
        backend.set_threads(n)
        backend.plan = ExecutionPlan()
        costs[n] = _native_costs(backend, max_width)
        if n == max_threads and (max_threads == 1 or costs[n][1] >= _SHORT_PASS):
            break
        threads = sorted(costs)
    backend.set_threads(max_threads)
    best = [min(threads, key=lambda n: costs[n][w]) for w in range(max_width + 1)]
    cal = Calibration(pass_cost=[costs[n][w] for w, n in enumerate(best)],
                      prefill_tokens_per_s=max_width / min(costs[n][max_width] for n in threads),
                      plan=ExecutionPlan(threads=best + [max_threads]))
    cal.apply(backend)
    return cal


def measure(backend: Backend, max_width: int, max_threads: int) -> Calibration:
    """Everything `Calibration` holds, measured now (a few seconds)."""
    if getattr(backend, "native", None) is not None:
        return measure_native(backend, max_width, max_threads)
    from engine.kernels import prefill_candidates

    backend.set_threads(max_threads)
    cal = Calibration(pass_cost=[], prefill_tokens_per_s=0.0)
    if hasattr(backend, "use_prefill_kernel"):
        backend.truncate(0)
        cal.kernel_tokens_per_s = time_prefill_kernels(
            backend, prefill_candidates(backend.dtype, backend.quant is not None))
        rates = cal.kernel_tokens_per_s
        cal.plan.prefill = max(rates, key=lambda k: rates[k] / (COPY_MARGIN if k != STORED else 1.0))
        # The fastest copy is worth keeping even where prefill runs natively: wide decoding
        # passes may use it (measured below).
        copy = max((k for k in rates if k != STORED), key=rates.get, default=None)
        cal.prefill_copy = copy is not None and backend.use_prefill_kernel(copy)
        cal.copy_kernel = copy if cal.prefill_copy else None
        backend.use_prefill_kernel(cal.plan.prefill)
    backend.truncate(0)
    context = min(_CONTEXT, backend.max_len)
    cal.prefill_tokens_per_s = context / _median_time(
        lambda: (backend.truncate(0), backend.forward([0] * context, logits=False)), 1)
    if not hasattr(backend, "plan"):
        cal.pass_cost = measure_pass_costs(backend, max_width)
        return cal
    # Each width gets the fastest measured (threads, kernel): one-token passes are bound by
    # the bytes of the weights (the stored format), wide ones by arithmetic (where a resident
    # bf16 or fp32 copy can win).
    kernels = (STORED, cal.copy_kernel) if cal.copy_kernel else (STORED,)
    costs = {}
    for threads, kernel in itertools.product(sorted({1, max_threads}), kernels):
        backend.set_threads(threads)
        backend.plan = ExecutionPlan([threads] * (max_width + 1) + [max_threads], [kernel] * (max_width + 1),
                                     cal.plan.prefill)
        costs[threads, kernel] = measure_pass_costs(backend, max_width)
    def cost(choice: tuple[int, str], width: int) -> float:
        return costs[choice][width] * (COPY_MARGIN if choice[1] != STORED else 1.0)

    best = [min(costs, key=lambda choice: cost(choice, w)) for w in range(max_width + 1)]
    # Prefill chunks (wider than any decoding pass) run on all cores.
    cal.plan = ExecutionPlan([threads for threads, _ in best] + [max_threads], [kernel for _, kernel in best],
                             cal.plan.prefill)
    cal.pass_cost = [costs[choice][w] for w, choice in enumerate(best)]
    if cal.copy_kernel not in cal.plan.kernels + [cal.plan.prefill]:  # unused: free it
        cal.copy_kernel, cal.prefill_copy = None, False
        backend.drop_copy()
    cal.apply(backend)
    return cal


def warm_up(backend: Backend, max_width: int) -> None:
    """Run each pass shape decoding uses once, so the first request pays no kernel set-up."""
    backend.truncate(0)
    backend.forward([0] * min(PREFILL_CHUNK, 64), logits=False)
    for width in (1, 2, max_width):
        backend.forward([0] * width)
    backend.truncate(0)


def load_or_measure(backend: Backend, max_width: int, max_threads: int, key: str) -> Calibration:
    """The calibration kept for `key` (machine, model, dtype), else a new one, kept."""
    try:
        path = cache_dir("calibration") / f"{key}-v{FORMAT}.json"
        cal = Calibration.from_dict(json.loads(path.read_text()))
        if len(cal.pass_cost) == max_width + 1:
            cal.apply(backend)
            backend.set_threads(max_threads)
            if getattr(backend, "native", None) is None:  # C passes have nothing to set up
                warm_up(backend, max_width)
            return cal
    except (OSError, ValueError, TypeError, KeyError):
        pass  # absent or unreadable: measure again
    cal = measure(backend, max_width, max_threads)
    keep(cal, key)
    return cal


def keep(cal: Calibration, key: str) -> None:
    """Keep `cal` for `key`: the next start loads it instead of measuring."""
    try:
        path = cache_dir("calibration") / f"{key}-v{FORMAT}.json"
        write_atomically(path, lambda tmp: tmp.write_text(json.dumps(cal.as_dict())))
    except OSError as exc:
        log.warning("could not keep the calibration: %s", exc)
