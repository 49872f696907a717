"""AccumulateIncident: learn one resolved incident into the knowledge graph.

load → extract → review; on the first rejection the explorer would fetch missing facts with
read-only tools (it needs the sandbox, not wired yet, so the workflow records that exploration was
unavailable instead of silently skipping it); after `max_review_retries` rejections the best
attempt is stored with a warning. Storing is idempotent on the incident's graph id, and its audit
row is keyed by the batch's scope and the graph. An incident a populate slice escalated after its
review starts from the slice's extraction and review (attempt 0), so the model is not asked the
same two questions twice; one its batch already stored (the slice stored it, then crashed or waited
out an outage before reporting it) ends at once as stored — never learned again, never failed; one
whose content a stored graph was learned from ends at once as skipped, unless `relearn`.
Store-bound steps wait out a database outage instead of failing the incident.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from bamboo.analysis.contract import ExplorationPlan
    from bamboo.extraction.base import ExtractionResult
    from bamboo.extraction.checks import checked_outcome
    from bamboo.accumulation import contract
    from bamboo.accumulation.contract import (
        LLM_STEP, LOCAL_STORE_READ, REVIEW_STEP, STORE_STEP, AccumulateInput, AccumulateResult, ExtractInput,
        LoadIncidentInput, LoadedIncident, PriorAttempt, ReviewExplorationInput, ReviewInput, StoreInput,
    )
    from bamboo.models.graph import WriteStats
    from bamboo.models.review import ReviewOutcome
    from bamboo.contract import BATCH, KIND, Kind, TASK_ID
    from workflows.sandbox_steps import execute_code, findings


EXPLORATION_UNAVAILABLE = "unavailable: no worker polls the sandbox queue, so the read-only explorer could not run"
SANDBOX_WAIT_S = 60.0
HUMAN_GAP = "no investigation procedure captured"


@workflow.defn(name=contract.ACCUMULATE_WORKFLOW)
class AccumulateIncident:
    def __init__(self) -> None:
        self._stage = "starting"
        self._attempt = 0

    @workflow.query(name=contract.PROGRESS_QUERY)
    def progress(self) -> dict[str, Any]:
        return {"stage": self._stage, "attempt": self._attempt}

    @workflow.run
    async def run(self, inp: AccumulateInput) -> AccumulateResult:
        attrs = [KIND.value_set(Kind.ACCUMULATE.value)]
        if inp.batch_id:
            attrs.append(BATCH.value_set(inp.batch_id))
        workflow.upsert_search_attributes(attrs)

        self._stage = "load"
        # A local activity: reading one file and parking it as a blob is quick, and skipping the
        # task-queue round trip is a large share of a small incident's orchestration cost.
        loaded = await workflow.execute_local_activity(
            contract.load_incident, LoadIncidentInput(source=inp.source, store_scope=inp.store_scope,
                                                      relearn=inp.relearn),
            **LOCAL_STORE_READ.options(),
        )
        if loaded.already_stored:
            self._stage = "done"
            return AccumulateResult(
                source=inp.source.label(), graph_id=loaded.graph_id, incident_id=loaded.incident_id,
                stored=WriteStats(graph_id=loaded.graph_id, nodes=0, edges=0, passages=0), attempts=0, approved=True,
                notes=["already stored by this batch from this file (before a crash or an outage); not learned again"],
                exploration="not needed")
        if loaded.already_learned:
            self._stage = "done"
            return AccumulateResult(
                source=inp.source.label(), graph_id=loaded.graph_id, incident_id=loaded.incident_id,
                stored=WriteStats(graph_id=loaded.graph_id, nodes=0, edges=0, passages=0), attempts=0, approved=True,
                notes=["a stored graph was learned from exactly this content; skipped (relearn to learn it again)"],
                exploration="not needed", skipped=True)
        if loaded.task_id is not None:
            workflow.upsert_search_attributes([TASK_ID.value_set(loaded.task_id)])

        prior: PriorAttempt | None = None
        if inp.prior_ref:
            # Escalated by a populate slice after its review: the slice's extraction and review are
            # attempt 0, so the model is not asked the same two questions again.
            prior = await workflow.execute_local_activity(contract.load_prior_attempt, inp.prior_ref,
                                                          **LOCAL_STORE_READ.options())

        warnings: list[str] = []
        notes: list[str] = []
        exploration_note = "not needed"
        reviewer_error: str | None = None
        best: tuple[ExtractionResult, ReviewOutcome] | None = None
        feedback = ""
        explored: dict[str, Any] | None = None
        attempt = 0
        attempts_made = 0
        while True:
            self._attempt = attempt
            if attempt == 0 and prior is not None:
                extracted, review = prior.extraction, prior.review
                notes.append("attempt 0 is the populate slice's extraction and review")
            else:
                self._stage = f"extract (attempt {attempt})"
                extracted = await workflow.execute_activity(
                    contract.extract_incident, ExtractInput(incident_ref=loaded.incident_ref, attempt=attempt,
                                                            feedback=feedback, exploration=explored),
                    **LLM_STEP.options(),
                )
                self._stage = f"review (attempt {attempt})"
                review = await self._review(extracted, loaded)
            attempts_made += 1
            notes.extend(n for n in extracted.notes if n not in notes)
            reviewer_error = review.reviewer_error or reviewer_error
            if best is None or review.score < best[1].score:
                best = (extracted, review)
            if not review.llm_reviewed and attempt == 0:
                notes.append("reviewed resolution record: hard checks only, LLM gap analysis skipped")
            if review.approved:
                break
            exploration: dict[str, Any] | None = None
            if attempt == 0:
                exploration_note, exploration = await self._explore(loaded, review)
                notes.append(f"review rejected ({'; '.join(review.issues[:3])}); exploration {exploration_note}")
            attempt += 1
            if attempt > inp.max_review_retries:
                warnings.append(
                    f"stored the best of {attempt} attempts after {inp.max_review_retries} review retries; "
                    f"open issues: {'; '.join(best[1].issues[:3])}"
                )
                break
            feedback = review.feedback or "; ".join(review.issues)
            explored = exploration if exploration is not None else explored

        chosen, chosen_review = best
        human = list(chosen_review.human_input_needed)
        if human:
            warnings.append("waiting for human input: " + "; ".join(human))
        if reviewer_error:
            warnings.append(f"reviewer failed and approved fail-open: {reviewer_error[:200]}")

        self._stage = "store"
        stats = await workflow.execute_activity(
            contract.store_graph,
            StoreInput(graph_id=loaded.graph_id, incident_id=loaded.incident_id, task_id=loaded.task_id,
                       graph=chosen.graph, passages=chosen.passages, summary=chosen.summary, warnings=warnings,
                       human_requests=human, scope=inp.store_scope, source=inp.source.label(),
                       content_hash=loaded.content_hash),
            **STORE_STEP.options(),
        )
        self._stage = "done"
        return AccumulateResult(
            source=inp.source.label(), graph_id=loaded.graph_id, incident_id=loaded.incident_id, stored=stats,
            attempts=attempts_made, approved=chosen_review.approved, warnings=warnings, notes=notes,
            exploration=exploration_note, reviewer_error=reviewer_error, human_requests=human,
        )

    async def _explore(self, loaded: LoadedIncident, review: ReviewOutcome) -> tuple[str, dict[str, Any] | None]:
        """The explorer fires once, after the first rejection: read-only code, judged by the policy, run in
        the sandbox. A generation failure fails the incident (the seed's fail-hard contract); a missing
        sandbox worker or a refused plan is recorded and re-extraction proceeds unenriched."""
        self._stage = "explore"
        plan: ExplorationPlan = await workflow.execute_activity(
            contract.plan_review_exploration,
            ReviewExplorationInput(task_id=loaded.task_id, status=loaded.status, issues=review.issues),
            **LLM_STEP.options(),
        )
        gaps = [g.investigation for g in plan.capability_gaps]
        if plan.status != "run":
            return f"{plan.status}: {plan.reason}" + (f"; capability gaps: {gaps}" if gaps else ""), None
        try:
            report = await execute_code("explore", plan.code, plan.allowed_tools, "accumulate", SANDBOX_WAIT_S)
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START:
                return EXPLORATION_UNAVAILABLE, None
            return f"failed: {cause.message if isinstance(cause, FailureError) else exc}"[:300], None
        seen = findings(report)
        return f"ran: {len(seen['tool_calls'])} tool call(s), sandbox {seen['status']}", seen

    async def _review(self, extracted: ExtractionResult, loaded: LoadedIncident) -> ReviewOutcome:
        decided = checked_outcome(extracted.graph, extracted.source)
        if decided is not None:
            return decided  # pure checks settle it: no activity, no LLM
        try:
            return await workflow.execute_activity(
                contract.review_extraction,
                ReviewInput(graph=extracted.graph, task_fields=loaded.hints, source=extracted.source),
                **REVIEW_STEP.options(),
            )
        except ActivityError as exc:
            # Fail-open: a reviewer that cannot answer must not block accumulation; the result says so.
            cause = exc.cause.message if exc.cause is not None and hasattr(exc.cause, "message") else str(exc)
            return ReviewOutcome(approved=True, reviewer_error=f"review activity failed: {cause}"[:500])
