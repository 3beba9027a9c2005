"""The next-edit workload: real edits (bench/edit_cases.py) put to the prediction as the server
makes it (lsp_server/next_edit/rewrite.py), scored and timed.

Per case: was the next edit exactly right (it makes the next hunk of the newer release, and
every other change it makes is a hunk of that release too); was it at least right (only
hunks of the release, not the next one: an earlier spot, or a change of another kind nearby);
the edit similarity, against the
release, of the lines either changed in the window; for no-edit-due cases, was an edit shown;
where the edit is (lines from the cursor to its start, and to the edit due); the wall time of
the prediction (its prompt shares little with the one before: about a cold prefill, as at a
new spot), the rewrite's tokens per target pass, and the place finder's time on the case's file
repeated to at least PLACE_LINES lines. Shares come with their 95% Wilson intervals, for the
repeated edits near the cursor (inside today's window), far from it (up to 60 lines) and those
of one line into one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine.api import CompletionEngine
from engine.errors import EngineError
from engine.loading.user_cache import cache_dir
from lsp_server.bench.edit_cases import EditCase, Hunk, apply, hunks, sdist_cases
from lsp_server.bench.next_edit_pauses import Served, run_served
from lsp_server.bench.pauses import wilson
from lsp_server.bench.quality import edit_similarity
from lsp_server.serving.documents import Documents
from lsp_server.next_edit.history import changed_span
from lsp_server.engines import open_engine
from lsp_server.next_edit.places import places
from lsp_server.next_edit.rewrite import NextEdit, predict, target_for, window_at
from lsp_server.options import BY_NAME, model_flags, model_settings


@dataclass(frozen=True)
class EditResult:
    name: str
    due: bool  # an edit was due
    shown: bool  # an edit was proposed
    exact: bool  # due and exactly right, or not due and none shown
    right: bool  # due, and every change it makes is one the release makes (the next one or another)
    similarity: float  # of the changed region (due cases)
    seconds: float
    tokens_per_pass: float
    new_tokens: int
    due_distance: int | None  # lines from the cursor to the edit due
    shown_distance: int | None  # lines from the cursor to the edit proposed
    near: bool  # the edit due lies in the window around the cursor
    one_line: bool  # the edits are each one line into one line
    place_ms: float  # finding the places in the case's file repeated to PLACE_LINES lines
    # lines from the cursor to the first place the finder gave (the window the model rewrote);
    # None where none matched and the window around the cursor served
    place_distance: int | None = None


PLACE_LINES = 3_000


def apply_edit(text: str, edit: NextEdit) -> str:
    lines = text.split("\n")

    def offset(line: int, units: int) -> int:
        head = lines[line].encode("utf-16-le")[:2 * units].decode("utf-16-le", errors="ignore")
        return sum(len(s) + 1 for s in lines[:line]) + len(head)

    return text[:offset(edit.start.line, edit.start.character)] + edit.text + text[offset(edit.end.line, edit.end.character):]


def region_similarity(text: str, predicted: str, expected: str) -> float:
    """Edit similarity of the whole lines that either document changed."""
    spans = [changed_span(text, other) for other in (predicted, expected) if other != text]
    if not spans:
        return 1.0
    start = text.rfind("\n", 0, min(s[0] for s in spans)) + 1
    tail = min(len(text) - s[1] for s in spans)
    end = text.find("\n", len(text) - tail)
    tail = 0 if end < 0 else len(text) - end
    return edit_similarity(predicted[start:len(predicted) - tail], expected[start:len(expected) - tail])


def is_next_edit(case: EditCase, after: str) -> bool:
    """`after` makes the case's next edit, and nothing the release does not make."""
    made = hunks(case.text.split("\n"), after.split("\n"))
    return any(h.a1 == case.next_line for h in made) and is_right(case, after)


def is_right(case: EditCase, after: str) -> bool:
    """`after` changes the text, and only as the release does."""
    return changes_only_as(case.text, after, case.release)


def changes_only_as(text: str, after: str, expected: str) -> bool:
    """`after` changes `text`, and each of its changes is one that `expected` makes."""
    lines = text.split("\n")
    made, due = hunks(lines, after.split("\n")), set(hunks(lines, expected.split("\n")))
    return bool(made) and all(h in due for h in made)


def window_release(case: EditCase) -> str:
    """The case's text with the release's hunks inside the lines the model rewrites made."""
    target = target_for(case.text, case.line, list(case.edits))
    window = window_at(case.text, case.line) if target is None else target.window
    end = window.first + window.text.count("\n") + 1
    text = case.text.split("\n")
    inside: list[Hunk] = [h for h in hunks(text, case.release.split("\n")) if window.first <= h.a1 and h.a2 <= end]
    return "\n".join(apply(text, inside))


def is_exact(case: EditCase, edit: NextEdit | None) -> bool:
    """Due and the next edit exactly, or not due and none proposed."""
    if case.next_line is None:
        return edit is None
    return edit is not None and is_next_edit(case, apply_edit(case.text, edit))


def score_case(engine: CompletionEngine, documents: Documents, case: EditCase, mode: str) -> EditResult:
    """The case's prediction, with its text open in `documents` (which feeds `engine`)."""
    documents.open(case.name, case.text)
    started = time.perf_counter()
    prediction = predict(engine, case.text, case.line, list(case.edits), case.path, mode)
    seconds = time.perf_counter() - started
    documents.close(case.name)
    after = case.text if prediction.edit is None else apply_edit(case.text, prediction.edit)
    due = case.next_line is not None
    exact = is_exact(case, prediction.edit)
    right = due and is_right(case, after)
    similarity = region_similarity(case.text, after, window_release(case)) if due else float(not prediction.edit)
    stats = prediction.stats
    shown_distance = None if prediction.edit is None else prediction.edit.start.line - case.line
    found = places(case.text, case.line, list(case.edits))
    return EditResult(case.name, due, prediction.edit is not None, exact, right, similarity, seconds,
                      stats.tokens_per_pass, stats.new_tokens, case.distance, shown_distance, case.near,
                      case.one_line, place_ms(case), found[0] - case.line if found else None)


def place_ms(case: EditCase) -> float:
    """Milliseconds to find the places in the case's file repeated to at least PLACE_LINES lines."""
    copies = -(-PLACE_LINES // (case.text.count("\n") + 1))
    text = "\n".join([case.text] * copies)
    started = time.perf_counter()
    places(text, case.line, list(case.edits))
    return (time.perf_counter() - started) * 1000


def share(hits: int, n: int) -> dict:
    """A count out of n, its share and the share's 95% Wilson interval."""
    return {"count": hits, "of": n, "share": round(hits / n, 4) if n else None, "interval": wilson(hits, n)}


def summarize(results: list[EditResult]) -> dict:
    due = [r for r in results if r.due]
    none_due = [r for r in results if not r.due]
    passes = [r for r in results if r.new_tokens]
    groups = {"all": due, "near": [r for r in due if r.near], "far": [r for r in due if not r.near],
              "one_line": [r for r in due if r.one_line]}
    return {
        "repeated_cases": len(due),
        "exact_next_edit": sum(r.exact for r in due) / len(due) if due else None,
        "right_edit": sum(r.right for r in due) / len(due) if due else None,
        "edit_similarity": statistics.mean(r.similarity for r in due) if due else None,
        "exact": {name: share(sum(r.exact for r in group), len(group)) for name, group in groups.items()},
        "at_the_due_line": share(sum(r.shown_distance == r.due_distance for r in due), len(due)),
        # where the finder pointed: whether a miss is the place's or the model's
        "place_at_the_due_line": share(sum(r.place_distance == r.due_distance for r in due), len(due)),
        "no_place": share(sum(r.place_distance is None for r in due), len(due)),
        "no_edit_due_cases": len(none_due),
        "shown_when_none_due": sum(r.shown for r in none_due) / len(none_due) if none_due else None,
        "shown_none_due": share(sum(r.shown for r in none_due), len(none_due)),
        "p50_s": statistics.median(r.seconds for r in results) if results else None,
        "tokens_per_target_pass": (sum(r.new_tokens for r in passes) / sum(r.new_tokens / r.tokens_per_pass for r in passes)
                                   if passes else None),
        "place_ms": {"p50": statistics.median(r.place_ms for r in results), "max": max(r.place_ms for r in results),
                     "lines_at_least": PLACE_LINES} if results else None,
    }


def summarize_served(cases: list[EditCase], served: list[Served]) -> dict:
    """The cases asked through the server: rightness as in-process, times from the pause."""
    due = [is_exact(c, s.edit) for c, s in zip(cases, served) if c.next_line is not None]
    shown_none_due = [s.edit is not None for c, s in zip(cases, served) if c.next_line is None]
    times = [s.edit_s for s in served]
    return {
        "exact_next_edit": sum(due) / len(due) if due else None,
        "shown_when_none_due": sum(shown_none_due) / len(shown_none_due) if shown_none_due else None,
        "p50_from_pause_s": statistics.median(times) if times else None,
        "p90_from_pause_s": statistics.quantiles(times, n=10)[-1] if len(times) > 1 else None,
        "inline_p50_s": statistics.median(s.inline_s for s in served) if served else None,
        "cases": [{"name": c.name, "exact": is_exact(c, s.edit), "shown": s.edit is not None,
                   "inline_s": round(s.inline_s, 3), "edit_s": round(s.edit_s, 3)} for c, s in zip(cases, served)],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def format_served(numbers: dict) -> str:
    return (f"next edit through the server, asked as Neovim asks: exact {_pct(numbers['exact_next_edit'])}, "
            f"an edit shown when none is due in {_pct(numbers['shown_when_none_due'])}; from the pause p50 "
            f"{numbers['p50_from_pause_s'] or 0:.1f} s, p90 {numbers['p90_from_pause_s'] or 0:.1f} s "
            f"(the pause's inline answer first: p50 {numbers['inline_p50_s'] or 0:.1f} s)")


def _share(s: dict) -> str:
    low, high = s["interval"]
    return f"{s['count']} of {s['of']} ({_pct(s['share'])}, 95% {low:.0%}-{high:.0%})"


def format_summary(numbers: dict) -> str:
    exact = numbers["exact"]
    places = numbers["place_ms"] or {"p50": 0, "max": 0, "lines_at_least": PLACE_LINES}
    return (f"next edit: {numbers['repeated_cases']} repeated-edit cases, exact {_share(exact['all'])}: near the "
            f"cursor {_share(exact['near'])}, up to 60 lines away {_share(exact['far'])}, one-line edits "
            f"{_share(exact['one_line'])}; at the due line {_share(numbers['at_the_due_line'])}, the place found "
            f"there {_share(numbers['place_at_the_due_line'])}, none found {_share(numbers['no_place'])}; an edit the "
            f"release makes {_pct(numbers['right_edit'])}, edit similarity {numbers['edit_similarity'] or 0:.2f}\n"
            f"no edit due: an edit shown in {_share(numbers['shown_none_due'])}\n"
            f"p50 {numbers['p50_s'] or 0:.1f} s; {numbers['tokens_per_target_pass'] or 0:.2f} tokens per target pass; "
            f"finding the places in {places['lines_at_least']:,}+ lines: p50 {places['p50']:.1f} ms, "
            f"max {places['max']:.1f} ms")


def fetch_sdists(spec: str) -> tuple[Path, Path]:
    """The two sdists `spec` names ("package==OLD,NEW"), downloaded once with pip into the user
    cache (no code of theirs is run: only their files are read)."""
    package, _, versions = spec.partition("==")
    old, _, new = versions.partition(",")
    if not (package and old and new):
        raise SystemExit(f"lsp_server bench: --next-edit {spec!r}: expected PACKAGE==OLD,NEW")
    folder = cache_dir("sdists")
    found = []
    for version in (old, new):
        wanted = f"{package}=={version}"
        have = _sdist_in(folder, package, version)
        if have is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            wanted, "-d", str(folder)], check=False, stdout=subprocess.DEVNULL)
            have = _sdist_in(folder, package, version)
        if have is None:
            raise SystemExit(f"lsp_server bench: cannot download the sdist of {wanted}")
        found.append(have)
    return found[0], found[1]


def _sdist_in(folder: Path, package: str, version: str) -> Path | None:
    names = {package.lower().replace("-", "_"), package.lower()}
    for path in folder.glob("*.tar.gz"):
        name, _, have = path.name.removesuffix(".tar.gz").rpartition("-")
        if have == version and name.lower().replace("-", "_") in names | {n.replace("-", "_") for n in names}:
            return path
    return None


def run(args: argparse.Namespace) -> int:
    """`bench --next-edit PACKAGE==OLD,NEW ...`: the next-edit workload alone."""
    repeated, none_due = [], []
    for spec in args.next_edit:
        r, n = sdist_cases(*fetch_sdists(spec))
        repeated += r
        none_due += n
    rng = random.Random(args.seed)
    counts = (args.tasks, args.tasks if args.none_due is None else args.none_due)
    cases = [c for group, n in zip((repeated, none_due), counts) for c in rng.sample(group, min(n, len(group)))]
    try:
        engine = open_engine(model_settings(args))
        if engine.problem:
            raise EngineError(engine.problem)
    except EngineError as exc:
        raise SystemExit(f"lsp_server bench: {exc}") from None
    mode = BY_NAME["mode"].default
    documents = Documents()
    documents.use(engine)
    results = []
    for i, case in enumerate(cases, 1):
        results.append(score_case(engine, documents, case, mode))
        print(f"lsp_server bench: next edit {i}/{len(cases)} {case.name}", file=sys.stderr)
    numbers = summarize(results) | {"mode": mode, "cases": [dataclasses.asdict(r) for r in results]}
    report = format_summary(numbers)
    if args.through_server:
        with tempfile.TemporaryDirectory() as root:
            served = run_served([sys.executable, "-m", "lsp_server.cli", "--stdio", *model_flags(args)],
                                Path(root), cases)
        numbers["through_server"] = summarize_served(cases, served)
        report += "\n" + format_served(numbers["through_server"])
    sys.stdout.write(report + "\n")  # the report is the command's output
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=1) + "\n")
    return 0
