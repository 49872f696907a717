"""Inputs and outputs of the accumulate/populate workflows and their activities.

Kept free of service imports so workflows can use them inside Temporal's deterministic sandbox.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from bamboo.extraction.base import ExtractionResult
from bamboo.models.graph import KnowledgeGraph, PassageDraft, WriteStats


class IncidentSource(BaseModel):
    """Where one incident lives: a JSON file, or one line of a JSONL file (1-based)."""

    path: str
    line: int | None = None
    offset: int | None = Field(default=None, description="byte offset of the line in a JSONL file: a reader seeks "
                               "to it instead of scanning the file up to its line, once per incident")

    def label(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class LoadIncidentInput(BaseModel):
    """The incident to load and the scope (batch) it belongs to: an incident the scope already stored
    from this source is recognised before its file is read again."""

    source: IncidentSource
    store_scope: str | None = None


class LoadedIncident(BaseModel):
    incident_ref: str
    incident_id: str
    graph_id: str
    task_id: int | None = None
    status: str | None = None
    hints: dict = Field(default_factory=dict)
    already_stored: bool = Field(default=False, description="the scope stored this source before (a lane that "
                                 "crashed or waited out an outage before reporting it): nothing left to do")


class ExtractInput(BaseModel):
    incident_ref: str
    attempt: int = 0
    feedback: str = ""
    exploration: dict | None = None


class ReviewInput(BaseModel):
    graph: KnowledgeGraph
    task_fields: dict = Field(default_factory=dict)
    source: str = Field(default="", description="resolution_record | email | none (from the extraction)")


class ReviewOutcome(BaseModel):
    approved: bool
    issues: list[str] = Field(default_factory=list)
    feedback: str = ""
    hard_failures: list[str] = Field(default_factory=list)
    reviewer_error: str | None = None
    human_input_needed: list[str] = Field(default_factory=list)
    llm_reviewed: bool = True

    @property
    def score(self) -> int:
        """Fewer problems is better; used to keep the best attempt."""
        return len(self.hard_failures) * 10 + len(self.issues)


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


class AccumulateInput(BaseModel):
    source: IncidentSource
    batch_id: str | None = None
    store_scope: str | None = Field(default=None, description="the batch's scope in the store (set by the batch)")
    max_review_retries: int = 2
    prior_ref: str | None = Field(default=None, description="blob of a `PriorAttempt`: the populate lane's extraction "
                                  "and review of this incident, used as attempt 0 instead of asking the model again")


class PriorAttempt(BaseModel):
    """A populate lane's first extraction and review of an incident it escalated."""

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


class SourceListing(BaseModel):
    ref: str
    total: int


class SourcePageInput(BaseModel):
    ref: str
    offset: int
    limit: int


class FailedItem(BaseModel):
    index: int
    source: str
    reason: str


class ItemOutcome(BaseModel):
    """What became of one incident in a populate lane.

    stored: learned and written. failed: the input cannot become an incident (retrying will not
    help). escalated: anything off the happy path (a review rejection, a reviewer or model error,
    a request for human input) — the batch hands it to its own AccumulateIncident workflow, which
    has the explorer, the review retries and Temporal's per-step retries."""

    index: int
    status: Literal["stored", "failed", "escalated"]
    reason: str | None = None
    source: IncidentSource | None = Field(default=None, description="kept for failed and escalated items only")
    prior_ref: str | None = Field(default=None, description="escalated after a review: blob of the lane's `PriorAttempt`")


class ChunkInput(BaseModel):
    """A slice of the batch's source listing for one `accumulate_chunk` activity."""

    batch_id: str
    listing_ref: str
    offset: int
    count: int
    parallelism: int = Field(ge=1)
    claims: bool = Field(
        default=False,
        description="the lane asks its batch for the next slice (claim_slice) while its queue runs low and reports "
                    "every finished slice (slice_done), instead of ending with its one slice")
    store_scope: str | None = Field(default=None, description="the batch's scope in the store (set by the batch)")


class SliceClaim(BaseModel):
    """A lane asking its batch for more work; `lane` is the offset of the lane's first slice."""

    lane: int


class SliceGrant(BaseModel):
    """The slice a lane is to learn next; a count of 0 means no more (paused, cancelled, the run's
    share is out, or escalated incidents wait for the lane's slots)."""

    offset: int
    count: int = Field(ge=0)


class LaneHolding(BaseModel):
    """What a retried lane asks its batch: the slices it holds unreported, and whether it had already
    given its LLM slots back (then learning again would go over the batch's concurrency)."""

    slices: list[SliceGrant]
    released: bool = False


class SliceReport(BaseModel):
    """A lane's outcomes for one finished slice."""

    lane: int
    offset: int
    outcomes: list[ItemOutcome]


class LaneProgress(BaseModel):
    """What a running lane has settled so far and not yet reported slice by slice (cumulative over its
    attempts), signalled to its batch so the progress query moves while a slice runs, not only when
    it ends. `slices_reported` tells a late report from a current one."""

    offset: int
    stored: int = 0
    failed: int = 0
    escalated: int = 0
    slices_reported: int = 0


class ChunkResult(BaseModel):
    outcomes: list[ItemOutcome]
    groups: int = Field(default=0, description="store transactions the chunk committed")


PER_INCIDENT_ITEMS_PER_RUN = 200
LANE_ITEMS_PER_RUN = 5000


class PopulateInput(BaseModel):
    batch_id: str
    path: str
    concurrency: int = Field(default=8, ge=1, le=256)
    continue_as_new_every: int | None = Field(
        default=None, ge=1,
        description="incidents per workflow run before continue-as-new; default by mode: 200 with one workflow per "
                    "incident (each adds its child's events to the history), 5000 in lanes (a lane activity adds a "
                    "handful of events per slice, and every continue-as-new first drains the running lanes)")
    max_history_events: int = Field(
        default=20_000, ge=1,
        description="in lanes, a run also continues as new once its history passes this many events, whatever "
                    "continue_as_new_every says (Temporal terminates a workflow at 51,200 events)")
    max_review_retries: int = 2
    one_workflow_per_incident: bool = Field(
        default=False,
        description="run every incident as its own AccumulateIncident child (every step visible in Temporal Web, "
                    "several times the orchestration cost) instead of in lanes that escalate only the hard ones")
    chunk_size: int | None = Field(default=None, ge=1, le=1024,
                                   description="incidents per lane activity; default 8 x the lane's parallelism")
    # carried across continue-as-new
    listing: SourceListing | None = None
    cursor: int = 0
    done: int = 0
    failed: list[FailedItem] = Field(default_factory=list)
    failed_count: int = 0
    paused: bool = False
    generation: int = 0
    listing_error: str | None = None
    escalated: int = 0
    pending_escalations: list[ItemOutcome] = Field(default_factory=list)

    def items_per_run(self) -> int:
        if self.continue_as_new_every is not None:
            return self.continue_as_new_every
        return PER_INCIDENT_ITEMS_PER_RUN if self.one_workflow_per_incident else LANE_ITEMS_PER_RUN


class PopulateProgress(BaseModel):
    batch_id: str
    total: int | None
    done: int
    failed: int
    running: int
    pending: int | None
    paused: bool
    cancelled: bool
    finished: bool
    generation: int
    recent_failures: list[FailedItem] = Field(default_factory=list)
    listing_error: str | None = None
    escalated: int = 0


class PopulateResult(BaseModel):
    batch_id: str
    total: int
    done: int
    failed: int
    cancelled: bool
    failures: list[FailedItem]
    escalated: int = Field(default=0, description="incidents that needed their own AccumulateIncident workflow")
