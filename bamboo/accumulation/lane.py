"""The populate lane: learn a slice of incidents concurrently inside one activity.

One child workflow and three activities per incident cost more CPU in orchestration than the
incident itself (measured: ~200 ms per incident against 2 LLM calls of 100 ms). The lane keeps
the happy path — load, extract, hard checks, LLM review, store — in one process with at most
`parallelism` incidents talking to the LLM at once, and commits finished incidents in groups.
Everything off the happy path is *escalated*, not handled here: the batch gives that incident its
own AccumulateIncident workflow with the explorer, the review retries and per-step retries, so
nothing the lane cannot settle is settled worse than before. After a rejection or a request for
human input the lane parks its attempt as a blob, and that workflow starts from it.

Durability comes from idempotence plus progress: every write is an upsert keyed by the incident,
the activity heartbeats the outcomes so far, and a retried activity skips what it already reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from bamboo.accumulation.storing import GraphStorer, StoreRequest
from bamboo.extraction.base import ExtractionResult, ExtractionStrategy
from bamboo.extraction.checks import checked_outcome
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, load_incident
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError
from bamboo.models.accumulate import IncidentSource, ItemOutcome, PriorAttempt, ReviewOutcome, StoreInput
from bamboo.models.incident import Incident

log = logging.getLogger(__name__)

MAX_GROUP = 64
# Two groups may be written at once: a group's write is mostly Postgres time (HNSW inserts), and
# with one writer the store, not the LLM, set the pace of a 32-wide lane.
MAX_CONCURRENT_GROUPS = 2
# How often a running lane reports what it has settled: often enough for a live progress bar, rare
# enough that a long batch's history does not fill up with reports (one event per report).
PROGRESS_EVERY_S = 5.0


class AccumulationLane:
    def __init__(self, strategy: ExtractionStrategy, llm: LLMClient, storer: GraphStorer, *, parallelism: int,
                 max_group: int = MAX_GROUP, max_concurrent_groups: int = MAX_CONCURRENT_GROUPS) -> None:
        self.strategy = strategy
        self.llm = llm
        self.storer = storer
        self.parallelism = parallelism
        self.max_group = max_group
        self.max_concurrent_groups = max_concurrent_groups
        self.outcomes: dict[int, ItemOutcome] = {}
        self.groups = 0
        self._waiting: list[tuple[StoreRequest, asyncio.Future]] = []
        self._flushers: set[asyncio.Task] = set()
        self._before_llm = 0  # items not yet past the LLM stage
        self._on_released: Callable[[], Awaitable[None]] | None = None
        self._release: asyncio.Task | None = None

    async def run(self, items: Iterable[tuple[int, IncidentSource]], *, run_id: str, dedup_prefix: str,
                  done: Iterable[ItemOutcome] = (),
                  on_released: Callable[[], Awaitable[None]] | None = None,
                  on_progress: Callable[[int, int, int], Awaitable[None]] | None = None) -> list[ItemOutcome]:
        """Outcomes for every item, in index order. `done` are outcomes a previous attempt reported;
        those items are not touched again. A store failure propagates (the activity is retried).

        `on_released` is awaited once, when every item is past the LLM and only group writes are
        left: from then on the lane holds no LLM slot, and the batch may start the next slice instead
        of leaving the lane's slots idle through the last commits. Its failure is ignored (the
        batch then starts the next slice when this one returns, as it would without it).

        `on_progress(stored, failed, escalated)` is awaited every `PROGRESS_EVERY_S` while the counts
        change; like `on_released`, its failure only costs the report."""
        for outcome in done:
            self.outcomes[outcome.index] = outcome
        gate = asyncio.Semaphore(self.parallelism)
        todo = [(i, s) for i, s in items if i not in self.outcomes]
        self._before_llm = len(todo)
        self._on_released = on_released
        tasks = [asyncio.create_task(self._learn(i, s, gate, run_id, f"{dedup_prefix}:{i}")) for i, s in todo]
        reporter = asyncio.create_task(self._report(on_progress)) if on_progress is not None else None
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in [*tasks, *self._flushers, *([self._release] if self._release else []),
                      *([reporter] if reporter else [])]:
                t.cancel()
        return [self.outcomes[i] for i in sorted(self.outcomes)]

    def _settled(self) -> tuple[int, int, int]:
        """Stored, failed and escalated outcomes so far."""
        statuses = [o.status for o in self.outcomes.values()]
        return statuses.count("stored"), statuses.count("failed"), statuses.count("escalated")

    async def _report(self, on_progress: Callable[[int, int, int], Awaitable[None]]) -> None:
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

    async def _learn(self, index: int, source: IncidentSource, gate: asyncio.Semaphore, run_id: str,
                     dedup_key: str) -> None:
        try:
            request = await self._through_llm(index, source, gate, run_id, dedup_key)
        finally:
            self._before_llm -= 1
        if request is None:
            self._maybe_release()
            return
        # Outside the gate: waiting for the store must not hold an LLM slot.
        stored = asyncio.get_running_loop().create_future()
        self._waiting.append((request, stored))
        if len(self._flushers) < self.max_concurrent_groups:
            flusher = asyncio.create_task(self._drain())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        self._maybe_release()
        await stored
        self._record(ItemOutcome(index=index, status="stored"))

    async def _through_llm(self, index: int, source: IncidentSource, gate: asyncio.Semaphore, run_id: str,
                           dedup_key: str) -> StoreRequest | None:
        """What to store for this incident; None when its outcome is already settled (failed, escalated)."""
        async with gate:
            try:
                incident = load_incident(source)
            except IncidentRejected as exc:
                self._record(ItemOutcome(index=index, status="failed", reason=f"{source.label()}: {exc}"[:500],
                                         source=source))
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
            run_id=run_id, dedup_key=dedup_key)

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
        if self._before_llm or self._on_released is None or not (self._waiting or self._flushers):
            return
        callback, self._on_released = self._on_released, None
        self._release = asyncio.create_task(_quietly(callback()))

    @retry(retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.retryable),
           stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.5, max=4), reraise=True)
    async def _understand(self, incident: Incident) -> tuple[ExtractionResult, ReviewOutcome]:
        """Extract and review. A transient model error is retried here (Temporal's retries cover the
        whole lane, not one incident); anything else escalates the incident."""
        extracted = await self.strategy.extract(incident)
        review = checked_outcome(extracted.graph, extracted.source)
        if review is None:
            hints = extracted.hints if extracted.hints is not None else self.strategy.prefetch_hints(incident)
            review = await review_graph(self.llm, extracted.graph, hints, extracted.source)
        return extracted, review

    async def _drain(self) -> None:
        """Group commit: while groups are being written, the next one gathers behind them."""
        await asyncio.sleep(0)  # incidents finishing in the same loop pass join this group
        while self._waiting:
            group, self._waiting = self._waiting[: self.max_group], self._waiting[self.max_group:]
            try:
                await self.storer.store_many([r for r, _ in group])
            except Exception as exc:
                for _, f in group:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.groups += 1
            for _, f in group:
                if not f.done():
                    f.set_result(None)


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
