"""Keep stdout clean for a protocol that owns it (the stdio language server).

Some libraries (ExLlamaV2) print to stdout from Python and from C++ printf. Redirecting
`sys.stdout` does not catch the C++ part, so these helpers work on file descriptor 1 itself.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO


def _flush() -> None:
    for stream in (sys.stdout, sys.__stdout__):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While inside, whatever is written to fd 1 (Python or C) goes to fd 2 instead.

    Python-level prints are flushed before fd 1 is restored, so none leak out afterwards."""
    _flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _flush()
        os.dup2(saved, 1)
        os.close(saved)


def claim_stdout() -> BinaryIO:
    """For a server that speaks a protocol on stdout: return a private binary stream to the real
    stdout and point fd 1 (and `sys.stdout`) at stderr for the rest of the process, so that no
    library output, from any thread, can ever corrupt the protocol."""
    _flush()
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol
