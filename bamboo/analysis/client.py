"""Analyses from any process: start one, follow it (the ranking's answer first, then the final), start a
batch of them, find a task's latest analysis, read a result.

Every front end that diagnoses (``bamboo analyze`` and ``analyze-batch``, ``bamboo feedback``, the Mattermost
bot, ``bamboo demo``) goes through ``AnalysisClient`` (docs/adding-a-front-end.md): no front end calls
Temporal itself or spells a workflow or query name (they are the analysis contract's).

An analysis's workflow id is its task and status (``analyze_workflow_id``) and a start uses the running one
of that id when there is one, so asking twice for the same task's analysis waits for the same run instead
of starting a second.

The model's second opinion may take as long as the deployment's deadline allows; the ranking's answer is
ready in seconds, and an operator should not wait for the model to see it: ``follow`` hands the first
answer to its caller as soon as the workflow can give it, then returns the final one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from bamboo.analysis.contract import (
    ANALYZE_WORKFLOW, BATCH_ANALYZE_WORKFLOW, RESULT_QUERY, AnalysisResult, AnalyzeInput, BatchAnalyzeInput,
    BatchAnalyzeProgress, BatchAnalyzeResult, analyze_workflow_id, batch_workflow_id,
)
from bamboo.batch.client import BatchClient, BatchHandle
from bamboo.contract import TASK_ID, Kind, Queue

POLL_S = 0.5

OnFirst = Callable[[AnalysisResult], Awaitable[None] | None]
AnalysisBatch = BatchHandle[BatchAnalyzeProgress, BatchAnalyzeResult]


class AnalysisError(RuntimeError):
    """Temporal could not answer about an analysis (unreachable, or refused the request)."""


def analysis_id(task: dict[str, Any]) -> str:
    """The workflow id of the task's analysis: the same task in the same status is one analysis."""
    return analyze_workflow_id(task.get("jediTaskID"), task.get("status"))


def latest_query(task_id: int) -> str:
    """The visibility query for a task's analyses (by the search attribute the workflow sets)."""
    return f"WorkflowType = '{ANALYZE_WORKFLOW}' AND {TASK_ID.name} = {int(task_id)}"


async def first_answer(handle: WorkflowHandle[Any, AnalysisResult],
                       done: asyncio.Future[AnalysisResult]) -> AnalysisResult | None:
    """The analysis's first answer, or None if the run finished (or failed) before one could be read."""
    while not done.done():
        try:
            answer = await handle.query(RESULT_QUERY, result_type=AnalysisResult | None)  # type: ignore[arg-type]
        except RPCError:
            answer = None  # no worker answered the query yet: the result still comes when one runs the workflow
        if answer is not None:
            return answer
        await asyncio.wait([done], timeout=POLL_S)
    return None


async def follow_analysis(handle: WorkflowHandle[Any, AnalysisResult], on_first: OnFirst | None = None) -> AnalysisResult:
    """The final result; ``on_first`` is called with the first answer while the model's opinion is pending."""
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


class AnalysisRecord(BaseModel):
    """A task's most recent analysis as Temporal holds it: exactly what it read, and its answer once it finished."""

    workflow_id: str
    input: AnalyzeInput
    result: AnalysisResult | None = None


class AnalysisClient:
    """The operator API of analyses, bound to one Temporal client. Settings stay with the caller: the
    exploration threshold and the model's deadline are passed in (a workflow cannot read settings, so the
    starter's BAMBOO_LLM_TIMEOUT_S travels in the input)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.batches = BatchClient(client, {Kind.ANALYZE_BATCH: BatchAnalyzeProgress})

    # ---------------------------------------------------------------- one task
    async def start(self, task: dict[str, Any], *, exploration_threshold: float, model_deadline_s: float) -> str:
        """Start the task's analysis, or use the one of the same task and status that runs; returns its id.

        The id is predictable (task and status), so whoever can start workflows could start one first: with
        task data of their own (an errorDialog steering the diagnosis and the drafted e-mail) or on a queue their
        own worker answers, and we reported its answer as this task's. A running analysis is used only when it is
        ours (our type, our queue) and read the same task data as we did."""
        handle = await self.client.start_workflow(
            ANALYZE_WORKFLOW,
            AnalyzeInput(task_data=task, exploration_threshold=exploration_threshold, model_deadline_s=model_deadline_s),
            id=analysis_id(task), task_queue=Queue.MAIN,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, result_type=AnalysisResult,
        )
        try:
            desc = await handle.describe()
            inp = await self._started_with(self.client.get_workflow_handle(handle.id, run_id=desc.run_id))
        except RPCError as exc:
            raise AnalysisError(exc.message) from None
        if desc.workflow_type != ANALYZE_WORKFLOW or desc.task_queue != Queue.MAIN or inp.task_data != task:
            raise AnalysisError(
                f"{handle.id} already runs, but not as this deployment's analysis of the task as read now (another "
                "workflow, queue or task data); wait for it to end, or ask an administrator who started it")
        return handle.id

    async def follow(self, workflow_id: str, on_first: OnFirst | None = None) -> AnalysisResult:
        """Wait for the analysis; ``on_first`` sees the ranking's answer while the model's opinion is pending."""
        return await follow_analysis(self._handle(workflow_id), on_first)

    async def analyze(self, task: dict[str, Any], *, exploration_threshold: float, model_deadline_s: float,
                      on_first: OnFirst | None = None) -> AnalysisResult:
        """Start (or find) the task's analysis and follow it to its final answer."""
        workflow_id = await self.start(task, exploration_threshold=exploration_threshold,
                                       model_deadline_s=model_deadline_s)
        return await self.follow(workflow_id, on_first)

    async def result(self, workflow_id: str) -> AnalysisResult:
        return await self._handle(workflow_id).result()

    async def finished_result(self, workflow_id: str) -> AnalysisResult | None:
        """The result of an analysis that completed; None while it runs, when it failed, or when there is none."""
        handle = self._handle(workflow_id)
        try:
            desc = await handle.describe()
        except RPCError:  # no such workflow yet: it simply has not run
            return None
        if desc.status != WorkflowExecutionStatus.COMPLETED:
            return None
        return await handle.result()

    async def latest(self, task_id: int, limit: int = 50) -> AnalysisRecord | None:
        """The task's most recent analysis (what it read and, once completed, what it answered); None when
        Temporal has none on record. ``AnalysisError`` when Temporal cannot be asked."""
        latest = None
        try:
            async for execution in self.client.list_workflows(latest_query(task_id), limit=limit):
                if latest is None or (execution.start_time and latest.start_time
                                      and execution.start_time > latest.start_time):
                    latest = execution
            if latest is None:
                return None
            handle = self.client.get_workflow_handle(latest.id, run_id=latest.run_id, result_type=AnalysisResult)
            inp = await self._started_with(handle)
            result = await handle.result() if latest.status == WorkflowExecutionStatus.COMPLETED else None
        except RPCError as exc:
            raise AnalysisError(exc.message) from None
        return AnalysisRecord(workflow_id=latest.id, input=inp, result=result)

    async def _started_with(self, handle: WorkflowHandle[Any, Any]) -> AnalyzeInput:
        """What the run of ``handle`` was started with: exactly what it read (its first history event)."""
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        [inp] = await self.client.data_converter.decode(started.input.payloads, [AnalyzeInput])
        return inp

    def _handle(self, workflow_id: str) -> WorkflowHandle[Any, AnalysisResult]:
        return self.client.get_workflow_handle(workflow_id, result_type=AnalysisResult)

    # ---------------------------------------------------------------- batches
    async def start_batch(self, inp: BatchAnalyzeInput, *, paused: bool = False) -> AnalysisBatch:
        """Start the batch ``inp.batch_id``, or attach to it when it already runs; ``paused`` holds it before
        anything runs. Pause, resume and cancel are every batch's (the handle's, or ``BatchClient``'s)."""
        return await self.batches.start(
            BATCH_ANALYZE_WORKFLOW, inp, workflow_id=batch_workflow_id(inp.batch_id), kind=Kind.ANALYZE_BATCH,
            progress_type=BatchAnalyzeProgress, result_type=BatchAnalyzeResult, queue=Queue.MAIN, paused=paused)

    def batch(self, batch_id: str) -> AnalysisBatch:
        return self.batches.handle(batch_workflow_id(batch_id), BatchAnalyzeProgress, BatchAnalyzeResult)
