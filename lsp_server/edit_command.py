"""`lsp_server edit FILE --before OLD_FILE --line L --col C`: the next edit the server would
propose, the difference between OLD_FILE and FILE being the user's recent edits, and where it
is (lines from the cursor); with `--expect NEW_FILE`, whether it is exact (every change it
makes is one NEW_FILE makes)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsp_server.serving.files import read_text
from lsp_server.options import BY_NAME, add_mode_argument, add_model_arguments, model_settings

MAX_FILE_BYTES = 2_000_000


def add_parser(sub) -> None:
    p = sub.add_parser("edit", help="print the next edit proposed after the edits from --before to FILE")
    p.add_argument("file", type=Path)
    p.add_argument("--before", type=Path, required=True,
                   help="FILE before the recent edits: their difference is the edit history")
    p.add_argument("--line", type=int, required=True, help="0-based line of the cursor")
    p.add_argument("--col", type=int, required=True, help="0-based column in UTF-16 code units")
    p.add_argument("--edit-model", dest="editModel", default=BY_NAME["editModel"].default,
                   help=BY_NAME["editModel"].doc)
    add_model_arguments(p)
    add_mode_argument(p)
    p.add_argument("--expect", type=Path,
                   help="FILE as it should become: report whether the edit is exact (makes only changes it makes)")
    p.add_argument("--json", action="store_true",
                   help='print the edit as {"start": {"line", "character"}, "end": ..., "text": ..., "distance": '
                        'lines from the cursor, "exact": with --expect}, or {}')


def _read(path: Path) -> str:
    text, why = read_text(path, MAX_FILE_BYTES)
    if text is None:
        raise SystemExit(f"lsp_server: cannot read {path}: {why}")
    return text


def _preview(text: str, edit, path: str) -> str:
    """The edit as the document's lines that go (-) and those that come (+)."""
    lines = text.split("\n")
    head, tail = lines[edit.start.line], lines[edit.end.line]
    changed = _cut(head, edit.start.character)[0] + edit.text + _cut(tail, edit.end.character)[1]
    gone = "".join(f"-{s}\n" for s in lines[edit.start.line:edit.end.line + 1])
    return f"@@ {path}:{edit.start.line + 1} @@\n{gone}" + "".join(f"+{s}\n" for s in changed.split("\n"))


def _where(where: dict) -> str:
    """Where the edit is, and whether it is exact when known, as one line."""
    lines = where["distance"]
    said = f"{abs(lines)} lines {'below' if lines >= 0 else 'above'} the cursor"
    return f"-- {said}" + ("" if "exact" not in where else f", exact: {'yes' if where['exact'] else 'no'}") + "\n"


def _cut(line: str, units: int) -> tuple[str, str]:
    """`line` split at a column counted in UTF-16 code units."""
    at = len(line.encode("utf-16-le")[:2 * units].decode("utf-16-le", errors="ignore"))
    return line[:at], line[at:]


def run(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from lsp_server.serving.documents import Documents
    from lsp_server.next_edit.history import edits_between
    from lsp_server.engines import open_engine
    from lsp_server.next_edit.rewrite import predict
    from lsp_server.completion.suggester import cursor_at
    from lsp_server.bench.next_edits import apply_edit, changes_only_as

    text, before = _read(args.file), _read(args.before)
    expected = None if args.expect is None else _read(args.expect)
    if cursor_at(text, args.line, args.col) is None:
        raise SystemExit(f"lsp_server: position {args.line}:{args.col} is outside {args.file}")
    edits = edits_between(before, text)
    edit, stats = None, None
    if edits:  # no recent edit, nothing to repeat: no model needed
        settings = model_settings(args) | ({"model": args.editModel} if args.editModel else {})
        try:
            engine = open_engine(settings)
            documents = Documents()
            documents.open(args.file.resolve().as_uri(), text)
            documents.use(engine)
            prediction = predict(engine, text, args.line, edits, args.file.name, args.mode)
        except EngineError as exc:
            raise SystemExit(f"lsp_server: {exc}") from None
        edit, stats = prediction.edit, prediction.stats
    where = {} if edit is None else {"distance": edit.start.line - args.line}
    if edit is not None and expected is not None:
        where["exact"] = changes_only_as(text, apply_edit(text, edit), expected)
    # A command-line tool, not the stdio server: its result goes to stdout.
    if args.json:
        sys.stdout.write(json.dumps(edit.as_dict() | where if edit else {}) + "\n")
    elif edit is not None:
        sys.stdout.write(_preview(text, edit, args.file.name) + _where(where))
    if stats is not None:
        sys.stderr.write(f"-- {stats.new_tokens} tokens in {stats.total_ms:.0f} ms ({args.mode}): "
                         f"{stats.target_passes} target passes, {stats.tokens_per_pass:.2f} tokens/pass, "
                         f"prefill {stats.prefill_ms:.0f} ms of {stats.new_prompt_tokens} prompt tokens\n")
    return 0
