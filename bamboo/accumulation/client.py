"""Populate batches from any process: start one or attach to one that runs, read its live progress, its result.

Every front end that learns incidents (``bamboo populate``, ``bamboo demo``) goes through ``PopulateClient``
(docs/adding-a-front-end.md); it starts and steers the batch through ``bamboo.batch.client`` under the names
of the populate contract, so no front end spells a workflow, a query or a workflow id itself.

A populate batch's progress is more than its query: a slice reports to its batch once, when it ends; while
it runs, its last heartbeat (kept by Temporal with the pending activity) says what it has settled. Reading
those from the batch's description keeps the progress moving within a slice without any message from the
activity to the workflow.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from bamboo.accumulation.contract import (
    POPULATE_WORKFLOW, PROGRESS_QUERY, WORKFLOW_QUEUE, PopulateInput, PopulateProgress, PopulateResult,
    SliceHeartbeat, batch_workflow_id, slice_activity_id,
)
from bamboo.batch.client import BatchClient, BatchHandle, BatchNotFound
from bamboo.contract import Kind


async def live_progress(handle: WorkflowHandle[Any, Any]) -> PopulateProgress:
    """The batch's progress with its running slices' heartbeats added.

    The description is read before the query: a slice that ends in between is then counted by the
    query's result and no longer listed as running, so its heartbeat is not added on top and the
    counts never go back."""
    description = await handle.describe()
    progress = await handle.query(PROGRESS_QUERY, result_type=PopulateProgress)
    running = {slice_activity_id(offset) for offset in progress.running_slices}
    for pending in description.raw_description.pending_activities:
        if pending.activity_id not in running or not pending.heartbeat_details.payloads:
            continue
        try:
            [beat] = await pydantic_data_converter.decode(pending.heartbeat_details.payloads, [SliceHeartbeat])
        except Exception:  # noqa: BLE001 — a beat this version cannot read only costs the live count
            continue
        counts = {s: beat.count(s) for s in ("stored", "skipped", "failed", "escalated")}
        progress.done += counts["stored"]
        progress.skipped += counts["skipped"]
        progress.failed += counts["failed"]
        # An escalated incident waits for its own workflow: pending again, not running.
        progress.running -= counts["stored"] + counts["skipped"] + counts["failed"] + counts["escalated"]
        if progress.pending is not None:
            progress.pending += counts["escalated"]
    return progress


class PopulateHandle(BatchHandle[PopulateProgress, PopulateResult]):
    """A populate batch: a batch whose progress includes what its running slices have heartbeated."""

    @property
    def batch_id(self) -> str:
        return self.id.removeprefix(batch_workflow_id(""))

    async def progress(self, timeout_s: float | None = None) -> PopulateProgress:
        """The live progress (``live_progress``); ``timeout_s`` is not used: the description and the query
        are each answered or refused on their own."""
        return await live_progress(self.handle)


class PopulateClient:
    """The operator API of populate batches, bound to one Temporal client: what the CLI's ``populate`` and
    ``demo`` call. Pause, resume and cancel are every batch's (``PopulateHandle`` or ``BatchClient``)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.batches = BatchClient(client, {Kind.POPULATE: PopulateProgress})

    async def start(self, inp: PopulateInput, *, paused: bool = False) -> PopulateHandle:
        """Start the batch ``inp.batch_id``, or attach to it when it already runs (starting the same batch again
        re-attaches instead of learning its incidents twice). ``paused`` holds it before anything runs."""
        batch = await self.batches.start(
            POPULATE_WORKFLOW, inp, workflow_id=batch_workflow_id(inp.batch_id), kind=Kind.POPULATE,
            progress_type=PopulateProgress, result_type=PopulateResult, queue=WORKFLOW_QUEUE, paused=paused)
        return PopulateHandle(batch.handle, PopulateProgress)

    def handle(self, batch_id: str) -> PopulateHandle:
        """The batch ``batch_id``, without asking the server whether it exists (``attach`` does)."""
        workflow_id = batch_workflow_id(batch_id)
        return PopulateHandle(self.client.get_workflow_handle(workflow_id, result_type=PopulateResult),
                              PopulateProgress)

    async def attach(self, batch_id: str) -> PopulateHandle:
        """The batch ``batch_id`` as it runs (or ran); ``BatchNotFound`` when Temporal has no such batch."""
        batch = self.handle(batch_id)
        try:
            await batch.handle.describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            raise BatchNotFound(batch.id, exc.message) from None
        return batch

    async def progress(self, batch_id: str) -> PopulateProgress:
        return await self.handle(batch_id).progress()

    async def result(self, batch_id: str) -> PopulateResult:
        return await self.handle(batch_id).result()
