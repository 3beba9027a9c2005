"""`lsp_server`: the stdio language server (`--stdio`), `complete`, `edit`, `fetch` and `bench`."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from lsp_server import bench, edit_command
from lsp_server.options import BY_NAME, add_mode_argument, add_model_arguments, model_settings


def _complete_parser(sub) -> None:
    p = sub.add_parser("complete", help="print the suggestion an editor would show at a position")
    p.add_argument("file", type=Path)
    p.add_argument("--line", type=int, required=True, help="0-based line")
    p.add_argument("--col", type=int, required=True,
                   help="0-based column in UTF-16 code units, as LSP counts (characters outside the BMP count 2)")
    p.add_argument("--context", type=Path, nargs="*", default=[],
                   help="other files, as the editor's other open files (snippets, prompt lookup)")
    add_model_arguments(p)
    add_mode_argument(p)
    multiline = BY_NAME["multiline"]
    p.add_argument("--multiline", choices=multiline.choices, default=multiline.default, help=multiline.doc)
    p.add_argument("--raw", action="store_true",
                   help="the plain continuation of the text before the cursor: no suffix, stop "
                        "rule or clean-up (what `bench` times)")
    p.add_argument("--max-new-tokens", type=int, default=BY_NAME["maxTokens"].default)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _fetch_parser(sub) -> None:
    from engine.loading.catalog import DEFAULT, KNOWN

    p = sub.add_parser("fetch", help="fetch models by name now and measure their passes here (both are "
                                     "otherwise done on first use)",
                       description="Fetch known models into the user cache, verified, for offline use, and "
                                   "measure what their passes cost on this machine, so that a first start "
                                   "only reads it: " + "; ".join(f"{m.name}: {m.summary}" for m in KNOWN.values()))
    p.add_argument("names", nargs="*", default=[DEFAULT], help=f"model names or hf:... (default: {DEFAULT})")


def run_fetch(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from engine.loading.fetch import model_path
    from lsp_server.engines import open_engine

    for name in args.names:
        try:
            sys.stdout.write(f"{model_path(name)}\n")  # where it is: the command's output
        except EngineError as exc:
            raise SystemExit(f"lsp_server: {exc}") from None
        try:  # loading measures the pass costs and keeps them (engine/execution/calibrate.py), then the prefill rate
            open_engine({**model_settings(args), "model": name, "draft": None, "endpoint": None}).measure_prefill()
        except EngineError as exc:
            logging.getLogger("draftline").warning("%s: fetched, but it does not run here: %s", name, exc)
    return 0


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SystemExit(f"lsp_server: cannot read {path}: {exc.strerror}") from None
    if b"\0" in data[:8192]:
        raise SystemExit(f"lsp_server: {path} looks binary")
    return data.decode("utf-8", errors="replace")


def run_complete(args: argparse.Namespace) -> int:
    """What an editor shows at --line/--col (the server's own suggestion path), or with --raw
    the plain continuation."""
    import threading

    from engine.api import Request, Sampling
    from engine.errors import EngineError
    from lsp_server.serving.documents import Documents
    from lsp_server.engines import open_engine
    from lsp_server.options import Settings
    from lsp_server.completion.suggester import Suggester, cursor_at, plan

    text = _read_text(args.file)
    cursor = cursor_at(text, args.line, args.col)
    if cursor is None:
        lines = text.split("\n")
        where = f", line {args.line} has {len(lines[args.line])} characters" if 0 <= args.line < len(lines) else ""
        raise SystemExit(f"lsp_server: position {args.line}:{args.col} is outside the file ({len(lines)} lines{where})")
    if not cursor.prefix:
        raise SystemExit("lsp_server: nothing before the cursor to complete from")
    settings = Settings(mode=args.mode, maxTokens=args.max_new_tokens, multiline=args.multiline)
    documents = Documents(Path.cwd())  # the file and --context, as an editor's open documents
    uri = args.file.resolve().as_uri()
    documents.open(uri, text)
    where = plan(uri, text, args.line, args.col, settings, documents.name(uri))
    if where is None and not args.raw:
        raise SystemExit("lsp_server: no suggestion here: an editor shows none with text right of the cursor")
    for path in args.context:
        documents.open(path.resolve().as_uri(), _read_text(path))
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    try:
        engine = open_engine(model_settings(args))
        documents.use(engine)
        if args.raw:
            result = engine.complete(cursor.prefix, Request(args.max_new_tokens, sampling=sampling), args.mode)
            shown, stats = result.text, result.stats
        else:
            suggestion = Suggester(engine, documents).generate(where, settings, threading.Event(), sampling)
            shown, stats = suggestion.text, suggestion.stats
    except EngineError as exc:
        raise SystemExit(f"lsp_server: {exc}") from None
    # `complete` is a command-line tool, not the stdio server: its result goes to stdout.
    if args.json:
        sys.stdout.write(json.dumps({"text": shown, "ms": round(stats.total_ms, 1)} | stats.as_dict()) + "\n")
    else:
        sys.stdout.write(shown + "\n")
        print(_summary(engine.describe(), stats, args.mode), file=sys.stderr)
    return 0


def _summary(engine: dict, stats, mode: str) -> str:
    if engine["kind"] == "remote":  # the server decodes: passes and drafts are not seen here
        return (f"-- {stats.new_tokens} tokens in {stats.total_ms:.0f} ms from {engine['endpoint']}, "
                f"first after {stats.prefill_ms:.0f} ms")
    return (f"-- {stats.new_tokens} tokens in {stats.total_ms:.0f} ms ({mode}): "
            f"{stats.target_passes} target passes, {stats.tokens_per_pass:.2f} tokens/pass, "
            f"acceptance {stats.acceptance_rate:.0%}, prefill {stats.prefill_ms:.0f} ms")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="lsp_server", description=__doc__)
    parser.add_argument("--stdio", action="store_true", help="serve LSP over stdin/stdout")
    add_model_arguments(parser)
    sub = parser.add_subparsers(dest="command")
    _complete_parser(sub)
    edit_command.add_parser(sub)
    _fetch_parser(sub)
    bench.add_parser(sub)
    args = parser.parse_args(argv)
    for name, value in model_settings(args).items():  # flags given before or after the command
        setattr(args, name, value)
    if args.stdio and args.command is None:
        from lsp_server.serving import server

        return server.serve_stdio(args)
    if args.command == "complete":
        return run_complete(args)
    if args.command == "edit":
        return edit_command.run(args)
    if args.command == "fetch":
        return run_fetch(args)
    if args.command == "bench":
        return bench.run(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
