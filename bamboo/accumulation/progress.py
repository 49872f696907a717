"""A populate batch's progress as a client sees it: the workflow's settled counts plus what its
running slices have heartbeated.

A slice reports to its batch once, when it ends; while it runs, its last heartbeat (kept by Temporal
with the pending activity) says what it has settled. Reading those from the batch's description
keeps the progress moving within a slice without any message from the activity to the workflow.
"""

from __future__ import annotations

from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from bamboo.accumulation.contract import PopulateProgress, SliceHeartbeat, slice_activity_id
from bamboo.batch.contract import PROGRESS_QUERY


async def live_progress(handle: WorkflowHandle) -> PopulateProgress:
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
