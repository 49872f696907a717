"""The populate lane: learn slices of incidents concurrently inside one activity.

One child workflow and three activities per incident cost more CPU in orchestration than the
incident itself (measured: ~200 ms per incident against 2 LLM calls of 100 ms). The lane keeps
the happy path — load, extract, hard checks, LLM review, store — in one process with at most
`parallelism` incidents talking to the LLM at once, and commits finished incidents in groups.
Everything off the happy path is *escalated*, not handled here: the batch gives that incident its
own AccumulateIncident workflow with the explorer, the review retries and per-step retries, so
nothing the lane cannot settle is settled worse than before. After a rejection or a request for
human input the lane parks its attempt as a blob, and that workflow starts from it.

A lane given a `claim` callback asks for the next slice while fewer than a round of incidents wait
for a slot, so its slots do not drain at a slice's end, and hands each finished slice's outcomes to
the batch (`on_slice_done`) instead of keeping them to the end.

Durability comes from idempotence plus progress: every write is an upsert keyed by the incident,
its audit row commits with it keyed by the batch's scope and the graph (so a redone incident is not
audited twice), the activity heartbeats the outcomes so far, and a retried activity skips what it
already reported. A database outage is waited out inside the store while the activity heartbeats;
an incident the store refuses (or that cannot be read at all) fails alone, never its lane.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from bamboo.accumulation.storing import GraphStorer, StoreRefused, StoreRequest
from bamboo.extraction.base import ExtractionResult, ExtractionStrategy
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, load_incident
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError
from bamboo.models.accumulate import IncidentSource, ItemOutcome, PriorAttempt, ReviewOutcome, StoreInput
from bamboo.models.incident import Incident

log = logging.getLogger(__name__)

MAX_GROUP = 64
# One group is written at a time, and while incidents are still on their way through the LLM a group
# gathers for up to GATHER_S before it is written. A group's cost is mostly per group, not per
# incident (an embedding call, a nearest-node query, three transactions of about twenty statements),
# and everything the lane's process and Postgres spend on it is CPU the LLM calls wait for on a
# shared machine. Measured at concurrency 32: two writers without a window wrote ~4 incidents per
# group, one writer with the window ~10, for ~15% less worker and Postgres CPU per incident. Storing
# holds no LLM slot, so the window costs throughput nothing; with nothing left before the LLM the
# last group is written at once.
MAX_CONCURRENT_GROUPS = 1
GATHER_S = 0.05
# How often a running lane reports what it has settled: often enough for a live progress bar, rare
# enough that a long batch's history does not fill up with reports (one event per report).
PROGRESS_EVERY_S = 5.0

# A slice held by a lane: its offset in the listing and its numbered incident sources.
Slice = tuple[int, list[tuple[int, IncidentSource]]]


class AccumulationLane:
    def __init__(self, strategy: ExtractionStrategy, llm: LLMClient, storer: GraphStorer, *, parallelism: int,
                 max_group: int = MAX_GROUP, max_concurrent_groups: int = MAX_CONCURRENT_GROUPS,
                 gather_s: float = GATHER_S) -> None:
        self.strategy = strategy
        self.llm = llm
        self.storer = storer
        self.parallelism = parallelism
        self.max_group = max_group
        self.max_concurrent_groups = max_concurrent_groups
        self.gather_s = gather_s
        self._joined = asyncio.Event()  # an incident joined the next group, or the last one left the LLM
        self.outcomes: dict[int, ItemOutcome] = {}
        self.groups = 0
        self._waiting: list[tuple[StoreRequest, asyncio.Future]] = []
        self._flushers: set[asyncio.Task] = set()
        self._before_llm = 0  # items not yet past the LLM stage
        self._on_released: Callable[[], Awaitable[None]] | None = None
        self._release: asyncio.Task | None = None
        self._gate = asyncio.Semaphore(parallelism)
        self._queued = 0  # items waiting for a slot
        self._hungry = asyncio.Event()  # fewer than a round of items wait: time to claim the next slice
        self._exhausted = True  # no more slices will come (set False while a claimer may still add some)
        self._tasks: set[asyncio.Task] = set()
        self._slice_of: dict[int, int] = {}  # item index -> offset of its slice
        self._unsettled: dict[int, int] = {}  # slice offset -> items without an outcome
        self._on_slice_done: Callable[[int, list[ItemOutcome]], Awaitable[None]] | None = None
        self.slices_reported = 0

    async def run(self, items: Iterable[tuple[int, IncidentSource]] = (), *, run_id: str, scope: str,
                  done: Iterable[ItemOutcome] = (),
                  on_released: Callable[[], Awaitable[None]] | None = None,
                  on_progress: Callable[[int, int, int, int], Awaitable[None]] | None = None,
                  slices: Iterable[Slice] | None = None,
                  claim: Callable[[], Awaitable[Slice | None]] | None = None,
                  on_slice_done: Callable[[int, list[ItemOutcome]], Awaitable[None]] | None = None,
                  ) -> list[ItemOutcome]:
        """Outcomes for every item not reported slice by slice, in index order. `done` are outcomes a
        previous attempt reported; those items are not touched again. `scope` names the batch in the
        store (its audit rows' subject, and where one graph id belongs to one source). A store
        failure other than a refused incident propagates (the activity is retried).

        `slices` (offset, items) replaces `items` for a lane that holds several slices. `claim` is
        awaited whenever fewer than a round of items wait for a slot, for the next slice (None: no
        more), so the lane's slots do not drain at a slice's end. `on_slice_done(offset, outcomes)`
        is awaited when every item of a slice has its outcome; once it returns those outcomes are
        the batch's, and leave the lane's result and heartbeats. If it fails they stay for the result.

        `on_released` is awaited once, when no slice is left to claim and every item is past the
        LLM: from then on the lane holds no LLM slot, and the batch may use its slots elsewhere
        while the last group writes run. Its failure is ignored (the batch then reuses the slots
        when the lane returns, as it would without it).

        `on_progress(stored, failed, escalated, slices_reported)` is awaited every `PROGRESS_EVERY_S`
        while the counts change; like `on_released`, its failure only costs the report."""
        self._on_released = on_released
        self._on_slice_done = on_slice_done
        given = list(slices) if slices is not None else [(None, list(items))]
        inside = {i for _, its in given for i, _ in its}
        for outcome in done:
            if outcome.index in inside:  # outcomes of slices reported since are not ours any more
                self.outcomes[outcome.index] = outcome
        self._run_id, self._scope = run_id, scope
        for offset, its in given:
            self._add(offset, its)
        if self._queued < self.parallelism:  # also with nothing held (a retry after every slice was reported)
            self._hungry.set()
        claimer = None
        if claim is not None:
            self._exhausted = False
            claimer = asyncio.create_task(self._claim_while_hungry(claim))
        reporter = asyncio.create_task(self._report(on_progress)) if on_progress is not None else None
        try:
            while True:
                for t in [*self._tasks, *([claimer] if claimer else [])]:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        raise t.exception()
                live = {t for t in self._tasks if not t.done()}
                if claimer is not None and not claimer.done():
                    live.add(claimer)
                if not live:
                    break
                await asyncio.wait(live, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in [*self._tasks, *self._flushers, *([self._release] if self._release else []),
                      *([reporter] if reporter else []), *([claimer] if claimer else [])]:
                t.cancel()
        return [self.outcomes[i] for i in sorted(self.outcomes)]

    def _add(self, offset: int | None, items: list[tuple[int, IncidentSource]]) -> None:
        """Start learning a slice's items (those without an outcome yet)."""
        todo = [(i, s) for i, s in items if i not in self.outcomes]
        if offset is not None:
            self._unsettled[offset] = len(todo)
            for i, _ in items:
                self._slice_of[i] = offset
        self._before_llm += len(todo)
        self._queued += len(todo)
        if self._queued < self.parallelism:
            self._hungry.set()
        for i, s in todo:
            t = asyncio.create_task(self._learn(i, s))
            self._tasks.add(t)
            t.add_done_callback(self._forget)
        if offset is not None and not todo:
            self._slice_settled(offset)

    def _forget(self, task: asyncio.Task) -> None:
        """Keep finished tasks only while they carry a failure `run` has to raise."""
        if task.cancelled() or task.exception() is None:
            self._tasks.discard(task)

    async def _claim_while_hungry(self, claim: Callable[[], Awaitable[Slice | None]]) -> None:
        """Claim the next slice whenever fewer than a round of items wait, until there is no more.
        A claim that fails ends claiming: the lane finishes what it holds and the batch goes on."""
        try:
            while True:
                await self._hungry.wait()
                self._hungry.clear()
                try:
                    got = await claim()
                except Exception as exc:
                    log.warning("could not claim the next slice; the lane finishes what it holds: %s", exc)
                    got = None
                if got is None:
                    return
                self._add(*got)
        finally:
            self._exhausted = True
            self._maybe_release()

    def _slice_settled(self, offset: int) -> None:
        if self._on_slice_done is None:
            return
        outcomes = [self.outcomes[i] for i, o in self._slice_of.items() if o == offset and i in self.outcomes]
        task = asyncio.create_task(self._hand_over(offset, outcomes))
        self._tasks.add(task)
        task.add_done_callback(self._forget)

    async def _hand_over(self, offset: int, outcomes: list[ItemOutcome]) -> None:
        """Report a finished slice; once the batch has it, its outcomes leave the lane."""
        assert self._on_slice_done is not None
        try:
            await self._on_slice_done(offset, outcomes)
        except Exception as exc:  # the outcomes stay and reach the batch with the lane's result
            log.warning("could not report slice %s; its outcomes go with the lane's result: %s", offset, exc)
            return
        for o in outcomes:
            self.outcomes.pop(o.index, None)
            self._slice_of.pop(o.index, None)
        self._unsettled.pop(offset, None)
        self.slices_reported += 1

    def _settled(self) -> tuple[int, int, int, int]:
        """Stored, failed and escalated outcomes not yet reported by slice, and the slices reported."""
        statuses = [o.status for o in self.outcomes.values()]
        return (statuses.count("stored"), statuses.count("failed"), statuses.count("escalated"),
                self.slices_reported)

    async def _report(self, on_progress: Callable[[int, int, int, int], Awaitable[None]]) -> None:
        reported = None
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            counts = self._settled()
            if counts != reported:
                reported = counts
                await _quietly(on_progress(*counts))

    def _record(self, outcome: ItemOutcome) -> None:
        """`outcomes` is what the activity heartbeats: a retried attempt resumes from it."""
        self.outcomes[outcome.index] = outcome
        offset = self._slice_of.get(outcome.index)
        if offset is not None and offset in self._unsettled:
            self._unsettled[offset] -= 1
            if self._unsettled[offset] == 0:
                self._slice_settled(offset)

    async def _learn(self, index: int, source: IncidentSource) -> None:
        try:
            request = await self._through_llm(index, source)
        finally:
            self._before_llm -= 1
            if not self._before_llm:
                self._joined.set()
        if request is None:
            self._maybe_release()
            return
        # Outside the gate: waiting for the store must not hold an LLM slot.
        stored = asyncio.get_running_loop().create_future()
        self._waiting.append((request, stored))
        self._joined.set()
        if len(self._flushers) < self.max_concurrent_groups:
            self._flushers.add(asyncio.create_task(self._drain()))
        self._maybe_release()
        result = await stored
        if isinstance(result, StoreRefused):
            self._record(ItemOutcome(index=index, status="failed", reason=f"{source.label()}: {result.reason}"[:500],
                                     source=source))
            return
        self._record(ItemOutcome(index=index, status="stored"))

    async def _through_llm(self, index: int, source: IncidentSource) -> StoreRequest | None:
        """What to store for this incident; None when its outcome is already settled (failed, escalated)."""
        async with self._gate:
            self._queued -= 1
            if self._queued < self.parallelism:
                self._hungry.set()
            try:
                incident = load_incident(source)
            except IncidentRejected as exc:
                self._record(ItemOutcome(index=index, status="failed", reason=f"{source.label()}: {exc}"[:500],
                                         source=source))
                return None
            except Exception as exc:  # a reader bug must cost this incident, not the lane and all it holds
                log.exception("could not read %s", source.label())
                self._record(ItemOutcome(index=index, status="failed", source=source,
                                         reason=f"{source.label()}: could not be read ({type(exc).__name__}: {exc})"[:500]))
                return None
            try:
                extracted, review = await self._understand(incident)
            except Exception as exc:  # the full workflow retries each step and fails with the real reason
                self._record(ItemOutcome(index=index, status="escalated", reason=f"{type(exc).__name__}: {exc}"[:300],
                                         source=source))
                return None
            why = _escalation_reason(review)
            if why:
                self._record(ItemOutcome(index=index, status="escalated", reason=why, source=source,
                                         prior_ref=await self._keep_prior(extracted, review)))
                return None
        return StoreRequest(
            graph=StoreInput(graph_id=incident.graph_id(), incident_id=incident.incident_id,
                             task_id=incident.task_data.get("jediTaskID"), graph=extracted.graph,
                             passages=extracted.passages, summary=extracted.summary),
            run_id=self._run_id, scope=self._scope, source=source.label())

    async def _keep_prior(self, extracted: ExtractionResult, review: ReviewOutcome) -> str | None:
        """Park the lane's attempt for the incident's own workflow, so a rejection or a request for
        human input does not cost the model's extraction and review twice. A reviewer error keeps
        none: the workflow is there to retry that review."""
        if review.reviewer_error:
            return None
        try:
            return await self.storer.store.blobs.put(
                PriorAttempt(extraction=extracted, review=review).model_dump_json().encode())
        except Exception as exc:  # the workflow then simply starts from scratch
            log.warning("could not keep the lane's attempt for an escalated incident: %s", exc)
            return None

    def _maybe_release(self) -> None:
        """Tell the batch once that this lane's LLM work is over while its commits are not."""
        if (self._before_llm or not self._exhausted or self._on_released is None
                or not (self._waiting or self._flushers)):
            return
        callback, self._on_released = self._on_released, None
        self._release = asyncio.create_task(_quietly(callback()))

    @retry(retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.retryable),
           stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.5, max=4), reraise=True)
    async def _understand(self, incident: Incident) -> tuple[ExtractionResult, ReviewOutcome]:
        """Extract and review. A transient model error is retried here (Temporal's retries cover the
        whole lane, not one incident); anything else escalates the incident."""
        extracted = await self.strategy.extract(incident)
        hints = extracted.hints if extracted.hints is not None else self.strategy.prefetch_hints(incident)
        return extracted, await review_graph(self.llm, extracted.graph, hints, extracted.source)

    async def _gather(self) -> None:
        """Let the next group grow for up to `gather_s` while incidents are still before the LLM."""
        await asyncio.sleep(0)  # incidents finishing in the same loop pass join this group
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gather_s
        while self._before_llm and len(self._waiting) < self.max_group:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._joined.clear()
            try:
                await asyncio.wait_for(self._joined.wait(), left)
            except asyncio.TimeoutError:
                return

    async def _drain(self) -> None:
        """Group commit: while a group is being written, the next one gathers behind it.

        The writer leaves `_flushers` in the same step in which it finds nothing waiting: removed by
        a done-callback (a later loop pass), an incident joining in between would find the writers'
        place taken and wait for a writer that never comes."""
        try:
            while self._waiting:
                await self._gather()
                group, self._waiting = self._waiting[: self.max_group], self._waiting[self.max_group:]
                try:
                    results = await self.storer.store_many([r for r, _ in group])
                except Exception as exc:
                    for _, f in group:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                self.groups += 1
                for (_, f), result in zip(group, results):
                    if not f.done():
                        f.set_result(result)
        finally:
            self._flushers.discard(asyncio.current_task())


def _escalation_reason(review: ReviewOutcome) -> str | None:
    if not review.approved:
        return "review rejected: " + "; ".join(review.issues[:3] or review.hard_failures[:3] or ["no reason given"])
    if review.human_input_needed:
        return "needs human input: " + "; ".join(review.human_input_needed[:3])
    if review.reviewer_error:
        return f"reviewer failed: {review.reviewer_error[:200]}"
    return None


async def _quietly(release: Awaitable[None]) -> None:
    try:
        await release
    except Exception as exc:  # an optimisation only: the lane's result still reaches the batch
        log.debug("could not report the lane's LLM work as finished: %s", exc)
