"""Side effects of analysis: read the task, read the knowledge store, ask the LLM. Nothing here writes
the knowledge store; the batch listing is the one blob it parks (claim check), like populate's.

Thin by design: unpack a pydantic input, call `bamboo.analysis`, return a pydantic result.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.analysis import contract
from bamboo.contract import implements
from bamboo.analysis.contract import (
    AnalyzeInput, Diagnosis, DiagnoseInput, EmailDraft, EmailInput, Evidence, ExplorationInput, ExplorationPlan,
    ProcedurePlan, ProcedurePlanInput, TASK_REJECTED,
    TaskListing, TaskListingInput, TaskPageInput, TaskSource,
)
from bamboo.analysis.exploration import ExplorationError, plan_exploration
from bamboo.analysis.service import AnalysisService
from bamboo.analysis.task_files import TaskFileError, list_task_files, read_task_file, task_fields
from activities.llm_errors import to_application_error
from bamboo.llm.errors import LLMError
from bamboo.llm.client import LLMClient
from bamboo.llm.metering import SpendMeter
from bamboo.offload import BudgetExceeded, in_thread
from bamboo.store.blobs import PostgresBlobStore
from bamboo.tools.model import ToolSpec

# Reading one task file (at most 8 MiB) in the offload pool; only a filesystem that stopped answering exceeds it.
READ_BUDGET_S = 120.0
# Listing reads every file of the batch to name its analysis; within the listing step's 5 minutes.
LISTING_BUDGET_S = 240.0
# Splitting a parked task listing in the offload pool; within a page read's 20 seconds.
SPLIT_BUDGET_S = 15.0
KEPT_LISTINGS = 4  # split listings kept, as populate keeps them


class AnalyzeActivities:
    """Built by the worker (``worker/wiring.py``) with the analysis service, the model and the blob store."""

    def __init__(self, *, analysis: AnalysisService, llm: LLMClient, blobs: PostgresBlobStore,
                 meter: SpendMeter, catalogue: Callable[[], Awaitable[list[ToolSpec]]] | None = None) -> None:
        """``catalogue``: the worker's live tools for the exploration (built-in ones only when None)."""
        self.analysis = analysis
        self.catalogue = catalogue
        self.llm = llm
        self.blobs = blobs
        self.meter = meter
        self._listings: dict[str, list[str]] = {}  # task listing blob ref -> its non-empty lines, oldest first

    async def _metered(self, work):
        """A model step: its token usage priced into the result's ``spend``."""
        return await self.meter.step(with_heartbeats(work))

    @implements(contract.gather_evidence)
    async def gather_evidence(self, inp: AnalyzeInput) -> Evidence:
        try:
            # Off the loop: a task file is up to 8 MiB of JSON to parse and check.
            if inp.task_data is not None:
                task = await in_thread(task_fields, inp.task_data, "task data", budget_s=READ_BUDGET_S,
                                       what="checking the task")
            elif inp.source_path:
                task = await in_thread(read_task_file, inp.source_path, budget_s=READ_BUDGET_S,
                                       what="reading the task file")
            else:
                raise TaskFileError("neither task data nor a task file was given")
        except (TaskFileError, BudgetExceeded) as exc:
            raise ApplicationError(str(exc), type=TASK_REJECTED, non_retryable=True) from None
        try:
            return await with_heartbeats(self.analysis.gather_evidence(task))
        except LLMError as exc:  # embeddings fail as LLMError too
            raise to_application_error(exc) from exc

    @implements(contract.diagnose)
    async def diagnose(self, inp: DiagnoseInput) -> Diagnosis:
        try:
            return await self._metered(self.analysis.diagnose(inp))
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @implements(contract.plan_exploration)
    async def plan_exploration(self, inp: ExplorationInput) -> ExplorationPlan:
        try:
            specs = await self.catalogue() if self.catalogue is not None else None
            return await self._metered(plan_exploration(self.llm, inp.evidence, inp.diagnosis, specs))
        except ExplorationError as exc:
            raise ApplicationError(str(exc), type="ExplorationError", non_retryable=True) from None
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @implements(contract.procedure_plan)
    async def procedure_plan(self, inp: ProcedurePlanInput) -> ProcedurePlan:
        return await with_heartbeats(self.analysis.procedure_plan(inp.cause))

    @implements(contract.email)
    async def email(self, inp: EmailInput) -> EmailDraft:
        return await self._metered(self.analysis.email(inp))

    @implements(contract.list_tasks)
    async def list_tasks(self, inp: TaskListingInput) -> TaskListing:
        """List once, park the list as a blob: a batch of many files must not ride in workflow history."""
        try:
            sources, kept = await with_heartbeats(in_thread(_tasks_to_analyse, inp.path, inp.results_dir,
                                                            budget_s=LISTING_BUDGET_S, what="listing the tasks"))
        except (TaskFileError, BudgetExceeded) as exc:
            raise ApplicationError(str(exc), type="TaskListingError", non_retryable=True) from None
        payload = "\n".join(s.model_dump_json() for s in kept).encode()
        return TaskListing(ref=await self.blobs.put(payload), total=len(kept), skipped=sources - len(kept))

    @implements(contract.read_tasks)
    async def read_tasks(self, page: TaskPageInput) -> list[TaskSource]:
        """One page of the parked listing. Blobs are content-addressed, so a listing never changes under its
        ref: the last few stay split, instead of fetching and splitting the whole listing again for every
        page (a batch's pages then cost N² on the loop). The split is sized by the batch, so it runs off the loop."""
        lines = self._listings.get(page.ref)
        if lines is None:
            raw = await self.blobs.get(page.ref)
            lines = await in_thread(_listed_lines, raw, budget_s=SPLIT_BUDGET_S, what="splitting the task listing")
            self._listings[page.ref] = lines
            while len(self._listings) > KEPT_LISTINGS:
                self._listings.pop(next(iter(self._listings)))
        return [TaskSource.model_validate_json(x) for x in lines[page.offset: page.offset + page.limit]]


def _tasks_to_analyse(path: str, results_dir: str | None) -> tuple[int, list[TaskSource]]:
    """How many tasks ``path`` holds, and those without a result in ``results_dir`` (all of them without one)."""
    sources = list_task_files(path)
    if results_dir is None:
        return len(sources), sources
    done = set(os.listdir(results_dir)) if os.path.isdir(results_dir) else set()
    return len(sources), [s for s in sources if s.result_file_name() not in done]


def _listed_lines(raw: bytes) -> list[str]:
    """The listing's lines, an empty listing (no task left to analyse) holding none."""
    return [x for x in raw.decode().split("\n") if x]
