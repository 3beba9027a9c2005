"""Prompt assembly: token budgets, stable window starts, similar snippets, FIM templates."""
from dataclasses import replace

from tokenizers import Tokenizer as HFTokenizer

from engine.tokenization.tokenizer import Tokenizer
from lsp_server.completion.prompt import (
    WINDOW_STEP_LINES, Block, Budget, Cursor, build_prompt, prefix_window, similar_snippets)
from tests.code_samples import stdlib_text


def test_prefix_window_fits_the_budget_and_ends_at_the_cursor(small_tokenizer):
    tok = small_tokenizer
    prefix = stdlib_text("argparse.py")[:40000]
    window = prefix_window(prefix, tok, 512)
    assert len(tok.encode(window)) <= 512
    assert prefix.endswith(window) and len(window) > 200


def test_prefix_window_start_is_stable_while_typing(small_tokenizer):
    """Keystrokes within a line keep the same window start: the KV cache stays reusable."""
    tok = small_tokenizer
    lines = stdlib_text("argparse.py").split("\n")
    at = 3 * WINDOW_STEP_LINES + 5
    base = "\n".join(lines[:at]) + "\n"
    starts = set()
    for typed in ("", "d", "de", "def", "def f(", "def f(x):"):
        window = prefix_window(base + typed, tok, 1024)
        starts.add(window[:80])
    assert len(starts) == 1


def test_similar_snippets_prefer_related_code():
    near = "def parse_args(self, args=None, namespace=None):\n    args, argv = self.parse_known_args"
    others = {"argparse.py": stdlib_text("argparse.py"), "colorsys.py": stdlib_text("colorsys.py")}
    picked = similar_snippets(near, others)
    assert picked and picked[0][0] == "argparse.py"
    assert all(name != "colorsys.py" for name, _ in picked)


def test_plain_prefix_for_models_without_fim(small_tokenizer):
    tok = small_tokenizer
    cursor = Cursor("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")
    assert tok.fim is None  # the embedded model has no FIM tokens
    assert build_prompt(cursor, tok, 8192) == cursor.prefix
    other = [Block("other.py", "x = 1")]
    assert build_prompt(cursor, tok, 8192, other).startswith("# other.py\nx = 1\n\n")
    assert build_prompt(cursor, tok, 1024, other) == cursor.prefix  # small context


def test_fim_template_for_models_with_fim_tokens(small_tokenizer, tmp_path):
    """A StarCoder-style vocabulary (the embedded one plus its FIM tokens) is detected."""
    small_tokenizer.save(tmp_path / "tokenizer.json")
    hf = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    hf.add_special_tokens(["<fim_prefix>", "<fim_suffix>", "<fim_middle>"])
    tok = Tokenizer(hf, set())
    assert tok.fim is not None
    cursor = Cursor("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")
    ids = build_prompt(cursor, tok, 8192, budget=replace(Budget(), suffix_tokens=64))
    assert ids[0] == tok.fim.prefix and ids[-1] == tok.fim.middle
    middle = ids.index(tok.fim.suffix)
    assert tok.decode(ids[1:middle]) == cursor.prefix
    assert tok.decode(ids[middle + 1:-1]) == cursor.suffix
