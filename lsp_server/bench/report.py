"""Benchmark numbers: per-run records in, a table, a JSON document and a latency plot out."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Run:
    """One timed completion of one task in one mode."""

    task: int
    mode: str
    tokens: list[int]  # the completion, without an end-of-text token
    text: str
    ms: float
    emitted: int  # tokens the target produced, a final end-of-text token included
    passes: int | None  # target forward passes (None: the peer does not say)
    drafted: int | None = None
    accepted: int | None = None
    cold: bool = False  # timed from an empty cache, prefill included
    # (drafted, accepted) per drafting source (engine/drafters/base.py SOURCES), where known
    by_source: dict[str, tuple[int, int]] | None = None
    model_choices: tuple[int, int] = (0, 0)  # a draft model's first choices: (agreed, tested)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def summarize_sources(runs: list[Run]) -> dict | None:
    """Per drafting source: tokens drafted and accepted, accepted tokens per target pass (the
    sources' shares add up to tok/pass less one) and acceptance; None where not known."""
    if not runs or any(r.by_source is None for r in runs):
        return None
    passes = sum(r.passes or 0 for r in runs)
    sources = sorted({s for r in runs for s in r.by_source})
    out = {}
    for source in sources:
        drafted = sum(r.by_source.get(source, (0, 0))[0] for r in runs)
        accepted = sum(r.by_source.get(source, (0, 0))[1] for r in runs)
        out[source] = {"drafted": drafted, "accepted": accepted,
                       "tokens_per_target_pass": _ratio(accepted, passes),
                       "acceptance_rate": _ratio(accepted, drafted)}
    return out


def summarize_mode(runs: list[Run], ar: dict[int, Run], references: dict[int, str]) -> dict:
    """A mode's numbers; the comparisons with `ar` are None for `ar` itself (the baseline),
    and the acceptance rate is None when nothing was drafted."""
    ms = np.array([r.ms for r in runs])
    seconds = ms.sum() / 1000
    passes = [r.passes for r in runs]
    drafted = None if None in (d := [r.drafted for r in runs]) else sum(d)
    baseline = all(ar[r.task] is r for r in runs)
    sources = summarize_sources(runs)
    return {
        "completions": len(runs),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "tokens_per_s": _ratio(sum(len(r.tokens) for r in runs), seconds),
        "tokens_per_target_pass": None if None in passes else _ratio(sum(r.emitted for r in runs), sum(passes)),
        "drafted": drafted,
        "acceptance_rate": _ratio(sum(r.accepted for r in runs), drafted) if drafted else None,
        "speedup_vs_ar": None if baseline else _ratio(
            float(np.median([ar[r.task].ms for r in runs])), float(np.median(ms))),
        "identical_to_ar": None if baseline else _ratio(
            sum(r.tokens == ar[r.task].tokens for r in runs), len(runs)),
        "mean_new_tokens": _ratio(sum(len(r.tokens) for r in runs), len(runs)),
        # How often the first line written is the one the file really has (a quality hint).
        "first_line_correct": _ratio(
            sum(_first_line(r.text) == _first_line(references[r.task]) for r in runs), len(runs)),
        "sources": sources,
        # How often the draft model's first choice was the target's token, where tested.
        "agreement": _ratio(sum(r.model_choices[0] for r in runs), sum(r.model_choices[1] for r in runs)),
    }


def summarize(runs: list[Run], tasks: dict[str, list[int]], references: dict[int, str],
              modes: list[str], weight_bytes: int | None, baseline: str = "ar") -> dict:
    """{workload: {"tasks": N, "modes": {mode: numbers}}}; tasks maps workload -> task ids;
    the other modes are compared with `baseline`."""
    workloads = {}
    for workload, ids in tasks.items():
        chosen = set(ids)
        mine = [r for r in runs if r.task in chosen]
        ar = {r.task: r for r in mine if r.mode == baseline}
        per_mode = {m: summarize_mode([r for r in mine if r.mode == m], ar, references) for m in modes}
        if weight_bytes:
            ar_runs = [r for r in mine if r.mode == "ar"]
            seconds = sum(r.ms for r in ar_runs) / 1000
            per_mode["ar"]["bandwidth_gb_s"] = round(
                weight_bytes * sum(r.passes for r in ar_runs) / seconds / 1e9, 2)
        workloads[workload] = {"tasks": len(ids), "modes": per_mode}
    return workloads


def _cell(value: float | None, fmt: str) -> str:
    """`fmt` like "8.2f"; a missing value is a dash of the same width."""
    return format("-", f">{fmt.split('.')[0]}") if value is None else format(value, fmt)


def prefill_rates(runs: list[Run], prompt_lengths: list[int]) -> dict[str, float | None]:
    """Per mode: prompt tokens prefilled per second, from each task's cold run less its warm run
    (the same completion after the same prompt: the difference is the prefill)."""
    warm = {(r.task, r.mode): r.ms for r in runs if not r.cold}
    rates = {}
    for mode in dict.fromkeys(r.mode for r in runs):
        cold = [r for r in runs if r.cold and r.mode == mode and (r.task, mode) in warm]
        ms = sum(r.ms - warm[(r.task, mode)] for r in cold)
        rates[mode] = round(sum(prompt_lengths[r.task] for r in cold) / ms * 1000, 1) if ms > 0 else None
    return rates


def format_table(report: dict) -> str:
    copy, read = (report["machine"].get(f"{kind}_bandwidth_gb_s") for kind in ("copy", "read"))
    lines = []
    header = (f"{'mode':<12}{'p50 ms':>9}{'p95 ms':>9}{'tok/s':>8}{'tok/pass':>10}{'accept':>10}"
              f"{'speedup':>9}{'same as ar':>12}{'1st line ok':>13}")
    sections = [(w, d, "warm cache") for w, d in report["workloads"].items()]
    sections += [(w, d, "COLD: empty cache, prefill timed") for w, d in report.get("cold_workloads", {}).items()]
    for workload, data, cache in sections:
        lines += [f"\n{workload}: {data['tasks']} tasks, up to {report['settings']['max_new_tokens']} "
                  f"new tokens, {report['model']['dtype']}, {cache}", header]
        for mode, m in data["modes"].items():
            speedup = f"{'baseline':>9}" if m["speedup_vs_ar"] is None else f"{m['speedup_vs_ar']:8.2f}x"
            accept = f"{'no drafts':>10}" if m["drafted"] == 0 else _cell(m["acceptance_rate"], "10.2f")
            lines.append(
                f"{mode:<12}{m['p50_ms']:>9.0f}{m['p95_ms']:>9.0f}{_cell(m['tokens_per_s'], '8.1f')}"
                f"{_cell(m['tokens_per_target_pass'], '10.2f')}{accept}"
                f"{speedup}{_cell(m['identical_to_ar'], '12.2f')}"
                f"{_cell(m['first_line_correct'], '13.2f')}")
        bandwidth = data["modes"].get("ar", {}).get("bandwidth_gb_s")
        if bandwidth and read:
            lines.append(f"ar reads the weights at {bandwidth:.1f} GB/s: {bandwidth / read:.0%} of this "
                         f"machine's measured read rate ({read:.1f} GB/s; copy rate {copy:.1f} GB/s)")
        lines += _source_lines(data["modes"])
    if report.get("prefill_tokens_per_s"):
        lines.append("\nprefill (cold less warm, prompt tokens/s): " + ", ".join(
            f"{mode} {_cell(rate, '.0f')}" for mode, rate in report["prefill_tokens_per_s"].items()))
    return "\n".join(lines + _plan_lines(report["model"])).lstrip("\n")


def _plan_lines(model: dict) -> list[str]:
    """How the target's passes ran (engine/execution/plan.py): kernel and threads per width."""
    plan = (model.get("execution_plan") or [None])[0]
    if not plan:
        return []
    steps = [f"{run['widths']} tokens: {run['kernel']}" + (f" on {run['threads']} threads" if run["threads"] else "")
             for run in plan]
    return ["", "passes ran as: " + "; ".join(steps)] + _cost_lines(model)


def _cost_lines(model: dict) -> list[str]:
    """What passes cost by width: as calibration kept them, and as this run's timed passes
    corrected them (engine/draft_length.py, PassCosts.observe)."""
    kept, learned = (model.get("calibration") or {}).get("pass_cost"), model.get("pass_cost_learned")
    if not kept or not learned:
        return []
    widths = [w for w in (1, 2, 4, 8, 16) if w < min(len(kept), len(learned))]

    def ms(costs: list[float]) -> str:
        return "/".join(f"{1000 * costs[w]:.0f}" for w in widths)
    return [f"pass cost, ms at {'/'.join(map(str, widths))} tokens: kept {ms(kept)}, "
            f"after this run's timed passes {ms(learned)}"]


def _source_lines(modes: dict) -> list[str]:
    """Where the accepted tokens came from: per mode and source, accepted tokens per target pass
    and the share of drafted tokens accepted; and the draft model's agreement (how often its
    first choice was the target's token)."""
    sources = sorted({s for m in modes.values() for s in (m.get("sources") or {})})
    if not sources:
        return []
    lines = ["accepted tokens per target pass (acceptance) by source:",
             f"{'mode':<12}" + "".join(f"{s:>18}" for s in sources) + f"{'agreement':>11}"]
    for mode, m in modes.items():
        if not m.get("sources"):
            continue
        cells = []
        for source in sources:
            n = m["sources"].get(source)
            cells.append(f"{'-':>18}" if n is None else
                         f"{n['tokens_per_target_pass']:>10.2f} ({_cell(n['acceptance_rate'], '.2f')})")
        lines.append(f"{mode:<12}" + "".join(cells) + _cell(m.get("agreement"), "11.2f"))
    return lines


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def plot(runs: list[Run], tasks: dict[str, list[int]], modes: list[str], path: Path) -> None:
    """One panel per workload: the distribution of ms per completion for each mode."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    panels = [(w, ids, cold) for cold in sorted({r.cold for r in runs}) for w, ids in tasks.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (workload, ids, cold) in zip(axes[0], panels):
        chosen = set(ids)
        data = [[r.ms for r in runs if r.mode == m and r.task in chosen and r.cold == cold] for m in modes]
        ax.boxplot(data, tick_labels=modes, showfliers=True)
        ax.set_title(f"{workload}{', cold' if cold else ''} ({len(ids)} tasks)")
        ax.set_ylabel("ms per completion")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
