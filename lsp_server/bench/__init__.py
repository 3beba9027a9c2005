"""`lsp_server bench [PATH...]`: every decoding mode side by side, on the user's own code.

Each task is run in every mode, modes interleaved per task (in a rotating order) so machine
drift hits all of them alike (runner.py). Before each timed completion the prompt is prefilled
untimed, so every mode starts from the same warm KV cache (as the server's common-prefix reuse
gives it while the user types) and the times compare decoding alone. With --cold each task is
also timed from an empty cache, prefill included (the first request at a new spot of a file),
peers alike. A completion is up to --max-new-tokens greedy tokens with no stop rule but
end-of-text, the same in every mode, so outputs compare token for token. With --endpoint the
same tasks go to a shared server (mode "remote").
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time
from pathlib import Path

from engine.api import MODES
from engine.errors import EngineError
from lsp_server.bench import kernels, next_edits
from lsp_server.bench.machine import copy_bandwidth_gb_s, cpu_name, read_bandwidth_gb_s
from lsp_server.bench.llama_server import LlamaServer, ServerUnavailable
from lsp_server.bench.lsp_client import setting
from lsp_server.bench.pause_editors import DraftlineEditor, LlamaVimEditor
from lsp_server.bench.pauses import User, ask_whole_windows, cross_file_walks, format_pauses, run_pauses, walks
from lsp_server.bench.pauses import as_json as pauses_json
from lsp_server.bench.pauses import summarize as summarize_pauses
from lsp_server.bench.peers import HF_LOOKUP_TOKENS, PEER_MODES, PeerUnavailable, check_peer, load_peers
from lsp_server.bench.report import format_table, plot, prefill_rates, summarize, write_json
from lsp_server.bench.quality import CONTEXTS, format_quality, line_tasks, score
from lsp_server.bench.quality import summarize as summarize_quality
from lsp_server.bench.runner import Contender, EngineMode, Progress, Workspace, rememberable, run_all
from lsp_server.bench.sources import SOURCE_SUFFIXES, Sources, find_sources
from lsp_server.bench.tasks import WORKLOADS, Task, build_tasks, prompt_tokens
from lsp_server.engines import open_engine
from lsp_server.options import add_model_arguments, model_flags, model_settings

REMOTE = "remote"  # the mode of a shared server's runs
PAUSE_CONTENDERS = ("draftline", "draftline-alone", "llama-server")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure completion latency of every decoding mode on your code",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", type=Path, nargs="*", default=[Path(".")],
                   help="source files or folders (default: the current directory)")
    add_model_arguments(p)
    p.add_argument("--modes", default=None,
                   help=f"comma-separated, from {','.join(MODES + PEER_MODES)} "
                        "(default: every mode available here; ar always runs, it is the baseline)")
    p.add_argument("--tasks", type=int, default=20, help="tasks per workload (default 20)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per completion (default 48)")
    p.add_argument("--seed", type=int, default=0, help="picks the cursor positions (default 0)")
    p.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    p.add_argument("--context-chars", type=int, default=2048,
                   help="characters of the file before the cursor in each prompt (default 2048)")
    p.add_argument("--cold", action="store_true",
                   help="also time every task from an empty cache, prefill included")
    p.add_argument("--host-work", action="store_true",
                   help="also measure the host's work per target pass, decoding each task again against the "
                        "recorded output with passes that cost nothing (host_work.py)")
    p.add_argument("--quality", type=int, default=0, metavar="N",
                   help="also score N next-line completions of your code per workload (lines using a name "
                        "another file defines, other lines): exact match, edit similarity, through the "
                        "server's suggestion path, in every mode")
    p.add_argument("--pauses", type=int, default=0, metavar="N",
                   help="also replay N pauses of someone writing your files line by line on one clock for "
                        "every contender: the stdio server as Neovim asks it, llama-server as llama.vim asks it "
                        "(pauses.py); scored by what is on screen at each moment of a pause")
    p.add_argument("--pause-s", type=float, default=1.5, help="with --pauses: each pause's length (default 1.5)")
    p.add_argument("--key-ms", type=float, default=120, help="with --pauses: time between keys (default 120)")
    p.add_argument("--read-s", type=float, default=0.0,
                   help="with --pauses: time between opening a file and its first key (default 0)")
    p.add_argument("--pause-lines", choices=("all", "cross-file"), default="all",
                   help="with --pauses: 4 pauses per file at lines of code as they come (all, the default), or "
                        "one pause per walk at a line using a name another file defines, the file opened just "
                        "before it (cross-file: what the repository context is for)")
    p.add_argument("--pause-contenders", default="draftline,llama-server", type=_pause_contenders,
                   help=f"with --pauses: comma-separated, from {','.join(PAUSE_CONTENDERS)} (draftline-alone: "
                        "our server given no workspace, the file alone); default draftline,llama-server")
    p.add_argument("--whole-window", action="store_true",
                   help="with --pauses: also ask our server at each pause, after the replay, for what its whole "
                        "window suggests there (coldPrefillMs 0, the answer waited for): what the screen could show")
    p.add_argument("--setting", action="append", default=[], type=setting, metavar="KEY=JSON",
                   help="with --pauses: a setting the editor sends our stdio server, e.g. --setting coldPrefillMs=0")
    p.add_argument("--context", choices=("repo", "none", "both"), default="both",
                   help="with --quality: with the repository context, without it, or both (default)")
    p.add_argument("--next-edit", action="append", default=[], metavar="PACKAGE==OLD,NEW",
                   help="instead, the next-edit workload: real repeated edits between two releases of a package "
                        "(sdists fetched with pip), --tasks of them and --none-due no-edit-due cases")
    p.add_argument("--none-due", type=int, default=None, metavar="N",
                   help="with --next-edit: no-edit-due cases (default: as many as --tasks)")
    p.add_argument("--through-server", action="store_true",
                   help="with --next-edit: also ask each case through the stdio server as Neovim asks it (an "
                        "inline request at the pause, the next edit 600 ms later), timed from the pause")
    p.add_argument("--kernels", action="store_true",
                   help="probe this CPU's int8 peak and read rate, then time the native decoder's prefill and passes "
                        "of 1-16 tokens against them (lsp_server/bench/kernels.py)")
    p.add_argument("--json", type=Path, default=None, help="write the numbers to this file")
    p.add_argument("--plot", type=Path, default=None, help="draw latency per mode to this .png")


def _pause_contenders(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in PAUSE_CONTENDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give names from {','.join(PAUSE_CONTENDERS)}")
    return list(dict.fromkeys(names))


def _fail(message: str) -> SystemExit:
    return SystemExit(f"lsp_server bench: {message}")


def _say(message: str) -> None:
    print(f"lsp_server bench: {message}", file=sys.stderr)


def _requested_modes(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The modes to run (ar first) and whether the user named them."""
    if args.endpoint:
        if args.cold or args.modes or args.plot:
            raise _fail("--cold, --modes and --plot are for local decoding; with --endpoint the server decodes")
        return [REMOTE], True
    if args.modes is None:
        return [m for m in MODES if m != "draft" or args.draft] + list(PEER_MODES), False
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES + PEER_MODES:
            raise _fail(f"unknown mode {mode!r} (choose from {', '.join(MODES + PEER_MODES)})")
    if "draft" in modes and not args.draft:
        raise _fail("mode 'draft' needs a draft model: give --draft")
    return ["ar"] + [m for m in dict.fromkeys(modes) if m != "ar"], True


def _available_modes(args: argparse.Namespace, model_path: Path | None) -> list[str]:
    modes, named = _requested_modes(args)
    draft = _draft_path(args)
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


def _sources(args: argparse.Namespace) -> Sources:
    sources = find_sources(args.paths)
    if sources.skipped:
        _say("skipped " + ", ".join(f"{n} {why}" for why, n in sorted(sources.skipped.items()))
             + " file(s)")
    if not sources.files:
        raise _fail(f"no source files found under {', '.join(map(str, args.paths))} (looked for "
                    f"{' '.join(sorted(SOURCE_SUFFIXES))}; .gitignore'd files are skipped)")
    return sources


def _tasks(args: argparse.Namespace, sources: Sources) -> tuple[list[Task], dict[str, list[int]]]:
    tasks: list[Task] = []
    ids: dict[str, list[int]] = {}
    for workload in WORKLOADS if args.workload == "all" else (args.workload,):
        found = build_tasks(sources.files, workload, args.tasks, args.seed, args.context_chars)
        if not found and args.tasks:
            _say(f"no {workload} tasks found in these files")
            continue
        ids[workload] = list(range(len(tasks), len(tasks) + len(found)))
        tasks += found
    if not tasks and args.tasks:
        raise _fail("no completion tasks could be built from these files")
    return tasks, ids


def _model_path(args: argparse.Namespace) -> Path | None:
    """The local model file the peers load (None with --endpoint: the server has the model)."""
    if args.endpoint:
        return None
    from engine.models import resolve

    return resolve(args.model)


def _draft_path(args: argparse.Namespace) -> Path | None:
    """The draft model file or folder the peers load: --draft as a path or a known name (None
    without one, and for `embedded`, which lives in the engine)."""
    if not args.draft or args.draft == "embedded":
        return None
    from engine.models import resolve

    return resolve(args.draft)


def _pause_replay(args: argparse.Namespace, files: list, model_path: Path) -> dict:
    """The pause replay (pauses.py): our server, with the workspace and without it, and
    llama-server where it can run, as --pause-contenders names them."""
    pick = cross_file_walks if args.pause_lines == "cross-file" else walks
    chosen = pick(files, args.pauses, args.seed)
    user = _user(args)
    if not chosen:
        raise _fail("--pauses needs files of at least 60 lines" if args.pause_lines == "all"
                    else "--pause-lines cross-file found no line using a name another file defines")
    root = Path(os.path.commonpath([str(w.path.resolve().parent) for w in chosen]))
    server_cmd = [sys.executable, "-m", "lsp_server.cli", "--stdio", *model_flags(args)]

    def ours(name: str, settings: dict) -> DraftlineEditor:  # draftline-alone: no workspace
        return DraftlineEditor(server_cmd, root if name == "draftline" else None, settings, name)

    editors, server = [], None
    try:
        for name in args.pause_contenders:
            if name == "llama-server":
                try:
                    check_peer("llama-server", model_path, None)
                    server = LlamaServer(model_path, len(os.sched_getaffinity(0)))
                    editors.append(LlamaVimEditor(server))
                except (PeerUnavailable, ServerUnavailable) as exc:
                    _say(f"pauses without llama-server: {exc}")
            else:
                editors.append(ours(name, dict(args.setting)))
        pauses = run_pauses(editors, chosen, user)
        counters = {e.name: e.stats() for e in editors if isinstance(e, DraftlineEditor)}
    finally:
        for editor in editors:
            editor.stop()
        if server is not None:
            server.close()
    if args.whole_window:
        for name in counters:
            whole = ours(name, dict(args.setting) | {"coldPrefillMs": 0})
            try:
                ask_whole_windows(whole, [p for p in pauses if p.contender == name], chosen)
            finally:
                whole.stop()
    summary = summarize_pauses(pauses, user)
    for name, numbers in counters.items():
        summary[name]["window_tokens"] = numbers.get("windowTokens")
    return {"summary": summary, "runs": pauses_json(pauses), "server_counters": counters,
            "files": [str(w.path) for w in chosen], "user": dataclasses.asdict(user),
            "server_settings": dict(args.setting), "pause_lines": args.pause_lines,
            "contenders": args.pause_contenders}


def _user(args: argparse.Namespace) -> User:
    return User(args.pause_s, args.key_ms / 1000, args.read_s)


def run(args: argparse.Namespace) -> int:
    if args.kernels:
        return kernels.run(args)
    if args.next_edit:
        return next_edits.run(args)
    if args.through_server:
        raise _fail("--through-server is for the next-edit workload: give --next-edit")
    if min(args.tasks, args.quality, args.pauses) < 0 or args.max_new_tokens < 1 or \
            args.tasks + args.quality + args.pauses == 0:
        raise _fail("--tasks, --quality and --pauses must be at least 0, one of them positive; "
                    "--max-new-tokens at least 1")
    if args.pause_s <= 0 or args.key_ms < 0 or args.read_s < 0:
        raise _fail("--pause-s must be positive, --key-ms and --read-s at least 0")
    if (args.pauses or args.host_work) and args.endpoint:
        raise _fail("--pauses and --host-work run locally; they do not take --endpoint")
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise _fail("--plot needs matplotlib, which is not installed: pip install 'draftline[bench]'")
    try:
        model_path = _model_path(args)
        modes = _available_modes(args, model_path)
        sources = _sources(args)
        tasks, workload_ids = _tasks(args, sources)
        lines = line_tasks(sources.files, args.quality, args.seed)
        contexts = list(CONTEXTS) if args.context == "both" else [args.context]
        quality_lines = sum(map(len, lines.values()))
        started = time.perf_counter()
        engine = open_engine(model_settings(args))
        if engine.problem:
            raise EngineError(engine.problem)
        described = engine.describe()
        contenders: list[Contender] = [EngineMode(engine, m) for m in modes if m not in PEER_MODES]
        peers = [m for m in modes if m in PEER_MODES]
        if peers and tasks:
            from engine.models import torch_dtype

            contenders += load_peers(peers, model_path, _draft_path(args),
                                     torch_dtype(described["dtype"]), frozenset(engine.tokenizer.eos_ids),
                                     engine.tokenizer.decode)
    except EngineError as exc:
        raise _fail(str(exc)) from None
    _say(f"loaded in {time.perf_counter() - started:.1f} s (not timed); {len(tasks)} tasks x "
         f"{len(contenders)} modes: {', '.join(c.mode for c in contenders)}"
         + (f"; {quality_lines} quality lines" if quality_lines else ""))
    remote = described["kind"] == "remote"
    report = {
        "model": {"target": described.get("served_model") if remote else str(model_path), "draft": args.draft}
        | described,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count()} | (
            {"client_only": True} if remote else
            {"copy_bandwidth_gb_s": round(copy_bandwidth_gb_s(), 2), "read_bandwidth_gb_s": round(read_bandwidth_gb_s(), 2)}),
        "settings": {"modes": [c.mode for c in contenders], "tasks_per_workload": args.tasks,
                     "max_new_tokens": args.max_new_tokens, "seed": args.seed, "context_chars": args.context_chars,
                     "pauses": args.pauses,
                     "quality_lines": {w: len(t) for w, t in lines.items()}, "quality_contexts": contexts,
                     "remembered_outputs": sum(rememberable(tasks)),
                     "hf_prompt_lookup_num_tokens": HF_LOOKUP_TOKENS if "hf-lookup" in modes else None},
        "sources": {"files": len(sources.files), "skipped": sources.skipped},
    }
    caches = (False, True) if args.cold else (False,)
    engine_modes = [c.mode for c in contenders if c.mode not in PEER_MODES]
    progress = Progress(len(tasks) * len(contenders) * len(caches) + quality_lines * len(contexts) * len(engine_modes))
    workspace = Workspace(engine, sources.files, Path.cwd())
    try:
        if tasks:
            prompts = [prompt_tokens(t, engine.tokenizer) for t in tasks]
            runs = run_all(contenders, tasks, prompts, workspace, args.max_new_tokens, caches, progress)
            if args.cold:
                report["prefill_tokens_per_s"] = prefill_rates(runs, [len(p) for p in prompts])
            if args.host_work:
                from lsp_server.bench import host_work  # a local engine's: not for an --endpoint run

                outputs = {r.task: r.tokens for r in runs if r.mode == "ar" and not r.cold}
                report["host_work"] = host_work.measure(engine.tokenizer, sources.files, Path.cwd(), tasks, prompts,
                                                        [outputs[i] for i in range(len(tasks))], args.max_new_tokens)
            references = {i: t.reference for i, t in enumerate(tasks)}
            for key, cold in (("workloads", False), ("cold_workloads", True))[:len(caches)]:
                report[key] = summarize([r for r in runs if r.cold == cold], workload_ids, references,
                                        [c.mode for c in contenders], described.get("weight_bytes"),
                                        baseline=modes[0])
        if quality_lines:
            scored = score(engine, engine_modes, lines, contexts, workspace, progress.step)
            report["quality"] = summarize_quality(scored, engine_modes, baseline=modes[0])
    except EngineError as exc:  # a remote server that stopped answering
        raise _fail(str(exc)) from None
    if args.pauses:
        report["pauses"] = _pause_replay(args, sources.files, model_path)
    if not remote:
        report["model"]["pass_cost_learned"] = engine.describe()["pass_cost"]
    table = format_table(report) if tasks else ""
    if "host_work" in report:
        from lsp_server.bench import host_work

        table += host_work.format_host_work(report["host_work"], engine.tokenizer.vocab_size)
    if quality_lines:
        table += format_quality(report["quality"])
    if args.pauses:
        table += format_pauses(report["pauses"]["summary"], _user(args))
    sys.stdout.write(table.lstrip("\n") + "\n")  # the report is the command's output
    if args.json is not None:
        write_json(report, args.json)
    if args.plot is not None and tasks:
        plot(runs, workload_ids, [c.mode for c in contenders], args.plot)
    return 0
