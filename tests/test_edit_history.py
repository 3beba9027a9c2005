"""The recent edits kept per document: keystrokes merge, undone edits go, and nothing a
client sends (huge pastes, whole-file replaces, binary text, undo storms) makes it grow or fail."""
import random

from lsp_server.next_edit.history import (
    MAX_EDIT_CHARS, MAX_EDITS, Edit, EditHistories, EditHistory, changed_span, edits_between)

CODE = "def area(w, h):\n    return w * h\n\n\ndef volume(w, h, d):\n    return area(w, h) * d\n"


def typed(history: EditHistory, text: str, at: int, word: str) -> str:
    """Type `word` at offset `at` one character at a time; the final text."""
    for i in range(1, len(word) + 1):
        history.update(text[:at] + word[:i] + text[at:])
    return text[:at] + word + text[at:]


def test_changed_span_is_the_smallest():
    assert changed_span("abcdef", "abXYef") == (2, 4, 4)
    assert changed_span("aaa", "aaaa") == (3, 3, 4)
    assert changed_span("same", "same") == (4, 4, 4)
    assert changed_span("", "new") == (0, 0, 3)


def test_keystrokes_merge_into_one_edit_with_its_lines():
    history = EditHistory(CODE)
    at = CODE.index("w, h):")
    text = typed(history, CODE, at, "width_")
    assert history.edits() == [Edit("def area(w, h):", "def area(width_w, h):", 0)]
    # Backspacing inside the same edit keeps one edit.
    history.update(text.replace("width_w", "widthw"))
    assert history.edits() == [Edit("def area(w, h):", "def area(widthw, h):", 0)]


def test_separate_places_make_separate_edits_in_order():
    history = EditHistory(CODE)
    text = CODE.replace("return w * h", "return w * h  # m2")
    history.update(text)
    text2 = text.replace("* d", "* depth")
    history.update(text2)
    assert history.edits() == [
        Edit("    return w * h", "    return w * h  # m2", 1),
        Edit("    return area(w, h) * d", "    return area(w, h) * depth", 5)]


def test_an_undone_edit_is_forgotten_and_earlier_spans_follow_shifts():
    history = EditHistory(CODE)
    history.update(CODE.replace("volume", "cuboid_volume"))
    history.update(CODE)  # undo
    assert history.edits() == []
    first = CODE.replace("return area", "return area_of")
    history.update(first)
    second = "# header\n" + first  # text added above the first edit shifts it
    history.update(second)
    assert [e.line for e in history.edits()] == [6, 0]
    history.update(first)  # the header undone: the first edit is still right
    assert history.edits() == [Edit("    return area(w, h) * d", "    return area_of(w, h) * d", 5)]


def test_typing_then_deleting_leaves_no_edit():
    history = EditHistory(CODE)
    at = CODE.index("\n\n")
    text = typed(history, CODE, at, "xyz")
    for n in range(3, 0, -1):
        history.update(text[:at] + "xyz"[:n - 1] + text[at + 3:])
    assert history.edits() == []


def test_bounded_against_pastes_replaces_binary_and_storms():
    history = EditHistory(CODE)
    history.update(CODE + "x" * (MAX_EDIT_CHARS + 1))  # a huge paste: not kept
    assert history.edits() == []
    history.update("completely different\n" * 500)  # a whole-file replace: too big to keep
    assert history.edits() == []
    history.update("bin\0ary")
    assert history.edits() == []
    history.update(CODE)  # text again: history restarts from here
    history.update(CODE.replace("d):", "depth):"))
    assert len(history.edits()) == 1
    rng = random.Random(0)
    text = CODE
    for _ in range(2000):  # an undo/redo storm and random typing anywhere
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(["", "a", "\n", "zz"]) + text[at + rng.randrange(3):]
        history.update(text)
        assert len(history.edits()) <= MAX_EDITS
    for edit in history.edits():  # each kept edit's lines are in the text
        assert edit.after in text


def test_histories_keep_open_documents_apart():
    histories = EditHistories()
    histories.opened("a", CODE)
    histories.changed("a", CODE.replace("h)", "height)", 1))
    histories.changed("b", "x = 1\n")  # never opened: its history starts now
    assert len(histories.edits("a")) == 1 and histories.edits("b") == []
    histories.closed("a")
    assert histories.edits("a") == []


def test_edits_between_two_versions_of_a_file():
    new = CODE.replace("return w * h", "return float(w * h)").replace("d):", "d):\n    assert d >= 0")
    edits = edits_between(CODE, new)
    assert edits == [Edit("    return w * h", "    return float(w * h)", 1),
                     Edit("def volume(w, h, d):", "def volume(w, h, d):\n    assert d >= 0", 4)]
    assert edits_between(CODE, CODE) == []


def test_several_changes_sent_at_once_are_separate_edits():
    histories = EditHistories()
    histories.opened("a", CODE)
    after = CODE.replace("area(w, h):\n    return w * h", "area(width, h):\n    return width * h")
    # Two changes in one notification (Neovim batches a tick's changes), UTF-16 ranges.
    histories.changed("a", after, [((0, 9, 0, 10), "width"), ((1, 11, 1, 12), "width")])
    assert [e.line for e in histories.edits("a")] == [0, 1]
    # A range outside the text, or changes that do not lead to the editor's text: its text wins.
    histories.changed("a", after + "x", [((99, 0, 99, 0), "y")])
    assert histories.edits("a")[-1].after.endswith("x")
    emoji = "s = '😀'\n"
    histories.opened("b", emoji)
    histories.changed("b", "s = '😀!'\n", [((0, 7, 0, 7), "!")])  # after the emoji: 2 units
    assert histories.edits("b") == [Edit("s = '😀'", "s = '😀!'", 0)]
