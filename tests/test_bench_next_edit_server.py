"""`bench --next-edit --through-server`'s leg (lsp_server/bench/next_edit_pauses.py): the cases
asked through the stdio server with the small model, as Neovim asks, and scored like the
in-process ones."""
import sys

import pytest

from engine.engine import Engine
from lsp_server.bench.edit_cases import sdist_cases
from lsp_server.bench.next_edit_pauses import NEOVIM_DELAY_S, run_served
from lsp_server.bench.next_edits import summarize_served
from lsp_server.next_edit.rewrite import predict
from tests.models import SMALL
from tests.test_bench_next_edit import NEW, OLD, SINGLE_NEW, SINGLE_OLD, sdist

pytestmark = pytest.mark.integration


def test_cases_through_the_server(tmp_path):
    old = sdist(tmp_path, "pkg-1.0", {"pkg/paths.py": OLD, "pkg/single.py": SINGLE_OLD})
    new = sdist(tmp_path, "pkg-1.1", {"pkg/paths.py": NEW, "pkg/single.py": SINGLE_NEW})
    repeated, none_due = sdist_cases(old, new)
    cases = repeated + none_due
    root = tmp_path / "root"
    served = run_served([sys.executable, "-m", "lsp_server.cli", "--stdio", "--model", SMALL, "--threads", "2"],
                        root, cases)
    assert len(served) == 2
    # The server's edit is the in-process prediction for the document after the edit, by the same
    # model (an answer for another version would be null, one from another history differ).
    engine = Engine.load(SMALL, threads=2)
    for case, answer in zip(cases, served):
        assert answer.edit == predict(engine, case.text, case.line, list(case.edits), case.path).edit
    for s in served:  # the next edit is asked NEOVIM_DELAY_S into the pause, and answered after it
        assert 0 < s.inline_s and NEOVIM_DELAY_S <= s.edit_s < 120
    numbers = summarize_served(cases, served)
    assert numbers["exact_next_edit"] in (0.0, 1.0) and numbers["shown_when_none_due"] in (0.0, 1.0)
    assert [c["name"] for c in numbers["cases"]] == [c.name for c in cases]
    assert numbers["cases"][1]["exact"] == (served[1].edit is None)  # none due: right when nothing is shown
