"""The cold window: within its budget, the lines just above the cursor and the header of the
scope around it, in the file's order."""
from lsp_server.completion.cold_window import cold_prefix, scope_header
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


def test_scope_header_is_the_innermost_enclosing_line_with_its_continuation():
    lines = SOURCE.split("\n")
    # a signature over two lines is taken whole
    assert [lines[i].strip() for i in scope_header(lines, len(lines) - 1)] == [
        "def area(self,", "scale: float = 1.0) -> float:"]
    init = lines.index("        self.side = side")
    assert [lines[i].strip() for i in scope_header(lines, init)] == ["def __init__(self, side):"]
    assert scope_header(lines, lines.index("class Shape:")) == []  # the top level has none


def test_cold_prefix_keeps_the_nearest_lines_and_the_header_within_budget(small_tokenizer):
    tok = small_tokenizer
    window = cold_prefix(SOURCE, tok, 160)
    assert len(tok.encode(window)) <= 160
    kept = window.split("\n")
    assert kept[-1] == "        " and kept[-2] == "        filler += 59"  # ends at the cursor
    assert kept[:2] == ["    def area(self,", "             scale: float = 1.0) -> float:"]
    assert "        filler += 0" not in kept  # far lines go first
    assert "import os" not in kept and "class Shape:" not in kept  # the nearest lines are worth more
    near = [line for line in kept if line.startswith("        filler")]
    assert sum(len(tok.encode(line + "\n")) for line in near) >= 0.8 * 160 - 8  # four fifths, to a line


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


def _qwen_like(small_tokenizer):
    """The small tokenizer has no FIM tokens: three of its control tokens (ids 0-2, skipped when
    decoding) stand in for them."""
    import copy

    from engine.tokenization.tokenizer import FimTokens

    tok = copy.copy(small_tokenizer)
    tok.fim = FimTokens(1, 2, 0)
    return tok


def test_warm_start_keeps_the_cached_lines_and_adds_the_nearest(small_tokenizer):
    from lsp_server.completion.cold_window import warm_start
    from lsp_server.completion.prompt import Cursor, fim_prompt

    tok = _qwen_like(small_tokenizer)
    lines = [f"value_{i} = compute({i})" for i in range(200)]
    cursor = Cursor("\n".join(lines) + "\n", "\nprint(value_0)\n")
    full = fim_prompt(tok, cursor.prefix, cursor.suffix)
    cached = len(full) // 3  # a background prefill got a third of the way
    prompt = warm_start(full, cached, cursor, tok, 120)
    cut = max(i for i in range(cached + 1) if tok.decode(full[1:i]).endswith("\n"))
    assert prompt[:cut] == full[:cut]  # the cached lines, whole, and nothing past a line's end
    text = tok.decode(prompt[cut:])
    assert "value_199 = compute(199)\n" in text  # the nearest lines
    assert f"value_{len(tok.decode(full[1:cut]).splitlines()) + 5} =" not in text  # not the gap
    assert len(prompt) - cut <= 130
    # nothing of the prefix window cached (and no other files): the plain cold window instead
    assert warm_start(full, 0, cursor, tok, 120) is None


def test_warm_start_keeps_cached_other_files_before_a_cold_window(small_tokenizer):
    from lsp_server.completion.cold_window import warm_start
    from lsp_server.completion.prompt import Cursor, fim_prompt

    tok = _qwen_like(small_tokenizer)
    cursor = Cursor("".join(f"value_{i} = compute({i})\n" for i in range(200)), "")
    head = tok.encode("other.py\ndef compute(x):\n    return x\n")
    full = fim_prompt(tok, cursor.prefix, cursor.suffix, head)
    prompt = warm_start(full, len(head) + 1, cursor, tok, 100)  # the other file and <fim_prefix>
    assert prompt[:len(head) + 1] == full[:len(head) + 1]
    assert "value_199 = compute(199)\n" in tok.decode(prompt[len(head) + 1:])
    assert warm_start(full, len(head) - 1, cursor, tok, 100) is None  # not even the other file whole


def test_a_cold_window_grows_down_to_a_cursor_below_it(small_tokenizer):
    from lsp_server.completion.cold_window import cold_prompt, grown_prompt
    from lsp_server.completion.prompt import Cursor

    tok = _qwen_like(small_tokenizer)
    lines = SOURCE.split("\n")
    first, shown = cold_prompt(Cursor(SOURCE, "\n        return filler\n"), tok, 200)
    assert shown[-1] == len(lines) - 1 and tok.decode(first).endswith("return filler\n")
    written = SOURCE + "filler += 60\n        filler += 61\n        "
    grown, grown_shown = grown_prompt(Cursor(written, "\n        return filler\n"), tok, 200, shown)
    assert grown_shown == (*shown, len(lines), len(lines) + 1)  # the same lines, then every new one
    assert tok.decode(grown).startswith(tok.decode(first).split("filler += 59")[0])  # the same start
    assert "filler += 60\n        filler += 61\n        " in tok.decode(grown)
    assert "def area(self," in tok.decode(grown)  # the header it showed stays
    # a cursor above the line it grew from: another spot, no growing
    above = SOURCE[:SOURCE.index("        filler += 30")] + "        "
    assert grown_prompt(Cursor(above, ""), tok, 200, shown) is None


def test_a_cold_window_starts_with_the_best_definitions_that_fit_a_third_of_it(small_tokenizer):
    """Other files' definitions before the cold window's lines: the best file's first lines (the
    full prompt's blocks have it last), at most a third of the budget, in the repository format;
    the lines above the cursor get the rest."""
    from engine.tokenization.tokenizer import RepoTokens
    from lsp_server.completion.cold_window import cold_head, cold_prompt, grown_prompt
    from lsp_server.completion.prompt import Block, Cursor, repo_head

    tok = _qwen_like(small_tokenizer)
    tok.repo = RepoTokens(3, 4)
    best = Block("shapes.py", "def area(side: float, scale: float = 1.0) -> float:\n" + "    ...\n" * 40)
    other = Block("util.py", "def clamp(value, low, high):\n    ...")
    head = cold_head([other, best], tok, 240, "main.py", "proj")
    assert 0 < len(head) <= 240 // 3
    assert head[:1] == [3] and head.count(4) >= 2  # <|repo_name|>, a file, then this file's <|file_sep|>
    text = tok.decode(head)
    assert "shapes.py\ndef area(side: float, scale: float = 1.0) -> float:" in text  # the best, from its start
    assert "util.py" not in text  # the best file's lines took the whole third
    short = Block("shapes.py", "def area(side: float) -> float:\n    ...")
    both = cold_head([other, short], tok, 3000, "main.py", "proj")
    assert both == repo_head(tok, [other, short], "main.py", "proj")  # both whole, the best file last
    assert len(cold_head([other, best], tok, 3000, "main.py", "proj")) <= 100  # HEAD_TOKENS whatever the budget
    tok.repo = None
    assert cold_head([best], tok, 240, "main.py", "proj") == []  # no repository format: no head

    tok.repo = RepoTokens(3, 4)
    lines = [f"value_{i} = area({i})" for i in range(200)]
    cursor = Cursor("\n".join(lines) + "\n", "\nprint(value_0)\n")
    prompt, shown = cold_prompt(cursor, tok, 240, head)
    assert prompt[:len(tok.with_bos(head))] == tok.with_bos(head)  # the head first
    assert len(prompt) <= 240 + 8  # the template's few tokens
    plain, plain_shown = cold_prompt(cursor, tok, 240)
    assert len(shown) < len(plain_shown) and shown[-1] == plain_shown[-1]  # fewer lines, still the nearest
    below = Cursor(cursor.prefix + "value_200 = area(200)\n", cursor.suffix)
    grown, _ = grown_prompt(below, tok, 240, shown, head)
    assert grown[:len(tok.with_bos(head))] == tok.with_bos(head)  # the same head: still cached
    assert "value_199 = area(199)\nvalue_200 = area(200)\n" in tok.decode(grown)
