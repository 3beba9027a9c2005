"""The cold window: within its budget, the lines just above the cursor, the headers of the scopes
around it and the imports, in the file's order."""
from lsp_server.cold_window import cold_prefix, imports, scope_headers
from tests.code_samples import stdlib_text

SOURCE = '''import os
from typing import (
    Any,
    Callable,
)


def helper(x):
    return x


class Shape:
    """A shape."""

    def __init__(self, side):
        self.side = side

    def area(self,
             scale: float = 1.0) -> float:
        filler = 0
''' + "\n".join(f"        filler += {i}" for i in range(60)) + "\n        "


def test_scope_headers_are_the_enclosing_lines_innermost_first():
    lines = SOURCE.split("\n")
    headers = scope_headers(lines, len(lines) - 1)
    assert [lines[group[0]].strip() for group in headers] == ["def area(self,", "class Shape:"]
    # a signature over two lines is taken whole
    assert [lines[i].strip() for i in headers[0]] == ["def area(self,", "scale: float = 1.0) -> float:"]


def test_imports_take_their_continuation_lines():
    lines = SOURCE.split("\n")
    assert [[lines[i] for i in group] for group in imports(lines, len(lines))] == [
        ["import os"], ["from typing import (", "    Any,", "    Callable,", ")"]]


def test_cold_prefix_keeps_the_nearest_lines_headers_and_imports_within_budget(small_tokenizer):
    tok = small_tokenizer
    window = cold_prefix(SOURCE, tok, 160)
    assert len(tok.encode(window)) <= 160
    kept = window.split("\n")
    assert kept[-1] == "        " and kept[-2] == "        filler += 59"  # ends at the cursor
    for line in ("import os", "class Shape:", "    def area(self,", "             scale: float = 1.0) -> float:"):
        assert line in kept
    assert "        filler += 0" not in kept  # far lines go first
    assert kept.index("import os") < kept.index("class Shape:") < kept.index("        filler += 59")


def test_cold_prefix_of_a_short_file_is_the_whole_file(small_tokenizer):
    prefix = "import os\n\ndef f(x):\n    y = x\n    "
    assert cold_prefix(prefix, small_tokenizer, 200) == prefix


def test_cold_prefix_fits_real_code(small_tokenizer):
    tok = small_tokenizer
    text = stdlib_text("argparse.py")
    prefix = text[:text.index("    def parse_known_args")] + "    "
    for budget in (64, 200, 400):
        window = cold_prefix(prefix, tok, budget)
        assert len(tok.encode(window)) <= budget
        assert prefix.endswith(window.split("\n")[-2] + "\n    ")
