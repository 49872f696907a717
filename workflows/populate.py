"""PopulateBatch: learn thousands of incidents, durably.

By default incidents run in *lanes*: `accumulate_chunk` activities that each learn a slice of the
listing with bounded parallelism and commit finished incidents in groups. An incident off the
happy path (review rejection, model or reviewer error, a request for human input) is escalated to
its own AccumulateIncident child workflow, with the explorer and per-step retries. A lane claims
its next slice (the `claim_slice` update) while its queue still holds a round of work and reports
every finished slice (`slice_done`), so its slots stay busy across slices and the batch settles
incidents slice by slice. A lane told there is no more signals `lane_released` once its incidents
are all past the LLM, so its slots go to escalated incidents or the next lane while its last
commits run; every few seconds it also signals `lane_progress`, so the progress query moves while a
slice runs. With
`one_workflow_per_incident` every incident gets that child (every step visible in Temporal Web, at
several times the orchestration cost per incident).

Either way: a failed item is recorded with its reason and the batch goes on; `pause` / `resume` /
`cancel` signals (running lanes and children finish; nothing new starts) and a `progress` query;
continue-as-new every N items (after draining) keeps the history small however long the batch is.
Children are named `accumulate:<batch>:<index>`, so a replayed or restarted batch never starts an
item twice.

Lanes and children store under the batch's *scope* (its id and its first run): within it a graph id
belongs to one file, a stored incident has exactly one audit row whoever stored it, and an incident
handed to its own workflow after a crash or an outage is recognised as stored instead of being
learned again or reported failed. Store steps wait out a database outage rather than fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.models.accumulate import (
        AccumulateInput, AccumulateResult, ChunkInput, ChunkResult, FailedItem, IncidentSource, ItemOutcome,
        LaneHolding,
        LaneProgress, PopulateInput, PopulateProgress,
        PopulateResult, SliceClaim, SliceGrant, SliceReport, SourceListing, SourcePageInput,
    )
    from workflows import names
    from workflows.accumulate import STORE_ACTIVITY_TIMEOUT, AccumulateIncident
    from workflows.batching import innermost_reason, run_bounded_children
    from bamboo.contract import BATCH, HEARTBEAT, KIND, Kind, Queue, STORE_RETRY

MAX_KEPT_FAILURES = 500
LANES_PATCH = "populate-lanes"
BALANCED_SLICES_PATCH = "populate-balanced-slices"
SHARED_BUDGET_PATCH = "populate-shared-budget"
LANE_CLAIMS_PATCH = "populate-lane-claims"
HISTORY_CAP_PATCH = "populate-history-cap"
PAGE = 100


@dataclass
class _LanePlan:
    """How a run cuts its listing into lane slices; `started` counts what this run handed out."""

    lanes: int
    per_lane: int
    size: int
    child_cap: int
    claims: bool
    history_cap: int | None = None  # events after which this run hands out no more slices (None: no cap)
    started: int = 0

    def share_left(self, inp: PopulateInput) -> int:
        """Incidents this run may still hand out. Its share ends early once its history passes the
        cap, whatever `continue_as_new_every` says: escalations and slice traffic add events per
        incident, and Temporal terminates a workflow whose history reaches 51,200 events. A run
        always hands out something first, so a cap below a run's own start-up still makes progress."""
        if (self.history_cap is not None and self.started
                and workflow.info().get_current_history_length() >= self.history_cap):
            return 0
        return inp.items_per_run() - self.started

    def slice_count(self, rest: int, *, alone: bool = False) -> int:
        """A lane starting alone takes half a slice, so the two lanes' slice boundaries fall apart
        instead of together. Near the end of a run the rest is shared out between the lanes, so one
        does not learn a full slice alone while the other idles; no slice is smaller than the lane's
        parallelism. Lane histories recorded before the balanced split replay as they ran."""
        want = max(1, self.size // 2) if self.lanes == 2 and alone else self.size
        if workflow.patched(BALANCED_SLICES_PATCH):
            return min(rest, max(min(want, -(-rest // self.lanes)), self.per_lane))
        return min(want, rest)

    def claim_count(self, rest: int) -> int:
        """A claimed slice costs no slot time, so near the end claims shrink towards a round of the
        lane (its parallelism): the lanes then run dry within about a round of each other instead of
        one learning a large last slice at half the batch's width."""
        return min(rest, max(self.per_lane, min(self.size, rest // (2 * self.lanes))))


@workflow.defn(name=names.POPULATE_WORKFLOW)
class PopulateBatch:
    def __init__(self) -> None:
        self._inp: PopulateInput | None = None
        self._running: set[int] = set()  # indexes of running child workflows
        self._lanes: dict[int, int] = {}  # running lane activities (by first offset) -> incidents held unreported
        self._widths: dict[int, int] = {}  # running lane activities: offset -> parallelism
        self._slices: dict[int, tuple[int, int]] = {}  # slices held by lanes, unreported: offset -> (lane, count)
        self._reported: dict[int, int] = {}  # lane -> slices it has reported
        self._plan: _LanePlan | None = None  # how this run slices its listing, once lanes run
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
        """Counts a running lane has settled; they join the progress until the lane's result (or its
        slice report) replaces them. A report sent before the lane's latest slice report is stale."""
        if report.offset in self._lanes and report.slices_reported == self._reported.get(report.offset, 0):
            self._lane_counts[report.offset] = report

    @workflow.update(name=names.CLAIM_SLICE_UPDATE)
    def claim_slice(self, claim: SliceClaim) -> SliceGrant:
        """The next slice for a lane whose queue runs low, so its slots never wait for a new activity.
        No more (count 0) once the batch is paused or cancelled, the run's share is out, or escalated
        incidents wait for slots: the lane then finishes what it holds and gives its slots back."""
        inp, plan = self._inp, self._plan
        if inp is None or inp.listing is None or plan is None:
            return SliceGrant(offset=0, count=0)
        if (not plan.claims or claim.lane not in self._lanes or claim.lane in self._released or self._cancelled
                or inp.paused or len(inp.pending_escalations) >= plan.child_cap):
            return SliceGrant(offset=inp.cursor, count=0)
        rest = min(inp.listing.total - inp.cursor, plan.share_left(inp))
        if rest <= 0:
            return SliceGrant(offset=inp.cursor, count=0)
        return self._hand_out(claim.lane, plan.claim_count(rest))

    @workflow.update(name=names.SLICE_DONE_UPDATE)
    def slice_done(self, report: SliceReport) -> None:
        """A lane's outcomes for one slice, settled now instead of when the lane ends."""
        _, count = self._slices.pop(report.offset)
        self._lanes[report.lane] -= count
        self._reported[report.lane] = self._reported.get(report.lane, 0) + 1
        self._lane_counts.pop(report.lane, None)  # the lane's next report counts only what it still holds
        self._settle(report.outcomes)

    @slice_done.validator
    def _validate_slice_done(self, report: SliceReport) -> None:
        """A report for a slice the lane no longer holds (settled already: a zombie or repeated attempt)
        or with outcomes outside the slice is refused before it reaches the history."""
        held = self._slices.get(report.offset)
        if held is None or held[0] != report.lane:
            raise ValueError(f"slice {report.offset} is not held by lane {report.lane}")
        if any(not report.offset <= o.index < report.offset + held[1] for o in report.outcomes):
            raise ValueError(f"outcomes outside slice {report.offset}+{held[1]}")

    @workflow.query(name=names.HELD_SLICES_QUERY)
    def held_slices(self, lane: int) -> LaneHolding:
        """The slices a lane holds and has not reported, which its retried attempt resumes, and whether
        it had released its slots (then the retry learns nothing and its incidents are escalated)."""
        return LaneHolding(slices=[SliceGrant(offset=o, count=c) for o, (owner, c) in sorted(self._slices.items())
                                   if owner == lane], released=lane in self._released)

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
        workflow.upsert_search_attributes([KIND.value_set(Kind.POPULATE.value), BATCH.value_set(inp.batch_id)])
        if inp.listing is None:
            try:
                inp.listing = await workflow.execute_activity(
                    names.LIST_INCIDENT_SOURCES, inp.path, result_type=SourceListing, task_queue=Queue.STORE,
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=RetryPolicy(maximum_attempts=5),
                )
            except ActivityError as exc:
                inp.listing_error = innermost_reason(exc)
                self._finished = True
                raise ApplicationError(f"cannot list incidents at {inp.path}: {inp.listing_error}", non_retryable=True)
        listing = inp.listing

        async def read_page(offset: int) -> list[IncidentSource]:
            # Waits out a database outage (heartbeating): a page that cannot be read would fail the batch.
            return await workflow.execute_activity(
                names.READ_INCIDENT_SOURCES, SourcePageInput(ref=listing.ref, offset=offset, limit=PAGE),
                result_type=list[IncidentSource], task_queue=Queue.STORE,
                start_to_close_timeout=STORE_ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT,
                retry_policy=RetryPolicy(maximum_attempts=10),
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
        running beside lanes never push the model's load past the concurrency. A lane claims its
        next slice itself while its queue runs low (`claim_slice`), so its slots do not drain and
        wait for a new activity at every slice boundary. Histories recorded before either change
        (no patch marker) replay as they ran: full-width lanes, one slice each."""
        lanes = 1 if inp.concurrency < 8 else 2
        per_lane = max(1, inp.concurrency // lanes)
        shared = workflow.patched(SHARED_BUDGET_PATCH)
        plan = self._plan = _LanePlan(lanes=lanes, per_lane=per_lane, size=inp.chunk_size or min(1024, 8 * per_lane),
                                      child_cap=max(1, inp.concurrency // 4),
                                      claims=workflow.patched(LANE_CLAIMS_PATCH),
                                      history_cap=inp.max_history_events if workflow.patched(HISTORY_CAP_PATCH) else None)
        tasks: set[asyncio.Task] = set()
        while not self._cancelled:
            free = inp.concurrency - self._slots_in_use() if shared else inp.concurrency
            if (not inp.paused and inp.pending_escalations and len(self._running) < plan.child_cap
                    and free > 0):
                item = inp.pending_escalations.pop(0)
                assert item.source is not None
                self._running.add(item.index)
                tasks.add(asyncio.create_task(self._child(item.index, item.source, item.prior_ref)))
                continue
            budget = plan.share_left(inp)
            more = inp.cursor < listing.total
            active = len(self._lanes) - len(self._released)
            # A lane narrower than half its share would hold its slice at a crawl: wait for slots instead.
            width = min(per_lane, free)
            if not inp.paused and more and budget > 0 and active < lanes and width >= max(1, per_lane // 2):
                rest = min(listing.total - inp.cursor, budget)
                grant = self._hand_out(inp.cursor, plan.slice_count(rest, alone=not active))
                self._widths[grant.offset] = width
                tasks.add(asyncio.create_task(self._lane(grant.offset, grant.count, width, listing, read_page)))
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

    def _hand_out(self, lane: int, count: int) -> SliceGrant:
        """The next `count` incidents of the listing, held by `lane` until it reports them."""
        inp, plan = self._inp, self._plan
        assert inp is not None and plan is not None
        grant = SliceGrant(offset=inp.cursor, count=count)
        inp.cursor += count
        plan.started += count
        self._slices[grant.offset] = (lane, count)
        self._lanes[lane] = self._lanes.get(lane, 0) + count
        return grant

    def _slots_in_use(self) -> int:
        """LLM slots held now: one per running child, a lane's parallelism until it is released."""
        return len(self._running) + sum(w for o, w in self._widths.items() if o not in self._released)

    async def _lane(self, lane: int, count: int, parallelism: int, listing: SourceListing,
                    read_page: Callable[[int], Awaitable[list[IncidentSource]]]) -> None:
        inp, plan = self._inp, self._plan
        assert inp is not None and plan is not None
        try:
            try:
                result: ChunkResult = await workflow.execute_activity(
                    names.ACCUMULATE_CHUNK,
                    ChunkInput(batch_id=inp.batch_id, listing_ref=listing.ref, offset=lane, count=count,
                               parallelism=parallelism, claims=plan.claims, store_scope=self._store_scope()),
                    result_type=ChunkResult, task_queue=Queue.LLM, start_to_close_timeout=timedelta(hours=6),
                    heartbeat_timeout=HEARTBEAT, retry_policy=STORE_RETRY,
                )
                outcomes, why = result.outcomes, "the lane ended without an outcome for it; incident run on its own"
            except ActivityError as exc:
                outcomes, why = [], f"lane failed ({innermost_reason(exc)}); incident run on its own"
            # Whatever the lane did not settle (all of it, when its retries are spent) gets its own
            # workflow, which stores each incident exactly once whatever the lane managed before.
            held = sorted((o, c) for o, (owner, c) in self._slices.items() if owner == lane)
            inside = {i for o, c in held for i in range(o, o + c)}
            outcomes = [o for o in outcomes if o.index in inside]
            settled = {o.index for o in outcomes}
            for offset, size in held:
                for page in range(offset, offset + size, PAGE):
                    if all(i in settled for i in range(page, min(page + PAGE, offset + size))):
                        continue
                    outcomes += [ItemOutcome(index=page + i, status="escalated", reason=why, source=source)
                                 for i, source in enumerate(await read_page(page))
                                 if page + i < offset + size and page + i not in settled]
        finally:
            for offset in [o for o, (owner, _) in self._slices.items() if owner == lane]:
                del self._slices[offset]
            self._lanes.pop(lane, None)
            self._widths.pop(lane, None)
            self._released.discard(lane)
            self._reported.pop(lane, None)
            self._lane_counts.pop(lane, None)  # the outcomes below replace what the lane reported
        self._settle(outcomes)

    def _settle(self, outcomes: list[ItemOutcome]) -> None:
        inp = self._inp
        assert inp is not None
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

    def _store_scope(self) -> str:
        """The batch in the store: its id and its first run, the same across continue-as-new and for every
        lane and child, and new when a finished batch's id is started again (that is a new learning)."""
        assert self._inp is not None
        return f"populate:{self._inp.batch_id}:{workflow.info().first_execution_run_id}"

    async def _child(self, index: int, source: IncidentSource, prior_ref: str | None = None) -> None:
        inp = self._inp
        assert inp is not None
        try:
            await workflow.execute_child_workflow(
                AccumulateIncident.run,
                AccumulateInput(source=source, batch_id=inp.batch_id, max_review_retries=inp.max_review_retries,
                                prior_ref=prior_ref, store_scope=self._store_scope()),
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
