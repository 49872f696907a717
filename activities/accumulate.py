"""Side effects of accumulation: read the incident, ask the LLM, write the store.

Thin by design: unpack a pydantic input, call a service in `bamboo/`, return a pydantic result.
The incident itself travels as a blob reference (claim check) so histories stay small. Every
activity implements a stub of `bamboo.accumulation.contract`, which names it.

Store-bound activities heartbeat while the store waits out a database outage (the worker's store
retries with backoff for up to BAMBOO_STORE_OUTAGE_WAIT_S), so an outage costs time, not incidents.
An incident the store refuses fails alone and is never retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.accumulation import contract
from bamboo.accumulation.contract import (
    ExtractInput, ItemOutcome, LoadIncidentInput, LoadedIncident, PriorAttempt,
    ReviewExplorationInput, ReviewInput, SliceHeartbeat, SliceInput, SliceResult, SourceListing,
    SourcePageInput, StoreInput,
)
from bamboo.accumulation.slice_learner import SliceLearner
from bamboo.accumulation.storing import GraphStorer, StoreRefused, StoreRequest
from bamboo.analysis.exploration import ExplorationError, plan_read_only_code
from bamboo.analysis.contract import ExplorationPlan
from bamboo.contract import implements
from bamboo.extraction.base import ExtractionResult
from bamboo.extraction.review import review_graph
from bamboo.ingest import IncidentRejected, content_hash_off_loop, list_sources, read_incident_off_loop
from activities.llm_errors import to_application_error
from bamboo.llm.errors import LLMError
from bamboo.models.graph import WriteStats
from bamboo.models.incident import Incident, IncidentSource
from bamboo.models.review import ReviewOutcome
from bamboo.offload import BudgetExceeded, in_thread
from bamboo.services import Services
from bamboo.store.blobs import BlobNotFound

INCIDENT_REJECTED = "IncidentRejected"
# Validating or encoding a parked incident (at most 8 MiB) in the offload pool; only a stuck worker exceeds it.
# Known limit: each is one pydantic-core call that keeps the GIL, so the thread does not free the event loop
# meanwhile (8 MiB of dense arrays in external_data: ~0.3 s to validate, ~0.16-0.2 s to encode, and the read in
# bamboo.ingest ~0.4 s). A child process would not help: this process needs the Incident itself (the strategy's
# hints and extraction use it, with the worker's pseudonym key), and handing it back costs what parsing it does.
# What frees the loop is a smaller bound on what an incident may hold (bamboo.ingest).
CODEC_BUDGET_S = 120.0
# Listing reads the directory or every line of the JSONL (1M lines: about 5 s) and encodes the list;
# within the listing step's 5 minutes.
LISTING_BUDGET_S = 240.0
# Splitting a parked listing (1M lines: 80 MB) in the offload pool; within a page read's timeout.
SPLIT_BUDGET_S = 60.0


KEPT_LISTINGS = 4


class AccumulateActivities:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.storer = GraphStorer(services.store, services.embedder, services.settings.canonical_match_threshold)
        self._listings: dict[str, asyncio.Future[list[str]]] = {}  # listing blob ref -> its load, oldest first

    async def _incident(self, ref: str) -> Incident:
        raw = await self.s.store.blobs.get(ref)
        return await in_thread(Incident.model_validate_json, raw, budget_s=CODEC_BUDGET_S, what="reading the incident")

    @implements(contract.load_incident)
    async def load_incident(self, inp: LoadIncidentInput) -> LoadedIncident:
        """Read and park the incident. An incident its batch already stored from this source (a slice
        stored it, then crashed or waited out an outage before reporting it) is not read again: it
        may be gone by now, and it must not be reported failed or learned a second time. One whose
        content a stored graph was learned from (an earlier batch) is skipped unless `relearn`."""
        source = inp.source
        if inp.store_scope:
            stored = await self.s.store.knowledge.stored_graphs(inp.store_scope, [source.label()])
            if source.label() in stored:
                graph = stored[source.label()]
                return LoadedIncident(incident_ref="", incident_id=graph.incident_id, graph_id=graph.graph_id,
                                      task_id=graph.task_id, already_stored=True)
        try:
            # Everything sized by the incident runs off the loop; anything its content makes fail is this
            # incident's error, never a retry (a local activity retried such a failure for an hour).
            read = await read_incident_off_loop(source)
            incident = read.incident
            hints = self.s.strategy.prefetch_hints(incident)
            encoded = await in_thread(lambda: incident.model_dump_json().encode(), budget_s=CODEC_BUDGET_S,
                                      what="encoding the incident")
        except IncidentRejected as exc:
            raise ApplicationError(f"{source.label()}: {exc}", type=INCIDENT_REJECTED, non_retryable=True) from None
        except Exception as exc:
            raise _content_error(source.label(), exc) from None
        if not inp.relearn and await self.s.store.knowledge.learned_contents([read.content_hash]):
            return LoadedIncident(incident_ref="", incident_id=incident.incident_id, graph_id=incident.graph_id(),
                                  task_id=incident.task_data.get("jediTaskID"), already_learned=True,
                                  content_hash=read.content_hash)
        ref = await self.s.store.blobs.put(encoded)
        return LoadedIncident(
            incident_ref=ref, incident_id=incident.incident_id, graph_id=incident.graph_id(),
            task_id=incident.task_data.get("jediTaskID"), status=incident.task_data.get("status"),
            hints=hints, content_hash=read.content_hash,
        )

    @implements(contract.extract_incident)
    async def extract_incident(self, inp: ExtractInput) -> ExtractionResult:
        async def extract() -> ExtractionResult:
            incident = await self._incident(inp.incident_ref)  # may wait out an outage: heartbeat meanwhile
            try:
                return await self.s.strategy.extract(incident, feedback=inp.feedback, exploration=inp.exploration)
            except LLMError:
                raise
            except Exception as exc:  # the model's errors are LLMErrors: anything else is this incident's content
                raise _content_error(incident.incident_id, exc) from None

        try:
            return await with_heartbeats(extract())
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @implements(contract.plan_review_exploration)
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

    @implements(contract.review_extraction)
    async def review_extraction(self, inp: ReviewInput) -> ReviewOutcome:
        try:
            return await with_heartbeats(review_graph(self.s.llm, inp.graph, inp.task_fields, inp.source))
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @implements(contract.store_graph)
    async def store_graph(self, inp: StoreInput) -> WriteStats:
        return await with_heartbeats(self._store_graph(inp))

    async def _store_graph(self, inp: StoreInput) -> WriteStats:
        workflow_id = _workflow_id()
        # The batch's scope when the workflow names one (then the slice and this workflow audit the same
        # subject once between them); a lone workflow is its own scope.
        request = StoreRequest(graph=inp, run_id=workflow_id, scope=inp.scope or workflow_id,
                               source=inp.source)
        [result] = await self.storer.store_many([request])
        if isinstance(result, StoreRefused):
            raise ApplicationError(f"{inp.source or inp.graph_id}: {result.reason}", type=INCIDENT_REJECTED,
                                   non_retryable=True)
        return result

    @implements(contract.learn_slice)
    async def learn_slice(self, inp: SliceInput) -> SliceResult:
        """One slice of the batch, learned concurrently and committed in groups; one report, when it
        ends. It heartbeats what it has settled: a retried attempt (the worker died) resumes from
        the last heartbeat and takes what the store shows this batch stored since as stored, so
        anything it redoes is an idempotent upsert whose audit row is keyed by the batch's scope
        and the graph. Incidents a stored graph was learned from (same content) are skipped before
        any model call. Heartbeats go on while the database is waited out, so waiting is never
        taken for a dead worker."""
        info = activity.info()
        # The slice's own width; the worker's model client bounds the calls of all its slices together.
        learner = SliceLearner(self.s.strategy, self.s.llm, self.storer, parallelism=inp.parallelism)
        previous = _previous_outcomes(info.heartbeat_details)
        # Every beat carries the dead attempt's outcomes as well as this one's: before the learner merges
        # them (after the listing, the store lookups and the hashing, which may wait out an outage for an
        # hour) a beat of this attempt's alone would erase them, and a further crash would redo their model
        # calls while the batch's live progress fell back.
        resumed = {o.index: o for o in previous}
        return await with_heartbeats(
            self._learn_slice(inp, learner, previous),
            details=lambda: SliceHeartbeat(outcomes=list((resumed | learner.outcomes).values())).model_dump(
                mode="json", exclude_none=True),
        )

    async def _learn_slice(self, inp: SliceInput, learner: SliceLearner, previous: list[ItemOutcome]) -> SliceResult:
        info = activity.info()
        workflow_id = _workflow_id()
        scope = inp.store_scope or workflow_id
        items = list(enumerate(await self._sources(inp.listing_ref, inp.offset, inp.count), start=inp.offset))
        settled = list(previous)
        if info.attempt > 1:
            settled += await self._stored_since(scope, items, settled)
        if not inp.relearn:
            settled += await self._learned_before(items, settled)
        # The batch's workflow id: stable across its continue-as-new runs, the audit rows' run.
        outcomes = await learner.run(items, run_id=workflow_id, scope=scope, done=settled)
        return SliceResult(outcomes=outcomes, groups=learner.groups)

    async def _stored_since(self, scope: str, items: list[tuple[int, IncidentSource]],
                            settled: list[ItemOutcome]) -> list[ItemOutcome]:
        """Items the dead attempt stored after its last heartbeat: stored, not to be learned again."""
        done = {o.index for o in settled}
        todo = {s.label(): i for i, s in items if i not in done}
        stored = await self.s.store.knowledge.stored_graphs(scope, list(todo))
        return [ItemOutcome(index=todo[label], status="stored") for label in stored]

    async def _learned_before(self, items: list[tuple[int, IncidentSource]],
                              settled: list[ItemOutcome]) -> list[ItemOutcome]:
        """Items whose content a stored graph was learned from: skipped, no model call. A file that
        cannot be read is left to the learner, which fails it with its reason."""
        done = {o.index for o in settled}
        fingerprints: dict[str, list[int]] = {}
        for i, source in items:
            if i in done:
                continue
            try:
                fingerprints.setdefault(await content_hash_off_loop(source), []).append(i)
            except IncidentRejected:
                continue
        learned = await self.s.store.knowledge.learned_contents(list(fingerprints))
        return [ItemOutcome(index=i, status="skipped") for h in learned for i in fingerprints[h]]

    async def _sources(self, ref: str, offset: int, limit: int) -> list[IncidentSource]:
        lines = await asyncio.shield(self._listing(ref))
        return [IncidentSource.model_validate_json(x) for x in lines[offset: offset + limit]]

    def _listing(self, ref: str) -> asyncio.Future[list[str]]:
        """The lines of the listing at ``ref``, fetched and split once however many slices ask at the same time.

        Blobs are content-addressed, so a listing never changes under its ref: the last few are kept split,
        instead of fetching a 100k-line listing again for every slice and page. The split is sized by the batch
        (80 MB for 1M incidents), so it runs off the loop. What is kept is the load itself, not only its result:
        slices starting together each fetched and split the same listing, holding one copy each. A load that
        failed is forgotten, so the next page read tries again."""
        load = self._listings.get(ref)
        if load is None or (load.done() and (load.cancelled() or load.exception() is not None)):
            load = self._listings[ref] = asyncio.ensure_future(self._split_listing(ref))
            while len(self._listings) > KEPT_LISTINGS:
                self._listings.pop(next(iter(self._listings)))
        return load

    async def _split_listing(self, ref: str) -> list[str]:
        raw = await self.s.store.blobs.get(ref)
        return await in_thread(_split, raw, budget_s=SPLIT_BUDGET_S, what="splitting the incident listing")

    @implements(contract.load_prior_attempt)
    async def load_prior_attempt(self, ref: str) -> PriorAttempt:
        return PriorAttempt.model_validate_json(await self.s.store.blobs.get(ref))

    @implements(contract.list_incident_sources)
    async def list_incident_sources(self, path: str) -> SourceListing:
        """List once, park the list as a blob: a batch of 100k files must not ride in workflow history.
        Listing and encoding are sized by the batch (1M JSONL lines held the worker's loop for 4.5 s,
        stalling every slice's heartbeats and model calls), so both run off the loop, within a budget."""
        try:
            payload, total = await with_heartbeats(in_thread(_encoded_listing, path, budget_s=LISTING_BUDGET_S,
                                                             what="listing the incidents"))
        except (ValueError, BudgetExceeded) as exc:
            raise ApplicationError(str(exc), type="SourceListingError", non_retryable=True) from None
        return SourceListing(ref=await with_heartbeats(self.s.store.blobs.put(payload)), total=total)

    @implements(contract.read_incident_sources)
    async def read_incident_sources(self, page: SourcePageInput) -> list[IncidentSource]:
        try:
            return await with_heartbeats(self._sources(page.ref, page.offset, page.limit))
        except BlobNotFound as exc:
            raise ApplicationError(str(exc), type="ListingLost", non_retryable=True) from None


def _encoded_listing(path: str) -> tuple[bytes, int]:
    """The sources at `path` as the parked listing (one JSON line each) and their count."""
    sources = list_sources(path)
    return "\n".join(s.model_dump_json(exclude_none=True) for s in sources).encode(), len(sources)


def _split(raw: bytes) -> list[str]:
    return raw.decode().split("\n")


def _workflow_id() -> str:
    """The calling workflow's id: these activities are only ever scheduled by a workflow."""
    workflow_id = activity.info().workflow_id
    assert workflow_id is not None, "scheduled outside a workflow"
    return workflow_id


def _content_error(label: str, exc: Exception) -> ApplicationError:
    """An incident whose content made the pipeline fail (a bug, or a bound not yet checked where the
    incident enters): this incident fails with the reason, and nothing retries it."""
    activity.logger.warning("incident %s failed on its content", label, exc_info=exc)
    return ApplicationError(f"{label}: could not be learned ({type(exc).__name__}: {str(exc)[:300]})",
                            type=INCIDENT_REJECTED, non_retryable=True)


def _previous_outcomes(details: Sequence[Any]) -> list[ItemOutcome]:
    """Outcomes heartbeated by an earlier attempt; anything unreadable just means starting over."""
    if not details:
        return []
    try:
        return SliceHeartbeat.model_validate(details[-1]).outcomes
    except (ValueError, TypeError):
        return []
