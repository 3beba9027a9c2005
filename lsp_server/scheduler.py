"""One model worker thread, one live job per document: a new request for a document
cancels the job in flight for it (editors such as Neovim 0.12 do not cancel on keystrokes)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class Superseded(Exception):
    """The job was cancelled: a newer request for the document, or $/cancelRequest."""


class Scheduler:
    def __init__(self) -> None:
        # All model work happens on this single thread: the engine is not reentrant.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftline-model")
        self._live: dict[str, threading.Event] = {}

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the model thread (model loading, for instance)."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn)

    async def run(self, key: str, fn: Callable[[threading.Event], T], delay_s: float = 0) -> T:
        """Run `fn(cancel)` on the model thread as the one live job for `key`.

        Raises Superseded when a newer job for `key` arrived first or cancelled it midway;
        `fn` should watch `cancel` and return early when it is set."""
        if (previous := self._live.get(key)) is not None:
            previous.set()
        cancel = self._live[key] = threading.Event()
        try:
            if delay_s > 0:
                await asyncio.sleep(delay_s)  # debounce: a newer keystroke cancels this one
            if cancel.is_set():
                raise Superseded
            result = await asyncio.get_running_loop().run_in_executor(
                self._worker, lambda: None if cancel.is_set() else fn(cancel))
        except asyncio.CancelledError:  # $/cancelRequest: stop the thread's work too
            cancel.set()
            raise
        finally:
            if self._live.get(key) is cancel:
                del self._live[key]
        if cancel.is_set():
            raise Superseded
        return result

    def shutdown(self) -> None:
        for cancel in self._live.values():
            cancel.set()
        self._worker.shutdown(wait=False, cancel_futures=True)
