"""Side effects of accumulation: read the incident, ask the LLM, write the store.

Thin by design: unpack a pydantic input, call a service in `bamboo/`, return a pydantic result.
The incident itself travels as a blob reference (claim check) so histories stay small.

Store-bound activities heartbeat while the store waits out a database outage (the worker's store
retries with backoff for up to BAMBOO_STORE_OUTAGE_WAIT_S), so an outage costs time, not incidents.
An incident the store refuses fails alone and is never retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.accumulation.lane import AccumulationLane, Slice
from bamboo.accumulation.storing import GraphStorer, StoreRefused, StoreRequest
from bamboo.analysis.exploration import ExplorationError, plan_read_only_code
from bamboo.analysis.contract import ExplorationPlan
from bamboo.extraction.base import ExtractionResult
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, list_sources, load_incident
from activities.llm_errors import to_application_error
from bamboo.llm.errors import LLMError
from bamboo.models.accumulate import (
    ChunkInput, ChunkResult, ExtractInput, IncidentSource, ItemOutcome, LaneHolding, LaneProgress, LoadIncidentInput,
    LoadedIncident,
    PriorAttempt, ReviewExplorationInput, ReviewInput, ReviewOutcome, SliceClaim, SliceGrant, SliceReport,
    SourceListing, SourcePageInput, StoreInput,
)
from bamboo.models.graph import WriteStats
from bamboo.models.incident import Incident
from bamboo.services import Services
from bamboo.store.blobs import BlobNotFound
from workflows import names

INCIDENT_REJECTED = "IncidentRejected"


KEPT_LISTINGS = 4


class AccumulateActivities:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.storer = GraphStorer(services.store, services.embedder, services.settings.canonical_match_threshold)
        self._listings: dict[str, list[str]] = {}  # listing blob ref -> its lines, oldest first

    async def _incident(self, ref: str) -> Incident:
        return Incident.model_validate_json(await self.s.store.blobs.get(ref))

    @activity.defn(name="load_incident")
    async def load_incident(self, inp: LoadIncidentInput) -> LoadedIncident:
        """Read and park the incident. An incident its batch already stored from this source (a lane
        stored it, then crashed or waited out an outage before reporting it) is not read again: it
        may be gone by now, and it must not be reported failed or learned a second time."""
        source = inp.source
        if inp.store_scope:
            stored = await self.s.store.knowledge.stored_graphs(inp.store_scope, [source.label()])
            if source.label() in stored:
                graph = stored[source.label()]
                return LoadedIncident(incident_ref="", incident_id=graph.incident_id, graph_id=graph.graph_id,
                                      task_id=graph.task_id, already_stored=True)
        try:
            incident = load_incident(source)
        except IncidentRejected as exc:
            raise ApplicationError(f"{source.label()}: {exc}", type=INCIDENT_REJECTED, non_retryable=True) from None
        ref = await self.s.store.blobs.put(incident.model_dump_json().encode())
        return LoadedIncident(
            incident_ref=ref, incident_id=incident.incident_id, graph_id=incident.graph_id(),
            task_id=incident.task_data.get("jediTaskID"), status=incident.task_data.get("status"), hints=self.s.strategy.prefetch_hints(incident),
        )

    @activity.defn(name="extract_incident")
    async def extract_incident(self, inp: ExtractInput) -> ExtractionResult:
        async def extract() -> ExtractionResult:
            incident = await self._incident(inp.incident_ref)  # may wait out an outage: heartbeat meanwhile
            return await self.s.strategy.extract(incident, feedback=inp.feedback, exploration=inp.exploration)

        try:
            return await with_heartbeats(extract())
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name="plan_review_exploration")
    async def plan_review_exploration(self, inp: ReviewExplorationInput) -> ExplorationPlan:
        """Read-only code meant to fetch what the reviewer found missing (the automatic-phase explorer)."""
        questions = [f"The reviewer found: {issue}. Fetch the task data that settles it." for issue in inp.issues]
        try:
            return await with_heartbeats(plan_read_only_code(self.s.llm, task_id=inp.task_id, status=inp.status,
                                                             open_questions=questions))
        except ExplorationError as exc:
            raise ApplicationError(str(exc), type="ExplorationError", non_retryable=True) from None
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name="review_extraction")
    async def review_extraction(self, inp: ReviewInput) -> ReviewOutcome:
        try:
            return await with_heartbeats(review_graph(self.s.llm, inp.graph, inp.task_fields, inp.source))
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name="store_graph")
    async def store_graph(self, inp: StoreInput) -> WriteStats:
        return await with_heartbeats(self._store_graph(inp))

    async def _store_graph(self, inp: StoreInput) -> WriteStats:
        info = activity.info()
        # The batch's scope when the workflow names one (then the lane and this workflow audit the same
        # subject once between them); a lone workflow is its own scope.
        request = StoreRequest(graph=inp, run_id=info.workflow_id, scope=inp.scope or info.workflow_id,
                               source=inp.source)
        [result] = await self.storer.store_many([request])
        if isinstance(result, StoreRefused):
            raise ApplicationError(f"{inp.source or inp.graph_id}: {result.reason}", type=INCIDENT_REJECTED,
                                   non_retryable=True)
        return result

    @activity.defn(name="accumulate_chunk")
    async def accumulate_chunk(self, inp: ChunkInput) -> ChunkResult:
        """A lane: slices of the batch learned concurrently, committed in groups. A claiming lane asks
        its batch for the next slice while its queue runs low and reports each finished slice. A
        retried attempt (the worker died) resumes the slices it holds from the outcomes the last one
        heartbeated, and takes what the store shows this batch already stored as stored; anything it
        redoes is an idempotent upsert whose audit row is keyed by the batch's scope and the graph.
        It heartbeats throughout, so waiting for the database is never taken for a dead worker."""
        info = activity.info()
        lane = AccumulationLane(self.s.strategy, self.s.llm, self.storer,
                                parallelism=min(inp.parallelism, self.s.settings.llm_concurrency))
        return await with_heartbeats(
            self._chunk(inp, lane, _previous_outcomes(info.heartbeat_details)),
            details=lambda: [o.model_dump(mode="json", exclude_none=True) for o in lane.outcomes.values()],
        )

    async def _chunk(self, inp: ChunkInput, lane: AccumulationLane, previous: list[ItemOutcome]) -> ChunkResult:
        info = activity.info()
        batch_workflow = info.workflow_id  # stable across the batch's continue-as-new runs
        scope = inp.store_scope or batch_workflow
        # This run only: after a continue-as-new the offsets would mean nothing to the next one.
        batch_run: WorkflowHandle = activity.client().get_workflow_handle(batch_workflow, run_id=info.workflow_run_id)

        async def released() -> None:
            await batch_run.signal(names.LANE_RELEASED_SIGNAL, inp.offset)

        async def progressed(stored: int, failed: int, escalated: int, slices_reported: int) -> None:
            await batch_run.signal(names.LANE_PROGRESS_SIGNAL, LaneProgress(
                offset=inp.offset, stored=stored, failed=failed, escalated=escalated, slices_reported=slices_reported))

        async def claim() -> Slice | None:
            grant = await batch_run.execute_update(names.CLAIM_SLICE_UPDATE, SliceClaim(lane=inp.offset),
                                                   result_type=SliceGrant)
            if not grant.count:
                return None
            return grant.offset, await self._numbered(inp.listing_ref, grant)

        async def slice_done(offset: int, outcomes: list[ItemOutcome]) -> None:
            await batch_run.execute_update(names.SLICE_DONE_UPDATE,
                                           SliceReport(lane=inp.offset, offset=offset, outcomes=outcomes))

        held = [SliceGrant(offset=inp.offset, count=inp.count)]
        if inp.claims and info.attempt > 1:
            # The slices this lane had claimed and not reported when its last attempt died.
            holding = await batch_run.query(names.HELD_SLICES_QUERY, inp.offset, result_type=LaneHolding)
            if holding.released:
                # Its slots already went to other work: learning again would go over the batch's
                # concurrency. What it settled stands; the batch gives the rest their own workflows.
                inside = {i for g in holding.slices for i in range(g.offset, g.offset + g.count)}
                return ChunkResult(outcomes=[o for o in previous if o.index in inside])
            held = holding.slices
        slices = [(g.offset, await self._numbered(inp.listing_ref, g)) for g in held]
        if info.attempt > 1:
            previous = previous + await self._stored_since(scope, slices, previous)
        outcomes = await lane.run(slices=slices, run_id=batch_workflow, scope=scope, done=previous,
                                  on_released=released, on_progress=progressed,
                                  claim=claim if inp.claims else None, on_slice_done=slice_done if inp.claims else None)
        return ChunkResult(outcomes=outcomes, groups=lane.groups)

    async def _stored_since(self, scope: str, slices: list[Slice], previous: list[ItemOutcome]) -> list[ItemOutcome]:
        """Items the dead attempt stored after its last heartbeat: stored, not to be learned again."""
        settled = {o.index for o in previous}
        todo = {s.label(): i for _, items in slices for i, s in items if i not in settled}
        stored = await self.s.store.knowledge.stored_graphs(scope, list(todo))
        return [ItemOutcome(index=todo[label], status="stored") for label in stored]

    async def _numbered(self, ref: str, grant: SliceGrant) -> list[tuple[int, IncidentSource]]:
        return list(enumerate(await self._sources(ref, grant.offset, grant.count), start=grant.offset))

    async def _sources(self, ref: str, offset: int, limit: int) -> list[IncidentSource]:
        lines = self._listings.get(ref)
        if lines is None:
            # Blobs are content-addressed, so a listing never changes under its ref: keep the last few
            # split, instead of fetching a 100k-line listing again for every slice and page.
            lines = (await self.s.store.blobs.get(ref)).decode().split("\n")
            self._listings[ref] = lines
            while len(self._listings) > KEPT_LISTINGS:
                self._listings.pop(next(iter(self._listings)))
        return [IncidentSource.model_validate_json(x) for x in lines[offset: offset + limit]]

    @activity.defn(name=names.LOAD_PRIOR_ATTEMPT)
    async def load_prior_attempt(self, ref: str) -> PriorAttempt:
        return PriorAttempt.model_validate_json(await self.s.store.blobs.get(ref))

    @activity.defn(name="list_incident_sources")
    async def list_incident_sources(self, path: str) -> SourceListing:
        """List once, park the list as a blob: a batch of 100k files must not ride in workflow history."""
        try:
            sources = list_sources(path)
        except ValueError as exc:
            raise ApplicationError(str(exc), type="SourceListingError", non_retryable=True) from None
        payload = "\n".join(s.model_dump_json(exclude_none=True) for s in sources).encode()
        return SourceListing(ref=await with_heartbeats(self.s.store.blobs.put(payload)), total=len(sources))

    @activity.defn(name="read_incident_sources")
    async def read_incident_sources(self, page: SourcePageInput) -> list[IncidentSource]:
        try:
            return await with_heartbeats(self._sources(page.ref, page.offset, page.limit))
        except BlobNotFound as exc:
            raise ApplicationError(str(exc), type="ListingLost", non_retryable=True) from None


def _previous_outcomes(details: Sequence[Any]) -> list[ItemOutcome]:
    """Outcomes heartbeated by an earlier attempt; anything unreadable just means starting over."""
    if not details:
        return []
    try:
        return [ItemOutcome.model_validate(o) for o in details[-1]]
    except (ValueError, TypeError):
        return []
