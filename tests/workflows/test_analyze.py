"""AnalyzeTask with its evidence, model, procedure and sandbox activities faked: what the workflow makes of
their answers and failures, read from its result."""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from bamboo.analysis import contract
from bamboo.analysis.contract import (
    AnalysisResult, AnalyzeInput, CandidateCause, Clue, DiagnoseInput, Diagnosis, EmailDraft, EmailInput, Evidence,
    ExplorationInput, ExplorationPlan, MatchedClue, ProcedurePlan, ProcedurePlanInput, ProcedureStep, TaskClues,
)
from bamboo.contract import implements
from bamboo.sandbox import contract as sandbox
from bamboo.sandbox.contract import ExecuteCodeInput, SandboxRunResult
from tests.workflows.conftest import workers
from workflows.analyze import AnalyzeTask

TASK = 40112233
RANKED_FIRST = "Site offline"
MODEL_CAUSE = "Memory request too low"
KILL_STEP = ProcedureStep(name="proc__kill_task", disposition="suggestion", state_changing_tools=["kill_task"],
                          has_code=True, reason="calls a state-changing tool")


class FakeAnalysis:
    """Evidence with two ranked causes; a model that answers (or fails for good); a stored procedure that
    would change state; a sandbox that records every run it is asked for."""

    def __init__(self, *, model_down: bool = False) -> None:
        self.model_down = model_down
        self.diagnosed: list[DiagnoseInput] = []
        self.planned_for: list[str] = []
        self.emailed: list[EmailInput] = []
        self.sandbox_runs: list[ExecuteCodeInput] = []

    @implements(contract.gather_evidence)
    async def gather_evidence(self, inp: AnalyzeInput) -> Evidence:
        clues = TaskClues(task_id=TASK, status="broken",
                          clues=[Clue(type="symptom", kind="Symptom", name="SiteUnavailable")])
        linked = MatchedClue(type="symptom", name="SiteUnavailable", edge_frequency=6, share=0.8)
        ranked = [CandidateCause(name=RANKED_FIRST, breadth=2, support=1.6, frequency=6, confidence=0.8,
                                 resolutions=["set the queue online"], matched=[linked]),
                  CandidateCause(name=MODEL_CAUSE, breadth=1, support=0.4, frequency=2, confidence=0.5)]
        return Evidence(clues=clues, candidates=ranked)

    @implements(contract.diagnose)
    async def diagnose(self, inp: DiagnoseInput) -> Diagnosis:
        self.diagnosed.append(inp)
        if self.model_down:
            raise ApplicationError("the model endpoint refused the request", non_retryable=True)
        return Diagnosis(root_cause=MODEL_CAUSE, confidence=0.9, source="llm", cause_source="model_override",
                         explanation="the pilot code names memory")

    @implements(contract.plan_exploration)
    async def plan_exploration(self, inp: ExplorationInput) -> ExplorationPlan:
        return ExplorationPlan(status="nothing_to_do", reason="the fake has nothing to explore")

    @implements(contract.procedure_plan)
    async def procedure_plan(self, inp: ProcedurePlanInput) -> ProcedurePlan:
        self.planned_for.append(inp.cause)
        return ProcedurePlan(cause=inp.cause, steps=[KILL_STEP])

    @implements(contract.email)
    async def email(self, inp: EmailInput) -> EmailDraft:
        self.emailed.append(inp)
        return EmailDraft(subject=f"task {inp.task_id}: {inp.diagnosis.root_cause}", body="Hello.")

    @implements(sandbox.execute_code)
    async def execute_code(self, inp: ExecuteCodeInput) -> SandboxRunResult:
        self.sandbox_runs.append(inp)
        return SandboxRunResult(run_id=inp.run_id, status="ok", isolation="bwrap")

    def activities(self) -> list:
        return [self.gather_evidence, self.diagnose, self.plan_exploration, self.procedure_plan, self.email,
                self.execute_code]


async def analyze(client: Client, fake: FakeAnalysis, **fields) -> AnalysisResult:
    async with workers(client, [AnalyzeTask], fake.activities()) as queue:
        inp = AnalyzeInput(task_data={"jediTaskID": TASK, "status": "broken"}, **fields)
        return await client.execute_workflow(AnalyzeTask.run, inp, id=f"analyze-test-{uuid.uuid4().hex[:8]}",
                                             task_queue=queue)


async def test_the_models_diagnosis_drives_the_plan_and_a_state_changing_step_is_only_suggested(temporal: Client) -> None:
    fake = FakeAnalysis()
    result = await analyze(temporal, fake)
    assert (result.root_cause, result.diagnosis_source, result.task_id) == (MODEL_CAUSE, "llm", TASK)
    assert fake.planned_for == [MODEL_CAUSE]
    assert [e.diagnosis.root_cause for e in fake.emailed] == [MODEL_CAUSE]
    assert result.email_subject == f"task {TASK}: {MODEL_CAUSE}"
    # A procedure that would change state is an operator's suggestion: nothing reached the sandbox.
    assert fake.sandbox_runs == []
    assert [s.startswith(KILL_STEP.name) for s in result.suggestions] == [True]
    assert [s.status for s in result.steps if s.step == "llm_diagnosis"] == ["ran"]


async def test_a_model_that_fails_for_good_leaves_the_rankings_answer(temporal: Client) -> None:
    fake = FakeAnalysis(model_down=True)
    result = await analyze(temporal, fake, exploration_threshold=0.0)
    assert len(fake.diagnosed) == 1  # a non-retryable failure is not asked again
    assert (result.root_cause, result.diagnosis_source, result.cause_source) == (RANKED_FIRST, "ranking", "ranking")
    assert result.resolution == "set the queue online"  # the ranked cause's stored resolution
    failed = [s for s in result.steps if s.step == "llm_diagnosis"]
    assert [s.status for s in failed] == ["failed"]
    assert "the model endpoint refused the request" in failed[0].detail
    # The rest of the analysis still ran on the ranking's cause.
    assert fake.planned_for == [RANKED_FIRST]
    assert fake.sandbox_runs == []
