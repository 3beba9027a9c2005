"""The next-edit workload's cases and scoring (lsp_server/bench/edit_cases.py, next_edits.py),
on two small made-up releases of a package: no model needed."""
import io
import tarfile
from pathlib import Path

from lsp_server.bench.edit_cases import MAX_DISTANCE, sdist_cases
from lsp_server.bench.next_edit_pauses import before_edit
from lsp_server.bench.next_edits import (
    EditResult, apply_edit, changes_only_as, is_next_edit, is_right, region_similarity, summarize, window_release)
from lsp_server.next_edit.rewrite import NextEdit, Position

OLD = "\n".join(["import os", "", "def a(path):", "    return os.path.join(path, 'a')", "",
                 "def b(path):", "    return os.path.join(path, 'b')", "",
                 "def c(path):", "    return os.path.join(path, 'c')", ""])
NEW = OLD.replace("os.path.join(path, ", "join_path(path, ")
SINGLE_OLD, SINGLE_NEW = "x = 1\ny = 2\n", "x = 1\ny = 3\n"


def sdist(folder: Path, name: str, files: dict[str, str]) -> Path:
    path = folder / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for file, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/{file}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_cases_from_two_releases(tmp_path):
    old = sdist(tmp_path, "pkg-1.0", {"pkg/paths.py": OLD, "pkg/single.py": SINGLE_OLD, "README.md": "a"})
    new = sdist(tmp_path, "pkg-1.1", {"pkg/paths.py": NEW, "pkg/single.py": SINGLE_NEW, "README.md": "b"})
    repeated, none_due = sdist_cases(old, new)
    assert [c.name for c in repeated] == ["pkg-1.1/pkg/paths.py:4"]
    case = repeated[0]
    assert case.edits[0].after == "    return join_path(path, 'a')" and case.next_line == 6
    assert "join_path(path, 'a')" in case.text and "os.path.join(path, 'b')" in case.text
    assert [c.next_line for c in none_due] == [None] and none_due[0].text == SINGLE_NEW
    assert before_edit(case) == OLD and before_edit(none_due[0]) == SINGLE_OLD  # as the server is first shown it

    # Exact: the next hunk, alone or with the one after; not: nothing, or a change the release does not make.
    assert is_next_edit(case, window_release(case))
    assert is_next_edit(case, case.text.replace("os.path.join(path, 'b')", "join_path(path, 'b')"))
    assert not is_next_edit(case, case.text)
    only_c = case.text.replace("os.path.join(path, 'c')", "join_path(path, 'c')")
    assert not is_next_edit(case, only_c) and is_right(case, only_c)  # right, but not the next one
    assert not is_next_edit(case, window_release(case).replace("import os", "import os.path"))
    assert region_similarity(case.text, window_release(case), window_release(case)) == 1.0
    assert 0 < region_similarity(case.text, case.text, window_release(case)) < 1


def test_apply_edit_counts_utf16():
    text = "a = '😀x'\nb = 2"
    assert apply_edit(text, NextEdit(Position(0, 7), Position(0, 8), "y")) == "a = '😀y'\nb = 2"
    assert apply_edit(text, NextEdit(Position(0, 0), Position(1, 0), "")) == "b = 2"


def classes(gaps: list[int]) -> str:
    """Old-style classes with `gap` filler lines before each."""
    out = []
    for i, gap in enumerate(gaps):
        out += [f"x{i}_{k} = {k}" for k in range(gap)] + [f"class C{i}(object):", "    pass"]
    return "\n".join(out)


def test_the_next_edit_of_the_same_kind_up_to_max_distance_names_abstracted(tmp_path):
    far, too_far = classes([0, 40, 5]), classes([0, MAX_DISTANCE + 10])
    new = {name: text.replace("(object)", "") for name, text in (("far.py", far), ("too_far.py", too_far))}
    old = sdist(tmp_path, "pkg-1.0", {"pkg/far.py": far, "pkg/too_far.py": too_far})
    release = sdist(tmp_path, "pkg-1.1", {f"pkg/{k}": v for k, v in new.items()})
    repeated, _ = sdist_cases(old, release)
    assert [(c.path, c.line, c.next_line, c.distance, c.near, c.one_line) for c in repeated] == \
        [("pkg/far.py", 0, 42, 42, False, True)]  # one case per kind and file; beyond MAX_DISTANCE none
    assert changes_only_as(repeated[0].text, repeated[0].text.replace("C1(object)", "C1"), new["far.py"])
    assert not changes_only_as(repeated[0].text, repeated[0].text.replace("C1(object)", "C1(Base)"), new["far.py"])


def result(due: bool, exact: bool, near: bool = True, shown: bool = True, place: int | None = 3) -> EditResult:
    return EditResult("c", due, shown, exact, exact, 1.0, 1.0, 5.0, 10, 3 if due else None, 3 if shown else None,
                      near, True, 1.0, place)


def test_the_summary_counts_near_far_and_none_due_with_intervals():
    results = [result(True, True), result(True, False, place=None), result(True, True, near=False, place=9),
               result(False, True, shown=False), result(False, False)]
    numbers = summarize(results)
    assert numbers["place_at_the_due_line"]["count"] == 1 and numbers["no_place"]["count"] == 1
    assert numbers["exact"]["near"]["count"] == 1 and numbers["exact"]["near"]["of"] == 2
    assert numbers["exact"]["far"]["share"] == 1.0 and numbers["exact"]["far"]["interval"][1] == 1.0
    low, high = numbers["exact"]["all"]["interval"]
    assert 0 < low < 2 / 3 < high < 1
    assert numbers["shown_none_due"]["count"] == 1 and numbers["shown_none_due"]["of"] == 2
