"""The pause replay's user clock (lsp_server/bench/pauses.py, pause_editors.py), without a model:
what a screen shows as keys come and answers arrive, and how pauses are scored."""
import math

from lsp_server.bench.pause_editors import Screen
from lsp_server.bench.pauses import Pause, User, cross_file_walks, summarize, wilson
from lsp_server.bench.sources import find_sources


def test_an_answer_is_shown_only_for_the_text_it_was_asked_for():
    screen = Screen()
    screen.lines = ["def f(x):"]
    screen.type("\n    ")
    asked = screen.version
    screen.type("r")
    screen.show("return x", asked)  # typing moved on: it belongs to another cursor
    assert screen.ghost == ""
    screen.show("eturn x", screen.version)
    assert screen.ghost == "eturn x"


def test_ghost_text_stays_while_the_user_types_what_it_says():
    screen = Screen()
    screen.lines = ["    "]
    screen.show("return x\n", screen.version)
    for key in "retu":
        screen.type(key)
    assert screen.ghost == "rn x\n" and screen.lines == ["    retu"]
    screen.type("s")  # not what it says: gone
    assert screen.ghost == ""


def test_a_pause_is_right_from_the_moment_the_right_line_shows():
    pause = Pause("c", "f.py", 3, "return x", True, [(0.0, ""), (0.7, "return y"), (1.2, "return x")])
    assert [pause.right_at(t) for t in (0.5, 1.0, 1.5)] == [False, False, True]
    assert [bool(pause.shown_at(t)) for t in (0.5, 1.0)] == [False, True]
    assert pause.first_ghost_s == 0.7
    assert Pause("c", "f.py", 3, "x", True, [(0.0, "")]).first_ghost_s == math.inf


def test_wilson_interval_holds_the_share_and_narrows_with_more_cases():
    low, high = wilson(8, 48)
    assert low < 8 / 48 < high
    low2, high2 = wilson(20, 120)
    assert high2 - low2 < high - low
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0


def test_summary_counts_by_moment_and_splits_first_pauses_from_later_ones():
    user = User(pause_s=2.0)
    pauses = [Pause("a", "f.py", 1, "x = 1", True, [(0.0, ""), (1.8, "x = 1")]),
              Pause("a", "f.py", 2, "y = 2", False, [(0.0, "y = 2")]),
              Pause("a", "f.py", 3, "z = 3", False, [(0.0, ""), (0.3, "z = 4")])]
    numbers = summarize(pauses, user)["a"]
    assert user.moments() == [0.5, 1.0, 1.5, 2.0]
    assert [numbers[f"right_by_{t:g}s"]["count"] for t in user.moments()] == [1, 1, 1, 2]
    assert numbers["shown_by_0.5s"] == 2 and numbers["shown_by_2s"] == 3
    assert numbers["first_in_file"]["pauses"] == 1 and numbers["first_in_file"]["right_by_1.5s"]["count"] == 0
    assert numbers["later_in_file"]["right_by_2s"]["count"] == 1
    assert numbers["p50_s"] == 0.3 and numbers["p90_s"] == 1.8


def test_cross_file_pauses_are_lines_using_another_files_names_one_per_walk(tmp_path):
    """Each walk opens its file just before a line that uses a name another file defines; the
    files are taken in turn, so two files give alternating walks."""
    shapes = tmp_path / "shapes.py"
    shapes.write_text("class Widget:\n    pass\n\n\ndef make_widget(size):\n    return Widget()\n")
    users = []
    for name in ("first.py", "second.py"):
        body = [f"value_{i} = {i} * 2" for i in range(25)]
        body[21] = "widget = make_widget(value_3)"
        body[23] = "other = Widget()"
        (tmp_path / name).write_text("\n".join(body) + "\n")
        users.append(tmp_path / name)
    sources = find_sources([tmp_path]).files
    chosen = cross_file_walks(sources, 3, seed=0)
    assert len(chosen) == 3 and all(w.pauses == [w.first] for w in chosen)
    assert {w.path for w in chosen} == set(users) and chosen[0].path != chosen[1].path
    assert all(w.lines[w.first].strip() in ("widget = make_widget(value_3)", "other = Widget()") for w in chosen)
    assert cross_file_walks(sources, 3, seed=0) == chosen


def test_the_whole_windows_answers_are_counted_beside_the_screen():
    """Right with the whole window (asked again, waited for), and of those, right on screen by
    the pause's end."""
    user = User(pause_s=2.0)
    pauses = [Pause("d", "f.py", 1, "a = 1", True, [(0.0, ""), (1.0, "a = 1")], whole_window="a = 1"),
              Pause("d", "f.py", 2, "b = 2", False, [(0.0, "")], whole_window="b = 2"),
              Pause("d", "f.py", 3, "c = 3", False, [(0.0, "c = 3")], whole_window="c = 4")]
    whole = summarize(pauses, user)["d"]["whole_window"]
    assert (whole["pauses"], whole["right"], whole["right_on_screen_by_the_end"]) == (3, 2, 1)
    assert "whole_window" not in summarize([Pause("d", "f.py", 1, "x", True, [(0.0, "")])], user)["d"]
