"""Measuring, on the machine it runs on, what the target's passes cost, and choosing kernels.

The result is the backend's execution plan (engine/execution/plan.py): threads per pass width,
the kernel of every pass with logits, and the prefill kernel.

- Prefill kernel: the torch backend can run prefill passes in its stored format ("stored":
  the C decoder of engine/execution/native/ where it runs, else torch's kernels) or in fp32 or bf16
  (engine/execution/kernels.py). Which is fastest differs 5-10x between CPUs of the same family, so each
  candidate is timed (torch's on two layers).
- Pass costs by width, thread count and kernel: decoding chooses draft lengths from them
  (engine/draft_length.py). On a small CPU a one-token pass is fastest on one thread (two
  threads spend more on synchronising the small matmuls than they save), while a 9-token
  pass is fastest on all cores; so the torch backend switches its thread count per width.
  The kernel of passes with logits is one for every width, the one one-token passes run
  fastest with (usually the stored format: fewest bytes). torch's int8 and int4 kernels cost
  ~3x more at 13 tokens, where a resident bf16 copy may be faster, but a wide pass through it
  would round differently from plain decoding's one-token passes (engine/execution/plan.py):
  so every width a draft may take is verified exactly, and nothing caps the width later.

Measuring takes a few seconds, so the result is kept per machine, model and dtype in the
user's cache directory; later starts only warm the pass shapes up.

A model the native decoder runs (engine/execution/native/) has nothing to choose but thread counts: C
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

from engine.execution.backends.base import PREFILL_CHUNK, Backend
from engine.execution.plan import STORED, ExecutionPlan
from engine.execution.native import TILE_TOKENS
from engine.loading.user_cache import cache_dir, write_atomically

log = logging.getLogger("draftline")

FORMAT = 10  # bump when what is measured changes
_CONTEXT = 256  # cache length the pass costs are measured at
# A pass through a copy rounds differently from the stored format's, so its output may differ
# from the stored model's at near-ties. The copy is used for passes with logits, or for
# prefill, only where it is this much faster.
COPY_MARGIN = 1.25


@dataclass
class Calibration:
    pass_cost: list[float]  # seconds per decoding pass by width (index = tokens; [0] unused)
    prefill_tokens_per_s: float  # a real prefill (of _CONTEXT tokens) with the chosen kernel
    plan: ExecutionPlan = field(default_factory=ExecutionPlan)
    kernel_tokens_per_s: dict[str, float] = field(default_factory=dict)  # each candidate's rate
    # how many timed decoding passes have corrected pass_cost since, by width (PassCosts.timed)
    timed_passes: list[float] = field(default_factory=list)

    def apply(self, backend: Backend) -> None:
        backend.use_plan(self.plan)
        backend.set_prefill_estimate(self.prefill_tokens_per_s)

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


def time_prefill_kernels(backend: Backend, candidates: tuple[str, ...], width: int = 128) -> dict[str, float]:
    """Tokens per second of a prefill pass with each candidate kernel (best of 3 runs, after one
    run that pays each kernel's one-time set-up)."""
    rates = {}
    for kernel in candidates:
        backend.use_plan(ExecutionPlan(prefill=kernel), final=False)
        backend.time_prefill(8)
        rates[kernel] = 1 / min(backend.time_prefill(width) for _ in range(3))
    return rates


# The widths a native model's calibration times (the rest interpolated): a 2-token pass costs
# little more than a one-token pass (it reads the weights once: narrow.c) while 3 and 4 tokens
# cost about twice as much on a small CPU; interpolating 2 between 1 and 4 made the cheapest
# speculation look too dear to draft. Wider K-quant passes unpack each panel of rows once per
# pass and then cost the same per token (panel_k.c), so 8 and 16 give the line wider ones follow.
_NATIVE_WIDTHS = (1, 2, 4, 8, TILE_TOKENS)

# A native model's one-token pass shorter than this may be faster on one thread than on all:
# only then are both measured.
_SHORT_PASS = 0.02


def _beyond(costs: list[float], max_width: int, tiles: bool) -> list[float]:
    """`costs` extended to max_width: along the line through the widest measured pass and the
    one half as wide (the panel route's cost per token; on the 1.5B on a 2-core Zen 3, 16
    tokens cost 1.73 times 8); where AMX tiles take wide passes, in proportion to the widest
    (a tile's time is the same for any of its 16 tokens, so 17 cost as 32)."""
    last = len(costs) - 1
    if tiles:
        return costs + [costs[last] * w / last for w in range(last + 1, max_width + 1)]
    per_token = (costs[last] - costs[last // 2]) / (last - last // 2)
    return costs + [costs[last] + per_token * (w - last) for w in range(last + 1, max_width + 1)]


def _native_costs(backend: Backend, max_width: int) -> list[float]:
    """Pass costs of widths 0..max_width: _NATIVE_WIDTHS timed, the widths between interpolated,
    wider ones estimated (_beyond). Where AMX tiles take the wide passes (amx.c), the passes
    from the tiles' first width up to TILE_TOKENS cost as much as TILE_TOKENS: a tile's time
    does not depend on how many of its tokens are used."""
    tiles_from = backend.capabilities.tile_from
    widest = min(max_width, max(_NATIVE_WIDTHS))
    costs = measure_pass_costs(backend, widest, repeats=1, widths=_NATIVE_WIDTHS, context=0)
    if tiles_from and widest >= tiles_from:
        costs[tiles_from:] = [costs[widest]] * (widest + 1 - tiles_from)
    return _beyond(costs, max_width, bool(tiles_from))


def measure_native(backend: Backend, max_width: int, max_threads: int) -> Calibration:
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
        backend.use_plan(ExecutionPlan(), final=False)
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
    """Everything `Calibration` holds, measured now (a few seconds), applied to `backend`."""
    caps = backend.capabilities
    if caps.native:
        return measure_native(backend, max_width, max_threads)
    backend.set_threads(max_threads)
    cal = Calibration(pass_cost=[], prefill_tokens_per_s=0.0)
    prefill, decode_kernels = STORED, (STORED,)
    if len(caps.kernels) > 1:
        backend.truncate(0)
        rates = cal.kernel_tokens_per_s = time_prefill_kernels(backend, caps.kernels)
        prefill = max(rates, key=lambda k: rates[k] / _margin(k))
        # The fastest copy may serve passes with logits too, where it is resident (measured below).
        copy = max((k for k in rates if k != STORED), key=rates.get, default=None)
        backend.use_plan(ExecutionPlan(decode=copy or STORED, prefill=prefill), final=False)
        if backend.memory().get("copies", 0):
            decode_kernels = (copy, STORED)  # the copy first, while it is resident
    else:
        backend.use_plan(ExecutionPlan(), final=False)
    backend.truncate(0)
    context = min(_CONTEXT, backend.max_len)
    cal.prefill_tokens_per_s = context / _median_time(
        lambda: (backend.truncate(0), backend.forward([0] * context, logits=False)), 1)
    counts = sorted({1, max_threads}) if caps.threads else [max_threads]

    def plan(threads: int, decode: str) -> ExecutionPlan:
        return ExecutionPlan([threads] * (max_width + 1) + [max_threads] if caps.threads else [], decode, prefill)

    def timed(threads: int, decode: str, width: int) -> list[float]:
        backend.set_threads(threads)
        backend.use_plan(plan(threads, decode), final=False)
        return measure_pass_costs(backend, width)

    # Every pass with logits runs one kernel (engine/execution/plan.py says why): the one that
    # one-token passes, the most frequent, run fastest with.
    decode = STORED
    if len(decode_kernels) > 1:
        one = {(n, k): timed(n, k, 1)[1] * _margin(k) for k, n in itertools.product(decode_kernels, counts)}
        decode = min(one, key=one.get)[1]
    # Each width gets the thread count measured fastest: one-token passes on a small CPU are
    # fastest on one thread, wide ones on all cores.
    costs = {n: timed(n, decode, max_width) for n in counts}
    best = [min(counts, key=lambda n: costs[n][w]) for w in range(max_width + 1)]
    # Prefill chunks (wider than any decoding pass) run on all cores.
    cal.plan = ExecutionPlan(best + [max_threads] if caps.threads else [], decode, prefill)
    cal.pass_cost = [costs[n][w] for w, n in enumerate(best)]
    backend.set_threads(max_threads)
    cal.apply(backend)
    return cal


def _margin(kernel: str) -> float:
    """How much faster than the stored format a kernel must measure to be chosen."""
    return 1.0 if kernel == STORED else COPY_MARGIN


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
            if not backend.capabilities.native:  # C passes have nothing to set up
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
