"""Next-edit prediction: the window, the prompt, the smallest edit, and a rewrite decoded
speculatively that is exactly plain decoding's."""
from engine.draft_length import PassCosts
from lsp_server.next_edit.history import Edit
from lsp_server.next_edit.rewrite import (
    WINDOW_LINES, NextEdit, Position, Shown, Window, chat_prompt, first_change_end, instruction, keep_layout,
    onto_window, predict, shown_window, smallest_edit, window_at)

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
    # A change spanning blank lines: the rewrite's lines, its blank lines among them, replace
    # the window's, which are not kept twice.
    spaced = "def f(a):\n    return a\n\n\ndef g(a):\n    return a"
    renamed = spaced.replace("(a)", "(x)").replace("return a", "return x")
    assert keep_layout(spaced, renamed) == renamed
    assert keep_layout(spaced, renamed.replace("\n\n\n", "\n")) == renamed  # its blank lines dropped


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


def test_the_speculative_rewrite_is_plain_decodings(fp32_engine, monkeypatch):
    monkeypatch.setattr(fp32_engine, "costs", PassCosts())  # flat: drafting pays on any machine's load
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(width, height):\n    return 2 * (width + height)\n"
    spec = predict(fp32_engine, code, 1, [RENAME], "shapes.py", "lookup")
    plain = predict(fp32_engine, code, 1, [RENAME], "shapes.py", "ar")
    assert spec.rewrite is not None and spec.rewrite == plain.rewrite and spec.edit == plain.edit
    assert spec.stats.target_passes < plain.stats.target_passes  # the window's lines come from lookup


def test_the_rewrite_ends_once_it_copies_the_window_again_after_a_change():
    window = "a = 1\nb = 2\n\nc = 3\nd = 4\ne = 5\nf = 6"

    def finished(text):
        end = first_change_end(window, text)
        return end and text[:end.cut] + "\n".join(window.split("\n")[end.resume:])

    assert finished("a = 1\nb = 2\n\nc = 3\n") is None  # no change yet
    assert finished("a = 1\nB = 2\n\nc = 3\n") is None  # not yet two lines copied again
    assert finished("a = 1\nB = 2\n\nc = 3\nd = 4\ne") == "a = 1\nB = 2\n\nc = 3\nd = 4\ne = 5\nf = 6"
    assert finished("a = 1\nb = 2\nX\nc = 3\nd = 4\n") == "a = 1\nb = 2\nX\nc = 3\nd = 4\ne = 5\nf = 6"
    assert finished("a = 1\nd = 4\ne = 5\n") == "a = 1\nd = 4\ne = 5\nf = 6"  # lines deleted
    assert finished("a = 1\nb = 2\nc = 3  \nd = 4\ne = 5\n") is None  # blank lines and trailing spaces aside
    longer = "a = 1\nB = 2\n\nc = 3\nd = 4\nE = 5\nf = 6\n"  # a later change does not undo the first end
    assert first_change_end(window, longer) == first_change_end(window, "a = 1\nB = 2\n\nc = 3\nd = 4\n")


def test_the_model_is_shown_the_window_before_the_last_edit_and_its_redo_is_dropped():
    window = Window(10, "def f(w, h):\n    return w * h\n\ndef g(width):\n    return width")
    edit = Edit("def f(width, height):\n    return width * height", "def f(w, h):\n    return w * h", 10)
    shown = shown_window(window, [edit])
    assert shown.text == "def f(width, height):\n    return width * height\n\ndef g(width):\n    return width"
    assert shown.undone == (0, 2) and shown.edited == ((0, 2),)
    # The model makes the user's edit again (or differently) and the next one: only the next one counts.
    rewrite = "def f(w, height):\n    return w * height\n\ndef g(w):\n    return w"
    assert onto_window(shown, rewrite, window.text) == "def f(w, h):\n    return w * h\n\ndef g(w):\n    return w"
    assert onto_window(shown, shown.text, window.text) == window.text  # nothing but the undo: no edit
    elsewhere = Edit("x = 1", "x = 2", 3)  # not inside the window: shown as it is
    assert shown_window(window, [elsewhere]) == Shown(window.text, (), None)


def test_earlier_edits_are_never_undone_and_lines_after_an_undone_edit_shift():
    window = Window(0, "x.add(1)\nx.add(2)\nx.append(3)\nx.append(4)")
    edits = [Edit("x.append(1)", "x.add(1)", 0), Edit("x.append(2)", "x.add(2)", 1)]
    shown = shown_window(window, edits)
    assert shown.text == "x.add(1)\nx.append(2)\nx.append(3)\nx.append(4)" and shown.edited == ((0, 1), (1, 2))
    reverted = "x.append(1)\nx.append(2)\nx.append(3)\nx.append(4)"  # the model undoes the first edit
    assert onto_window(shown, reverted, window.text) == window.text
    assert onto_window(shown, "x.add(1)\nx.add(2)\nx.add(3)\nx.append(4)", window.text) == \
        "x.add(1)\nx.add(2)\nx.add(3)\nx.append(4)"
    # An edit that added a line: undone, the window is a line shorter; changes below land right.
    grown = Window(0, "a(1)\n# note\nb(2)\nc(3)")
    shown = shown_window(grown, [Edit("a(1)", "a(1)\n# note", 0)])
    assert shown.text == "a(1)\nb(2)\nc(3)" and shown.undone == (0, 1)
    assert onto_window(shown, "a(1)\nb(2)\nc(30)", grown.text) == "a(1)\n# note\nb(2)\nc(30)"


def test_the_users_own_edit_made_again_does_not_end_the_rewrite():
    window = "a\n    x.comb(1)\n\nb\nc\n    x.comb(2)\nd\ne\nf"
    text = window.replace("comb", "perm") + "\n"  # the user's edit (line 1) made again, then the next one
    end = first_change_end(window, text, ((1, 2),))
    assert end.resume == 8 and text[:end.cut] + "\n".join(window.split("\n")[end.resume:]) == window.replace("comb", "perm")
    assert first_change_end(window, text).resume == 5  # unmarked, line 1 is the first change


def test_a_place_is_rewritten_alone_and_its_edit_stays_within_its_lines(fp32_engine, monkeypatch):
    code = "class A:\n    pass\n" + CODE + "class B(object):\n    pass\n"
    asked, complete = [], fp32_engine.complete
    monkeypatch.setattr(fp32_engine, "complete", lambda prompt, *rest: asked.append(prompt) or complete(prompt, *rest))
    prediction = predict(fp32_engine, code, 0, [Edit("class A(object):", "class A:", 0)], "a.py")
    shown = fp32_engine.tokenizer.decode(asked[0])
    assert "class B(object):" in shown and "line39" not in shown  # the place's line, not a window around it
    assert prediction.edit is None or prediction.edit.start.line == prediction.edit.end.line == 42


def test_an_old_form_that_stands_nowhere_proposes_nothing_without_a_pass(fp32_engine):
    code = "class A:\n    pass\n\n\nclass B:\n    pass\n"
    prediction = predict(fp32_engine, code, 0, [Edit("class A(object):", "class A:", 0)], "a.py")
    assert prediction.edit is None and prediction.rewrite is None and prediction.stats.new_tokens == 0
