"""PopulateBatch: learn thousands of incidents, durably.

By default the batch's listing is cut into *slices*, and a sliding window keeps at most `window`
`learn_slice` activities running: each learns its slice with bounded parallelism, commits finished
incidents in groups, heartbeats what it has settled (its resume state, and the live progress a
client reads from the pending activity) and reports once, when it ends, with an outcome for every
incident. When a slice ends the next one starts in its place. The workflow hands out slices and
counts results; it exchanges no messages with the activities while they run.

An incident off the happy path (review rejection, model or reviewer error, a request for human
input) is escalated to its own AccumulateIncident child workflow, with the explorer and per-step
retries; children and slices share one budget of LLM slots (the batch's concurrency). With
`one_workflow_per_incident` every incident gets that child (every step visible in Temporal Web, at
several times the orchestration cost per incident).

Either way: a failed item is recorded with its reason and the batch goes on; an incident whose
content a stored graph was learned from is skipped (counted `skipped`) unless `relearn`; `pause`
starts nothing new, `resume` goes on, `cancel` lets running slices and children finish and starts
nothing new; a `progress` query (the controls of every batch, `workflows/batching.py`);
continue-as-new every N items (after draining) keeps the history small however long the batch is.
Children are named `accumulate:<batch>:<index>`, so a replayed or restarted batch never starts an
item twice.

Slices and children store under the batch's *scope* (its id and its first run): within it a graph id
belongs to one file, a stored incident has exactly one audit row whoever stored it, and an incident
handed to its own workflow after a slice failed is recognised as stored instead of being learned
again or reported failed. Store steps wait out a database outage rather than fail.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.accumulation import contract
    from bamboo.accumulation.contract import (
        LISTING, LISTING_PAGE, SLICE, AccumulateInput, ItemOutcome, PopulateInput,
        PopulateProgress, PopulateResult, SliceInput, SliceResult, SourceListing, SourcePageInput,
    )
    from bamboo.models.incident import IncidentSource
    from bamboo.contract import Kind
    from workflows.accumulate import AccumulateIncident
    from workflows.batching import BatchControl, innermost_reason, run_bounded_children

CHILD_TIMEOUT = timedelta(hours=2)
PAGE = 100
# What one escalated incident adds to the batch's history: its child's start, start and end, and the workflow
# tasks around them (about nine, measured).
EVENTS_PER_ESCALATION = 10
# The window: two slices at a time (one below a concurrency of 8), each with half the batch's LLM
# slots. A slice's slots idle while its last group commits and the next slice starts; with two
# slices that happens to half the slots at a time, and the slices' ends drift apart.
WIDE_BATCH = 8
MAX_SLICE = 1024
ROUNDS_PER_SLICE = 8


@dataclass(frozen=True)
class _Window:
    """How a batch cuts its listing into slices and how many run at once."""

    slices: int  # slice activities running at most
    width: int  # a slice's parallelism (LLM calls in flight)
    size: int  # incidents per slice, before the end of a run is shared out
    child_cap: int  # escalation children running at most

    @staticmethod
    def of(inp: PopulateInput) -> "_Window":
        slices = 1 if inp.concurrency < WIDE_BATCH else 2
        width = max(1, inp.concurrency // slices)
        return _Window(slices=slices, width=width, size=inp.chunk_size or min(MAX_SLICE, ROUNDS_PER_SLICE * width),
                       child_cap=max(1, inp.concurrency // 4))

    def next_count(self, rest: int) -> int:
        """Near the end the rest is shared out between the window's slices, so one does not learn a
        full slice alone while the others idle; no slice is smaller than a round of its parallelism."""
        return min(rest, max(min(self.size, -(-rest // self.slices)), self.width))


@workflow.defn(name=contract.POPULATE_WORKFLOW)
class PopulateBatch(BatchControl[PopulateInput]):
    @workflow.init
    def __init__(self, inp: PopulateInput) -> None:
        super().__init__(inp)
        self._children: set[int] = set()  # indexes of running escalation children
        self._slices: dict[int, tuple[int, int]] = {}  # running slice activities: offset -> (count, width)

    def _progress(self) -> PopulateProgress:
        """Settled counts, and what runs now. A running slice's own progress is in its heartbeats,
        which a client adds (`bamboo.accumulation.client.live_progress`)."""
        inp = self._inp
        total = inp.listing.total if inp.listing else None
        counts = self._counts(
            total, running=len(self._children) + sum(count for count, _ in self._slices.values()),
            pending=(total - inp.cursor + len(inp.pending_escalations)) if total is not None else None)
        return PopulateProgress(**counts, escalated=inp.escalated, listing_error=inp.listing_error,
                                slices_done=inp.slices_done, running_slices=sorted(self._slices))

    # ---------------------------------------------------------------- run
    @workflow.run
    async def run(self, inp: PopulateInput) -> PopulateResult:
        inp = self._inp  # the instance @workflow.init took, which signals may already have changed
        self._announce(Kind.POPULATE)
        if inp.listing is None:
            try:
                fetched = await workflow.execute_activity(contract.list_incident_sources, inp.path,
                                                          **LISTING.options())
            except ActivityError as exc:
                inp.listing_error = innermost_reason(exc)
                self._finished = True
                raise ApplicationError(f"cannot list incidents at {inp.path}: {inp.listing_error}", non_retryable=True)
            inp.listing = fetched
        listing = inp.listing
        if inp.one_workflow_per_incident:
            inp.continue_as_new_every = inp.items_per_run()
            await run_bounded_children(inp, listing.total, self._read_page, self._child, self._children,
                                       lambda: self._cancelled)
        else:
            await self._run_window(inp, listing)
        self._finished = True
        return PopulateResult(batch_id=inp.batch_id, total=listing.total, done=inp.done, failed=inp.failed_count,
                              cancelled=self._cancelled, failures=inp.failed, escalated=inp.escalated,
                              skipped=inp.skipped)

    async def _read_page(self, offset: int) -> list[IncidentSource]:
        assert self._inp.listing is not None
        return await workflow.execute_activity(
            contract.read_incident_sources, SourcePageInput(ref=self._inp.listing.ref, offset=offset, limit=PAGE),
            **LISTING_PAGE.options())

    # ---------------------------------------------------------------- the sliding window
    async def _run_window(self, inp: PopulateInput, listing: SourceListing) -> None:
        """Deterministic scheduling of slice activities and escalation children under one budget of
        LLM slots (the batch's concurrency): a child holds one, a slice its parallelism. Escalated
        incidents start first (up to a quarter of the concurrency); a slice starts when the window
        has room and at least half a slice's width is free, and takes at most what is free, so
        children beside slices never push the model's load past the concurrency.

        A run hands out `items_per_run()` incidents, or fewer once its history, with the events its escalated
        incidents waiting or running will add, passes `max_history_events`; then it lets what runs finish and
        continues as new. (Counted on history alone, a run whose slices escalated most incidents went on handing
        out slices, and its escalations, which must all end before it continues as new, took it to several times
        the cap and towards Temporal's limit.)"""
        window = _Window.of(inp)
        started = 0
        tasks: set[asyncio.Task[None]] = set()

        def share_left() -> int:
            # A run always hands out something first, so a cap below its own start-up still progresses.
            backlog = len(inp.pending_escalations) + len(self._children)
            history = workflow.info().get_current_history_length() + EVENTS_PER_ESCALATION * backlog
            if started and history >= inp.max_history_events:
                return 0
            return inp.items_per_run() - started

        while not self._cancelled:
            free = inp.concurrency - len(self._children) - sum(width for _, width in self._slices.values())
            if (not inp.paused and inp.pending_escalations and len(self._children) < window.child_cap
                    and free > 0):
                item = inp.pending_escalations.pop(0)
                assert item.source is not None
                self._children.add(item.index)
                tasks.add(asyncio.create_task(self._child(item.index, item.source, item.prior_ref)))
                continue
            budget = share_left()
            more = inp.cursor < listing.total
            width = min(window.width, free)
            if (not inp.paused and more and budget > 0 and len(self._slices) < window.slices
                    and width >= max(1, window.width // 2)):
                offset, count = inp.cursor, window.next_count(min(listing.total - inp.cursor, budget))
                inp.cursor += count
                started += count
                self._slices[offset] = (count, width)
                tasks.add(asyncio.create_task(self._slice(offset, count, width, listing)))
                continue
            if not self._children and not self._slices and not inp.pending_escalations:
                if not more:
                    break
                if budget <= 0:
                    await asyncio.gather(*tasks)
                    inp.generation += 1
                    workflow.continue_as_new(inp)
            snapshot = self._snapshot()
            await workflow.wait_condition(lambda: self._snapshot() != snapshot)
        await workflow.wait_condition(lambda: not self._children and not self._slices)
        await asyncio.gather(*tasks)

    def _snapshot(self) -> tuple[int, int, int, bool, bool]:
        """What the window waits on: a slice or child ending, an escalation arriving, a signal."""
        inp = self._inp
        return (len(self._children), len(self._slices), len(inp.pending_escalations), inp.paused, self._cancelled)

    async def _slice(self, offset: int, count: int, width: int, listing: SourceListing) -> None:
        inp = self._inp
        try:
            try:
                result: SliceResult = await workflow.execute_activity(
                    contract.learn_slice,
                    SliceInput(batch_id=inp.batch_id, listing_ref=listing.ref, offset=offset, count=count,
                               parallelism=width, store_scope=self._store_scope(), relearn=inp.relearn),
                    activity_id=contract.slice_activity_id(offset), **SLICE.options())
                outcomes, why = result.outcomes, "the slice ended without an outcome for it; incident run on its own"
            except ActivityError as exc:
                outcomes, why = [], f"slice failed ({innermost_reason(exc)}); incident run on its own"
            # Whatever the slice did not settle (all of it, when its retries are spent) gets its own
            # workflow, which stores each incident exactly once whatever the slice managed before.
            outcomes = [o for o in outcomes if offset <= o.index < offset + count]
            settled = {o.index for o in outcomes}
            for page in range(offset, offset + count, PAGE):
                if all(i in settled for i in range(page, min(page + PAGE, offset + count))):
                    continue
                outcomes += [ItemOutcome(index=page + i, status="escalated", reason=why, source=source)
                             for i, source in enumerate(await self._read_page(page))
                             if page + i < offset + count and page + i not in settled]
        finally:
            del self._slices[offset]
        inp.slices_done += 1
        self._settle(outcomes)

    def _settle(self, outcomes: list[ItemOutcome]) -> None:
        inp = self._inp
        for outcome in outcomes:
            if outcome.status == "stored":
                inp.done += 1
            elif outcome.status == "skipped":
                inp.skipped += 1
            elif outcome.status == "failed":
                self._failed(outcome.index, outcome.source.label() if outcome.source else "",
                             outcome.reason or "failed")
            else:
                inp.escalated += 1
                inp.pending_escalations.append(outcome)

    def _store_scope(self) -> str:
        """The batch in the store: its id and its first run, the same across continue-as-new and for every
        slice and child, and new when a finished batch's id is started again (that is a new learning)."""
        return f"populate:{self._inp.batch_id}:{workflow.info().first_execution_run_id}"

    async def _child(self, index: int, source: IncidentSource, prior_ref: str | None = None) -> None:
        inp = self._inp
        try:
            result = await workflow.execute_child_workflow(
                AccumulateIncident.run,
                AccumulateInput(source=source, batch_id=inp.batch_id, max_review_retries=inp.max_review_retries,
                                prior_ref=prior_ref, store_scope=self._store_scope(), relearn=inp.relearn),
                id=contract.escalation_workflow_id(inp.batch_id, index),
                parent_close_policy=ParentClosePolicy.TERMINATE,
                execution_timeout=CHILD_TIMEOUT,
            )
            if result.skipped:
                inp.skipped += 1
            else:
                inp.done += 1
        except ChildWorkflowError as exc:
            self._failed(index, source.label(), innermost_reason(exc))
        finally:
            self._children.discard(index)
