# mypy: disable-error-code="empty-body"
# (activity stubs are declarations: their body is `...` by design; the worker registers the implementation)
"""The populate and accumulate contract: what the workflows, the activities, the worker and the clients
(CLI, console, benchmarks) share, so nothing about a Temporal hop is spelled twice.

- Workflows: `AccumulateIncident` learns one incident (every step its own activity, visible in
  Temporal Web); `PopulateBatch` learns a directory or JSONL file in slices and escalates the hard
  incidents to their own `AccumulateIncident`. Both run on `Queue.MAIN`.
- Activities: declared below as stubs with their names (compatibility data, pinned by a test) and
  called by reference with the named option presets; `activities/accumulate.py` implements them.
- Messages: the batch's `pause` / `resume` / `cancel` signals and its `progress` query, those of every
  batch (`bamboo/batch/contract.py`, re-exported here for the populate clients).
- Models: every input and output of the above.

Pure by design (pydantic models and temporalio's definition decorators, no I/O), so the workflows
import it inside Temporal's deterministic sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.common import RetryPolicy

from bamboo.analysis.contract import ExplorationPlan
from bamboo.batch.contract import BatchProgress, BatchResult, BatchState
# Re-exported: a populate client steers its batch with the names every batch answers to.
from bamboo.batch.contract import CANCEL_SIGNAL as CANCEL_SIGNAL, PAUSE_SIGNAL as PAUSE_SIGNAL
from bamboo.batch.contract import PROGRESS_QUERY as PROGRESS_QUERY, RESUME_SIGNAL as RESUME_SIGNAL
from bamboo.batch.contract import FailedItem as FailedItem
from bamboo.contract import HEARTBEAT, LLM_CALL, STORE_RETRY, ActivityOptions, Queue, activity_stub
from bamboo.extraction.base import ExtractionResult
from bamboo.models.graph import KnowledgeGraph, PassageDraft, WriteStats
from bamboo.models.incident import IncidentSource
from bamboo.models.review import ReviewOutcome

# ---------------------------------------------------------------- names (compatibility data)
ACCUMULATE_WORKFLOW = "AccumulateIncident"
POPULATE_WORKFLOW = "PopulateBatch"
WORKFLOW_QUEUE = Queue.MAIN


def batch_workflow_id(batch_id: str) -> str:
    """A batch's workflow id: starting the same batch twice re-attaches instead of starting it again."""
    return f"populate:{batch_id}"


def escalation_workflow_id(batch_id: str, index: int) -> str:
    """The AccumulateIncident child of a batch's incident: a replayed or restarted batch never starts one twice."""
    return f"accumulate:{batch_id}:{index}"


def slice_activity_id(offset: int) -> str:
    """A slice activity's id in its batch run: where a client finds the slice's heartbeats."""
    return f"slice-{offset}"


class LoadIncidentInput(BaseModel):
    """The incident to load and the scope (batch) it belongs to: an incident the scope already stored
    from this source is recognised before its file is read again, and one whose content a stored
    graph was learned from is not learned again unless `relearn` says so."""

    source: IncidentSource
    store_scope: str | None = None
    relearn: bool = False


class LoadedIncident(BaseModel):
    incident_ref: str
    incident_id: str
    graph_id: str
    task_id: int | None = None
    status: str | None = None
    hints: dict[str, Any] = Field(default_factory=dict)
    already_stored: bool = Field(default=False, description="the scope stored this source before (a slice that "
                                 "crashed or waited out an outage before reporting it): nothing left to do")
    already_learned: bool = Field(default=False, description="a stored graph was learned from exactly this content "
                                  "(an earlier batch): skipped, no model call")
    content_hash: str | None = Field(default=None, description="fingerprint of the incident's file, stored with "
                                     "its graph so a later batch can skip it")


class ExtractInput(BaseModel):
    incident_ref: str
    attempt: int = 0
    feedback: str = ""
    exploration: dict[str, Any] | None = None


class ReviewInput(BaseModel):
    graph: KnowledgeGraph
    task_fields: dict[str, Any] = Field(default_factory=dict)
    source: str = Field(default="", description="resolution_record | email | none (from the extraction)")


class ReviewExplorationInput(BaseModel):
    """What the explorer must settle after the first rejection: the reviewer's open issues."""

    task_id: int | None = None
    status: str | None = None
    issues: list[str]


class StoreInput(BaseModel):
    graph_id: str
    incident_id: str
    task_id: int | None = None
    graph: KnowledgeGraph
    passages: list[PassageDraft]
    summary: str
    warnings: list[str] = Field(default_factory=list)
    human_requests: list[str] = Field(default_factory=list)
    scope: str | None = Field(default=None, description="who stores it (the batch's scope, or the workflow): the "
                              "audit row's subject, and where one graph id belongs to one source")
    source: str | None = Field(default=None, description="the incident's file (path or path:line)")
    content_hash: str | None = Field(default=None, description="fingerprint of that file's incident (see "
                                     "`bamboo.ingest.content_hash`): a later batch skips the incident while it matches")


class AccumulateInput(BaseModel):
    source: IncidentSource
    batch_id: str | None = None
    store_scope: str | None = Field(default=None, description="the batch's scope in the store (set by the batch)")
    max_review_retries: int = 2
    prior_ref: str | None = Field(default=None, description="blob of a `PriorAttempt`: the populate slice's "
                                  "extraction and review of this incident, used as attempt 0 instead of asking the "
                                  "model again")
    relearn: bool = Field(default=False, description="learn it even if a stored graph was learned from this content")


class PriorAttempt(BaseModel):
    """A populate slice's first extraction and review of an incident it escalated."""

    extraction: ExtractionResult
    review: ReviewOutcome


class AccumulateResult(BaseModel):
    source: str
    graph_id: str
    incident_id: str
    stored: WriteStats
    attempts: int
    approved: bool
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    exploration: str
    reviewer_error: str | None = None
    human_requests: list[str] = Field(default_factory=list)
    skipped: bool = Field(default=False, description="already learned from this content: nothing was asked or stored")


class SourceListing(BaseModel):
    ref: str
    total: int


class SourcePageInput(BaseModel):
    ref: str
    offset: int
    limit: int


class ItemOutcome(BaseModel):
    """What became of one incident in a populate slice.

    stored: learned and written. skipped: a stored graph was learned from exactly this content, so
    nothing was asked or written. failed: the input cannot become an incident (retrying will not
    help). escalated: anything off the happy path (a review rejection, a reviewer or model error,
    a request for human input) — the batch hands it to its own AccumulateIncident workflow, which
    has the explorer, the review retries and Temporal's per-step retries."""

    index: int
    status: Literal["stored", "skipped", "failed", "escalated"]
    reason: str | None = None
    source: IncidentSource | None = Field(default=None, description="kept for failed and escalated items only")
    prior_ref: str | None = Field(default=None, description="escalated after a review: blob of the slice's `PriorAttempt`")


class SliceInput(BaseModel):
    """A slice of the batch's source listing for one `learn_slice` activity."""

    batch_id: str
    listing_ref: str
    offset: int
    count: int = Field(ge=1)
    parallelism: int = Field(ge=1)
    store_scope: str | None = Field(default=None, description="the batch's scope in the store (set by the batch)")
    relearn: bool = Field(default=False, description="learn incidents a stored graph was already learned from")


class SliceHeartbeat(BaseModel):
    """What a running slice has settled: a retried attempt resumes from it, and `bamboo populate`
    adds it to the batch's progress while the slice runs (Temporal keeps the last one with the
    pending activity)."""

    outcomes: list[ItemOutcome] = Field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)


class SliceResult(BaseModel):
    """A slice's one report, when it ends: an outcome for every incident of the slice."""

    outcomes: list[ItemOutcome]
    groups: int = Field(default=0, description="store transactions the slice committed")


PER_INCIDENT_ITEMS_PER_RUN = 200
SLICE_ITEMS_PER_RUN = 5000


class PopulateInput(BatchState):
    path: str
    continue_as_new_every: int | None = Field(
        default=None, ge=1,
        description="incidents per workflow run before continue-as-new; default by mode: 200 with one workflow per "
                    "incident (each adds its child's events to the history), 5000 in slices (a slice activity adds "
                    "a handful of events, and every continue-as-new first drains the running slices)")
    max_history_events: int = Field(
        default=20_000, ge=1,
        description="in slices, a run also continues as new once its history passes this many events, whatever "
                    "continue_as_new_every says (escalations add events per incident; Temporal terminates a "
                    "workflow at 51,200 events)")
    max_review_retries: int = 2
    one_workflow_per_incident: bool = Field(
        default=False,
        description="run every incident as its own AccumulateIncident child (every step visible in Temporal Web, "
                    "several times the orchestration cost) instead of in slices that escalate only the hard ones")
    chunk_size: int | None = Field(default=None, ge=1, le=1024,
                                   description="incidents per slice activity; default 8 x a slice's parallelism")
    relearn: bool = Field(default=False, description="learn every incident again, also those a stored graph was "
                          "learned from (by default they are skipped before any model call)")
    # carried across continue-as-new, besides what every batch carries (BatchState)
    listing: SourceListing | None = None
    listing_error: str | None = None
    escalated: int = 0
    slices_done: int = 0
    pending_escalations: list[ItemOutcome] = Field(default_factory=list)

    def items_per_run(self) -> int:
        if self.continue_as_new_every is not None:
            return self.continue_as_new_every
        return PER_INCIDENT_ITEMS_PER_RUN if self.one_workflow_per_incident else SLICE_ITEMS_PER_RUN


class PopulateProgress(BatchProgress):
    """The batch progress, with the slices: `skipped` counts incidents already learned from the same content
    (no model call, nothing stored)."""

    listing_error: str | None = None
    escalated: int = 0
    slices_done: int = Field(default=0, description="slice activities that ended in this batch (all its runs)")
    running_slices: list[int] = Field(default_factory=list, description="offsets of the slice activities running "
                                      "now; a client adds their last heartbeats (see `live_progress`)")

    @property
    def slices_running(self) -> int:
        return len(self.running_slices)


class PopulateResult(BatchResult):
    """`skipped` counts incidents already learned from the same content: no model call, nothing stored."""

    escalated: int = Field(default=0, description="incidents that needed their own AccumulateIncident workflow")


# ---------------------------------------------------------------- activity option presets
@dataclass(frozen=True)
class LocalActivityOptions:
    """A named set of options for local activities (no task queue: they run in the workflow's worker)."""

    start_to_close: timedelta
    schedule_to_close: timedelta
    retry: RetryPolicy

    def options(self) -> dict[str, Any]:
        return {"start_to_close_timeout": self.start_to_close, "schedule_to_close_timeout": self.schedule_to_close,
                "retry_policy": self.retry}


# Store-bound steps wait out a database outage. Activities wait inside, heartbeating, for up to the
# worker's BAMBOO_STORE_OUTAGE_WAIT_S (an hour by default), so their start-to-close must outlast it;
# a dead worker is still noticed within the heartbeat timeout. Local activities cannot heartbeat:
# they are retried every few seconds for as long instead.
STORE_OUTAGE = timedelta(hours=1)
STORE_ACTIVITY_TIMEOUT = STORE_OUTAGE + timedelta(minutes=10)

# Reading one file (or a parked blob) is quick, and skipping the task-queue round trip is a large
# share of a small incident's orchestration cost.
LOCAL_STORE_READ = LocalActivityOptions(
    start_to_close=timedelta(seconds=30), schedule_to_close=STORE_OUTAGE,
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                      maximum_interval=timedelta(seconds=10), maximum_attempts=0))
LLM_STEP = LLM_CALL
# Fail-open: a reviewer that cannot answer after a few tries must not block accumulation.
REVIEW_STEP = LLM_CALL.but(retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3))
STORE_STEP = ActivityOptions(task_queue=Queue.STORE, start_to_close=STORE_ACTIVITY_TIMEOUT, heartbeat=HEARTBEAT,
                             retry=STORE_RETRY)
LISTING = ActivityOptions(task_queue=Queue.STORE, start_to_close=timedelta(minutes=5),
                          retry=RetryPolicy(maximum_attempts=5))
# Waits out a database outage (heartbeating): a page that cannot be read would fail the batch.
LISTING_PAGE = STORE_STEP.but(retry=RetryPolicy(maximum_attempts=10))
# A slice talks to the model for minutes; its heartbeats notice a dead worker within seconds, and a
# retried attempt resumes from them.
SLICE = ActivityOptions(task_queue=Queue.LLM, start_to_close=timedelta(hours=6), heartbeat=HEARTBEAT,
                        retry=STORE_RETRY)


# ---------------------------------------------------------------- activity stubs
@activity_stub("load_incident")
async def load_incident(inp: LoadIncidentInput) -> LoadedIncident:
    """Read and park one incident (local activity); recognises what the batch stored or learned before."""
    ...


@activity_stub("load_prior_attempt")
async def load_prior_attempt(ref: str) -> PriorAttempt:
    """The slice's extraction and review of an escalated incident (local activity)."""
    ...


@activity_stub("extract_incident")
async def extract_incident(inp: ExtractInput) -> ExtractionResult:
    ...


@activity_stub("review_extraction")
async def review_extraction(inp: ReviewInput) -> ReviewOutcome:
    ...


@activity_stub("plan_review_exploration")
async def plan_review_exploration(inp: ReviewExplorationInput) -> ExplorationPlan:
    ...


@activity_stub("store_graph")
async def store_graph(inp: StoreInput) -> WriteStats:
    ...


@activity_stub("list_incident_sources")
async def list_incident_sources(path: str) -> SourceListing:
    ...


@activity_stub("read_incident_sources")
async def read_incident_sources(page: SourcePageInput) -> list[IncidentSource]:
    ...


@activity_stub("learn_slice")
async def learn_slice(inp: SliceInput) -> SliceResult:
    """One slice of a batch, learned with bounded parallelism and group commits (queue `Queue.LLM`)."""
    ...
