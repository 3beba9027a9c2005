"""scripts/measured_table.py: the README's Measured table is the one its bench JSON makes, names
the command that reproduces it, and leaves out (or marks) peers that ran in bench's process."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import measured_table  # noqa: E402

README = ROOT / "README.md"


def _report(tmp_path: Path, cold: bool = False) -> Path:
    """A bench JSON of three modes (one an in-process peer), one workload, warm (and cold)."""
    mode = {"p50_ms": 100.0, "tokens_per_s": 10.0, "tokens_per_target_pass": 1.0, "identical_to_ar": None}
    report = {
        "model": {"target": "/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "draft": None, "dtype": "gguf"},
        "machine": {"cpu": "Some CPU", "cores": 2, "read_bandwidth_gb_s": 9.87},
        "settings": {"modes": ["ar", "lookup", "hf-ar", "llama-server"], "tasks_per_workload": 20, "max_new_tokens": 48,
                     "seed": 0, "context_chars": 2048},
        "sources": {"files": 3},
        "workloads": {"fresh": {"tasks": 20, "modes": {
            "ar": mode,
            "lookup": mode | {"tokens_per_s": 15.0, "tokens_per_target_pass": 1.8, "identical_to_ar": 1.0},
            "hf-ar": mode | {"tokens_per_s": 7.0, "identical_to_ar": 0.9},
            "llama-server": mode | {"tokens_per_s": 12.0, "tokens_per_target_pass": None, "identical_to_ar": 0.8}}}},
    }
    if cold:
        report["cold_workloads"] = report["workloads"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    return path


def test_the_readme_table_is_the_one_its_data_makes(monkeypatch):
    """The section's first line names the call that made it; made again, it is the same."""
    made_by = measured_table.section(README.read_text()).splitlines()[0]
    args = shlex.split(made_by.removeprefix("<!-- made by: scripts/measured_table.py ").removesuffix(" -->"))
    monkeypatch.chdir(ROOT)
    assert measured_table.main([a if a != "--write" else "--check" for a in args]) == 0


def test_the_command_reproduces_the_run_and_the_machine_is_named(tmp_path):
    path = _report(tmp_path, cold=True)
    text = measured_table.table([path], tmp_path, "/src", None, False)
    assert ("`lsp_server bench /src --model qwen2.5-coder-1.5b --modes ar,lookup,hf-ar,llama-server --cold`"
            in text)  # bench's defaults (20 tasks, 48 tokens) are not repeated
    assert "Some CPU, 2 cores, memory read 9.9 GB/s" in text
    assert "| `lookup` | 15.0 (1.50x) | 1.80 | 100 | 1.00 |" in text
    # a peer in its own process is shown like our modes
    assert "| `llama-server` | 12.0 (1.20x) | - | 100 | 0.80 |" in text


def test_prefill_rates_and_the_pause_replay_are_shown(tmp_path):
    path = _report(tmp_path, cold=True)
    report = json.loads(path.read_text())
    report["settings"]["pauses"] = 16
    report["prefill_tokens_per_s"] = {"ar": 200.0, "llama-server": 100.0}
    right = {f"right_by_{t:g}s": {"count": 3, "share": 0.1875, "interval": [0.066, 0.43]} for t in (0.5, 1, 1.5)}
    pause = {"pauses": 16, **right, "shown_by_1.5s": 15, "p50_s": 1.01, "p90_s": 1.49}
    report["pauses"] = {"summary": {"draftline": pause, "llama-server": pause | {"p90_s": None}},
                        "user": {"pause_s": 1.5, "key_s": 0.12, "read_s": 0.0}}
    path.write_text(json.dumps(report))
    text = measured_table.table([path], tmp_path, "/src", None, False)
    assert "--cold --pauses 16 --pause-s 1.5 --key-ms 120 --read-s 0`" in text
    assert "`ar` 200, `llama-server` 100 (2.00x slower than `ar`)" in text
    assert ("| `draftline` (stdio server) | 16 | 3 (19%, 7%-43%) | 3 (19%, 7%-43%) | 3 (19%, 7%-43%) | - | - | - "
            "| 15 | 1.01 s / 1.49 s |") in text
    assert "| `llama-server` asked as llama.vim asks it | 16 |" in text and "| 15 | 1.01 s / - |" in text
    header = next(line for line in text.split("\n") if line.startswith("| editor | pauses |"))
    rule = text.split("\n")[text.split("\n").index(header) + 1]
    assert rule.count("---") == header.count("|") - 1  # a column rule per column


def test_a_cross_file_replay_names_its_lines_and_contenders(tmp_path):
    path = _report(tmp_path)
    report = json.loads(path.read_text())
    report["settings"] |= {"pauses": 4, "tasks_per_workload": 0}
    pause = {"pauses": 4, "p50_s": 1.0, "p90_s": 2.0,
             "whole_window": {"pauses": 4, "right": 2, "interval": [0.15, 0.85], "right_on_screen_by_the_end": 1}}
    report["pauses"] = {"summary": {"draftline": pause, "draftline-alone": pause},
                        "user": {"pause_s": 8, "key_s": 0.12, "read_s": 0.0},
                        "pause_lines": "cross-file", "contenders": ["draftline", "draftline-alone"]}
    path.write_text(json.dumps(report))
    text = measured_table.table([path], tmp_path, "/src", None, False)
    assert "--pause-lines cross-file --pause-contenders draftline,draftline-alone --whole-window`" in text
    assert ("- `draftline-alone` with its whole window, waited for: right at 2 of 4 pauses (50%, 15%-85%); "
            "on screen by the pause's end at 1 of those.") in text
    assert "| `draftline-alone` (stdio server, no workspace: the file alone) | 4 |" in text


def test_in_process_peers_are_left_out_or_marked_without_a_ratio(tmp_path):
    path = _report(tmp_path)
    assert "hf-ar`" not in measured_table.table([path], tmp_path, "PATH", None, False).split("|---")[1]
    shown = measured_table.table([path], tmp_path, "PATH", None, True)
    assert "| `hf-ar` (in-process peer) | 7.0 | 1.00 | 100 | 0.90 |" in shown


def test_write_replaces_only_the_section_and_needs_its_markers(tmp_path):
    path = _report(tmp_path)
    target = tmp_path / "README.md"
    target.write_text(f"# Title\n{measured_table.START}\nold\n{measured_table.END}\nafter\n")
    assert measured_table.main([str(path), "--write", str(target)]) == 0
    text = target.read_text()
    assert text.startswith("# Title\n") and text.endswith(f"{measured_table.END}\nafter\n")
    assert "\nold\n" not in text and "(bench.json)" in text  # the link is relative to the README
    with pytest.raises(SystemExit, match="not what its data make"):
        measured_table.main([str(path), "--paths", "/elsewhere", "--check", str(target)])
    target.write_text("no markers\n")
    with pytest.raises(SystemExit, match="measured:start"):
        measured_table.main([str(path), "--write", str(target)])


def test_plain_decoding_is_shown_against_the_read_floor(tmp_path):
    path = _report(tmp_path)
    report = json.loads(path.read_text())
    report["workloads"]["fresh"]["modes"]["ar"]["bandwidth_gb_s"] = 7.4
    path.write_text(json.dumps(report))
    text = measured_table.table([path], tmp_path, "/src", None, False)
    assert "read its weights at 7.4-7.4 GB/s: 75%-75% of this machine's read rate (9.9 GB/s)" in text
