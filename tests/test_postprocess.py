"""The suggestion-shaping rules, on hand-written editing situations."""
from lsp_server.completion.cleanup import clean, is_multiline, may_suggest, stop_rule


def test_suggest_only_where_closers_or_nothing_follow():
    assert may_suggest("")
    assert may_suggest(")]  ")
    assert may_suggest('")')
    assert not may_suggest("x + 1)")


def test_multiline_after_a_block_opener_at_line_end():
    assert is_multiline("    def area(self):", "", "auto")
    assert is_multiline("if (x) {", "", "auto")
    assert not is_multiline("    x = compute(", "", "auto")
    assert not is_multiline("    for x in y:", ")", "auto")  # text right of the cursor
    assert is_multiline("x = 1", "", "always") and not is_multiline("def f():", "", "never")


def test_single_line_stops_at_the_first_newline():
    rule = stop_rule(False, "    return ")
    assert rule("a + b") is None
    assert rule("a + b\n    c") == 5


def test_multiline_stops_at_the_end_of_the_block():
    rule = stop_rule(True, "    def area(self):")
    body = "\n        r = self.r\n        return r * r"
    assert rule(body) is None
    assert rule(body + "\n\n    def perimeter(self):") == len(body) + 1
    assert rule(body + "\n    ") is None  # indentation not complete yet: wait for text


def test_clean_drops_closers_already_in_the_editor():
    assert clean("x + 1)", ")", []) == "x + 1"
    assert clean("x + 1", ")", []) == "x + 1"


def test_clean_drops_a_tail_that_repeats_the_following_lines():
    text = "\n        total += x\n    return total"
    assert clean(text, "", ["    return total", ""]) == "\n        total += x"
    assert clean("\n    return total", "", ["    return total"]) == ""  # nothing new: no suggestion
