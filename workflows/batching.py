"""What every batch workflow (PopulateBatch, BatchAnalyze) does the same way, written once.

`BatchControl` is the batch's controls: its input taken in `@workflow.init` (so a `pause` sent with the
start holds the batch before anything runs), the `pause` / `resume` / `cancel` signals and the `progress`
query under the names of `bamboo/batch/contract.py`, failures recorded by one rule. `run_bounded_children`
is the loop that keeps at most `concurrency` children running: started in listing order, `paused` stops
new starts, and after `continue_as_new_every` starts in one run it drains the running children and
continues as new, so histories stay small however long the batch.

Deterministic: it only reads workflow state, starts coroutines the caller provides, and waits on
workflow conditions.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Awaitable, Callable, Coroutine, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from bamboo.batch.contract import (
        CANCEL_SIGNAL, PAUSE_SIGNAL, PROGRESS_QUERY, RECENT_FAILURES, RESUME_SIGNAL, BatchProgress, BatchState,
    )
    from bamboo.contract import BATCH, KIND, Kind

T = TypeVar("T")
S = TypeVar("S", bound=BatchState)
MAX_REASON = 500


def _said(exc: BaseException) -> str:
    return exc.message if isinstance(exc, FailureError) else str(exc)


def innermost_reason(exc: BaseException) -> str:
    """The one rule for why something failed, as an operator reads it: through the wrappers Temporal adds
    (a child's or an activity's failure) and any failure that says nothing, to the innermost that does;
    its message, at most MAX_REASON characters."""
    while isinstance(exc, FailureError) and exc.cause is not None and (
            isinstance(exc, (ChildWorkflowError, ActivityError)) or not _said(exc)):
        exc = exc.cause
    return (_said(exc) or type(exc).__name__)[:MAX_REASON]


class BatchControl(ABC, Generic[S]):
    """The controls of a batch workflow. A batch subclasses it, decorates its own `__init__` with
    `@workflow.init` and calls this one first, and says what its progress adds (`_progress`)."""

    def __init__(self, inp: S) -> None:
        # Taken before any signal is handled: a pause sent with the start holds the batch.
        self._inp: S = inp
        self._cancelled = False
        self._finished = False

    @workflow.signal(name=PAUSE_SIGNAL)
    def pause(self) -> None:
        self._inp.paused = True

    @workflow.signal(name=RESUME_SIGNAL)
    def resume(self) -> None:
        self._inp.paused = False

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self) -> None:
        self._cancelled = True

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self) -> BatchProgress:
        return self._progress()

    @abstractmethod
    def _progress(self) -> BatchProgress:
        """The batch's own progress model, built from ``_counts`` and what only it knows (its listing)."""

    def _counts(self, total: int | None, running: int, pending: int | None) -> dict[str, Any]:
        """The progress every batch reports, from what it carries and what it says runs and waits."""
        inp = self._inp
        return {"batch_id": inp.batch_id, "total": total, "done": inp.done, "skipped": inp.skipped,
                "failed": inp.failed_count, "running": running, "pending": pending, "paused": inp.paused,
                "cancelled": self._cancelled, "finished": self._finished, "generation": inp.generation,
                "recent_failures": inp.failed[-RECENT_FAILURES:]}

    def _announce(self, kind: Kind) -> None:
        """What the batch is, for Temporal Web's filters."""
        workflow.upsert_search_attributes([KIND.value_set(kind.value), BATCH.value_set(self._inp.batch_id)])

    def _failed(self, index: int, source: str, reason: str) -> None:
        self._inp.record_failure(index, source, reason)


class BoundedState(Protocol):
    cursor: int
    concurrency: int

    @property  # read-only here, so a batch input whose field is optional until its run sets it conforms
    def continue_as_new_every(self) -> int | None: ...
    paused: bool
    generation: int


async def run_bounded_children(
    inp: BoundedState,
    total: int,
    read_page: Callable[[int], Awaitable[list[T]]],
    start_child: Callable[[int, T], Coroutine[Any, Any, None]],
    running: set[int],
    cancelled: Callable[[], bool],
) -> None:
    """Returns when every item has finished or the batch was cancelled (running children are awaited).

    `start_child(index, item)` must remove `index` from `running` when it ends, successfully or not.
    """
    started_this_run = 0
    buffer: list[tuple[int, T]] = []
    tasks: set[asyncio.Task[None]] = set()
    while not cancelled():
        every = inp.continue_as_new_every
        assert every is not None, "the caller sets continue_as_new_every before the loop"
        budget_left = started_this_run < every
        more = inp.cursor < total
        if not inp.paused and more and budget_left and len(running) < inp.concurrency:
            if not buffer:
                buffer = [(inp.cursor + i, item) for i, item in enumerate(await read_page(inp.cursor))]
                if buffer:  # a pause or cancel may have come while the page was read: look again
                    continue
            index, item = buffer.pop(0)
            inp.cursor += 1
            started_this_run += 1
            running.add(index)
            tasks.add(asyncio.create_task(start_child(index, item)))
            continue
        if not running:
            if not more:
                break
            if not budget_left:
                await asyncio.gather(*tasks)
                inp.generation += 1
                workflow.continue_as_new(inp)
        # Wait for a free slot, a signal, or the end of the running set.
        snapshot = (len(running), inp.paused, cancelled())
        await workflow.wait_condition(lambda: (len(running), inp.paused, cancelled()) != snapshot)
    if running:
        await workflow.wait_condition(lambda: not running)
    await asyncio.gather(*tasks)
