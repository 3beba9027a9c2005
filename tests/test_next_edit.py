"""Next-edit prediction: the window, the prompt, the smallest edit, and a rewrite decoded
speculatively that is exactly plain decoding's."""
from lsp_server.edit_history import Edit
from lsp_server.next_edit import (
    WINDOW_LINES, NextEdit, Position, Window, chat_prompt, instruction, keep_layout, predict,
    smallest_edit, window_at)

CODE = "".join(f"line{i}\n" for i in range(40))
RENAME = Edit("def area(width, height):", "def area(w, h):", 0)


def test_the_window_surrounds_the_cursor_without_blank_ends():
    window = window_at(CODE, 20)
    lines = window.text.split("\n")
    assert window.first <= 20 < window.first + len(lines) and len(lines) == WINDOW_LINES
    assert lines[0] == f"line{window.first}"
    assert window_at("\n\nx = 1\n\n\n", 0) == Window(2, "x = 1")
    assert window_at(CODE, 39).first + WINDOW_LINES == 41  # at the end: the last lines


def test_smallest_edit_in_document_coordinates_and_utf16():
    window = Window(10, "a = 1\nb = 'é😀x'\nc = 3")
    assert smallest_edit(window, window.text) is None
    edit = smallest_edit(window, "a = 1\nb = 'é😀y'\nc = 3")
    assert edit == NextEdit(Position(11, 8), Position(11, 9), "y")  # 😀 counts two UTF-16 units
    edit = smallest_edit(window, "a = 1\nc = 3")
    assert edit.start == Position(11, 0) and edit.text == ""


def test_blank_lines_and_trailing_whitespace_are_the_windows():
    window = "x = 1  \n\ny = 2\n\n\nz = 3"
    assert keep_layout(window, "x = 1\ny = 2\nz = 3") == window  # dropped blank lines: no edit
    assert keep_layout(window, "x = 1\n\ny = 20\n\nz = 3") == "x = 1  \n\ny = 20\n\n\nz = 3"
    assert keep_layout(window, "x = 1\ny = 2\nw = 0\n\nw += 1\nz = 3") == \
        "x = 1  \n\ny = 2\nw = 0\n\nw += 1\n\n\nz = 3"  # an inserted block keeps its own blank line
    assert keep_layout("a\nb", "a") == "a" and keep_layout("a", "b\na") == "b\na"


def test_the_prompt_holds_the_edits_the_window_and_the_answer_start(fp32_engine):
    user = instruction([RENAME], "print(area(width, height))", "python")
    assert user.index("def area(width, height):") < user.index("became") < user.index("print(area")
    prompt = chat_prompt(fp32_engine.tokenizer, user, "```python\n")
    assert isinstance(prompt, list)  # token ids: the chat template's control tokens are tokens
    text = fp32_engine.tokenizer.decode(prompt)
    assert text.endswith("assistant\n```python\n") and "print(area(width, height))" in text


def test_no_edits_no_prediction(fp32_engine):
    prediction = predict(fp32_engine, CODE, 3, [])
    assert prediction.edit is None and prediction.rewrite is None


def test_the_speculative_rewrite_is_plain_decodings(fp32_engine):
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(width, height):\n    return 2 * (width + height)\n"
    spec = predict(fp32_engine, code, 1, [RENAME], "shapes.py", "lookup")
    plain = predict(fp32_engine, code, 1, [RENAME], "shapes.py", "ar")
    assert spec.rewrite is not None and spec.rewrite == plain.rewrite and spec.edit == plain.edit
    assert spec.stats.target_passes < plain.stats.target_passes  # the window's lines come from lookup
