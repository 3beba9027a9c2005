"""`lsp_server bench [PATH...]`: every decoding mode side by side, on the user's own code.

Each task is run in every mode, modes interleaved per task (in a rotating order) so machine
drift hits all of them alike. Before each timed completion the prompt is prefilled untimed, so
every mode starts from the same warm KV cache (as the server's common-prefix reuse gives it while
the user types) and the times compare decoding alone. With --cold each task is also timed from
an empty cache, prefill included (the first request at a new spot of a file), peers alike. A completion is up to --max-new-tokens
greedy tokens with no stop rule but end-of-text, the same in every mode, so outputs compare
token for token.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engine import Engine, EngineError, Request
from engine.models import DTYPES, resolve
from lsp_server.bench_peers import HF_LOOKUP_TOKENS, PEER_MODES, PeerUnavailable, check_peer, load_peers
from lsp_server.bench_report import Run, format_table, plot, summarize, write_json
from lsp_server.bench_sources import SOURCE_SUFFIXES, SourceFile, Sources, find_sources
from lsp_server.bench_tasks import WORKLOADS, Task, build_tasks, prompt_tokens
from lsp_server.engines import open_engine
from lsp_server.options import add_model_arguments, model_settings

ENGINE_MODES = ("ar", "lookup", "draft", "hybrid")
_COPY_BYTES = 256 * 2**20


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure completion latency of every decoding mode on your code",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", type=Path, nargs="*", default=[Path(".")],
                   help="source files or folders (default: the current directory)")
    add_model_arguments(p)
    p.add_argument("--modes", default=None,
                   help=f"comma-separated, from {','.join(ENGINE_MODES + PEER_MODES)} "
                        "(default: every mode available here; ar always runs, it is the baseline)")
    p.add_argument("--tasks", type=int, default=20, help="tasks per workload (default 20)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per completion (default 48)")
    p.add_argument("--seed", type=int, default=0, help="picks the cursor positions (default 0)")
    p.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    p.add_argument("--context-chars", type=int, default=2048,
                   help="characters of the file before the cursor in each prompt (default 2048)")
    p.add_argument("--cold", action="store_true",
                   help="also time every task from an empty cache, prefill included")
    p.add_argument("--json", type=Path, default=None, help="write the numbers to this file")
    p.add_argument("--plot", type=Path, default=None, help="draw latency per mode to this .png")


def _fail(message: str) -> SystemExit:
    return SystemExit(f"lsp_server bench: {message}")


def _say(message: str) -> None:
    print(f"lsp_server bench: {message}", file=sys.stderr)


def _requested_modes(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The modes to run (ar first) and whether the user named them."""
    if args.modes is None:
        modes = ["ar", "lookup", *(["draft"] if args.draft else []), "hybrid", *PEER_MODES]
        return modes, False
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ENGINE_MODES + PEER_MODES:
            raise _fail(f"unknown mode {mode!r} (choose from {', '.join(ENGINE_MODES + PEER_MODES)})")
    if "draft" in modes and not args.draft:
        raise _fail("mode 'draft' needs a draft model: give --draft")
    return ["ar"] + [m for m in dict.fromkeys(modes) if m != "ar"], True


def _available_modes(args: argparse.Namespace, model_path: Path) -> list[str]:
    modes, named = _requested_modes(args)
    draft = Path(args.draft) if args.draft else None
    kept = []
    for mode in modes:
        try:
            if mode in PEER_MODES:
                check_peer(mode, model_path, draft)
            kept.append(mode)
        except PeerUnavailable as exc:
            if named:
                raise _fail(str(exc)) from None
            _say(f"skipping a peer: {exc}")
    return kept


def _tasks(args: argparse.Namespace) -> tuple[list[Task], dict[str, list[int]], Sources]:
    sources = find_sources(args.paths)
    if sources.skipped:
        _say("skipped " + ", ".join(f"{n} {why}" for why, n in sorted(sources.skipped.items()))
             + " file(s)")
    if not sources.files:
        raise _fail(f"no source files found under {', '.join(map(str, args.paths))} (looked for "
                    f"{' '.join(sorted(SOURCE_SUFFIXES))}; .gitignore'd files are skipped)")
    tasks: list[Task] = []
    ids: dict[str, list[int]] = {}
    for workload in WORKLOADS if args.workload == "all" else (args.workload,):
        found = build_tasks(sources.files, workload, args.tasks, args.seed, args.context_chars)
        if not found:
            _say(f"no {workload} tasks found in these files")
            continue
        ids[workload] = list(range(len(tasks), len(tasks) + len(found)))
        tasks += found
    if not tasks:
        raise _fail("no completion tasks could be built from these files")
    return tasks, ids, sources


def copy_bandwidth_gb_s(repeats: int = 3) -> float:
    """This machine's memory copy rate: bytes read (and written) per second, best of a few."""
    src = np.ones(_COPY_BYTES // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return _COPY_BYTES / best / 1e9


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Progress:
    """A bar on stderr: redrawn in place on a terminal, one line per tenth otherwise."""

    def __init__(self, total: int, width: int = 30):
        self.total, self.width, self.done = total, width, 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        filled = self.width * self.done // self.total
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            print(f"\r{line:<80}", end="\n" if self.done == self.total else "", file=sys.stderr, flush=True)
        elif self.done * 10 // self.total != (self.done - 1) * 10 // self.total:
            print(line, file=sys.stderr, flush=True)


class _Documents:
    """The run's other files as prompt-lookup documents, as the server has the open files.
    The task's own file is left out: its text after the cursor is what we ask for."""

    def __init__(self, engine: Engine, sources: list[SourceFile]):
        self.engine = engine
        self.tokens = {str(s.path): engine.tokenizer.encode(s.text) for s in sources}
        for doc_id, tokens in self.tokens.items():
            engine.lookup.set_document(doc_id, tokens)
        self.hidden: str | None = None

    def hide(self, path: Path) -> None:
        if self.hidden is not None:
            self.engine.lookup.set_document(self.hidden, self.tokens[self.hidden])
        self.hidden = str(path)
        self.engine.lookup.remove_document(self.hidden)


def _engine_run(engine: Engine, mode: str, prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
    if cold:
        engine.forget_cache()
    else:
        engine.prefill(prompt)  # the untimed prefill
    start = time.perf_counter()
    result = engine.complete(prompt, Request(max_new_tokens), mode)
    ms = (time.perf_counter() - start) * 1000
    s = result.stats
    emitted = s.new_tokens + (s.stop_reason == "eos")
    return Run(-1, mode, result.tokens, result.text, ms, emitted, s.target_passes, s.drafted, s.accepted)


def run(args: argparse.Namespace) -> int:
    if args.tasks < 1 or args.max_new_tokens < 1:
        raise _fail("--tasks and --max-new-tokens must be at least 1")
    if getattr(args, "endpoint", None):
        from lsp_server.bench_remote import run_remote

        return run_remote(args, _tasks, _say, _fail, Progress, _cpu_name)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise _fail("--plot needs matplotlib, which is not installed: pip install 'draftline[bench]'")
    try:
        model_path = resolve(args.model)
        modes = _available_modes(args, model_path)
        tasks, workload_ids, sources = _tasks(args)
        started = time.perf_counter()
        engine = open_engine(model_settings(args))
        dtype = engine.dtype
        eos = frozenset(engine.tokenizer.eos_ids)
        peers = load_peers([m for m in modes if m in PEER_MODES], model_path,
                           Path(args.draft) if args.draft else None, DTYPES[dtype], eos)
    except EngineError as exc:
        raise _fail(str(exc)) from None
    _say(f"loaded in {time.perf_counter() - started:.1f} s (not timed); {len(tasks)} tasks x "
         f"{len(modes)} modes: {', '.join(modes)}")
    documents = _Documents(engine, sources.files)
    prompts = [prompt_tokens(t, engine.tokenizer) for t in tasks]

    def once(mode: str, prompt: list[int], max_new_tokens: int, cold: bool) -> Run:
        if mode in peers:
            return peers[mode](prompt, max_new_tokens, cold)
        return _engine_run(engine, mode, prompt, max_new_tokens, cold)

    caches = (False, True) if args.cold else (False,)
    documents.hide(tasks[0].path)
    for mode in modes:  # warm-up: first calls pay for allocations and lazy initialisation
        for cold in caches:
            once(mode, prompts[0], min(8, args.max_new_tokens), cold)
    runs: list[Run] = []
    progress = Progress(len(tasks) * len(modes) * len(caches))
    for i, (task, prompt) in enumerate(zip(tasks, prompts)):
        documents.hide(task.path)
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            for cold in caches:
                r = once(mode, prompt, args.max_new_tokens, cold)
                r.task, r.mode, r.text, r.cold = i, mode, engine.tokenizer.decode(r.tokens), cold
                runs.append(r)
                progress.step(f"{task.workload} {mode}{' cold' if cold else ''}")

    weight_bytes = getattr(engine.target, "weight_bytes", None)
    report = {
        "model": {"target": str(model_path), "draft": args.draft, "dtype": dtype,
                  "backend": type(engine.target).__name__, "weight_bytes": weight_bytes,
                  # the C decoder of int4/int8 models (engine/native/), where it runs
                  "native_decoder": getattr(engine.target, "native", None) is not None,
                  "calibration": engine.calibration.as_dict() if engine.calibration else None},
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "copy_bandwidth_gb_s": round(copy_bandwidth_gb_s(), 2)},
        "settings": {"modes": modes, "tasks_per_workload": args.tasks, "max_new_tokens": args.max_new_tokens,
                     "seed": args.seed, "context_chars": args.context_chars,
                     "hf_prompt_lookup_num_tokens": HF_LOOKUP_TOKENS if "hf-lookup" in modes else None},
        "sources": {"files": len(sources.files), "skipped": sources.skipped},
    }
    references = {i: t.reference for i, t in enumerate(tasks)}
    for key, cold in (("workloads", False), ("cold_workloads", True))[:len(caches)]:
        report[key] = summarize([r for r in runs if r.cold == cold], workload_ids, references,
                                modes, weight_bytes)
    sys.stdout.write(format_table(report) + "\n")  # the report is the command's output
    if args.json is not None:
        write_json(report, args.json)
    if args.plot is not None:
        plot(runs, workload_ids, modes, args.plot)
    return 0

