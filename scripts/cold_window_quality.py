"""How often the cold window gets the line right: at the pause replay's pauses (`bench --pauses`,
the same files and seed give the same pauses), the prompt is the cold window of a few token
budgets and nothing else (no cache, no other files), decoded greedily to the line's end, and its
first line is scored against the file's. Timing plays no part: this is what a first request at
a new spot gets on a machine that prefills `budget` tokens in `coldPrefillMs`.

  .venv/bin/python scripts/cold_window_quality.py /tmp/code3 --pauses 48 --budgets 80,160 [--suffix]

--suffix keeps the rest of the file after the line (as `bench --quality` has it); without it the
document ends at the cursor, as in the replay, where the file is written again from a point.
--repository adds a second answer per case whose cold window starts with other files'
definitions (`cold_head` of the repository context, the first path the workspace).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from engine.api import Request
from engine import Engine
from engine.loading.catalog import DEFAULT
from lsp_server.completion import cleanup
from lsp_server.bench.machine import cpu_name
from lsp_server.bench.pauses import walks
from lsp_server.bench.quality import edit_similarity
from lsp_server.bench.sources import find_sources
from lsp_server.completion.cold_window import cold_head, cold_prompt
from lsp_server.completion.prompt import Budget, Cursor, fit
from lsp_server.completion.repo_context import Repository, choose, names_near


def cases(paths: list[Path], pauses: int, seed: int, suffix: bool) -> list[tuple[str, int, Cursor, str]]:
    """(file, line, cursor after the line's indentation, the line's code) at each pause; the file
    relative to the first path."""
    out = []
    for walk in walks(find_sources(paths).files, pauses, seed):
        for line in walk.pauses:
            text = walk.lines[line]
            indent = text[:len(text) - len(text.lstrip())]
            after = "\n" + "\n".join(walk.lines[line + 1:]) if suffix else ""
            name = walk.path.resolve().relative_to(paths[0].resolve()).as_posix()
            out.append((name, line, Cursor("\n".join(walk.lines[:line] + [indent]), after), text.strip()))
    return out


def repository_of(root: Path) -> Repository:
    repository = Repository(root.resolve().name)
    for source in find_sources([root]).files:
        repository.set(source.path.resolve().relative_to(root.resolve()).as_posix(), source.text)
    return repository


def head_for(engine: Engine, repository: Repository, path: str, cursor: Cursor, budget: int) -> list[int]:
    """The cold window's other files at this case, as the server chooses them (nothing open)."""
    blocks = choose(path, cursor, {}, repository, names_near(cursor)).blocks
    fitted = fit(blocks, engine.tokenizer, Budget().repo_tokens)
    return cold_head(fitted, engine.tokenizer, budget, path, repository.name)


def score(engine: Engine, prompt, expected: str, stop) -> dict:
    got = engine.complete(prompt, Request(48, stop)).text.split("\n", 1)[0].strip()
    return {"got": got, "exact": got == expected, "similarity": round(edit_similarity(got, expected), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--pauses", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", default="80", help="cold windows' tokens, comma-separated")
    ap.add_argument("--suffix", action="store_true", help="keep the file's lines after the cursor")
    ap.add_argument("--repository", action="store_true", help="also answer with other files' definitions first")
    ap.add_argument("--json", type=Path, help="write every answer here")
    args = ap.parse_args()
    engine = Engine.load()
    stop = cleanup.stop_rule(False, "")
    repository = repository_of(args.paths[0]) if args.repository else None
    chosen = cases(args.paths, args.pauses, args.seed, args.suffix)
    report = {"model": {"name": DEFAULT, "dtype": engine.dtype},
              "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
              "paths": [str(p) for p in args.paths], "seed": args.seed, "suffix": args.suffix, "budgets": {}}
    for budget in (int(b) for b in args.budgets.split(",")):
        rows = []
        for name, line, cursor, expected in chosen:
            row = {"path": name, "line": line, "expected": expected,
                   **score(engine, cold_prompt(cursor, engine.tokenizer, budget)[0], expected, stop)}
            if repository is not None:
                head = head_for(engine, repository, name, cursor, budget)
                with_head = cold_prompt(cursor, engine.tokenizer, budget, head)[0]
                row["repository"] = {"head_tokens": len(head), **score(engine, with_head, expected, stop)}
            rows.append(row)
        totals = {"exact": sum(r["exact"] for r in rows), "cases": len(rows),
                  "edit_similarity": round(sum(r["similarity"] for r in rows) / len(rows), 4)}
        line = f"budget {budget:4d} tokens: exact {totals['exact']}/{len(rows)}, edit similarity {totals['edit_similarity']:.2f}"
        if repository is not None:
            headed = [r for r in rows if r["repository"]["head_tokens"]]
            totals["repository"] = {
                "exact": sum(r["repository"]["exact"] for r in rows), "cases_with_a_head": len(headed),
                "exact_where_a_head": sum(r["repository"]["exact"] for r in headed),
                "exact_without_where_a_head": sum(r["exact"] for r in headed),
                "edit_similarity": round(sum(r["repository"]["similarity"] for r in rows) / len(rows), 4)}
            rep = totals["repository"]
            line += (f"; with definitions first: exact {rep['exact']}/{len(rows)}, edit similarity "
                     f"{rep['edit_similarity']:.2f} (where there were any, {len(headed)} cases: "
                     f"{rep['exact_where_a_head']} against {rep['exact_without_where_a_head']})")
        report["budgets"][budget] = {**totals, "answers": rows}
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
