"""One model worker thread, one live job per document.

- A new request for a document cancels the job in flight for it (editors such as Neovim 0.12
  do not cancel on keystrokes), unless that job computes the same spot: then it joins it.
- A job nobody waits for any more (its request answered at the time budget) goes on in the
  background, so the next request at that spot gets the whole line; any new request cancels it.
- Background work comes in two kinds: work a client will wait for (a next-edit prediction),
  which waits its turn behind suggestions, and idle work (a window prefilled ahead), which any
  other job cancels: it only guesses, and queued ahead of a next edit it would hold it up for as
  long as the prefill takes.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class Superseded(Exception):
    """The job was cancelled: a newer request for the document, or $/cancelRequest."""


@dataclass(eq=False)
class Job:
    key: str  # the document
    spot: Hashable  # what it computes: a request for the same spot joins it
    future: asyncio.Future
    cancel: threading.Event = field(default_factory=threading.Event)
    prefilled: asyncio.Event = field(default_factory=asyncio.Event)  # decoding has begun
    background: bool = False  # its request was answered; nobody waits for it
    idle: bool = False  # idle work: any other job cancels it

    def mark_prefilled(self) -> None:
        """Callable from the model thread."""
        self.future.get_loop().call_soon_threadsafe(self.prefilled.set)


class Interrupt(threading.Event):
    """A cancel flag for one step of a job: set by a cause of its own (the document edited), and
    set whenever the job's own flag is. The job goes on after the step it stops."""

    def __init__(self, job_cancel: threading.Event) -> None:
        super().__init__()
        self._job = job_cancel

    def is_set(self) -> bool:
        return super().is_set() or self._job.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(timeout) or self._job.is_set()


class Scheduler:
    def __init__(self) -> None:
        # All model work happens on this single thread: the engine is not reentrant.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftline-model")
        self._live: dict[str, Job] = {}
        self._arrivals: dict[str, int] = {}

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the model thread (model loading, for instance)."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn)

    async def debounce(self, key: str, delay_s: float) -> None:
        """Wait `delay_s`; raise Superseded if another request for `key` arrived meanwhile."""
        ticket = self._arrivals[key] = self._arrivals.get(key, 0) + 1
        if delay_s > 0:
            await asyncio.sleep(delay_s)
            if self._arrivals.get(key) != ticket:
                raise Superseded

    def arrivals(self, key: str) -> int:
        """How many requests for `key` have arrived (to tell whether typing paused)."""
        return self._arrivals.get(key, 0)

    def busy(self, key: str) -> bool:
        """Whether a request's job for `key` is running (background work does not count)."""
        live = self._live.get(key)
        return live is not None and not live.background and not live.cancel.is_set()

    def submit(self, key: str, spot: Hashable, fn: Callable[[Job], Any],
               background: bool = False, idle: bool = False) -> tuple[Job, bool]:
        """The live job for `key` at `spot` (joined), or a new job running `fn(job)` on the
        model thread; returns (job, created). A new job cancels the other job for `key`, a new
        request's job every background job, and any job that is not idle every idle one (`idle`:
        background work that only guesses): `fn` should watch `job.cancel` and return early."""
        background = background or idle
        live = self._live.get(key)
        if live is not None and live.spot == spot and not live.cancel.is_set():
            live.background, live.idle = background, idle
            return live, False
        for job in list(self._live.values()):
            # Background work (a next-edit prediction, a prefill) waits its turn: it never cancels
            # a suggestion that is still being written for a request.
            if job.key == key or (job.background and not background) or (job.idle and not idle):
                job.cancel.set()
        loop = asyncio.get_running_loop()
        job = Job(key, spot, loop.create_future(), background=background, idle=idle)
        work = loop.run_in_executor(self._worker, lambda: None if job.cancel.is_set() else fn(job))
        self._live[key] = job

        def settle(done: asyncio.Future) -> None:
            if self._live.get(key) is job:
                del self._live[key]
            if job.future.done():
                return
            if done.cancelled():
                job.future.cancel()
            elif done.exception() is not None:
                job.future.set_exception(done.exception())
            else:
                job.future.set_result(done.result())
            job.prefilled.set()

        work.add_done_callback(settle)
        return job, True

    def cancel(self, key: str) -> None:
        """Cancel the job for `key`, if any (its document was closed)."""
        if (job := self._live.get(key)) is not None:
            job.cancel.set()

    def cancel_idle(self) -> None:
        """Cancel every idle job: the cursor came to rest elsewhere, and they guessed for spots
        it has left (queued ahead, the new spot's prefill would wait for them)."""
        for job in self._live.values():
            if job.idle:
                job.cancel.set()

    async def wait(self, job: Job, budget_s: float | None) -> Any:
        """The job's result. With a budget, at most `budget_s` after its prefill: past that the
        job goes on in the background and TimeoutError is raised. Raises Superseded when the
        job was cancelled; $/cancelRequest (CancelledError) cancels it."""
        try:
            await job.prefilled.wait()
            result = await asyncio.wait_for(asyncio.shield(job.future), budget_s)
        except TimeoutError:
            job.background = True
            raise
        except asyncio.CancelledError:
            job.cancel.set()
            raise
        if job.cancel.is_set():
            raise Superseded
        return result

    def shutdown(self) -> None:
        for job in self._live.values():
            job.cancel.set()
        self._worker.shutdown(wait=False, cancel_futures=True)
