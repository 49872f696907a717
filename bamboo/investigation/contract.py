# mypy: disable-error-code="empty-body"
# (activity stubs are declarations: their body is `...` by design; the worker registers the implementation)
"""The investigation's contract: the workflow's name, messages, queries and search attributes, its activities
(declared as stubs the workflow calls by reference) and everything they exchange: start input, messages,
decisions, views, activity I/O. Pure pydantic and definitions; imported by the workflow, the activities,
the worker and every front end (docs/architecture.md).

Reuse before regenerate: before a turn's code is generated, ``reuse_candidates`` reads the approved procedures
with their provenance and how near each is to the request, and the workflow picks one with
``policy.reuse.choose_procedure``; a fitting one is proposed without a model call (``ReuseView`` says so at
review). ``OperatorMessage.fresh_code`` asks for new code instead.

The workflow keeps its whole state in ``InvestigationState`` so a continue-as-new carries it unchanged,
and every query answers from it without touching any service. Decisions reuse the policy package's
``OperatorDecision`` as is, so the shape a UI sends is the shape the policy validates.

Every operator request is bounded (each text field has a maximum length, identities are canonical) and can
carry a signature (``auth``) over its ``signed_body()``: the approval rules and registry are the
deployment's (``PolicyContext.policy``), never part of what a client sends.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from bamboo.contract import LLM_CALL, STORE_CALL, activity_stub
from bamboo.models.spend import Spend

from policy.approvers import ApprovalRules, DeploymentPolicy
from policy.catalog import ToolCatalog
from policy.code_hazards import Hazard
from policy.decisions import DecisionKind, OperatorDecision
from policy.grants import ProcedureGrant, SessionPolicy
from policy.identity import Identity
from policy.reuse import ParameterValue, ProcedureCandidate, ReuseSettings, TaskFacts
from policy.review_facts import ProcedureView
from policy.signing import Authorization, StatementKind, text_digest

__all__ = ["OperatorDecision", "DecisionKind"]

DEFAULT_MAX_HISTORY_EVENTS = 4000
TRANSCRIPT_KEEP = 200
MAX_MESSAGE_CHARS = 16 * 1024
MAX_NOTE_CHARS = 2000


class SessionStatus(str, Enum):
    ACTIVE = "active"
    FINALIZED = "finalized"
    ABANDONED = "abandoned"
    EXPIRED = "expired"


class InvestigationStart(BaseModel):
    """How a session starts. ``carried`` is set only by continue-as-new."""

    session_id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")
    requester: Identity = Field(description="who opened the session (informational: every request is signed)")
    task_id: int | None = Field(default=None, ge=1, le=2**63 - 1)
    symptom: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)
    cause: str | None = Field(default=None, max_length=300,
                              description="the cause an analysis chose for the task, if any: stored procedures "
                                          "captured for another cause are not reused")
    idle_timeout_s: float = Field(default=7 * 24 * 3600, gt=0)
    max_history_events: int = Field(default=DEFAULT_MAX_HISTORY_EVENTS, ge=50)
    startup_hypothesis: bool = True
    carried: InvestigationState | None = None


class OperatorMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    author: Identity
    force_tool: bool = Field(default=False, description="skip the intent classifier: this is a tool turn")
    fresh_code: bool = Field(default=False, description="write new code: do not propose a stored procedure")
    codify: str | None = Field(
        default=None, max_length=300,
        description="turn a resolved incident's written procedure into code: its number in the session's "
                    "listing or its name; an empty string lists the written procedures that fit the session")
    auth: Authorization | None = None

    def signed_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"text_sha256": text_digest(self.text), "force_tool": self.force_tool}
        if self.fresh_code:  # only when set, so a message signed before the flag existed still verifies
            body["fresh_code"] = True
        if self.codify is not None:  # likewise: what is to be codified is part of what the author signed
            body["codify"] = self.codify
        return body


class RevokeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=200, description="a code hash prefix, a proc__ name, or all")
    actor: Identity
    auth: Authorization | None = None

    def signed_body(self) -> dict[str, Any]:
        return {"target": self.target}


class FinalizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    resolution: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    actor: Identity
    auth: Authorization | None = None

    def signed_body(self) -> dict[str, Any]:
        return {"cause_sha256": text_digest(self.cause), "resolution_sha256": text_digest(self.resolution)}


class AbandonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actor: Identity
    reason: str = Field(default="", max_length=MAX_NOTE_CHARS)
    auth: Authorization | None = None

    def signed_body(self) -> dict[str, Any]:
        return {"reason_sha256": text_digest(self.reason)}


class Ack(BaseModel):
    """What an update answers when it is taken (a refusal is a non-retryable update failure instead)."""

    accepted: bool
    detail: str = ""
    refusal: str | None = None


# ``reply`` and ``hypothesis`` hold the model's words; ``notice`` is the workflow's own word that a turn ended
# without a run (rejected, no code, nothing to codify), a kind of its own so no reply can pass for one.
EntryKind = Literal[
    "operator", "intent", "finding", "code", "review", "decision", "refused_decision", "run", "reply", "policy",
    "revoke", "grant", "hypothesis", "suggestion", "refused_run", "refused_request", "system", "budget", "reuse",
    "written", "codify", "notice",
]


class TranscriptEntry(BaseModel):
    seq: int
    at: datetime
    kind: EntryKind
    text: str
    turn: int | None = None
    actor: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class ReuseView(BaseModel):
    """A reused stored procedure, as its review shows it: which one, where it came from, the values bound into
    it, and (when its body changed under its signature) the diff from the version before. ``summary`` and
    ``matched`` were written by a model or an operator: front ends show them inert, apart from the verdict."""

    procedure: str
    code_hash: str = Field(description="hash of the stored body (the bound code's hash is the review's)")
    parameters: dict[str, ParameterValue] = Field(default_factory=dict)
    incidents: list[str] = Field(default_factory=list)
    frequency: int = 0
    reviewed_by: list[str] = Field(default_factory=list)
    causes: list[str] = Field(default_factory=list)
    last_run_at: datetime | None = None
    last_run_status: str = ""
    versions: int = 1
    diff_from_previous: str = Field(default="", description="unified diff from the version it replaced")
    similarity: float = 0.0
    matched: str = ""
    summary: str = ""

    def provenance_line(self) -> str:
        """The one line a transcript and a review say about it (no model text in it). Its history is the store's
        record, which whoever can write the procedure rows can write: said as the store's, so the code is judged
        as it reads, not by a history that vouches for it."""
        shown = ", ".join(self.incidents[-5:]) or "no recorded incident"
        more = f" and {len(self.incidents) - 5} more" if len(self.incidents) > 5 else ""
        last = (f"last run {self.last_run_at.isoformat(timespec='seconds')} ({self.last_run_status or 'unknown'})"
                if self.last_run_at else "never run here before")
        bound = ", ".join(f"{k}={v!r}" for k, v in self.parameters.items()) or "nothing"
        return (f"reusing procedure {self.procedure}; the store records it captured from {shown}{more} "
                f"({self.frequency} time(s)), {last} (unsigned records: judge the code); bound for this task: {bound}; "
                "no model call wrote this code")


class PendingView(BaseModel):
    """The code waiting for a decision, with everything a reviewer needs to answer it."""

    session_id: str
    turn: int
    code_hash: str
    code: str
    summary: str
    trigger_signals: list[str] = Field(default_factory=list)
    requester: str
    read_only: bool
    tools: list[str] = Field(default_factory=list)
    state_changing: list[str] = Field(default_factory=list)
    reason: str
    detail: str
    choices: list[DecisionKind]
    allow_set: list[str] = Field(default_factory=list)
    grants: list[str] = Field(default_factory=list, description="the durable grants an auto-run answer leaves "
                                                               "(procedure@code_hash); the answer names them")
    grants_withheld: dict[str, datetime] = Field(
        default_factory=dict, description="grants auto-run would leave but a recent revocation withholds, with when "
                                          "each may be granted again (not offered, so not named by the answer)")
    review: str = Field(default="", description="the review's identity (policy.decisions.review_digest): an answer "
                                                "names the one it was given to")
    task_id: int | None = None
    opaque_reasons: list[str] = Field(default_factory=list, description="why the scan cannot vouch for the code")
    hazards: list[Hazard] = Field(default_factory=list, description="what a reader of the code could miss")
    state_changing_lines: dict[str, list[int]] = Field(default_factory=dict)
    procedures: list[ProcedureView] = Field(default_factory=list, description="bodies of the procedures it runs")
    policy_version: str = ""
    rules: ApprovalRules = Field(default_factory=ApprovalRules)
    reuse: ReuseView | None = Field(default=None, description="set when the code is a reused stored procedure")
    codifies: WrittenProcedure | None = Field(
        default=None, description="set when the code was written from a resolved incident's written procedure")
    # What a person deciding needs beside the code: what was asked, when, and the task it acts on.
    request: str = Field(default="", description="the request that led to this code, as its requester wrote it")
    asked_at: datetime | None = Field(default=None, description="when the review started waiting (workflow time)")
    task_status: str = Field(default="", description="the task's status when the session read it; empty if unread")
    task_owner: str = Field(default="", description="the task's owner (PanDA's userName); empty if unread")
    requester_accepted: bool | None = Field(
        default=None, description="for state-changing code the store proposed: whether its requester accepted it for "
                                  "their request yet (no approver's answer counts before); None for other code")

    @property
    def shown_as(self) -> tuple[int, str, str]:
        """What tells one published review from another: turn, code hash and review digest (the same code can be
        reviewed again in its turn with another verdict, and is then shown, and answered, again)."""
        return self.turn, self.code_hash, self.review


class ApprovalsView(BaseModel):
    session_policies: dict[str, SessionPolicy] = Field(default_factory=dict)
    grants: dict[str, ProcedureGrant] = Field(default_factory=dict)


class WrittenProcedure(BaseModel):
    """A resolved incident's written investigation step ("check the scout jobs' maxPSS against ramCount"):
    knowledge, not code. ``/codify`` turns one into code under review; finalize stores that code with these
    incidents and this name as where it came from, so it is written once. Its text was written by a model or
    an operator: front ends show it inert."""

    name: str
    description: str = ""
    cause: str = ""
    incidents: list[str] = Field(default_factory=list)
    codified_as: str | None = Field(default=None, description="the stored code procedure made from it, if any")

    def request(self) -> str:
        """What code generation is asked for: the written step, with where it came from."""
        where = f" (recorded when resolving {', '.join(self.incidents[:5])})" if self.incidents else ""
        cause = f" for the cause {self.cause!r}" if self.cause else ""
        return (f"Turn this written investigation step{cause}{where} into code that uses the tools, "
                f"for this task: {self.description or self.name}")


class CapturedRun(BaseModel):
    """One approved code block that ran: the raw material finalize turns into a Procedure."""

    turn: int
    code: str
    code_hash: str
    tools: list[str]
    summary: str
    trigger_signals: list[str] = Field(default_factory=list)
    result_summary: str = ""
    executed_at: datetime
    approved_by: str
    ok: bool
    request: str = Field(default="", description="the operator's words that led to it (a trigger for reuse)")
    reused: str | None = Field(default=None, description="the stored procedure this run reused, if any")
    codified: WrittenProcedure | None = Field(default=None, description="the written procedure this code implements")


class InvestigationState(BaseModel):
    """The whole durable state; continue-as-new hands it to the next run."""

    status: SessionStatus = SessionStatus.ACTIVE
    turn: int = 0
    seq: int = 0
    audit_seq: int = 0
    transcript: list[TranscriptEntry] = Field(default_factory=list)
    dropped_entries: int = 0
    session_policies: dict[str, SessionPolicy] = Field(default_factory=dict)
    grants: dict[str, ProcedureGrant] = Field(default_factory=dict)
    findings: list[str] = Field(default_factory=list)
    captured: list[CapturedRun] = Field(default_factory=list)
    inbox: list[OperatorMessage] = Field(default_factory=list)
    revokes: list[RevokeRequest] = Field(default_factory=list)
    hypothesis_done: bool = False
    continued: int = 0
    # Nonces of signed requests already used, with their expiry: a replay is refused until it expires anyway.
    seen_nonces: dict[str, datetime] = Field(default_factory=dict)
    spend: Spend = Field(default_factory=Spend, description="the session's model calls so far")
    turn_spend: float = Field(default=0.0, description="USD of the current turn's model calls")
    task_facts: TaskFacts | None = Field(default=None, description="the task's clues and parameters, read once")


class InvestigationResult(BaseModel):
    session_id: str
    status: SessionStatus
    turns: int
    cause: str | None = None
    resolution: str | None = None
    procedures: list[str] = Field(default_factory=list)
    detail: str = ""
    spend: Spend = Field(default_factory=Spend, description="the session's model calls, tokens and USD")


# --- activity I/O --------------------------------------------------------------------------------


class AuditRecord(BaseModel):
    kind: str
    actor: str
    body: dict[str, Any] = Field(default_factory=dict)
    dedup_key: str


class AuditBatch(BaseModel):
    session_id: str
    records: list[AuditRecord]


class PolicyContextInput(BaseModel):
    """What a decision is about. The context carries the stored bodies these reach and no others
    (``policy.procedures.procedure_scope``): the whole store in every context outgrew Temporal's payload limit
    at a few hundred procedures, and every turn failed."""

    session_id: str
    run: str = Field(description="the session's first run (its continue-as-new chain's): it claims the session id")
    codes: list[str] = Field(default_factory=list, description="the code blocks the decision judges")
    procedures: list[str] = Field(default_factory=list,
                                  description="stored procedures the decision names: a reused one, start-up replays")
    predecessor: str | None = Field(default=None, description="the run this one continues, at its start: checked to "
                                                              "be an investigation on our queue")


class PolicyContext(BaseModel):
    """Read fresh by the worker before each decision: the catalogue (raw tools and exposed procedure tools,
    with the current code of every approved procedure the decision reaches: ``PolicyContextInput``), the
    durable grants, the code the grants of those procedures were given on, the deployment's approval policy
    (rules from the worker's settings, keys from its registry), and which run holds the session's id (a
    session id names one session, ever: ``bamboo.store.first_claims``)."""

    session_run: str = Field(description="the run that holds the session id; another run under it decides nothing")
    catalog: ToolCatalog
    stored_procedures: list[str] = Field(default_factory=list, description="every approved procedure's name, sorted")
    grants: dict[str, ProcedureGrant] = Field(default_factory=dict)
    granted_code: dict[str, str] = Field(default_factory=dict,
                                         description="code hash -> code, for the versions in-scope grants were given on")
    exposed_procedures: list[str] = Field(default_factory=list)
    policy: DeploymentPolicy = Field(default_factory=DeploymentPolicy)
    withheld_grants: dict[str, datetime] = Field(
        default_factory=dict, description="grant terms (procedure@code_hash) of the current code that a recent "
                                          "revocation still covers, with when each may be granted again")


class IntentInput(BaseModel):
    session_id: str
    text: str
    recent: list[str] = Field(default_factory=list)


class IntentResult(BaseModel):
    """Whether the operator wants a tool run or is telling us a finding; the classifier's own words."""

    intent: Literal["tool", "finding"]
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""
    spend: SkipJsonSchema[Spend | None] = None  # set by the activity from the client's meter, never by the model


Phase = Literal["automatic", "interactive"]


class CodegenInput(BaseModel):
    session_id: str
    phase: Phase
    request: str
    task_id: int | None = None
    symptom: str | None = None
    recent: list[str] = Field(default_factory=list)


class CodegenResult(BaseModel):
    code: str | None = None
    summary: str = ""
    strategy: str = ""
    trigger_signals: list[str] = Field(default_factory=list)
    reason: str = Field(default="", description="why no code, when code is None")
    reason_by_model: bool = Field(default=False, description="the reason is the model's own words, not the workflow's")
    tools_shown: list[str] = Field(default_factory=list)
    tools_omitted: list[str] = Field(default_factory=list)
    spend: Spend | None = None


class SummaryInput(BaseModel):
    session_id: str
    request: str
    code_summary: str
    status: str
    return_value: dict[str, Any] | None = None
    error: str | None = None
    stdout: str = ""
    denied_calls: list[str] = Field(default_factory=list)
    tools_called: list[str] = Field(default_factory=list, description="allowed calls of this approved run")


class SummaryResult(BaseModel):
    reply: str
    result_summary: str = ""
    spend: SkipJsonSchema[Spend | None] = None  # set by the activity from the client's meter, never by the model


class GrantInput(BaseModel):
    session_id: str
    turn: int
    grants: list[ProcedureGrant]


class RevokeGrantsInput(BaseModel):
    session_id: str
    grants: list[ProcedureGrant] = Field(description="the grants to revoke, as the workflow checked them (signed)")
    whole: list[str] = Field(default_factory=list, description="procedures every answer naming which is revoked")
    every: bool = Field(default=False, description="every answer that grants anything is revoked (/revoke all)")
    actor: str
    dedup_key: str


class FinalizeInput(BaseModel):
    session_id: str
    task_id: int | None = None
    symptom: str | None = None
    outcome: Literal["resolved", "abandoned"]
    cause: str | None = None
    resolution: str | None = None
    actor: str
    findings: list[str] = Field(default_factory=list)
    captured: list[CapturedRun] = Field(default_factory=list)
    clues: list[str] = Field(default_factory=list, description="the task's clues, kept with its procedures")


class FinalizeResult(BaseModel):
    cause: str | None = None
    resolution: str | None = None
    procedures: list[str] = Field(default_factory=list)
    tentative: list[str] = Field(default_factory=list)
    renamed: dict[str, str] = Field(default_factory=dict)


class ReuseQuery(BaseModel):
    session_id: str
    request: str
    task_id: int | None = None
    task_known: bool = Field(default=False, description="the workflow has the task's facts already")


class ReuseCandidates(BaseModel):
    """The approved procedures near enough to the request to be proposed, with how near each is
    (``bamboo.investigation.reuse.nearest``); the choice is the workflow's."""

    candidates: list[ProcedureCandidate] = Field(default_factory=list)
    farther: int = Field(default=0, ge=0, description="approved procedures left out as too far from the request")
    task: TaskFacts | None = None
    settings: ReuseSettings = Field(default_factory=ReuseSettings)
    tool_fit: dict[str, float] = Field(
        default_factory=dict, description="the request's similarity to each offered tool's description")


class WrittenQuery(BaseModel):
    session_id: str
    cause: str | None = Field(default=None, description="the cause the session's analysis chose")
    hint: str = Field(default="", max_length=2000, description="text to match when there is no cause")
    limit: int = Field(default=10, ge=1, le=50)


class WrittenProcedures(BaseModel):
    """The written procedures that fit a session, and how they were found (``cause`` or ``nearest``)."""

    items: list[WrittenProcedure] = Field(default_factory=list)
    basis: Literal["cause", "nearest", "none"] = "none"

    def pick(self, wanted: str) -> WrittenProcedure | None:
        """The item ``wanted`` names: its number in this listing (from 1) or its name, case aside."""
        wanted = wanted.strip()
        if wanted.isdigit():
            index = int(wanted) - 1
            return self.items[index] if 0 <= index < len(self.items) else None
        return next((w for w in self.items if wanted and w.name.casefold() == wanted.casefold()), None)


class ProcedureRun(BaseModel):
    session_id: str
    procedure: str
    code_hash: str
    at: datetime
    status: str


InvestigationStart.model_rebuild()


# ---------------------------------------------------------------------------------------------- names
# Compatibility data: renaming any of these orphans running sessions (docs/versioning.md). The workflow's
# handlers and every client (CLI, console, bot) use these names, never a string of their own.
WORKFLOW_NAME = "Investigation"


class Message(StrEnum):
    """Operator requests. Each is both a signal (durable, needs no worker to be delivered; a refusal lands in
    the transcript) and an update of the same name (the sender gets the verdict, but only while a worker runs)."""

    MESSAGE = "message"
    DECIDE = "decide"
    REVOKE = "revoke"
    FINALIZE = "finalize"
    ABANDON = "abandon"


class Query(StrEnum):
    """Read-only views of a session's state; each needs a worker to answer (``PENDING_MEMO`` does not)."""

    TRANSCRIPT = "transcript"
    PENDING = "pending"
    APPROVALS = "approvals"
    STATUS = "status"
    SPEND = "spend"


# Each message's payload model and the statement kind its signature is made for.
MESSAGE_MODELS: dict[Message, type[BaseModel]] = {
    Message.MESSAGE: OperatorMessage, Message.DECIDE: OperatorDecision, Message.REVOKE: RevokeRequest,
    Message.FINALIZE: FinalizeRequest, Message.ABANDON: AbandonRequest,
}
MESSAGE_KINDS: dict[Message, StatementKind] = {
    Message.MESSAGE: StatementKind.MESSAGE, Message.DECIDE: StatementKind.DECISION,
    Message.REVOKE: StatementKind.REVOKE, Message.FINALIZE: StatementKind.FINALIZE,
    Message.ABANDON: StatementKind.ABANDON,
}
# What each query answers (``transcript`` takes ``since: int``, the others nothing).
QUERY_RESULTS: dict[Query, Any] = {
    Query.TRANSCRIPT: list[TranscriptEntry], Query.PENDING: PendingView | None, Query.APPROVALS: ApprovalsView,
    Query.STATUS: SessionStatus, Query.SPEND: Spend,
}
MESSAGES = tuple(Message)
QUERIES = tuple(Query)

# The memo key under which a waiting review is published (``PendingMemo``), removed once it is answered.
PENDING_MEMO = "bamboo_pending_review"


MEMO_REQUEST_CHARS = 300


class PendingMemo(BaseModel):
    """What a decision must name, readable from the server without a worker (``describe``): a client signs
    its decision against this and sends it as a signal when no worker answers, and the workflow judges it
    through the same admission as any decision when it runs; Temporal Web shows it beside the history. No model
    text: numbers, names, and the request as its requester wrote it (bounded).

    ``run`` is the chain's first run id, which the server picks when the session starts: whoever starts a session
    chooses its memo, a pending review included, but cannot know that id (``client.pending_memo`` checks it)."""

    run: str = ""
    turn: int
    code_hash: str
    requester: str
    read_only: bool
    choices: list[DecisionKind] = Field(default_factory=list)
    task_id: int | None = None
    task_status: str = ""
    task_owner: str = ""
    request: str = Field(default="", max_length=MEMO_REQUEST_CHARS)
    asked_at: datetime | None = None
    grants: list[str] = Field(default_factory=list, description="the durable grants an auto-run answer leaves")
    review: str = Field(default="", description="the review's identity: an answer names it")


def workflow_id(session_id: str) -> str:
    return f"investigate:{session_id}"


# The policy context's refusal of a run continued from one that was not an investigation on our queue.
FOREIGN_PREDECESSOR = "foreign_predecessor"


# ---------------------------------------------------------------------------------------------- activities
@activity_stub("investigation_intent")
async def intent(inp: IntentInput) -> IntentResult:
    """Classify an operator message: a question for tools, a finding to keep, or a remark."""
    ...


@activity_stub("investigation_codegen")
async def codegen(inp: CodegenInput) -> CodegenResult:
    """The model's next code block for the request, written against the live tool catalogue."""
    ...


@activity_stub("investigation_summary")
async def summary(inp: SummaryInput) -> SummaryResult:
    """The model's reading of a run's findings, for the transcript."""
    ...


@activity_stub("investigation_policy_context")
async def policy_context(inp: PolicyContextInput) -> PolicyContext:
    """The live catalogue, grants and the deployment's approval policy the workflow decides with."""
    ...


@activity_stub("investigation_audit")
async def audit(batch: AuditBatch) -> int:
    """Append the workflow's audit rows (deduplicated by key, so a retry writes nothing twice)."""
    ...


@activity_stub("investigation_grant")
async def grant(inp: GrantInput) -> list[str]:
    """Persist durable procedure grants; returns the procedures granted."""
    ...


@activity_stub("investigation_revoke_grants")
async def revoke_grants(inp: RevokeGrantsInput) -> list[str]:
    """Clear durable grants; returns the procedures revoked."""
    ...


@activity_stub("investigation_reuse_candidates")
async def reuse_candidates(inp: ReuseQuery) -> ReuseCandidates:
    """The approved procedures with their provenance and their nearness to the request, and the task's facts."""
    ...


@activity_stub("investigation_written_procedures")
async def written_procedures(inp: WrittenQuery) -> WrittenProcedures:
    """The resolved incidents' written procedures for the session's cause (or nearest its symptom)."""
    ...


@activity_stub("investigation_procedure_ran")
async def procedure_ran(inp: ProcedureRun) -> bool:
    """Note that a reused procedure's current body ran (its last run, shown at its next reuse)."""
    ...


@activity_stub("investigation_finalize")
async def finalize(inp: FinalizeInput) -> FinalizeResult:
    """Store what the session learned: cause, resolution and the procedures approved code defined."""
    ...


# The step presets: model calls on the LLM queue, short store writes, and the longer finalize.
MODEL_STEP = LLM_CALL
STORE_STEP = STORE_CALL.but(start_to_close=timedelta(seconds=30))
POLICY_STEP = STORE_CALL.but(start_to_close=timedelta(seconds=60))
REUSE_STEP = STORE_CALL.but(start_to_close=timedelta(seconds=60))
FINALIZE_STEP = STORE_CALL.but(start_to_close=timedelta(minutes=2), heartbeat=LLM_CALL.heartbeat)
