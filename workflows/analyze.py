"""AnalyzeTask: diagnose a problem task from the knowledge graph, durably.

AnalyzeTask (docs/architecture.md): clues → graph ranking → vector retrieval
(one read-only activity) → LLM diagnosis → (confidence below the threshold) exploratory read-only
investigation → (known cause) procedure replay with state-changing procedures skipped and listed as
suggestions → email draft. A step that cannot run says so in `steps` — never a silent no-op.
The workflow id is `analyze:<task>:<status>`, so a duplicate start finds the running analysis.

The ranking's answer comes first: as soon as the evidence is read, the `result` query holds the ranked
diagnosis, its stored resolution and the deterministic draft (answer "first"), so a client shows it in
seconds whatever the model's speed. The model's second opinion and prose then refine it, each step held to
the starter's deadline (`AnalyzeInput.model_deadline_s`, its BAMBOO_LLM_TIMEOUT_S); a model that misses it
is not asked again in this run, the ranking's answer stands and the result says the model was too slow.

The batch of many analyses is `workflows/batch_analyze.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError, TimeoutError, TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from bamboo.analysis.contract import (
        AnalysisResult, AnalyzeInput,
        CapabilityGap, Diagnosis, DiagnoseInput, EmailDraft, EmailInput, Evidence, ExplorationInput, ModelStatus,
        ProcedurePlan, ProcedureStep,
        ProcedurePlanInput, StepReport,
    )
    from bamboo.analysis.ranked import ranking_diagnosis, template_draft
    from bamboo.investigation.code import with_task_preamble
    from workflows.batching import innermost_reason
    from bamboo.analysis import contract
    from bamboo.contract import BATCH, KIND, SPEND_USD, TASK_ID, Kind
    from bamboo.models.spend import BudgetSpent, Spend, over_budget
    from workflows.sandbox_steps import execute_code, findings
    from bamboo.sandbox.contract import SandboxRunResult



SANDBOX_UNAVAILABLE = (
    "no worker polls the sandbox queue (execute_code), so the generated read-only investigation did not run and "
    "the diagnosis was not re-synthesised"
)


def diagnosis_detail(diagnosis: Diagnosis) -> str:
    """What the model's answer did to the ranking's diagnosis, in one line."""
    proposal = diagnosis.model
    if proposal is None:
        return diagnosis.note or f"source {diagnosis.source}"
    if proposal.verdict == "agreed":
        return f"the model agreed with the ranking's top candidate ({diagnosis.root_cause})"
    if proposal.verdict == "override_accepted":
        return f"the model overrode the ranking with {proposal.cause}: {proposal.verdict_reason}"
    return (f"the model proposed {proposal.cause} at confidence {proposal.confidence:.2f}; kept the ranking's top "
            f"candidate because {proposal.verdict_reason}")


def override_reason(diagnosis: Diagnosis) -> str:
    """The model's stated reason, when it is the model's choice the result shows."""
    if diagnosis.cause_source == "model_override" and diagnosis.model is not None:
        return diagnosis.model.reason
    return ""


class ModelTooSlow(Exception):
    """The model missed a step's deadline in this run: later model steps are skipped, not tried again."""


def analysis_result(evidence: Evidence, diagnosis: Diagnosis, draft: EmailDraft, *, gaps: list[CapabilityGap],
                    plan: list[ProcedureStep], suggestions: list[str], steps: list[StepReport], notes: list[str],
                    spend: Spend, model_status: ModelStatus, deadline_s: float, first: bool = False) -> AnalysisResult:
    """The result from what the run has so far: the first answer (ranking only) and the final one alike."""
    return AnalysisResult(
        task_id=evidence.clues.task_id, status=evidence.clues.status, root_cause=diagnosis.root_cause,
        is_novel=diagnosis.is_novel, confidence=diagnosis.confidence, resolution=diagnosis.resolution,
        explanation=diagnosis.explanation, supporting_evidence=diagnosis.supporting_evidence,
        capability_gaps=gaps, email_subject=draft.subject, email_content=draft.body,
        candidates=evidence.candidates, novel_leads=evidence.novel, similar_incidents=evidence.similar,
        procedure_plan=plan, suggestions=suggestions, steps=list(steps),
        diagnosis_source=diagnosis.source, notes=notes, cause_source=diagnosis.cause_source,
        override_reason=override_reason(diagnosis),
        confidence_basis=diagnosis.confidence_basis, ranking_confidence=diagnosis.ranking_confidence,
        resolution_source="store" if diagnosis.resolution else "none",
        resolution_incidents=diagnosis.resolution_incidents, model_proposal=diagnosis.model,
        spend=spend, explanation_source=diagnosis.explanation_source, email_source=draft.source,
        answer="first" if first else "final", model_status=model_status, model_deadline_s=deadline_s,
        operator_verdict=evidence.operator_verdict if diagnosis.cause_source == "operator" else None,
    )


I = TypeVar("I", bound=BaseModel)


class _Metered(Protocol):
    """A model step's result: what it spent, set by the activity from the client's meter."""

    @property
    def spend(self) -> Spend | None: ...


O = TypeVar("O", bound=_Metered)


@workflow.defn(name=contract.ANALYZE_WORKFLOW)
class AnalyzeTask:
    def __init__(self) -> None:
        self._stage = "starting"
        self._steps: list[StepReport] = []
        self._spend = Spend()
        self._deadline_s = contract.DEFAULT_MODEL_DEADLINE_S
        self._model_status: ModelStatus = "pending"
        self._result: AnalysisResult | None = None

    def _budget_spent(self) -> bool:
        return over_budget(self._spend.usd, self._spend.budget.run_usd)

    async def _model(self, step: Callable[[I], Awaitable[O]], arg: I, *, check: bool = True) -> O:
        """A model step held to the run's budget (it arrives with each metered result: a post-call stop-loss)."""
        if check and self._budget_spent():
            raise BudgetSpent(f"the analysis's model budget is spent (${self._spend.usd:.4f} of "
                              f"${self._spend.budget.run_usd:.4f})")
        if self._model_status == "too_slow":
            raise ModelTooSlow(self._too_slow())
        try:
            result: O = await workflow.execute_activity(step, arg, **contract.model_step(self._deadline_s).options())
        except ActivityError as exc:
            if isinstance(exc.cause, TimeoutError):
                self._model_status = "too_slow"
                raise ModelTooSlow(self._too_slow()) from exc
            raise
        if result.spend is not None:
            self._spend = self._spend.plus(result.spend)
            workflow.upsert_search_attributes([SPEND_USD.value_set(self._spend.usd)])
        return result

    def _too_slow(self) -> str:
        return f"the model did not answer within the {self._deadline_s:g} s deadline; skipped"

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return {"stage": self._stage, "steps": [s.model_dump() for s in self._steps]}

    @workflow.query(name=contract.RESULT_QUERY)
    def result(self) -> AnalysisResult | None:
        """The answer so far: None before the evidence is read, then the ranking's, then the final one."""
        return self._result

    @workflow.run
    async def run(self, inp: AnalyzeInput) -> AnalysisResult:
        attrs = [KIND.value_set(Kind.ANALYZE.value)]
        if inp.batch_id:
            attrs.append(BATCH.value_set(inp.batch_id))
        workflow.upsert_search_attributes(attrs)
        steps = self._steps
        notes: list[str] = []
        gaps: list[CapabilityGap] = []
        self._deadline_s = inp.model_deadline_s

        self._stage = "evidence"
        evidence = await workflow.execute_activity(contract.gather_evidence, inp, **contract.EVIDENCE_STEP.options())
        if evidence.clues.task_id is not None:
            workflow.upsert_search_attributes([TASK_ID.value_set(evidence.clues.task_id)])
        notes += evidence.notes
        steps.append(StepReport(step="clues", status="ran", detail=f"{len(evidence.clues.clues)} clues"))
        steps.append(StepReport(step="graph_ranking", status="ran",
                                detail=f"{len(evidence.candidates)} candidate causes, {len(evidence.novel)} novel leads"))
        steps.append(StepReport(step="vector_retrieval", status="ran",
                                detail=f"{len(evidence.similar)} similar incidents"))
        task_name = evidence.clues.prose.get("taskName", "")
        first = ranking_diagnosis(evidence)
        self._result = analysis_result(
            evidence, first, template_draft(EmailInput(task_id=evidence.clues.task_id, task_name=task_name,
                                                       diagnosis=first)),
            gaps=[], plan=[], suggestions=[], steps=steps, notes=list(notes), spend=self._spend,
            model_status="pending", deadline_s=self._deadline_s, first=True)

        self._stage = "diagnosis"
        diagnosis = await self._diagnose(evidence, {}, steps, "llm_diagnosis")

        self._stage = "exploration"
        if diagnosis.confidence < inp.exploration_threshold:
            diagnosis = await self._explore(inp, evidence, diagnosis, steps, gaps)
        else:
            steps.append(StepReport(step="exploratory_investigation", status="not_needed",
                                    detail=f"confidence {diagnosis.confidence:.2f} ≥ {inp.exploration_threshold}"))
        for lead in evidence.novel:
            gaps.append(CapabilityGap(
                investigation=f"find the cause of symptom {lead.symptom} ({lead.reason})",
                suggested_tool_capability="an investigation session (bamboo investigate) whose finalised cause is "
                                          "written back to the knowledge base"))

        self._stage = "procedures"
        plan = ProcedurePlan(cause=diagnosis.root_cause)
        suggestions: list[str] = []
        if diagnosis.is_novel:
            steps.append(StepReport(step="procedure_replay", status="not_needed", detail="no known cause"))
        else:
            plan = await workflow.execute_activity(
                contract.procedure_plan, ProcedurePlanInput(cause=diagnosis.root_cause),
                **contract.PROCEDURE_STEP.options(),
            )
            suggestions = [f"{s.name} (calls state-changing {', '.join(s.state_changing_tools) or 'tools'}; "
                           "run it in an investigation session)" for s in plan.steps if s.disposition == "suggestion"]
            replayable = [s for s in plan.steps if s.disposition == "replayable"]
            manual = [s for s in plan.steps if s.disposition == "manual_step"]
            if replayable:
                diagnosis = await self._replay(inp, evidence, diagnosis, replayable, steps)
            else:
                steps.append(StepReport(
                    step="procedure_replay", status="not_needed",
                    detail=f"no captured read-only code to replay ({len(manual)} manual step(s), "
                           f"{len(suggestions)} state-changing suggestion(s))"))

        self._stage = "email"
        draft = await self._email(EmailInput(task_id=evidence.clues.task_id, task_name=task_name,
                                             diagnosis=diagnosis, suggestions=suggestions,
                                             use_model=not self._budget_spent()))
        steps.append(StepReport(step="email_draft", status="ran", detail=draft.source))
        if draft.note:
            notes.append(draft.note)
        if diagnosis.note:
            notes.append(diagnosis.note)

        self._stage = "done"
        self._result = analysis_result(
            evidence, diagnosis, draft, gaps=gaps, plan=plan.steps, suggestions=suggestions, steps=steps,
            notes=notes, spend=self._spend, model_status=self._model_status, deadline_s=self._deadline_s)
        return self._result

    async def _email(self, inp: EmailInput) -> EmailDraft:
        """The model's draft within the deadline; the template when the model is too slow or its step failed.

        With the budget spent the activity writes the template itself: the owner still gets the diagnosis."""
        try:
            return await self._model(contract.email, inp, check=False)
        except ModelTooSlow as exc:
            return template_draft(inp, note=f"e-mail draft: {exc}; the draft from the stored knowledge is shown")
        except ActivityError as exc:
            return template_draft(inp, note=f"LLM email draft failed ({innermost_reason(exc)}); template used")

    async def _explore(self, inp: AnalyzeInput, evidence: Evidence, diagnosis: Diagnosis, steps: list[StepReport],
                       gaps: list[CapabilityGap]) -> Diagnosis:
        """Generated read-only code → trust policy → sandbox → re-diagnosis; every exit is recorded."""
        why = f"confidence {diagnosis.confidence:.2f} < {inp.exploration_threshold}"
        try:
            plan = await self._model(contract.plan_exploration, ExplorationInput(evidence=evidence, diagnosis=diagnosis))
        except BudgetSpent as exc:
            steps.append(StepReport(step="exploratory_investigation", status="budget_spent", detail=f"{why}; {exc}"))
            return diagnosis
        except ModelTooSlow as exc:
            steps.append(StepReport(step="exploratory_investigation", status="too_slow", detail=f"{why}; {exc}"))
            return diagnosis
        except ActivityError as exc:
            steps.append(StepReport(step="exploratory_investigation", status="failed",
                                    detail=f"{why}; planning failed: {innermost_reason(exc)}"))
            return diagnosis
        gaps.extend(plan.capability_gaps)
        if plan.status != "run":  # refused by the policy, code that calls no tool, or only capability gaps
            steps.append(StepReport(step="exploratory_investigation",
                                    status="not_needed" if plan.status == "nothing_to_do" else "failed",
                                    detail=f"{why}; {plan.status}: {plan.reason}"))
            return diagnosis
        outcome = await self._sandbox("explore", with_task_preamble(plan.code, evidence.clues.task_id),
                                      plan.allowed_tools, inp.sandbox_wait_s)
        if isinstance(outcome, StepReport):
            outcome.detail = f"{why}; {outcome.detail}"
            steps.append(outcome)
            if outcome.status == "unavailable":
                gaps.append(CapabilityGap(
                    investigation="gather job-level evidence for a low-confidence diagnosis",
                    suggested_tool_capability="a worker polling the sandbox queue (execute_code)"))
            return diagnosis
        found = findings(outcome)
        steps.append(StepReport(step="exploratory_investigation", status="ran",
                                detail=f"{why}; sandbox {found['status']}, {len(found['tool_calls'])} tool "
                                       f"call(s) with allow-set {', '.join(plan.allowed_tools)}"))
        return await self._diagnose(evidence, {"exploration": found}, steps, "re_diagnosis", diagnosis)

    async def _replay(self, inp: AnalyzeInput, evidence: Evidence, diagnosis: Diagnosis,
                      replayable: list[ProcedureStep], steps: list[StepReport]) -> Diagnosis:
        """Replay the known cause's read-only procedures; new data triggers one more diagnosis."""
        results = {}
        for i, proc in enumerate(replayable):
            # Stored code works on `task_id`, set by the same preamble investigate runs it with.
            code = with_task_preamble(proc.code, evidence.clues.task_id)
            outcome = await self._sandbox(f"replay-{i}", code, proc.allowed_tools, inp.sandbox_wait_s)
            if isinstance(outcome, StepReport):
                outcome.detail = f"{proc.name}: {outcome.detail}"
                steps.append(outcome)
                if outcome.status == "unavailable":
                    break  # the next replay would wait for the same missing worker
                continue
            results[proc.name] = findings(outcome)
            steps.append(StepReport(step="procedure_replay", status="ran",
                                    detail=f"{proc.name}: sandbox {results[proc.name]['status']}"))
        if not results:
            return diagnosis
        return await self._diagnose(evidence, {"procedures": results}, steps, "re_diagnosis", diagnosis)

    async def _sandbox(self, label: str, code: str, allowed: list[str], wait_s: float) -> SandboxRunResult | StepReport:
        """Run code in the sandbox with exactly `allowed`; a StepReport says why it did not run."""
        step = "exploratory_investigation" if label == "explore" else "procedure_replay"
        try:
            return await execute_code(label, code, allowed, "analyze", wait_s)
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START:
                return StepReport(step=step, status="unavailable", detail=f"{SANDBOX_UNAVAILABLE} (waited {wait_s:g} s)")
            return StepReport(step=step, status="failed", detail=f"sandbox run failed: {innermost_reason(exc)}")

    async def _diagnose(self, evidence: Evidence, extra: dict[str, Any], steps: list[StepReport], step: str,
                        current: Diagnosis | None = None) -> Diagnosis:
        """The LLM's diagnosis; if the LLM step fails for good, the ranking's, with the reason recorded.

        A model too slow for the deadline leaves the diagnosis as it was (`current`, else the ranking's)."""
        try:
            diagnosis = await self._model(contract.diagnose, DiagnoseInput(evidence=evidence, extra_context=extra))
        except BudgetSpent as exc:
            diagnosis = ranking_diagnosis(evidence, note=f"{exc}; used the graph ranking")
            steps.append(StepReport(step=step, status="budget_spent", detail=diagnosis.note))
            self._model_status = "budget_spent"
            return diagnosis
        except ModelTooSlow as exc:
            kept = current or ranking_diagnosis(evidence, note=f"{exc}; the ranking's answer stands")
            steps.append(StepReport(step=step, status="too_slow", detail=str(exc)))
            return kept
        except ActivityError as exc:
            diagnosis = ranking_diagnosis(evidence, note=f"LLM diagnosis failed ({innermost_reason(exc)}); used the graph ranking")
            steps.append(StepReport(step=step, status="failed", detail=diagnosis.note))
            self._model_status = "failed"
            return diagnosis
        steps.append(StepReport(step=step, status="ran", detail=diagnosis_detail(diagnosis)))
        self._model_status = "consulted"
        return diagnosis
