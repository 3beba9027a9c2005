"""`lsp_server bench` end to end on a small fixture repository, with the real model in fp32
(where speculative output must equal plain greedy token for token), plus its bad-input lines."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shutil
from difflib import SequenceMatcher
from pathlib import Path

import pytest

from lsp_server.bench.peers import PEER_MODES
from lsp_server.bench.sources import find_sources
from lsp_server.bench.quality import edit_similarity, line_tasks
from lsp_server.bench.tasks import build_tasks
from lsp_server.cli import main
from lsp_server.completion.outline import outline
from tests.models import SMALL

FIXTURE = Path(__file__).parent / "fixtures" / "bench_repo"
# bench run on the fixture repository with the model in fp32 (about a minute): the integration tier
end_to_end = pytest.mark.integration
SOURCES = {"src/colors.js", "src/test_units.py", "src/units.py"}  # what git would not ignore
TASKS = 3
QUALITY = 2  # per workload, each with and without the repository context
MODE_KEYS = {"p50_ms", "p95_ms", "tokens_per_s", "tokens_per_target_pass", "acceptance_rate",
             "speedup_vs_ar", "identical_to_ar"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The fixture plus a file that cannot be read (a dangling link)."""
    copy = tmp_path_factory.mktemp("bench") / "repo"
    shutil.copytree(FIXTURE, copy)
    (copy / "src" / "vanished.py").symlink_to(copy / "src" / "no_such_file.py")
    return copy


def _bench(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["bench", *argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def bench(repo, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench_out")
    rc, stdout, stderr = _bench(
        str(repo), "--model", SMALL, "--tasks", str(TASKS), "--max-new-tokens", "12", "--dtype", "fp32",
        "--threads", "2", "--seed", "1", "--modes", "lookup,hybrid", "--cold", "--host-work", "--quality", str(QUALITY),
        "--json", str(out / "bench.json"), "--plot", str(out / "bench.png"))
    return {"rc": rc, "stdout": stdout, "stderr": stderr,
            "report": json.loads((out / "bench.json").read_text()), "plot": out / "bench.png"}


def test_sources_respect_gitignore_and_skip_binary_and_unreadable_files(repo):
    sources = find_sources([repo])
    assert {f.path.relative_to(repo).as_posix() for f in sources.files} == SOURCES
    assert sources.skipped == {"binary": 1, "unreadable": 1}
    assert not any("do-not-index" in f.text for f in sources.files)


def test_tasks_are_reproducible_and_cut_from_the_files(repo):
    files = find_sources([repo]).files
    for workload in ("fresh", "repetitive"):
        tasks = build_tasks(files, workload, 5, seed=7)
        assert len(tasks) == 5
        assert tasks == build_tasks(files, workload, 5, seed=7)
        assert tasks != build_tasks(files, workload, 5, seed=8)
        for task in tasks:
            text = task.path.read_text()
            offset = sum(len(line) + 1 for line in text.split("\n")[:task.line]) + task.col
            assert text[:offset].endswith(task.prefix) and task.prefix
            assert text[offset:].startswith(task.reference) and task.reference.strip()


def test_repetitive_tasks_continue_with_a_line_seen_before(repo):
    files = find_sources([repo]).files
    all_lines = [(f.path, i, line.strip()) for f in files for i, line in enumerate(f.text.split("\n"))]
    for task in build_tasks(files, "repetitive", 10, seed=3):
        assert task.reference.startswith("\n")  # the prompt ends before the line's newline
        target = next(line.strip() for line in task.reference.split("\n") if line.strip())
        seen_before = [text for path, i, text in all_lines
                       if (path != task.path or i <= task.line) and text]
        assert max(SequenceMatcher(None, target, s).ratio() for s in seen_before) >= 0.75, target


@end_to_end
def test_bench_writes_the_documented_json(bench):
    assert bench["rc"] == 0
    report = bench["report"]
    assert {"model", "machine", "workloads"} <= report.keys()
    assert report["model"]["dtype"] == "fp32"
    assert report["settings"]["modes"] == ["ar", "lookup", "hybrid"]  # ar joins as the baseline
    assert report["sources"] == {"files": 3, "skipped": {"binary": 1, "unreadable": 1}}
    assert report["machine"]["copy_bandwidth_gb_s"] > 0
    assert set(report["workloads"]) == set(report["cold_workloads"]) == {"fresh", "repetitive"}
    assert report["model"]["calibration"]["plan"]["prefill"] == "stored"  # fp32 has no other
    assert report["model"]["calibration"]["prefill_tokens_per_s"] > 0
    for workload in [*report["workloads"].values(), *report["cold_workloads"].values()]:
        assert workload["tasks"] == TASKS
        assert set(workload["modes"]) == {"ar", "lookup", "hybrid"}
        for name, mode in workload["modes"].items():
            assert MODE_KEYS <= mode.keys()
            assert mode["completions"] == TASKS
            assert 0 < mode["p50_ms"] <= mode["p95_ms"]
            assert mode["tokens_per_target_pass"] >= 1.0
            if name != "ar" and mode["drafted"]:  # drafting may pause where drafts keep failing
                assert 0.0 <= mode["acceptance_rate"] <= 1.0


@end_to_end
def test_cold_runs_time_the_prefill(bench):
    report = bench["report"]
    for name, warm in report["workloads"].items():
        cold = report["cold_workloads"][name]["modes"]
        for mode, numbers in warm["modes"].items():  # same tasks, plus a ~500-token prefill
            assert cold[mode]["p50_ms"] > numbers["p50_ms"]
            assert cold[mode]["identical_to_ar"] in (None, 1.0)  # None: ar itself
    # each mode's prefill rate, from its cold runs less its warm ones
    assert set(report["prefill_tokens_per_s"]) == {"ar", "lookup", "hybrid"}
    assert all(rate > 0 for rate in report["prefill_tokens_per_s"].values())
    assert "prefill (cold less warm, prompt tokens/s): ar " in bench["stdout"]


@end_to_end
def test_host_work_is_measured_against_the_recorded_output(bench):
    """The replay decodes each task again (it checks that every mode writes the recorded
    output); plain decoding reads one id a pass, lookup at most a pass's positions."""
    host = bench["report"]["host_work"]
    assert set(host) == {"ar", "lookup"}
    assert host["ar"]["logits_to_host_per_pass"] == 1.0
    assert 1.0 < host["lookup"]["logits_to_host_per_pass"] <= 17  # up to 16 drafted tokens and the root
    assert host["lookup"]["tokens_per_pass"] > host["ar"]["tokens_per_pass"]
    for numbers in host.values():
        assert numbers["tasks"] == 2 * TASKS  # both workloads
        assert 0 < numbers["host_ms_per_pass_p50"] <= numbers["host_ms_per_pass_p90"]
    assert "Host work per target pass" in bench["stdout"]


@end_to_end
def test_bench_numbers_are_consistent(bench):
    for workload in bench["report"]["workloads"].values():
        modes = workload["modes"]
        ar = modes.pop("ar")  # the baseline: one token per pass, nothing drafted
        assert ar["tokens_per_target_pass"] == 1.0 and ar["drafted"] == 0
        assert ar["acceptance_rate"] is ar["speedup_vs_ar"] is ar["identical_to_ar"] is None
        assert ar["bandwidth_gb_s"] > 0
        for mode in modes.values():  # fp32: exact speculative decoding equals greedy
            assert mode["identical_to_ar"] == 1.0 and mode["speedup_vs_ar"] > 0
            sources = mode["sources"]  # where the drafted tokens came from adds up
            assert set(sources) <= {"document", "workspace", "history"}  # no draft model here
            assert sum(n["drafted"] for n in sources.values()) == mode["drafted"]
            accepted = sum(n["accepted"] for n in sources.values())
            assert accepted == 0 if not mode["drafted"] else \
                abs(accepted / mode["drafted"] - mode["acceptance_rate"]) < 1e-3
            assert mode["agreement"] is None
    repetitive = bench["report"]["workloads"]["repetitive"]["modes"]["lookup"]
    assert repetitive["acceptance_rate"] > 0 and repetitive["tokens_per_target_pass"] > 1.0


@end_to_end
def test_bench_prints_a_table_progress_and_a_plot(bench):
    for mode in ("ar", "lookup", "hybrid"):
        assert f"\n{mode} " in bench["stdout"]
    assert "no drafts" in bench["stdout"] and "baseline" in bench["stdout"]
    assert "fresh: 3 tasks" in bench["stdout"] and "repetitive: 3 tasks" in bench["stdout"]
    assert "skipped 1 binary, 1 unreadable file(s)" in bench["stderr"]
    steps = 4 * TASKS * 3 + 2 * QUALITY * 2 * 3  # latency: 2 workloads x warm/cold; quality: 2 x 2 contexts
    assert f"{steps}/{steps}" in bench["stderr"]  # the progress bar's last step
    assert f"quality: next line ({QUALITY} cross-file, {QUALITY} in-file lines of your code)" in bench["stdout"]
    assert "COLD: empty cache, prefill timed" in bench["stdout"]
    assert "accepted tokens per target pass (acceptance) by source:" in bench["stdout"]
    assert bench["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--modes", "ar,warp"], "unknown mode 'warp'"),
    (["--modes", "draft"], "mode 'draft' needs a draft model: give --draft"),
    (["--tasks", "0"], "--tasks, --quality and --pauses must be at least 0, one of them positive"),
    (["--pauses", "4", "--endpoint", "http://127.0.0.1:1"], "--pauses and --host-work run locally; they do not take --endpoint"),
    (["--host-work", "--endpoint", "http://127.0.0.1:1"], "--pauses and --host-work run locally; they do not take --endpoint"),
])
def test_bad_options_get_one_clear_line(repo, argv, message):
    with pytest.raises(SystemExit) as exit_:
        _bench(str(repo), *argv)
    assert str(exit_.value.code).startswith(f"lsp_server bench: {message}")


def test_no_source_files_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not code\n")
    with pytest.raises(SystemExit) as exit_:
        _bench(str(tmp_path))
    assert str(exit_.value.code).startswith(f"lsp_server bench: no source files found under {tmp_path}")


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is not None, reason="accelerate is installed")
def test_a_named_peer_that_cannot_run_is_an_error(repo):
    """transformers loads a GGUF only with accelerate, which the set-up does not install."""
    with pytest.raises(SystemExit) as exit_:
        _bench(str(repo), "--modes", "ar,hf-lookup")
    assert str(exit_.value.code) == ("lsp_server bench: hf-lookup loads a GGUF through transformers, "
                                     "which then needs accelerate: pip install accelerate")


def test_default_modes_skip_peers_that_cannot_run_with_one_line_each(capsys):
    from argparse import Namespace

    from lsp_server.bench import _available_modes

    modes = _available_modes(Namespace(modes=None, draft=None, endpoint=None), Path("model.gguf"))
    assert modes[:3] == ["ar", "lookup", "hybrid"] and "hf-assisted" not in modes
    err = capsys.readouterr().err
    assert "lsp_server bench: skipping a peer: hf-assisted needs" in err
    assert ("llamacpp" in modes) == (importlib.util.find_spec("llama_cpp") is not None)
    assert "llama-server-spec" not in modes  # it needs --draft
    assert err.count("\n") == len(PEER_MODES) - len(modes[3:])  # one line per skipped peer


@end_to_end
def test_quality_scores_every_mode_alike_in_fp32(bench):
    quality = bench["report"]["quality"]
    assert bench["report"]["settings"]["quality_lines"] == {"cross-file": QUALITY, "in-file": QUALITY}
    assert set(quality) == {"cross-file", "in-file"}
    for contexts in quality.values():
        assert set(contexts) == {"repo", "none"}
        for modes in contexts.values():
            assert set(modes) == {"ar", "lookup", "hybrid"}
            for mode, numbers in modes.items():
                assert numbers["tasks"] == QUALITY and 0 < numbers["warm_p50_ms"] and 0 < numbers["cold_p50_ms"]
                assert 0.0 <= numbers["exact_match"] <= numbers["edit_similarity"] <= 1.0
                # the warm request reuses its prompt from the KV cache
                assert numbers["warm_new_prompt_tokens"] < numbers["prompt_tokens"] / 10
                # the same text as plain decoding, so the same scores
                assert numbers["same_as_baseline"] == (None if mode == "ar" else 1.0)
                assert (numbers["exact_match"], numbers["edit_similarity"]) == (
                    modes["ar"]["exact_match"], modes["ar"]["edit_similarity"])
    # the other files' definitions make the cross-file prompts longer
    cross = quality["cross-file"]
    assert cross["repo"]["ar"]["prompt_tokens"] > cross["none"]["ar"]["prompt_tokens"]


def test_cross_file_lines_use_a_name_another_file_defines(repo):
    sources = find_sources([repo])
    tasks = line_tasks(sources.files, 5, seed=3)
    defined = {f.path: {d.name for d in outline(f.text, f.path.suffix == ".py").definitions} for f in sources.files}
    assert len(tasks["cross-file"]) == len(tasks["in-file"]) == 5
    for task in tasks["cross-file"]:
        elsewhere = set().union(*(names for path, names in defined.items() if path != task.path))
        assert (set(re.findall(r"\w+", task.expected)) - defined[task.path]) & elsewhere, task.expected


def test_quality_tasks_remove_one_line_after_its_indentation(repo):
    sources = find_sources([repo])
    tasks = line_tasks(sources.files, 5, seed=3)
    assert tasks == line_tasks(sources.files, 5, seed=3)
    for task in tasks["cross-file"] + tasks["in-file"]:
        original = next(f.text for f in sources.files if f.path == task.path).split("\n")
        edited = task.text.split("\n")
        assert edited[task.line] == original[task.line][:task.column] and not edited[task.line].strip()
        assert original[task.line].strip() == task.expected
        assert edited[:task.line] == original[:task.line] and edited[task.line + 1:] == original[task.line + 1:]


@pytest.mark.parametrize("a, b, expected", [
    ("kitten", "sitting", 1 - 3 / 7),  # the textbook Levenshtein distance: 3 edits
    ("return x", "return x", 1.0), ("", "", 1.0), ("abc", "", 0.0), ("flaw", "lawn", 0.5)])
def test_edit_similarity(a, b, expected):
    assert edit_similarity(a, b) == pytest.approx(expected)


def test_prefill_rate_is_prompt_tokens_over_cold_less_warm_time():
    from lsp_server.bench.report import Run, prefill_rates

    def run(task, ms, cold):
        return Run(task, "ar", [1], "x", ms, 1, 1, cold=cold)

    runs = [run(0, 100, False), run(0, 600, True), run(1, 50, False), run(1, 550, True)]
    assert prefill_rates(runs, [300, 200]) == {"ar": 500.0}  # 500 tokens in 1 s


@end_to_end
def test_cross_file_pauses_ask_the_server_with_its_workspace_and_with_the_file_alone(repo, tmp_path):
    """--pause-lines cross-file --pause-contenders draftline,draftline-alone --whole-window: the
    same pauses, at lines using a name another file defines, for our server given the workspace
    and given none, each then asked again with its whole window."""
    rc, _, err = _bench(str(repo), "--model", SMALL, "--threads", "2", "--tasks", "0", "--pauses", "2",
                        "--pause-lines", "cross-file", "--pause-contenders", "draftline,draftline-alone",
                        "--pause-s", "1", "--key-ms", "0", "--whole-window", "--json", str(tmp_path / "bench.json"))
    assert rc == 0, err
    pauses = json.loads((tmp_path / "bench.json").read_text())["pauses"]
    for name, numbers in pauses["summary"].items():  # asked again, waited for, with the whole window
        assert numbers["whole_window"]["pauses"] == 2
        assert all(isinstance(r["whole_window"], str) for r in pauses["runs"] if r["contender"] == name)
    assert set(pauses["summary"]) == set(pauses["server_counters"]) == {"draftline", "draftline-alone"}
    units = {n.name for n in outline((repo / "src" / "units.py").read_text(), True).definitions}
    for name in pauses["summary"]:
        runs = [r for r in pauses["runs"] if r["contender"] == name]
        assert len(runs) == 2 and all(r["first_in_file"] for r in runs)
        assert all(r["path"].endswith("test_units.py") and units & set(re.findall(r"\w+", r["expected"]))
                   for r in runs)
    assert pauses["pause_lines"] == "cross-file"
