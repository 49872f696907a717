"""PopulateBatch: learn thousands of incidents, durably.

By default incidents run in *lanes*: `accumulate_chunk` activities that each learn a slice of the
listing with bounded parallelism and commit finished incidents in groups. An incident off the
happy path (review rejection, model or reviewer error, a request for human input) is escalated to
its own AccumulateIncident child workflow, with the explorer and per-step retries. A lane whose
incidents are all past the LLM signals `lane_released`, and the next slice starts while its last
commits run, instead of leaving its LLM slots idle until they finish; every few seconds it also
signals `lane_progress`, so the progress query moves while a slice runs. With
`one_workflow_per_incident` every incident gets that child (every step visible in Temporal Web, at
several times the orchestration cost per incident).

Either way: a failed item is recorded with its reason and the batch goes on; `pause` / `resume` /
`cancel` signals (running lanes and children finish; nothing new starts) and a `progress` query;
continue-as-new every N items (after draining) keeps the history small however long the batch is.
Children are named `accumulate:<batch>:<index>`, so a replayed or restarted batch never starts an
item twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.models.accumulate import (
        AccumulateInput, AccumulateResult, ChunkInput, ChunkResult, FailedItem, IncidentSource, ItemOutcome,
        LaneProgress, PopulateInput, PopulateProgress,
        PopulateResult, SourceListing, SourcePageInput,
    )
    from workflows import names
    from workflows.accumulate import AccumulateIncident
    from workflows.batching import innermost_reason, run_bounded_children
    from workflows.common import BATCH, HEARTBEAT, KIND, STORE_RETRY
    from workflows.queues import Queues

MAX_KEPT_FAILURES = 500
LANES_PATCH = "populate-lanes"
BALANCED_SLICES_PATCH = "populate-balanced-slices"
SHARED_BUDGET_PATCH = "populate-shared-budget"
PAGE = 100


@workflow.defn(name=names.POPULATE_WORKFLOW)
class PopulateBatch:
    def __init__(self) -> None:
        self._inp: PopulateInput | None = None
        self._running: set[int] = set()  # indexes of running child workflows
        self._lanes: dict[int, int] = {}  # running lane activities: offset -> incidents
        self._widths: dict[int, int] = {}  # running lane activities: offset -> parallelism
        self._released: set[int] = set()  # lanes whose LLM work is over (only commits left)
        self._lane_counts: dict[int, LaneProgress] = {}  # what running lanes reported settled so far
        self._cancelled = False
        self._finished = False

    # ---------------------------------------------------------------- messages
    @workflow.signal
    def pause(self) -> None:
        if self._inp:
            self._inp.paused = True

    @workflow.signal
    def resume(self) -> None:
        if self._inp:
            self._inp.paused = False

    @workflow.signal
    def cancel(self) -> None:
        self._cancelled = True

    @workflow.signal(name=names.LANE_RELEASED_SIGNAL)
    def lane_released(self, offset: int) -> None:
        """A lane's incidents are all past the LLM and only its commits are left: its slots are free
        for the next slice. Unknown or finished offsets (a late or repeated signal) change nothing."""
        if offset in self._lanes:
            self._released.add(offset)

    @workflow.signal(name=names.LANE_PROGRESS_SIGNAL)
    def lane_progress(self, report: LaneProgress) -> None:
        """Counts a running lane has settled; they join the progress until the lane's result replaces them."""
        if report.offset in self._lanes:
            self._lane_counts[report.offset] = report

    @workflow.query
    def progress(self) -> PopulateProgress:
        inp = self._inp
        if inp is None:
            return PopulateProgress(batch_id="", total=None, done=0, failed=0, running=0, pending=None, paused=False,
                                    cancelled=False, finished=False, generation=0)
        total = inp.listing.total if inp.listing else None
        stored = sum(c.stored for c in self._lane_counts.values())
        failed = sum(c.failed for c in self._lane_counts.values())
        escalated = sum(c.escalated for c in self._lane_counts.values())
        return PopulateProgress(
            batch_id=inp.batch_id, total=total, done=inp.done + stored, failed=inp.failed_count + failed,
            running=len(self._running) + sum(self._lanes.values()) - stored - failed - escalated,
            escalated=inp.escalated + escalated,
            pending=(total - inp.cursor + len(inp.pending_escalations) + escalated) if total is not None else None,
            paused=inp.paused, cancelled=self._cancelled,
            finished=self._finished, generation=inp.generation, recent_failures=inp.failed[-20:],
            listing_error=inp.listing_error,
        )

    # ---------------------------------------------------------------- run
    @workflow.run
    async def run(self, inp: PopulateInput) -> PopulateResult:
        self._inp = inp
        q = Queues()
        workflow.upsert_search_attributes([KIND.value_set("populate"), BATCH.value_set(inp.batch_id)])
        if inp.listing is None:
            try:
                inp.listing = await workflow.execute_activity(
                    names.LIST_INCIDENT_SOURCES, inp.path, result_type=SourceListing, task_queue=q.store,
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=RetryPolicy(maximum_attempts=5),
                )
            except ActivityError as exc:
                inp.listing_error = innermost_reason(exc)
                self._finished = True
                raise ApplicationError(f"cannot list incidents at {inp.path}: {inp.listing_error}", non_retryable=True)
        listing = inp.listing

        async def read_page(offset: int) -> list[IncidentSource]:
            return await workflow.execute_activity(
                names.READ_INCIDENT_SOURCES, SourcePageInput(ref=listing.ref, offset=offset, limit=PAGE),
                result_type=list[IncidentSource], task_queue=q.store,
                start_to_close_timeout=timedelta(seconds=20), retry_policy=RetryPolicy(maximum_attempts=10),
            )

        # Runs started before lanes existed replay their recorded per-incident children; their next
        # continue-as-new run, like every new batch, takes the lanes.
        if inp.one_workflow_per_incident or not workflow.patched(LANES_PATCH):
            inp.continue_as_new_every = inp.items_per_run()
            await run_bounded_children(inp, listing.total, read_page, self._child, self._running,
                                       lambda: self._cancelled)
        else:
            await self._run_lanes(inp, listing, read_page)
        self._finished = True
        return PopulateResult(batch_id=inp.batch_id, total=listing.total, done=inp.done, failed=inp.failed_count,
                              cancelled=self._cancelled, failures=inp.failed, escalated=inp.escalated)

    # ---------------------------------------------------------------- lanes
    async def _run_lanes(self, inp: PopulateInput, listing: SourceListing,
                         read_page: Callable[[int], Awaitable[list[IncidentSource]]]) -> None:
        """Deterministic scheduling of lane activities and escalation children under one budget:
        escalated incidents start first (up to a quarter of the concurrency), lanes share the rest.

        Every running child and every lane not yet released holds slots of the batch's concurrency:
        a child one, a lane its parallelism. A lane starts only with the slots left, so children
        running beside lanes never push the model's load past the concurrency. Histories recorded
        before this accounting (no patch marker) replay as they ran, with full-width lanes."""
        lanes = 1 if inp.concurrency < 8 else 2
        per_lane = max(1, inp.concurrency // lanes)
        size = inp.chunk_size or min(1024, 8 * per_lane)
        child_cap = max(1, inp.concurrency // 4)
        shared = workflow.patched(SHARED_BUDGET_PATCH)
        started_this_run = 0
        tasks: set[asyncio.Task] = set()
        while not self._cancelled:
            free = inp.concurrency - self._slots_in_use() if shared else inp.concurrency
            if (not inp.paused and inp.pending_escalations and len(self._running) < child_cap
                    and free > 0):
                item = inp.pending_escalations.pop(0)
                assert item.source is not None
                self._running.add(item.index)
                tasks.add(asyncio.create_task(self._child(item.index, item.source, item.prior_ref)))
                continue
            budget = inp.items_per_run() - started_this_run
            more = inp.cursor < listing.total
            active = len(self._lanes) - len(self._released)
            # A lane narrower than half its share would hold its slice at a crawl: wait for slots instead.
            width = min(per_lane, free)
            if not inp.paused and more and budget > 0 and active < lanes and width >= max(1, per_lane // 2):
                # A lane starting alone takes half a slice, so the two lanes' slice boundaries (where a
                # lane's parallelism drains) fall apart instead of together. Near the end of a run the
                # rest is shared out between the lanes, so one does not finish a full slice alone while
                # the other idles — but no slice gets smaller than the lane's parallelism.
                rest = min(listing.total - inp.cursor, budget)
                want = max(1, size // 2) if lanes == 2 and not active else size
                if workflow.patched(BALANCED_SLICES_PATCH):
                    count = min(rest, max(min(want, -(-rest // lanes)), per_lane))
                else:  # lane histories recorded before the balanced split replay as they ran
                    count = min(want, rest)
                offset = inp.cursor
                inp.cursor += count
                started_this_run += count
                self._lanes[offset] = count
                self._widths[offset] = width
                tasks.add(asyncio.create_task(self._lane(offset, count, width, listing, read_page)))
                continue
            if not self._running and not self._lanes and not inp.pending_escalations:
                if not more:
                    break
                if budget <= 0:
                    await asyncio.gather(*tasks)
                    inp.generation += 1
                    workflow.continue_as_new(inp)
            snapshot = (len(self._running), len(self._lanes), len(self._released), len(inp.pending_escalations),
                        inp.paused, self._cancelled)
            await workflow.wait_condition(
                lambda: (len(self._running), len(self._lanes), len(self._released), len(inp.pending_escalations),
                         inp.paused, self._cancelled) != snapshot)
        await workflow.wait_condition(lambda: not self._running and not self._lanes)
        await asyncio.gather(*tasks)

    def _slots_in_use(self) -> int:
        """LLM slots held now: one per running child, a lane's parallelism until it is released."""
        return len(self._running) + sum(w for o, w in self._widths.items() if o not in self._released)

    async def _lane(self, offset: int, count: int, parallelism: int, listing: SourceListing,
                    read_page: Callable[[int], Awaitable[list[IncidentSource]]]) -> None:
        inp = self._inp
        assert inp is not None
        try:
            result: ChunkResult = await workflow.execute_activity(
                names.ACCUMULATE_CHUNK,
                ChunkInput(batch_id=inp.batch_id, listing_ref=listing.ref, offset=offset, count=count,
                           parallelism=parallelism),
                result_type=ChunkResult, task_queue=Queues().llm, start_to_close_timeout=timedelta(hours=6),
                heartbeat_timeout=HEARTBEAT, retry_policy=STORE_RETRY,
            )
            outcomes = result.outcomes
        except ActivityError as exc:
            # The lane gave up (its retries are spent): every incident of the slice gets its own
            # workflow, which stores each exactly once whatever the lane managed before failing.
            reason = f"lane failed ({innermost_reason(exc)}); incident run on its own"
            outcomes = [ItemOutcome(index=offset + i, status="escalated", reason=reason, source=source)
                        for page in range(offset, offset + count, PAGE)
                        for i, source in enumerate(await read_page(page), start=page - offset)
                        if i < count]
        finally:
            self._lanes.pop(offset, None)
            self._widths.pop(offset, None)
            self._released.discard(offset)
            self._lane_counts.pop(offset, None)  # the outcomes below replace what the lane reported
        for outcome in outcomes:
            if outcome.status == "stored":
                inp.done += 1
            elif outcome.status == "failed":
                inp.failed_count += 1
                source = outcome.source.label() if outcome.source else ""
                inp.failed.append(FailedItem(index=outcome.index, source=source, reason=outcome.reason or "failed"))
                del inp.failed[:-MAX_KEPT_FAILURES]
            else:
                inp.escalated += 1
                inp.pending_escalations.append(outcome)

    async def _child(self, index: int, source: IncidentSource, prior_ref: str | None = None) -> None:
        inp = self._inp
        assert inp is not None
        try:
            await workflow.execute_child_workflow(
                AccumulateIncident.run,
                AccumulateInput(source=source, batch_id=inp.batch_id, max_review_retries=inp.max_review_retries,
                                prior_ref=prior_ref),
                id=f"accumulate:{inp.batch_id}:{index}",
                result_type=AccumulateResult,
                parent_close_policy=ParentClosePolicy.TERMINATE,
                execution_timeout=timedelta(hours=2),
            )
            inp.done += 1
        except ChildWorkflowError as exc:
            inp.failed_count += 1
            inp.failed.append(FailedItem(index=index, source=source.label(), reason=innermost_reason(exc)))
            del inp.failed[:-MAX_KEPT_FAILURES]
        finally:
            self._running.discard(index)
