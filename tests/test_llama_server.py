"""llama.cpp's llama-server as bench's peer: its own process, the user's environment, its FIM
presets' flags; greedy answers; the pause replay driving it as llama.vim does beside our server."""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from engine.models import resolve
from lsp_server.bench.llama_server import PRESET_FLAGS, LlamaServer, ServerUnavailable, find_binary
from lsp_server.bench.peers import PeerUnavailable, check_peer, load_peers
from lsp_server.cli import main
from tests.code_samples import stdlib_text
from tests.models import REAL_DRAFT, SMALL

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return find_binary()
    except ServerUnavailable as exc:
        pytest.skip(f"no llama-server here: {exc}")


@pytest.fixture(scope="module")
def model() -> Path:
    return resolve(SMALL)


def test_it_runs_in_the_users_environment_with_the_presets_flags(binary, model):
    from engine import SET_FOR_TORCH

    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"  # this process's, for torch
    with LlamaServer(model, 2) as server:
        environ = set(Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0"))
        cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().decode().split("\0")
    assert not {f"{k}={v}".encode() for k, v in SET_FOR_TORCH.items()} & environ
    assert " ".join(PRESET_FLAGS) in " ".join(cmdline) and cmdline[cmdline.index("-t") + 1] == "2"


def test_the_peer_answers_greedily_warm_and_cold_alike(binary, model):

    [peer] = load_peers(["llama-server"], model, None, None, frozenset({2}), lambda ids: " ".join(map(str, ids)))
    prompt = list(range(100, 160))
    warm, cold = peer.run(prompt, 8, False), peer.run(prompt, 8, True)
    assert warm.tokens and warm.tokens == cold.tokens
    assert warm.emitted == len(warm.tokens) <= 8 and warm.ms > 0


def test_a_missing_binary_makes_only_this_peer_unavailable(model, monkeypatch, tmp_path):
    monkeypatch.setenv("DRAFTLINE_LLAMA_SERVER", str(tmp_path / "llama-server"))
    with pytest.raises(PeerUnavailable, match="^llama-server: DRAFTLINE_LLAMA_SERVER=.* is not an executable file$"):
        check_peer("llama-server", model, None)


def test_its_speculation_needs_a_draft_file(binary, model, monkeypatch):
    monkeypatch.setenv("DRAFTLINE_LLAMA_SERVER", str(binary))
    with pytest.raises(PeerUnavailable, match="needs a draft model in a .gguf file"):
        check_peer("llama-server-spec", model, None)


def test_its_speculation_runs_with_a_draft_given_by_name(binary, tmp_path):
    """`--draft NAME` as for the engine's own modes: the peer is given the named model's file."""
    (tmp_path / "textwrap.py").write_text(stdlib_text("textwrap.py"))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["bench", str(tmp_path), "--model", SMALL, "--draft", SMALL, "--threads", "2", "--tasks", "1",
                   "--max-new-tokens", "8", "--workload", "fresh", "--modes", "ar,llama-server-spec",
                   "--json", str(tmp_path / "bench.json")])
    assert rc == 0, err.getvalue()
    modes = json.loads((tmp_path / "bench.json").read_text())["workloads"]["fresh"]["modes"]
    assert modes["llama-server-spec"]["mean_new_tokens"] > 0


def _replay(tmp_path: Path, model: str, pauses: int) -> tuple[dict, str, str]:
    """`bench --pauses` on textwrap.py, a quick user's clock: its JSON's pauses, stdout and stderr."""
    (tmp_path / "textwrap.py").write_text(stdlib_text("textwrap.py"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["bench", str(tmp_path), "--model", model, "--threads", "2", "--tasks", "0",
                   "--pauses", str(pauses), "--pause-s", "1", "--key-ms", "20", "--json", str(tmp_path / "bench.json")])
    assert rc == 0, err.getvalue()
    return json.loads((tmp_path / "bench.json").read_text())["pauses"], out.getvalue(), err.getvalue()


def test_pause_replay_without_fim_goes_on_without_llama_server(binary, tmp_path):
    """SmolLM2 has no FIM tokens: llama-server cannot /infill with it; one line says so."""
    pauses, _, err = _replay(tmp_path, SMALL, 1)
    assert "lsp_server bench: pauses without llama-server: llama-server does not fill in the middle" in err
    assert set(pauses["summary"]) == {"draftline"}
    [run] = pauses["runs"]
    assert run["first_in_file"] and run["screen"][0][0] == 0.0  # the screen from the pause's start
    assert pauses["user"] == {"pause_s": 1.0, "key_s": 0.02, "read_s": 0.0}


@pytest.mark.real_model
def test_pause_replay_scores_both_editors_on_the_same_pauses(binary, tmp_path):
    """Qwen2.5-Coder-0.5B (the real-model tier's small one) has FIM tokens."""
    pauses, out, _ = _replay(tmp_path, REAL_DRAFT, 3)
    assert set(pauses["summary"]) == {"draftline", "llama-server"}
    lines = stdlib_text("textwrap.py").split("\n")
    for name, numbers in pauses["summary"].items():
        runs = [r for r in pauses["runs"] if r["contender"] == name]
        assert numbers["pauses"] == len(runs) == 3
        assert all(r["expected"] == lines[r["line"]].strip() for r in runs)
        assert [r["first_in_file"] for r in runs] == [True, False, False]
        for r in runs:  # moments within the pause, in order
            times = [at for at, _ in r["screen"]]
            assert times == sorted(times) and 0 <= times[-1] < 1.0
        assert 0 <= numbers["right_by_1s"]["count"] <= numbers["shown_by_1s"] <= 3
        assert numbers["first_in_file"]["pauses"] + numbers["later_in_file"]["pauses"] == 3
    # the same pauses for both
    assert [r["line"] for r in pauses["runs"] if r["contender"] == "draftline"] == \
        [r["line"] for r in pauses["runs"] if r["contender"] == "llama-server"]
    assert "pauses: right first line on screen by t" in out
