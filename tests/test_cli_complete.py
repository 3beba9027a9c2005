"""`lsp_server complete`: the suggestion, its JSON, and one clear error line for bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import Request
from tests.models import SMALL

pytestmark = pytest.mark.integration  # the command in its own process, loading the model each time

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "shapes.py"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_raw_json_output_matches_the_engine(fp32_engine):
    out = run_cli(str(SAMPLE), "--line", "24", "--col", "8", "--dtype", "fp32", "--mode", "lookup", "--model", SMALL,
                  "--max-new-tokens", "12", "--json", "--threads", "1", "--raw")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"text", "new_tokens", "target_passes", "drafted", "accepted", "ms"} <= set(result)
    lines = SAMPLE.read_text().split("\n")
    prefix = "\n".join(lines[:24]) + "\n" + lines[24][:8]
    expected = fp32_engine.complete(prefix, Request(max_new_tokens=12), "ar")
    assert result["text"] == expected.text
    assert result["target_passes"] <= result["new_tokens"]


@pytest.mark.parametrize("args,message", [
    (["missing.py", "--line", "0", "--col", "0"], "cannot read missing.py"),
    ([str(SAMPLE), "--line", "999", "--col", "0"], "outside the file"),
    ([str(SAMPLE), "--line", "1", "--col", "500"], "outside the file"),
    ([str(SAMPLE), "--line", "3", "--col", "0", "--model", "/nonexistent/model.gguf"], "model not found"),
])
def test_bad_input_gives_one_clear_line(args, message):
    out = run_cli(*args)
    assert out.returncode != 0
    assert out.stdout == ""
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_corrupt_model_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(os.urandom(256))
    out = run_cli(str(SAMPLE), "--line", "3", "--col", "0", "--model", str(bad))
    assert out.returncode != 0 and "not a valid GGUF" in out.stderr and "Traceback" not in out.stderr


def test_text_right_of_the_cursor_gets_no_suggestion():
    out = run_cli(str(SAMPLE), "--line", "21", "--col", "8")
    assert out.returncode != 0 and "no suggestion here" in out.stderr and out.stdout == ""


def test_binary_file_is_refused(tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02binary")
    out = run_cli(str(binary), "--line", "0", "--col", "0")
    assert out.returncode != 0 and "looks binary" in out.stderr
