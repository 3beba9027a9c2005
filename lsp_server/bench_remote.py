"""`lsp_server bench --endpoint URL [--model NAME]`: the same tasks, timed through the remote
path, reported in the same table and JSON shapes as local decoding (mode "remote"), so a team
can compare its server with local decoding on its own code.

As locally, each task's prompt is sent once untimed first (one token), so the server's prefix
cache holds it, as it does while a user types; then the completion is timed from the request to
the end of its stream: up to --max-new-tokens tokens, no stop rule but end-of-text. Tokens are
the server's count (its usage report, else one per streamed event).
"""
from __future__ import annotations

import argparse
import os
import sys

from engine import EngineError, Request
from lsp_server.bench_report import Run, format_table, summarize, write_json
from lsp_server.bench_tasks import prompt_tokens
from lsp_server.engines import open_engine
from lsp_server.options import model_settings

MODE = "remote"


def run_remote(args: argparse.Namespace, tasks_for, say, fail, progress_cls, cpu_name) -> int:
    """bench.run's remote branch (bench passes its own helpers, to keep one way of doing each)."""
    if args.cold or args.modes or args.plot:
        raise fail("--cold, --modes and --plot are for local decoding; with --endpoint the server decodes")
    try:
        engine = open_engine(model_settings(args))
        engine.connect()
    except EngineError as exc:
        raise fail(str(exc)) from None
    tasks, workload_ids, sources = tasks_for(args)
    say(f"{engine.endpoint.base} serves {engine.served.model}; {len(tasks)} tasks")
    prompts = [engine.prompt_text(prompt_tokens(t, engine.tokenizer)) for t in tasks]
    runs: list[Run] = []
    progress = progress_cls(len(tasks))
    try:
        engine.complete(prompts[0], Request(min(8, args.max_new_tokens)))  # warm-up
        for i, (task, prompt) in enumerate(zip(tasks, prompts)):
            engine.complete(prompt, Request(1))  # untimed: the server caches the prompt
            result = engine.complete(prompt, Request(args.max_new_tokens))
            s = result.stats
            tokens = [0] * s.new_tokens  # the server's count; ids are not streamed
            runs.append(Run(i, MODE, tokens, result.text, s.total_ms, s.new_tokens, None))
            progress.step(f"{task.workload} {MODE}")
    except EngineError as exc:
        raise fail(str(exc)) from None
    report = {
        "model": {"target": engine.served.model, "endpoint": engine.endpoint.base, "draft": None,
                  "dtype": "served", "backend": "remote", "weight_bytes": None, "calibration": None},
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "client_only": True},
        "settings": {"modes": [MODE], "tasks_per_workload": args.tasks, "max_new_tokens": args.max_new_tokens,
                     "seed": args.seed, "context_chars": args.context_chars},
        "sources": {"files": len(sources.files), "skipped": sources.skipped},
        "workloads": summarize(runs, workload_ids, {i: t.reference for i, t in enumerate(tasks)},
                               [MODE], None, baseline=MODE),
    }
    sys.stdout.write(format_table(report) + "\n")  # the report is the command's output
    if args.json is not None:
        write_json(report, args.json)
    return 0
