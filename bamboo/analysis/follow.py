"""A client's wait for an analysis: its first answer (the ranking's) as soon as the evidence is read, then the final.

The model's second opinion may take as long as the deployment's deadline allows; the ranking's answer is
ready in seconds and an operator should not wait for the model to see it. Used by the CLI and the bot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from bamboo.analysis import contract
from bamboo.analysis.contract import AnalysisResult

POLL_S = 0.5


async def first_answer(handle: WorkflowHandle, done: asyncio.Future[AnalysisResult]) -> AnalysisResult | None:
    """The analysis's first answer, or None if the run finished (or failed) before one could be read."""
    while not done.done():
        try:
            answer = await handle.query(contract.RESULT_QUERY, result_type=AnalysisResult | None)  # type: ignore[arg-type]
        except RPCError:
            answer = None  # no worker answered the query yet: the result still comes when one runs the workflow
        if answer is not None:
            return answer
        await asyncio.wait([done], timeout=POLL_S)
    return None


async def follow_analysis(handle: WorkflowHandle,
                          on_first: Callable[[AnalysisResult], Awaitable[None] | None] | None = None) -> AnalysisResult:
    """The final result; `on_first` is called with the first answer while the model's opinion is pending."""
    done: asyncio.Future[AnalysisResult] = asyncio.ensure_future(handle.result())
    try:
        if on_first is not None:
            first = await first_answer(handle, done)
            if first is not None and first.answer == "first" and not done.done():
                shown = on_first(first)
                if shown is not None:
                    await shown
        return await done
    finally:
        if not done.done():
            done.cancel()
