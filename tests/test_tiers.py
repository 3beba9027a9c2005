"""The unit tier stays light: conftest.py and the unit tests that need no model in torch import
no torch (1.2-1.5 s on two cores), so that `make check` pays for it only where it is used."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_FREE = ("test_context", "test_files", "test_lookup", "test_measured_table", "test_metrics",
              "test_options", "test_postprocess", "test_sampling", "test_scheduler", "test_suffix_automaton", "test_typed_through",
              "test_workspace")


def test_torch_free_unit_tests_import_no_torch():
    imports = "; ".join(f"import tests.{m}" for m in ("conftest", *TORCH_FREE))
    out = subprocess.run([sys.executable, "-c", f"import sys; {imports}; print('torch' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
