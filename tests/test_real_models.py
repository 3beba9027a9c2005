"""The real-model tier: the default model (Qwen2.5-Coder-1.5B, Q4_K_M) and its draft
(Qwen2.5-Coder-0.5B), as users run them. `make test` fetches both once per machine into the
checkout's cache (`make models`); here they load as the defaults do, from the file's own blocks.

What is checked: they load; the default answers the FIM question of examples/shapes.py with
the right formula (a square's perimeter: an answer known without any model); every speculative
mode writes exactly what plain decoding writes; a real editor (headless Neovim 0.12) gets the
default model's suggestion through the stdio server.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import Request
from engine.engine import Engine
from tests.code_samples import code_prompts
from tests.models import REAL, REAL_DRAFT
from tests.test_editor_nvim import _binary

pytestmark = pytest.mark.real_model  # the Qwen2.5-Coder models (`make models`)

ROOT = Path(__file__).resolve().parents[1]
PERIMETER = "return 4 * self.side"


@pytest.fixture(scope="module")
def pair() -> Engine:
    """The default model with the 0.5B as its draft, in the default dtype (the file's blocks)."""
    return Engine.load(REAL, draft=REAL_DRAFT, threads=2)


def test_the_default_model_is_the_real_one_and_loads_from_its_blocks(pair):
    described = pair.describe()
    assert described["dtype"] == "gguf" and described["native_decoder"]  # the file's own blocks, mapped
    assert pair.tokenizer.fim is not None  # a code model with fill-in-the-middle
    assert set(pair.modes) == {"ar", "lookup", "draft", "hybrid"}


def test_complete_writes_the_right_formula_with_the_default_model():
    """No --model: the default. The answer is the perimeter of a square, known independently."""
    out = subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", "examples/shapes.py",
                          "--line", "24", "--col", "8", "--threads", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == PERIMETER


def test_every_mode_writes_what_plain_decoding_writes(pair):
    """The native decoder computes each token alike in any pass width, so speculative output
    (lookup, the 0.5B draft, both in a token tree) is plain decoding's, token for token."""
    for _, prompt in code_prompts(4, max_chars=1500):
        pair.prefill(pair.prompt_tokens(prompt))
        plain = pair.complete(prompt, Request(32), "ar").tokens
        for mode in ("lookup", "draft", "hybrid"):
            assert pair.complete(prompt, Request(32), mode).tokens == plain, (mode, prompt[-80:])


def test_neovim_shows_the_default_models_suggestion(tmp_path):
    """Headless Neovim 0.12 with the plugin and no model setting: the server loads the default
    model and the ghost text at examples/shapes.py's perimeter is the right formula."""
    nvim = _binary("0.12")
    result = tmp_path / "ghost.txt"
    proc = subprocess.run(
        [str(nvim), "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {ROOT / 'tests/editors/nvim_real_model_test.lua'}"],
        cwd=ROOT, env=os.environ | {"DRAFTLINE_RESULT": str(result)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result.read_text().strip() == PERIMETER
