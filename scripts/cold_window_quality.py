"""How often the cold window gets the line right: at the pause replay's pauses (`bench --pauses`,
the same files and seed give the same pauses), the prompt is the cold window of a few token
budgets and nothing else (no cache, no other files), decoded greedily to the line's end, and its
first line is scored against the file's. Timing plays no part: this is what a first request at
a new spot gets on a machine that prefills `budget` tokens in `coldPrefillMs`.

  .venv/bin/python scripts/cold_window_quality.py /tmp/code3 --pauses 48 --budgets 80,160 [--suffix]

--suffix keeps the rest of the file after the line (as `bench --quality` has it); without it the
document ends at the cursor, as in the replay, where the file is written again from a point.
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
from lsp_server.completion.cold_window import cold_prompt
from lsp_server.completion.prompt import Cursor


def cases(paths: list[Path], pauses: int, seed: int, suffix: bool) -> list[tuple[str, int, Cursor, str]]:
    """(file, line, cursor after the line's indentation, the line's code) at each pause."""
    out = []
    for walk in walks(find_sources(paths).files, pauses, seed):
        for line in walk.pauses:
            text = walk.lines[line]
            indent = text[:len(text) - len(text.lstrip())]
            after = "\n" + "\n".join(walk.lines[line + 1:]) if suffix else ""
            out.append((walk.path.name, line, Cursor("\n".join(walk.lines[:line] + [indent]), after), text.strip()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--pauses", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", default="80", help="cold windows' tokens, comma-separated")
    ap.add_argument("--suffix", action="store_true", help="keep the file's lines after the cursor")
    ap.add_argument("--json", type=Path, help="write every answer here")
    args = ap.parse_args()
    engine = Engine.load()
    stop = cleanup.stop_rule(False, "")
    chosen = cases(args.paths, args.pauses, args.seed, args.suffix)
    report = {"model": {"name": DEFAULT, "dtype": engine.dtype},
              "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
              "paths": [str(p) for p in args.paths], "seed": args.seed, "suffix": args.suffix, "budgets": {}}
    for budget in (int(b) for b in args.budgets.split(",")):
        rows = []
        for name, line, cursor, expected in chosen:
            text = engine.complete(cold_prompt(cursor, engine.tokenizer, budget)[0], Request(48, stop)).text
            got = text.split("\n", 1)[0].strip()
            rows.append({"path": name, "line": line, "expected": expected, "got": got,
                         "exact": got == expected, "similarity": round(edit_similarity(got, expected), 4)})
        exact = sum(r["exact"] for r in rows)
        similarity = sum(r["similarity"] for r in rows) / len(rows)
        report["budgets"][budget] = {"exact": exact, "cases": len(rows), "edit_similarity": round(similarity, 4),
                                     "answers": rows}
        print(f"budget {budget:4d} tokens: exact {exact}/{len(rows)} ({exact / len(rows):.0%}), "
              f"edit similarity {similarity:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
