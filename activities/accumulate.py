"""Side effects of accumulation: read the incident, ask the LLM, write the store.

Thin by design: unpack a pydantic input, call a service in `bamboo/`, return a pydantic result.
The incident itself travels as a blob reference (claim check) so histories stay small.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.analysis.exploration import ExplorationError, plan_read_only_code
from bamboo.analysis.models import ExplorationPlan
from bamboo.audit import AuditEvent
from bamboo.extraction.base import ExtractionResult
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, list_sources, load_incident
from bamboo.llm.errors import LLMError, to_application_error
from bamboo.models.accumulate import (
    ExtractInput, IncidentSource, LoadedIncident, ReviewExplorationInput, ReviewInput, ReviewOutcome, SourceListing,
    SourcePageInput, StoreInput,
)
from bamboo.models.graph import GraphWrite, WriteStats
from bamboo.models.incident import Incident
from bamboo.services import Services
from bamboo.store.canonical import canonical_targets, canonicalise_graph

INCIDENT_REJECTED = "IncidentRejected"


class AccumulateActivities:
    def __init__(self, services: Services) -> None:
        self.s = services

    async def _incident(self, ref: str) -> Incident:
        return Incident.model_validate_json(await self.s.store.blobs.get(ref))

    @activity.defn(name="load_incident")
    async def load_incident(self, source: IncidentSource) -> LoadedIncident:
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
        incident = await self._incident(inp.incident_ref)
        try:
            return await with_heartbeats(self.s.strategy.extract(incident, feedback=inp.feedback, exploration=inp.exploration))
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
        # One embedding call for canonical names and passages together: the round trip dominates.
        targets = canonical_targets(inp.graph)
        passages = [p for p in inp.passages if p.content.strip()]
        texts = [n.name for n in targets] + [p.content for p in passages]
        vectors = await self.s.embedder.embed(texts) if texts else []
        graph = await canonicalise_graph(inp.graph, self.s.store.knowledge, vectors[:len(targets)],
                                         self.s.settings.canonical_match_threshold)
        for p in passages:
            if p.node is not None:
                p.node = graph.renames.get(p.node.key(), p.node)
        vectors = vectors[len(targets):]
        stats = await self.s.store.knowledge.write_graph(
            GraphWrite(graph_id=inp.graph_id, incident_id=inp.incident_id, task_id=inp.task_id, graph=graph.graph,
                       passages=passages, summary=inp.summary, warnings=inp.warnings),
            vectors, graph.canonical_embeddings,
        )
        for request in inp.human_requests:
            await self.s.store.knowledge.record_human_request(inp.graph_id, request)
        await self.s.store.audit.append(
            AuditEvent(kind="graph_stored", actor="accumulate", run_id=activity.info().workflow_id,
                       body={"graph_id": inp.graph_id, "nodes": stats.nodes, "edges": stats.edges,
                             "passages": stats.passages, "warnings": inp.warnings}),
            dedup_key=f"graph_stored:{activity.info().workflow_id}:{activity.info().workflow_run_id}",
        )
        return stats

    @activity.defn(name="list_incident_sources")
    async def list_incident_sources(self, path: str) -> SourceListing:
        """List once, park the list as a blob: a batch of 100k files must not ride in workflow history."""
        try:
            sources = list_sources(path)
        except ValueError as exc:
            raise ApplicationError(str(exc), type="SourceListingError", non_retryable=True) from None
        payload = "\n".join(s.model_dump_json() for s in sources).encode()
        return SourceListing(ref=await self.s.store.blobs.put(payload), total=len(sources))

    @activity.defn(name="read_incident_sources")
    async def read_incident_sources(self, page: SourcePageInput) -> list[IncidentSource]:
        lines = (await self.s.store.blobs.get(page.ref)).decode().split("\n")
        return [IncidentSource.model_validate_json(x) for x in lines[page.offset: page.offset + page.limit]]
