"""Bad model input gets one clear line, fast: before any weight is read."""
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import ModelLoadError


def refused(load: Callable[[Path], object], path: Path, match: str) -> str:
    """`load(path)` fails with one ModelLoadError line matching `match`, in under a second."""
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match=match) as error:
        load(path)
    assert time.perf_counter() - start < 1.0
    assert "\n" not in str(error.value)
    return str(error.value)
