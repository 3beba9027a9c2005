"""Which job cancels which on the model thread (lsp_server/serving/scheduler.py): requests cancel every
background job, a next-edit prediction cancels idle prefills but no suggestion, idle work
cancels only its own document's job, a cursor at rest elsewhere stands idle work down, and a
closed document's job stops."""
import asyncio
import threading

import pytest

from lsp_server.serving.scheduler import Job, Scheduler, Superseded

pytestmark = pytest.mark.asyncio


def until_cancelled(started: threading.Event):
    """Work that runs until its job is cancelled, and says whether it was."""
    def work(job: Job) -> str:
        started.set()
        if not job.cancel.wait(20):
            return "finished"
        return "cancelled"
    return work


def done(value: str):
    return lambda job: value


async def started(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 5)


async def test_a_next_edit_cancels_an_idle_prefill_queued_ahead_of_it():
    scheduler, running = Scheduler(), threading.Event()
    prefill, _ = scheduler.submit("a.py", "prefetch", until_cancelled(running), idle=True)
    await started(running)
    edit, _ = scheduler.submit("a.py#nextEdit", "edit", done("edit"), background=True)
    assert await asyncio.wait_for(edit.future, 5) == "edit"  # not held up for the prefill's 20 s
    assert prefill.future.result() == "cancelled"
    scheduler.shutdown()


async def test_a_next_edit_leaves_a_suggestion_going_on_in_the_background():
    scheduler, running = Scheduler(), threading.Event()
    suggestion, _ = scheduler.submit("a.py", "line 3", until_cancelled(running))
    suggestion.background = True  # answered at the time budget: it goes on for the next request
    await started(running)
    edit, _ = scheduler.submit("a.py#nextEdit", "edit", done("edit"), background=True)
    await asyncio.sleep(0.2)
    assert not suggestion.cancel.is_set() and not edit.future.done()  # it waits its turn
    request, _ = scheduler.submit("b.py", "line 1", done("suggestion"))
    assert suggestion.cancel.is_set() and edit.cancel.is_set()  # a request cancels both
    assert await asyncio.wait_for(request.future, 5) == "suggestion"
    with pytest.raises(Superseded):
        await scheduler.wait(edit, None)
    scheduler.shutdown()


async def test_idle_work_cancels_only_its_own_documents_job():
    scheduler, running = Scheduler(), threading.Event()
    edit, _ = scheduler.submit("a.py#nextEdit", "edit", until_cancelled(running), background=True)
    await started(running)
    other, _ = scheduler.submit("b.py", "prefetch", done("prefilled"), idle=True)
    mine, _ = scheduler.submit("a.py#nextEdit", "extend", done("again"), idle=True)
    assert not other.cancel.is_set()
    assert edit.cancel.is_set()  # the same key: replaced
    assert await asyncio.wait_for(mine.future, 5) == "again"
    assert await asyncio.wait_for(other.future, 5) == "prefilled"
    scheduler.shutdown()


async def test_a_cursor_at_rest_elsewhere_and_a_closed_document_cancel_their_work():
    """cancel_idle (the cursor rests in another file: the new spot's prefill would queue behind
    a long prefill for a spot the user left) stops idle work only; cancel stops a closed
    document's job, whatever its kind."""
    scheduler, running = Scheduler(), threading.Event()
    left, _ = scheduler.submit("a.py", "improve", until_cancelled(running), idle=True)
    await started(running)
    edit, _ = scheduler.submit("c.py#nextEdit", "edit", done("edit"), background=True)
    scheduler.cancel_idle()
    assert left.cancel.is_set() and not edit.cancel.is_set()
    assert await asyncio.wait_for(edit.future, 5) == "edit"
    running.clear()
    suggestion, _ = scheduler.submit("b.py", "line 1", until_cancelled(running))
    await started(running)
    scheduler.cancel("a.py")  # closed long ago: nothing of it is live
    assert not suggestion.cancel.is_set()
    scheduler.cancel("b.py")
    assert await asyncio.wait_for(suggestion.future, 5) == "cancelled"
    scheduler.shutdown()


async def test_an_interrupt_stops_a_step_and_follows_its_jobs_cancel():
    from lsp_server.serving.scheduler import Interrupt

    cancel = threading.Event()
    step = Interrupt(cancel)
    assert not step.is_set() and not step.wait(0.01)
    step.set()  # the document was edited: the step stops, the job does not
    assert step.is_set() and not cancel.is_set()
    later = Interrupt(cancel)
    cancel.set()  # the job is cancelled: so is every step of it
    assert later.is_set() and later.wait(0.01)
