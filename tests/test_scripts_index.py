"""scripts/ holds maintainer tools only, each listed in scripts/README.md with when to run it:
a script nobody lists is one nobody knows when to run."""
import re
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_every_script_is_listed_with_when_to_run_it():
    listed = set(re.findall(r"`([\w.]+\.(?:py|sh|lua|c))`", (SCRIPTS / "README.md").read_text()))
    present = {p.name for p in SCRIPTS.iterdir() if p.is_file() and p.name != "README.md"}
    assert present <= listed, f"scripts not in scripts/README.md: {sorted(present - listed)}"
    assert listed <= present, f"scripts/README.md lists what is gone: {sorted(listed - present)}"
