"""Where the next edit is due (lsp_server/next_edit/places.py): the last edit's old form, names
abstracted, found where it still stands, nearest first and below before above; the model
rewrites the nearest place's lines."""
from lsp_server.next_edit.history import MAX_EDIT_CHARS, Edit, EditHistory
from lsp_server.next_edit.places import pattern_of, places
from lsp_server.next_edit.rewrite import Target, Window, target_for, window_at


def filler(n: int, tag: str) -> list[str]:
    return [f"    {tag}_{i} = {i}" for i in range(n)]


def test_old_classes_are_found_below_first_then_above_and_changed_ones_are_not():
    lines = ["class Top(object):", *filler(3, "a"), "class Done:", *filler(3, "b"), "class Edited:",
             *filler(30, "c"), "class Far(object):", *filler(3, "d"), "class Near( object ) :"]
    text = "\n".join(lines)
    edit = Edit("class Edited(object):", "class Edited:", 8)
    found = places(text, 8, [edit])
    assert found == [lines.index("class Far(object):"), lines.index("class Near( object ) :"), 0]
    assert places(text, 60, [edit]) == [lines.index("class Near( object ) :"), lines.index("class Far(object):"), 0]


def test_super_with_any_class_name_but_not_the_new_form():
    text = "\n".join(["        super(Alpha, self).__init__(a)", "        super().__init__(b)",
                      "        super(Beta, self).run()", "        notsuper(Gamma, self).x"])
    edit = Edit("        super(Zeta, self).__init__()", "        super().__init__()", 10)
    assert places(text, 0, [edit]) == [0, 2]


def test_a_loop_variable_binds_once_for_yield_from():
    edit = Edit("        for x in self._items(a):\n            yield x", "        yield from self._items(a)", 0)
    text = "\n".join(["def f():", "    for item in walk(tree, 2):", "        yield item",
                      "def g():", "    for item in walk(tree):", "        yield other"])
    assert places(text, 0, [edit]) == [1]


def test_a_rename_finds_the_old_names_as_words():
    edit = Edit("def area(width, height):", "def area(w, h):", 0)
    text = "def area(w, h):\n    return width * height\n\ndef box(widths):\n    return 2 * (width + h)"
    assert places(text, 0, [edit]) == [1, 4]


def test_a_word_typed_on_at_the_end_of_its_line_is_no_change_to_repeat():
    text = "    if c\n    pass\n    return [c for c in chunks]\n    x = c"
    assert places(text, 0, [Edit("    if c", "    if chu", 0)]) == []  # `c` is a name below: not renamed
    assert pattern_of(Edit("    x = c + 1", "    x = chu + 1", 0)) is not None  # the same change mid-line


def test_no_pattern_for_a_change_of_spaces_or_one_the_new_lines_still_hold():
    assert pattern_of(Edit("x = f( a )", "x = f(a)", 0)) is None
    assert pattern_of(Edit("f(a)", "f(a)\nf(a)", 0)) is None  # the old form stands in the new lines
    assert pattern_of(Edit("x = 1", "x = 2", 0)).regex.search("y = 1") is None  # a bare number: its name kept


def test_an_earlier_edit_gives_the_places_when_the_last_has_none():
    text = "class A:\n    pass\nclass B(object):\n    pass"
    edits = [Edit("class A(object):", "class A:", 0), Edit("    pass ", "    pass", 1)]
    assert places(text, 1, edits) == [2]


def test_the_model_rewrites_the_nearest_places_lines_as_many_as_the_edits_old_ones():
    lines = ["class A:", *filler(40, "x"), "class B(object):", *filler(5, "y"), "class C(object):"]
    text = "\n".join(lines)
    edit = Edit("class A(object):", "class A:", 0)
    assert target_for(text, 0, [edit]) == Target(Window(41, "class B(object):"), edit)
    assert target_for(text, 45, [edit]).window.first == 47  # below the cursor first
    assert target_for("\n".join(lines[:41]), 0, [edit]) is None  # its old form stands nowhere: nothing due
    spaces = Edit("x = f( a )", "x = f(a)", 0)  # no old form to look for: the cursor's window
    assert target_for(text, 0, [spaces]) == Target(window_at(text, 0), None)


def test_a_place_starts_where_lines_like_the_edits_old_ones_start():
    """The old form's pattern starts on the edit's second old line: the place starts a line
    above its match, and spans both lines."""
    edit = Edit("    def __lt__(self, other):\n        # type: (object) -> bool",
                "    def __lt__(self, other: object) -> bool:", 0)
    assert pattern_of(edit).line == 0
    text = "\n".join(["    def __lt__(self, other: object) -> bool:", "        return False", "",
                      "    def __le__(self, other):", "        # type: (object) -> bool", "        return True"])
    assert places(text, 0, [edit]) == [3]
    assert target_for(text, 0, [edit]).window == Window(3, "\n".join(text.split("\n")[3:5]))
    tail = Edit("x = 1\ny = old_name(2)", "x = 1\ny = new_name(2)", 0)  # the match on the old lines' second
    assert pattern_of(tail).line == 1 and places("a = 0\nb = 1\nc = old_name(3)", 0, [tail]) == [1]


def test_bad_or_stale_history_gives_no_place():
    text = "class A(object):\n    pass\n" + "\n".join(filler(30, "x")) + "\nclass B(object):\n    pass"
    history = EditHistory(text)
    history.update(text.replace("class A(object):", "class A:"))
    assert places(history.text, 0, history.edits()) == [32]
    history.update(text)  # undone
    assert history.edits() == [] and places(text, 0, history.edits()) == []
    pasted = "class C(object):\n    pass\n" * (MAX_EDIT_CHARS // 20)
    history.update(pasted + text)  # a huge paste is no edit to repeat
    assert places(history.text, 0, history.edits()) == []


def test_strings_changed_inside_and_names_replaced_by_builtins():
    text = "\n".join(["x = u'done'", "y = 'plain'", "z = u\"both\"", "m = '{0}: {1}'.format(a, b)", "n = '{}'.format(c)",
                      "s = text_type(v)", "@u_format", "def g(): pass"])
    dropped_prefix = Edit("w = u'kept'", "w = 'kept'", 20)
    assert places(text, 0, [dropped_prefix]) == [0, 2]
    assert places(text, 0, [Edit("t = '{0} left'.format(x)", "t = '{} left'.format(x)", 20)]) == [3]
    assert places(text, 0, [Edit("r = text_type(q)", "r = str(q)", 20)]) == [5]
    assert places(text, 0, [Edit("@u_format\ndef f(): pass", "def f(): pass", 20)]) == [6]


def test_text_between_changes_spans_only_its_own_line_ends():
    edit = Edit("p = 1 x 2\ny 3", "p = 10 x 20\ny 30", 5)  # two unchanged runs: `x` on a line, `y` after one
    assert places("q = 1 x 2\ny 3\nr = 1 x\n2 y 3", 0, [edit]) == [0]


def test_a_sprawling_change_gives_no_pattern():
    quotes = Edit("f('a', 'b', 'c')", 'f("a", "b", "c")', 0)  # three strings changed: three wildcards
    assert pattern_of(quotes) is None
    assert pattern_of(Edit("f('a', 'b')", 'f("a", "b")', 0)) is not None


def test_where_the_whole_form_stands_nowhere_the_changed_span_alone_finds_the_same_change():
    """The loose form: `.format` of another string in another call, a `u` prefix dropped from
    several strings at once (too many to make one whole form); never a change that does not pin
    itself down, never where the whole form stands somewhere, never a place where none is due."""
    fstring = Edit('html_title = "{} Documentation".format(version)', 'html_title = f"{version} Documentation"', 0)
    text = "\n".join(["x = 1", '    (master_doc, "proj-{}.tex".format(version), html_title)',
                      'y = "{}".format(a.b)', 'z = f"{version} Documentation"'])
    assert pattern_of(fstring).regex.search(text) is None and places(text, 0, [fstring]) == [1]
    prefixes = Edit('    (u"a", u"b"),\n    (u"c", u"d"),', '    ("a", "b"),\n    ("c", "d"),', 10)
    assert pattern_of(prefixes) is None
    assert places('rows = [\n    (u"x", u"y"),\n    ("p", "q"),\n]', 0, [prefixes]) == [1]
    assert pattern_of(Edit("x = 1", "x = 2", 0), loose=True) is None  # a bare number: no anchor
    whole = "\n".join(['a = "{}".format(b)', 'title = "{} Documentation".format(name)'])
    assert places(whole, 0, [fstring]) == [1]  # the whole form first, where it stands
    assert places("def f():\n    return g(1)\n", 0, [fstring, prefixes]) == []
