"""Shared fixtures: the embedded model is loaded once per pytest run, by the tests that ask.

Nothing here imports torch or the engine: the unit tier (`make check`) runs tests that need
neither, and the fixtures import the engine only when a test uses them. A test that uses the
fp32 engine belongs to the integration tier (pyproject.toml's markers): loading it takes
seconds, and its passes seconds more per test."""
import os

# Converted weights and measurements (engine/loading/user_cache.py) go to the checkout's own cache,
# not the user's; the servers the tests start inherit this.
os.environ.setdefault("DRAFTLINE_CACHE_DIR",
                      os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "user"))

import engine  # noqa: E402,F401  (OMP_WAIT_POLICY, before any test imports torch)
import pytest  # noqa: E402

from tests.models import SMALL  # noqa: E402

SLOW_FIXTURES = ("fp32_engine",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in item.fixturenames for name in SLOW_FIXTURES):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def fp32_engine():
    """The embedded model in fp32, with the embedded draft: the mode where exactness is asserted."""
    from engine.engine import Engine

    return Engine.load(SMALL, dtype="fp32", threads=2, draft="embedded")


@pytest.fixture(scope="session")
def small_tokenizer():
    """The embedded model's tokenizer alone, from its GGUF's metadata: no weights, no torch."""
    from engine.loading.fetch import model_path
    from engine.tokenization import load_tokenizer

    return load_tokenizer(model_path(SMALL))
