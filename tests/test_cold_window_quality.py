"""scripts/cold_window_quality.py: its cases are the pause replay's pauses, the cursor after the
line's indentation, the document ending there unless the file's rest is asked for."""
from __future__ import annotations

import sys
from pathlib import Path

from lsp_server.bench.pauses import walks
from lsp_server.bench.sources import find_sources

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import cold_window_quality  # noqa: E402


def test_cases_are_the_replays_pauses_with_the_cursor_after_the_indentation(tmp_path):
    body = "\n".join(f"    value_{i} = compute({i}, scale)" for i in range(80))
    (tmp_path / "module.py").write_text(f"def run(scale):\n{body}\n    return value_79\n")
    paths = [tmp_path]
    pauses = [(w.path.name, line) for w in walks(find_sources(paths).files, 4, 0) for line in w.pauses]
    lines = (tmp_path / "module.py").read_text().split("\n")
    for suffix in (False, True):
        cases = cold_window_quality.cases(paths, 4, 0, suffix)
        assert [(name, line) for name, line, _, _ in cases] == pauses
        for _, line, cursor, expected in cases:
            assert cursor.prefix == "\n".join(lines[:line]) + "\n    "
            assert expected == lines[line].strip()
            assert cursor.suffix == ("\n" + "\n".join(lines[line + 1:]) if suffix else "")
