"""The bounded-children loop shared by PopulateBatch and BatchAnalyze.

Deterministic: it only reads workflow state, starts coroutines the caller provides, and waits on
workflow conditions. Children are started in listing order, at most `concurrency` at once; `paused`
stops new starts; after `continue_as_new_every` starts in one run it drains the running children and
continues as new, so histories stay small however long the batch.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Coroutine, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

T = TypeVar("T")


def innermost_reason(exc: BaseException) -> str:
    """The innermost message: what the operator needs, not the chain of wrappers."""
    while isinstance(exc, (ChildWorkflowError, ActivityError)) and exc.cause is not None:
        exc = exc.cause
    return (exc.message if isinstance(exc, ApplicationError) else str(exc))[:500]


class BatchState(Protocol):
    cursor: int
    concurrency: int

    @property  # read-only here, so a batch input whose field is optional until its run sets it conforms
    def continue_as_new_every(self) -> int | None: ...
    paused: bool
    generation: int


async def run_bounded_children(
    inp: BatchState,
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
    tasks: set[asyncio.Task] = set()
    while not cancelled():
        every = inp.continue_as_new_every
        assert every is not None, "the caller sets continue_as_new_every before the loop"
        budget_left = started_this_run < every
        more = inp.cursor < total
        if not inp.paused and more and budget_left and len(running) < inp.concurrency:
            if not buffer:
                buffer = [(inp.cursor + i, item) for i, item in enumerate(await read_page(inp.cursor))]
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
