"""The typed-through cache (lsp_server/completion/typed_through.py): the shown suggestion while the
user types it, and the one made ahead for where accepting it puts the cursor."""
from lsp_server.completion.typed_through import Shown, TypedThroughCache, next_indent


def rest(cache: TypedThroughCache, uri: str, prefix: str, suffix: str) -> str | None:
    kept = cache.lookup(uri, prefix, suffix)
    return None if kept is None else kept.text


def test_the_shown_suggestion_answers_while_the_user_types_it():
    cache = TypedThroughCache()
    cache.remember("a", "x = ", "\n", "compute(1)")
    assert rest(cache, "a", "x = ", "\n") == "compute(1)"
    assert rest(cache, "a", "x = comp", "\n") == "ute(1)"
    assert rest(cache, "a", "x = cx", "\n") is None  # typed something else
    assert rest(cache, "a", "x = compute(1)", "\n") is None  # all of it typed: nothing left
    assert rest(cache, "a", "x = ", "") is None  # the text after the cursor changed


def test_an_answer_from_a_cold_window_says_so_as_it_is_typed_through():
    cache = TypedThroughCache()
    cache.remember("a", "x = ", "\n", "compute(1)", whole=False)
    assert cache.lookup("a", "x = comp", "\n") == Shown("x = comp", "\n", "ute(1)", whole=False)
    cache.remember("a", "x = comp", "\n", "are(2)")  # the full window's answer takes its place
    assert cache.lookup("a", "x = comp", "\n") == Shown("x = comp", "\n", "are(2)", whole=True)


def test_the_suggestion_made_ahead_answers_after_an_accept_and_outlives_it():
    cache = TypedThroughCache()
    cache.remember("a", "def f():\n", "", "    a = 1")
    cache.remember_next("a", "def f():\n    a = 1\n    ", "", "return a")
    cache.accepted("a")
    assert rest(cache, "a", "def f():\n    a = 1\n    ", "") == "return a"
    assert rest(cache, "a", "def f():\n    a = 1\n    ret", "") == "urn a"
    cache.forget("a")
    assert rest(cache, "a", "def f():\n    a = 1\n    ", "") is None


def test_the_next_line_is_indented_as_an_editor_indents_it():
    assert next_indent("    x = 1") == "    "
    assert next_indent("    if x:") == "        "
    assert next_indent("\tcall(") == "\t\t"
    assert next_indent("y = [") == "    "
