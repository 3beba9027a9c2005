"""Tokens per target pass that each drafting mode reaches on the bench's tasks when the policy
is given another machine's costs: what the drafters and the policy do where wide passes are
nearly free (a GPU), measured on a machine without one. Only the choices follow the given
costs; the passes run here, so this machine's times are not reported. Every mode's output is
checked against plain decoding.

    .venv/bin/python scripts/policy_under_costs.py CODE_DIR [--draft qwen2.5-coder-0.5b]
        [--width-cost 0.005] [--draft-cost 0.1] [--tasks 8]
    .venv/bin/python scripts/policy_under_costs.py CODE_DIR --costs gpu_shapes.json [--report FILE]

--width-cost: what each token more in a pass adds, in one-token passes; --draft-cost: a draft
token, in one-token passes (a GPU beside a 3x smaller draft: about 0.005 and 0.1).

--costs: the `policy` entries that scripts/gpu_shapes.py measured on a GPU, one per backend and
target shape, without the draft (mode lookup) and with the 0.5B's shape as draft (modes draft
and hybrid). Each runs with that entry's pass costs by width and draft cost (scaled to this
machine's one-token pass: only their ratios steer the policy), and also reports the expected
speedup over plain decoding on that GPU:

    speedup = tokens per pass * (c(1) + h_ar) / (c(w) + n_d * d + h_mode)

c(w): the GPU's pass over w tokens (ms, linear between the timed widths); w: the mean pass
width here (1 + drafted nodes per target pass); d: the draft's one-token pass there; n_d: the
draft model's passes (`forward` with logits) per target pass here; h_ar, h_mode: the host work
per target pass measured there for plain decoding and for the mode. Acceptance is this
machine's --model's (random weights there have none): a 7B entry is the 7B's costs over the
--model's acceptance. An entry whose backend verifies no token trees (`tree` false: exllamav2)
runs chains only.
--draft must be a model of its own (not `embedded`): its passes are counted at its `forward`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.api import Request
from engine.draft_length import PassCosts
from engine.drafters.hybrid import Hybrid
from engine import Engine
from engine.execution.backends.base import Backend
from lsp_server.bench.sources import find_sources
from lsp_server.bench.tasks import WORKLOADS, Task, build_tasks, prompt_tokens


@dataclass
class Setting:
    """Costs the policy runs under, the modes run with them and, from a GPU's measurements
    (gpu_shapes.py's `policy` entry), what the expected speedup is computed from."""
    name: str
    costs: PassCosts
    modes: tuple[str, ...]
    measured: dict | None = None
    chains_only: bool = False


def _given_draft_time(given: list[PassCosts]) -> None:
    """Under given costs, runs are charged the given draft cost: the ratio of a run's real
    time to it is learnt from this machine's passes, which would bring this machine's back."""
    propose = Hybrid.propose

    def charged_as_given(self: Hybrid, *args, **kwargs):
        if any(self.costs is costs for costs in given):
            self.draft_time_ratio = 1.0
        return propose(self, *args, **kwargs)

    Hybrid.propose = charged_as_given


def settings_from_file(path: Path, one: float) -> list[Setting]:
    """A Setting per `policy` entry of gpu_shapes.py's JSON; `one`: this machine's one-token pass."""
    settings = []
    for entry in json.loads(path.read_text())["policy"]:
        relative = entry["relative_pass_cost"]
        costs = PassCosts([0.0] + [one * r for r in relative], draft_cost=one * (entry["draft_cost"] or 0.0))
        name = f"{entry['backend']} {entry['target']}" + (f" + {entry['draft']}" if entry["draft"] else "")
        settings.append(Setting(name, costs, ("draft", "hybrid") if entry["draft"] else ("lookup",), entry,
                                chains_only=not entry["tree"]))
    return settings


def expected_speedup(measured: dict, tokens_per_pass: float, width: float, draft_passes: float, mode: str) -> float:
    """The docstring's formula, in the GPU's milliseconds."""
    pass_ms = measured["pass_ms"]
    c = float(np.interp(width, [int(w) for w in pass_ms], list(pass_ms.values())))
    host = measured["host_ms_per_pass"]
    spent = c + draft_passes * (measured["draft_pass_ms"] or 0.0) + host[mode]
    return tokens_per_pass * (pass_ms["1"] + host["ar"]) / spent


@contextmanager
def chain_passes(backend: Backend, on: bool) -> Iterator[None]:
    """While on, `backend` declares no tree attention, so decoding verifies one branch per pass
    as on a backend without it (exllamav2)."""
    if not on:
        yield
        return
    cls = type(backend)
    chains = property(lambda self: dataclasses.replace(cls.capabilities.__get__(self, cls), tree=False))
    backend.__class__ = type(f"{cls.__name__}ChainsOnly", (cls,), {"capabilities": chains})
    try:
        yield
    finally:
        backend.__class__ = cls


class DraftPasses:
    """Counts the draft model's passes with logits (`score`; its prefill passes have none)."""

    def __init__(self, engine: Engine):
        self.count = 0
        if engine.draft is None:
            return
        backend = engine.draft.backend
        score = backend.score

        def counted(tokens, parents=None):
            self.count += 1
            return score(tokens, parents)

        backend.score = counted


def run_mode(engine: Engine, setting: Setting, mode: str, tasks: list[Task], prompts: list[list[int]],
             plain: list[list[int]], request: Request, draft_passes: DraftPasses) -> dict:
    """One mode under one setting over a workload's tasks: its row."""
    tokens = passes = drafted = identical = 0
    draft_passes.count = 0
    with chain_passes(engine.target, setting.chains_only):
        for task, prompt, want in zip(tasks, prompts, plain):
            engine.remove_document(str(task.path))  # its continuation is what we ask for
            engine.prefill(prompt)
            result = engine.complete(prompt, request, mode)
            identical += result.tokens == want
            tokens += result.stats.new_tokens
            passes += result.stats.target_passes
            drafted += result.stats.drafted
            engine.set_document(str(task.path), task.prefix + task.suffix)
    passes = max(passes, 1)
    row = {"setting": setting.name, "mode": mode, "tasks": len(tasks), "identical": identical,
           "tokens_per_pass": round(tokens / passes, 3), "mean_width": round(1 + drafted / passes, 3),
           "draft_passes_per_pass": round(draft_passes.count / passes, 3)}
    if setting.measured is not None:
        row["expected_speedup"] = round(expected_speedup(setting.measured, tokens / passes, row["mean_width"],
                                                         row["draft_passes_per_pass"], mode), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("code", type=Path)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--width-cost", type=float, default=0.005)
    parser.add_argument("--draft-cost", type=float, default=0.1)
    parser.add_argument("--costs", type=Path, help="gpu_shapes.py's JSON: run its `policy` entries")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--report", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    if args.costs and args.draft == "embedded":
        parser.error("--costs counts a draft model's passes at its score: give a model of its own as --draft")
    engine = Engine.load(args.model, draft=args.draft)
    draft_passes = DraftPasses(engine)
    here = engine.costs
    one = here.verify(1)
    if args.costs:
        settings = settings_from_file(args.costs, one)
    else:
        flags = PassCosts([0.0] + [one * (1 + args.width_cost * w) for w in range(engine.K_MAX + 2)],
                          draft_cost=args.draft_cost * one)
        settings = [Setting("here", here, ("lookup", "draft", "hybrid")),
                    Setting("given", flags, ("lookup", "draft", "hybrid"))]
    _given_draft_time([s.costs for s in settings if s.costs is not here])
    request = Request(args.max_new_tokens)
    sources = find_sources([args.code]).files
    for source in sources:
        engine.set_document(str(source.path), source.text)
    rows = []
    for workload in WORKLOADS:
        tasks = build_tasks(sources, workload, args.tasks, seed=0)
        prompts = [prompt_tokens(task, engine.tokenizer) for task in tasks]
        plain = []
        for task, prompt in zip(tasks, prompts):
            engine.remove_document(str(task.path))
            plain.append(engine.complete(prompt, request, "ar").tokens)
            engine.set_document(str(task.path), task.prefix + task.suffix)
        for setting in settings:
            engine.costs = setting.costs
            for mode in setting.modes:
                row = {"workload": workload} | run_mode(engine, setting, mode, tasks, prompts, plain, request,
                                                         draft_passes)
                rows.append(row)
                speedup = f", expected speedup {row['expected_speedup']:.2f}x" if "expected_speedup" in row else ""
                print(f"{workload:10} {setting.name:22} {mode:6} {row['tokens_per_pass']:.2f} tokens/pass "
                      f"(width {row['mean_width']:.1f}, {row['draft_passes_per_pass']:.1f} draft passes){speedup}, "
                      f"{row['identical']}/{len(tasks)} identical to ar", flush=True)
    if args.report:
        args.report.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
