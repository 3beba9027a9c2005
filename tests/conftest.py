"""Shared fixtures: the embedded model is loaded once per test session."""
import os

# Converted weights and measurements (engine/loading/user_cache.py) go to the checkout's own cache,
# not the user's; the servers the tests start inherit this.
os.environ.setdefault("DRAFTLINE_CACHE_DIR",
                      os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "user"))

import engine  # noqa: E402,F401  (OMP_WAIT_POLICY, before any test imports torch)
import pytest  # noqa: E402

from engine.engine import Engine  # noqa: E402
from tests.models import SMALL


@pytest.fixture(scope="session")
def fp32_engine() -> Engine:
    """The embedded model in fp32, with the embedded draft: the mode where exactness is asserted."""
    return Engine.load(SMALL, dtype="fp32", threads=2, draft="embedded")
