"""`lsp_server edit`: the proposed edit's JSON shape, nothing without recent edits, one clear
line for bad input; on the real model, a repeated rename is proposed."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models import REAL, SMALL

ROOT = Path(__file__).resolve().parent.parent
ENV = os.environ | {"OMP_WAIT_POLICY": "PASSIVE"}
BEFORE = '''def area(width, height):
    return width * height

pytestmark = pytest.mark.integration  # the edit command in a process of its own


def perimeter(width, height):
    return 2 * (width + height)


def describe(width, height):
    print("area", area(width, height))
'''
AFTER = BEFORE.replace("def area(width, height):\n    return width * height", "def area(w, h):\n    return w * h")


def run_edit(tmp_path: Path, before: str, after: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "old.py").write_text(before)
    (tmp_path / "shapes.py").write_text(after)
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", "edit", str(tmp_path / "shapes.py"),
                           "--before", str(tmp_path / "old.py"), *args],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)


@pytest.mark.integration  # the embedded model loaded in a process of its own
def test_the_edit_has_the_lsp_shape(tmp_path):
    out = run_edit(tmp_path, BEFORE, AFTER, "--line", "1", "--col", "4", "--model", SMALL, "--threads", "1", "--json")
    assert out.returncode == 0, out.stderr
    edit = json.loads(out.stdout)
    if edit:  # the small model may propose nothing; what it proposes lies in the file
        assert set(edit) == {"start", "end", "text", "distance"} and isinstance(edit["text"], str)
        assert edit["distance"] == edit["start"]["line"] - 1  # lines from the cursor
        lines = AFTER.split("\n")
        for end in (edit["start"], edit["end"]):
            assert set(end) == {"line", "character"} and end["character"] <= len(lines[end["line"]])
        assert (edit["start"]["line"], edit["start"]["character"]) <= (edit["end"]["line"], edit["end"]["character"])
    assert "target passes" in out.stderr


def test_with_the_file_expected_the_edit_says_whether_it_is_exact(tmp_path):
    (tmp_path / "new.py").write_text(AFTER.replace("(width, height)", "(w, h)").replace("width * height", "w * h"))
    out = run_edit(tmp_path, BEFORE, AFTER, "--line", "1", "--col", "4", "--model", SMALL, "--threads", "1",
                   "--expect", str(tmp_path / "new.py"))
    assert out.returncode == 0, out.stderr
    if out.stdout:  # the preview, then where the edit is and whether the expected file makes it
        assert re.search(r"^-- \d+ lines (below|above) the cursor, exact: (yes|no)$", out.stdout, re.M), out.stdout


def test_no_recent_edit_gives_nothing_without_a_model(tmp_path):
    out = run_edit(tmp_path, BEFORE, BEFORE, "--line", "1", "--col", "4", "--model", "/nonexistent/model.gguf",
                   "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {}


@pytest.mark.parametrize("args,message", [
    (["--line", "99", "--col", "0"], "outside"),
    (["--line", "0", "--col", "0", "--model", "/nonexistent/model.gguf"], "model not found"),
])
def test_bad_input_gives_one_clear_line(tmp_path, args, message):
    out = run_edit(tmp_path, BEFORE, AFTER, *args)
    assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr and out.stdout == ""


def test_a_binary_before_file_is_refused(tmp_path):
    (tmp_path / "bin.py").write_bytes(b"\0\1\2")
    (tmp_path / "shapes.py").write_text(AFTER)
    out = subprocess.run([sys.executable, "-m", "lsp_server.cli", "edit", str(tmp_path / "shapes.py"), "--before",
                          str(tmp_path / "bin.py"), "--line", "0", "--col", "0"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "binary" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.real_model
def test_the_real_model_repeats_a_rename(tmp_path):
    before = '''def load(path, verbose):
    if verbose:
        print("loading", path)
    return open(path).read()


def save(path, text, verbose):
    if verbose:
        print("saving", path)
    with open(path, "w") as f:
        f.write(text)
'''
    after = before.replace('def load(path, verbose):\n    if verbose:\n        print("loading", path)',
                           'def load(path, quiet):\n    if not quiet:\n        print("loading", path)')
    out = run_edit(tmp_path, before, after, "--line", "1", "--col", "14", "--model", REAL, "--json")
    assert out.returncode == 0, out.stderr
    edit = json.loads(out.stdout)
    lines = after.split("\n")
    start, end = edit["start"], edit["end"]
    changed = "\n".join(lines[:start["line"]] + [lines[start["line"]][:start["character"]] + edit["text"]
                                                 + lines[end["line"]][end["character"]:]] + lines[end["line"] + 1:])
    assert "def save(path, text, quiet):\n    if not quiet:" in changed
    assert changed.startswith(after.split("\n\n\n")[0])  # the edit already made is left alone
