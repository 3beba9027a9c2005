"""The README's Measured table, made from `lsp_server bench --json` files: one row per mode and
cache (warm, and cold where the run had --cold), tokens per second, tokens per target pass and
p50 per workload; above it the command that reproduces each run and the machine it ran on.

    .venv/bin/python scripts/measured_table.py BENCH_JSON [...] [--paths /tmp/code[,/tmp/more]]
        [--draft qwen2.5-coder-0.5b] [--in-process-peers] [--write README.md | --check README.md]

--paths and --draft fill in what a bench JSON does not record (the folders it read, the draft
model's name). --write replaces the lines between `<!-- measured:start -->` and
`<!-- measured:end -->` in that file instead of printing, starting with a comment that names
the call; --check says whether that section is what the call makes.

Peers loaded inside bench's own process (transformers) run in the environment the engine sets for
its process; they are left out unless --in-process-peers asks for them, and then marked as such,
with no ratio to our modes. The llama.cpp peers run in processes of their own, in the user's
environment, and are shown like our modes. Below the table: each mode's prefill rate (runs with
--cold) and the pause replay (runs with --pauses).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from engine.loading.catalog import KNOWN
from lsp_server import bench

START, END = "<!-- measured:start -->", "<!-- measured:end -->"
IN_PROCESS_PEERS = ("hf-ar", "hf-lookup", "hf-assisted")
CACHES = (("workloads", "warm"), ("cold_workloads", "cold"))


def _model_name(target: str) -> str:
    """A known model's name (`--model NAME`), else the file's name."""
    file_name = Path(target).name
    return next((m.name for m in KNOWN.values() if m.file_name == file_name), file_name)


def _draft_name(report: dict, given: str | None) -> str | None:
    """The draft as the command line named it; bench records only the drafter's kind for a
    loaded draft model, so a name must be given (--draft) unless it is a known name or a path."""
    recorded = report["model"].get("draft")
    if recorded is None:
        return None
    if given:
        return given
    return recorded if recorded in KNOWN or recorded == "embedded" or "/" in recorded else "DRAFT"


def command(report: dict, paths: str, draft: str | None) -> str:
    """The `lsp_server bench` command that reproduces `report`: its settings that differ from
    bench's defaults."""
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers())
    default = parser.parse_args(["bench"])
    settings = report["settings"]
    parts = ["lsp_server bench", paths, "--model", _model_name(report["model"]["target"])]
    if (draft := _draft_name(report, draft)) is not None:
        parts += ["--draft", draft]
    for flag, key, dest in (("--tasks", "tasks_per_workload", "tasks"),
                            ("--max-new-tokens", "max_new_tokens", "max_new_tokens"),
                            ("--seed", "seed", "seed"), ("--context-chars", "context_chars", "context_chars")):
        if settings[key] != getattr(default, dest):
            parts += [flag, str(settings[key])]
    if settings["tasks_per_workload"]:
        parts += ["--modes", ",".join(settings["modes"])]
    if "cold_workloads" in report:
        parts.append("--cold")
    if settings.get("pauses"):
        parts += ["--pauses", str(settings["pauses"])]
        user = (report.get("pauses") or {}).get("user", {})
        parts += [f"--pause-s {user['pause_s']:g} --key-ms {user['key_s'] * 1000:g} --read-s {user['read_s']:g}"] if user else []
        replay = report.get("pauses") or {}
        if replay.get("pause_lines", "all") != "all":
            parts += ["--pause-lines", replay["pause_lines"]]
        if replay.get("contenders", PAUSE_CONTENDERS) != PAUSE_CONTENDERS:
            parts += ["--pause-contenders", ",".join(replay["contenders"])]
        if any("whole_window" in m for m in replay.get("summary", {}).values()):
            parts.append("--whole-window")
    return " ".join(parts)


def prefill_line(report: dict, run: str) -> list[str]:
    rates = report.get("prefill_tokens_per_s") or {}
    if not rates:
        return []
    ar = rates.get("ar")
    cells = [f"`{mode}` {rate:.0f}" + (f" ({ar / rate:.2f}x slower than `ar`)" if ar and rate and mode != "ar"
                                        and rate < ar else "") for mode, rate in rates.items() if rate]
    return [f"Prefill{run} (cold less warm, prompt tokens per second): " + ", ".join(cells) + "."]


def floor_line(report: dict, run: str) -> list[str]:
    """Plain decoding's share of the read floor: the weights `ar` read per second against what
    this machine reads (bench's memory probe)."""
    read = report["machine"].get("read_bandwidth_gb_s")
    rates = [w["modes"]["ar"].get("bandwidth_gb_s") for w in report.get("workloads", {}).values() if "ar" in w["modes"]]
    rates = [r for r in rates if r]
    if not read or not rates:
        return []
    return [f"Plain decoding{run} (`ar`, warm) read its weights at {min(rates):.1f}-{max(rates):.1f} GB/s: "
            f"{min(rates) / read:.0%}-{max(rates) / read:.0%} of this machine's read rate ({read:.1f} GB/s), the floor "
            "a one-token pass cannot beat."]


MOMENTS_S = (0.5, 1.0, 1.5, 2.0, 4.0, 8.0)  # bench --pauses scores the screen at these moments of a pause
PAUSE_CONTENDERS = ["draftline", "llama-server"]  # bench's default --pause-contenders
EDITOR_LABELS = {"llama-server": "`llama-server` asked as llama.vim asks it",
                 "draftline-alone": "`draftline-alone` (stdio server, no workspace: the file alone)"}


def pause_rows(report: dict, run: str) -> list[str]:
    """A row per contender: right by each moment of the pause (count, share, 95% interval; - past
    the pause's end), ghost text at its end, p50 / p90 from the pause to ghost text."""
    out = []
    pauses = report.get("pauses") or {}
    user = pauses.get("user", {})
    for name, m in pauses.get("summary", {}).items():
        label = EDITOR_LABELS.get(name, f"`{name}` (stdio server)")
        cells = [_right(m.get(f"right_by_{t:g}s")) for t in MOMENTS_S]
        end = m.get(f"shown_by_{user.get('pause_s', 0):g}s", "-")
        out.append(f"|{run} {label} | {m['pauses']} | " + " | ".join(cells)
                   + f" | {end} | {_seconds(m['p50_s'])} / {_seconds(m['p90_s'])} |")
    return out


def whole_window_lines(report: dict, run: str) -> list[str]:
    """Per contender asked with its whole window (--whole-window): how often that was right, and
    how often the screen had it by the pause's end."""
    out = []
    for name, m in ((report.get("pauses") or {}).get("summary") or {}).items():
        if whole := m.get("whole_window"):
            low, high = whole["interval"]
            out.append(f"-{run} `{name}` with its whole window, waited for: right at {whole['right']} of "
                       f"{whole['pauses']} pauses ({whole['right'] / whole['pauses']:.0%}, {low:.0%}-{high:.0%}); "
                       f"on screen by the pause's end at {whole['right_on_screen_by_the_end']} of those.")
    return out


def _right(right: dict | None) -> str:
    if right is None:
        return "-"
    low, high = right["interval"]
    return f"{right['count']} ({right['share']:.0%}, {low:.0%}-{high:.0%})"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def machine(report: dict) -> str:
    m = report["machine"]
    rate = f", memory read {m['read_bandwidth_gb_s']:.1f} GB/s" if m.get("read_bandwidth_gb_s") else ""
    return f"{m['cpu']}, {m['cores']} cores{rate}"


def _label(mode: str, cache: str) -> str:
    name = f"`{mode}`" + (" (in-process peer)" if mode in IN_PROCESS_PEERS else "")
    return name if cache == "warm" else f"{name}, cold"


def _cell(m: dict, ar: dict | None, peer: bool) -> str:
    ratio = "" if peer or ar is None or m is ar else f" ({m['tokens_per_s'] / ar['tokens_per_s']:.2f}x)"
    per_pass = "-" if m.get("tokens_per_target_pass") is None else f"{m['tokens_per_target_pass']:.2f}"
    return f"{m['tokens_per_s']:.1f}{ratio} | {per_pass} | {m['p50_ms']:.0f}"


def rows(report: dict, in_process: bool, run: str) -> list[str]:
    workloads = list(report.get("workloads", {}))  # none in a pause replay alone
    out = []
    for key, cache in CACHES:
        for mode in report["settings"]["modes"]:
            if not workloads or key not in report or (mode in IN_PROCESS_PEERS and not in_process):
                continue
            data = [report[key][w]["modes"] for w in workloads]
            cells = [_cell(d[mode], d.get("ar"), mode in IN_PROCESS_PEERS) for d in data]
            same = [d[mode]["identical_to_ar"] for d in data if d[mode]["identical_to_ar"] is not None]
            identical = "baseline" if mode == "ar" else f"{min(same):.2f}" if same else "-"
            out.append(f"|{run} {_label(mode, cache)} | " + " | ".join(cells) + f" | {identical} |")
    return out


def table(paths: list[Path], relative_to: Path, given_paths: str, draft: str | None,
          in_process: bool) -> str:
    """The markdown: one line per run (its command, data file, model and machine), then one table."""
    reports = [json.loads(p.read_text()) for p in paths]
    several = len(reports) > 1
    workloads = next((list(r["workloads"]) for r in reports if r.get("workloads")), [])
    lines = []
    folders = given_paths.split(",")  # one for all runs, or one per run
    for i, (path, report) in enumerate(zip(paths, reports), 1):
        mark = f"[{i}] " if several else ""
        link = os.path.relpath(path, relative_to)
        s = report["settings"]
        work = (f"{s['tasks_per_workload']} tasks per workload, {s['max_new_tokens']} new tokens"
                if s["tasks_per_workload"] else f"{s['pauses']} pauses")
        folder = folders[min(i, len(folders)) - 1]
        lines.append(f"{mark}`{command(report, folder, draft)}` on {report['sources']['files']} files, {work}, "
                     f"{report['model']['dtype']} weights; {machine(report)} ([{Path(link).name}]({link})).")
        lines.append("")
    head = "| " + ("run, " if several else "") + "mode | " + " | ".join(
        f"{w} tok/s | {w} tok/pass | {w} p50 ms" for w in workloads) + " | same as `ar` |"
    lines += [head, "|" + "---|" * (2 + 3 * len(workloads))]
    for i, report in enumerate(reports, 1):
        lines += rows(report, in_process, f" [{i}]" if several else "")
    lines += ["", "tok/s: new tokens per second of the whole run (in brackets: against `ar` in the same run); "
              "tok/pass: tokens per target forward pass; p50: median ms per completion; warm: the prompt "
              "prefilled untimed; cold: from an empty cache, prefill timed; same as `ar`: the share of "
              "completions token for token equal to plain decoding's (the lowest over the workloads)."]
    for i, report in enumerate(reports, 1):
        lines += prefill_line(report, f" [{i}]" if several else "")
        lines += floor_line(report, f" [{i}]" if several else "")
    pauses = [row for i, r in enumerate(reports, 1) for row in pause_rows(r, f" [{i}]" if several else "")]
    if pauses:
        lines += ["", "At a pause in real code (bench `--pauses`: the files written again line by line on one clock "
                  "for both, a pause after each new line's indentation; right by t: the file's line on screen t into "
                  "the pause, count (share, 95% interval); docs/bench.md):", "",
                  "| " + ("run, " if several else "") + "editor | pauses | " + " | ".join(
                      f"right by {t:g} s" for t in MOMENTS_S) + " | shown at the end | to ghost text, p50 / p90 |",
                  "|" + "---|" * (4 + len(MOMENTS_S)), *pauses]
        whole = [line for i, r in enumerate(reports, 1) for line in whole_window_lines(r, f" [{i}]" if several else "")]
        lines += ["", *whole] if whole else []
    peers = sorted({m for r in reports for m in r["settings"]["modes"] if m in IN_PROCESS_PEERS})
    if peers:
        lines.append(f"In-process peers ({', '.join(peers)}) ran inside bench's process, under the "
                     "environment the engine sets for torch: "
                     + ("marked, with no ratio." if in_process else "left out."))
    return "\n".join(lines)


def section(content: str) -> str:
    """What stands between the markers (a test compares it with a fresh table)."""
    if START not in content or END not in content:
        raise SystemExit(f"no {START} ... {END} section")
    return content.split(START, 1)[1].split(END, 1)[0].strip("\n")


def write_between_markers(target: Path, text: str) -> None:
    content = target.read_text()
    section(content)  # both markers are there
    before, rest = content.split(START, 1)
    target.write_text(f"{before}{START}\n{text}\n{END}{rest.split(END, 1)[1]}")


def invocation(args: argparse.Namespace) -> str:
    """The arguments that make this table again (the section records them)."""
    parts = [str(p) for p in args.reports]
    parts += ["--paths", args.paths] if args.paths != "PATH" else []
    parts += ["--draft", args.draft] if args.draft else []
    parts += ["--in-process-peers"] if args.in_process_peers else []
    return shlex.join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", type=Path, nargs="+", metavar="BENCH_JSON")
    parser.add_argument("--paths", default="PATH", help="the folders the bench read, for the command shown: "
                        "one for all runs, or one per BENCH_JSON, comma-separated")
    parser.add_argument("--draft", default=None, help="the draft model's name, for the command shown")
    parser.add_argument("--in-process-peers", action="store_true",
                        help="show peers that ran in bench's own process (marked, no ratio)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--write", type=Path, default=None, metavar="FILE",
                     help=f"replace the section between {START} and {END} in FILE")
    out.add_argument("--check", type=Path, default=None, metavar="FILE",
                     help="exit non-zero unless FILE's section is what --write would put there")
    args = parser.parse_args(argv)
    target = args.write or args.check
    text = table(args.reports, target.parent if target else Path.cwd(), args.paths, args.draft,
                 args.in_process_peers)
    if target:
        made = f"<!-- made by: scripts/measured_table.py {invocation(args)} --write {target} -->\n{text}"
        if args.write:
            write_between_markers(args.write, made)
        elif section(args.check.read_text()) != made:
            raise SystemExit(f"{args.check}: the Measured section is not what its data make: run it with --write")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
