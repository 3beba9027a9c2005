"""Shared fixtures: the embedded model is loaded once per test session."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

from engine import Engine  # noqa: E402


@pytest.fixture(scope="session")
def fp32_engine() -> Engine:
    """The embedded model in fp32, with the embedded draft: the mode where exactness is asserted."""
    return Engine.load(dtype="fp32", threads=2, draft="embedded")
