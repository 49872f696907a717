"""Learning one slice of a populate batch: incidents concurrently, inside one activity.

One child workflow and three activities per incident cost more CPU in orchestration than the
incident itself (measured: ~200 ms per incident against 2 LLM calls of 100 ms). A slice keeps the
happy path — load, extract, hard checks, LLM review, store — in one process with at most
`parallelism` incidents talking to the LLM at once, and commits finished incidents in groups.
Everything off the happy path is *escalated*, not handled here: the batch gives that incident its
own AccumulateIncident workflow with the explorer, the review retries and per-step retries, so
nothing a slice cannot settle is settled worse than before. After a rejection or a request for
human input the slice parks its attempt as a blob, and that workflow starts from it.

Durability comes from idempotence plus progress: every write is an upsert keyed by the incident,
its audit row commits with it keyed by the batch's scope and the graph (so a redone incident is not
audited twice), the activity heartbeats `outcomes`, and a retried attempt skips what they settled.
A database outage is waited out inside the store while the activity heartbeats; an incident the
store refuses (or that cannot be read at all) fails alone, never its slice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from bamboo.accumulation.storing import GraphStorer, StoreRefused, StoreRequest
from bamboo.extraction.base import ExtractionResult, ExtractionStrategy
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, read_incident_off_loop
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError
from bamboo.accumulation.contract import ItemOutcome, PriorAttempt, StoreInput
from bamboo.models.incident import Incident, IncidentSource
from bamboo.models.review import ReviewOutcome

log = logging.getLogger(__name__)

MAX_GROUP = 64
# One group is written at a time, and while incidents are still on their way through the LLM a group
# gathers for up to GATHER_S before it is written. A group's cost is mostly per group, not per
# incident (an embedding call, a nearest-node query, three transactions of about twenty statements),
# and everything the worker's process and Postgres spend on it is CPU the LLM calls wait for on a
# shared machine. Measured at concurrency 32: two writers without a window wrote ~4 incidents per
# group, one writer with the window ~10, for ~15% less worker and Postgres CPU per incident. Storing
# holds no LLM slot, so the window costs throughput nothing; with nothing left before the LLM the
# last group is written at once.
MAX_CONCURRENT_GROUPS = 1
GATHER_S = 0.05


class SliceLearner:
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
        self._gate = asyncio.Semaphore(parallelism)

    async def run(self, items: Iterable[tuple[int, IncidentSource]], *, run_id: str, scope: str,
                  done: Iterable[ItemOutcome] = ()) -> list[ItemOutcome]:
        """An outcome for every item, in index order. `done` are outcomes settled before (by a
        previous attempt, or skipped as already learned); those items are not touched again.
        `scope` names the batch in the store (its audit rows' subject, and where one graph id
        belongs to one source). A store failure other than a refused incident propagates (the
        activity is retried and resumes from what `outcomes` held at its last heartbeat)."""
        items = list(items)
        inside = {i for i, _ in items}
        self.outcomes.update({o.index: o for o in done if o.index in inside})
        self._run_id, self._scope = run_id, scope
        todo = [(i, s) for i, s in items if i not in self.outcomes]
        self._before_llm = len(todo)
        tasks = [asyncio.create_task(self._learn(i, s)) for i, s in todo]
        try:
            # The first failure (a store failure the activity is to retry) ends the slice at once.
            for finished in asyncio.as_completed(tasks):
                await finished
        finally:
            for t in [*tasks, *self._flushers]:
                t.cancel()
        return [self.outcomes[i] for i in sorted(self.outcomes)]

    def _record(self, outcome: ItemOutcome) -> None:
        """`outcomes` is what the activity heartbeats: a retried attempt resumes from it."""
        self.outcomes[outcome.index] = outcome

    async def _learn(self, index: int, source: IncidentSource) -> None:
        try:
            request = await self._through_llm(index, source)
        finally:
            self._before_llm -= 1
            if not self._before_llm:
                self._joined.set()
        if request is None:
            return
        # Outside the gate: waiting for the store must not hold an LLM slot.
        stored = asyncio.get_running_loop().create_future()
        self._waiting.append((request, stored))
        self._joined.set()
        if len(self._flushers) < self.max_concurrent_groups:
            self._flushers.add(asyncio.create_task(self._drain()))
        result = await stored
        if isinstance(result, StoreRefused):
            self._record(ItemOutcome(index=index, status="failed", reason=f"{source.label()}: {result.reason}"[:500],
                                     source=source))
            return
        self._record(ItemOutcome(index=index, status="stored"))

    async def _through_llm(self, index: int, source: IncidentSource) -> StoreRequest | None:
        """What to store for this incident; None when its outcome is already settled (failed, escalated)."""
        async with self._gate:
            try:
                # Off the loop: parsing a large legal file took seconds, in which no heartbeat and no
                # model call of any slice on this worker went out.
                read = await read_incident_off_loop(source)
            except IncidentRejected as exc:
                self._record(ItemOutcome(index=index, status="failed", reason=f"{source.label()}: {exc}"[:500],
                                         source=source))
                return None
            except Exception as exc:  # a reader bug must cost this incident, not the slice and all it holds
                log.exception("could not read %s", source.label())
                self._record(ItemOutcome(index=index, status="failed", source=source,
                                         reason=f"{source.label()}: could not be read ({type(exc).__name__}: {exc})"[:500]))
                return None
            incident = read.incident
            try:
                extracted, review = await self._understand(incident)
            except LLMError as exc:  # the full workflow retries each step and fails with the real reason
                self._record(ItemOutcome(index=index, status="escalated", reason=f"{type(exc).__name__}: {exc}"[:300],
                                         source=source))
                return None
            except Exception as exc:  # not the model: the incident's content, which no retry changes
                log.exception("could not learn %s", source.label())
                self._record(ItemOutcome(index=index, status="failed", source=source,
                                         reason=f"{source.label()}: could not be learned ({type(exc).__name__}: {exc})"[:500]))
                return None
            why = _escalation_reason(review)
            if why:
                self._record(ItemOutcome(index=index, status="escalated", reason=why, source=source,
                                         prior_ref=await self._keep_prior(extracted, review)))
                return None
        return StoreRequest(
            graph=StoreInput(graph_id=incident.graph_id(), incident_id=incident.incident_id,
                             task_id=incident.task_data.get("jediTaskID"), graph=extracted.graph,
                             passages=extracted.passages, summary=extracted.summary, content_hash=read.content_hash),
            run_id=self._run_id, scope=self._scope, source=source.label())

    async def _keep_prior(self, extracted: ExtractionResult, review: ReviewOutcome) -> str | None:
        """Park the slice's attempt for the incident's own workflow, so a rejection or a request for
        human input does not cost the model's extraction and review twice. A reviewer error keeps
        none: the workflow is there to retry that review."""
        if review.reviewer_error:
            return None
        try:
            return await self.storer.store.blobs.put(
                PriorAttempt(extraction=extracted, review=review).model_dump_json().encode())
        except Exception as exc:  # the workflow then simply starts from scratch
            log.warning("could not keep the slice's attempt for an escalated incident: %s", exc)
            return None

    @retry(retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.retryable),
           stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.5, max=4), reraise=True)
    async def _understand(self, incident: Incident) -> tuple[ExtractionResult, ReviewOutcome]:
        """Extract and review. A transient model error is retried here (Temporal's retries cover the
        whole slice, not one incident); anything else escalates the incident."""
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


# What an escalated outcome keeps of the review's words, like every other outcome's reason (300 or 500
# characters). Outcomes ride in heartbeat details, the slice's result and the batch's pending escalations:
# uncut, three reviewer issues made about 920 characters an item, and a 1,024-item slice's result passed
# Temporal's 2 MiB payload limit. The incident's own workflow reviews it again and says everything there.
MAX_ESCALATION_REASON = 300


def _escalation_reason(review: ReviewOutcome) -> str | None:
    if not review.approved:
        why = "review rejected: " + "; ".join(review.issues[:3] or review.hard_failures[:3] or ["no reason given"])
    elif review.human_input_needed:
        why = "needs human input: " + "; ".join(review.human_input_needed[:3])
    elif review.reviewer_error:
        why = f"reviewer failed: {review.reviewer_error[:200]}"
    else:
        return None
    return why[:MAX_ESCALATION_REASON]
