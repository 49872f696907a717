"""Side effects of analysis: read the task, read the knowledge store, ask the LLM. Nothing here writes
the knowledge store; the batch listing is the one blob it parks (claim check), like populate's.

Thin by design: unpack a pydantic input, call `bamboo.analysis`, return a pydantic result.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.analysis.models import (
    AnalyzeInput, Diagnosis, DiagnoseInput, EmailDraft, EmailInput, Evidence, ExplorationInput, ExplorationPlan,
    ProcedurePlan, ProcedurePlanInput,
    TaskListing, TaskListingInput, TaskPageInput, TaskSource,
)
from bamboo.analysis.exploration import ExplorationError, plan_exploration
from bamboo.analysis.service import AnalysisService
from bamboo.analysis.task_files import TaskFileError, list_task_files, read_task_file, task_fields
from bamboo.llm.errors import LLMError, to_application_error
from bamboo.services import Services

TASK_REJECTED = "TaskRejected"


class AnalyzeActivities:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.analysis = AnalysisService(services)

    @activity.defn(name="analysis_gather_evidence")
    async def gather_evidence(self, inp: AnalyzeInput) -> Evidence:
        try:
            if inp.task_data is not None:
                task = task_fields(inp.task_data, "task data")
            elif inp.source_path:
                task = read_task_file(inp.source_path)
            else:
                raise TaskFileError("neither task data nor a task file was given")
        except TaskFileError as exc:
            raise ApplicationError(str(exc), type=TASK_REJECTED, non_retryable=True) from None
        try:
            return await with_heartbeats(self.analysis.gather_evidence(task))
        except LLMError as exc:  # embeddings fail as LLMError too
            raise to_application_error(exc) from exc

    @activity.defn(name="analysis_diagnose")
    async def diagnose(self, inp: DiagnoseInput) -> Diagnosis:
        try:
            return await with_heartbeats(self.analysis.diagnose(inp))
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name="analysis_plan_exploration")
    async def plan_exploration(self, inp: ExplorationInput) -> ExplorationPlan:
        try:
            return await with_heartbeats(plan_exploration(self.s.llm, inp.evidence, inp.diagnosis))
        except ExplorationError as exc:
            raise ApplicationError(str(exc), type="ExplorationError", non_retryable=True) from None
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name="analysis_procedure_plan")
    async def procedure_plan(self, inp: ProcedurePlanInput) -> ProcedurePlan:
        return await with_heartbeats(self.analysis.procedure_plan(inp.cause))

    @activity.defn(name="analysis_email")
    async def email(self, inp: EmailInput) -> EmailDraft:
        return await with_heartbeats(self.analysis.email(inp))

    @activity.defn(name="analysis_list_tasks")
    async def list_tasks(self, inp: TaskListingInput) -> TaskListing:
        """List once, park the list as a blob: a batch of many files must not ride in workflow history."""
        try:
            sources = list_task_files(inp.path)
        except TaskFileError as exc:
            raise ApplicationError(str(exc), type="TaskListingError", non_retryable=True) from None
        skip = set(inp.skip_workflow_ids)
        kept = [s for s in sources if s.workflow_id() not in skip]
        payload = "\n".join(s.model_dump_json() for s in kept).encode()
        return TaskListing(ref=await self.s.store.blobs.put(payload), total=len(kept),
                           skipped=len(sources) - len(kept))

    @activity.defn(name="analysis_read_tasks")
    async def read_tasks(self, page: TaskPageInput) -> list[TaskSource]:
        raw = (await self.s.store.blobs.get(page.ref)).decode()
        lines = [x for x in raw.split("\n") if x]
        return [TaskSource.model_validate_json(x) for x in lines[page.offset: page.offset + page.limit]]
