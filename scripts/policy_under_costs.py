"""Tokens per target pass that each drafting mode reaches on the bench's tasks when the policy
is given another machine's costs: what the drafters and the policy do where wide passes are
nearly free (a GPU), measured on a machine without one. Only the choices follow the given
costs; the passes run here, so the times mean nothing and are not reported. Every mode's
output is checked against plain decoding.

    .venv/bin/python scripts/policy_under_costs.py CODE_DIR [--draft qwen2.5-coder-0.5b]
        [--width-cost 0.005] [--draft-cost 0.1] [--tasks 8]

--width-cost: what each token more in a pass adds, in one-token passes; --draft-cost: a draft
token, in one-token passes (a GPU beside a 3x smaller draft: about 0.005 and 0.1).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from engine.api import Request
from engine.draft_length import PassCosts
from engine.drafters.hybrid import Hybrid
from engine.engine import Engine
from lsp_server.bench.sources import find_sources
from lsp_server.bench.tasks import WORKLOADS, build_tasks, prompt_tokens


def _given_draft_time(costs: PassCosts) -> None:
    """Under the given costs, runs are charged the given draft cost: the ratio of a run's real
    time to it is learnt from this machine's passes, which would bring this machine's back."""
    propose = Hybrid.propose

    def charged_as_given(self: Hybrid, *args, **kwargs):
        if self.costs is costs:
            self.draft_time_ratio = 1.0
        return propose(self, *args, **kwargs)

    Hybrid.propose = charged_as_given


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("code", type=Path)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--width-cost", type=float, default=0.005)
    parser.add_argument("--draft-cost", type=float, default=0.1)
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args()
    engine = Engine.load(args.model, draft=args.draft)
    here = engine.costs
    one = here.verify(1)
    given = PassCosts([0.0] + [one * (1 + args.width_cost * w) for w in range(engine.K_MAX + 2)],
                      draft_cost=args.draft_cost * one)
    _given_draft_time(given)
    sources = find_sources([args.code]).files
    for source in sources:
        engine.set_document(str(source.path), source.text)
    for workload in WORKLOADS:
        tasks = build_tasks(sources, workload, args.tasks, seed=0)
        prompts = [prompt_tokens(task, engine.tokenizer) for task in tasks]
        for costs_name, costs in (("here", here), ("given", given)):
            engine.costs = costs
            for mode in ("lookup", "draft", "hybrid"):
                tokens = passes = identical = 0
                for task, prompt in zip(tasks, prompts):
                    engine.remove_document(str(task.path))  # its continuation is what we ask for
                    engine.prefill(prompt)
                    result = engine.complete(prompt, Request(32), mode)
                    identical += result.tokens == engine.complete(prompt, Request(32), "ar").tokens
                    tokens += result.stats.new_tokens
                    passes += result.stats.target_passes
                    engine.set_document(str(task.path), task.prefix + task.suffix)
                print(f"{workload:10} {costs_name:5} {mode:6} {tokens / max(passes, 1):.2f} tokens/pass, "
                      f"{identical}/{len(tasks)} identical to ar", flush=True)


if __name__ == "__main__":
    main()
