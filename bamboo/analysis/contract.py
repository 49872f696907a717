# mypy: disable-error-code="empty-body"
# (activity stubs are declarations: their body is `...` by design; the worker registers the implementation)
"""The analysis contract: the AnalyzeTask and BatchAnalyze workflows' names, their activities (stubs the
workflows call by reference, with named presets) and every input and output of the pipeline.

Free of service imports so the workflows can use it inside Temporal's deterministic sandbox
(docs/architecture.md). `AnalysisResult` holds the diagnosis (root cause,
confidence, resolution, explanation, supporting evidence, capability gaps, email), plus the evidence
trail an operator needs to judge it.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic.json_schema import SkipJsonSchema
from temporalio.common import RetryPolicy

from bamboo.batch.contract import BatchProgress, BatchResult, BatchState, FailedItem
# Re-exported: an analysis client steers its batch with the names every batch answers to.
from bamboo.batch.contract import BATCH_SIGNALS as BATCH_SIGNALS, PROGRESS_QUERY as PROGRESS_QUERY
from bamboo.contract import LLM_CALL, STORE_CALL, ActivityOptions, activity_stub, llm_call_within
from bamboo.models.spend import Spend

from bamboo.models.incident import TaskId, task_problem

ClueType = Literal["symptom", "status", "task_feature", "task_context", "component", "environment"]
NOVEL = "novel"
OperatorVerdict = Literal["confirmed", "corrected"]


class Clue(BaseModel):
    """One fact read from the task, named exactly as accumulation stores its node."""

    type: ClueType
    kind: str = Field(description="graph node kind (Symptom, Task_Feature, Component, Environment)")
    name: str
    text: str = Field(default="", description="raw text worth embedding (the error dialog), if any")


class TaskClues(BaseModel):
    task_id: TaskId | None = None
    status: str | None = None
    clues: list[Clue] = Field(default_factory=list)
    prose: dict[str, str] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list)

    def of_type(self, *types: str) -> list[Clue]:
        return [c for c in self.clues if c.type in types]


class MatchedClue(BaseModel):
    type: ClueType
    name: str
    edge_frequency: int
    share: float = Field(description="fraction of this clue's stored evidence that points at this cause")
    weight: float = Field(default=1.0, description="how specific the clue is in the store: 0 on every stored "
                                                   "incident, 1 on at most half of them")


class CandidateCause(BaseModel):
    name: str
    description: str = ""
    breadth: int = Field(description="distinct clue types that point at this cause")
    support: float = Field(description="sum over matched clues of the share of their evidence for this cause")
    frequency: int = Field(description="incidents that stored this cause, plus operator confirmations")
    confidence: float
    confirmations: int = 0
    resolution_success_rate: float | None = Field(
        default=None, description="of the analyses that proposed this cause and got feedback, how many were right")
    matched: list[MatchedClue] = Field(default_factory=list)
    resolutions: list[str] = Field(default_factory=list)
    resolution_incidents: dict[str, list[str]] = Field(
        default_factory=dict, description="stored resolution -> the incidents (graph ids) that recorded it")
    score: float = Field(default=0.0, description="share of the candidates' total support (a ranking confidence)")
    likelier: bool = Field(default=False, description="put ahead of a look-alike with more support, as it makes "
                                                      "the task's clues likelier (bamboo/analysis/look_alikes.py)")
    wording: float | None = Field(default=None, description="how well its stored error dialogs match the task's "
                                                            "wording, when read (bamboo/analysis/wording.py)")
    worded: bool = Field(default=False, description="put first as its stored error dialogs match the task's wording "
                                                    "far better than the ranking's first choice's")


class NovelLead(BaseModel):
    symptom: str
    description: str = ""
    reason: str


class SimilarIncident(BaseModel):
    graph_id: str
    score: float
    matched_section: str
    matched_text: str
    summary: str = ""


class Evidence(BaseModel):
    """Everything read from the knowledge store for one task (read-only)."""

    clues: TaskClues
    candidates: list[CandidateCause] = Field(default_factory=list)
    novel: list[NovelLead] = Field(default_factory=list)
    similar: list[SimilarIncident] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    operator_cause: str | None = Field(
        default=None, description="the cause an operator confirmed or corrected to for this very task")
    operator_verdict: OperatorVerdict | None = Field(
        default=None, description="confirmed: the operator agreed with the analysis; corrected: named another cause")


# What became of the model's second opinion: pending (the first answer, from the ranking alone), consulted,
# too_slow (it did not answer within the deadline, so the ranking's answer stands and later model steps
# were skipped), failed (its step failed for good), budget_spent (the run's model budget was spent).
ModelStatus = Literal["pending", "consulted", "too_slow", "failed", "budget_spent"]
DEFAULT_MODEL_DEADLINE_S = 300.0


class CapabilityGap(BaseModel):
    investigation: str
    suggested_tool_capability: str


CauseSource = Literal["ranking", "model_override", "operator"]
ModelVerdict = Literal["agreed", "override_accepted", "override_refused"]


class ModelProposal(BaseModel):
    """What the model answered, and whether it decided the cause (the judgement is the project's, not the model's)."""

    cause: str
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""
    cited_clues: list[str] = Field(default_factory=list)
    explanation: str = ""
    verdict: ModelVerdict
    verdict_reason: str = ""


class Diagnosis(BaseModel):
    root_cause: str
    is_novel: bool = False
    confidence: float = Field(ge=0.0, le=1.0)
    resolution: str = ""
    explanation: str = ""
    supporting_evidence: list[str] = Field(default_factory=list)
    source: Literal["llm", "ranking"] = Field(
        default="llm", description="llm: the model was consulted; ranking: its step failed and was not")
    note: str = ""
    explanation_source: Literal["llm", "ranking"] = Field(
        default="ranking", description="llm: the model's explanation passed the grounding checks")
    cause_source: CauseSource = Field(default="ranking", description="who chose the cause")
    confidence_basis: str = Field(default="", description="what the confidence measures")
    ranking_confidence: float = Field(default=0.0, ge=0.0, le=1.0,
                                      description="the ranking's margin for its own top candidate")
    spend: SkipJsonSchema[Spend | None] = None  # set by the activity from the client's meter, never by the model
    resolution_incidents: list[str] = Field(default_factory=list,
                                            description="incidents whose stored resolution is shown")
    model: ModelProposal | None = None


class ExplorationInput(BaseModel):
    evidence: Evidence
    diagnosis: Diagnosis


class ExplorationPlan(BaseModel):
    """Generated read-only investigation code and the allow-set the trust policy grants it (automatic phase)."""

    status: Literal["run", "refused", "nothing_to_do", "no_tool_call"]
    code: str = ""
    allowed_tools: list[str] = Field(default_factory=list)
    capability_gaps: list[CapabilityGap] = Field(default_factory=list)
    reason: str = ""
    tools: list[str] = Field(default_factory=list, description="the tools the code calls, as the policy read it")
    spend: SkipJsonSchema[Spend | None] = None  # set by the activity from the client's meter, never by the model


class DiagnoseInput(BaseModel):
    evidence: Evidence
    extra_context: dict[str, Any] = Field(default_factory=dict, description="findings of an exploratory investigation")


class StepReport(BaseModel):
    """What a conditional step did — or, explicitly, why it did not run."""

    step: str
    status: Literal["ran", "not_needed", "unavailable", "failed", "budget_spent", "too_slow"]
    detail: str = ""


class ProcedurePlanInput(BaseModel):
    cause: str


class ProcedureStep(BaseModel):
    name: str
    description: str = ""
    order: int = 0
    has_code: bool = False
    state_changing_tools: list[str] = Field(default_factory=list)
    disposition: Literal["replayable", "suggestion", "manual_step"]
    code: str = Field(default="", description="stored code, for replayable steps only")
    allowed_tools: list[str] = Field(default_factory=list, description="the replay's allow-set (policy decision)")
    reason: str = ""


class ProcedurePlan(BaseModel):
    cause: str
    steps: list[ProcedureStep] = Field(default_factory=list)


class EmailInput(BaseModel):
    task_id: int | None = None
    task_name: str = ""
    diagnosis: Diagnosis
    suggestions: list[str] = Field(default_factory=list)
    use_model: bool = Field(default=True, description="False once the run's model budget is spent: the template")


class EmailDraft(BaseModel):
    subject: str
    body: str
    source: Literal["llm", "template"] = "llm"
    note: str = ""
    spend: SkipJsonSchema[Spend | None] = None  # set by the activity from the client's meter, never by the model


class AnalyzeInput(BaseModel):
    """A task to diagnose: its fields inline, or a JSON file a worker can read (task or incident file)."""

    task_data: dict[str, Any] | None = None
    source_path: str | None = None
    batch_id: str | None = None
    exploration_threshold: float = Field(default=0.5, ge=0.0, le=1.0,
                                         description="below this confidence an exploratory investigation runs")
    sandbox_wait_s: float = Field(default=60.0, gt=0,
                                  description="how long the exploration waits for a worker on the sandbox queue")
    model_deadline_s: float = Field(
        default=DEFAULT_MODEL_DEADLINE_S, gt=0,
        description="how long each model step may take, attempts included, before the ranking's answer stands "
                    "without it: the starter's BAMBOO_LLM_TIMEOUT_S (a workflow cannot read settings)")

    @field_validator("task_data")
    @classmethod
    def _task_id_fits(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Refused here, at the boundary: a task id Temporal's Int search attribute cannot hold makes the
        analysis workflow's task fail and retry forever, so `bamboo analyze` would never return; a status
        names the workflow and a clue (`task_problem`, the one check of a task wherever it enters)."""
        problem = task_problem(v or {})
        if problem:
            raise ValueError(f"task_data.{problem}")
        return v


class AnalysisResult(BaseModel):
    task_id: int | None
    status: str | None
    root_cause: str
    is_novel: bool
    confidence: float
    resolution: str
    explanation: str
    supporting_evidence: list[str] = Field(default_factory=list)
    capability_gaps: list[CapabilityGap] = Field(default_factory=list)
    email_subject: str = ""
    email_content: str = ""
    candidates: list[CandidateCause] = Field(default_factory=list)
    novel_leads: list[NovelLead] = Field(default_factory=list)
    similar_incidents: list[SimilarIncident] = Field(default_factory=list)
    procedure_plan: list[ProcedureStep] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list, description="state-changing steps for an operator to run")
    steps: list[StepReport] = Field(default_factory=list)
    diagnosis_source: str = "llm"
    notes: list[str] = Field(default_factory=list)
    cause_source: CauseSource = Field(default="ranking", description="ranking, or a model override with its reason")
    override_reason: str = Field(default="", description="the model's reason, when its override was accepted")
    confidence_basis: str = ""
    ranking_confidence: float = 0.0
    resolution_source: Literal["store", "none"] = Field(
        default="none", description="store: the resolution recorded for the chosen cause; none: nothing stored")
    resolution_incidents: list[str] = Field(default_factory=list)
    model_proposal: ModelProposal | None = None
    spend: Spend = Field(default_factory=Spend, description="this analysis's model calls, tokens and USD")
    explanation_source: Literal["llm", "ranking"] = "ranking"
    email_source: Literal["llm", "template"] = "template"
    answer: Literal["first", "final"] = Field(
        default="final", description="first: the ranking's answer, shown while the model's second opinion runs")
    model_status: ModelStatus = Field(default="consulted", description="what became of the model's second opinion")
    model_deadline_s: float = Field(default=DEFAULT_MODEL_DEADLINE_S, description="each model step's deadline")
    operator_verdict: OperatorVerdict | None = Field(
        default=None, description="set when an operator's verdict on this task decided the cause")


class Feedback(BaseModel):
    task_id: TaskId
    verdict: Literal["correct", "wrong"]
    cause: str = Field(min_length=3, description="the true cause (confirmed or corrected)")
    proposed_cause: str | None = Field(default=None, description="what the analysis proposed, if known")
    operator: str | None = None
    clues: list[str] = Field(default_factory=list, max_length=500,
                             description="the task's clues as 'Kind/name' (clue_key); with them the verdict "
                                         "counts as evidence for similar tasks, not only this one")


class FeedbackReceipt(BaseModel):
    task_id: int
    verdict: str
    cause: str
    matched_known_cause: bool
    cause_frequency: int
    cause_confirmations: int
    clues: int = Field(default=0, description="clues of the task the verdict now counts for")


# ------------------------------------------------------------------ batch
class TaskSource(BaseModel):
    path: str
    task_id: TaskId | None
    status: str | None

    def workflow_id(self) -> str:
        return analyze_workflow_id(self.task_id, self.status, self.path)

    def result_file_name(self) -> str:
        return result_file_name(self.workflow_id())


def analyze_workflow_id(task_id: int | None, status: str | None, path: str | None = None) -> str:
    """`analyze:<task>:<status>`: a duplicate start of the same analysis is found, not repeated."""
    if task_id is None:
        import hashlib

        return f"analyze:file-{hashlib.sha256((path or '').encode()).hexdigest()[:12]}:{status or 'unknown'}"
    return f"analyze:{task_id}:{status or 'unknown'}"


def result_file_name(workflow_id: str) -> str:
    """The file one analysis's result is written to in a batch's results directory (``bamboo analyze-batch --out``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", workflow_id) + ".json"


BATCH_PREFIX = "analyze-batch:"


def batch_workflow_id(batch_id: str) -> str:
    """A batch analysis's workflow id: starting the same batch twice re-attaches instead of starting it again."""
    return BATCH_PREFIX + batch_id


class TaskListing(BaseModel):
    ref: str
    total: int
    skipped: int = 0


class TaskListingInput(BaseModel):
    path: str
    results_dir: str | None = Field(default=None, description="a task with a result file here is not analysed again")


class TaskPageInput(BaseModel):
    ref: str
    offset: int
    limit: int


# A batch of analyses is steered and followed like every batch (bamboo/batch/contract.py): its failed item
# and its progress are every batch's, under the names analysis clients know.
BatchFailure = FailedItem
BatchAnalyzeProgress = BatchProgress


class BatchAnalyzeInput(BatchState):
    path: str
    results_dir: str | None = Field(default=None, description=(
        "the batch's results directory (--out), read by the worker as it reads `path`: a task with a result there "
        "was analysed already and is not redone. (The ids of those tasks rode in this input, and at about 75,000 of "
        "them it passed Temporal's 2 MiB payload limit: the batch could be neither started nor re-attached.)"))
    concurrency: int = Field(default=4, ge=1, le=256)
    exploration_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    model_deadline_s: float = Field(default=DEFAULT_MODEL_DEADLINE_S, gt=0,
                                    description="each analysis's model deadline: the starter's BAMBOO_LLM_TIMEOUT_S")
    continue_as_new_every: int = Field(default=200, ge=1)
    # carried across continue-as-new, besides what every batch carries (BatchState)
    listing: TaskListing | None = None
    spend: Spend = Field(default_factory=Spend, description="the analyses' model spend so far")


class BatchAnalyzeResult(BatchResult):
    """`skipped` counts tasks already analysed (named by the starter), not redone."""

    spend: Spend = Field(default_factory=Spend, description="the batch's model calls, tokens and USD")
    budget_spent: bool = Field(default=False, description="stopped starting analyses: the batch budget is spent")


# ---------------------------------------------------------------------------------------------- names
# Compatibility data: renaming any of these orphans running analyses (docs/versioning.md).
ANALYZE_WORKFLOW = "AnalyzeTask"
BATCH_ANALYZE_WORKFLOW = "BatchAnalyze"
# The batch's signals and progress query are every batch's (bamboo/batch/contract.py, imported above).
# The analysis's answer so far: None until the evidence is read, then the ranking's (answer "first"),
# then the final one; a client shows the first while the model's second opinion runs.
RESULT_QUERY = "result"
# ApplicationError type of a task file or task data that cannot be analysed (not retried).
TASK_REJECTED = "TaskRejected"


# ---------------------------------------------------------------------------------------------- activities
@activity_stub("analysis_gather_evidence")
async def gather_evidence(inp: AnalyzeInput) -> Evidence:
    """Read the task, extract its clues, rank the known causes and retrieve similar incidents."""
    ...


@activity_stub("analysis_diagnose")
async def diagnose(inp: DiagnoseInput) -> Diagnosis:
    """The model's diagnosis from the evidence (held to the ranking unless it cites a defining clue)."""
    ...


@activity_stub("analysis_plan_exploration")
async def plan_exploration(inp: ExplorationInput) -> ExplorationPlan:
    """Read-only code to gather more evidence when the diagnosis is not confident enough."""
    ...


@activity_stub("analysis_procedure_plan")
async def procedure_plan(inp: ProcedurePlanInput) -> ProcedurePlan:
    """The stored procedures of the diagnosed cause: which may be replayed, which are manual."""
    ...


@activity_stub("analysis_email")
async def email(inp: EmailInput) -> EmailDraft:
    """The draft message to the task's owner."""
    ...


@activity_stub("analysis_list_tasks")
async def list_tasks(inp: TaskListingInput) -> TaskListing:
    """List a batch's task files once and park the list as a blob (a claim check, not history)."""
    ...


@activity_stub("analysis_read_tasks")
async def read_tasks(page: TaskPageInput) -> list[TaskSource]:
    """One page of the parked task list."""
    ...


EVIDENCE_STEP = STORE_CALL.but(start_to_close=timedelta(minutes=2), heartbeat=LLM_CALL.heartbeat)
PROCEDURE_STEP = STORE_CALL.but(heartbeat=LLM_CALL.heartbeat)
MODEL_STEP = LLM_CALL


def model_step(deadline_s: float) -> ActivityOptions:
    """A model step of an analysis: held to the starter's deadline (AnalyzeInput.model_deadline_s)."""
    return llm_call_within(timedelta(seconds=deadline_s))
LIST_STEP = STORE_CALL.but(start_to_close=timedelta(minutes=5), retry=RetryPolicy(maximum_attempts=5))
PAGE_STEP = STORE_CALL.but(start_to_close=timedelta(seconds=20), retry=RetryPolicy(maximum_attempts=10))
