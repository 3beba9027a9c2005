"""The device check at the real models' shapes (scripts/gpu_shapes.py) as its CPU dry run, and the
drafting policy under the costs it writes (scripts/policy_under_costs.py --costs). Both run
rarely, on borrowed GPUs: their CPU halves must not rot in between."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.code_samples import stdlib_text
from tests.models import SMALL

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
WIDTHS = {"1", "2", "4", "8", "16"}


def _run(*args: str) -> None:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.integration  # two processes of their own, importing torch and loading the embedded model
def test_shapes_dry_run_and_the_policy_under_its_costs(tmp_path: Path) -> None:
    costs = tmp_path / "gpu_shapes.json"
    _run("scripts/gpu_shapes.py", "--cpu-dry-run", "--out", str(costs))
    result = json.loads(costs.read_text())
    assert result["ok"] and result["errors"] == []
    assert any(s.startswith("exllamav2:") for s in result["skipped"])  # said, not silently left out

    # exllamav2's steps (an fp16 Hugging Face folder written, then loaded) with the torch backend
    assert set(result["backends"]) == {"torch", "torch (hf folder)"}
    runs = [entry for backend in result["backends"].values() for entry in backend.values()]
    assert len(runs) == 4
    for entry in runs:
        assert set(entry["passes"]) == WIDTHS
        assert all(0 < p["device_ms"] <= p["ms"] for p in entry["passes"].values())
        rows = entry["generations"]
        assert {r["mode"] for r in rows} == {"ar", "lookup", "draft", "hybrid"}
        assert all(r["identical"] for r in rows)
        assert all(r["host_ms_per_pass"] > 0 for r in rows)
        # drafts from a document holding the greedy output were accepted: the accept path ran
        assert any(r["tokens_per_pass"] > 1 for r in rows if r["document"] == "greedy output")
        assert all(r["tokens_per_s"] > 0 for r in rows)

    # torch: eager passes beside the captured ones (the CPU stand-in for capture), and plain
    # decoding uncaptured writing what it writes captured
    for entry in result["backends"]["torch"].values():
        assert set(entry["passes_eager"]) == WIDTHS and entry["captured_passes"] >= len(WIDTHS)
        assert entry["uncaptured_identical"] is True
    assert set(result["floor"]) == {"1.5b", "7b"} and result["copy_gb_s"] > 0
    assert all(f["ms"] > 0 and f["weight_gb"] > 0 for f in result["floor"].values())
    # exllamav2's generator's stand-in, against our plain decoding, and the speed beside it
    assert set(result["peers"]) == {"1.5b", "7b"}
    for peer in result["peers"].values():
        assert peer["peer"].startswith("plain greedy loop") and peer["identical"] and peer["tokens_per_s"] > 0
    assert len(result["speed"]) == 4
    assert all(s["peer_tokens_per_s"] > 0 and s["ar_over_peer"] > 0 and s["lookup_over_peer"] > 0
               for s in result["speed"])

    policy = result["policy"]
    assert len(policy) == 8
    assert {(e["target"], e["draft"]) for e in policy} == {("1.5b", None), ("1.5b", "0.5b"), ("7b", None),
                                                           ("7b", "0.5b")}
    for e in policy:
        assert e["tree"]  # the torch backend verifies token trees
        assert len(e["relative_pass_cost"]) == 16 and e["relative_pass_cost"][0] == 1.0
        assert e["one_token_pass_ms"] > 0 and e["width_cost"] > 0 and set(e["pass_ms"]) == WIDTHS
        assert (e["draft_cost"] is None) == (e["draft"] is None)
        assert e["draft"] is None or e["draft_cost"] > 0
        assert set(e["host_ms_per_pass"]) == ({"ar", "lookup"} if e["draft"] is None else {"ar", "draft", "hybrid"})

    for e in policy:  # the folder's entries as exllamav2's would be: chains only
        e["tree"] = e["backend"] == "torch"
    costs.write_text(json.dumps(result))
    report = tmp_path / "policy.json"
    _run("scripts/policy_under_costs.py", "tests/fixtures/bench_repo", "--model", SMALL, "--draft", SMALL,
         "--costs", str(costs), "--tasks", "1", "--max-new-tokens", "16", "--report", str(report))
    rows = json.loads(report.read_text())
    # per workload: each entry's modes (lookup without the draft; draft and hybrid with it)
    assert len(rows) == 2 * 12
    assert all(r["identical"] == r["tasks"] == 1 for r in rows)
    assert all(r["tokens_per_pass"] >= 1 and r["mean_width"] >= 1 and r["expected_speedup"] > 0 for r in rows)
    assert all(r["draft_passes_per_pass"] == 0 for r in rows if r["mode"] == "lookup")
    assert any(r["draft_passes_per_pass"] > 0 for r in rows if r["mode"] == "draft")


@pytest.mark.integration  # a process of its own, and the stdio server with a random model
def test_pause_replay_on_a_random_folder_as_the_device_check_runs_it(tmp_path: Path) -> None:
    """scripts/gpu_check.sh --pauses, its CPU half: the random 1.5B's tiny stand-in as a Hugging
    Face folder, and bench's pause replay through the stdio server on it."""
    folder = tmp_path / "random"
    _run("scripts/gpu_shapes.py", "--cpu-dry-run", "--write-folder", str(folder))
    assert {"config.json", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "textwrap.py").write_text(stdlib_text("textwrap.py"))
    _run("-m", "lsp_server.cli", "bench", str(tmp_path / "code"), "--tasks", "0", "--pauses", "2", "--key-ms", "0",
         "--model", str(folder), "--backend", "torch", "--setting", "maxTokens=16",
         "--json", str(tmp_path / "bench.json"))
    summary = json.loads((tmp_path / "bench.json").read_text())["pauses"]["summary"]["draftline"]
    assert summary["pauses"] == 2 and summary["window_tokens"] >= 64
